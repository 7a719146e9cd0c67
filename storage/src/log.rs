//! The partition log: an ordered list of segments, the last one active, with a write-behind
//! queue in front of the files.
//!
//! Data path of an append: validate every batch (nothing stored if one is bad) → assign offsets
//! in the header copy → copy the batch once into the tail chunk of the write queue → the writer
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
//! ops_enqueued`, and `ops_done` moves past an op only once every op before it is done too;
//! writes in flight never share a block, a seal is alone in flight, and at most
//! `WRITES_IN_FLIGHT_MAX` writes and one fdatasync are in flight; no `RefCell` borrow is
//! held across an `.await`; after a failed write or fdatasync `failed` is set and never cleared
//! (appends, flushes and syncs then fail with `StorageError::Failed`).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};

use bytes::{Bytes, BytesMut};
use glommio::io::DmaBuffer;

use crate::batch::{
    BatchError, BatchHeader, BatchIter, BASE_OFFSET_AT, BATCH_BYTES_MAX, BATCH_HEADER_BYTES,
    LEADER_EPOCH_AT,
};
use crate::cache::BatchCache;
use crate::error::{AppendError, ReadError, StorageError};
use crate::io::{
    align_down, align_up, read_small_file, sync_dir, write_small_file, IoMode, SegmentFile,
    BLOCK_BYTES,
};
use crate::producer_state::{ProducerSnapshot, ProducerTable, Verdict};
use crate::recovery::{
    check_tail, load_indexes, read_clean_shutdown, scan_segment, write_clean_shutdown,
    write_indexes, CleanShutdown, CLEAN_SHUTDOWN_FILE,
};
use crate::retention::{expired_prefix, Retention, SegmentAge};
use crate::segment::{
    parse_segment_file_name, segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    SPARE_SUFFIX, TIMESTAMP_NONE, TIME_INDEX_SUFFIX,
};

/// Bytes that may wait in the write queue, in units of `write_buffer_bytes_max`; beyond it
/// appends get `StorageError::WriteBufferFull` (backpressure instead of unbounded memory).
const PENDING_BUFFERS_MAX: usize = 8;
/// Smallest chunk allocated for the write queue; chunks grow while the disk is busy.
const CHUNK_BYTES_MIN: usize = 64 << 10;
/// Largest read issued at once when looking for batches (page-cache reads are fastest at
/// 64–256 KiB on the machines measured, but a fetch wants its bytes in one piece).
const READ_WINDOW_BYTES_MAX: usize = 8 << 20;
/// Segment files grow in allocated steps of this size (see `SegmentFile::allocate_to`).
const ALLOCATION_STEP_BYTES: u64 = 32 << 20;
/// Deleted segment files a log keeps for reuse by new segments.
const SPARES_MAX: usize = 2;
/// Chunk writes a log keeps in flight at once (direct mode): with one, the disk idles while
/// each completion travels back and the next write is submitted. Measured from the shard's
/// CPU, 1 MiB O_DIRECT writes gave 1.42-1.6 GB/s one at a time and 1.9-2.07 GB/s two at a
/// time; four gave no more than two.
const WRITES_IN_FLIGHT_MAX: usize = 2;
/// Direct mode reads ahead for a sequential reader only when at least this much of the
/// segment is on disk past its next read; closer to the end, the write cache serves it.
const READ_AHEAD_BYTES_MIN: u64 = 64 << 10;
/// Upper bound on `max_bytes` of one read (Kafka's fetch.max.bytes default is 50 MiB).
const READ_BYTES_MAX: usize = 64 << 20;
/// Upper bound on `write_buffer_bytes_max`.
const WRITE_BUFFER_BYTES_MAX: usize = 64 << 20;
/// Producer-state snapshots a log keeps: the newest, and one to fall back on should the
/// newest be damaged.
const SNAPSHOTS_KEPT: usize = 2;
/// Producers a snapshot file may describe (about 100 bytes each); a larger file is taken for
/// damage and the state is rebuilt from the log instead.
const SNAPSHOT_PRODUCERS_MAX: u64 = 1 << 21;
/// Bytes read per step when the producer state is rebuilt from the log.
const PRODUCER_REPLAY_WINDOW_BYTES: usize = 1 << 20;

const _: () = assert!(CHUNK_BYTES_MIN % BLOCK_BYTES == 0);
const _: () = assert!(READ_BYTES_MAX >= BATCH_BYTES_MAX);

thread_local! {
    /// Writes in flight over all logs of this thread's shard. A log's first write always
    /// starts; its second only while the shard has fewer than `WRITES_IN_FLIGHT_MAX` in
    /// flight: with several busy logs the disk is kept busy already, and deeper queues only
    /// raised latency (4 partitions: p99.9 4.2-4.8 -> 7.6-10.4 ms, same throughput). A log
    /// refused a second write asks again when its own write completes, not when another's does.
    static SHARD_WRITES_IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
}

/// Configuration of one partition log (Kafka names in the comments).
#[derive(Clone, Debug)]
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
    config: LogConfig,
    cache: Rc<BatchCache>,
    log_id: u64,
    state: RefCell<State>,
    signals: Rc<Signals>,
    disk_reads: Cell<DiskReads>,
    disk_writes: Cell<DiskWrites>,
    /// `.spare` files: `.log` files of segments retention deleted, for new segments to
    /// overwrite. Freeing a file's blocks costs the file system (and, mounted with `discard`,
    /// the disk) far more than renaming it; overwriting allocated blocks spares allocation.
    spares: RefCell<Vec<PathBuf>>,
    /// Offsets of the producer-state snapshots on disk, ascending.
    snapshots: RefCell<Vec<i64>>,
}

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
}

impl Inner {
    fn count_disk_read(&self, bytes: usize, ahead: bool) {
        let reads = self.disk_reads.get();
        self.disk_reads.set(DiskReads {
            count: reads.count + 1,
            bytes: reads.bytes + bytes as u64,
            ahead: reads.ahead + u64::from(ahead),
        });
    }
}

/// Wake-ups between the log's callers and its writer task.
#[derive(Default)]
struct Signals {
    /// The writer waits here for work.
    writer: Event,
    /// Flush, sync and read callers wait here for ops to complete.
    progress: Event,
    shutdown: Cell<bool>,
}

/// A set of wakers woken together; waiters re-check their condition (single-threaded, so no
/// wake-up can be lost between the check and the registration).
#[derive(Default)]
struct Event {
    wakers: RefCell<Vec<Waker>>,
}

impl Event {
    fn notify(&self) {
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for waker in wakers {
            waker.wake();
        }
    }

