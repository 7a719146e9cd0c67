//! The partition log: an ordered list of segments, the last one active, with a write-behind
//! queue in front of the files.
//!
//! Data path of an append: validate every batch (nothing stored if one is bad) → assign offsets
//! in the header copy → copy the batch once into the tail chunk of the write queue (memory of
//! the shard's stage in direct mode, `crate::stage`: written to the kernel from here) → the writer
//! task writes chunks in order as soon as a chunk has data, a second one while the first is in
//! flight when they share no block (direct mode) → `sync` shares one fdatasync among all
//! callers whose data it covers (group commit).
//!
//! ```text
//!  segments:  [s0 sealed][s1 sealed][s2 active ......................]
//!  active:    0 ........ written_bytes ........ size_bytes
//!                 on disk      |   queue chunks (memory)  |
//!  queue:     [Data c7 in flight][Seal s1][Data c8 filling]   ops done in order
//! ```
//!
//! Invariants: offsets are dense and increasing across segments; `ops_synced <= ops_done <=
//! ops_enqueued`, and `ops_done` moves past an op only once every op before it is done too
//! (a seal leaves the queue, done for this count, as it starts); writes in flight never share
//! a block, one seal at a time is in flight (beside later segments' writes), and at most
//! `WRITES_IN_FLIGHT_MAX` writes and one group-commit fdatasync round are in flight; no
//! `RefCell` borrow is held across an `.await`; after a failed write or fdatasync `failed` is
//! set and never cleared (appends, flushes and syncs then fail with `StorageError::Failed`).
//!
//! Modules, each owning one job:
//! ```text
//! mod.rs                 the `Log` handle: config, state, barriers (flush, wait), close, delete
//! append.rs              a leader's `append` and a follower's `append_replicated`
//! write_queue.rs         chunks and ops accounting (no I/O)
//! writer.rs              the writer task, segment files, sealing, group commit (`Log::sync`)
//! read.rs                read plans, `SegmentReader`, read-ahead, reads and time queries
//! open.rs                `Log::open`: directory listing, segment recovery, spares
//! retention.rs           `Log::apply_retention`, and deleting segments below a start
//! compaction.rs          `Log::clean` (cleanup.policy=compact): rewriting segments, swaps
//! delete_records.rs      `Log::delete_records_before` (DeleteRecords) and its checkpoint
//! truncate.rs            a follower's `truncate_to`
//! epochs.rs              the leader-epoch cache: its checkpoint file, OffsetsForLeaderEpoch
//! producer_snapshots.rs  producer-state snapshots: written at rolls and close, loaded on open
//! stats.rs               counters and progress reported for metrics and tests
//! ```

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use signal::Notify;

use crate::batch::{BATCH_BYTES_MAX, BATCH_HEADER_BYTES};
use crate::cache::BatchCache;
use crate::chunk_memory::SharedChunk;
use crate::error::StorageError;
use crate::io::{sync_dir, IoMode, SegmentFile, BLOCK_BYTES};
use crate::leader_epoch::LeaderEpochCache;
use crate::producer_state::{ProducerSnapshot, ProducerTable};
use crate::recovery::{write_clean_shutdown, write_indexes, CleanShutdown};
use crate::segment::Segment;

pub use self::compaction::{CleanPolicy, CleanStats, Cleanable};
#[cfg(test)]
pub(crate) use self::compaction::{CleanStep, PAUSE_AFTER_SWAP, STOP_AT};
use self::read::ReadAhead;
pub use self::stats::{DiskReads, DiskWrites, WriteProgress};
use self::write_queue::{Chunk, ChunkInfo, Job, Snapshot, WriteQueue};
#[cfg(test)]
pub(crate) use self::writer::PAUSE_SEAL;

mod append;
mod compaction;
mod delete_records;
mod epochs;
mod open;
mod producer_snapshots;
mod read;
mod retention;
mod shard_writes;
mod spares;
mod stats;
mod truncate;
mod write_queue;
mod writer;

