//! What a log reports about its I/O and its write queue, for metrics and tests: counters of
//! disk reads and writes since the log was opened, the queue's progress, its segments.
//!
//! Invariants: counters only grow; reading them never waits and changes nothing.

use super::{Inner, Log};

/// Reads that went to the segment files (not the write queue or the batch cache) since the
/// log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskReads {
    pub count: u64,
    pub bytes: u64,
    /// Of `count`, the reads done ahead of a reader (direct mode).
    pub ahead: u64,
}

/// Data writes to the segment files since the log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskWrites {
    pub count: u64,
    pub bytes: u64,
    /// The most data writes that were in flight at once.
    pub most_in_flight: usize,
    /// fdatasync calls of `Log::sync` that completed (each round's are shared by every waiter
    /// it covers).
    pub fdatasyncs: u64,
    /// Of `count`, writes made durable by themselves (`RWF_DSYNC`) for a `Log::sync` waiting
    /// on them, in place of an fdatasync.
    pub durable: u64,
}

impl Inner {
    pub(super) fn count_disk_read(&self, bytes: usize, ahead: bool) {
        let reads = self.disk_reads.get();
        self.disk_reads.set(DiskReads {
            count: reads.count + 1,
            bytes: reads.bytes + bytes as u64,
            ahead: reads.ahead + u64::from(ahead),
        });
    }
}

/// Where the log's write queue stands: ops are chunk writes and segment seals, numbered in the
/// order they were queued since the log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteProgress {
    pub ops_enqueued: u64,
    /// Every op up to this one is done (written, or sealed).
    pub ops_done: u64,
    /// Every op up to this one is durable (done before an fdatasync that completed began, or
    /// written durable after ops that were).
    pub ops_synced: u64,
    /// An fdatasync round (`Log::sync`) is in flight.
    pub sync_in_flight: bool,
    /// Data writes in flight.
    pub writes_in_flight: usize,
    /// Files written since the last fdatasync round started, waiting for the next one.
    pub files_to_sync: usize,
}

impl Log {
    pub fn disk_writes(&self) -> DiskWrites {
        self.inner.disk_writes.get()
    }

    pub fn disk_reads(&self) -> DiskReads {
        self.inner.disk_reads.get()
    }

    pub fn write_progress(&self) -> WriteProgress {
        let state = self.inner.state.borrow();
        WriteProgress {
            ops_enqueued: state.queue.ops_enqueued,
            ops_done: state.queue.ops_done,
            ops_synced: state.queue.ops_synced,
            sync_in_flight: state.sync_in_flight,
            writes_in_flight: state.queue.writes_in_flight,
            files_to_sync: state.dirty_files.len(),
        }
    }

    /// Base offsets of the log's segments, ascending; the last one is the active segment.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        let state = self.inner.state.borrow();
        state.segments.iter().map(|s| s.base_offset).collect()
    }
}
