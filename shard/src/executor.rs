//! Starting the shards: one glommio `LocalExecutor` per CPU, each pinned to its CPU, or, for
//! a node that shares the machine's CPUs with other processes (`pinned: false`, Redpanda's
//! "overprovisioned"), each free to run on any CPU of the process's affinity mask.
//!
//! Invariants: never more shards than online CPUs; pinned shards on distinct CPUs; each
//! shard's io_uring registered buffer arena stays at `io_memory_bytes` (locked memory is
//! scarce: 8 MiB per process on small hosts), and glommio falls back to ordinary aligned
//! allocations beyond it.

use std::future::Future;

use glommio::{CpuSet, LocalExecutorBuilder, Placement};
use thiserror::Error;

use crate::ShardId;

#[derive(Clone, Debug)]
pub struct ShardsConfig {
    pub shard_count: usize,
    /// Registered (locked) io memory per shard.
    pub io_memory_bytes: usize,
    /// Depth of each io_uring ring.
    pub ring_depth: usize,
    /// Each shard on its own CPU (thread-per-core). Off, the kernel places every shard on any
    /// CPU this process may use: several nodes that each pin shard 0 to the first CPU would
    /// otherwise all share that one while the others idle.
    pub pinned: bool,
}

#[derive(Error, Debug)]
pub enum StartError {
    #[error("asked for {requested} shards but only {online} CPUs are online")]
    TooManyShards { requested: usize, online: usize },
    #[error("no shards requested")]
    NoShards,
    #[error("cannot start shard {shard}: {message}")]
    Spawn { shard: ShardId, message: String },
    #[error("shard {0} panicked")]
    Panicked(ShardId),
}

/// CPU ids this process may run on (its affinity mask, e.g. from `taskset`), in ascending
/// order; the online CPUs when the mask cannot be read.
pub fn online_cpus() -> Vec<usize> {
    let mut cpus = allowed_cpus().unwrap_or_else(|| match CpuSet::online() {
        Ok(set) => set.into_iter().map(|location| location.cpu).collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    });
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// The calling thread's CPU affinity mask.
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size into it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    // SAFETY: CPU_ISSET only reads the set initialised above.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Runs `shard_main(id)` on every shard and waits for all of them to return.
pub fn run_shards<G, F, T>(config: &ShardsConfig, shard_main: G) -> Result<Vec<T>, StartError>
where
    G: Fn(ShardId) -> F + Send + Clone + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let cpus = online_cpus();
    if config.shard_count == 0 {
        return Err(StartError::NoShards);
    }
    if config.shard_count > cpus.len() {
        return Err(StartError::TooManyShards {
            requested: config.shard_count,
            online: cpus.len(),
        });
    }
    let mut handles = Vec::with_capacity(config.shard_count);
    for (shard, cpu) in cpus.iter().copied().take(config.shard_count).enumerate() {
        let shard_main = shard_main.clone();
        let placement = if config.pinned {
            Placement::Fixed(cpu)
        } else {
            Placement::Unbound
        };
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{shard}"))
            .io_memory(config.io_memory_bytes)
            .ring_depth(config.ring_depth)
            .spawn(move || shard_main(shard))
            .map_err(|error| StartError::Spawn {
                shard,
                message: error.to_string(),
            })?;
        handles.push(handle);
    }
    let mut outputs = Vec::with_capacity(handles.len());
    for (shard, handle) in handles.into_iter().enumerate() {
        outputs.push(handle.join().map_err(|_| StartError::Panicked(shard))?);
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(shard_count: usize, pinned: bool) -> ShardsConfig {
        ShardsConfig {
            shard_count,
            io_memory_bytes: 1 << 16,
            ring_depth: 32,
            pinned,
        }
    }

    #[test]
    fn runs_one_future_per_shard() {
        let config = small(1, true);
        let outputs = run_shards(&config, |shard| async move { shard * 10 }).expect("run");
        assert_eq!(outputs, vec![0]);
    }

    /// Pinned, shard i runs on the i-th CPU of the mask alone; unpinned, every shard may run
    /// on every CPU of the mask.
    #[test]
    fn shards_are_pinned_one_cpu_each_or_left_to_the_kernel() {
        let cpus = online_cpus();
        let shard_count = cpus.len().min(2);
        for pinned in [true, false] {
            let config = small(shard_count, pinned);
            let masks = run_shards(&config, |_| async { allowed_cpus() }).expect("run");
            for (shard, mask) in masks.into_iter().enumerate() {
                let expected = if pinned {
                    vec![cpus[shard]]
                } else {
                    cpus.clone()
                };
                assert_eq!(mask, Some(expected), "shard {shard}, pinned: {pinned}");
            }
        }
    }

    /// The reactor keeps its preemption timer (100 ms) armed across turns; a sleep due sooner
    /// must replace it, not wait for it (which would make each 1 ms sleep last 100 ms).
    #[test]
    fn short_sleeps_fire_while_the_preemption_timer_is_armed() {
        use std::time::{Duration, Instant};
        let config = small(1, true);
        let outputs = run_shards(&config, |_| async {
            let start = Instant::now();
            for _ in 0..20 {
                // A turn with a task ready arms the preemption timer.
                glommio::executor().yield_now().await;
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            start.elapsed()
        })
        .expect("run");
        assert!(
            outputs[0] < Duration::from_secs(1),
            "20 sleeps of 1 ms took {:?}",
            outputs[0]
        );
    }

    #[test]
    fn refuses_more_shards_than_cpus() {
        let requested = online_cpus().len() + 1;
        let config = small(requested, true);
        let result = run_shards(&config, |_| async {});
        assert!(matches!(result, Err(StartError::TooManyShards { .. })));
    }
}
