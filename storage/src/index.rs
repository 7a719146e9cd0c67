//! Sparse offset index of one segment, in Kafka's `.index` layout: 8-byte entries
//! `relative_offset u32 BE | position u32 BE`, where `relative_offset` is the last offset of a
//! batch minus the segment's base offset and `position` is where that batch starts in the `.log`.
//!
//! Invariants: relative offsets and positions both strictly increase; every position lies inside
//! the segment's valid bytes. An entry is added before a batch once more than
//! `index_interval_bytes` were appended since the previous entry (Kafka's rule), so a lookup lands
//! at most about `index_interval_bytes` + one batch before the batch it wants.

pub(crate) const INDEX_ENTRY_BYTES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
}

#[derive(Debug)]
pub(crate) struct OffsetIndex {
    base_offset: i64,
    entries: Vec<IndexEntry>,
}

impl OffsetIndex {
    pub fn new(base_offset: i64) -> Self {
        OffsetIndex {
            base_offset,
            entries: Vec::new(),
        }
    }

    /// Records that the batch ending at `last_offset` starts at `position`.
    pub fn append(&mut self, last_offset: i64, position: u32) {
        let relative = last_offset - self.base_offset;
        assert!(
            (0..=i64::from(u32::MAX)).contains(&relative),
            "offset outside segment"
        );
        let entry = IndexEntry {
            relative_offset: relative as u32,
            position,
        };
        if let Some(last) = self.entries.last() {
            assert!(last.relative_offset < entry.relative_offset && last.position < position);
        }
        self.entries.push(entry);
    }

    /// Position of the latest indexed batch whose last offset is <= `offset` (0 if none): the
    /// batch containing `offset` starts at or after it.
    pub fn lookup(&self, offset: i64) -> u32 {
        let relative = offset - self.base_offset;
        if relative < 0 {
            return 0;
        }
        let count = self
            .entries
            .partition_point(|e| i64::from(e.relative_offset) <= relative);
        if count == 0 {
            0
        } else {
            self.entries[count - 1].position
        }
    }

    pub fn last_position(&self) -> Option<u32> {
        self.entries.last().map(|e| e.position)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * INDEX_ENTRY_BYTES);
        for entry in &self.entries {
            out.extend_from_slice(&entry.relative_offset.to_be_bytes());
            out.extend_from_slice(&entry.position.to_be_bytes());
        }
        out
    }

    /// Decodes an index file and checks it against the segment it indexes: whole entries, both
    /// columns strictly increasing, positions inside `log_bytes`.
    pub fn decode(base_offset: i64, bytes: &[u8], log_bytes: u64) -> Result<Self, String> {
        if bytes.len() % INDEX_ENTRY_BYTES != 0 {
            return Err(format!("index size {} is not a multiple of 8", bytes.len()));
        }
        let mut index = OffsetIndex::new(base_offset);
        for chunk in bytes.chunks_exact(INDEX_ENTRY_BYTES) {
            let relative_offset = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let position = u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            if u64::from(position) >= log_bytes {
                return Err(format!(
                    "index position {position} past log end {log_bytes}"
                ));
            }
            if let Some(last) = index.entries.last() {
                if last.relative_offset >= relative_offset || last.position >= position {
                    return Err("index entries are not increasing".to_string());
                }
            }
            index.entries.push(IndexEntry {
                relative_offset,
                position,
            });
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_floor_entry() {
        let mut index = OffsetIndex::new(100);
        assert_eq!(index.lookup(150), 0);
        index.append(109, 4_200);
        index.append(130, 9_000);
        assert_eq!(index.lookup(99), 0);
        assert_eq!(index.lookup(108), 0);
        assert_eq!(index.lookup(109), 4_200);
        assert_eq!(index.lookup(129), 4_200);
        assert_eq!(index.lookup(130), 9_000);
        assert_eq!(index.lookup(10_000), 9_000);
    }

    proptest::proptest! {
        /// Lookup agrees with a linear search over the entries; decode inverts encode.
        #[test]
        fn lookup_matches_linear_search(
            gaps in proptest::collection::vec((1u32..50, 1u32..5_000), 0..40),
            probes in proptest::collection::vec(0i64..3_000, 1..20),
        ) {
            let base_offset = 1_000;
            let mut index = OffsetIndex::new(base_offset);
            let (mut offset, mut position) = (base_offset, 0u32);
            for (offset_gap, position_gap) in gaps {
                offset += i64::from(offset_gap);
                position += position_gap;
                index.append(offset, position);
            }
            for probe in probes {
                let probe = base_offset - 10 + probe;
                let expected = index
                    .entries
                    .iter()
                    .filter(|e| base_offset + i64::from(e.relative_offset) <= probe)
                    .map(|e| e.position)
                    .next_back()
                    .unwrap_or(0);
                proptest::prop_assert_eq!(index.lookup(probe), expected);
            }
            let decoded = OffsetIndex::decode(base_offset, &index.encode(), u64::from(position) + 1);
            proptest::prop_assert_eq!(decoded.map(|d| d.entries), Ok(index.entries));
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut index = OffsetIndex::new(5);
        index.append(10, 100);
        index.append(20, 200);
        let bytes = index.encode();
        assert_eq!(bytes.len(), 16);
        assert_eq!(&bytes[..8], &[0, 0, 0, 5, 0, 0, 0, 100]);
        let decoded = OffsetIndex::decode(5, &bytes, 1_000).expect("valid");
        assert_eq!(decoded.entries, index.entries);
    }

    #[test]
    fn decode_rejects_inconsistent_files() {
        let mut index = OffsetIndex::new(0);
        index.append(10, 100);
        index.append(20, 200);
        let bytes = index.encode();
        assert!(
            OffsetIndex::decode(0, &bytes[..12], 1_000).is_err(),
            "partial entry"
        );
        assert!(
            OffsetIndex::decode(0, &bytes, 150).is_err(),
            "points past the end"
        );
        let mut swapped = bytes[8..].to_vec();
        swapped.extend_from_slice(&bytes[..8]);
        assert!(
            OffsetIndex::decode(0, &swapped, 1_000).is_err(),
            "not monotonic"
        );
        assert!(
            OffsetIndex::decode(0, &[0u8; 16], 1_000).is_err(),
            "zero padding"
        );
    }
}
