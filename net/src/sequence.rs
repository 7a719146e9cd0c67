//! Producer sequence numbers, as Kafka counts them: per producer and partition, one per
//! record, from 0 up to `i32::MAX` and then from 0 again. Only a batch's base sequence
//! travels in its header; the broker derives the rest.
//!
//! ```text
//!  ... i32::MAX-1  i32::MAX  0  1 ...      a batch may straddle the wrap
//! ```
//! The broker's own check (`storage`, which shares no code with this crate) counts the same
//! way.

/// The sequence number `count` records after `sequence` (both >= 0).
pub fn sequence_after(sequence: i32, count: u64) -> i32 {
    debug_assert!(sequence >= 0);
    let modulus = i64::from(i32::MAX) + 1;
    ((i64::from(sequence) + (count % modulus as u64) as i64) % modulus) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_from_i32_max_to_zero() {
        assert_eq!(sequence_after(0, 3), 3);
        assert_eq!(sequence_after(i32::MAX, 1), 0);
        assert_eq!(sequence_after(i32::MAX - 1, 3), 1);
        assert_eq!(sequence_after(7, 1 << 31), 7);
    }
}
