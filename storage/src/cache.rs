//! Per-shard cache of recently written and read-ahead data, shared by every `Log` of the
//! shard through `Rc`. In direct mode a written chunk stays shared here (`SharedChunk`, no
//! copy), so tailing consumers and followers are served from memory instead of re-reading
//! what O_DIRECT just wrote, and a read that one chunk answers gets a slice of it, no copy
//! either (`shared_prefix`); a log reading ahead for a sequential consumer leaves its read
//! buffer here.
//!
//! Entries are kept in insertion order (eviction takes the oldest) and indexed per log and
//! segment by their start position, so finding a range costs a map lookup and a walk back
//! over at most the longest entry's length, whatever the cache's size: a cache of gigabytes
//! serves a reader of old data as fast as a tailing one.
//!
//! Invariants: the sum of the cached buffers' allocation sizes stays <= `bytes_max` (oldest
//! entries are evicted first; an entry larger than the whole budget is not kept); an entry
//! covers bytes `[position, position + len)` of one segment of one log, exactly as written,
//! so any two entries agree on the bytes they share; every entry is in `by_age` and in its
//! segment's `starts` (and, if a read-ahead, in its log's `read_aheads`), and nowhere else;
//! no entry of a segment is longer than that segment's `len_max`.
//! Read-ahead entries hold at most half the budget, so they never push out more than half
//! of what tailing consumers need, and each serves one reader: a read of the same log
//! that starts past its end removes it (the next window overlaps the tail of the one
//! before, so a read-ahead lives until the read after next), making room for later ones.
//! Written chunks in the stage (`crate::stage`) give way to write queues: when the stage is
//! full, the oldest of them are dropped (`give_back_staged`), since a queue's chunk outside
//! the stage makes its acks=1 answers wait for the disk.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use glommio::io::ReadResult;

use crate::chunk_memory::SharedChunk;

/// A slice of one chunk shorter than this is no answer when the next chunk holds more of
/// the range: a copy of both answers in one read (a follower behind by several chunks).
const SHARED_RUN_BYTES_MIN: usize = 256 << 10;

/// The memory behind a cache entry.
pub(crate) enum CachedBytes {
    /// A write chunk, shared with the log that wrote it.
    Written(Arc<SharedChunk>),
    /// An O_DIRECT read done ahead of a reader.
    Read(ReadResult),
    /// A read-ahead in unit tests, which cannot make a `ReadResult`.
    #[cfg(test)]
    ReadForTest(Vec<u8>),
}

impl CachedBytes {
    fn as_bytes(&self) -> &[u8] {
        match self {
            CachedBytes::Written(buf) => buf.as_bytes(),
            CachedBytes::Read(data) => data,
            #[cfg(test)]
            CachedBytes::ReadForTest(data) => data,
        }
    }
}

impl From<Arc<SharedChunk>> for CachedBytes {
    fn from(buf: Arc<SharedChunk>) -> Self {
        CachedBytes::Written(buf)
    }
}

impl From<ReadResult> for CachedBytes {
    fn from(data: ReadResult) -> Self {
        CachedBytes::Read(data)
    }
}

struct CacheEntry {
    log_id: u64,
    segment_base_offset: i64,
    position: u64,
    len: usize,
    charge_bytes: usize,
    data: CachedBytes,
}

impl CacheEntry {
    /// A written chunk whose memory is a run of the stage.
    fn is_staged(&self) -> bool {
        matches!(&self.data, CachedBytes::Written(chunk) if chunk.is_staged())
    }

    fn is_read_ahead(&self) -> bool {
        match self.data {
            CachedBytes::Written(_) => false,
            CachedBytes::Read(_) => true,
            #[cfg(test)]
            CachedBytes::ReadForTest(_) => true,
        }
    }

    fn end(&self) -> u64 {
        self.position + self.len as u64
    }
}

/// Where one log's entries are.
#[derive(Default)]
struct LogEntries {
    segments: BTreeMap<i64, SegmentEntries>,
    /// Insertion numbers of the log's read-ahead entries (a few: one or two per reader).
    read_aheads: Vec<u64>,
}

/// Where one segment's entries start.
#[derive(Default)]
struct SegmentEntries {
    /// `(position, insertion number)` of each entry.
    starts: BTreeSet<(u64, u64)>,
    /// The longest entry inserted: none covering a position starts further before it.
    len_max: u64,
}