    async fn wait_until(&self, mut ready: impl FnMut() -> bool) {
        futures_lite::future::poll_fn(|cx| {
            if ready() {
                return Poll::Ready(());
            }
            let mut wakers = self.wakers.borrow_mut();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}

struct State {
    /// Ordered by base offset; never empty; the last one is active.
    segments: Vec<Segment>,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Every batch below this offset has had its write completed (O_DIRECT write done in
    /// direct mode, copied into the page cache in buffered mode): what a crash of the
    /// process cannot take back. `written_end_offset <= log_end_offset`.
    written_end_offset: i64,
    /// Every batch below this offset was written before an fdatasync that completed began:
    /// what a crash of the machine cannot take back. `synced_end_offset <= written_end_offset`.
    synced_end_offset: i64,
    queue: VecDeque<WriteOp>,
    ops_enqueued: u64,
    ops_done: u64,
    ops_synced: u64,
    /// Ops taken by the writer and not yet complete (a seal is always alone).
    writes_in_flight: usize,
    sync_in_flight: bool,
    /// Files written since the last fdatasync started.
    dirty_files: Vec<Rc<SegmentFile>>,
    /// Appended bytes not yet written.
    pending_bytes: usize,
    next_chunk_bytes: usize,
    failed: Option<String>,
    /// Appends are refused (close or delete started).
    closed: bool,
    /// `close` finished: the clean-shutdown checkpoint is written.
    closed_cleanly: bool,
    /// Direct mode: the read-ahead in flight, if any (one per log).
    read_ahead: Option<ReadAhead>,
    /// Idempotent producers and their last batches, as of `log_end_offset`.
    producers: ProducerTable,
}

/// Bytes `[position, position + len)` of a segment, being read ahead of a reader.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ReadAhead {
    segment_base_offset: i64,
    position: u64,
    len: usize,
}

impl ReadAhead {
    fn covers(&self, segment_base_offset: i64, position: u64) -> bool {
        self.segment_base_offset == segment_base_offset
            && self.position <= position
            && position < self.position + self.len as u64
    }
}

enum WriteOp {
    Data(Chunk),
    /// Finish a segment that is no longer active: drop padding, fdatasync, write its indexes
    /// and the producer-state snapshot taken when it was rolled.
    Seal {
        segment_base_offset: i64,
        op_seq: u64,
        snapshot: Snapshot,
    },
}

/// A producer-state snapshot as of `offset`, encoded when the segment before it was rolled.
struct Snapshot {
    offset: i64,
    bytes: Vec<u8>,
}

impl WriteOp {
    fn segment_base_offset(&self) -> i64 {
        match self {
            WriteOp::Data(chunk) => chunk.segment_base_offset,
            WriteOp::Seal {
                segment_base_offset,
                ..
            } => *segment_base_offset,
        }
    }
}

/// A run of appended bytes of one segment, written with one write.
struct Chunk {
    segment_base_offset: i64,
    /// File position of the chunk's first byte (block aligned in direct mode).
    position: u64,
    /// Valid bytes, including `head_bytes`.
    len: usize,
    /// Direct mode: bytes copied from the previous partial block, already written once.
    head_bytes: usize,
    /// Allocation size, what the chunk costs in memory.
    capacity_bytes: usize,
    op_seq: u64,
    buf: ChunkBuf,
    /// Its write completed; it leaves the queue once every op before it has.
    written: bool,
    /// The offset after the last batch whose last byte is in this chunk, or -1 if no batch
    /// ends here: once the chunk is retired, every batch below it is written.
    batches_end_offset: i64,
}

enum ChunkBuf {
    Dma(DmaBuffer),
    Heap(Vec<u8>),
    /// Direct write in flight; the buffer stays readable (and goes to the cache afterwards).
    InFlightDma(Rc<DmaBuffer>),
    /// Buffered write in flight; glommio owns the buffer until the write completes.
    InFlightHeap,
}

impl Chunk {
    fn room_bytes(&self) -> usize {
        match &self.buf {
            ChunkBuf::Dma(buf) => buf.len() - self.len,
            ChunkBuf::Heap(buf) => buf.capacity() - buf.len(),
            ChunkBuf::InFlightDma(_) | ChunkBuf::InFlightHeap => 0,
        }
    }

    fn bytes(&self) -> Option<&[u8]> {
        match &self.buf {
            ChunkBuf::Dma(buf) => Some(&buf.as_bytes()[..self.len]),
            ChunkBuf::Heap(buf) => Some(&buf[..]),
            ChunkBuf::InFlightDma(buf) => Some(&buf.as_bytes()[..self.len]),
            ChunkBuf::InFlightHeap => None,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        match &mut self.buf {
            ChunkBuf::Dma(buf) => {
                buf.as_bytes_mut()[self.len..self.len + bytes.len()].copy_from_slice(bytes)
            }
            ChunkBuf::Heap(buf) => buf.extend_from_slice(bytes),
            ChunkBuf::InFlightDma(_) | ChunkBuf::InFlightHeap => {
                unreachable!("push_bytes only fills chunks that are not in flight")
            }
        }
        self.len += bytes.len();
    }
}

/// One queue op taken by the writer.
enum Job {
    Direct {
        chunk: ChunkInfo,
        buf: Rc<DmaBuffer>,
    },
    Buffered {
        chunk: ChunkInfo,
        buf: Vec<u8>,
    },
    Seal {
        segment_base_offset: i64,
        snapshot: Snapshot,
    },
}

#[derive(Clone, Copy)]
struct ChunkInfo {
    op_seq: u64,
    segment_base_offset: i64,
    position: u64,
    len: usize,
    capacity_bytes: usize,
}

impl State {
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
        Ok(())
    }

    /// Ok once the first `target` ops are done; otherwise why they never will be (the log
    /// failed, or its writer stopped because the log was closed or deleted).
    fn check_done(&self, dir: &Path, target: u64) -> Result<(), StorageError> {
        if self.ops_done >= target {
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

    fn writer_has_work(&self) -> bool {
        self.failed.is_none() && self.next_job().is_some()
    }

    /// The queue index of the op the writer may start now: the first one not taken yet, if
    /// nothing is in flight; with writes in flight, only a direct chunk that starts on a fresh
    /// block of a segment whose file exists (so it shares no block with an earlier write and
    /// needs no file created), and never a seal.
    fn next_job(&self) -> Option<usize> {
        let index = self.queue.iter().position(|op| match op {
            WriteOp::Data(chunk) => {
                !chunk.written && matches!(chunk.buf, ChunkBuf::Dma(_) | ChunkBuf::Heap(_))
            }
            WriteOp::Seal { .. } => true,
        })?;
        if self.writes_in_flight == 0 {
            return Some(index);
        }
        if self.writes_in_flight >= WRITES_IN_FLIGHT_MAX
            || SHARD_WRITES_IN_FLIGHT.get() >= WRITES_IN_FLIGHT_MAX
        {
            return None;
        }
        match &self.queue[index] {
            WriteOp::Data(chunk)
                if chunk.head_bytes == 0
                    && matches!(chunk.buf, ChunkBuf::Dma(_))
                    && self
                        .segment_slot(chunk.segment_base_offset)
                        .is_some_and(|slot| self.segments[slot].file.is_some()) =>
            {
                Some(index)
            }
            _ => None,
        }
    }

    /// Sequence number for the next op put in the queue (ops complete in this order).
    fn next_op_seq(&mut self) -> u64 {
        self.ops_enqueued += 1;
        self.ops_enqueued
    }

    /// Copies `bytes`, which belong at `position` of the active segment, into the write queue.
    /// Makes sure one chunk takes the next `bytes` of the active segment whole, when a chunk
    /// can hold them: appends push a batch's header and body separately, and a chunk sized
    /// for the header alone split every request larger than a chunk into two writes, the
    /// second a small extending write queued behind the first (it tripled acks=all latency
    /// for 64 KiB requests).
    fn reserve(&mut self, config: &LogConfig, position: u64, bytes: usize) {
        if bytes + BLOCK_BYTES > config.write_buffer_bytes_max {
            return;
        }
        let segment_base_offset = self.active().base_offset;
        let (room_bytes, capacity_bytes) = match self.queue.back() {
            Some(WriteOp::Data(c)) if c.segment_base_offset == segment_base_offset => {
                (c.room_bytes(), c.capacity_bytes)
            }
            _ => (0, 0),
        };
        if room_bytes >= bytes {
            return;
        }
        let largest = align_up(config.write_buffer_bytes_max as u64) as usize;
        if room_bytes > 0 && config.io_mode == IoMode::Direct && capacity_bytes == largest {
            // The disk is behind (chunks grew to the largest size): fill this chunk to its
            // end and go on in a new one starting on a fresh block, which can be written
            // while this one is in flight (a chunk left partly empty would make the next
            // one rewrite its last block, and wait for it).
            return;
        }
        if room_bytes > 0 {
            // A chunk still filling is left behind: appends outrun the disk, as when a chunk
            // fills up, so let the next chunk be larger.
            if let Some(WriteOp::Data(c)) = self.queue.back() {
                self.next_chunk_bytes = (c.capacity_bytes * 2).min(config.write_buffer_bytes_max);
            }
        }
        let chunk = self.new_chunk(config, position, bytes);
        self.queue.push_back(WriteOp::Data(chunk));
    }

    fn push_bytes(&mut self, config: &LogConfig, mut position: u64, mut bytes: &[u8]) {
        let segment_base_offset = self.active().base_offset;
        while !bytes.is_empty() {
            let fillable = matches!(
                self.queue.back(),
                Some(WriteOp::Data(c))
                    if c.segment_base_offset == segment_base_offset && c.room_bytes() > 0
            );
            if !fillable {
                let chunk = self.new_chunk(config, position, bytes.len());
                self.queue.push_back(WriteOp::Data(chunk));
            }
            let Some(WriteOp::Data(chunk)) = self.queue.back_mut() else {
                unreachable!("a fillable data chunk was just ensured at the back")
            };
            debug_assert_eq!(chunk.position + chunk.len as u64, position);
            let take_bytes = chunk.room_bytes().min(bytes.len());
            chunk.push(&bytes[..take_bytes]);
            if chunk.room_bytes() == 0 {
                // The disk is slower than appends: let the next chunk be larger.
                self.next_chunk_bytes =
                    (chunk.capacity_bytes * 2).min(config.write_buffer_bytes_max);
            }
            position += take_bytes as u64;
            bytes = &bytes[take_bytes..];
            self.pending_bytes += take_bytes;
        }
    }

    fn new_chunk(&mut self, config: &LogConfig, position: u64, wanted_bytes: usize) -> Chunk {
        let segment_base_offset = self.active().base_offset;
        let size_bytes_max = align_up(config.write_buffer_bytes_max as u64) as usize;
        match config.io_mode {
            IoMode::Buffered => {
                let capacity_bytes = wanted_bytes.clamp(
                    self.next_chunk_bytes.min(config.write_buffer_bytes_max),
                    config.write_buffer_bytes_max,
                );
                Chunk {
                    segment_base_offset,
                    position,
                    len: 0,
                    head_bytes: 0,
                    capacity_bytes,
                    op_seq: self.next_op_seq(),
                    buf: ChunkBuf::Heap(Vec::with_capacity(capacity_bytes)),
                    written: false,
                    batches_end_offset: -1,
                }
            }
            IoMode::Direct => {
                // The chunk restarts at the partial last block and rewrites its bytes unchanged:
                // a crash that tears that rewrite leaves each sector old or new, and both hold
                // the same earlier (possibly synced) bytes.
                let block_position = align_down(position);
                let head_bytes = (position - block_position) as usize;
                let mut head = [0u8; BLOCK_BYTES];
                self.copy_tail(segment_base_offset, block_position, &mut head[..head_bytes]);
                let capacity_bytes = align_up(
                    (head_bytes + wanted_bytes)
                        .clamp(self.next_chunk_bytes.min(size_bytes_max), size_bytes_max)
                        as u64,
                ) as usize;
                // Heap-backed aligned memory: glommio's io arena is tiny and these buffers live
                // on in the cache.
                // Not zeroed here: only the padding past the data is, when the chunk is
                // written (zeroing whole chunks cost ~8% of a shard at 7 M msgs/s).
                let mut buf = glommio::allocate_dma_buffer_global(capacity_bytes);
                buf.as_bytes_mut()[..head_bytes].copy_from_slice(&head[..head_bytes]);
                Chunk {
                    segment_base_offset,
                    position: block_position,
                    len: head_bytes,
                    head_bytes,
                    capacity_bytes,
                    op_seq: self.next_op_seq(),
                    buf: ChunkBuf::Dma(buf),
                    written: false,
                    batches_end_offset: -1,
                }
            }
        }
    }

    /// Direct mode: the bytes `[block_position, block_position + out.len())` of a segment, the
    /// partial last block, from the newest queued chunk of the segment or the segment's copy.
    fn copy_tail(&self, segment_base_offset: i64, block_position: u64, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        for op in self.queue.iter().rev() {
            if let WriteOp::Data(chunk) = op {
                if chunk.segment_base_offset == segment_base_offset {
                    let bytes = chunk.bytes().expect("direct chunks stay readable");
                    let from = (block_position - chunk.position) as usize;
                    out.copy_from_slice(&bytes[from..from + out.len()]);
                    return;
                }
            }
        }
        let slot = self
            .segment_slot(segment_base_offset)
            .expect("active segment exists");
        let tail = &self.segments[slot].tail_block;
        assert_eq!(
            tail.len(),
            out.len(),
            "tail block out of step with the segment size"
        );
        out.copy_from_slice(tail);
    }

    /// Takes the next op the writer may start (see `next_job`).
    fn take_job(&mut self) -> Option<Job> {
        let index = self.next_job()?;
        self.writes_in_flight += 1;
        SHARD_WRITES_IN_FLIGHT.set(SHARD_WRITES_IN_FLIGHT.get() + 1);
        let front = &mut self.queue[index];
        let job = match front {
            WriteOp::Seal {
                segment_base_offset,
                snapshot,
                ..
            } => Job::Seal {
                segment_base_offset: *segment_base_offset,
                snapshot: Snapshot {
                    offset: snapshot.offset,
                    bytes: std::mem::take(&mut snapshot.bytes),
                },
            },
            WriteOp::Data(chunk) => {
                let info = ChunkInfo {
                    op_seq: chunk.op_seq,
                    segment_base_offset: chunk.segment_base_offset,
                    position: chunk.position,
                    len: chunk.len,
                    capacity_bytes: chunk.capacity_bytes,
                };
                if chunk.len * 4 < chunk.capacity_bytes {
                    // Appends are not outrunning the disk: shrink future chunks.
                    self.next_chunk_bytes = (self.next_chunk_bytes / 2).max(CHUNK_BYTES_MIN);
                }
                match std::mem::replace(&mut chunk.buf, ChunkBuf::InFlightHeap) {
                    ChunkBuf::Dma(mut buf) => {
                        // O_DIRECT writes whole blocks: the padding past the data is zeros,
                        // which recovery reads as the end of the segment.
                        let written_bytes = align_up(chunk.len as u64) as usize;
                        buf.as_bytes_mut()[chunk.len..written_bytes].fill(0);
                        buf.trim_to_size(written_bytes);
                        let buf = Rc::new(buf);
                        chunk.buf = ChunkBuf::InFlightDma(buf.clone());
                        Job::Direct { chunk: info, buf }
                    }
                    ChunkBuf::Heap(buf) => Job::Buffered { chunk: info, buf },
                    ChunkBuf::InFlightDma(_) | ChunkBuf::InFlightHeap => {
                        unreachable!("next_job never picks a chunk in flight")
                    }
                }
            }
        };
        Some(job)
    }

    /// Records a completed data write, then retires every written op at the front of the
    /// queue in order. Returns the chunk's buffer for the cache in direct mode.
    fn complete_data(&mut self, info: ChunkInfo, file: &Rc<SegmentFile>) -> Option<Rc<DmaBuffer>> {
        self.end_write();
        if !self.dirty_files.iter().any(|f| Rc::ptr_eq(f, file)) {
            self.dirty_files.push(file.clone());
        }
        let chunk = self
            .queue
            .iter_mut()
            .find_map(|op| match op {
                WriteOp::Data(c) if c.op_seq == info.op_seq => Some(c),
                _ => None,
            })
            .expect("a chunk in flight stays queued");
        chunk.written = true;
        let written = match &chunk.buf {
            ChunkBuf::InFlightDma(buf) => Some(buf.clone()),
            _ => None,
        };
        while let Some(WriteOp::Data(chunk)) = self.queue.front() {
            if !chunk.written {
                break;
            }
            let Some(WriteOp::Data(chunk)) = self.queue.pop_front() else {
                unreachable!("the front was just seen to be a data op")
            };
            self.retire(chunk);
        }
        written
    }

    /// An op taken by `take_job` finished (or failed).
    fn end_write(&mut self) {
        self.writes_in_flight -= 1;
        SHARD_WRITES_IN_FLIGHT.set(SHARD_WRITES_IN_FLIGHT.get() - 1);
    }

    /// A written chunk leaves the queue: its bytes are now the segment's on disk.
    fn retire(&mut self, chunk: Chunk) {
        self.ops_done = chunk.op_seq;
        if chunk.batches_end_offset >= 0 {
            self.written_end_offset = chunk.batches_end_offset;
        }
        self.pending_bytes -= chunk.len - chunk.head_bytes;
        let end = chunk.position + chunk.len as u64;
        let more_queued = self.queue.iter().any(
            |op| matches!(op, WriteOp::Data(c) if c.segment_base_offset == chunk.segment_base_offset),
        );
        let slot = self
            .segment_slot(chunk.segment_base_offset)
            .expect("written segment exists");
        let segment = &mut self.segments[slot];
        segment.written_bytes = end;
        if let ChunkBuf::InFlightDma(buf) = &chunk.buf {
            if !more_queued {
                let from = (align_down(end) - chunk.position) as usize;
                segment.tail_block.clear();
                segment
                    .tail_block
                    .extend_from_slice(&buf.as_bytes()[from..chunk.len]);
            }
        }
    }

    fn complete_seal(&mut self) {
        let Some(WriteOp::Seal {
            segment_base_offset,
            op_seq,
            ..
        }) = self.queue.pop_front()
        else {
            unreachable!("the completed op is the front seal op")
        };
        self.ops_done = op_seq;
        self.end_write();
        if let Some(slot) = self.segment_slot(segment_base_offset) {
            self.segments[slot].tail_block = Vec::new();
        }
    }

    /// Copies `[from, to)` of a segment's queued (not yet written) bytes into `out`.
    /// `Err(())` if part of it is inside a buffered write in flight (wait and retry).
    fn copy_queued(
        &self,
        segment_base_offset: i64,
        mut from: u64,
        to: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), ()> {
        while from < to {
            let chunk = self.queue.iter().rev().find_map(|op| match op {
                WriteOp::Data(c)
                    if c.segment_base_offset == segment_base_offset
                        && c.position <= from
                        && from < c.position + c.len as u64 =>
                {
                    Some(c)
                }
                _ => None,
            });
            let Some(chunk) = chunk else { return Err(()) };
            let bytes = chunk.bytes().ok_or(())?;
            let at = (from - chunk.position) as usize;
            let end = (to - chunk.position).min(chunk.len as u64) as usize;
            out.extend_from_slice(&bytes[at..end]);
            from += (end - at) as u64;
        }
        Ok(())
    }
}

/// How to get a range of a segment's bytes.
enum ReadPlan {
    Done(Bytes),
    /// The range is in a buffered write in flight: wait for ops_done to move past this.
    Wait(u64),
    /// The range starts inside this read-ahead: wait for it to land in the cache.
    WaitReadAhead(ReadAhead),
    File {
        file: Rc<SegmentFile>,
        file_bytes: usize,
        queued: Vec<u8>,
    },
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

    /// The file of a segment, created (and made durable in the directory) on first use.
    async fn segment_file(
        &self,
        segment_base_offset: i64,
    ) -> Result<Rc<SegmentFile>, StorageError> {
        let existing = {
            let state = self.state.borrow();
            let slot = state.segment_slot(segment_base_offset);
            slot.and_then(|slot| state.segments[slot].file.clone())
        };
        if let Some(file) = existing {
            return Ok(file);
        }
        let path = segment_path(&self.dir, segment_base_offset, LOG_SUFFIX);
        self.reuse_spare(&path);
        let file = Rc::new(SegmentFile::open(&path, self.config.io_mode).await?);
        sync_dir(&self.dir).await?;
        let mut state = self.state.borrow_mut();
        if let Some(slot) = state.segment_slot(segment_base_offset) {
            state.segments[slot].file = Some(file.clone());
        }
        Ok(file)
    }

    /// How far ahead of its writes a segment file is allocated: `ALLOCATION_STEP_BYTES`, or
    /// a whole segment when segments are smaller.
    fn allocation_step(&self) -> u64 {
        align_up(self.config.segment_bytes_max).min(ALLOCATION_STEP_BYTES)
    }

    /// Makes a spare file the new segment file `path`, unless `path` exists already. No
    /// `.await` between the check and the rename, so two callers never both rename onto it.
    /// The spare's old batches past what the new segment writes are never read: reads stop
    /// at the segment's size, sealing and closing truncate the file to it, and recovery
    /// stops at the first batch whose offset is below the segment's (a spare always held
    /// older offsets of the same partition).
    fn reuse_spare(&self, path: &Path) {
        if path.exists() {
            return;
        }
        let Some(spare) = self.spares.borrow_mut().pop() else {
            return;
        };
        if let Err(error) = std::fs::rename(&spare, path) {
            tracing::warn!(spare = %spare.display(), %error, "could not reuse a spare segment file");
        }
    }

    /// Takes the next op the writer may start, noting how many are in flight.
    fn take_job(&self) -> Option<Job> {
        let mut state = self.state.borrow_mut();
        let job = state.take_job()?;
        let writes = self.disk_writes.get();
        self.disk_writes.set(DiskWrites {
            most_in_flight: writes.most_in_flight.max(state.writes_in_flight),
            ..writes
        });
        Some(job)
    }

    fn count_disk_write(&self, bytes: usize) {
        let writes = self.disk_writes.get();
        self.disk_writes.set(DiskWrites {
            count: writes.count + 1,
            bytes: writes.bytes + bytes as u64,
            ..writes
        });
    }

    /// Runs an op the writer took. Its place in flight is given back whether it succeeds
    /// (by `complete_*`) or fails (here).
    async fn run_job(&self, job: Job) -> Result<(), StorageError> {
        let result = self.write_job(job).await;
        if result.is_err() {
            self.state.borrow_mut().end_write();
        }
        result
    }

    /// The chunk's segment file, allocated past the `bytes` about to be written at the
    /// chunk's position; counts the write.
    async fn file_for_write(
        &self,
        chunk: &ChunkInfo,
        bytes: usize,
    ) -> Result<Rc<SegmentFile>, StorageError> {
        let file = self.segment_file(chunk.segment_base_offset).await?;
        file.allocate_to(chunk.position + bytes as u64, self.allocation_step())
            .await?;
        self.count_disk_write(bytes);
        Ok(file)
    }

    async fn write_job(&self, job: Job) -> Result<(), StorageError> {
        match job {
            Job::Direct { chunk, buf } => {
                let file = self.file_for_write(&chunk, buf.len()).await?;
                file.write_direct(buf, chunk.position).await?;
                let written = self.state.borrow_mut().complete_data(chunk, &file);
                if let Some(buf) = written {
                    self.cache.insert(
                        self.log_id,
                        chunk.segment_base_offset,
                        chunk.position,
                        chunk.len,
                        chunk.capacity_bytes,
                        buf,
                    );
                }
            }
            Job::Buffered { chunk, buf } => {
                let file = self.file_for_write(&chunk, buf.len()).await?;
                file.write_buffered(buf, chunk.position).await?;
                self.state.borrow_mut().complete_data(chunk, &file);
            }
            Job::Seal {
                segment_base_offset,
                snapshot,
            } => {
                self.seal_segment(segment_base_offset, snapshot).await?;
                self.state.borrow_mut().complete_seal();
            }
        }
        Ok(())
    }

    /// Makes a segment's files final: `.log` without padding and durable, indexes written,
    /// then the producer-state snapshot as of the segment's end (everything it describes is
    /// durable by then).
    async fn seal_segment(
        &self,
        segment_base_offset: i64,
        snapshot: Snapshot,
    ) -> Result<(), StorageError> {
        let file = self.segment_file(segment_base_offset).await?;
        let (size_bytes, index_bytes, time_index_bytes) = {
            let state = self.state.borrow();
            let slot = state
                .segment_slot(segment_base_offset)
                .expect("sealed segment exists");
            let segment = &state.segments[slot];
            (
                segment.size_bytes,
                segment.index.encode(),
                segment.time_index.encode(),
            )
        };
        // Direct mode pads the last block, and a reused spare holds older bytes past the end.
        file.truncate(size_bytes).await?;
        file.fdatasync().await?;
        write_indexes(
            &self.dir,
            segment_base_offset,
            index_bytes,
            time_index_bytes,
        )
        .await?;
        self.write_snapshot(snapshot).await
    }

    /// Writes a producer-state snapshot and makes its name durable, then removes all but the
    /// newest `SNAPSHOTS_KEPT` (an old one left by a crash is harmless: the newest is used).
    async fn write_snapshot(&self, snapshot: Snapshot) -> Result<(), StorageError> {
        let path = segment_path(&self.dir, snapshot.offset, SNAPSHOT_SUFFIX);
        write_small_file(&path, snapshot.bytes).await?;
        sync_dir(&self.dir).await?;
        let stale: Vec<i64> = {
            let mut snapshots = self.snapshots.borrow_mut();
            if let Err(slot) = snapshots.binary_search(&snapshot.offset) {
                snapshots.insert(slot, snapshot.offset);
            }
            let stale_count = snapshots.len().saturating_sub(SNAPSHOTS_KEPT);
            snapshots.drain(..stale_count).collect()
        };
        for offset in stale {
            remove_file_if_present(&segment_path(&self.dir, offset, SNAPSHOT_SUFFIX))?;
        }
        Ok(())
    }

    /// Plans reading `[position, position + len)` of a segment; copies what is in memory now.
    /// In direct mode a cached run of at least `need` bytes from `position` may answer alone
    /// (a shorter read; callers need only `need`).
    fn plan_read(
        &self,
        segment_base_offset: i64,
        position: u64,
        need: usize,
        len: usize,
    ) -> Result<ReadPlan, StorageError> {
        let state = self.state.borrow();
        let Some(slot) = state.segment_slot(segment_base_offset) else {
            return Err(StorageError::Closed {
                path: self.dir.clone(),
            });
        };
        let segment = &state.segments[slot];
        let end = position + len as u64;
        if end > segment.size_bytes {
            let reason = format!("read to {end} past segment end {}", segment.size_bytes);
            return Err(StorageError::corrupt(
                segment_path(&self.dir, segment_base_offset, LOG_SUFFIX),
                reason,
            ));
        }
        let written = segment.written_bytes;
        let file_end = end.min(written);
        let mut queued = Vec::new();
        if end > written {
            queued.reserve((end - position.max(written)) as usize);
            if state
                .copy_queued(segment_base_offset, position.max(written), end, &mut queued)
                .is_err()
            {
                return Ok(ReadPlan::Wait(state.ops_done));
            }
        }
        if position >= file_end {
            return Ok(ReadPlan::Done(Bytes::from(queued)));
        }
        let file_bytes = (file_end - position) as usize;
        if self.config.io_mode == IoMode::Direct {
            let mut out = Vec::with_capacity(len);
            let cached = self.cache.copy_prefix(
                self.log_id,
                segment_base_offset,
                position,
                file_bytes,
                &mut out,
            );
            if cached == file_bytes {
                out.extend_from_slice(&queued);
                return Ok(ReadPlan::Done(Bytes::from(out)));
            }
            if let Some(ahead) = state.read_ahead {
                if ahead.covers(segment_base_offset, position + cached as u64) {
                    return Ok(ReadPlan::WaitReadAhead(ahead));
                }
            }
            if cached >= need {
                return Ok(ReadPlan::Done(Bytes::from(out)));
            }
        }
        let file = segment
            .file
            .clone()
            .expect("a segment with written bytes has a file");
        Ok(ReadPlan::File {
            file,
            file_bytes,
            queued,
        })
    }

    /// Bytes `[position, position + len)` of a segment, from the write queue, the cache or
    /// disk; in direct mode possibly fewer, but at least `need`, when the cache holds those.
    async fn read_segment(
        &self,
        segment_base_offset: i64,
        position: u64,
        need: usize,
        len: usize,
    ) -> Result<Bytes, StorageError> {
        loop {
            match self.plan_read(segment_base_offset, position, need, len)? {
                ReadPlan::Done(bytes) => return Ok(bytes),
                ReadPlan::WaitReadAhead(ahead) => {
                    self.signals
                        .progress
                        .wait_until(|| self.state.borrow().read_ahead != Some(ahead))
                        .await;
                }
                ReadPlan::Wait(ops_done) => {
                    self.signals
                        .progress
                        .wait_until(|| {
                            let state = self.state.borrow();
                            state.ops_done != ops_done
                                || state.failed.is_some()
                                || self.signals.shutdown.get()
                        })
                        .await;
                    if let Some(reason) = &self.state.borrow().failed {
                        // The write the range waited for will never complete.
                        return Err(self.failed_error(reason));
                    }
                    if self.signals.shutdown.get() {
                        return Err(StorageError::Closed {
                            path: self.dir.clone(),
                        });
                    }
                }
                ReadPlan::File {
                    file,
                    file_bytes,
                    queued,
                } => {
                    let on_disk = file.read_exact(position, file_bytes).await?;
                    self.count_disk_read(file_bytes, false);
                    if queued.is_empty() {
                        return Ok(on_disk);
                    }
                    let mut joined = BytesMut::with_capacity(len);
                    joined.extend_from_slice(&on_disk);
                    joined.extend_from_slice(&queued);
                    return Ok(joined.freeze());
                }
            }
        }
    }

    /// A segment as retention sees it. Like Kafka, a segment whose batches carried no
    /// timestamp is as old as its file's last modification (or, failing that, new).
    fn segment_age(&self, segment: &Segment, now_ms: i64) -> SegmentAge {
        let largest_timestamp_ms = if segment.max_timestamp >= 0 {
            segment.max_timestamp
        } else {
            std::fs::metadata(segment_path(&self.dir, segment.base_offset, LOG_SUFFIX))
                .and_then(|metadata| metadata.modified())
                .ok()
                .and_then(|modified| modified.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(now_ms, |since| since.as_millis() as i64)
        };
        SegmentAge {
            size_bytes: segment.size_bytes,
            largest_timestamp_ms,
        }
    }

    fn segment_size_bytes(&self, segment_base_offset: i64) -> Result<u64, StorageError> {
        let state = self.state.borrow();
        match state.segment_slot(segment_base_offset) {
            Some(slot) => Ok(state.segments[slot].size_bytes),
            None => Err(StorageError::Closed {
                path: self.dir.clone(),
            }),
        }
    }

    fn next_segment_base(&self, segment_base_offset: i64) -> Option<i64> {
        let state = self.state.borrow();
        let slot = state
            .segments
            .partition_point(|s| s.base_offset <= segment_base_offset);
        state.segments.get(slot).map(|s| s.base_offset)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.signals.shutdown.set(true);
        self.signals.writer.notify();
        self.signals.progress.notify();
        self.cache.remove_log(self.log_id);
    }
}

/// Starts queued ops in order as soon as the writer may (see `State::next_job`), each as its
/// own task so that a second write can start while the first is in flight. Holds the log only
/// weakly so that dropping every `Log` handle stops it; a write in flight holds it strongly.
async fn writer_task(log: Weak<Inner>, signals: Rc<Signals>) {
    loop {
        signals
            .writer
            .wait_until(|| {
                signals.shutdown.get()
                    || match log.upgrade() {
                        Some(inner) => inner.state.borrow().writer_has_work(),
                        None => true,
                    }
            })
            .await;
        if signals.shutdown.get() {
            break;
        }
        let Some(inner) = log.upgrade() else { break };
        let Some(job) = inner.take_job() else {
            continue;
        };
        glommio::spawn_local(async move {
            if let Err(error) = inner.run_job(job).await {
                inner.latch(&error);
            }
            inner.signals.progress.notify();
            inner.signals.writer.notify();
        })
        .detach();
    }
    signals.progress.notify();
}

/// The one fdatasync round in flight. If its caller's future is dropped mid-way (say, by a
/// request timeout), the files go back to the dirty list and the slot is freed, so the next
/// caller syncs them: cancellation must not make unsynced data look synced nor stall syncs.
struct SyncInFlight<'a> {
    inner: &'a Inner,
    files: Vec<Rc<SegmentFile>>,
    finished: bool,
}

impl Drop for SyncInFlight<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.inner.state.borrow_mut();
        state.sync_in_flight = false;
        for file in self.files.drain(..) {
            if !state.dirty_files.iter().any(|f| Rc::ptr_eq(f, &file)) {
                state.dirty_files.push(file);
            }
        }
        drop(state);
        self.inner.signals.progress.notify();
    }
}

/// A window of one segment's bytes, refilled as a scan moves forward.
struct SegmentReader {
    segment_base_offset: i64,
    position: u64,
    data: Bytes,
    window_bytes: usize,
}

impl SegmentReader {
    fn new(window_bytes: usize) -> Self {
        SegmentReader {
            segment_base_offset: i64::MIN,
            position: 0,
            data: Bytes::new(),
            window_bytes: window_bytes.clamp(BLOCK_BYTES, READ_WINDOW_BYTES_MAX),
        }
    }

    async fn bytes(
        &mut self,
        inner: &Inner,
        segment_base_offset: i64,
        position: u64,
        len: usize,
    ) -> Result<Bytes, StorageError> {
        let covered = self.segment_base_offset == segment_base_offset
            && self.position <= position
            && position + len as u64 <= self.position + self.data.len() as u64;
        if !covered {
            let size_bytes = inner.segment_size_bytes(segment_base_offset)?;
            let available = size_bytes.saturating_sub(position) as usize;
            if available < len {
                let path = segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
                let reason = format!("{len} bytes at {position} past segment end {size_bytes}");
                return Err(StorageError::corrupt(path, reason));
            }
            let want = len.max(self.window_bytes).min(available);
            self.data = inner
                .read_segment(segment_base_offset, position, len, want)
                .await?;
            self.segment_base_offset = segment_base_offset;
            self.position = position;
        }
        let at = (position - self.position) as usize;
        Ok(self.data.slice(at..at + len))
    }

    /// Header of the batch at `position` when the window already holds the whole batch;
    /// `None` otherwise (also at the end of the segment). Never reads.
    fn whole_batch_in_window(
        &self,
        inner: &Inner,
        segment_base_offset: i64,
        position: u64,
    ) -> Result<Option<BatchHeader>, StorageError> {
        let window_end = self.position + self.data.len() as u64;
        if self.segment_base_offset != segment_base_offset
            || position < self.position
            || position + BATCH_HEADER_BYTES as u64 > window_end
        {
            return Ok(None);
        }
        let at = (position - self.position) as usize;
        let header = BatchHeader::parse(&self.data[at..at + BATCH_HEADER_BYTES]).map_err(|e| {
            let path = segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
            StorageError::corrupt(path, format!("at {position}: {e}"))
        })?;
        Ok((position + header.total_bytes() as u64 <= window_end).then_some(header))
    }

    /// Header of the batch at `position`, `None` at the end of the segment.
    async fn header_at(
        &mut self,
        inner: &Inner,
        segment_base_offset: i64,
        position: u64,
    ) -> Result<Option<BatchHeader>, StorageError> {
        let size_bytes = inner.segment_size_bytes(segment_base_offset)?;
        if position >= size_bytes {
            return Ok(None);
        }
        let path = || segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
        if position + BATCH_HEADER_BYTES as u64 > size_bytes {
            return Err(StorageError::corrupt(
                path(),
                format!("partial batch at {position}"),
            ));
        }
        let bytes = self
            .bytes(inner, segment_base_offset, position, BATCH_HEADER_BYTES)
            .await?;
        let header = BatchHeader::parse(&bytes)
            .map_err(|e| StorageError::corrupt(path(), format!("at {position}: {e}")))?;
        if position + header.total_bytes() as u64 > size_bytes {
            return Err(StorageError::corrupt(
                path(),
                format!("batch at {position} past end"),
            ));
        }
        Ok(Some(header))
    }
}

impl Log {
    /// Opens (creating if missing) the log in `dir`, recovering it if the last shutdown was not
    /// clean, and starts its writer task on the current glommio executor.
    pub async fn open(
        dir: PathBuf,
        config: LogConfig,
        cache: Rc<BatchCache>,
    ) -> Result<Log, StorageError> {
        config.check()?;
        // glommio opens directories (for fsync) without the working directory, so a
        // relative path fails with EBADF: work with the absolute path from here on.
        let dir =
            std::path::absolute(&dir).map_err(|e| StorageError::io("resolve dir", &dir, e))?;
        // Blocking directory calls, once per open: glommio has no async mkdir/readdir.
        std::fs::create_dir_all(&dir).map_err(|e| StorageError::io("create dir", &dir, e))?;
        let (bases, spares, snapshots) = list_segment_bases(&dir)?;
        let clean_shutdown = read_clean_shutdown(&dir).await?;
        let checkpoint_path = dir.join(CLEAN_SHUTDOWN_FILE);
        if checkpoint_path.exists() {
            // Gone before anything is appended: a crash from here on must run recovery.
            std::fs::remove_file(&checkpoint_path)
                .map_err(|e| StorageError::io("remove", &checkpoint_path, e))?;
            sync_dir(&dir).await?;
        }
        let segments = open_segments(&dir, &config, &bases, clean_shutdown).await?;
        let log_start_offset = segments[0].base_offset;
        let log_end_offset = segments.last().map_or(log_start_offset, |s| s.next_offset);
        let state = State {
            segments,
            log_start_offset,
            log_end_offset,
            written_end_offset: log_end_offset,
            // Recovery keeps only what the file holds; whether the disk holds it is unknown,
            // but nothing of it is in a cache this process could lose.
            synced_end_offset: log_end_offset,
            queue: VecDeque::new(),
            ops_enqueued: 0,
            ops_done: 0,
            ops_synced: 0,
            writes_in_flight: 0,
            sync_in_flight: false,
            dirty_files: Vec::new(),
            pending_bytes: 0,
            next_chunk_bytes: CHUNK_BYTES_MIN,
            failed: None,
            closed: false,
            closed_cleanly: false,
            read_ahead: None,
            producers: ProducerTable::default(),
        };
        let signals = Rc::new(Signals::default());
        let inner = Rc::new(Inner {
            dir,
            log_id: cache.register_log(),
            config,
            cache,
            state: RefCell::new(state),
            signals: signals.clone(),
            disk_reads: Cell::new(DiskReads::default()),
            disk_writes: Cell::new(DiskWrites::default()),
            spares: RefCell::new(spares),
            snapshots: RefCell::new(Vec::new()),
        });
        glommio::spawn_local(writer_task(Rc::downgrade(&inner), signals)).detach();
        let log = Log { inner };
        log.load_producers(snapshots, wall_clock_ms()).await?;
        Ok(log)
    }

    /// Rebuilds the producer state: the newest valid snapshot at or below the log end (one
    /// above it describes batches a crash took back, and is removed), then every batch after
    /// it, replayed without checks. Producers rebuilt from batches count as active at `now_ms`
    /// (the log keeps no append times), those from the snapshot keep their times.
    async fn load_producers(&self, offsets: Vec<i64>, now_ms: i64) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let (log_start_offset, log_end_offset) = {
            let state = inner.state.borrow();
            (state.log_start_offset, state.log_end_offset)
        };
        let mut kept = Vec::new();
        let mut loaded = None;
        for &offset in offsets.iter().rev() {
            let path = segment_path(&inner.dir, offset, SNAPSHOT_SUFFIX);
            if loaded.is_some() {
                kept.push(offset);
                continue;
            }
            let bytes_max = ProducerSnapshot::bytes_max(SNAPSHOT_PRODUCERS_MAX);
            let decoded = if offset > log_end_offset {
                Err(format!("past the log end offset {log_end_offset}"))
            } else {
                match read_small_file(&path, bytes_max).await {
                    Ok(Some(bytes)) => ProducerSnapshot::decode(&bytes),
                    Ok(None) => Err("vanished".to_string()),
                    Err(StorageError::CorruptFile { reason, .. }) => Err(reason),
                    Err(error) => return Err(error),
                }
            };
            match decoded {
                Ok((snapshot_offset, table)) if snapshot_offset == offset => {
                    kept.push(offset);
                    loaded = Some((offset, table));
                }
                Ok((snapshot_offset, _)) => {
                    let reason = format!("says offset {snapshot_offset}");
                    tracing::warn!(path = %path.display(), reason, "removing a producer snapshot");
                    remove_file_if_present(&path)?;
                }
                Err(reason) => {
                    tracing::warn!(path = %path.display(), reason, "removing a producer snapshot");
                    remove_file_if_present(&path)?;
                }
            }
        }
        kept.reverse();
        *inner.snapshots.borrow_mut() = kept;
        let (from, mut table) = loaded.unwrap_or((log_start_offset, ProducerTable::default()));
        table.expire(now_ms, inner.config.producer_id_expiration_ms);
        let from = from.max(log_start_offset);
        if from < log_end_offset {
            tracing::info!(
                dir = %inner.dir.display(),
                from,
                log_end_offset,
                "rebuilding producer state from the log"
            );
            self.replay_producers(from, &mut table, now_ms).await?;
        }
        inner.state.borrow_mut().producers = table;
        Ok(())
    }

    /// Records in `table` every idempotent batch at or after `from`, walking the batch
    /// headers of the segments (read in windows of `PRODUCER_REPLAY_WINDOW_BYTES`).
    async fn replay_producers(
        &self,
        from: i64,
        table: &mut ProducerTable,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let starts: Vec<(i64, u64)> = {
            let state = inner.state.borrow();
            state
                .segments
                .iter()
                .filter(|segment| segment.next_offset > from)
                .map(|segment| (segment.base_offset, u64::from(segment.index.lookup(from))))
                .collect()
        };
        let mut reader = SegmentReader::new(PRODUCER_REPLAY_WINDOW_BYTES);
        for (segment_base_offset, mut position) in starts {
            while let Some(header) = reader
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                if header.base_offset >= from && header.has_producer_id() {
                    table.record(&header, now_ms);
                }
                position += header.total_bytes() as u64;
            }
        }
        Ok(())
    }

    /// Forgets the idempotent producers that appended nothing for `producer.id.expiration.ms`
    /// (Kafka's expiry); a forgotten producer's next batch is accepted at any sequence.
    /// Returns how many were forgotten.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let expiration_ms = self.inner.config.producer_id_expiration_ms;
        let expired = self
            .inner
            .state
            .borrow_mut()
            .producers
            .expire(now_ms, expiration_ms);
        if expired > 0 {
            tracing::debug!(dir = %self.inner.dir.display(), expired, "producers expired");
        }
        expired
    }

