//! The CPU time a broker process spends during a run's measured window, so that a run
//! reports CPU-seconds per million messages for any broker on this machine (ringlog,
//! Kafka's JVM). Read from `/proc/<pid>/stat`: user + system time of all its threads,
//! living and exited. The kernel charges softirq work (the network stack's receive side,
//! block completions) to whatever task was running when it ran, so the part done while the
//! broker ran is in the figure and the part done on other CPUs or in idle time is not; the
//! io_uring worker threads of a ringlog process are its own threads and are counted.
//! Kernel threads that work for it (the file system's journal, block completion workers)
//! are not: beside the broker's figure the window also takes the whole machine's busy time
//! from `/proc/stat`, which counts everything, this generator included.
//!
//! Sampled when the warm-up ends (a thread waits for it) and when the run ends.

use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::pacing::clock;

/// `/proc/<pid>/stat` counts in USER_HZ ticks, which the kernel ABI fixes at 100 a second.
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system seconds of a process so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_stat(&text).ok_or_else(|| anyhow!("{path}: unexpected format"))
}

/// Fields 14 and 15 (utime, stime), counted after the command name, which is in
/// parentheses and may itself hold spaces and parentheses.
fn parse_stat(text: &str) -> Option<f64> {
    let after_name = &text[text.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

/// Busy seconds of all CPUs so far: user, nice, system, irq, softirq and steal time of the
/// first line of `/proc/stat` (idle and iowait left out; guest time is inside user).
pub fn machine_busy_seconds() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse_proc_stat(&text).ok_or_else(|| anyhow!("/proc/stat: unexpected format"))
}

fn parse_proc_stat(text: &str) -> Option<f64> {
    let mut fields = text
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace();
    let mut ticks = [0u64; 8];
    for tick in &mut ticks {
        *tick = fields.next()?.parse().ok()?;
    }
    let [user, nice, system, _idle, _iowait, irq, softirq, steal] = ticks;
    Some((user + nice + system + irq + softirq + steal) as f64 / TICKS_PER_SECOND)
}

/// CPU-seconds from the end of the warm-up to `finish`: the broker's, and the machine's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Used {
    pub broker_s: f64,
    pub machine_s: f64,
}

/// The broker's CPU time from the end of the warm-up to `finish`.
pub struct Window {
    pid: u32,
    start: JoinHandle<Result<Used>>,
}

fn sample(pid: u32) -> Result<Used> {
    Ok(Used {
        broker_s: cpu_seconds(pid)?,
        machine_s: machine_busy_seconds()?,
    })
}

impl Window {
    /// Starts waiting for `warmup_end_ns` (on `clock::now_ns`'s time line).
    pub fn open(pid: u32, warmup_end_ns: u64) -> Result<Window> {
        sample(pid)?; // fail now, not after the run, if the pid is wrong
        let start = std::thread::Builder::new()
            .name("broker-cpu".into())
            .spawn(move || {
                let now = clock::now_ns();
                if warmup_end_ns > now {
                    std::thread::sleep(Duration::from_nanos(warmup_end_ns - now));
                }
                sample(pid)
            })
            .context("spawning the broker CPU sampler")?;
        Ok(Window { pid, start })
    }

    /// CPU-seconds the broker, and the whole machine, used since the warm-up ended.
    pub fn finish(self) -> Result<Used> {
        let end = sample(self.pid)?;
        let start = self
            .start
            .join()
            .map_err(|_| anyhow!("the broker CPU sampler panicked"))??;
        Ok(Used {
            broker_s: (end.broker_s - start.broker_s).max(0.0),
            machine_s: (end.machine_s - start.machine_s).max(0.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parentheses() {
        let line = "4242 (shard-0 (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    1234 567 0 0 20 0 3 0 100 1000000 500 18446744073709551615";
        assert_eq!(parse_stat(line), Some(18.01));
        assert_eq!(parse_stat("4242 (x) S 1"), None);
    }

    #[test]
    fn machine_busy_time_leaves_idle_and_iowait_out() {
        let text = "cpu  100 2 30 5000 40 6 7 8 0 0\ncpu0 50 1 15 2500 20 3 3 4 0 0\n";
        assert_eq!(parse_proc_stat(text), Some(1.53));
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None);
        assert!(machine_busy_seconds().expect("/proc/stat") > 0.0);
    }

    #[test]
    fn this_process_uses_cpu() {
        let pid = std::process::id();
        let before = cpu_seconds(pid).expect("own stat");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while cpu_seconds(pid).expect("own stat") <= before {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "CPU time never moved"
            );
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
        }
    }
}