/// Bytes that may wait in the write queue outside the stage, in units of
/// `write_buffer_bytes_max`; beyond it appends get `StorageError::WriteBufferFull`
/// (backpressure instead of unbounded memory).
const PENDING_BUFFERS_MAX: usize = 8;
/// Upper bound on `write_buffer_bytes_max`.
const WRITE_BUFFER_BYTES_MAX: usize = 64 << 20;

/// Configuration of one partition log (Kafka names in the comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// log.segment.bytes: roll the active segment before it would exceed this size.
    pub segment_bytes_max: u64,
    /// log.roll.ms: roll the active segment once it is this old.
    pub segment_ms_max: u64,
    /// log.index.interval.bytes: bytes between sparse index entries.
    pub index_interval_bytes: u32,
    pub io_mode: IoMode,
    /// Size of one coalescing write buffer of the partition.
    pub write_buffer_bytes_max: usize,
    /// max.message.bytes: the largest record batch an append accepts.
    pub batch_bytes_max: usize,
    /// producer.id.expiration.ms: an idempotent producer that appended nothing for this long
    /// is forgotten (see [`Log::expire_producers`]).
    pub producer_id_expiration_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 1 << 30,
            segment_ms_max: 7 * 24 * 60 * 60 * 1000,
            index_interval_bytes: 4096,
            io_mode: IoMode::default(),
            write_buffer_bytes_max: 1 << 20,
            batch_bytes_max: BATCH_BYTES_MAX,
            producer_id_expiration_ms: 86_400_000,
        }
    }
}

impl LogConfig {
    fn check(&self) -> Result<(), StorageError> {
        // Positions in the index are u32 and Kafka's own limit is i32::MAX.
        if !(BATCH_HEADER_BYTES as u64..=i32::MAX as u64).contains(&self.segment_bytes_max) {
            let reason = format!(
                "segment_bytes_max {} not in [61, 2^31)",
                self.segment_bytes_max
            );
            return Err(StorageError::InvalidConfig(reason));
        }
        if !(2 * BLOCK_BYTES..=WRITE_BUFFER_BYTES_MAX).contains(&self.write_buffer_bytes_max) {
            let reason = format!(
                "write_buffer_bytes_max {} not in [8 KiB, 64 MiB]",
                self.write_buffer_bytes_max
            );
            return Err(StorageError::InvalidConfig(reason));
        }
        Ok(())
    }

    fn pending_bytes_max(&self) -> usize {
        self.write_buffer_bytes_max * PENDING_BUFFERS_MAX
    }
}

/// What `Log::append` stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// Largest batch max timestamp of the request (-1 if no batch carried one).
    pub max_timestamp: i64,
    /// Base offset of the batch that carried `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    pub batch_count: usize,
    pub bytes: usize,
    /// The batch is a retry of an idempotent batch the log holds already: nothing was
    /// stored, and the offsets are the original's (which may not be written yet: wait for
    /// them as for a fresh append).
    pub duplicate: bool,
}

impl AppendInfo {
    fn duplicate(base_offset: i64, last_offset: i64) -> AppendInfo {
        AppendInfo {
            base_offset,
            last_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            batch_count: 0,
            bytes: 0,
            duplicate: true,
        }
    }
}

/// What `Log::read` found.
#[derive(Clone, Debug)]
pub struct ReadResult {
    /// Whole batches, contiguous.
    pub records: Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// What `Log::apply_retention` deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deleted {
    pub segments: usize,
    pub bytes: u64,
}

/// A handle to one partition's log. Cheap to clone, `!Send`: it lives on one glommio shard.
#[derive(Clone)]
pub struct Log {
    inner: Rc<Inner>,
}

