//! Placement: a pure function from (topic, partition) to the owning shard.
//!
//! Invariant: the same inputs always give the same shard, in every process and across
//! restarts, so that every shard computes ownership alone without asking anyone. Partitions
//! of one topic are spread round-robin from a per-topic starting shard, so a topic with at
//! least as many partitions as shards uses every core.

/// Index of a shard, `0..shard_count`.
pub type ShardId = usize;

/// The shard that owns `partition` of `topic` when there are `shard_count` shards.
pub fn shard_for(topic: &str, partition: i32, shard_count: usize) -> ShardId {
    assert!(shard_count > 0, "at least one shard");
    assert!(partition >= 0, "partition index is never negative");
    let start = fnv1a(topic.as_bytes()) % shard_count as u64;
    ((start + partition as u64) % shard_count as u64) as ShardId
}

/// FNV-1a 64: stable across releases and platforms, unlike `std`'s `DefaultHasher`.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        for shards in 1..=8 {
            for partition in 0..64 {
                let owner = shard_for("orders", partition, shards);
                assert!(owner < shards);
                assert_eq!(owner, shard_for("orders", partition, shards));
            }
        }
        // Pinned values: changing the function moves partitions between shards.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn consecutive_partitions_cover_every_shard() {
        let shards = 4;
        let mut seen = vec![false; shards];
        for partition in 0..shards as i32 {
            seen[shard_for("t", partition, shards)] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    #[should_panic(expected = "at least one shard")]
    fn zero_shards_is_a_programmer_error() {
        shard_for("t", 0, 0);
    }
}
