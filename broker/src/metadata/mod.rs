//! Cluster metadata: which brokers exist, what topics exist with which ids, partitions,
//! replicas, leaders and configs.
//!
//! Metadata changes only by committing [`MetadataRecord`]s (Kafka's KRaft records) through a
//! [`MetadataStore`]; every shard reads an immutable [`MetadataImage`] built by applying the
//! committed records in order. The single-node store keeps the records in a local file; in
//! a quorum of several voters the Raft log of `crate::quorum` holds them
//! ([`QuorumMetadataStore`]), behind the same trait.

/// The name of the metadata log, as Kafka names it (its directory, DescribeQuorum's topic).
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub mod image;
mod legacy;
pub mod quorum_store;
pub mod records;
pub mod store;

pub use image::{BrokerRegistration, MetadataImage, PartitionState, TopicMeta};
pub use quorum_store::QuorumMetadataStore;
pub use records::{MetadataRecord, NO_LEADER};
pub use store::{FileMetadataStore, MetadataStore, StoreError};