    /// Idempotent producers the log remembers.
    pub fn producer_count(&self) -> usize {
        self.inner.state.borrow().producers.len()
    }

    /// Validates every batch in `records` first (nothing is stored if any is invalid), then
    /// assigns offsets: each batch's base offset becomes the log end offset and its partition
    /// leader epoch is set to `leader_epoch` (both outside the CRC). Copies the bytes once, into
    /// the write queue, and does not wait for I/O. Rolls the segment by size or age first.
    pub fn append(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        let inner = &*self.inner;
        let config = &inner.config;
        if records.is_empty() {
            return Err(BatchError::Empty.into());
        }
        let mut offset_count: u64 = 0;
        let mut batch_count = 0;
        // The batch to check against the producer state, if it comes from a producer with an id.
        let mut producer_batch: Option<BatchHeader> = None;
        for item in BatchIter::new(records) {
            let (header, _) = item?;
            if header.total_bytes() > config.batch_bytes_max {
                return Err(BatchError::BatchTooLarge {
                    batch_bytes: header.total_bytes(),
                    batch_bytes_max: config.batch_bytes_max,
                }
                .into());
            }
            // Kafka's produce check: a producer's batch has one offset per record.
            if i64::from(header.record_count) != i64::from(header.last_offset_delta) + 1 {
                return Err(BatchError::InvalidRecordCount {
                    record_count: header.record_count,
                    last_offset_delta: header.last_offset_delta,
                }
                .into());
            }
            if header.has_producer_id() {
                if header.base_sequence < 0 {
                    return Err(BatchError::InvalidProducerSequence {
                        producer_id: header.producer_id,
                        base_sequence: header.base_sequence,
                    }
                    .into());
                }
                producer_batch = Some(header);
            }
            offset_count += header.last_offset_delta as u64 + 1;
            batch_count += 1;
        }
        if producer_batch.is_some() && batch_count > 1 {
            return Err(BatchError::ProducerBatchNotAlone.into());
        }
        let records_bytes = records.len() as u64;
        if records_bytes > config.segment_bytes_max || offset_count > u64::from(u32::MAX) {
            return Err(BatchError::RecordsTooLarge {
                records_bytes: records.len(),
                segment_bytes_max: config.segment_bytes_max,
            }
            .into());
        }

        let mut state = inner.state.borrow_mut();
        state.check_writable(&inner.dir)?;
        // Checked here, under the same borrow that assigns the offsets below: no other append
        // can come between the check and the append.
        if let Some(batch) = &producer_batch {
            if let Verdict::Duplicate {
                base_offset,
                last_offset,
            } = state.producers.check(batch)?
            {
                return Ok(AppendInfo::duplicate(base_offset, last_offset));
            }
        }
        let pending_bytes_max = config.pending_bytes_max();
        if state.pending_bytes > 0 && state.pending_bytes + records.len() > pending_bytes_max {
            return Err(StorageError::WriteBufferFull {
                pending_bytes: state.pending_bytes,
                pending_bytes_max,
            }
            .into());
        }
        let log_end_offset = state.log_end_offset;
        let active = state.active();
        let too_big = active.size_bytes + records_bytes > config.segment_bytes_max;
        let too_old = active
            .roll_base_ms
            .is_some_and(|base_ms| now_ms.saturating_sub(base_ms) > config.segment_ms_max as i64);
        let relative_end = log_end_offset + offset_count as i64 - 1 - active.base_offset;
        let offsets_overflow = relative_end > i64::from(u32::MAX);
        if active.size_bytes > 0 && (too_big || too_old || offsets_overflow) {
            roll(&mut state, log_end_offset);
        }
        let active = state.active_mut();
        if active.roll_base_ms.is_none() {
            active.roll_base_ms = Some(now_ms);
        }

        let mut info = AppendInfo {
            base_offset: log_end_offset,
            last_offset: log_end_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: log_end_offset,
            batch_count,
            bytes: records.len(),
            duplicate: false,
        };
        let mut next_offset = log_end_offset;
        let position = state.active().size_bytes;
        state.reserve(config, position, records.len());
        for item in BatchIter::checked(records) {
            // Validated above; the second pass re-parses headers only to avoid a Vec per call.
            let (mut header, range) = item.expect("validated in the first pass");
            header.base_offset = next_offset;
            header.partition_leader_epoch = leader_epoch;
            let mut head = [0u8; BATCH_HEADER_BYTES];
            head.copy_from_slice(&records[range.start..range.start + BATCH_HEADER_BYTES]);
            head[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&next_offset.to_be_bytes());
            head[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&leader_epoch.to_be_bytes());
            let position = state.active().size_bytes;
            state
                .active_mut()
                .on_batch(&header, position, config.index_interval_bytes);
            if header.has_producer_id() {
                state.producers.record(&header, now_ms);
            }
            state.push_bytes(config, position, &head);
            let body = &records[range.start + BATCH_HEADER_BYTES..range.end];
            state.push_bytes(config, position + BATCH_HEADER_BYTES as u64, body);
            if header.max_timestamp > info.max_timestamp {
                info.max_timestamp = header.max_timestamp;
                info.offset_of_max_timestamp = header.base_offset;
            }
            info.last_offset = header.last_offset();
            next_offset = header.last_offset() + 1;
            let Some(WriteOp::Data(tail)) = state.queue.back_mut() else {
                unreachable!("the batch's bytes were just queued")
            };
            tail.batches_end_offset = next_offset;
        }
        state.log_end_offset = next_offset;
        drop(state);
        inner.signals.writer.notify();
        Ok(info)
    }

