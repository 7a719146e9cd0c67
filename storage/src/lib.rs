//! ③ storage: a partition's log on disk. Append, read, recover; no networking, no request types.
//!
//! Invariants: batches are stored byte-for-byte as the producer sent them except base offset and
//! partition leader epoch (both outside the CRC); every batch's CRC-32C is checked at ingress and
//! again when recovery reads it back; offsets in a log are dense and increasing; after a failed
//! write or fdatasync a log refuses writes (latched) rather than pretend durability.

pub mod batch;
mod cache;
mod error;
mod index;
mod io;
mod log;
mod recovery;
mod segment;
mod time_index;

pub use crate::cache::BatchCache;
pub use crate::error::{AppendError, ReadError, StorageError};
pub use crate::io::IoMode;
pub use crate::log::{AppendInfo, Log, LogConfig, ReadResult};
