//! The write queue of a partition log: the bytes appended and not yet written, in chunks, with
//! the seals of rolled segments between them, and the accounting of ops (enqueued, done,
//! synced) that the writer (`writer.rs`) and the waiters of `Log` go by. A state machine
//! without I/O: appends put bytes in (`reserve`, `push_bytes`), the writer takes jobs
//! (`take_job`) and reports completions (`complete_data`, `complete_seal`, `end_write`).
//!
//! Invariants: `ops_synced <= ops_done <= ops_enqueued`; ops complete in any order but
//! `ops_done` moves past an op only once every op before it is done too (`pop_retired`
//! retires from the front only); a chunk holds bytes of one segment, contiguous, and in
//! direct mode starts on a block boundary (re-copying the partial block before it, bytes
//! already written once); writes in flight never share a block (a second one is only a
//! direct chunk starting on a fresh block of a segment whose file exists), and at most
//! `WRITES_IN_FLIGHT_MAX` writes are in flight per log and, beyond each log's first, per
//! shard; a seal starts only once every op before it retired, leaves the queue as it starts
//! (so `ops_done` passes it then, and later segments' writes go on beside it), and one seal
//! at a time is in flight (`sealing`); `pending_bytes` counts the appended bytes of the chunks
//! not yet retired (head bytes copied from an earlier chunk excepted), `heap_pending_bytes`
//! those of them in chunks outside the stage, which alone count against the queue's bound
//! (`has_room`: staged chunks are bounded by the stage's size instead); `unstaged_chunks`
//! counts the chunks not yet retired whose memory would not survive the process (not in the
//! stage), and a staged chunk's filled length always covers its appended bytes.

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{shard_writes, LogConfig};
use crate::cache::BatchCache;
use crate::chunk_memory::{ChunkMemory, SharedChunk};
use crate::io::{align_down, align_up, IoMode, BLOCK_BYTES};
use crate::segment::Segment;
use crate::stage::StageTarget;
use crate::stream_copy::copy_streaming;

/// Smallest chunk allocated for the write queue; chunks grow while the disk is busy.
pub(super) const CHUNK_BYTES_MIN: usize = 64 << 10;
/// Chunk writes a log keeps in flight at once (direct mode): with one, the disk idles while
/// each completion travels back and the next write is submitted. Measured from the shard's
/// CPU, 1 MiB O_DIRECT writes gave 1.42-1.6 GB/s one at a time and 1.9-2.07 GB/s two at a
/// time; four gave no more than two.
///
/// A log's first write always starts; its second only while the shard (`shard_writes`) has
/// fewer than this many in flight: with several busy logs the disk is kept busy already, and
/// deeper queues only raised latency (4 partitions: p99.9 4.2-4.8 -> 7.6-10.4 ms, same
/// throughput). A log refused a second write asks again when its own write completes, not
/// when another's does.
const WRITES_IN_FLIGHT_MAX: usize = 2;

/// How long the chunk filling at the back of the queue may wait for more appends before its
/// write, when it is staged and nothing waits for its write (`WriteQueue::held_until`). Its
/// acks=1 answers left when the bytes were copied in, so writing it early buys nothing, and
/// each write costs the shard a submission and the kernel an io_uring worker's wake-up and
/// page pinning: at half speed (5 M msgs/s of 100 B) writes as soon as the disk was free
/// averaged 143 KB, and the workers that ran them took a third of the node's CPU, on the
/// shard's own core. Held, chunks fill to `write_buffer_bytes_max` at any rate above
/// 200 MB/s; slower, a chunk goes out after this long. A sync, a flush or a wait for room
/// ends the hold at once (`WriteQueue::want_written`); a crash of the process loses nothing
/// held (it is in the stage), a crash of the machine loses it as it loses the page cache.
const STAGED_HOLD: Duration = Duration::from_millis(5);

const _: () = assert!(CHUNK_BYTES_MIN % BLOCK_BYTES == 0);