    /// Whole batches starting with the one that contains `offset`, up to `max_bytes` but at
    /// least one whole batch if any exists at or after `offset` (KIP-74).
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult, ReadError> {
        self.read_below(offset, max_bytes, i64::MAX).await
    }

    /// As [`Log::read`], but only batches that end below `end_offset` (a consumer's view:
    /// the high watermark). An `offset` in `[end_offset, log end]` finds no records and is
    /// no error.
    pub async fn read_below(
        &self,
        offset: i64,
        max_bytes: usize,
        end_offset: i64,
    ) -> Result<ReadResult, ReadError> {
        let result = self.read_batches(offset, max_bytes, end_offset).await;
        if let Err(ReadError::Storage(StorageError::Closed { .. })) = result {
            // Retention deleted the segment while the read was under way.
            let state = self.inner.state.borrow();
            if !state.closed && offset < state.log_start_offset {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: state.log_start_offset,
                    log_end_offset: state.log_end_offset,
                });
            }
        }
        result
    }

    async fn read_batches(
        &self,
        offset: i64,
        max_bytes: usize,
        end_offset: i64,
    ) -> Result<ReadResult, ReadError> {
        let inner = &*self.inner;
        let max_bytes = max_bytes.min(READ_BYTES_MAX);
        let (log_start_offset, log_end_offset, mut segment_base_offset, mut position) = {
            let state = inner.state.borrow();
            let (start, end) = (state.log_start_offset, state.log_end_offset);
            if offset < start || offset > end {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: start,
                    log_end_offset: end,
                });
            }
            let segment = &state.segments[state.segment_slot_for_offset(offset)];
            (
                start,
                end,
                segment.base_offset,
                u64::from(segment.index.lookup(offset)),
            )
        };
        let empty = ReadResult {
            records: Bytes::new(),
            log_start_offset,
            log_end_offset,
        };
        if offset >= log_end_offset.min(end_offset) {
            return Ok(empty);
        }
        let window_bytes = max_bytes.saturating_add(inner.config.index_interval_bytes as usize * 2);
        let mut reader = SegmentReader::new(window_bytes);
        let first = loop {
            match reader
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                Some(header) if header.last_offset() < offset => {
                    position += header.total_bytes() as u64;
                }
                Some(header) if header.last_offset() >= end_offset => return Ok(empty),
                Some(header) => break header,
                None => match inner.next_segment_base(segment_base_offset) {
                    Some(next) => {
                        segment_base_offset = next;
                        position = 0;
                    }
                    None => return Ok(empty),
                },
            }
        };
        let start = position;
        let mut total_bytes = first.total_bytes();
        let mut next_offset = first.last_offset() + 1;
        position += total_bytes as u64;
        // Only batches the window already holds: reading on for one more header would cost
        // another window-sized read, and then a third to cover the answer.
        while total_bytes < max_bytes {
            match reader.whole_batch_in_window(inner, segment_base_offset, position)? {
                Some(header)
                    if total_bytes + header.total_bytes() <= max_bytes
                        && header.last_offset() < end_offset =>
                {
                    total_bytes += header.total_bytes();
                    position += header.total_bytes() as u64;
                    next_offset = header.last_offset() + 1;
                }
                _ => break,
            }
        }
        let records = reader
            .bytes(inner, segment_base_offset, start, total_bytes)
            .await?;
        if inner.config.io_mode == IoMode::Direct {
            self.read_ahead(segment_base_offset, next_offset, window_bytes);
        }
        // No CRC pass here: every batch was checked whole when appended (and, after a crash,
        // by recovery), the walk above checked each header's length, and consumers check
        // CRCs themselves, as Kafka's do.
        let state = inner.state.borrow();
        Ok(ReadResult {
            records,
            log_start_offset: state.log_start_offset,
            log_end_offset: state.log_end_offset,
        })
    }

    /// Direct mode has no page cache to read ahead for a sequential reader, so the log does:
    /// it starts reading the window the reader's next read will ask for (from the index
    /// entry at or before `next_offset`), or the part of it the cache does not hold, and
    /// leaves it in the shard's cache. Only one read-ahead per log is in flight; none starts
    /// for less than `READ_AHEAD_BYTES_MIN` (a reader near the end is served by the write
    /// cache).
    fn read_ahead(&self, segment_base_offset: i64, next_offset: i64, window_bytes: usize) {
        let inner = &*self.inner;
        let (file, ahead) = {
            let mut state = inner.state.borrow_mut();
            if state.read_ahead.is_some() || state.failed.is_some() || state.closed {
                return;
            }
            let Some(slot) = state.segment_slot(segment_base_offset) else {
                return;
            };
            let segment = &state.segments[slot];
            if next_offset >= segment.next_offset {
                return;
            }
            let window_start = u64::from(segment.index.lookup(next_offset));
            let end = (window_start + window_bytes as u64).min(segment.written_bytes);
            let cached = inner.cache.cached_prefix_bytes(
                inner.log_id,
                segment_base_offset,
                window_start,
                end.saturating_sub(window_start) as usize,
            );
            let position = window_start + cached as u64;
            if end < position + READ_AHEAD_BYTES_MIN {
                return;
            }
            let Some(file) = segment.file.clone() else {
                return;
            };
            let len = (end - position) as usize;
            if !inner
                .cache
                .has_read_ahead_room(align_up(len as u64) as usize + BLOCK_BYTES)
            {
                return;
            }
            let ahead = ReadAhead {
                segment_base_offset,
                position,
                len,
            };
            state.read_ahead = Some(ahead);
            (file, ahead)
        };
        let log = Rc::downgrade(&self.inner);
        glommio::spawn_local(async move {
            let read = file.read_blocks(ahead.position, ahead.len).await;
            let Some(inner) = log.upgrade() else { return };
            inner.count_disk_read(ahead.len, true);
            let mut state = inner.state.borrow_mut();
            state.read_ahead = None;
            if let (Ok((start, data)), Some(_)) =
                (read, state.segment_slot(ahead.segment_base_offset))
            {
                // Only the bytes asked for: past them, the last block may hold padding.
                let valid = (ahead.position + ahead.len as u64 - start).min(data.len() as u64);
                let charge = align_up(data.len() as u64) as usize;
                inner.cache.insert(
                    inner.log_id,
                    ahead.segment_base_offset,
                    start,
                    valid as usize,
                    charge,
                    data,
                );
            }
            drop(state);
            inner.signals.progress.notify();
        })
        .detach();
    }

    pub fn log_start_offset(&self) -> i64 {
        self.inner.state.borrow().log_start_offset
    }

    pub fn disk_writes(&self) -> DiskWrites {
        self.inner.disk_writes.get()
    }

    pub fn disk_reads(&self) -> DiskReads {
        self.inner.disk_reads.get()
    }

    pub fn log_end_offset(&self) -> i64 {
        self.inner.state.borrow().log_end_offset
    }

    /// The offset below which every batch's write has completed: what a crash of the process
    /// cannot take back (the high watermark of a single node).
    pub fn written_end_offset(&self) -> i64 {
        self.inner.state.borrow().written_end_offset
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
                state.written_end_offset >= end_offset
                    || state.failed.is_some()
                    || inner.signals.shutdown.get()
            })
            .await;
        let state = inner.state.borrow();
        if state.written_end_offset >= end_offset {
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

    /// The first record whose timestamp is >= `timestamp`, with that timestamp (Kafka
    /// ListOffsets); `None` if no record qualifies. The time index finds the batch; a
    /// compressed batch answers at batch granularity (its base offset).
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let inner = &*self.inner;
        let candidates: Vec<(i64, u64)> = {
            let state = inner.state.borrow();
            state
                .segments
                .iter()
                .filter(|s| s.max_timestamp != TIMESTAMP_NONE && s.max_timestamp >= timestamp)
                .map(|s| {
                    (
                        s.base_offset,
                        u64::from(s.index.lookup(s.time_index.lookup(timestamp))),
                    )
                })
                .collect()
        };
        let mut reader = SegmentReader::new(inner.config.index_interval_bytes as usize * 2);
        for (segment_base_offset, mut position) in candidates {
            while let Some(header) = reader
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                if header.max_timestamp >= timestamp {
                    return self.refine_to_record(header, timestamp).await.map(Some);
                }
                position += header.total_bytes() as u64;
            }
        }
        Ok(None)
    }

    /// The first record with the log's largest timestamp, as `(offset, timestamp)`: the
    /// max-timestamp query of ListOffsets (KIP-734). `None` when no batch has a timestamp.
    /// A compressed batch answers with its base offset, as in `offset_for_timestamp`.
    pub async fn max_timestamp_record(&self) -> Result<Option<(i64, i64)>, StorageError> {
        let found = {
            let state = self.inner.state.borrow();
            // The earliest segment holding the largest timestamp, as Kafka picks it.
            let mut best: Option<&Segment> = None;
            for segment in &state.segments {
                if segment.max_timestamp != TIMESTAMP_NONE
                    && best.is_none_or(|b| segment.max_timestamp > b.max_timestamp)
                {
                    best = Some(segment);
                }
            }
            best.map(|s| (s.offset_of_max_timestamp, s.max_timestamp))
        };
        let Some((batch_offset, timestamp)) = found else {
            return Ok(None);
        };
        match self.read(batch_offset, 1).await {
            Ok(read) => Ok(Some(
                crate::batch::first_record_at_or_after(&read.records, timestamp)
                    .unwrap_or((batch_offset, timestamp)),
            )),
            Err(ReadError::Storage(error)) => Err(error),
            // Retention removed the segment meanwhile.
            Err(ReadError::OffsetOutOfRange { .. }) => Ok(None),
        }
    }

    /// Kafka answers a time query per record: the first record of `batch` at or after
    /// `timestamp`. A compressed batch (or one that cannot be read) answers with its base
    /// offset, which is at or before that record.
    async fn refine_to_record(
        &self,
        batch: BatchHeader,
        timestamp: i64,
    ) -> Result<(i64, i64), StorageError> {
        let whole_batch = (batch.base_offset, batch.max_timestamp);
        match self.read(batch.base_offset, batch.total_bytes()).await {
            Ok(read) => Ok(
                crate::batch::first_record_at_or_after(&read.records, timestamp)
                    .unwrap_or(whole_batch),
            ),
            Err(ReadError::Storage(error)) => Err(error),
            Err(ReadError::OffsetOutOfRange { .. }) => Ok(whole_batch),
        }
    }

    /// Waits until the write queue has room for an append of `bytes`, the answer to
    /// `StorageError::WriteBufferFull`: as long as the oldest queued writes take to finish,
    /// not until the whole queue is on disk (appends keep the disk busy meanwhile). Errs if
    /// the log failed or closed.
    pub async fn wait_for_room(&self, bytes: usize) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let pending_bytes_max = inner.config.pending_bytes_max();
        self.wait_for_writes(|state| {
            state.pending_bytes == 0
                || state.pending_bytes + bytes <= pending_bytes_max
                || state.closed
        })
        .await;
        inner.state.borrow().check_writable(&inner.dir)
    }

    /// Bytes appended but not yet written to their files.
    pub fn write_queue_bytes(&self) -> usize {
        self.inner.state.borrow().pending_bytes
    }

    /// Waits until everything appended before the call is written to its file (no fsync).
    pub async fn flush(&self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let target = inner.state.borrow().ops_enqueued;
        self.wait_for_writes(|state| state.ops_done >= target).await;
        inner.state.borrow().check_done(&inner.dir, target)
    }

    /// Wakes the writer and waits until `done` holds, the log failed or its writer stopped.
    async fn wait_for_writes(&self, mut done: impl FnMut(&State) -> bool) {
        let inner = &*self.inner;
        inner.signals.writer.notify();
        inner
            .signals
            .progress
            .wait_until(|| {
                let state = inner.state.borrow();
                done(&state) || state.failed.is_some() || inner.signals.shutdown.get()
            })
            .await;
    }

    /// Makes everything appended before the call durable (written + fdatasync). Group commit:
    /// one fdatasync at a time per log covers every caller whose data was written before it
    /// started; a caller whose data it did not cover waits for the next one.
    pub async fn sync(&self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let target = inner.state.borrow().ops_enqueued;
        inner.signals.writer.notify();
        loop {
            let files = {
                let mut state = inner.state.borrow_mut();
                if let Some(reason) = &state.failed {
                    return Err(inner.failed_error(reason));
                }
                if state.ops_synced >= target {
                    return Ok(());
                }
                if state.sync_in_flight || state.ops_done < target {
                    None
                } else {
                    state.sync_in_flight = true;
                    let covered = (state.ops_done, state.written_end_offset);
                    Some((covered, std::mem::take(&mut state.dirty_files)))
                }
            };
            let Some(((covered, covered_end_offset), files)) = files else {
                inner
                    .signals
                    .progress
                    .wait_until(|| {
                        let state = inner.state.borrow();
                        state.failed.is_some()
                            || state.ops_synced >= target
                            || (!state.sync_in_flight && state.ops_done >= target)
                            || inner.signals.shutdown.get()
                    })
                    .await;
                let state = inner.state.borrow();
                if state.ops_synced < target && state.ops_done < target {
                    state.check_done(&inner.dir, target)?;
                }
                continue;
            };
            let mut in_flight = SyncInFlight {
                inner,
                files,
                finished: false,
            };
            let mut result = Ok(());
            for file in &in_flight.files {
                result = file.fdatasync().await;
                if result.is_err() {
                    break;
                }
            }
            in_flight.finished = true;
            let fdatasyncs = in_flight.files.len() as u64;
            match result {
                Ok(()) => {
                    let mut state = inner.state.borrow_mut();
                    state.sync_in_flight = false;
                    state.ops_synced = state.ops_synced.max(covered);
                    state.synced_end_offset = state.synced_end_offset.max(covered_end_offset);
                    drop(state);
                    let writes = inner.disk_writes.get();
                    inner.disk_writes.set(DiskWrites {
                        fdatasyncs: writes.fdatasyncs + fdatasyncs,
                        ..writes
                    });
                }
                // Never retried: the kernel may have dropped the dirty pages (fsyncgate).
                Err(error) => {
                    inner.latch(&error);
                    inner.signals.progress.notify();
                    return Err(error);
                }
            }
            inner.signals.progress.notify();
        }
    }

    /// Deletes the oldest segments that `retention` lets go (see [`Retention`]) and moves the
    /// log start offset to the first segment kept. When every record has expired, the active
    /// segment is rolled first and its empty successor's file created, so the log keeps its
    /// end offset across restarts. A segment still waiting for its write or seal is kept until
    /// a later call. Up to `SPARES_MAX` deleted `.log` files are kept as spares for new
    /// segments; the rest are unlinked. Both happen on the executor's blocking thread, since
    /// freeing a large file's extents would stall the shard.
    pub async fn apply_retention(
        &self,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Deleted, StorageError> {
        let inner = &*self.inner;
        let (keep_from, roll_active) = {
            let state = inner.state.borrow();
            state.check_writable(&inner.dir)?;
            let ages: Vec<SegmentAge> = state
                .segments
                .iter()
                .map(|segment| inner.segment_age(segment, now_ms))
                .collect();
            let expired = expired_prefix(&ages, retention, now_ms);
            if expired == 0 {
                return Ok(Deleted::default());
            }
            match state.segments.get(expired) {
                Some(kept) => (kept.base_offset, false),
                None => (state.log_end_offset, true),
            }
        };
        if roll_active {
            {
                let mut state = inner.state.borrow_mut();
                let log_end_offset = state.log_end_offset;
                if state.active().base_offset < keep_from {
                    roll(&mut state, log_end_offset);
                }
            }
            self.flush().await?;
            inner.segment_file(keep_from).await?;
        }
        let (deleted, bases) = {
            let mut state = inner.state.borrow_mut();
            let state = &mut *state;
            let queue = &state.queue;
            let count = state
                .segments
                .windows(2)
                .take_while(|pair| {
                    let base = pair[0].base_offset;
                    pair[1].base_offset <= keep_from
                        && !queue.iter().any(|op| op.segment_base_offset() == base)
                })
                .count();
            if count == 0 {
                return Ok(Deleted::default());
            }
            let removed: Vec<Segment> = state.segments.drain(..count).collect();
            state.log_start_offset = state.log_start_offset.max(state.segments[0].base_offset);
            let deleted = Deleted {
                segments: count,
                bytes: removed.iter().map(|s| s.size_bytes).sum(),
            };
            let bases: Vec<i64> = removed.iter().map(|s| s.base_offset).collect();
            (deleted, bases)
        };
        let log_start_offset = self.log_start_offset();
        inner
            .cache
            .remove_segments_before(inner.log_id, log_start_offset);
        tracing::info!(
            dir = %inner.dir.display(),
            segments = deleted.segments,
            bytes = deleted.bytes,
            log_start_offset,
            "retention deleted segments"
        );
        let dir = inner.dir.clone();
        let spare_room = SPARES_MAX.saturating_sub(inner.spares.borrow().len());
        let spares = glommio::executor()
            .spawn_blocking(move || {
                // Oldest first: a crash part-way leaves a shorter log, never a hole.
                let mut spares = Vec::new();
                for base in bases {
                    if spares.len() < spare_room {
                        spares.push(keep_as_spare(&dir, base)?);
                    }
                    remove_segment_files(&dir, base)?;
                }
                Ok::<_, StorageError>(spares)
            })
            .await?;
        inner.spares.borrow_mut().extend(spares);
        Ok(deleted)
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
        let checkpoint = CleanShutdown {
            log_end_offset,
            active_base_offset: base_offset,
            active_size_bytes: size_bytes,
        };
        write_clean_shutdown(&inner.dir, &checkpoint).await?;
        sync_dir(&inner.dir).await?;
        inner.state.borrow_mut().closed_cleanly = true;
        inner.signals.shutdown.set(true);
        inner.signals.writer.notify();
        inner.cache.remove_log(inner.log_id);
        Ok(())
    }

    /// Removes every file of the log and its directory.
    pub async fn delete(self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        inner.state.borrow_mut().closed = true;
        inner.signals.shutdown.set(true);
        inner.signals.writer.notify();
        inner
            .signals
            .progress
            .wait_until(|| {
                let state = inner.state.borrow();
                state.writes_in_flight == 0 && !state.sync_in_flight
            })
            .await;
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
    let op_seq = state.next_op_seq();
    let snapshot = Snapshot {
        offset: log_end_offset,
        bytes: ProducerSnapshot::encode(&state.producers, log_end_offset),
    };
    state.queue.push_back(WriteOp::Seal {
        segment_base_offset,
        op_seq,
        snapshot,
    });
    state.segments.push(Segment::new(log_end_offset, None));
}

/// Segment base offsets, spare files and snapshot offsets of a partition directory.
type DirListing = (Vec<i64>, Vec<PathBuf>, Vec<i64>);

/// Base offsets of the segments in `dir`, ascending, the spare files there, and the offsets
/// of the producer-state snapshots, ascending. Index files without their `.log` (left by a
/// crash while retention deleted a segment) are removed.
fn list_segment_bases(dir: &Path) -> Result<DirListing, StorageError> {
    let mut bases = Vec::new();
    let mut index_bases = Vec::new();
    let mut spares = Vec::new();
    let mut snapshots = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io("read dir", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read dir", dir, e))?;
        match entry.file_name().to_str().and_then(parse_segment_file_name) {
            Some((base, LOG_SUFFIX)) => bases.push(base),
            Some((_, SPARE_SUFFIX)) => spares.push(entry.path()),
            Some((offset, SNAPSHOT_SUFFIX)) => snapshots.push(offset),
            Some((base, _)) => index_bases.push(base),
            None => {}
        }
    }
    bases.sort_unstable();
    snapshots.sort_unstable();
    for base in index_bases {
        if bases.binary_search(&base).is_err() {
            tracing::info!(
                base_offset = base,
                "removing the indexes of a deleted segment"
            );
            remove_segment_files(dir, base)?;
        }
    }
    Ok((bases, spares, snapshots))
}

/// Renames a deleted segment's `.log` to its `.spare` name; returns the new path.
fn keep_as_spare(dir: &Path, base_offset: i64) -> Result<PathBuf, StorageError> {
    let from = segment_path(dir, base_offset, LOG_SUFFIX);
    let to = segment_path(dir, base_offset, SPARE_SUFFIX);
    std::fs::rename(&from, &to).map_err(|e| StorageError::io("rename", &from, e))?;
    Ok(to)
}

fn remove_segment_files(dir: &Path, base_offset: i64) -> Result<(), StorageError> {
    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        remove_file_if_present(&segment_path(dir, base_offset, suffix))?;
    }
    Ok(())
}

