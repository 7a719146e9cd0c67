//! The cleaner's offset map: the latest offset of each key seen in the dirty part of a log,
//! keyed by a 128-bit hash of the key (Kafka keeps a 16-byte MD5; XXH3-128 here), so its size
//! does not depend on key lengths. Two keys colliding would need about 2^64 keys in one map.
//!
//! Invariants: the map never holds more than `entries_max` keys, derived from the memory
//! budget (Kafka's `log.cleaner.dedupe.buffer.size`); an offset put for a key replaces the
//! one before only when it is larger.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Memory one entry costs in the map: a 16-byte hash and an 8-byte offset, plus the hash
/// table's control byte and its spare capacity (load factor 7/8), rounded up.
pub(crate) const ENTRY_BYTES: usize = 32;

pub(crate) struct OffsetMap {
    offsets: HashMap<u128, i64, BuildHasherDefault<PassThrough>>,
    entries_max: usize,
}

impl OffsetMap {
    /// A map within `budget_bytes` (at least one entry).
    pub(crate) fn new(budget_bytes: usize) -> OffsetMap {
        OffsetMap {
            offsets: HashMap::default(),
            entries_max: (budget_bytes / ENTRY_BYTES).max(1),
        }
    }

    pub(crate) fn hash(key: &[u8]) -> u128 {
        twox_hash::XxHash3_128::oneshot(key)
    }

    /// Room for `count` more keys (each may be new).
    pub(crate) fn has_room(&self, count: usize) -> bool {
        self.offsets.len().saturating_add(count) <= self.entries_max
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.offsets.len()
    }

    pub(crate) fn put(&mut self, key: &[u8], offset: i64) {
        let latest = self.offsets.entry(Self::hash(key)).or_insert(offset);
        *latest = (*latest).max(offset);
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<i64> {
        self.offsets.get(&Self::hash(key)).copied()
    }
}

/// The keys are hashes already: the table takes their low 64 bits as they are.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_and_its_budget() {
        let mut map = OffsetMap::new(3 * ENTRY_BYTES);
        map.put(b"a", 5);
        map.put(b"a", 2);
        map.put(b"b", 7);
        assert_eq!(map.get(b"a"), Some(5));
        assert_eq!(map.get(b"b"), Some(7));
        assert_eq!(map.get(b"c"), None);
        assert!(map.has_room(1));
        assert!(!map.has_room(2));
        assert_eq!(OffsetMap::new(0).entries_max, 1);
    }
}