pub(super) enum WriteOp {
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
pub(super) struct Snapshot {
    pub(super) offset: i64,
    pub(super) bytes: Vec<u8>,
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
pub(super) struct Chunk {
    pub(super) segment_base_offset: i64,
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
    /// Its memory is in the stage: its bytes survive a crash of the process.
    staged: bool,
    /// Its write completed; it leaves the queue once every op before it has.
    written: bool,
    /// Its write was taken while a sync waited for it: it completes durable (`RWF_DSYNC`).
    durable: bool,
    /// When it was allocated, which starts its hold (`STAGED_HOLD`).
    opened_at: Instant,
    /// The offset after the last batch whose last byte is in this chunk, or -1 if no batch
    /// ends here: once the chunk is retired, every batch below it is written.
    pub(super) batches_end_offset: i64,
}

pub(super) enum ChunkBuf {
    Dma(ChunkMemory),
    Heap(Vec<u8>),
    /// Direct write in flight; the buffer stays readable (and goes to the cache afterwards).
    InFlightDma(Arc<SharedChunk>),
    /// Buffered write in flight; glommio owns the buffer until the write completes.
    InFlightHeap,
}

impl Chunk {
    /// File position after the chunk's last valid byte.
    pub(super) fn end(&self) -> u64 {
        self.position + self.len as u64
    }