fn remove_file_if_present(path: &Path) -> Result<(), StorageError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io("remove", path, e)),
    }
}

/// Wall-clock time in milliseconds since the epoch (0 if the clock is before it).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// Opens every segment. Indexes are trusted only when consistent with their `.log`; the active
/// segment is re-scanned unless the clean-shutdown checkpoint vouches for it; a segment whose
/// scan ends early (torn tail) is truncated and every later segment removed, since nothing in
/// them can have been synced (a sync covers all earlier segments too). Index files of an
/// inactive segment can be trusted because the writer seals a segment (`.log` fdatasynced,
/// then indexes written) before it creates the next segment's file.
async fn open_segments(
    dir: &Path,
    config: &LogConfig,
    bases: &[i64],
    clean_shutdown: Option<CleanShutdown>,
) -> Result<Vec<Segment>, StorageError> {
    let mut segments = Vec::with_capacity(bases.len().max(1));
    if bases.is_empty() {
        let path = segment_path(dir, 0, LOG_SUFFIX);
        let file = Rc::new(SegmentFile::open(&path, config.io_mode).await?);
        sync_dir(dir).await?;
        segments.push(Segment::new(0, Some(file)));
        return Ok(segments);
    }
    for (slot, &base_offset) in bases.iter().enumerate() {
        let is_active = slot + 1 == bases.len();
        let path = segment_path(dir, base_offset, LOG_SUFFIX);
        let file = Rc::new(SegmentFile::open(&path, config.io_mode).await?);
        let file_bytes = file.size_bytes().await?;
        let known_next_offset = if is_active {
            clean_shutdown
                .filter(|c| {
                    c.active_base_offset == base_offset && c.active_size_bytes == file_bytes
                })
                .map(|c| c.log_end_offset)
        } else {
            Some(bases[slot + 1])
        };
        let mut segment = Segment::new(base_offset, Some(file.clone()));
        let mut loaded = match known_next_offset {
            Some(next_offset) => load_indexes(dir, &mut segment, file_bytes, next_offset).await?,
            None => Err("last shutdown was not clean".to_string()),
        };
        if let (true, Ok(()), Some(next_offset)) = (is_active, &loaded, known_next_offset) {
            let from_position = u64::from(segment.index.last_position().unwrap_or(0));
            loaded = check_tail(&file, base_offset, from_position, file_bytes, next_offset).await?;
        }
        let mut torn = false;
        if let Err(reason) = loaded {
            tracing::info!(path = %path.display(), %reason, "rebuilding segment from its .log");
            segment = Segment::new(base_offset, Some(file.clone()));
            let outcome =
                scan_segment(&file, file_bytes, &mut segment, config.index_interval_bytes).await?;
            if outcome.valid_bytes < file_bytes {
                tracing::warn!(
                    path = %path.display(),
                    valid_bytes = outcome.valid_bytes,
                    file_bytes,
                    reason = outcome.stop_reason.as_deref().unwrap_or(""),
                    "truncating segment at the first invalid batch"
                );
                file.truncate(outcome.valid_bytes).await?;
                file.fdatasync().await?;
            }
            if !is_active {
                // Only missing offsets count: cutting direct-mode zero padding loses nothing.
                torn = segment.next_offset != bases[slot + 1];
                segment.complete_time_index();
                let (index, time_index) = (segment.index.encode(), segment.time_index.encode());
                write_indexes(dir, base_offset, index, time_index).await?;
            }
        }
        segments.push(segment);
        if torn {
            for &later in &bases[slot + 1..] {
                tracing::warn!(base_offset = later, "removing segment after a torn one");
                remove_segment_files(dir, later)?;
            }
            sync_dir(dir).await?;
            break;
        }
    }
    if config.io_mode == IoMode::Direct {
        let active = segments
            .last_mut()
            .expect("at least one segment was opened");
        let block_position = align_down(active.size_bytes);
        let tail_bytes = (active.size_bytes - block_position) as usize;
        if tail_bytes > 0 {
            let file = active.file.clone().expect("opened segments have files");
            active.tail_block = file.read_exact(block_position, tail_bytes).await?.to_vec();
        }
    }
    Ok(segments)
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
