//! Which of a log's oldest segments retention lets go, by Kafka's rules for
//! `cleanup.policy=delete`: whole segments only, always a prefix of the log.
//!
//! - `retention.ms`: a segment goes once its largest timestamp is more than `ms` before now
//!   (the file's modification time stands in when no batch carried a timestamp).
//! - `retention.bytes`: segments go, oldest first, while the log without them still holds at
//!   least `bytes`.
//!
//! Invariants: the answer is a prefix (nothing newer than a kept segment is dropped); an empty
//! segment is never counted (it holds nothing to expire); negative limits mean unlimited.

/// `retention.ms` and `retention.bytes` of a log; negative means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub ms: i64,
    pub bytes: i64,
}

impl Retention {
    pub const UNLIMITED: Retention = Retention { ms: -1, bytes: -1 };
}

/// What retention needs to know of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentAge {
    pub size_bytes: u64,
    /// Largest timestamp in the segment, or its file's modification time (ms since the epoch).
    pub largest_timestamp_ms: i64,
}

/// How many of the oldest `segments` (oldest first) retention deletes at `now_ms`.
pub(crate) fn expired_prefix(segments: &[SegmentAge], retention: Retention, now_ms: i64) -> usize {
    let non_empty = segments.iter().take_while(|s| s.size_bytes > 0).count();
    let by_time = if retention.ms < 0 {
        0
    } else {
        segments[..non_empty]
            .iter()
            .take_while(|s| now_ms.saturating_sub(s.largest_timestamp_ms) > retention.ms)
            .count()
    };
    let by_size = if retention.bytes < 0 {
        0
    } else {
        let total: u64 = segments.iter().map(|s| s.size_bytes).sum();
        let mut excess = total.saturating_sub(retention.bytes as u64);
        segments[..non_empty]
            .iter()
            .take_while(|s| {
                let fits = s.size_bytes <= excess;
                if fits {
                    excess -= s.size_bytes;
                }
                fits
            })
            .count()
    };
    by_time.max(by_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(size_bytes: u64, largest_timestamp_ms: i64) -> SegmentAge {
        SegmentAge {
            size_bytes,
            largest_timestamp_ms,
        }
    }

    #[test]
    fn unlimited_keeps_everything() {
        let segments = [segment(100, 0), segment(100, 0)];
        assert_eq!(expired_prefix(&segments, Retention::UNLIMITED, i64::MAX), 0);
    }

    #[test]
    fn time_deletes_segments_older_than_the_limit_up_to_the_first_younger_one() {
        let segments = [
            segment(10, 1_000),
            segment(10, 5_000),
            // A producer's clock may go back: retention still stops at the first kept one.
            segment(10, 1_500),
            segment(10, 9_000),
        ];
        let retention = Retention {
            ms: 3_000,
            bytes: -1,
        };
        assert_eq!(expired_prefix(&segments, retention, 6_000), 1);
        assert_eq!(expired_prefix(&segments, retention, 8_001), 3);
        // Exactly at the limit is not past it (Kafka's `>`).
        assert_eq!(expired_prefix(&segments, retention, 4_000), 0);
        assert_eq!(expired_prefix(&segments, retention, 12_001), 4);
    }

    #[test]
    fn size_deletes_oldest_while_the_rest_still_holds_the_limit() {
        let segments = [
            segment(100, 0),
            segment(100, 0),
            segment(100, 0),
            segment(40, 0),
        ];
        let retention = |bytes| Retention { ms: -1, bytes };
        assert_eq!(expired_prefix(&segments, retention(340), 0), 0);
        // 339 bytes allowed: one byte over, but dropping 100 would leave less than the limit.
        assert_eq!(expired_prefix(&segments, retention(339), 0), 0);
        assert_eq!(expired_prefix(&segments, retention(240), 0), 1);
        assert_eq!(expired_prefix(&segments, retention(150), 0), 1);
        assert_eq!(expired_prefix(&segments, retention(140), 0), 2);
        assert_eq!(expired_prefix(&segments, retention(0), 0), 4);
    }

    #[test]
    fn the_longer_of_the_two_prefixes_wins() {
        let segments = [segment(100, 0), segment(100, 10_000), segment(100, 10_000)];
        let retention = Retention {
            ms: 5_000,
            bytes: 100,
        };
        assert_eq!(expired_prefix(&segments, retention, 11_000), 2);
        let retention = Retention {
            ms: 5_000,
            bytes: 1_000,
        };
        assert_eq!(expired_prefix(&segments, retention, 11_000), 1);
        assert_eq!(expired_prefix(&segments, retention, 16_000), 3);
    }

    #[test]
    fn an_empty_segment_is_never_counted() {
        let segments = [segment(100, 0), segment(0, 0)];
        let everything = Retention { ms: 0, bytes: 0 };
        assert_eq!(expired_prefix(&segments, everything, 1_000), 1);
        assert_eq!(expired_prefix(&[segment(0, 0)], everything, 1_000), 0);
    }
}
