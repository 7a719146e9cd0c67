//! The log writes in flight on this thread's shard, over all its logs, and a way for
//! background I/O (the cleaner's reads) to wait for a moment when there are none.
//!
//! Produce's writes are what acks=1 and acks=all wait for; a cleaner read issued beside them
//! sits in the same disk queue and delays them by all of its length (which is why the
//! cleaner reads in small pieces, `CLEAN_READ_BYTES` in `compaction.rs`). So a cleaner read
//! waits until the shard has no write in flight, for at most `YIELD_MAX`: a shard that
//! writes without pause still cleans, at one window per `YIELD_MAX` at least.
//!
//! Invariants: `started` and `finished` pair up (the count never goes below zero); every
//! waiter registered while writes were in flight is woken when the count reaches zero;
//! `idle` returns at once when nothing is in flight and never later than `YIELD_MAX`.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use signal::Notify;

/// The longest a background read waits for the shard's writes to pause.
pub(super) const YIELD_MAX: Duration = Duration::from_millis(5);

thread_local! {
    static IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
    /// Notified when `IN_FLIGHT` reaches zero.
    static IDLE: Rc<Notify> = Rc::new(Notify::new());
}

/// Writes in flight on this shard.
pub(super) fn in_flight() -> usize {
    IN_FLIGHT.get()
}

pub(super) fn started() {
    IN_FLIGHT.set(IN_FLIGHT.get() + 1);
}

pub(super) fn finished() {
    let left = IN_FLIGHT.get() - 1;
    IN_FLIGHT.set(left);
    if left == 0 {
        IDLE.with(|idle| idle.notify_all());
    }
}

/// Returns once the shard has no write in flight, or after `YIELD_MAX`.
pub(super) async fn idle() {
    if in_flight() == 0 {
        return;
    }
    let event = IDLE.with(Rc::clone);
    futures_lite::future::or(
        event.wait_until(|| in_flight() == 0),
        glommio::timer::sleep(YIELD_MAX),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_waiter_goes_on_when_the_last_write_ends_or_after_the_bound() {
        crate::log_tests::run(|| async {
            let start = Instant::now();
            idle().await;
            assert!(start.elapsed() < YIELD_MAX, "nothing in flight: no wait");

            started();
            started();
            let woken = Rc::new(Cell::new(false));
            let waiter = glommio::spawn_local({
                let woken = woken.clone();
                async move {
                    let event = IDLE.with(Rc::clone);
                    event.wait_until(|| in_flight() == 0).await;
                    woken.set(true);
                }
            });
            futures_lite::future::yield_now().await;
            finished();
            futures_lite::future::yield_now().await;
            assert!(!woken.get(), "one write still in flight");
            finished();
            futures_lite::future::yield_now().await;
            assert!(woken.get(), "woken when the count reached zero");
            waiter.await;

            started();
            let start = Instant::now();
            idle().await;
            assert!(
                start.elapsed() >= YIELD_MAX,
                "gave up waiting only at the bound"
            );
            assert_eq!(in_flight(), 1);
            finished();
        });
    }
}