/// The entries and their index; `BatchCache` wraps it for shared use.
#[derive(Default)]
struct Entries {
    next_seq: u64,
    bytes: usize,
    read_ahead_bytes: usize,
    /// Of `bytes`, those of entries whose memory is in the stage.
    staged_bytes: usize,
    /// Every entry by insertion number: the first is the oldest.
    by_age: BTreeMap<u64, CacheEntry>,
    logs: HashMap<u64, LogEntries>,
}

impl Entries {
    fn push(&mut self, entry: CacheEntry) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += entry.charge_bytes;
        let log = self.logs.entry(entry.log_id).or_default();
        if entry.is_read_ahead() {
            self.read_ahead_bytes += entry.charge_bytes;
            log.read_aheads.push(seq);
        }
        if entry.is_staged() {
            self.staged_bytes += entry.charge_bytes;
        }
        let segment = log.segments.entry(entry.segment_base_offset).or_default();
        segment.starts.insert((entry.position, seq));
        segment.len_max = segment.len_max.max(entry.len as u64);
        self.by_age.insert(seq, entry);
    }

    /// Drops the entry `seq` from `by_age` and the counters; the caller fixes the index.
    fn take(&mut self, seq: u64) -> Option<CacheEntry> {
        let entry = self.by_age.remove(&seq)?;
        self.bytes -= entry.charge_bytes;
        if entry.is_read_ahead() {
            self.read_ahead_bytes -= entry.charge_bytes;
        }
        if entry.is_staged() {
            self.staged_bytes -= entry.charge_bytes;
        }
        Some(entry)
    }

    /// Drops the entry `seq` wherever it is.
    fn remove(&mut self, seq: u64) {
        let Some(entry) = self.take(seq) else { return };
        let Some(log) = self.logs.get_mut(&entry.log_id) else {
            return;
        };
        if let Some(segment) = log.segments.get_mut(&entry.segment_base_offset) {
            segment.starts.remove(&(entry.position, seq));
            if segment.starts.is_empty() {
                log.segments.remove(&entry.segment_base_offset);
            }
        }
        if entry.is_read_ahead() {
            log.read_aheads.retain(|&ahead| ahead != seq);
        }
        if log.segments.is_empty() {
            self.logs.remove(&entry.log_id);
        }
    }

    fn evict_oldest(&mut self) -> bool {
        match self.by_age.first_key_value() {
            Some((&seq, _)) => {
                self.remove(seq);
                true
            }
            None => false,
        }
    }

    /// Drops every entry of `segments`, cut out of log `log_id`'s index by the caller.
    fn remove_segments(&mut self, log_id: u64, segments: impl IntoIterator<Item = SegmentEntries>) {
        for segment in segments {
            for (_, seq) in segment.starts {
                self.take(seq);
            }
        }
        let by_age = &self.by_age;
        if let Some(log) = self.logs.get_mut(&log_id) {
            log.read_aheads.retain(|seq| by_age.contains_key(seq));
            if log.segments.is_empty() {
                self.logs.remove(&log_id);
            }
        }
    }

    /// An entry covering byte `at` of the segment, if any.
    fn covering(&self, log_id: u64, segment_base_offset: i64, at: u64) -> Option<&CacheEntry> {
        let segment = self.logs.get(&log_id)?.segments.get(&segment_base_offset)?;
        let from = (at + 1).saturating_sub(segment.len_max);
        segment
            .starts
            .range((from, 0)..=(at, u64::MAX))
            .rev()
            .map(|(_, seq)| &self.by_age[seq])
            .find(|entry| entry.end() > at)
    }
}

/// Recently appended data of the shard's logs, bounded by a byte budget.
pub struct BatchCache {
    bytes_max: usize,
    next_log_id: Cell<u64>,
    entries: RefCell<Entries>,
}

impl BatchCache {
    pub fn new(bytes_max: usize) -> BatchCache {
        BatchCache {
            bytes_max,
            next_log_id: Cell::new(0),
            entries: RefCell::new(Entries::default()),
        }
    }

    /// Bytes currently held (allocation sizes of the cached buffers).
    pub fn size_bytes(&self) -> usize {
        self.entries.borrow().bytes
    }

    pub(crate) fn register_log(&self) -> u64 {
        let id = self.next_log_id.get();
        self.next_log_id.set(id + 1);
        id
    }

