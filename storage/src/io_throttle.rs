//! A limit on the bytes a background task reads and writes per second (Kafka's `Throttler`,
//! used for `log.cleaner.io.max.bytes.per.second`): the task reports what it moved, and
//! sleeps while it is ahead of its rate.
//!
//! The throttle keeps a virtual clock, the time at which what was reported so far would be
//! done at the rate: each report moves it past `max(clock, now)` by `bytes / rate`, and
//! once it is more than `SLACK` ahead of now the task sleeps until it is not. Idle time
//! earns no credit (the clock never lags now), so a task is never faster than its rate for
//! longer than `SLACK`.
//!
//! Invariants: the time from a throttle's first report to the return of its last is at
//! least the bytes reported over the rate, minus `SLACK`; a rate of `f64::MAX` (or any
//! non-finite or non-positive one) never sleeps; one throttle may be shared by several
//! tasks of one thread, which then share its rate.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How far a task may run ahead of its rate before it sleeps: short enough that a burst
/// stays short, long enough that a sleep is rarely shorter than a timer tick.
const SLACK: Duration = Duration::from_millis(20);

pub struct IoThrottle {
    bytes_per_second: Cell<f64>,
    /// When what was reported so far is done at the rate.
    clock: Cell<Instant>,
}

impl IoThrottle {
    pub fn new(bytes_per_second: f64) -> IoThrottle {
        IoThrottle {
            bytes_per_second: Cell::new(bytes_per_second),
            clock: Cell::new(Instant::now()),
        }
    }

    /// A throttle that never sleeps.
    pub fn unlimited() -> IoThrottle {
        IoThrottle::new(f64::MAX)
    }

    /// Changes the rate from now on.
    pub fn set_rate(&self, bytes_per_second: f64) {
        self.bytes_per_second.set(bytes_per_second);
    }

    /// How long to sleep after `bytes` more went at `now`.
    fn delay(&self, bytes: usize, now: Instant) -> Option<Duration> {
        let rate = self.bytes_per_second.get();
        if !(rate.is_finite() && rate > 0.0 && rate < f64::MAX) {
            return None;
        }
        let clock = self.clock.get().max(now) + Duration::from_secs_f64(bytes as f64 / rate);
        self.clock.set(clock);
        let ahead = clock.saturating_duration_since(now);
        (ahead > SLACK).then_some(ahead)
    }

    /// Reports `bytes` read or written; sleeps while the task is ahead of its rate.
    pub async fn moved(&self, bytes: usize) {
        if let Some(sleep) = self.delay(bytes, Instant::now()) {
            glommio::timer::sleep(sleep).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_ahead_of_its_rate_sleeps_until_it_is_not() {
        let throttle = IoThrottle::new(1_000_000.0);
        let start = throttle.clock.get();
        // 10 KB at 1 MB/s is 10 ms: within the slack.
        assert_eq!(throttle.delay(10_000, start), None);
        // 1 MB more: done at 1.01 s.
        let sleep = throttle.delay(1_000_000, start).expect("ahead");
        assert!((sleep.as_secs_f64() - 1.01).abs() < 1e-6, "{sleep:?}");
        // Reported half a second later, 10 KB more is still owed after what came before.
        let later = start + Duration::from_millis(500);
        let sleep = throttle.delay(10_000, later).expect("still ahead");
        assert!((sleep.as_secs_f64() - 0.52).abs() < 1e-6, "{sleep:?}");
    }

    #[test]
    fn idle_time_earns_no_credit() {
        let throttle = IoThrottle::new(1_000_000.0);
        let start = throttle.clock.get();
        let idle = start + Duration::from_secs(60);
        let sleep = throttle
            .delay(100_000, idle)
            .expect("a minute idle is no credit");
        assert!((sleep.as_secs_f64() - 0.1).abs() < 1e-6, "{sleep:?}");
    }

    #[test]
    fn no_limit_never_sleeps() {
        let start = Instant::now();
        let unlimited = IoThrottle::unlimited();
        assert_eq!(unlimited.delay(usize::MAX / 2, start), None);
        let throttle = IoThrottle::new(1_000.0);
        throttle.set_rate(f64::MAX);
        assert_eq!(throttle.delay(usize::MAX / 2, start), None);
    }
}