struct Inner {
    dir: PathBuf,
    /// The topic's settings can change while the log is open ([`Log::reconfigure`]).
    config: Cell<LogConfig>,
    cache: Rc<BatchCache>,
    log_id: u64,
    state: RefCell<State>,
    signals: Rc<Signals>,
    disk_reads: Cell<DiskReads>,
    disk_writes: Cell<DiskWrites>,
    /// `.spare` files: `.log` files of segments retention deleted or the cleaner replaced,
    /// for new segments to overwrite (`spares.rs`).
    spares: RefCell<Vec<PathBuf>>,
    /// Offsets of the producer-state snapshots on disk, ascending.
    snapshots: RefCell<Vec<i64>>,
    epoch_checkpoint: Rc<epochs::EpochCheckpoint>,
}

/// Wake-ups between the log's callers and its writer task.
#[derive(Default)]
struct Signals {
    /// The writer waits here for work.
    writer: Notify,
    /// Flush, sync and read callers wait here for ops to complete.
    progress: Notify,
    shutdown: Cell<bool>,
}

struct State {
    /// Ordered by base offset; never empty; the last one is active.
    segments: Vec<Segment>,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Every batch below this offset has had its write to its segment file completed
    /// (O_DIRECT write done in direct mode, copied into the page cache in buffered mode).
    /// `files_end_offset <= log_end_offset`; see `written_end_offset` for what a crash of the
    /// process cannot take back.
    files_end_offset: i64,
    /// Every batch below this offset was written before an fdatasync that completed began:
    /// what a crash of the machine cannot take back. `synced_end_offset <= files_end_offset`.
    synced_end_offset: i64,
    queue: WriteQueue,
    sync_in_flight: bool,
    /// Files written since the last fdatasync started.
    dirty_files: Vec<Rc<SegmentFile>>,
    failed: Option<String>,
    /// Appends are refused (close or delete started).
    closed: bool,
    /// `close` finished: the clean-shutdown checkpoint is written.
    closed_cleanly: bool,
    /// Direct mode: the read-ahead in flight, if any (one per log).
    read_ahead: Option<ReadAhead>,
    /// Idempotent producers and their last batches, as of `log_end_offset`.
    producers: ProducerTable,
    /// The first offset of each leader epoch that wrote to the log, as of `log_end_offset`.
    epochs: LeaderEpochCache,
    /// Bumped at each change of `epochs` (see `epochs.rs`).
    epochs_version: u64,
    /// `Log::truncate_to` is under way: appends and retention wait it out (refused), syncs
    /// and read-aheads do not start.
    truncating: bool,
    /// Truncations since the log was opened: a read that raced one is retried.
    truncations: u64,
    /// The log cleaner's checkpoint and progress (`compaction.rs`).
    cleaner: compaction::CleanerState,
}

impl State {
    /// Every batch below this offset is written to the kernel, in its segment file or in the
    /// stage (`crate::stage`): what a crash of the process cannot take back. While no queued
    /// chunk is outside the stage, that is every appended batch.
    fn written_end_offset(&self) -> i64 {
        if self.queue.all_staged() {
            self.log_end_offset
        } else {
            self.files_end_offset
        }
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log always has an active segment")
    }

    fn segment_slot(&self, base_offset: i64) -> Option<usize> {
        self.segments
            .binary_search_by_key(&base_offset, |s| s.base_offset)
            .ok()
    }

    /// Index of the segment that holds `offset` (the last one with base <= offset).
    fn segment_slot_for_offset(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }

    fn check_writable(&self, dir: &Path) -> Result<(), StorageError> {
        if let Some(reason) = &self.failed {
            return Err(StorageError::Failed {
                path: dir.to_path_buf(),
                reason: reason.clone(),
            });
        }
        if self.closed {
            return Err(StorageError::Closed {
                path: dir.to_path_buf(),
            });
        }
        if self.truncating {
            return Err(StorageError::Truncating {
                path: dir.to_path_buf(),
            });
        }
        Ok(())
    }

