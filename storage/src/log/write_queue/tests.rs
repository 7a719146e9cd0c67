//! The write queue as a state machine, without files or an executor: bytes go in as appends
//! put them, jobs come out as the writer takes them, completions go back in any order. A model
//! "disk" (one byte vector per segment) applies each job's bytes at its position, so a test can
//! check that what the queue writes is exactly what was appended.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::segment::Segment;

fn config(io_mode: IoMode) -> LogConfig {
    LogConfig {
        io_mode,
        // The smallest buffer: chunks reach their largest size at once.
        write_buffer_bytes_max: 2 * BLOCK_BYTES,
        ..LogConfig::default()
    }
}

fn snapshot() -> Snapshot {
    Snapshot {
        offset: 0,
        bytes: Vec::new(),
    }
}

/// A write queue with the segments it writes, the bytes appended to each, and what the model
/// disk holds of each.
struct Harness {
    config: LogConfig,
    queue: WriteQueue,
    segments: Vec<Segment>,
    appended: HashMap<i64, Vec<u8>>,
    disk: HashMap<i64, Vec<u8>>,
    /// Jobs taken and not yet completed, in the order taken.
    in_flight: Vec<Job>,
    /// Each append is one batch of one record: (segment, end position, offset after it).
    batches: Vec<(i64, usize, i64)>,
    /// The offset after the batches every retired chunk holds, as `State::retire` keeps it.
    written_end_offset: i64,
}

impl Harness {
    fn new(io_mode: IoMode) -> Harness {
        Harness {
            config: config(io_mode),
            queue: WriteQueue::new(
                std::path::Path::new("/test/topic-0"),
                std::rc::Rc::new(crate::cache::BatchCache::new(0)),
            ),
            segments: vec![Segment::new(0, None)],
            appended: HashMap::new(),
            disk: HashMap::new(),
            in_flight: Vec::new(),
            batches: Vec::new(),
            written_end_offset: 0,
        }
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("an active segment")
    }

    /// Appends `bytes` to the active segment as `Log::append` does (reserve, then push).
    fn append(&mut self, bytes: &[u8]) {
        let base = self.active().base_offset;
        let position = self.appended.get(&base).map_or(0, Vec::len) as u64;
        let active = self.segments.last().expect("an active segment");
        self.queue
            .reserve(&self.config, active, position, bytes.len());
        self.queue.push_bytes(&self.config, active, position, bytes);
        let next_offset = self.batches.len() as i64 + 1;
        self.queue.set_batches_end(next_offset);
        let segment = self.appended.entry(base).or_default();
        segment.extend_from_slice(bytes);
        self.batches.push((base, segment.len(), next_offset));
    }

    /// Rolls: the active segment is sealed and a new one starts at `base_offset`.
    fn roll(&mut self, base_offset: i64) {
        let old = self.active().base_offset;
        self.queue.push_seal(old, snapshot());
        self.segments.push(Segment::new(base_offset, None));
    }

    /// Takes the next job if the queue allows one (every segment has its file).
    fn take(&mut self) -> bool {
        match self.queue.take_job(|_| true, Instant::now()) {
            Some(job) => {
                self.in_flight.push(job);
                true
            }
            None => false,
        }
    }

    /// Completes the `index`th job in flight: its bytes land on the model disk, then the
    /// queue retires what it can, as `State::complete_data` does.
    fn complete(&mut self, index: usize) {
        match self.in_flight.remove(index) {
            Job::Direct { chunk, buf } => {
                self.land(&chunk, buf.as_bytes());
                self.queue.complete_data(chunk.op_seq);
                self.retire();
            }
            Job::Buffered { chunk, buf } => {
                self.land(&chunk, &buf);
                self.queue.complete_data(chunk.op_seq);
                self.retire();
            }
            Job::Seal { .. } => {
                let base = self.queue.end_seal();
                let slot = self.slot(base);
                self.segments[slot].tail_block = Vec::new();
            }
        }
    }

    fn land(&mut self, chunk: &ChunkInfo, bytes: &[u8]) {
        let file = self.disk.entry(chunk.segment_base_offset).or_default();
        let end = chunk.position as usize + bytes.len();
        if file.len() < end {
            file.resize(end, 0);
        }
        file[chunk.position as usize..end].copy_from_slice(bytes);
    }

    fn retire(&mut self) {
        while let Some(chunk) = self.queue.pop_retired() {
            if chunk.batches_end_offset >= 0 {
                self.written_end_offset = chunk.batches_end_offset;
            }
            let more_queued = self.queue.holds_data_of(chunk.segment_base_offset);
            let slot = self.slot(chunk.segment_base_offset);
            let segment = &mut self.segments[slot];
            segment.written_bytes = chunk.end();
            if let (Some(tail), false) = (chunk.written_tail(), more_queued) {
                segment.tail_block = tail.to_vec();
            }
        }
    }

