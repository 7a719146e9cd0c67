//! ② The per-core runtime: who owns a partition, and how a request hops to it.
//!
//! Mechanism only; this crate knows nothing of Kafka. Invariants:
//! - One glommio `LocalExecutor` per shard, pinned to its own CPU; a shard never
//!   runs on a CPU that does not exist.
//! - A partition is owned by exactly one shard, chosen by [`placement::shard_for`], a pure
//!   function of the partition's name, its index and the shard count.
//! - Shards share nothing mutable: they exchange owned messages over bounded channels
//!   ([`mesh`]), and a full channel is back-pressure the sender waits on, never a drop.

pub mod executor;
pub mod mesh;
pub mod placement;
pub mod router;
pub mod turns;

pub use executor::{run_shards, ShardsConfig};
pub use mesh::{Endpoint, Mesh, SendError};
pub use placement::{shard_for, ShardId};
pub use router::{Job, Pending, Router, ShardStopped};
pub use signal::Notify;
pub use turns::{Ticket, Turns};