    /// Ok once the first `target` ops are done; otherwise why they never will be (the log
    /// failed, or its writer stopped because the log was closed or deleted).
    fn check_done(&self, dir: &Path, target: u64) -> Result<(), StorageError> {
        if self.queue.ops_done >= target {
            return Ok(());
        }
        match &self.failed {
            Some(reason) => Err(StorageError::Failed {
                path: dir.to_path_buf(),
                reason: reason.clone(),
            }),
            None => Err(StorageError::Closed {
                path: dir.to_path_buf(),
            }),
        }
    }

    /// The segment's file exists (a write to it needs none created first).
    fn has_file(&self, segment_base_offset: i64) -> bool {
        self.segment_slot(segment_base_offset)
            .is_some_and(|slot| self.segments[slot].file.is_some())
    }

    fn writer_has_work(&self, now: Instant) -> bool {
        self.failed.is_none()
            && self
                .queue
                .next_job(|base| self.has_file(base), now)
                .is_some()
    }

    /// Takes the next op the writer may start (see `WriteQueue::next_job`).
    fn take_job(&mut self, now: Instant) -> Option<Job> {
        let State {
            queue, segments, ..
        } = self;
        queue.take_job(
            |base| {
                segments
                    .binary_search_by_key(&base, |s| s.base_offset)
                    .is_ok_and(|slot| segments[slot].file.is_some())
            },
            now,
        )
    }

    /// Copies `bytes`, which belong at `position` of the active segment, into the write queue
    /// (see `WriteQueue::reserve`, `WriteQueue::push_bytes`).
    fn reserve(&mut self, config: &LogConfig, position: u64, bytes: usize) {
        let State {
            queue, segments, ..
        } = self;
        let active = segments.last().expect("a log always has an active segment");
        queue.reserve(config, active, position, bytes);
    }

    fn push_bytes(&mut self, config: &LogConfig, position: u64, bytes: &[u8]) {
        let State {
            queue, segments, ..
        } = self;
        let active = segments.last().expect("a log always has an active segment");
        queue.push_bytes(config, active, position, bytes);
    }

    /// Records a completed data write to `file`, then retires every written chunk at the front
    /// of the queue in order. Returns the chunk's buffer for the cache in direct mode.
    ///
    /// A durable write needs no fdatasync: its file is not marked dirty for it, and once every
    /// op up to the last retired one is durable, so is every batch in them.
    fn complete_data(
        &mut self,
        info: ChunkInfo,
        file: &Rc<SegmentFile>,
    ) -> Option<Arc<SharedChunk>> {
        if !info.durable && !self.dirty_files.iter().any(|f| Rc::ptr_eq(f, file)) {
            self.dirty_files.push(file.clone());
        }
        let written = self.queue.complete_data(info.op_seq);
        while let Some(chunk) = self.queue.pop_retired() {
            self.retire(&chunk);
        }
        if self.queue.ops_synced == self.queue.ops_done {
            self.synced_end_offset = self.synced_end_offset.max(self.files_end_offset);
        }
        written
    }

    /// A written chunk left the queue: its bytes are now the segment's on disk.
    fn retire(&mut self, chunk: &Chunk) {
        if chunk.batches_end_offset >= 0 {
            self.files_end_offset = chunk.batches_end_offset;
        }
        let more_queued = self.queue.holds_data_of(chunk.segment_base_offset);
        let slot = self
            .segment_slot(chunk.segment_base_offset)
            .expect("written segment exists");
        let segment = &mut self.segments[slot];
        segment.written_bytes = chunk.end();
        if let (Some(tail), false) = (chunk.written_tail(), more_queued) {
            segment.tail_block.clear();
            segment.tail_block.extend_from_slice(tail);
        }
    }

    fn complete_seal(&mut self) {
        let segment_base_offset = self.queue.end_seal();
        if let Some(slot) = self.segment_slot(segment_base_offset) {
            self.segments[slot].tail_block = Vec::new();
        }
    }
}

impl Inner {
    fn failed_error(&self, reason: &str) -> StorageError {
        StorageError::Failed {
            path: self.dir.clone(),
            reason: reason.to_string(),
        }
    }

