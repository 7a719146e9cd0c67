//! Open-loop pacing: the intended send time of every message at a fixed rate.
//!
//! Invariants:
//! - Message `i` (0-based) is intended at `start_ns + i * 1e9 / rate`, computed from `i`
//!   directly, never accumulated, so rounding never drifts over a long run.
//! - The schedule does not care when messages actually left: latency is measured from the
//!   intended time, so a stalled sender shows the stall (no coordinated omission).

/// Times in this crate are nanoseconds since the run's epoch (`clock::Clock`).
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    start_ns: u64,
    rate_per_s: f64,
}

impl Pacer {
    pub fn new(start_ns: u64, rate_per_s: f64) -> Pacer {
        assert!(
            rate_per_s > 0.0 && rate_per_s.is_finite(),
            "rate must be positive"
        );
        Pacer {
            start_ns,
            rate_per_s,
        }
    }

    /// When message `index` should be sent.
    #[inline]
    pub fn intended_ns(&self, index: u64) -> u64 {
        self.start_ns + (index as f64 * 1e9 / self.rate_per_s) as u64
    }

    /// How many messages are due at `now_ns` (indexes `0..due`).
    #[inline]
    pub fn due(&self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        let elapsed = (now_ns - self.start_ns) as f64;
        // Message i is due when intended_ns(i) <= now, i.e. i <= elapsed * rate / 1e9.
        let mut due = (elapsed * self.rate_per_s / 1e9).floor() as u64 + 1;
        // Floating point can land one off at exact boundaries; settle against intended_ns.
        while due > 0 && self.intended_ns(due - 1) > now_ns {
            due -= 1;
        }
        while self.intended_ns(due) <= now_ns {
            due += 1;
        }
        due
    }
}

/// Monotonic nanoseconds since one process-wide epoch, comparable across cores.
pub mod clock {
    use std::sync::OnceLock;
    use std::time::Instant;

    static EPOCH: OnceLock<Instant> = OnceLock::new();

    pub fn init() {
        EPOCH.get_or_init(Instant::now);
    }

    /// CLOCK_MONOTONIC nanoseconds of `ns` on this clock (`Instant` reads CLOCK_MONOTONIC on
    /// Linux; the epoch is placed on it once, to within the few nanoseconds of one read).
    pub fn monotonic_ns(ns: u64) -> u64 {
        static EPOCH_MONOTONIC_NS: OnceLock<u64> = OnceLock::new();
        let epoch = *EPOCH_MONOTONIC_NS.get_or_init(|| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC always exists.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            let now = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            now - now_ns()
        });
        epoch + ns
    }

    #[inline]
    pub fn now_ns() -> u64 {
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    /// Wall-clock milliseconds since the Unix epoch (for record timestamps).
    pub fn unix_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intended_times_follow_the_rate() {
        let p = Pacer::new(1_000, 1_000.0); // one per millisecond
        assert_eq!(p.intended_ns(0), 1_000);
        assert_eq!(p.intended_ns(1), 1_001_000);
        assert_eq!(p.intended_ns(1_000), 1_000_001_000);
    }

    #[test]
    fn due_counts_messages_whose_time_has_come() {
        let p = Pacer::new(1_000, 1_000.0);
        assert_eq!(p.due(0), 0, "before start");
        assert_eq!(p.due(1_000), 1, "message 0 is due at start");
        assert_eq!(p.due(1_000_999), 1);
        assert_eq!(p.due(1_001_000), 2);
        assert_eq!(p.due(1_000_001_000), 1_001);
    }

    #[test]
    fn due_is_exact_at_odd_rates_and_never_drifts() {
        for rate in [3.0, 7.0, 333_333.0, 1_234_567.0, 20_000_000.0] {
            let p = Pacer::new(5, rate);
            for i in [0u64, 1, 2, 999, 1_000_000, 123_456_789] {
                let t = p.intended_ns(i);
                assert!(p.due(t) > i, "rate {rate}: message {i} due at its own time");
                if t > 5 && p.intended_ns(i - 1) < t {
                    assert!(p.due(t - 1) <= i, "rate {rate}: message {i} not due early");
                }
            }
        }
    }

    #[test]
    fn due_is_monotonic() {
        let p = Pacer::new(0, 777_777.0);
        let mut last = 0;
        for t in (0..10_000_000u64).step_by(997) {
            let d = p.due(t);
            assert!(d >= last);
            last = d;
        }
        // 10 ms at 777 777/s ≈ 7 778 messages.
        assert!((7_770..=7_790).contains(&last), "{last}");
    }
}
