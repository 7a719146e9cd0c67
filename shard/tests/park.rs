//! A shard parks (sleeps in io_uring) only when no task is runnable, and always with its
//! next timer armed. glommio 0.9.0 broke the first half now and then: when a preemption
//! was already pending as the loop went to run its task queues (a latency-ring completion,
//! such as the preemption timer, that arrived after the reactor's last look), it reported
//! "nothing ran" and parked with the runnable task still queued and no timer armed, so the
//! shard slept until some unrelated event came: in a quiet broker, possibly never. See
//! third_party/README.md.
//!
//! Method: one shard with a short preemption timer alternates yields, random spins (the
//! timer fires at every phase of the loop) and short sleeps. Bounded in time; the shard
//! reports each round, and a round that does not end within a generous bound is a lost
//! wake-up. Stock glommio 0.9.0 failed it in 3 runs of 5; a pass is evidence, not proof,
//! and a failure is a regression.

use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};

/// How long the shard alternates spins and sleeps.
const DURATION: Duration = Duration::from_secs(3);
/// The preemption timer: short, so that it fires often, and at random phases of the loop.
const PREEMPT: Duration = Duration::from_micros(100);
/// How long one round may take before it counts as lost (its sleep asks for at most 1.5 ms).
const LOST_AFTER: Duration = Duration::from_secs(10);

#[test]
fn a_shard_never_parks_with_a_runnable_task_or_without_its_timer() {
    let (progress, rounds) = flume::unbounded::<u64>();
    let shard = LocalExecutorBuilder::new(Placement::Unbound)
        .name("park")
        .io_memory(1 << 16)
        .ring_depth(32)
        .preempt_timer(PREEMPT)
        .spawn(move || async move {
            let start = Instant::now();
            let mut state = 0x9e37_79b9_7f4a_7c15_u64;
            let mut round = 0;
            while start.elapsed() < DURATION {
                // A turn of the loop with a task ready arms the preemption timer; the spin
                // puts the turns that follow at a random point of the timer's 100 µs.
                glommio::executor().yield_now().await;
                state = xorshift(state);
                let spin = Duration::from_nanos(state % 150_000);
                let spun = Instant::now();
                while spun.elapsed() < spin {
                    std::hint::spin_loop();
                }
                glommio::timer::sleep(Duration::from_micros(300 + (state >> 32) % 1200)).await;
                round += 1;
                progress.send(round).expect("the test waits");
            }
        })
        .expect("spawn the shard");

    let mut finished = 0;
    loop {
        match rounds.recv_timeout(LOST_AFTER) {
            Ok(round) => finished = round,
            Err(flume::RecvTimeoutError::Disconnected) => break,
            Err(flume::RecvTimeoutError::Timeout) => panic!(
                "a round (a yield, a spin, a sleep of at most 1.5 ms) did not end within {LOST_AFTER:?}, after {finished} rounds"
            ),
        }
    }
    shard.join().expect("the shard finishes");
    assert!(finished > 100, "only {finished} rounds ran in {DURATION:?}");
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