    fn slot(&self, base_offset: i64) -> usize {
        self.segments
            .iter()
            .position(|s| s.base_offset == base_offset)
            .expect("segment exists")
    }

    /// Takes and completes everything, oldest first.
    fn drain(&mut self) {
        loop {
            while self.take() {}
            if self.in_flight.is_empty() {
                break;
            }
            self.complete(0);
        }
    }

    fn check_invariants(&self) {
        let queue = &self.queue;
        assert!(queue.ops_synced <= queue.ops_done && queue.ops_done <= queue.ops_enqueued);
        assert!(queue.writes_in_flight <= WRITES_IN_FLIGHT_MAX);
        let seals: Vec<i64> = self
            .in_flight
            .iter()
            .filter_map(|job| match job {
                Job::Seal {
                    segment_base_offset,
                    ..
                } => Some(*segment_base_offset),
                _ => None,
            })
            .collect();
        assert!(seals.len() <= 1, "one seal at a time: {seals:?}");
        assert_eq!(queue.sealing, seals.first().copied());
        assert_eq!(queue.writes_in_flight, self.in_flight.len() - seals.len());
        if let Some(&sealing) = seals.first() {
            // Its segment's bytes are all written: no write of it is queued or in flight.
            assert!(
                !queue.holds_data_of(sealing),
                "data of a segment being sealed"
            );
        }
        // Writes in flight never share a block.
        let mut blocks: Vec<(i64, u64, u64)> = self
            .in_flight
            .iter()
            .filter_map(|job| match job {
                Job::Direct { chunk, buf } => Some((
                    chunk.segment_base_offset,
                    chunk.position,
                    chunk.position + buf.len() as u64,
                )),
                _ => None,
            })
            .collect();
        blocks.sort_unstable();
        for pair in blocks.windows(2) {
            assert!(pair[0].0 != pair[1].0 || pair[0].2 <= pair[1].1, "{pair:?}");
        }
        self.check_written_batches();
    }

    /// Every batch below the written end offset (what acks=1 answers by, and consumers read
    /// up to) is on the model disk whole, and so is every byte before it in its segment.
    fn check_written_batches(&self) {
        for &(base, end, next_offset) in &self.batches {
            if next_offset > self.written_end_offset {
                break;
            }
            let disk = self.disk.get(&base).map_or(&[][..], Vec::as_slice);
            let appended = &self.appended[&base][..end];
            assert!(
                disk.len() >= end && disk[..end] == *appended,
                "the batch below offset {next_offset} counts as written and is not on disk"
            );
        }
    }

