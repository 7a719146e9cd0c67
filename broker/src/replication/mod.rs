//! Data replication, Kafka's ISR protocol, thread-per-core: followers fetch from leaders
//! with Fetch requests that carry their replica id, leaders track their followers and move
//! the high watermark to the ISR's minimum.
//!
//! ```text
//! follower shard s                          leader (partition's owning shard)
//! fetcher(leader L) ── Fetch(replica_id) ─▶ record position ─▶ high watermark = ISR min
//!   append_replicated ◀── batches, HW ───── read up to completed writes
//! ```
//!
//! Invariants: a shard's fetchers fetch only the partitions that shard owns, one fetcher
//! per leader, so replication never crosses cores on either side; the leader's bookkeeping
//! ([`ReplicaSet`]) lives in the partition, on its owning shard, and so does the keeping
//! of its ISR ([`maintain_forever`]), which changes only through the controller. Replicas
//! outside the ISR that a topic names may be throttled on both sides ([`throttle`]).

pub mod checkpoint;
mod fetcher;
mod isr;
mod replica_set;
pub mod throttle;

pub use fetcher::{follow_forever, Fetchers};
pub use isr::maintain_forever;
pub use replica_set::{FollowerPosition, ReplicaSet};
