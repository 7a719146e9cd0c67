//! A task's waker dropped on a thread that is not the task's own, while the task finishes
//! and its `JoinHandle` drops on its shard: what every cross-shard reply does (the replying
//! thread wakes the caller through the channel, then drops the waker the channel held).
//! glommio 0.9.0 freed such a task twice, now and then (see third_party/README.md); the
//! process aborted or glommio's own check panicked.
//!
//! Method: a shard spawns many short tasks, each pending until a plain thread has been
//! handed a clone of its waker, woken it by reference and, after a random spin, dropped
//! it, so that the foreign drop and the owner's drop of the finished task's handle meet in
//! every order. Bounded in rounds and time; stock glommio 0.9.0 failed within 0.6–31 s of
//! it, so a pass is evidence, not proof, and a failure is a regression.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long the test runs at most, and how many tasks it spawns at most.
const DURATION_MAX: Duration = Duration::from_secs(8);
const ROUNDS_MAX: u64 = 2_000_000;
/// Tasks in flight at once on the shard.
const CONCURRENCY: u64 = 64;

/// A waker for the foreign thread, with the flag it sets before waking.
type Handoff = (Waker, Arc<AtomicBool>, u32);

/// Pending until the foreign thread has set `done`; its first poll hands the foreign
/// thread a clone of its waker.
struct WokenFromAfar {
    done: Arc<AtomicBool>,
    sent: bool,
    to_foreign: flume::Sender<Handoff>,
    spins: u32,
}

impl Future for WokenFromAfar {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.done.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        if !self.sent {
            self.sent = true;
            let handoff = (cx.waker().clone(), self.done.clone(), self.spins);
            self.to_foreign
                .send(handoff)
                .expect("the foreign thread runs");
        }
        Poll::Pending
    }
}

#[test]
fn wakers_dropped_on_another_thread_free_their_task_once() {
    let (to_foreign, from_shard) = flume::unbounded::<Handoff>();
    let foreign = std::thread::spawn(move || {
        for (waker, done, spins) in from_shard.iter() {
            done.store(true, Ordering::Release);
            waker.wake_by_ref();
            for _ in 0..spins {
                std::hint::spin_loop();
            }
            drop(waker);
        }
    });
    let rounds = glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let deadline = Instant::now() + DURATION_MAX;
            let workers: Vec<_> = (0..CONCURRENCY)
                .map(|worker| {
                    let to_foreign = to_foreign.clone();
                    glommio::spawn_local(async move {
                        let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ worker;
                        let mut rounds = 0;
                        while rounds < ROUNDS_MAX / CONCURRENCY && Instant::now() < deadline {
                            // xorshift64: a spin of 0 to 4000 before the foreign drop.
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            let task = glommio::spawn_local(WokenFromAfar {
                                done: Arc::new(AtomicBool::new(false)),
                                sent: false,
                                to_foreign: to_foreign.clone(),
                                spins: (seed % 4000) as u32,
                            });
                            task.await; // the JoinHandle drops here, on the shard
                            rounds += 1;
                        }
                        rounds
                    })
                })
                .collect();
            let mut rounds = 0;
            for worker in workers {
                rounds += worker.await;
            }
            rounds
        })
        .expect("a shard starts")
        .join()
        .expect("the shard did not panic");
    foreign.join().expect("the foreign thread did not panic");
    assert!(rounds > 0, "no task ran");
}
