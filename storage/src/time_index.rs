//! Sparse time index of one segment, in Kafka's `.timeindex` layout: 12-byte entries
//! `timestamp i64 BE | relative_offset u32 BE`, where the timestamp is the largest batch max
//! timestamp seen in the segment so far and the offset is the first batch offset that reached it.
//!
//! Invariants: timestamps strictly increase and relative offsets never decrease, so a floor lookup
//! of `ts` gives a point before which no batch has a max timestamp >= `ts` (beyond `ts` itself).

pub(crate) const TIME_INDEX_ENTRY_BYTES: usize = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimeIndexEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

#[derive(Debug)]
pub(crate) struct TimeIndex {
    base_offset: i64,
    entries: Vec<TimeIndexEntry>,
}

impl TimeIndex {
    pub fn new(base_offset: i64) -> Self {
        TimeIndex {
            base_offset,
            entries: Vec::new(),
        }
    }

    /// Adds an entry if `timestamp` is larger than the last one (Kafka's `maybeAppend`).
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) {
        let relative = offset - self.base_offset;
        assert!(
            (0..=i64::from(u32::MAX)).contains(&relative),
            "offset outside segment"
        );
        if let Some(last) = self.entries.last() {
            if timestamp <= last.timestamp {
                return;
            }
            assert!(last.relative_offset <= relative as u32);
        }
        self.entries.push(TimeIndexEntry {
            timestamp,
            relative_offset: relative as u32,
        });
    }

    /// Largest indexed timestamp and its offset (the segment's max timestamp once sealed).
    pub fn last(&self) -> Option<(i64, i64)> {
        self.entries
            .last()
            .map(|e| (e.timestamp, self.base_offset + i64::from(e.relative_offset)))
    }

    /// Offset to start scanning from to find the first batch with max timestamp >= `timestamp`:
    /// the offset of the latest entry whose timestamp is <= `timestamp`, else the base offset.
    pub fn lookup(&self, timestamp: i64) -> i64 {
        let count = self.entries.partition_point(|e| e.timestamp <= timestamp);
        if count == 0 {
            self.base_offset
        } else {
            self.base_offset + i64::from(self.entries[count - 1].relative_offset)
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_INDEX_ENTRY_BYTES);
        for entry in &self.entries {
            out.extend_from_slice(&entry.timestamp.to_be_bytes());
            out.extend_from_slice(&entry.relative_offset.to_be_bytes());
        }
        out
    }

    /// Decodes a time index file: whole entries, timestamps increasing, offsets non-decreasing
    /// and below `relative_offset_end` (the segment's next offset minus its base).
    pub fn decode(
        base_offset: i64,
        bytes: &[u8],
        relative_offset_end: u64,
    ) -> Result<Self, String> {
        if bytes.len() % TIME_INDEX_ENTRY_BYTES != 0 {
            return Err(format!(
                "time index size {} is not a multiple of 12",
                bytes.len()
            ));
        }
        let mut index = TimeIndex::new(base_offset);
        for chunk in bytes.chunks_exact(TIME_INDEX_ENTRY_BYTES) {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&chunk[..8]);
            let timestamp = i64::from_be_bytes(ts);
            let relative_offset = u32::from_be_bytes([chunk[8], chunk[9], chunk[10], chunk[11]]);
            if u64::from(relative_offset) >= relative_offset_end {
                return Err(format!(
                    "time index offset {relative_offset} past segment end"
                ));
            }
            if let Some(last) = index.entries.last() {
                if last.timestamp >= timestamp || last.relative_offset > relative_offset {
                    return Err("time index entries are not increasing".to_string());
                }
            }
            index.entries.push(TimeIndexEntry {
                timestamp,
                relative_offset,
            });
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_increasing_timestamps() {
        let mut index = TimeIndex::new(100);
        index.maybe_append(50, 100);
        index.maybe_append(40, 101);
        index.maybe_append(50, 102);
        index.maybe_append(70, 110);
        assert_eq!(index.entries.len(), 2);
        assert_eq!(index.last(), Some((70, 110)));
    }

    #[test]
    fn lookup_gives_scan_start() {
        let mut index = TimeIndex::new(100);
        assert_eq!(index.lookup(10), 100);
        index.maybe_append(50, 105);
        index.maybe_append(70, 110);
        assert_eq!(index.lookup(49), 100);
        assert_eq!(index.lookup(50), 105);
        assert_eq!(index.lookup(69), 105);
        assert_eq!(index.lookup(1_000), 110);
    }

    #[test]
    fn decode_checks_consistency() {
        let mut index = TimeIndex::new(0);
        index.maybe_append(50, 5);
        index.maybe_append(70, 10);
        let bytes = index.encode();
        assert_eq!(
            TimeIndex::decode(0, &bytes, 11).expect("valid").entries,
            index.entries
        );
        assert!(TimeIndex::decode(0, &bytes, 10).is_err(), "offset past end");
        assert!(
            TimeIndex::decode(0, &bytes[..13], 11).is_err(),
            "partial entry"
        );
        assert!(
            TimeIndex::decode(0, &[0u8; 24], 11).is_err(),
            "zero padding"
        );
    }
}