    fn latch(&self, error: &StorageError) {
        tracing::error!(dir = %self.dir.display(), %error, "log failed; refusing writes");
        let mut state = self.state.borrow_mut();
        state.sync_in_flight = false;
        if state.failed.is_none() {
            state.failed = Some(error.to_string());
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.signals.shutdown.set(true);
        self.signals.writer.notify_all();
        self.signals.progress.notify_all();
        self.cache.remove_log(self.log_id);
    }
}

impl Log {
    /// The settings the log runs with.
    pub fn config(&self) -> LogConfig {
        self.inner.config.get()
    }

    /// Takes a topic's changed settings (segment size and age, index interval, largest
    /// batch); they apply from the next append or roll. How the log reaches its files and
    /// its write buffers stay as opened.
    pub fn reconfigure(&self, mut config: LogConfig) -> Result<(), StorageError> {
        let current = self.inner.config.get();
        config.io_mode = current.io_mode;
        config.write_buffer_bytes_max = current.write_buffer_bytes_max;
        config.check()?;
        self.inner.config.set(config);
        Ok(())
    }

    pub fn log_start_offset(&self) -> i64 {
        self.inner.state.borrow().log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.inner.state.borrow().log_end_offset
    }

    /// The offset below which every batch is written to the kernel: its segment file's write
    /// completed, or (direct mode) it sits in the stage, a tmpfs file that `stage::replay`
    /// writes back after a crash. What a crash of the process cannot take back (the acks=1
    /// barrier, and the high watermark of a single node).
    pub fn written_end_offset(&self) -> i64 {
        self.inner.state.borrow().written_end_offset()
    }

    /// The offset below which every batch was written before a completed fdatasync began.
    pub fn synced_end_offset(&self) -> i64 {
        self.inner.state.borrow().synced_end_offset
    }

    /// Waits until every batch below `end_offset` is written (see
    /// [`Log::written_end_offset`]); the acks=1 barrier. Errs if the log failed or stopped
    /// before that.
    pub async fn wait_written(&self, end_offset: i64) -> Result<(), StorageError> {
        let inner = &*self.inner;
        inner
            .signals
            .progress
            .wait_until(|| {
                let state = inner.state.borrow();
                state.written_end_offset() >= end_offset
                    || state.failed.is_some()
                    || inner.signals.shutdown.get()
            })
            .await;
        let state = inner.state.borrow();
        if state.written_end_offset() >= end_offset {
            return Ok(());
        }
        match &state.failed {
            Some(reason) => Err(inner.failed_error(reason)),
            None => Err(StorageError::Closed {
                path: inner.dir.clone(),
            }),
        }
    }

    /// Bytes of all segments, including appended bytes not yet written.
    pub fn size_bytes(&self) -> u64 {
        self.inner
            .state
            .borrow()
            .segments
            .iter()
            .map(|s| s.size_bytes)
            .sum()
    }
    /// Waits until the write queue has room for an append of `bytes`, the answer to
    /// `StorageError::WriteBufferFull`: as long as the oldest queued writes take to finish,
    /// not until the whole queue is on disk (appends keep the disk busy meanwhile). Errs if
    /// the log failed or closed.
    pub async fn wait_for_room(&self, bytes: usize) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let pending_bytes_max = inner.config.get().pending_bytes_max();
        self.wait_for_writes(|state| {
            state.queue.has_room(bytes, pending_bytes_max) || state.closed
        })
        .await;
        inner.state.borrow().check_writable(&inner.dir)
    }

    /// Bytes appended but not yet written to their files.
    pub fn write_queue_bytes(&self) -> usize {
        self.inner.state.borrow().queue.pending_bytes
    }

    /// Waits until everything appended before the call is written to its file (no fsync).
    pub async fn flush(&self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let target = inner.state.borrow().queue.ops_enqueued;
        // A seal leaves the queue as it starts: wait for it to end too.
        self.wait_for_writes(|state| {
            state.queue.ops_done >= target && state.queue.sealing.is_none()
        })
        .await;
        inner.state.borrow().check_done(&inner.dir, target)
    }

