//! Cluster metadata: which brokers exist, what topics exist with which ids, partitions,
//! replicas, leaders and configs.
//!
//! Metadata changes only by committing [`MetadataRecord`]s (Kafka's KRaft records) through a
//! [`MetadataStore`]; every shard reads an immutable [`MetadataImage`] built by applying the
//! committed records in order. The single-node store keeps the records in a local file; a
//! replicated metadata log can replace it behind the same trait without touching request
//! handlers.

/// The name of the metadata log, as Kafka names it (its directory, DescribeQuorum's topic).
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub mod image;
mod legacy;
pub mod records;
pub mod store;

pub use image::{BrokerRegistration, MetadataImage, PartitionState, TopicMeta};
pub use records::{MetadataRecord, NO_LEADER};
pub use store::{FileMetadataStore, MetadataStore, StoreError};