    /// Every appended byte is on the model disk, at its place; past it only zeros (direct
    /// mode pads the last block).
    fn check_disk(&self) {
        for (base, appended) in &self.appended {
            let disk = self.disk.get(base).expect("segment written");
            assert!(disk.len() >= appended.len());
            assert!(disk[..appended.len()] == appended[..], "segment {base}");
            assert!(disk[appended.len()..].iter().all(|&b| b == 0));
        }
    }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn a_completed_write_retires_its_chunk_and_its_bytes() {
    for mode in [IoMode::Buffered, IoMode::Direct] {
        let mut h = Harness::new(mode);
        h.append(&bytes(100, 1));
        assert_eq!((h.queue.ops_enqueued, h.queue.pending_bytes), (1, 100));
        assert!(h.take());
        assert!(!h.take(), "{mode:?}: one chunk, one write");
        assert_eq!(h.queue.ops_done, 0);
        h.complete(0);
        assert_eq!((h.queue.ops_done, h.queue.pending_bytes), (1, 0));
        assert_eq!(h.segments[0].written_bytes, 100);
        h.check_disk();
    }
}

#[test]
fn ops_done_moves_past_an_op_only_once_every_op_before_it_is_done() {
    let mut h = Harness::new(IoMode::Direct);
    // Two full chunks: the second starts on a fresh block and may go out beside the first.
    h.append(&bytes(2 * BLOCK_BYTES, 1));
    h.append(&bytes(2 * BLOCK_BYTES, 2));
    assert_eq!(h.queue.ops_enqueued, 2);
    assert!(h.take() && h.take());
    assert_eq!(h.queue.writes_in_flight, 2);
    h.check_invariants();
    h.complete(1);
    assert_eq!(
        h.queue.ops_done, 0,
        "the second write is done, the first is not"
    );
    assert_eq!(h.queue.pending_bytes, 4 * BLOCK_BYTES);
    h.complete(0);
    assert_eq!(h.queue.ops_done, 2);
    assert_eq!(h.queue.pending_bytes, 0);
    h.check_disk();
}

#[test]
fn a_second_direct_write_needs_a_fresh_block_and_an_existing_file() {
    let mut h = Harness::new(IoMode::Direct);
    h.append(&bytes(100, 1));
    assert!(h.take());
    // The next bytes share the first block, so their chunk rewrites it: it waits.
    h.append(&bytes(100, 2));
    assert!(h.queue.next_job(|_| true, Instant::now()).is_none());
    h.complete(0);
    assert!(h.take());
    h.complete(0);
    h.check_disk();
    // A chunk on a fresh block of a segment without a file waits for the first write too.
    h.append(&bytes(2 * BLOCK_BYTES - 200, 3));
    h.append(&bytes(BLOCK_BYTES, 4));
    assert!(h.take());
    assert!(h.queue.next_job(|_| false, Instant::now()).is_none());
    assert!(h.queue.next_job(|_| true, Instant::now()).is_some());
    h.drain();
    h.check_disk();
}

#[test]
fn buffered_mode_keeps_one_write_in_flight() {
    let mut h = Harness::new(IoMode::Buffered);
    h.append(&bytes(2 * BLOCK_BYTES, 1));
    h.append(&bytes(2 * BLOCK_BYTES, 2));
    assert!(h.take());
    assert!(!h.take());
    h.drain();
    assert_eq!(h.queue.ops_done, h.queue.ops_enqueued);
    h.check_disk();
}

#[test]
fn a_seal_waits_for_the_writes_before_it_and_the_next_segment_does_not_wait_for_it() {
    let mut h = Harness::new(IoMode::Direct);
    h.append(&bytes(300, 1));
    h.roll(10);
    h.append(&bytes(2 * BLOCK_BYTES, 2));
    h.roll(20);
    h.append(&bytes(100, 3));
    assert!(h.take());
    assert!(!h.take(), "the seal waits for the write in flight");
    h.complete(0);
    assert_eq!(h.queue.ops_done, 1);
    assert!(h.take(), "the seal");
    assert!(matches!(h.in_flight[0], Job::Seal { .. }));
    assert_eq!(h.queue.ops_done, 2, "done with the queue as it starts");
    assert!(h.queue.holds_segment(0));
    assert!(h.take(), "the next segment's write beside the seal");
    h.check_invariants();
    h.complete(1);
    assert_eq!(h.queue.ops_done, 3, "retired while the seal is in flight");
    assert!(!h.take(), "one seal at a time");
    h.complete(0);
    assert!(!h.queue.holds_segment(0));
    assert!(h.take(), "the second seal once the first ended");
    h.drain();
    assert_eq!(h.queue.ops_done, 5);
    h.check_disk();
}

#[test]
fn queued_bytes_are_readable_except_inside_a_buffered_write_in_flight() {
    for mode in [IoMode::Buffered, IoMode::Direct] {
        let mut h = Harness::new(mode);
        let appended = bytes(5_000, 7);
        h.append(&appended);
        let mut out = Vec::new();
        h.queue
            .copy_queued(0, 1_000, 3_000, &mut out)
            .expect("queued");
        assert!(out == appended[1_000..3_000]);
        assert!(h.take());
        out.clear();
        let copied = h.queue.copy_queued(0, 1_000, 3_000, &mut out);
        match mode {
            IoMode::Buffered => assert!(copied.is_err(), "glommio owns the buffer"),
            IoMode::Direct => assert!(copied.is_ok() && out == appended[1_000..3_000]),
        }
        h.drain();
    }
}

#[derive(Clone, Debug)]
enum Step {
    Append(usize),
    Roll,
    Take,
    /// Completes the job in flight at this index (modulo how many are in flight).
    Complete(usize),
    Synced,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1usize..3 * BLOCK_BYTES).prop_map(Step::Append),
        1 => Just(Step::Roll),
        3 => Just(Step::Take),
        3 => (0usize..4).prop_map(Step::Complete),
        1 => Just(Step::Synced),
    ]
}