    /// Wakes the writer and waits until `done` holds, the log failed or its writer stopped.
    async fn wait_for_writes(&self, mut done: impl FnMut(&State) -> bool) {
        let inner = &*self.inner;
        inner.state.borrow_mut().queue.want_written();
        inner.signals.writer.notify_all();
        inner
            .signals
            .progress
            .wait_until(|| {
                let state = inner.state.borrow();
                done(&state) || state.failed.is_some() || inner.signals.shutdown.get()
            })
            .await;
    }
    /// Flushes, syncs and records a clean shutdown so that the next open skips recovery.
    /// Appends fail with `StorageError::Closed` afterwards. Idempotent; a close that was
    /// cancelled or failed part-way can be called again.
    pub async fn close(&self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        {
            let mut state = inner.state.borrow_mut();
            if state.closed_cleanly {
                return Ok(());
            }
            if let Some(reason) = &state.failed {
                return Err(inner.failed_error(reason));
            }
            state.closed = true;
        }
        self.flush().await?;
        let (base_offset, log_end_offset, size_bytes, index_bytes, time_index_bytes) = {
            let mut state = inner.state.borrow_mut();
            let log_end_offset = state.log_end_offset;
            let active = state.active_mut();
            active.complete_time_index();
            (
                active.base_offset,
                log_end_offset,
                active.size_bytes,
                active.index.encode(),
                active.time_index.encode(),
            )
        };
        let file = inner.segment_file(base_offset).await?;
        file.truncate(size_bytes).await?;
        self.sync().await?;
        file.fdatasync().await?;
        write_indexes(&inner.dir, base_offset, index_bytes, time_index_bytes).await?;
        let snapshot = {
            let state = inner.state.borrow();
            Snapshot {
                offset: log_end_offset,
                bytes: ProducerSnapshot::encode(&state.producers, log_end_offset),
            }
        };
        inner.write_snapshot(snapshot).await?;
        inner.persist_epochs().await?;
        let checkpoint = CleanShutdown {
            log_end_offset,
            active_base_offset: base_offset,
            active_size_bytes: size_bytes,
        };
        write_clean_shutdown(&inner.dir, &checkpoint).await?;
        sync_dir(&inner.dir).await?;
        inner.state.borrow_mut().closed_cleanly = true;
        inner.signals.shutdown.set(true);
        inner.signals.writer.notify_all();
        inner.cache.remove_log(inner.log_id);
        Ok(())
    }

    /// Removes every file of the log and its directory.
    pub async fn delete(self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        inner.state.borrow_mut().closed = true;
        inner.signals.shutdown.set(true);
        inner.signals.writer.notify_all();
        inner
            .signals
            .progress
            .wait_until(|| {
                let state = inner.state.borrow();
                state.queue.writes_in_flight == 0
                    && state.queue.sealing.is_none()
                    && !state.sync_in_flight
            })
            .await;
        // A leader-epoch checkpoint write in flight ends before the directory goes; later
        // ones see the shutdown and write nothing.
        inner.epoch_checkpoint.wait_idle().await;
        inner.cache.remove_log(inner.log_id);
        std::fs::remove_dir_all(&inner.dir)
            .map_err(|e| StorageError::io("remove dir", &inner.dir, e))
    }
}

/// Starts a new active segment at `log_end_offset`; the old one is sealed by the writer.
fn roll(state: &mut State, log_end_offset: i64) {
    let old = state.active_mut();
    old.complete_time_index();
    let segment_base_offset = old.base_offset;
    tracing::debug!(segment_base_offset, log_end_offset, "rolling segment");
    let snapshot = Snapshot {
        offset: log_end_offset,
        bytes: ProducerSnapshot::encode(&state.producers, log_end_offset),
    };
    state.queue.push_seal(segment_base_offset, snapshot);
    state.segments.push(Segment::new(log_end_offset, None));
}
