//! Which partition a produced record goes to, as the Java client's default partitioner
//! picks it for keyed records: `(murmur2(key) & 0x7fffffff) % partitions`. Unkeyed records
//! go round-robin.
//!
//! Invariants:
//! - [`murmur2`] is bit-for-bit Kafka's `Utils.murmur2` (seed 0x9747b28c, little-endian
//!   4-byte blocks, signed result), so keyed records land where Java and librdkafka's
//!   `murmur2_random` put them.
//! - [`Partitioner::pick`] always returns an index in `0..partitions`.

/// Kafka's `Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h = SEED ^ length;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = blocks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java default partitioner gives `key`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

/// Picks partitions for one topic: fixed, by key, or round-robin.
pub struct Partitioner {
    partitions: u32,
    fixed: Option<u32>,
    next: u32,
}

impl Partitioner {
    pub fn new(partitions: u32, fixed: Option<u32>) -> Partitioner {
        assert!(partitions > 0, "a topic has at least one partition");
        if let Some(fixed) = fixed {
            assert!(fixed < partitions, "the fixed partition exists");
        }
        Partitioner {
            partitions,
            fixed,
            next: 0,
        }
    }

    pub fn pick(&mut self, key: Option<&[u8]>) -> u32 {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        match key {
            Some(key) => partition_for_key(key, self.partitions),
            None => {
                let partition = self.next;
                self.next = (self.next + 1) % self.partitions;
                partition
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (data, expected) in cases {
            assert_eq!(murmur2(data), expected, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn keyed_records_follow_the_hash_and_unkeyed_rotate() {
        let mut partitioner = Partitioner::new(3, None);
        let expected = ((-790332482i32 & 0x7fff_ffff) as u32) % 3;
        assert_eq!(partitioner.pick(Some(b"foobar")), expected);
        assert_eq!(partitioner.pick(Some(b"foobar")), expected);
        let unkeyed: Vec<u32> = (0..4).map(|_| partitioner.pick(None)).collect();
        assert_eq!(unkeyed, [0, 1, 2, 0]);
        let mut fixed = Partitioner::new(3, Some(2));
        assert_eq!(fixed.pick(Some(b"foobar")), 2);
        assert_eq!(fixed.pick(None), 2);
    }
}
