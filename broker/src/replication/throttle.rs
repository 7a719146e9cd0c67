//! Replication throttles (Kafka's KIP-73): a limit, in bytes per second for the whole
//! broker, on the replication traffic of the replicas a topic names in
//! `leader.replication.throttled.replicas` (what a leader sends them) and
//! `follower.replication.throttled.replicas` (what a follower fetches for them), set with
//! `leader.replication.throttled.rate` and `follower.replication.throttled.rate`.
//! kafka-reassign-partitions --throttle sets them so that copying a moved partition does
//! not take the network and the disk from the clients.
//!
//! Invariants: only replicas outside the ISR are throttled, as in Kafka, so a throttle never
//! holds back the high watermark; each shard takes an equal share of the broker's rate; a
//! bucket holds at most one second of its rate, and while it is empty the throttled
//! replicas get no bytes (their fetches are answered, with nothing), so over any second the
//! traffic stays within the rate plus one read.

use std::cell::Cell;
use std::time::Instant;

/// Kafka's "no limit" (`Long.MAX_VALUE` bytes per second).
pub const UNLIMITED: u64 = i64::MAX as u64;

/// The throttled replicas a topic names: every one (`*`), or `(partition, broker)` pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Throttled {
    All,
    Replicas(Vec<(i32, i32)>),
}

impl Throttled {
    pub fn includes(&self, partition: i32, broker: i32) -> bool {
        match self {
            Throttled::All => true,
            Throttled::Replicas(pairs) => pairs.contains(&(partition, broker)),
        }
    }
}

/// A topic's `*.replication.throttled.replicas` value: `*`, or `partition:broker` pairs
/// separated by commas (empty: none); `None` if it is neither.
pub fn parse_replicas(value: &str) -> Option<Throttled> {
    let value = value.trim();
    if value == "*" {
        return Some(Throttled::All);
    }
    value
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (partition, broker) = pair.split_once(':')?;
            Some((partition.trim().parse().ok()?, broker.trim().parse().ok()?))
        })
        .collect::<Option<Vec<(i32, i32)>>>()
        .map(Throttled::Replicas)
}

/// A token bucket of replication bytes: refilled at the rate asked at each use, holding at
/// most one second of it; bytes taken past empty are owed.
pub struct Bucket {
    /// Bytes that may go now (negative: owed).
    tokens: Cell<f64>,
    last_refill: Cell<Instant>,
}

impl Default for Bucket {
    /// A full bucket: the first second of a rate goes at once.
    fn default() -> Self {
        Bucket {
            tokens: Cell::new(f64::INFINITY),
            last_refill: Cell::new(Instant::now()),
        }
    }
}

impl Bucket {
    /// Whether throttled traffic may go now at `rate_bytes` a second.
    pub fn allows(&self, rate_bytes: u64, now: Instant) -> bool {
        if rate_bytes >= UNLIMITED {
            return true;
        }
        let rate = rate_bytes as f64;
        let elapsed = now.saturating_duration_since(self.last_refill.get());
        self.last_refill.set(now);
        let tokens = (self.tokens.get() + rate * elapsed.as_secs_f64()).min(rate);
        self.tokens.set(tokens);
        tokens > 0.0
    }

    /// Counts `bytes` of throttled traffic that went.
    pub fn take(&self, bytes: usize) {
        self.tokens.set(self.tokens.get() - bytes as f64);
    }
}

/// The share of broker-wide `rate_bytes` one of `shard_count` shards takes.
pub fn shard_rate(rate_bytes: u64, shard_count: usize) -> u64 {
    if rate_bytes >= UNLIMITED {
        UNLIMITED
    } else {
        rate_bytes / shard_count.max(1) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn throttled_replicas_are_kafkas_lists() {
        assert_eq!(parse_replicas("*"), Some(Throttled::All));
        assert_eq!(parse_replicas(""), Some(Throttled::Replicas(vec![])));
        let pairs = parse_replicas("0:101, 1:102").expect("valid");
        assert!(pairs.includes(0, 101) && pairs.includes(1, 102));
        assert!(!pairs.includes(0, 102));
        assert_eq!(parse_replicas("0-101"), None);
        assert_eq!(parse_replicas("x:1"), None);
    }

    #[test]
    fn a_bucket_lets_a_second_of_its_rate_through_then_owes() {
        let bucket = Bucket::default();
        let start = Instant::now();
        assert!(bucket.allows(UNLIMITED, start), "unlimited");
        assert!(
            bucket.allows(1000, start),
            "it starts with a second's worth"
        );
        bucket.take(1500);
        let later = |ms| start + Duration::from_millis(ms);
        assert!(!bucket.allows(1000, later(400)), "still owes 100");
        assert!(bucket.allows(1000, later(600)), "100 to spend");
        bucket.take(100);
        assert!(!bucket.allows(1000, later(600)));
        // Idle for long, it holds one second's worth, no more.
        assert!(bucket.allows(1000, later(60_000)));
        bucket.take(1000);
        assert!(!bucket.allows(1000, later(60_000)));
        assert_eq!(shard_rate(1000, 2), 500);
        assert_eq!(shard_rate(UNLIMITED, 2), UNLIMITED);
    }
}
