//! `ringlog cluster describe`: the cluster's id, its active controller and its brokers
//! (endpoint, rack, fenced or not) over DescribeCluster, and the metadata quorum (leader,
//! high watermark, each voter's log end offset) over DescribeQuorum, as `kafka-cluster` and
//! `kafka-metadata-quorum` show them.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;
use client::admin::{self, ClusterDescription, QuorumDescription};

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
            write_description(out, &description)?;
            if let Some(quorum) = quorum {
                write_quorum(out, &quorum)?;
            }
            Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use client::admin::{BrokerDescription, Voter};

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
