//! A background task's slice of its shard's CPU. The cleaner's work between two awaits that
//! really wait can be long: batches the shard's batch cache still holds are read without
//! I/O, and decoding, hashing and filtering them is CPU only. glommio takes the CPU back
//! from a task queue only at its preemption timer, which for queues whose latency is "not
//! important" (produce's and the cleaner's both) is 100 ms, so a cleaner that merely asked
//! `yield_if_needed` kept produce's requests waiting for milliseconds at a time. A
//! `CpuSlice` hands the CPU back to the other task queues every `SLICE` of its own running
//! time; glommio's shares then decide who runs next (the cleaner's are a tenth of produce's).
//!
//! Invariants: `yield_if_due` yields the task queue exactly when `SLICE` or more passed since
//! the slice began (its creation or the last yield), and a yield starts a new slice.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The longest a background task runs before the shard's other task queues get a turn: a
/// produce request that arrives meanwhile waits at most about this long for the CPU.
pub(crate) const SLICE: Duration = Duration::from_micros(250);

pub(crate) struct CpuSlice {
    began: Cell<Instant>,
}

impl CpuSlice {
    pub(crate) fn new() -> CpuSlice {
        CpuSlice {
            began: Cell::new(Instant::now()),
        }
    }

    /// Yields the task queue if this slice is used up.
    pub(crate) async fn yield_if_due(&self) {
        if self.began.get().elapsed() >= SLICE {
            glommio::executor().yield_task_queue_now().await;
            self.began.set(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::log_tests::run;

    /// A task on a queue of its own that only computes, and a task it starts on the default
    /// queue: with a slice the other task runs within about one slice.
    #[test]
    fn a_busy_background_task_lets_other_queues_run_every_slice() {
        run(|| async {
            let default_queue = glommio::executor().current_task_queue();
            let queue = glommio::executor().create_task_queue(
                glommio::Shares::Static(100),
                glommio::Latency::NotImportant,
                "background",
            );
            let other_ran = Rc::new(Cell::new(None));
            let busy = glommio::spawn_local_into(
                {
                    let other_ran = other_ran.clone();
                    async move {
                        let start = Instant::now();
                        let other = glommio::spawn_local_into(
                            {
                                let other_ran = other_ran.clone();
                                async move { other_ran.set(Some(start.elapsed())) }
                            },
                            default_queue,
                        )
                        .expect("spawn");
                        let slice = CpuSlice::new();
                        // Bounded: stops once the other task ran, or after 1 s of work.
                        while other_ran.get().is_none() && start.elapsed() < Duration::from_secs(1)
                        {
                            std::hint::black_box((0..1_000u64).sum::<u64>());
                            slice.yield_if_due().await;
                        }
                        other.await;
                    }
                },
                queue,
            )
            .expect("spawn");
            busy.await;
            let ran_after = other_ran.get().expect("the other task ran");
            // glommio alone would have let the busy task run for its 100 ms preemption timer.
            assert!(ran_after < Duration::from_millis(50), "{ran_after:?}");
        });
    }
}
