//! Thread-per-core plumbing: one glommio executor per core, per-core progress counters, and
//! the live progress line.
//!
//! Invariants:
//! - Never more executors than online CPUs; each pinned to its own CPU; each asks glommio for
//!   at most `IO_MEMORY_BYTES` of locked io memory (the process may lock only 8 MiB).
//! - Cores share nothing but their `Counters` (relaxed atomics, one cache-line pair each, written
//!   by one core, read by the progress thread) and what they return when they finish.
//! - The progress line is printed only when stderr is a terminal.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use glommio::{LocalExecutorBuilder, Placement};

pub const IO_MEMORY_BYTES: usize = 1 << 20;
const _: () = assert!(
    IO_MEMORY_BYTES * 3 <= 8 << 20,
    "cores + setup executor fit in 8 MiB"
);

/// CPUs this process may use (its affinity mask, so `taskset` keeps the generator off the
/// broker's cores), in ascending order.
fn usable_cpus() -> Vec<usize> {
    shard::executor::online_cpus()
}

pub fn online_cores() -> usize {
    usable_cpus().len()
}

/// `requested` cores (0 = all), capped at the online CPUs and at `useful` (e.g. connections).
pub fn cores_to_use(requested: usize, useful: usize) -> usize {
    let online = online_cores();
    let want = if requested == 0 { online } else { requested };
    want.min(online).min(useful.max(1)).max(1)
}

/// Runs `fut` on a short-lived, unpinned executor on this thread (setup and admin calls).
pub fn run_local<T, F: Future<Output = T>>(fut: F) -> Result<T> {
    let ex = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(IO_MEMORY_BYTES)
        .name("bench-setup")
        .make()
        .map_err(|e| anyhow!("starting an executor: {e}"))?;
    Ok(ex.run(fut))
}

/// Runs `make(core)` on executors pinned to the first `cores` usable CPUs and returns their
/// outputs in core order.
pub fn run_on_cores<T, F, Fut>(cores: usize, make: F) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = T> + 'static,
{
    let cpus = usable_cpus();
    assert!(cores >= 1 && cores <= cpus.len());
    let mut handles = Vec::with_capacity(cores);
    for (core, cpu) in cpus.into_iter().take(cores).enumerate() {
        let make = make.clone();
        let handle = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .io_memory(IO_MEMORY_BYTES)
            .name(&format!("bench-core{core}"))
            .spawn(move || make(core))
            .map_err(|e| anyhow!("starting the executor for core {core}: {e}"))?;
        handles.push(handle);
    }
    handles
        .into_iter()
        .enumerate()
        .map(|(core, h)| h.join().map_err(|e| anyhow!("core {core} failed: {e}")))
        .collect()
}

/// One core's live counts, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

pub struct Progress {
    pub cores: Vec<Counters>,
    stop: AtomicBool,
}

impl Progress {
    pub fn new(cores: usize) -> Arc<Progress> {
        Arc::new(Progress {
            cores: (0..cores).map(|_| Counters::default()).collect(),
            stop: AtomicBool::new(false),
        })
    }

    fn totals(&self) -> (u64, u64, u64) {
        self.cores.iter().fold((0, 0, 0), |(s, a, e), c| {
            (
                s + c.sent.load(Ordering::Relaxed),
                a + c.acked.load(Ordering::Relaxed),
                e + c.errors.load(Ordering::Relaxed),
            )
        })
    }

    /// Prints a progress line every second on a terminal until `finish` is called.
    pub fn start_printer(
        self: &Arc<Progress>,
        label: &'static str,
    ) -> Option<std::thread::JoinHandle<()>> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let p = self.clone();
        Some(std::thread::spawn(move || {
            let start = Instant::now();
            let (mut last_sent, mut last_t) = (0u64, start);
            while !p.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let now = Instant::now();
                if now - last_t < Duration::from_secs(1) && !p.stop.load(Ordering::Relaxed) {
                    continue;
                }
                let (sent, acked, errors) = p.totals();
                let rate = (sent - last_sent) as f64 / (now - last_t).as_secs_f64();
                let _ = write!(
                    std::io::stderr(),
                    "\r\x1b[2K{label} {:>6.1}s  rate {:>10}/s  sent {sent}  acked {acked}  errors {errors}",
                    (now - start).as_secs_f64(),
                    crate::report::fmt_rate(rate),
                );
                (last_sent, last_t) = (sent, now);
            }
            let _ = writeln!(std::io::stderr());
        }))
    }

    pub fn finish(&self, printer: Option<std::thread::JoinHandle<()>>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = printer {
            let _ = h.join();
        }
    }
}

/// Tests that start executors take this first: each executor locks `IO_MEMORY_BYTES`, and tests
/// running in parallel in one process could otherwise pass the 8 MiB the process may lock.
#[cfg(test)]
pub(crate) fn executor_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_more_cores_than_online_or_useful() {
        let online = online_cores();
        assert_eq!(cores_to_use(0, 1_000), online);
        assert_eq!(cores_to_use(1_000, 1_000), online);
        assert_eq!(cores_to_use(0, 1), 1);
        assert_eq!(cores_to_use(1, 0), 1);
    }

    #[test]
    fn executors_run_and_return_in_core_order() {
        let _executors = super::executor_test_lock();
        let out = run_on_cores(cores_to_use(0, 2), |core| async move { core * 10 }).expect("runs");
        assert_eq!(out, (0..out.len()).map(|c| c * 10).collect::<Vec<_>>());
    }
}
