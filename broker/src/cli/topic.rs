//! `ringlog topic create|list|describe|delete|add-partitions|delete-records`: kafka-topics
//! (and kafka-delete-records) over the Kafka protocol (CreateTopics, Metadata,
//! DescribeConfigs, DeleteTopics, CreatePartitions, DeleteRecords).
//!
//! Invariants:
//! - Every per-topic error in an answer becomes a failure naming Kafka's error and message,
//!   so the command exits non-zero; nothing is reported as done that the broker refused.
//! - Requests set only fields their negotiated version has (unset ones keep the codec's
//!   defaults, which every version accepts).

use std::io::Write;

use anyhow::{bail, Result};
use clap::Subcommand;
use client::admin::{self, NewTopic};
use client::blocking::Cluster;
use client::TopicInfo;

use super::Connect;

#[derive(clap::Args, Debug)]
pub struct TopicArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(subcommand)]
    pub command: TopicCommand,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Partitions (default: the broker's num.partitions).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replicas per partition (default: the broker's default.replication.factor).
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic setting, e.g. --config retention.ms=60000 (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
    },
    /// List topic names.
    List,
    /// Show partitions, leaders, replicas, ISR, topic id and overridden settings.
    Describe {
        /// One topic (default: every topic).
        name: Option<String>,
    },
    /// Delete a topic.
    Delete { name: String },
    /// Raise a topic's partition count to --partitions.
    AddPartitions {
        name: String,
        #[arg(long)]
        partitions: i32,
    },
    /// Make a partition's records below --offset unreadable, as kafka-delete-records does.
    DeleteRecords {
        name: String,
        #[arg(long)]
        partition: i32,
        /// The new start of the partition (-1: its high watermark, deleting everything).
        #[arg(long, allow_hyphen_values = true)]
        offset: i64,
    },
}

pub fn run(args: TopicArgs, out: &mut impl Write) -> Result<()> {
    let mut cluster = args.connect.cluster()?;
    match args.command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            config,
        } => {
            create(&mut cluster, &name, partitions, replication_factor, &config)?;
            writeln!(out, "Created topic {name}.")?;
        }
        TopicCommand::List => {
            for topic in cluster.topics()? {
                writeln!(out, "{}", topic.name)?;
            }
        }
        TopicCommand::Describe { name } => {
            let topics = match name {
                Some(name) => vec![cluster.topic(&name)?],
                None => cluster.topics()?,
            };
            for topic in &topics {
                let configs = overridden_configs(&mut cluster, &topic.name)?;
                write_description(out, topic, &configs)?;
            }
        }
        TopicCommand::Delete { name } => {
            delete(&mut cluster, &name)?;
            writeln!(out, "Deleted topic {name}.")?;
        }
        TopicCommand::AddPartitions { name, partitions } => {
            add_partitions(&mut cluster, &name, partitions)?;
            writeln!(out, "Topic {name} now has {partitions} partitions.")?;
        }
        TopicCommand::DeleteRecords {
            name,
            partition,
            offset,
        } => {
            let low_watermark =
                cluster.run(async |c| admin::delete_records(c, &name, partition, offset).await)?;
            writeln!(
                out,
                "partition: {name}-{partition}	low_watermark: {low_watermark}"
            )?;
        }
    }
    Ok(())
}

/// Splits `key=value` at the first `=`.
pub fn parse_setting(setting: &str) -> Result<(&str, &str)> {
    match setting.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key, value)),
        _ => bail!("expected KEY=VALUE, got {setting:?}"),
    }
}

pub fn create(
    cluster: &mut Cluster,
    name: &str,
    partitions: Option<i32>,
    replication_factor: Option<i16>,
    configs: &[String],
) -> Result<()> {
    let mut topic = NewTopic {
        partitions,
        replication_factor,
        configs: Vec::new(),
    };
    for setting in configs {
        let (key, value) = parse_setting(setting)?;
        topic.configs.push((key.to_string(), value.to_string()));
    }
    cluster.run(async |c| admin::create_topic(c, name, &topic).await)
}

pub fn delete(cluster: &mut Cluster, name: &str) -> Result<()> {
    cluster.run(async |c| admin::delete_topic(c, name).await)
}

pub fn add_partitions(cluster: &mut Cluster, name: &str, count: i32) -> Result<()> {
    cluster.run(async |c| admin::add_partitions(c, name, count).await)
}

/// The topic's settings that differ from the broker's defaults, sorted by name.
pub fn overridden_configs(cluster: &mut Cluster, name: &str) -> Result<Vec<(String, String)>> {
    cluster.run(async |c| admin::overridden_configs(c, name).await)
}

/// kafka-topics' describe layout: a topic line, then one line per partition.
pub fn write_description(
    out: &mut impl Write,
    topic: &TopicInfo,
    configs: &[(String, String)],
) -> Result<()> {
    let replication_factor = topic.partitions.first().map_or(0, |p| p.replicas.len());
    let configs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(
        out,
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
        topic.name,
        client::kafka_uuid(&topic.topic_id),
        topic.partitions.len(),
        replication_factor,
        configs.join(",")
    )?;
    let ids = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for partition in &topic.partitions {
        let leader = if partition.leader < 0 {
            "none".to_string()
        } else {
            partition.leader.to_string()
        };
        writeln!(
            out,
            "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
            topic.name,
            partition.partition,
            leader,
            ids(&partition.replicas),
            ids(&partition.isr)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::PartitionInfo;

    #[test]
    fn settings_split_at_the_first_equals() {
        assert_eq!(
            parse_setting("retention.ms=60000").unwrap(),
            ("retention.ms", "60000")
        );
        assert_eq!(parse_setting("a=b=c").unwrap(), ("a", "b=c"));
        assert_eq!(parse_setting("a=").unwrap(), ("a", ""));
        assert!(parse_setting("retention.ms").is_err());
        assert!(parse_setting("=1").is_err());
    }

    #[test]
    fn description_matches_kafka_topics() {
        let topic = TopicInfo {
            name: "orders".into(),
            topic_id: uuid::Uuid::nil(),
            internal: false,
            partitions: (0..2)
                .map(|partition| PartitionInfo {
                    partition,
                    leader: 1,
                    replicas: vec![1],
                    isr: vec![1],
                })
                .collect(),
        };
        let mut out = Vec::new();
        let configs = [("retention.ms".to_string(), "60000".to_string())];
        write_description(&mut out, &topic, &configs).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Topic: orders\tTopicId: AAAAAAAAAAAAAAAAAAAAAA\tPartitionCount: 2\t\
             ReplicationFactor: 1\tConfigs: retention.ms=60000\n\
             \tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n\
             \tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\n"
        );
    }
}
