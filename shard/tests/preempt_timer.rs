//! The preempt timer of glommio's reactor as patched (see third_party/README.md): kept
//! across turns of the reactor while it has at least half of its slice left, instead of
//! being cancelled and armed again on every turn. It must still take a task that runs
//! without awaiting out of the CPU, slice after slice, whether the reactor turned without
//! sleeping (yields) or slept (timers) in between.
//!
//! Method: a shard with a short preempt timer and a second task queue that keeps it busy;
//! a task spins until `need_preempt`, many times, with hundreds of turns of the reactor
//! between spins. Every spin must end (bounded: a generous limit, so a slow machine does
//! not fail it) and the median spin must be about one slice, not many.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::{Latency, LocalExecutorBuilder, Shares};

const SLICE: Duration = Duration::from_millis(10);
const ROUNDS: usize = 40;
/// A spin that lasts this long means the timer never fired.
const SPIN_MAX: Duration = Duration::from_secs(2);

#[test]
fn a_task_that_never_awaits_is_preempted_slice_after_slice() {
    let ex = LocalExecutorBuilder::default()
        .io_memory(1 << 16)
        .preempt_timer(SLICE)
        .make()
        .expect("executor");
    ex.run(async {
        let other = glommio::executor().create_task_queue(
            Shares::default(),
            Latency::NotImportant,
            "other",
        );
        let stop = Rc::new(Cell::new(false));
        let busy = glommio::spawn_local_into(
            {
                let stop = stop.clone();
                async move {
                    while !stop.get() {
                        glommio::executor().yield_task_queue_now().await;
                    }
                }
            },
            other,
        )
        .expect("spawn");
        let mut spins = Vec::with_capacity(ROUNDS);
        for round in 0..ROUNDS {
            for _ in 0..200 {
                glommio::executor().yield_task_queue_now().await;
            }
            if round % 2 == 0 {
                glommio::timer::sleep(Duration::from_micros(200)).await;
            }
            let start = Instant::now();
            while !glommio::executor().need_preempt() {
                assert!(
                    start.elapsed() < SPIN_MAX,
                    "round {round}: still running after {SPIN_MAX:?}"
                );
                std::hint::spin_loop();
            }
            spins.push(start.elapsed());
        }
        stop.set(true);
        busy.await;
        spins.sort();
        let median = spins[ROUNDS / 2];
        assert!(
            median <= SLICE * 3,
            "median spin {median:?} for a {SLICE:?} slice: {spins:?}"
        );
    });
}