    /// Direct mode, once its write went out: the chunk's bytes of the partial block at its
    /// end, which the segment's next write must rewrite.
    pub(super) fn written_tail(&self) -> Option<&[u8]> {
        match &self.buf {
            ChunkBuf::InFlightDma(buf) => {
                let from = (align_down(self.end()) - self.position) as usize;
                Some(&buf.as_bytes()[from..self.len])
            }
            _ => None,
        }
    }

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
                // Next read by the disk, not this core: streaming stores (crate::stream_copy).
                copy_streaming(
                    &mut buf.as_bytes_mut()[self.len..self.len + bytes.len()],
                    bytes,
                );
                buf.set_filled(self.len + bytes.len());
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
pub(super) enum Job {
    Direct {
        chunk: ChunkInfo,
        buf: Arc<SharedChunk>,
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
pub(super) struct ChunkInfo {
    pub(super) op_seq: u64,
    pub(super) segment_base_offset: i64,
    pub(super) position: u64,
    pub(super) len: usize,
    pub(super) capacity_bytes: usize,
    /// Written with `RWF_DSYNC` (see `Chunk::durable`).
    pub(super) durable: bool,
}

/// The write queue of one log and its op accounting.
pub(super) struct WriteQueue {
    ops: VecDeque<WriteOp>,
    /// Ops put in the queue so far; the last one's sequence number.
    pub(super) ops_enqueued: u64,
    /// Every op up to this sequence number is done.
    pub(super) ops_done: u64,
    /// Every op up to this sequence number is durable: done before an fdatasync that completed
    /// began, or written durable after ops that were (`Chunk::durable`).
    pub(super) ops_synced: u64,
    /// Ops up to this sequence number are waited for (a sync, a flush, a wait for room): none
    /// of them is held back to fill (`held_until`).
    write_through: u64,
    /// Ops up to this sequence number are waited for by a sync: a direct chunk among them is
    /// written durable, which spares the sync an fdatasync (`State::complete_data`).
    sync_through: u64,
    /// Data writes taken by the writer and not yet complete.
    pub(super) writes_in_flight: usize,
    /// The segment whose seal is in flight: out of the queue already, beside the writes of
    /// later segments (an fdatasync and small files that would otherwise hold them back).
    pub(super) sealing: Option<i64>,
    /// Appended bytes not yet written.
    pub(super) pending_bytes: usize,
    /// Of `pending_bytes`, those in chunks outside the stage: heap memory, and the queue's
    /// bound (`has_room`).
    pub(super) heap_pending_bytes: usize,
    /// Chunks not yet retired whose memory is not staged (`all_staged`).
    unstaged_chunks: usize,
    next_chunk_bytes: usize,
    /// The log's directory (absolute), which staged chunks name.
    dir: Box<[u8]>,
    /// The shard's cache, which gives its staged chunks back when the stage is full.
    cache: Rc<BatchCache>,
}

impl WriteQueue {
    pub(super) fn new(dir: &std::path::Path, cache: Rc<BatchCache>) -> WriteQueue {
        use std::os::unix::ffi::OsStrExt;
        WriteQueue {
            cache,
            unstaged_chunks: 0,
            dir: dir.as_os_str().as_bytes().into(),
            ops: VecDeque::new(),
            ops_enqueued: 0,
            ops_done: 0,
            ops_synced: 0,
            write_through: 0,
            sync_through: 0,
            writes_in_flight: 0,
            sealing: None,
            pending_bytes: 0,
            heap_pending_bytes: 0,
            next_chunk_bytes: CHUNK_BYTES_MIN,
        }
    }

    /// The queue index of the op the writer may start now: the first one not taken yet, if
    /// nothing is in flight and it is not held back to fill (`held_until`); with writes in
    /// flight, only a direct chunk that starts on a fresh block of a segment whose file exists
    /// (so it shares no block with an earlier write and needs no file created). A seal only
    /// from the front (every op before it retired) and while no other seal is in flight.
    pub(super) fn next_job(&self, has_file: impl Fn(i64) -> bool, now: Instant) -> Option<usize> {
        let index = self.ops.iter().position(|op| match op {
            WriteOp::Data(chunk) => {
                !chunk.written && matches!(chunk.buf, ChunkBuf::Dma(_) | ChunkBuf::Heap(_))
            }
            WriteOp::Seal { .. } => true,
        })?;
        if index + 1 == self.ops.len() && self.held_until().is_some_and(|until| now < until) {
            return None;
        }
        if let WriteOp::Seal { .. } = self.ops[index] {
            return (index == 0 && self.sealing.is_none()).then_some(0);
        }
        if self.writes_in_flight == 0 {
            return Some(index);
        }
        if self.writes_in_flight >= WRITES_IN_FLIGHT_MAX
            || shard_writes::in_flight() >= WRITES_IN_FLIGHT_MAX
        {
            return None;
        }
        match &self.ops[index] {
            WriteOp::Data(chunk)
                if chunk.head_bytes == 0
                    && matches!(chunk.buf, ChunkBuf::Dma(_))
                    && has_file(chunk.segment_base_offset) =>
            {
                Some(index)
            }
            _ => None,
        }
    }

    /// When the chunk at the back of the queue stops waiting to fill, if it waits: while it is
    /// staged, not taken, has room and nobody waits for its write, for `STAGED_HOLD` after
    /// it was allocated. Appends that fill it end the wait (a new chunk takes the back). A
    /// queue holding any chunk outside the stage holds nothing back: its appends are written
    /// only once their files are (`State::written_end_offset`).
    pub(super) fn held_until(&self) -> Option<Instant> {
        if !self.all_staged() {
            return None;
        }
        match self.ops.back() {
            // Staged (every chunk is) and not taken (a taken chunk has no room).
            Some(WriteOp::Data(chunk))
                if chunk.room_bytes() > 0 && chunk.op_seq > self.write_through =>
            {
                Some(chunk.opened_at + STAGED_HOLD)
            }
            _ => None,
        }
    }

    /// No queued chunk is outside the stage: every appended byte survives a crash of the
    /// process.
    pub(super) fn all_staged(&self) -> bool {
        self.unstaged_chunks == 0
    }

    /// Something waits for every op queued so far to be written: none of them is held.
    pub(super) fn want_written(&mut self) {
        self.write_through = self.ops_enqueued;
    }

    /// Something waits for every op queued so far to be durable: none of them is held, and
    /// each direct chunk among them not yet taken is written durable.
    pub(super) fn want_synced(&mut self) {
        self.want_written();
        self.sync_through = self.ops_enqueued;
    }

    /// Sequence number for the next op put in the queue (ops complete in this order).
    pub(super) fn next_op_seq(&mut self) -> u64 {
        self.ops_enqueued += 1;
        self.ops_enqueued
    }

    /// Copies `bytes`, which belong at `position` of the active segment, into the write queue.
    /// Makes sure one chunk takes the next `bytes` of the active segment whole, when a chunk
    /// can hold them: appends push a batch's header and body separately, and a chunk sized
    /// for the header alone split every request larger than a chunk into two writes, the
    /// second a small extending write queued behind the first (it tripled acks=all latency
    /// for 64 KiB requests).
    pub(super) fn reserve(
        &mut self,
        config: &LogConfig,
        active: &Segment,
        position: u64,
        bytes: usize,
    ) {
        if bytes + BLOCK_BYTES > config.write_buffer_bytes_max {
            return;
        }
        let segment_base_offset = active.base_offset;
        let (room_bytes, capacity_bytes) = match self.ops.back() {
            Some(WriteOp::Data(c)) if c.segment_base_offset == segment_base_offset => {
                (c.room_bytes(), c.capacity_bytes)
            }
            _ => (0, 0),
        };
        if room_bytes >= bytes {
            return;
        }
        let largest = align_up(config.write_buffer_bytes_max as u64) as usize;
        if room_bytes > 0 && config.io_mode == IoMode::Direct && capacity_bytes >= largest {
            // The disk is behind (chunks grew to the largest size): fill this chunk to its
            // end and go on in a new one starting on a fresh block, which can be written
            // while this one is in flight (a chunk left partly empty would make the next
            // one rewrite its last block, and wait for it).
            return;
        }
        if room_bytes > 0 {
            // A chunk still filling is left behind: appends outrun the disk, as when a chunk
            // fills up, so let the next chunk be larger.
            if let Some(WriteOp::Data(c)) = self.ops.back() {
                self.next_chunk_bytes = (c.capacity_bytes * 2).min(config.write_buffer_bytes_max);
            }
        }
        let chunk = self.new_chunk(config, active, position, bytes);
        self.ops.push_back(WriteOp::Data(chunk));
    }

    pub(super) fn push_bytes(
        &mut self,
        config: &LogConfig,
        active: &Segment,
        mut position: u64,
        mut bytes: &[u8],
    ) {
        let segment_base_offset = active.base_offset;
        while !bytes.is_empty() {
            let fillable = matches!(
                self.ops.back(),
                Some(WriteOp::Data(c))
                    if c.segment_base_offset == segment_base_offset && c.room_bytes() > 0
            );
            if !fillable {
                let chunk = self.new_chunk(config, active, position, bytes.len());
                self.ops.push_back(WriteOp::Data(chunk));
            }
            let Some(WriteOp::Data(chunk)) = self.ops.back_mut() else {
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
            if !chunk.staged {
                self.heap_pending_bytes += take_bytes;
            }
            position += take_bytes as u64;
            bytes = &bytes[take_bytes..];
            self.pending_bytes += take_bytes;
        }
    }

    fn new_chunk(
        &mut self,
        config: &LogConfig,
        active: &Segment,
        position: u64,
        wanted_bytes: usize,
    ) -> Chunk {
        let chunk = self.allocate_chunk(config, active, position, wanted_bytes);
        if !chunk.staged {
            self.unstaged_chunks += 1;
        }
        chunk
    }

    fn allocate_chunk(
        &mut self,
        config: &LogConfig,
        active: &Segment,
        position: u64,
        wanted_bytes: usize,
    ) -> Chunk {
        let segment_base_offset = active.base_offset;
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
                    staged: false,
                    written: false,
                    durable: false,
                    opened_at: Instant::now(),
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
                self.copy_tail(active, block_position, &mut head[..head_bytes]);
                let capacity_bytes = align_up(
                    (head_bytes + wanted_bytes)
                        .clamp(self.next_chunk_bytes.min(size_bytes_max), size_bytes_max)
                        as u64,
                ) as usize;
                // Heap-backed aligned memory: glommio's io arena is tiny and these buffers live
                // on in the cache.
                // Not zeroed here: only the padding past the data is, when the chunk is
                // written (zeroing whole chunks cost ~8% of a shard at 7 M msgs/s).
                let target = StageTarget {
                    dir: &self.dir,
                    segment_base_offset,
                    position: block_position,
                };
                let mut buf = ChunkMemory::allocate_staged(capacity_bytes, &target)
                    .or_else(|| {
                        // The stage is full: written chunks the cache keeps there give way to
                        // the queue, whose acks would otherwise wait for the disk.
                        self.cache.give_back_staged(capacity_bytes);
                        ChunkMemory::allocate_staged(capacity_bytes, &target)
                    })
                    .unwrap_or_else(|| ChunkMemory::allocate(capacity_bytes));
                // A staged chunk takes whole slots: room for later appends, not waste.
                let capacity_bytes = buf.len();
                buf.as_bytes_mut()[..head_bytes].copy_from_slice(&head[..head_bytes]);
                buf.set_filled(head_bytes);
                Chunk {
                    segment_base_offset,
                    position: block_position,
                    len: head_bytes,
                    head_bytes,
                    capacity_bytes,
                    op_seq: self.next_op_seq(),
                    staged: buf.is_staged(),
                    buf: ChunkBuf::Dma(buf),
                    written: false,
                    durable: false,
                    opened_at: Instant::now(),
                    batches_end_offset: -1,
                }
            }
        }
    }

    /// Direct mode: the bytes `[block_position, block_position + out.len())` of a segment, the
    /// partial last block, from the newest queued chunk of the segment or the segment's copy.
    fn copy_tail(&self, active: &Segment, block_position: u64, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        let segment_base_offset = active.base_offset;
        for op in self.ops.iter().rev() {
            if let WriteOp::Data(chunk) = op {
                if chunk.segment_base_offset == segment_base_offset {
                    let bytes = chunk.bytes().expect("direct chunks stay readable");
                    let from = (block_position - chunk.position) as usize;
                    out.copy_from_slice(&bytes[from..from + out.len()]);
                    return;
                }
            }
        }
        let tail = &active.tail_block;
        assert_eq!(
            tail.len(),
            out.len(),
            "tail block out of step with the segment size"
        );
        out.copy_from_slice(tail);
    }

    /// Takes the next op the writer may start (see `next_job`). A seal leaves the queue here:
    /// everything before it is done, and nothing after it waits for it.
    pub(super) fn take_job(&mut self, has_file: impl Fn(i64) -> bool, now: Instant) -> Option<Job> {
        let index = self.next_job(has_file, now)?;
        if let WriteOp::Seal { .. } = self.ops[index] {
            let Some(WriteOp::Seal {
                segment_base_offset,
                op_seq,
                snapshot,
            }) = self.ops.pop_front()
            else {
                unreachable!("next_job takes a seal only from the front")
            };
            self.ops_done = op_seq;
            // A seal adds no appended bytes: durable if everything before it is.
            self.advance_synced(op_seq, true);
            self.sealing = Some(segment_base_offset);
            return Some(Job::Seal {
                segment_base_offset,
                snapshot,
            });
        }
        self.writes_in_flight += 1;
        shard_writes::started();
        let WriteOp::Data(chunk) = &mut self.ops[index] else {
            unreachable!("a seal was taken above")
        };
        // Only direct writes go out durable: a buffered one would flush the page cache by
        // itself, as the sync round does.
        chunk.durable = chunk.op_seq <= self.sync_through && matches!(chunk.buf, ChunkBuf::Dma(_));
        let info = ChunkInfo {
            op_seq: chunk.op_seq,
            segment_base_offset: chunk.segment_base_offset,
            position: chunk.position,
            len: chunk.len,
            capacity_bytes: chunk.capacity_bytes,
            durable: chunk.durable,
        };
        if chunk.len * 4 < chunk.capacity_bytes {
            // Appends are not outrunning the disk: shrink future chunks.
            self.next_chunk_bytes = (self.next_chunk_bytes / 2).max(CHUNK_BYTES_MIN);
        }
        let job = match std::mem::replace(&mut chunk.buf, ChunkBuf::InFlightHeap) {
            ChunkBuf::Dma(mut buf) => {
                // O_DIRECT writes whole blocks: the padding past the data is zeros,
                // which recovery reads as the end of the segment.
                let written_bytes = align_up(chunk.len as u64) as usize;
                buf.as_bytes_mut()[chunk.len..written_bytes].fill(0);
                let buf = buf.freeze(written_bytes);
                chunk.buf = ChunkBuf::InFlightDma(buf.clone());
                Job::Direct { chunk: info, buf }
            }
            ChunkBuf::Heap(buf) => Job::Buffered { chunk: info, buf },
            ChunkBuf::InFlightDma(_) | ChunkBuf::InFlightHeap => {
                unreachable!("next_job never picks a chunk in flight")
            }
        };
        Some(job)
    }

    /// Records that the write of the chunk `op_seq` completed; it leaves the queue (see
    /// `pop_retired`) once every op before it has. Returns the chunk's buffer for the cache
    /// in direct mode.
    pub(super) fn complete_data(&mut self, op_seq: u64) -> Option<Arc<SharedChunk>> {
        self.end_write();
        let chunk = self
            .ops
            .iter_mut()
            .find_map(|op| match op {
                WriteOp::Data(c) if c.op_seq == op_seq => Some(c),
                _ => None,
            })
            .expect("a chunk in flight stays queued");
        chunk.written = true;
        match &chunk.buf {
            ChunkBuf::InFlightDma(buf) => {
                buf.written();
                Some(buf.clone())
            }
            _ => None,
        }
    }

    /// An op taken by `take_job` finished (or failed).
    pub(super) fn end_write(&mut self) {
        self.writes_in_flight -= 1;
        shard_writes::finished();
    }

    /// Takes the chunk at the front of the queue if its write completed (every op before it
    /// is done, then): `ops_done` moves past it and its bytes no longer count as pending.
    pub(super) fn pop_retired(&mut self) -> Option<Chunk> {
        match self.ops.front() {
            Some(WriteOp::Data(chunk)) if chunk.written => {}
            _ => return None,
        }
        let Some(WriteOp::Data(chunk)) = self.ops.pop_front() else {
            unreachable!("the front was just seen to be a data op")
        };
        self.ops_done = chunk.op_seq;
        self.advance_synced(chunk.op_seq, chunk.durable);
        self.pending_bytes -= chunk.len - chunk.head_bytes;
        if !chunk.staged {
            self.unstaged_chunks -= 1;
            self.heap_pending_bytes -= chunk.len - chunk.head_bytes;
        }
        Some(chunk)
    }

    /// The queue may take an append of `bytes`: it is empty (one append always goes in), or
    /// its chunks outside the stage stay within `pending_bytes_max` even if every byte lands
    /// in a new one. Staged chunks do not count: the stage's size bounds them, and a queue in
    /// the stage rides out a disk that stalls for as long as the stage has room, without
    /// holding back an acks=1 answer (which waits for nothing but the copy into it).
    pub(super) fn has_room(&self, bytes: usize, pending_bytes_max: usize) -> bool {
        self.pending_bytes == 0 || self.heap_pending_bytes + bytes <= pending_bytes_max
    }

    /// Some queued chunk holds bytes of the segment.
    pub(super) fn holds_data_of(&self, segment_base_offset: i64) -> bool {
        self.ops.iter().any(
            |op| matches!(op, WriteOp::Data(c) if c.segment_base_offset == segment_base_offset),
        )
    }

    /// Some queued op (data or seal), or the seal in flight, is about the segment.
    pub(super) fn holds_segment(&self, segment_base_offset: i64) -> bool {
        self.sealing == Some(segment_base_offset)
            || self
                .ops
                .iter()
                .any(|op| op.segment_base_offset() == segment_base_offset)
    }

    /// The op `op_seq` is done; if it is durable by itself and every op before it is durable,
    /// so is it.
    fn advance_synced(&mut self, op_seq: u64, durable: bool) {
        if durable && self.ops_synced + 1 == op_seq {
            self.ops_synced = op_seq;
        }
    }

    /// An fdatasync that began once the first `covered` ops were done has completed.
    pub(super) fn mark_synced(&mut self, covered: u64) {
        debug_assert!(covered <= self.ops_done);
        self.ops_synced = self.ops_synced.max(covered);
    }

    /// Queues the seal of a segment that is no longer active.
    pub(super) fn push_seal(&mut self, segment_base_offset: i64, snapshot: Snapshot) {
        let op_seq = self.next_op_seq();
        self.ops.push_back(WriteOp::Seal {
            segment_base_offset,
            op_seq,
            snapshot,
        });
    }

    /// Notes the offset after the last batch whose last byte is in the newest chunk.
    pub(super) fn set_batches_end(&mut self, next_offset: i64) {
        let Some(WriteOp::Data(tail)) = self.ops.back_mut() else {
            unreachable!("the batch's bytes were just queued")
        };
        tail.batches_end_offset = next_offset;
    }

    /// The seal in flight completed or failed; returns its segment's base offset.
    pub(super) fn end_seal(&mut self) -> i64 {
        self.sealing
            .take()
            .expect("a seal ends only while one is in flight")
    }

    /// Copies `[from, to)` of a segment's queued (not yet written) bytes into `out`.
    /// `Err(())` if part of it is inside a buffered write in flight (wait and retry).
    pub(super) fn copy_queued(
        &self,
        segment_base_offset: i64,
        mut from: u64,
        to: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), ()> {
        while from < to {
            let chunk = self.ops.iter().rev().find_map(|op| match op {
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

#[cfg(test)]
mod tests;
