//! ③ storage: a partition's log on disk. Append, read, recover; no networking, no request types.
//!
//! Invariants: batches are stored byte-for-byte as the producer sent them except base offset and
//! partition leader epoch (both outside the CRC); every batch's CRC-32C is checked at ingress and
//! again when recovery takes it back from disk (reads check lengths only; consumers check
//! CRCs, as Kafka's do) and compaction rewrites a batch only to drop records (new CRC,
//! every offset kept); offsets in a log are increasing, and dense except where compaction
//! removed records; after a failed write or fdatasync a log refuses writes (latched) rather than
//! pretend durability.
//!
//! Files of one partition directory:
//! ```text
//! 00000000000000000000.log        raw v2 batches, back to back (direct mode: zero padding
//!                                 past the end until the segment is sealed or closed)
//! 00000000000000000000.index      8-byte entries: relative last offset u32 BE | position u32 BE
//! 00000000000000000000.timeindex  12-byte entries: max timestamp i64 BE | relative offset u32 BE
//! 00000000000000004096.snapshot   producer state below offset 4096: written at each roll and
//!                                 by `Log::close`, the newest two kept (crc32fast)
//! leader-epoch-checkpoint         Kafka's text checkpoint: `0`, count, `epoch start_offset` lines;
//!                                 rewritten (tmp, fsync, rename, fsync dir) at each change
//! clean_shutdown.checkpoint       written by `Log::close`, removed by `Log::open` (crc32fast)
//! cleaner-offset-checkpoint       Kafka's text checkpoint: `first_dirty_offset tombstones_due_ms`
//! 00000000000000000000.log.cleaned  a cleaned segment being written (and `.index.cleaned`,
//!                                 `.timeindex.cleaned`): removed by `Log::open`
//! 00000000000000000000.log.swap   a cleaned segment committed to replace the old one(s) (and
//!                                 index `.swap` files): renamed into place by `Log::open`
//! 00000000000000000003.log.deleted  a segment merged into a cleaned one: removed when the
//!                                 swap is done, or by `Log::open`
//! ```
//! and one per log directory: `replication-offset-checkpoint` (`OffsetCheckpoint`, Kafka's text
//! checkpoint of `topic partition offset` lines: the high watermarks).
//! Index files are written whole when a segment is sealed (after a roll) or the log closed;
//! the active segment's indexes live in memory and are rebuilt from the `.log` after a crash.
//!
//! Retention (`Log::apply_retention`) deletes whole segments, oldest first; the log start
//! offset is the first remaining segment's base offset, so it needs no file of its own.
//!
//! Compaction (`Log::clean`, `cleanup.policy=compact`): sealed segments are rewritten with
//! the latest record of each key (tombstones until `delete_retention_ms`), offsets unchanged;
//! `crate::compact` holds the record-level work, `log/compaction.rs` the files and the swap.
//!
//! Idempotent producers: `Log::append` checks a batch that carries a producer id against the
//! partition's producer state at the moment it assigns offsets (no `.await` in between), so a
//! retried batch is answered with its original offsets (`AppendInfo::duplicate`) and never
//! stored twice; the state is rebuilt on open from the newest snapshot and the batches after it.
//!
//! Followers: `Log::append_replicated` stores a leader's batches as they are (offsets and epochs
//! kept, increasing offsets (gaps of a compacted leader kept) and CRCs checked);
//! `Log::truncate_to` cuts the log durably at a batch
//! boundary; `Log::end_offset_for_epoch` answers OffsetsForLeaderEpoch from the leader-epoch
//! cache.
//!
//! The stage (`stage.rs`): in direct mode, write-queue chunks live in a tmpfs file mapped
//! shared, so what an append copied survives a crash of the process before its O_DIRECT write
//! completes; `stage::replay` writes it back at start-up, before logs open.
//!
//! For callers: `Log::append` never waits for the disk; when appends outrun it by more than
//! eight write buffers it refuses with `StorageError::WriteBufferFull` (nothing stored): await
//! `Log::wait_for_room` and retry. `Log::sync` is the acks=all barrier (group commit).

pub mod batch;
mod cache;
mod checkpoint;
mod chunk_memory;
mod compact;
mod cpu_slice;
mod error;
mod index;
mod io;
mod io_throttle;
mod leader_epoch;
mod log;
mod producer_state;
mod reaper;
mod recovery;
mod retention;
mod segment;
pub mod stage;
mod stream_copy;
mod time_index;

#[cfg(test)]
mod log_tests;

/// The records of `records` (the record batches of one Produce partition) that have no key,
/// by their place counted over all of them: what a compacted topic refuses (Kafka's
/// INVALID_RECORD with record errors, KIP-467). A batch whose header does not parse is left
/// to the append's own checks; `None` when a batch's records cannot be decoded.
pub fn keyless_records(records: &[u8]) -> Option<Vec<i32>> {
    let mut keyless = Vec::new();
    let (mut at, mut before) = (0usize, 0i32);
    while at < records.len() {
        let Ok(header) = batch::BatchHeader::parse(&records[at..]) else {
            break;
        };
        let end = at
            .checked_add(header.total_bytes())
            .filter(|&end| end <= records.len());
        let Some(end) = end else {
            break;
        };
        let places = compact::keyless_records(&records[at..end], &header).ok()?;
        keyless.extend(places.into_iter().map(|place| before + place));
        before = before.saturating_add(header.record_count.max(0));
        at = end;
    }
    Some(keyless)
}

pub use crate::cache::BatchCache;
pub use crate::checkpoint::{
    OffsetCheckpoint, PartitionOffset, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
pub use crate::error::{AppendError, ReadError, StorageError, TruncateError};
pub use crate::io::IoMode;
pub use crate::io_throttle::IoThrottle;
pub use crate::log::{
    AppendInfo, CleanPolicy, CleanStats, Cleanable, Deleted, DiskReads, DiskWrites, Log, LogConfig,
    ReadResult, WriteProgress,
};
pub use crate::producer_state::{ProducerError, BATCHES_PER_PRODUCER_MAX};
pub use crate::retention::Retention;
