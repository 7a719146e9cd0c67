//! The metadata quorum: the voters that replicate the metadata log with Raft (TiKV's
//! raft-rs), each a [`QuorumNode`] whose log is kept durable by its [`wal::Wal`].
//!
//! raft-rs is a synchronous state machine: the quorum thread ([`runner`]) drives it (ticks,
//! messages in and out, a ready loop) over blocking sockets ([`transport`]), with no runtime
//! to adapt, and the library's safety rests on its own tests (it is etcd's algorithm,
//! ported). Records proposed here are the metadata records of
//! `crate::metadata`, one batch per entry.

pub mod directories;
pub mod node;
pub mod runner;
pub mod transport;
pub mod wal;
pub mod wire;

pub use node::{Committed, ProposalId, QuorumError, QuorumNode};
pub use runner::{Quorum, QuorumConfig, QuorumStatus, ReplyTo};
pub use transport::Membership;

#[cfg(test)]
mod socket_tests;
#[cfg(test)]
mod tests;