    /// Keeps `data[..len]`, the bytes written at `position` of a segment. `charge_bytes` is the
    /// memory the buffer really holds (its allocation).
    pub(crate) fn insert(
        &self,
        log_id: u64,
        segment_base_offset: i64,
        position: u64,
        len: usize,
        charge_bytes: usize,
        data: impl Into<CachedBytes>,
    ) {
        let data = data.into();
        assert!(len <= data.as_bytes().len());
        if charge_bytes > self.bytes_max {
            return;
        }
        let mut entries = self.entries.borrow_mut();
        while entries.bytes + charge_bytes > self.bytes_max && entries.evict_oldest() {}
        entries.push(CacheEntry {
            log_id,
            segment_base_offset,
            position,
            len,
            charge_bytes,
            data,
        });
    }

    /// Drops the oldest entries whose memory is in the stage, at least `bytes` of them if it
    /// holds that many: the stage is full, and a write queue needs the room more (its acks
    /// would wait for the disk in heap memory). The slots come back to the stage once no
    /// read holds the chunk either.
    pub(crate) fn give_back_staged(&self, bytes: usize) {
        let mut entries = self.entries.borrow_mut();
        if entries.staged_bytes == 0 {
            return;
        }
        let mut oldest = Vec::new();
        let mut given = 0;
        for (&seq, entry) in &entries.by_age {
            if given >= bytes {
                break;
            }
            if entry.is_staged() {
                oldest.push(seq);
                given += entry.charge_bytes;
            }
        }
        for seq in oldest {
            entries.remove(seq);
        }
    }

    /// Bytes that read-ahead entries hold.
    pub fn read_ahead_size_bytes(&self) -> usize {
        self.entries.borrow().read_ahead_bytes
    }

    /// Whether a read-ahead of `charge_bytes` fits the half of the budget read-aheads may use.
    pub(crate) fn has_read_ahead_room(&self, charge_bytes: usize) -> bool {
        self.entries.borrow().read_ahead_bytes + charge_bytes <= self.bytes_max / 2
    }

