//! One segment of a partition log: the `.log` file of raw batches plus its sparse `.index` and
//! `.timeindex`, named by the segment's base offset in 20 digits (`00000000000000000000.log`).
//!
//! Invariants: batches in a segment have increasing offsets starting at or after
//! `base_offset`, dense unless the cleaner removed some; `written_bytes <= size_bytes` (the rest waits in the log's write queue);
//! every index entry points inside the segment; only the last segment of a log is appended to.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::batch::BatchHeader;
use crate::index::OffsetIndex;
use crate::io::SegmentFile;
use crate::time_index::TimeIndex;

pub(crate) const LOG_SUFFIX: &str = "log";
pub(crate) const INDEX_SUFFIX: &str = "index";
pub(crate) const TIME_INDEX_SUFFIX: &str = "timeindex";
/// A deleted segment's `.log`, kept to be the file of a later segment.
pub(crate) const SPARE_SUFFIX: &str = "spare";
/// A producer-state snapshot, named by the offset it describes the state below (not a
/// segment's file: no `.log` need start there).
pub(crate) const SNAPSHOT_SUFFIX: &str = "snapshot";
/// Marks "no timestamp seen yet"; Kafka's NO_TIMESTAMP is -1, which a batch may legally carry.
pub(crate) const TIMESTAMP_NONE: i64 = i64::MIN;

pub(crate) fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}"))
}

/// Offset and suffix of a partition file's name (`.log`, `.index`, `.timeindex`, `.spare` or
/// `.snapshot`), or `None` for any other file.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<(i64, &'static str)> {
    let (digits, suffix) = name.split_once('.')?;
    let suffix = [
        LOG_SUFFIX,
        INDEX_SUFFIX,
        TIME_INDEX_SUFFIX,
        SPARE_SUFFIX,
        SNAPSHOT_SUFFIX,
    ]
    .into_iter()
    .find(|known| *known == suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, suffix))
}

pub(crate) struct Segment {
    pub base_offset: i64,
    /// `None` until the log's writer creates the file for a freshly rolled segment.
    pub file: Option<Rc<SegmentFile>>,
    /// Logical bytes appended, including those still in the write queue.
    pub size_bytes: u64,
    /// Logical bytes whose write completed.
    pub written_bytes: u64,
    /// Offset after the last batch.
    pub next_offset: i64,
    pub index: OffsetIndex,
    pub time_index: TimeIndex,
    pub bytes_since_index_entry: u64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    /// Time the segment's age counts from, for `segment_ms_max` (set by its first append).
    pub roll_base_ms: Option<i64>,
    /// Direct mode: bytes `[align_down(written_bytes), written_bytes)`, the partial last block
    /// that the next write must rewrite.
    pub tail_block: Vec<u8>,
}

impl Segment {
    pub fn new(base_offset: i64, file: Option<Rc<SegmentFile>>) -> Segment {
        Segment {
            base_offset,
            file,
            size_bytes: 0,
            written_bytes: 0,
            next_offset: base_offset,
            index: OffsetIndex::new(base_offset),
            time_index: TimeIndex::new(base_offset),
            bytes_since_index_entry: 0,
            max_timestamp: TIMESTAMP_NONE,
            offset_of_max_timestamp: base_offset,
            roll_base_ms: None,
            tail_block: Vec::new(),
        }
    }

    /// Accounts for a batch (with its final offsets) placed at `position`, adding index entries
    /// by Kafka's rule: an entry for the batch when more than `index_interval_bytes` were added
    /// since the previous entry.
    pub fn on_batch(&mut self, header: &BatchHeader, position: u64, index_interval_bytes: u32) {
        debug_assert!(header.base_offset >= self.next_offset);
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.base_offset;
        }
        if self.bytes_since_index_entry > u64::from(index_interval_bytes) {
            // Positions fit u32: LogConfig::check bounds segment_bytes_max by i32::MAX.
            self.index.append(header.last_offset(), position as u32);
            if self.max_timestamp != TIMESTAMP_NONE {
                self.time_index
                    .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
            }
            self.bytes_since_index_entry = 0;
        }
        let total_bytes = header.total_bytes() as u64;
        self.bytes_since_index_entry += total_bytes;
        self.size_bytes = position + total_bytes;
        self.next_offset = header.last_offset() + 1;
    }

    /// Adds the segment's final max timestamp to the time index (Kafka does this when a segment
    /// becomes inactive) so the last entry holds the segment's largest timestamp.
    pub fn complete_time_index(&mut self) {
        if self.max_timestamp != TIMESTAMP_NONE {
            self.time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_twenty_digits() {
        let path = segment_path(Path::new("/p"), 42, LOG_SUFFIX);
        assert_eq!(path, Path::new("/p/00000000000000000042.log"));
        let parse = parse_segment_file_name;
        assert_eq!(parse("00000000000000000042.log"), Some((42, LOG_SUFFIX)));
        assert_eq!(
            parse("00000000000000000042.index"),
            Some((42, INDEX_SUFFIX))
        );
        assert_eq!(
            parse("00000000000000000042.timeindex"),
            Some((42, TIME_INDEX_SUFFIX))
        );
        assert_eq!(
            parse("00000000000000000042.spare"),
            Some((42, SPARE_SUFFIX))
        );
        assert_eq!(
            parse("00000000000000000042.snapshot"),
            Some((42, SNAPSHOT_SUFFIX))
        );
        assert_eq!(parse("00000000000000000042.log.swap"), None);
        assert_eq!(parse("42.log"), None);
        assert_eq!(parse("0000000000000000004x.log"), None);
        assert_eq!(parse("clean_shutdown.checkpoint"), None);
    }
}
