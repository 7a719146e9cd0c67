//! The command-line tools: `ringlog topic`, `partition`, `config`, `produce`, `consume`,
//! `group` and `cluster`, Kafka's kafka-topics, kafka-leader-election and
//! kafka-reassign-partitions, kafka-configs, kafka-console-producer, kafka-console-consumer,
//! kafka-consumer-groups and kafka-cluster in one binary. They speak only the Kafka protocol,
//! through the `client` crate's blocking wrapper ([`client::blocking`]), so they work
//! against any Kafka-compatible broker, Apache Kafka included.
//!
//! Invariants:
//! - Each command writes its results to the given output and returns an error instead of
//!   printing one; `main` prints the error (Kafka's error name and message) and exits
//!   non-zero.
//! - No command keeps state between runs; positions live in the broker (committed offsets).

pub mod cluster;
pub mod config;
pub mod consume;
pub mod format;
pub mod group;
pub mod partition;
pub mod partitioner;
pub mod produce;
pub mod reset_offsets;
pub mod table;
pub mod topic;

/// Where the tools connect, as Kafka's tools take it.
#[derive(clap::Args, Debug, Clone)]
pub struct Connect {
    /// host:port of one or more brokers, comma-separated.
    #[arg(long, global = true, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
}

/// The client id the tools send in every request header.
pub const CLIENT_ID: &str = "ringlog-cli";

impl Connect {
    /// Connects to the first reachable bootstrap server.
    pub fn cluster(&self) -> anyhow::Result<client::blocking::Cluster> {
        client::blocking::Cluster::connect(&self.bootstrap_server, CLIENT_ID)
    }
}