    /// Copies the longest cached run of `[position, position + len)`, from `position` on,
    /// into `out`; returns its length (0 on a miss). Consecutive writes overlap by their
    /// shared partial block, so a run may span several entries.
    pub(crate) fn copy_prefix(
        &self,
        log_id: u64,
        segment_base_offset: i64,
        position: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> usize {
        let copied = self.walk_prefix(log_id, segment_base_offset, position, len, |piece| {
            out.extend_from_slice(piece)
        });
        self.drop_read_aheads_behind(log_id, segment_base_offset, position);
        copied
    }

    /// The cached bytes `[position, position + len)` of a segment, or a prefix of them at
    /// least `need` long, as a slice of one written chunk: no copy. `None` (the caller copies,
    /// `copy_prefix`) when no written chunk holds `need` bytes from `position`; when the slice
    /// would be under a quarter of its chunk's memory, which it keeps alive wherever it
    /// travels, after an eviction too; and when it is short of `SHARED_RUN_BYTES_MIN` while
    /// the next chunk holds more of the range, which a copy answers in one read.
    pub(crate) fn shared_prefix(
        &self,
        log_id: u64,
        segment_base_offset: i64,
        position: u64,
        need: usize,
        len: usize,
    ) -> Option<Bytes> {
        let bytes = {
            let entries = self.entries.borrow();
            let entry = entries.covering(log_id, segment_base_offset, position)?;
            let CachedBytes::Written(chunk) = &entry.data else {
                return None;
            };
            let from = (position - entry.position) as usize;
            let run = (entry.len - from).min(len);
            let more_cached = || {
                run < len
                    && entries
                        .covering(log_id, segment_base_offset, entry.end())
                        .is_some()
            };
            if run < need
                || run * 4 < entry.charge_bytes
                || (run < SHARED_RUN_BYTES_MIN && more_cached())
            {
                return None;
            }
            chunk.slice(from..from + run)
        };
        self.drop_read_aheads_behind(log_id, segment_base_offset, position);
        Some(bytes)
    }

    /// Read-aheads of the log wholly behind a read at `position` of a segment have served
    /// their reader.
    fn drop_read_aheads_behind(&self, log_id: u64, segment_base_offset: i64, position: u64) {
        let mut entries = self.entries.borrow_mut();
        let Some(log) = entries.logs.get(&log_id) else {
            return;
        };
        let behind: Vec<u64> = log
            .read_aheads
            .iter()
            .copied()
            .filter(|seq| {
                let entry = &entries.by_age[seq];
                entry.segment_base_offset < segment_base_offset
                    || (entry.segment_base_offset == segment_base_offset && entry.end() <= position)
            })
            .collect();
        for seq in behind {
            entries.remove(seq);
        }
    }

    /// Length of the longest cached run of `[position, position + len)` from `position` on.
    pub(crate) fn cached_prefix_bytes(
        &self,
        log_id: u64,
        segment_base_offset: i64,
        position: u64,
        len: usize,
    ) -> usize {
        self.walk_prefix(log_id, segment_base_offset, position, len, |_| {})
    }

    /// Hands the pieces of the longest cached run of `[position, position + len)`, in order,
    /// to `each`; returns the run's length.
    fn walk_prefix(
        &self,
        log_id: u64,
        segment_base_offset: i64,
        position: u64,
        len: usize,
        mut each: impl FnMut(&[u8]),
    ) -> usize {
        let entries = self.entries.borrow();
        let end = position + len as u64;
        let mut at = position;
        while at < end {
            let Some(entry) = entries.covering(log_id, segment_base_offset, at) else {
                break;
            };
            let from = (at - entry.position) as usize;
            let to = (end.min(entry.end()) - entry.position) as usize;
            each(&entry.data.as_bytes()[from..to]);
            at += (to - from) as u64;
        }
        (at - position) as usize
    }

    /// Drops every entry of a log (closed or deleted).
    pub(crate) fn remove_log(&self, log_id: u64) {
        let mut entries = self.entries.borrow_mut();
        if let Some(log) = entries.logs.get_mut(&log_id) {
            let segments = std::mem::take(&mut log.segments);
            entries.remove_segments(log_id, segments.into_values());
        }
    }

    /// Drops a log's entries of segments below `base_offset` (deleted by retention).
    pub(crate) fn remove_segments_before(&self, log_id: u64, base_offset: i64) {
        let mut entries = self.entries.borrow_mut();
        if let Some(log) = entries.logs.get_mut(&log_id) {
            let kept = log.segments.split_off(&base_offset);
            let segments = std::mem::replace(&mut log.segments, kept);
            entries.remove_segments(log_id, segments.into_values());
        }
    }

    /// Drops a log's entries of one segment (replaced by its cleaned copy).
    pub(crate) fn remove_segment(&self, log_id: u64, base_offset: i64) {
        let mut entries = self.entries.borrow_mut();
        if let Some(log) = entries.logs.get_mut(&log_id) {
            let segment = log.segments.remove(&base_offset);
            entries.remove_segments(log_id, segment);
        }
    }

    /// Drops a log's entries of segments at or above `base_offset` (cut by a truncation).
    pub(crate) fn remove_segments_from(&self, log_id: u64, base_offset: i64) {
        let mut entries = self.entries.borrow_mut();
        if let Some(log) = entries.logs.get_mut(&log_id) {
            let segments = log.segments.split_off(&base_offset);
            entries.remove_segments(log_id, segments.into_values());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_memory::ChunkMemory;
    use proptest::prelude::*;

    fn chunk(bytes: &[u8], capacity: usize) -> Arc<SharedChunk> {
        let mut memory = ChunkMemory::allocate(capacity);
        memory.as_bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        memory.freeze(capacity)
    }

    fn buffer(fill: u8) -> Arc<SharedChunk> {
        chunk(&[fill; 4096], 4096)
    }

    #[test]
    fn serves_covered_ranges_and_evicts_oldest() {
        let cache = BatchCache::new(8192);
        let log = cache.register_log();
        cache.insert(log, 0, 0, 4096, 4096, buffer(1));
        cache.insert(log, 0, 4096, 100, 4096, buffer(2));
        let mut out = Vec::new();
        assert_eq!(cache.copy_prefix(log, 0, 10, 20, &mut out), 20);
        assert_eq!(out, vec![1u8; 20]);
        assert_eq!(
            cache.cached_prefix_bytes(log, 0, 4096, 101),
            100,
            "up to the written bytes"
        );
        assert_eq!(cache.cached_prefix_bytes(log, 5, 0, 1), 0, "other segment");
        cache.insert(log, 0, 8192, 10, 4096, buffer(3));
        assert_eq!(cache.size_bytes(), 8192);
        assert_eq!(
            cache.cached_prefix_bytes(log, 0, 10, 20),
            0,
            "oldest evicted"
        );
        cache.remove_log(log);
        assert_eq!(cache.size_bytes(), 0);
    }

    #[test]
    fn a_prefix_is_served_up_to_the_first_gap() {
        let cache = BatchCache::new(1 << 20);
        let log = cache.register_log();
        cache.insert(log, 0, 0, 4096, 4096, buffer(1));
        cache.insert(log, 0, 4096, 1000, 4096, buffer(2));
        let mut out = Vec::new();
        assert_eq!(cache.copy_prefix(log, 0, 4000, 5000, &mut out), 1096);
        assert_eq!(cache.cached_prefix_bytes(log, 0, 4000, 5000), 1096);
        assert_eq!(&out[..96], &[1u8; 96][..]);
        assert_eq!(&out[96..], &[2u8; 1000][..]);
        out.clear();
        assert_eq!(cache.copy_prefix(log, 0, 5096, 10, &mut out), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn an_entry_that_starts_long_before_a_read_still_serves_it() {
        let cache = BatchCache::new(1 << 20);
        let log = cache.register_log();
        cache.insert(log, 0, 0, 65536, 65536, chunk(&[7; 65536], 65536));
        // Short entries after it in the same segment, then one inside it.
        cache.insert(log, 0, 65536, 100, 4096, buffer(8));
        cache.insert(log, 0, 40960, 10, 4096, buffer(7));
        let mut out = Vec::new();
        assert_eq!(cache.copy_prefix(log, 0, 60000, 6000, &mut out), 5636);
        assert!(out[..5536].iter().all(|&byte| byte == 7));
        assert!(out[5536..].iter().all(|&byte| byte == 8));
    }

    /// The byte every entry holds at `position` of `segment` of `log`: entries agree on the
    /// bytes they share, as written data does.
    fn byte_at(log: u64, segment: i64, position: u64) -> u8 {
        (position.wrapping_mul(31) ^ (log * 7 + segment as u64 * 13)) as u8
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert {
            log: u64,
            segment: i64,
            position: u64,
            len: usize,
            read_ahead: bool,
        },
        Read {
            log: u64,
            segment: i64,
            position: u64,
            len: usize,
        },
        RemoveLog(u64),
        RemoveBefore(u64, i64),
        RemoveSegment(u64, i64),
        RemoveFrom(u64, i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let place = (0u64..2, 0i64..3, 0u64..6000);
        prop_oneof![
            6 => (place.clone(), 1usize..3000, any::<bool>()).prop_map(
                |((log, segment, position), len, read_ahead)| Op::Insert {
                    log,
                    segment,
                    position,
                    len,
                    read_ahead
                }
            ),
            6 => (place, 1usize..4000).prop_map(|((log, segment, position), len)| Op::Read {
                log,
                segment,
                position,
                len
            }),
            1 => (0u64..2).prop_map(Op::RemoveLog),
            1 => (0u64..2, 0i64..3).prop_map(|(log, base)| Op::RemoveBefore(log, base)),
            1 => (0u64..2, 0i64..3).prop_map(|(log, base)| Op::RemoveSegment(log, base)),
            1 => (0u64..2, 0i64..3).prop_map(|(log, base)| Op::RemoveFrom(log, base)),
        ]
    }

    #[test]
    fn one_written_chunk_answers_with_a_slice_of_itself() {
        let cache = BatchCache::new(4 << 20);
        let log = cache.register_log();
        let bytes: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        let first = chunk(&bytes, 65536);
        cache.insert(log, 0, 0, 65536, 65536, first.clone());
        let shared = cache
            .shared_prefix(log, 0, 100, 61, 70000)
            .expect("one chunk holds it");
        assert_eq!(shared.len(), 65436, "up to the chunk's end");
        assert_eq!(&shared[..], &bytes[100..]);
        assert_eq!(shared.as_ptr(), first.as_bytes()[100..].as_ptr(), "no copy");
        assert!(
            cache.shared_prefix(log, 0, 65000, 1000, 1000).is_none(),
            "fewer bytes than needed"
        );
        assert!(
            cache.shared_prefix(log, 0, 60000, 1, 2000).is_none(),
            "a sliver of a large chunk would keep all of it alive"
        );
        // A second chunk rewrites the first one's last block and goes on.
        let mut second = bytes[61440..].to_vec();
        second.extend_from_slice(&[9; 4096]);
        cache.insert(log, 0, 61440, 8192, 8192, chunk(&second, 8192));
        assert!(
            cache.shared_prefix(log, 0, 0, 61, 100_000).is_none(),
            "a short chunk with more cached after it: one copy answers more"
        );
        let mut out = Vec::new();
        assert_eq!(cache.copy_prefix(log, 0, 0, 100_000, &mut out), 69632);
        assert!(
            cache.shared_prefix(log, 0, 0, 61, 65536).is_some(),
            "all that is asked"
        );
        assert!(
            cache.shared_prefix(log, 0, 61440, 61, 8192).is_some(),
            "the last chunk, whole"
        );
    }

    /// What the cache must do, the simple way: a list scanned whole.
    #[derive(Default)]
    struct Model {
        entries: Vec<(u64, i64, u64, usize, usize, bool)>,
    }

    impl Model {
        fn bytes(&self, read_ahead_only: bool) -> usize {
            let entries = self.entries.iter();
            entries
                .filter(|e| !read_ahead_only || e.5)
                .map(|e| e.4)
                .sum()
        }

        fn run(&self, log: u64, segment: i64, position: u64, len: usize) -> usize {
            let end = position + len as u64;
            let mut at = position;
            while at < end {
                let Some(e) = self
                    .entries
                    .iter()
                    .find(|e| e.0 == log && e.1 == segment && e.2 <= at && at < e.2 + e.3 as u64)
                else {
                    break;
                };
                at = end.min(e.2 + e.3 as u64);
            }
            (at - position) as usize
        }
    }

    const BUDGET: usize = 16 << 10;

    proptest! {
        #[test]
        fn the_index_finds_what_a_scan_of_every_entry_finds(
            ops in proptest::collection::vec(op(), 1..120)
        ) {
            let cache = BatchCache::new(BUDGET);
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Insert { log, segment, position, len, read_ahead } => {
                        let bytes: Vec<u8> =
                            (0..len as u64).map(|i| byte_at(log, segment, position + i)).collect();
                        let charge = len.next_multiple_of(512);
                        let data = if read_ahead {
                            CachedBytes::ReadForTest(bytes)
                        } else {
                            CachedBytes::Written(chunk(&bytes, charge))
                        };
                        cache.insert(log, segment, position, len, charge, data);
                        if charge <= BUDGET {
                            while model.bytes(false) + charge > BUDGET {
                                model.entries.remove(0);
                            }
                            model.entries.push((log, segment, position, len, charge, read_ahead));
                        }
                    }
                    Op::Read { log, segment, position, len } => {
                        // As `plan_read` reads: a slice of one chunk if that answers, else a copy.
                        let run = model.run(log, segment, position, len);
                        let out = match cache.shared_prefix(log, segment, position, 1, len) {
                            Some(shared) => {
                                prop_assert!(!shared.is_empty() && shared.len() <= run);
                                shared.to_vec()
                            }
                            None => {
                                let mut out = Vec::new();
                                let copied =
                                    cache.copy_prefix(log, segment, position, len, &mut out);
                                prop_assert_eq!(copied, run);
                                prop_assert_eq!(out.len(), copied);
                                out
                            }
                        };
                        for (i, byte) in out.iter().enumerate() {
                            prop_assert_eq!(*byte, byte_at(log, segment, position + i as u64));
                        }
                        model.entries.retain(|e| {
                            !(e.5 && e.0 == log
                                && (e.1 < segment || (e.1 == segment && e.2 + e.3 as u64 <= position)))
                        });
                    }
                    Op::RemoveLog(log) => {
                        cache.remove_log(log);
                        model.entries.retain(|e| e.0 != log);
                    }
                    Op::RemoveBefore(log, base) => {
                        cache.remove_segments_before(log, base);
                        model.entries.retain(|e| !(e.0 == log && e.1 < base));
                    }
                    Op::RemoveSegment(log, base) => {
                        cache.remove_segment(log, base);
                        model.entries.retain(|e| !(e.0 == log && e.1 == base));
                    }
                    Op::RemoveFrom(log, base) => {
                        cache.remove_segments_from(log, base);
                        model.entries.retain(|e| !(e.0 == log && e.1 >= base));
                    }
                }
                prop_assert_eq!(cache.size_bytes(), model.bytes(false));
                prop_assert_eq!(cache.read_ahead_size_bytes(), model.bytes(true));
                for log in 0..2 {
                    for segment in 0..3 {
                        for position in (0..9000).step_by(250) {
                            prop_assert_eq!(
                                cache.cached_prefix_bytes(log, segment, position, 700),
                                model.run(log, segment, position, 700)
                            );
                        }
                    }
                }
            }
        }
    }
}
