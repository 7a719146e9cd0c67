//! Per-shard cache of recently written and read-ahead data, shared by every `Log` of the
//! shard through `Rc`. In direct mode a written DMA buffer stays shared here (`Rc<DmaBuffer>`,
//! no copy), so tailing consumers are served from memory instead of re-reading what O_DIRECT
//! just wrote; a log reading ahead for a sequential consumer leaves its read buffer here.
//!
//! Invariants: the sum of the cached buffers' allocation sizes stays <= `bytes_max` (oldest
//! entries are evicted first; an entry larger than the whole budget is not kept); an entry
//! covers bytes `[position, position + len)` of one segment of one log, exactly as written.
//! Read-ahead entries hold at most half the budget, so they never push out more than half
//! of what tailing consumers need, and each serves one reader: a read of the same log
//! that starts past its end removes it (the next window overlaps the tail of the one
//! before, so a read-ahead lives until the read after next), making room for later ones.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use glommio::io::{DmaBuffer, ReadResult};

/// The memory behind a cache entry.
pub(crate) enum CachedBytes {
    /// A write chunk, shared with the log that wrote it.
    Written(Rc<DmaBuffer>),
    /// An O_DIRECT read done ahead of a reader.
    Read(ReadResult),
}

impl CachedBytes {
    fn as_bytes(&self) -> &[u8] {
        match self {
            CachedBytes::Written(buf) => buf.as_bytes(),
            CachedBytes::Read(data) => data,
        }
    }
}

impl From<Rc<DmaBuffer>> for CachedBytes {
    fn from(buf: Rc<DmaBuffer>) -> Self {
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
    fn is_read_ahead(&self) -> bool {
        matches!(self.data, CachedBytes::Read(_))
    }
}

/// Recently appended data of the shard's logs, bounded by a byte budget.
pub struct BatchCache {
    bytes_max: usize,
    bytes: Cell<usize>,
    /// Of `bytes`, what read-ahead entries hold.
    read_ahead_bytes: Cell<usize>,
    next_log_id: Cell<u64>,
    entries: RefCell<VecDeque<CacheEntry>>,
}

impl BatchCache {
    pub fn new(bytes_max: usize) -> BatchCache {
        BatchCache {
            bytes_max,
            bytes: Cell::new(0),
            read_ahead_bytes: Cell::new(0),
            next_log_id: Cell::new(0),
            entries: RefCell::new(VecDeque::new()),
        }
    }

    /// Bytes currently held (allocation sizes of the cached buffers).
    pub fn size_bytes(&self) -> usize {
        self.bytes.get()
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
        while self.bytes.get() + charge_bytes > self.bytes_max {
            match entries.pop_front() {
                Some(evicted) => self.uncharge(&evicted),
                None => break,
            }
        }
        let entry = CacheEntry {
            log_id,
            segment_base_offset,
            position,
            len,
            charge_bytes,
            data,
        };
        self.bytes.set(self.bytes.get() + charge_bytes);
        if entry.is_read_ahead() {
            self.read_ahead_bytes
                .set(self.read_ahead_bytes.get() + charge_bytes);
        }
        entries.push_back(entry);
    }

    /// Bytes that read-ahead entries hold.
    pub fn read_ahead_size_bytes(&self) -> usize {
        self.read_ahead_bytes.get()
    }

    /// Whether a read-ahead of `charge_bytes` fits the half of the budget read-aheads may use.
    pub(crate) fn has_read_ahead_room(&self, charge_bytes: usize) -> bool {
        self.read_ahead_bytes.get() + charge_bytes <= self.bytes_max / 2
    }

    fn uncharge(&self, entry: &CacheEntry) {
        self.bytes.set(self.bytes.get() - entry.charge_bytes);
        if entry.is_read_ahead() {
            self.read_ahead_bytes
                .set(self.read_ahead_bytes.get() - entry.charge_bytes);
        }
    }

    /// Copies the longest cached run of `[position, position + len)`, from `position` on,
    /// into `out`; returns its length (0 on a miss). Consecutive writes overlap by their
    /// shared partial block, so a run may span several entries. Searches newest first:
    /// tailing consumers ask for what was written last.
    // TODO: a per-log map if shards hold thousands of logs; the scan is linear in entries.
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
        if self.read_ahead_bytes.get() > 0 {
            // Read-aheads wholly behind this read have served their reader.
            self.remove_where(|entry| {
                entry.is_read_ahead()
                    && entry.log_id == log_id
                    && (entry.segment_base_offset < segment_base_offset
                        || (entry.segment_base_offset == segment_base_offset
                            && entry.position + entry.len as u64 <= position))
            });
        }
        copied
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
            let covering = entries.iter().rev().find(|entry| {
                entry.log_id == log_id
                    && entry.segment_base_offset == segment_base_offset
                    && entry.position <= at
                    && at < entry.position + entry.len as u64
            });
            let Some(entry) = covering else { break };
            let from = (at - entry.position) as usize;
            let to = (end.min(entry.position + entry.len as u64) - entry.position) as usize;
            each(&entry.data.as_bytes()[from..to]);
            at += (to - from) as u64;
        }
        (at - position) as usize
    }

    /// Drops every entry of a log (closed or deleted).
    pub(crate) fn remove_log(&self, log_id: u64) {
        self.remove_where(|entry| entry.log_id == log_id);
    }

    /// Drops a log's entries of segments below `base_offset` (deleted by retention).
    pub(crate) fn remove_segments_before(&self, log_id: u64, base_offset: i64) {
        self.remove_where(|entry| {
            entry.log_id == log_id && entry.segment_base_offset < base_offset
        });
    }

    /// Drops a log's entries of one segment (replaced by its cleaned copy).
    pub(crate) fn remove_segment(&self, log_id: u64, base_offset: i64) {
        self.remove_where(|entry| {
            entry.log_id == log_id && entry.segment_base_offset == base_offset
        });
    }

    /// Drops a log's entries of segments at or above `base_offset` (cut by a truncation).
    pub(crate) fn remove_segments_from(&self, log_id: u64, base_offset: i64) {
        self.remove_where(|entry| {
            entry.log_id == log_id && entry.segment_base_offset >= base_offset
        });
    }

    fn remove_where(&self, remove: impl Fn(&CacheEntry) -> bool) {
        let mut entries = self.entries.borrow_mut();
        entries.retain(|entry| {
            let keep = !remove(entry);
            if !keep {
                self.uncharge(entry);
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(fill: u8) -> Rc<DmaBuffer> {
        let mut buf = glommio::allocate_dma_buffer_global(4096);
        buf.as_bytes_mut().fill(fill);
        Rc::new(buf)
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
}
