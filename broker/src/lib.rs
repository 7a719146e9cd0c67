//! ④⑤ The broker: policy, and the only crate that wires `net`, `shard` and `storage`
//! together.
//!
//! A request's path: `net` decodes it on the shard that accepted the connection; a handler
//! in [`request`] splits it by owning shard ([`shard::shard_for`]); each owner runs its
//! part against its own [`partition::Partition`]s through the shard router; the handler
//! merges the answers in request order and `net` encodes them.
//!
//! Invariants:
//! - Partition state lives only on its owning shard and is touched only by jobs running
//!   there; the metadata image is immutable and shared through `Arc`.
//! - Metadata changes only through the controller (shard 0), which commits records to the
//!   [`metadata::MetadataStore`] and then publishes the new image to every shard before it
//!   answers, so a topic that CreateTopics reported is servable on every shard.
//! - `acks=all` is answered only after the batch is on the leader's disk (fdatasync,
//!   group-committed) and the high watermark has passed it (every ISR member holds it).

pub mod cleaner;
pub mod cli;
pub mod config;
pub mod controller;
pub mod durable;
pub mod errors;
pub mod groups;
pub mod listener;
pub mod memory;
pub mod meta_properties;
pub mod metadata;
pub mod partition;
pub mod producers;
pub mod quorum;
pub mod replication;
pub mod request;
pub mod retention;
pub mod server;
pub mod shard_state;

pub use config::BrokerConfig;
