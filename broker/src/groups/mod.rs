//! Consumer groups (Kafka's classic protocol): membership, rebalances, committed offsets.
//!
//! A group is coordinated by the shard that owns partition
//! `abs(java_hash(group_id)) % partitions` of the internal topic `__consumer_offsets`, as
//! in Kafka. Everything about the group lives only on that shard: its [`group::Group`]
//! state machine, its committed offsets, and the records that make both durable in that
//! partition ([`records`]), from which the shard rebuilds them on start.

pub mod coordinator;
pub mod group;
pub mod records;

pub use coordinator::GroupCoordinator;

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The `__consumer_offsets` partition of `group_id`: Kafka's
/// `Utils.abs(groupId.hashCode()) % partitions`, with Java's `String.hashCode`.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    assert!(partitions > 0);
    let hash = group_id.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // Kafka's Utils.abs maps i32::MIN to 0 rather than overflowing.
    let magnitude = if hash == i32::MIN { 0 } else { hash.abs() };
    magnitude % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_java_string_hash_code() {
        // Java: "g1".hashCode() == 3242, "console-consumer-1".hashCode() == 35782224.
        assert_eq!(partition_for("g1", 50), 3242 % 50);
        assert_eq!(partition_for("console-consumer-1", 50), 35_782_224 % 50);
        // Negative hashes are folded by absolute value: "polygenelubricants" is i32::MIN.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("", 50), 0);
    }
}
