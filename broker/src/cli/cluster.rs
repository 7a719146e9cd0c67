//! `ringlog cluster describe`: the cluster's id, its active controller and its brokers
//! (endpoint, rack, fenced or not) over DescribeCluster, the metadata quorum (leader, high
//! watermark, each voter's log end offset) over DescribeQuorum, as `kafka-cluster` and
//! `kafka-metadata-quorum` show them, and the partitions that are under-replicated (an ISR
//! smaller than the replicas) or offline (no leader) over Metadata, as
//! `kafka-topics --describe --under-replicated-partitions` and
//! `--unavailable-partitions` list them.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;
use client::admin::{self, ClusterDescription, QuorumDescription};
use client::TopicInfo;

use super::Connect;

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Show the cluster id, the active controller and every broker.
    Describe,
}

pub fn run(args: ClusterArgs, out: &mut impl Write) -> Result<()> {
    let mut cluster = args.connect.cluster()?;
    match args.command {
        ClusterCommand::Describe => {
            let description = cluster.run(async |c| admin::describe_cluster(c.any()).await)?;
            let quorum =
                cluster.run(async |c| admin::describe_quorum(c.controller().await?).await)?;
            let topics = cluster.topics()?;
            write_description(out, &description)?;
            if let Some(quorum) = quorum {
                write_quorum(out, &quorum)?;
            }
            write_unhealthy_partitions(out, &topics)
        }
    }
}

/// One line for the cluster, then one per broker.
pub fn write_description(out: &mut impl Write, cluster: &ClusterDescription) -> Result<()> {
    writeln!(
        out,
        "ClusterId: {}\tController: {}\tBrokers: {}",
        cluster.cluster_id,
        cluster.controller_id,
        cluster.brokers.len()
    )?;
    for broker in &cluster.brokers {
        writeln!(
            out,
            "\tBroker: {}\tEndpoint: {}:{}\tRack: {}\tFenced: {}",
            broker.id,
            broker.host,
            broker.port,
            broker.rack.as_deref().unwrap_or("none"),
            broker.fenced
        )?;
    }
    Ok(())
}

/// The quorum's line, then one per voter.
pub fn write_quorum(out: &mut impl Write, quorum: &QuorumDescription) -> Result<()> {
    writeln!(
        out,
        "MetadataQuorum: leader {}\tLeaderEpoch: {}\tHighWatermark: {}",
        quorum.leader_id, quorum.leader_epoch, quorum.high_watermark
    )?;
    for voter in &quorum.voters {
        writeln!(
            out,
            "\tVoter: {}\tLogEndOffset: {}\tLag: {}",
            voter.id,
            voter.log_end_offset,
            quorum.high_watermark - voter.log_end_offset
        )?;
    }
    Ok(())
}

/// The counts of under-replicated and offline partitions, then one line for each.
pub fn write_unhealthy_partitions(out: &mut impl Write, topics: &[TopicInfo]) -> Result<()> {
    let state = |p: &client::PartitionInfo| {
        if p.leader < 0 {
            Some("offline")
        } else if p.isr.len() < p.replicas.len() {
            Some("under-replicated")
        } else {
            None
        }
    };
    let unhealthy: Vec<_> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .filter_map(|(t, p)| Some((t, p, state(p)?)))
        .collect();
    let offline = unhealthy.iter().filter(|(_, _, s)| *s == "offline").count();
    writeln!(
        out,
        "UnderReplicatedPartitions: {}\tOfflinePartitions: {offline}",
        unhealthy.len() - offline
    )?;
    for (topic, partition, state) in unhealthy {
        writeln!(
            out,
            "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tState: {state}",
            topic.name,
            partition.partition,
            if partition.leader < 0 {
                "none".to_string()
            } else {
                partition.leader.to_string()
            },
            ids(&partition.replicas),
            ids(&partition.isr)
        )?;
    }
    Ok(())
}

/// Broker ids as Kafka's tools print them: `1,2,3`.
fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::admin::{BrokerDescription, Voter};
    use client::PartitionInfo;

    #[test]
    fn under_replicated_and_offline_partitions_are_counted_and_named() {
        let partition = |index, leader, isr: &[i32]| PartitionInfo {
            partition: index,
            leader,
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
        };
        let topics = vec![TopicInfo {
            name: "orders".into(),
            topic_id: uuid::Uuid::nil(),
            internal: false,
            partitions: vec![
                partition(0, 1, &[1, 2, 3]),
                partition(1, 2, &[2, 3]),
                partition(2, -1, &[1]),
            ],
        }];
        let mut out = Vec::new();
        write_unhealthy_partitions(&mut out, &topics).expect("written");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "UnderReplicatedPartitions: 1\tOfflinePartitions: 1\n\
             \tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3\tState: under-replicated\n\
             \tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1,2,3\tIsr: 1\tState: offline\n"
        );
    }

    #[test]
    fn the_quorum_names_every_voter_and_its_lag() {
        let quorum = QuorumDescription {
            leader_id: 2,
            leader_epoch: 4,
            high_watermark: 120,
            voters: vec![
                Voter {
                    id: 1,
                    log_end_offset: 118,
                },
                Voter {
                    id: 2,
                    log_end_offset: 120,
                },
            ],
        };
        let mut out = Vec::new();
        write_quorum(&mut out, &quorum).expect("written");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "MetadataQuorum: leader 2\tLeaderEpoch: 4\tHighWatermark: 120\n\
             \tVoter: 1\tLogEndOffset: 118\tLag: 2\n\
             \tVoter: 2\tLogEndOffset: 120\tLag: 0\n"
        );
    }

    #[test]
    fn the_description_names_every_broker() {
        let cluster = ClusterDescription {
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".into(),
            controller_id: 1,
            brokers: vec![
                BrokerDescription {
                    id: 1,
                    host: "127.0.0.1".into(),
                    port: 9092,
                    rack: None,
                    fenced: false,
                },
                BrokerDescription {
                    id: 2,
                    host: "127.0.0.2".into(),
                    port: 9093,
                    rack: Some("r2".into()),
                    fenced: true,
                },
            ],
        };
        let mut out = Vec::new();
        write_description(&mut out, &cluster).expect("written");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "ClusterId: MkU3OEVBNTcwNTJENDM2Qg\tController: 1\tBrokers: 2\n\
             \tBroker: 1\tEndpoint: 127.0.0.1:9092\tRack: none\tFenced: false\n\
             \tBroker: 2\tEndpoint: 127.0.0.2:9093\tRack: r2\tFenced: true\n"
        );
    }
}
