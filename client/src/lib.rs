//! The Kafka client of ringlog's tools: the `ringlog` command line (through [`blocking`])
//! and `ringlog-bench` (on its glommio shards) speak to brokers only through this crate,
//! so they work against any Kafka-compatible broker, Apache Kafka included.
//!
//! Layout: [`versions`] (the one table of versions this client builds, and negotiation),
//! [`frame`] (framing and decoding, sans I/O), [`error`] (Kafka's error names and codes),
//! [`connection`] (one broker, glommio), [`cluster`] (bootstrap, metadata, one connection
//! per broker, coordinator lookup), [`admin`], [`configs`] (settings at run time), [`partitions`] (leader elections and replica moves), [`offsets`], [`fetch`], [`member`] (the
//! consumer-group member), [`consumer_protocol`] (its bytes and the range assignor) and
//! [`kafka_uuid`] (Kafka's text form of ids).
//!
//! Invariants:
//! - Every request is built at the highest version both sides support, from one table
//!   ([`versions::CLIENT_APIS`]).
//! - Decoding a broker's answer never panics: bad bytes are an error on every decode path
//!   (property-tested in `frame`, `fetch` and `consumer_protocol`).
//! - A frame longer than [`frame::FRAME_BYTES_MAX`] is refused before allocating for it.

pub mod admin;
pub mod blocking;
pub mod cluster;
pub mod configs;
pub mod connection;
pub mod consumer_protocol;
pub mod error;
#[cfg(any(test, feature = "fake-broker"))]
pub mod fake_broker;
pub mod fetch;
pub mod frame;
pub mod member;
pub mod offsets;
pub mod partitions;
mod uuid_text;
pub mod versions;

pub use cluster::{topic_name, Cluster, PartitionInfo, PartitionLeader, TopicInfo};
pub use connection::Connection;
pub use error::{check, code_of, error_name, KafkaError};
pub use uuid_text::{kafka_uuid, parse_kafka_uuid, random_kafka_uuid};
