//! Cluster metadata: what topics exist, with which ids, partitions and configs.
//!
//! Metadata changes only by committing [`MetadataRecord`]s through a [`MetadataStore`];
//! every shard reads an immutable [`MetadataImage`] built by applying the committed
//! records in order. The single-node store keeps the records in a local file; a replicated
//! metadata log can replace it behind the same trait without touching request handlers.

pub mod image;
pub mod store;

pub use image::{MetadataImage, MetadataRecord, TopicMeta};
pub use store::{FileMetadataStore, MetadataStore, StoreError};