proptest! {
    /// Any interleaving of appends, rolls, takes and completions (in any order) keeps the
    /// queue's invariants, and once everything is written the disk holds exactly what was
    /// appended.
    #[test]
    fn any_interleaving_writes_exactly_what_was_appended(
        direct in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let mode = if direct { IoMode::Direct } else { IoMode::Buffered };
        let mut h = Harness::new(mode);
        let mut appended_total = 0;
        let mut next_base = 1_000;
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Append(len) => {
                    h.append(&bytes(len, i as u8));
                    appended_total += len;
                }
                Step::Roll => {
                    h.roll(next_base);
                    next_base += 1_000;
                }
                Step::Take => {
                    h.take();
                }
                Step::Complete(index) if !h.in_flight.is_empty() => {
                    let index = index % h.in_flight.len();
                    h.complete(index);
                }
                Step::Complete(_) => {}
                Step::Synced => h.queue.mark_synced(h.queue.ops_done),
            }
            h.check_invariants();
            prop_assert!(h.queue.pending_bytes <= appended_total);
            // Without a stage every chunk is heap memory.
            prop_assert_eq!(h.queue.heap_pending_bytes, h.queue.pending_bytes);
        }
        h.drain();
        h.check_invariants();
        prop_assert_eq!(h.queue.ops_done, h.queue.ops_enqueued);
        prop_assert_eq!(h.queue.pending_bytes, 0);
        h.check_disk();
    }
}

#[test]
fn a_staged_chunk_waits_to_fill_until_its_hold_ends_or_a_waiter_wants_it() {
    let data = tempfile::tempdir().expect("tmp");
    let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
    crate::stage::install(shm.path(), data.path(), 0, 1 << 20)
        .expect("install")
        .expect("/dev/shm is tmpfs: a stage");
    let mut h = Harness::new(IoMode::Direct);
    h.append(&bytes(100, 1));
    let until = h
        .queue
        .held_until()
        .expect("a staged chunk with room waits to fill");
    let before = until - Duration::from_micros(1);
    assert!(h.queue.next_job(|_| true, before).is_none(), "held");
    assert!(
        h.queue.next_job(|_| true, until).is_some(),
        "its hold ended"
    );

    // Filled up, it goes at once: the next append starts the chunk that waits.
    while h.queue.ops.len() == 1 {
        h.append(&bytes(3_000, 2));
    }
    assert!(h.queue.held_until().is_some_and(|next| next >= until));
    assert!(h.queue.next_job(|_| true, before).is_some(), "full");
    assert!(h.take());
    h.complete(0);

    // A waiter (sync, flush, room) wants every queued byte written: nothing is held.
    assert!(h.queue.next_job(|_| true, before).is_none(), "held");
    h.queue.want_written();
    assert_eq!(h.queue.held_until(), None);
    assert!(h.queue.next_job(|_| true, before).is_some(), "wanted");
    h.drain();
    h.check_disk();
    drop(h);
    crate::stage::uninstall();
}

#[test]
fn a_durable_write_makes_its_ops_durable_only_after_every_op_before_it_is() {
    let mut h = Harness::new(IoMode::Direct);
    h.append(&bytes(2 * BLOCK_BYTES, 1));
    assert!(h.take(), "taken before any sync waits: not durable");
    h.append(&bytes(2 * BLOCK_BYTES, 2));
    h.queue.want_synced();
    assert!(h.take());
    let durable: Vec<bool> = h
        .in_flight
        .iter()
        .map(|job| matches!(job, Job::Direct { chunk, .. } if chunk.durable))
        .collect();
    assert_eq!(durable, [false, true]);
    h.complete(1);
    h.complete(0);
    assert_eq!((h.queue.ops_done, h.queue.ops_synced), (2, 0));
    // Durable after an op that is not: still waits for an fdatasync round.
    h.append(&bytes(100, 3));
    h.queue.want_synced();
    h.drain();
    assert_eq!((h.queue.ops_done, h.queue.ops_synced), (3, 0));
    h.queue.mark_synced(3);
    // From a durable prefix on, a seal and a durable write each extend it.
    h.roll(10);
    h.append(&bytes(100, 4));
    h.queue.want_synced();
    assert!(h.take(), "the seal");
    assert_eq!(h.queue.ops_synced, 4);
    h.complete(0);
    h.drain();
    assert_eq!((h.queue.ops_done, h.queue.ops_synced), (5, 5));
    // Without a sync waiting, a write is not durable.
    h.append(&bytes(100, 5));
    h.drain();
    assert_eq!((h.queue.ops_done, h.queue.ops_synced), (6, 5));
    h.check_disk();
}

#[test]
fn buffered_writes_are_never_durable_by_themselves() {
    let mut h = Harness::new(IoMode::Buffered);
    h.append(&bytes(100, 1));
    h.queue.want_synced();
    h.drain();
    assert_eq!((h.queue.ops_done, h.queue.ops_synced), (1, 0));
}
