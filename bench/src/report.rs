//! Latency histograms and the figures a run reports: percentiles, rates, errors, and where and
//! how the run was made.
//!
//! Invariants:
//! - Histograms hold nanoseconds (1 ns .. 1 h, 3 significant digits); reports print
//!   milliseconds. Values past the top are clamped to it and counted in `clamped`, never lost.
//! - A summary's `errors` holds every broker or connection error by Kafka name with the number
//!   of messages it cost; `ok()` is false when it is non-empty.
//! - `.hgrm` files use HdrHistogram's percentile-distribution text format (values in ms).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub const LATENCY_NS_MAX: u64 = 3_600 * 1_000_000_000;

pub fn new_histogram() -> Histogram<u64> {
    // 1 ns..1 h at 3 significant digits is a valid, fixed configuration.
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid histogram bounds")
}

/// Records `count` samples of `ns`, clamping into range; returns whether it clamped.
#[inline]
pub fn record(h: &mut Histogram<u64>, ns: u64, count: u64) -> bool {
    let v = ns.clamp(1, LATENCY_NS_MAX);
    // In range by the clamp above, so recording cannot fail.
    h.record_n(v, count).expect("value within bounds");
    v != ns.max(1)
}

/// Percentiles in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub p9999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        Latency {
            count: h.len(),
            mean_ms: h.mean() / 1e6,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            p9999_ms: ms(h.value_at_quantile(0.9999)),
            max_ms: ms(h.max()),
        }
    }
}

/// The percentile distribution in HdrHistogram's text format, values scaled to milliseconds.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let scale = 1e6;
    if !h.is_empty() {
        let mut total = 0u64;
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let q = v.quantile_iterated_to();
            let value = v.value_iterated_to() as f64 / scale;
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:12.3} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
            }
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / scale,
        h.stdev() / scale
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max() as f64 / scale,
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        h.distinct_values()
    );
    out
}

/// Parses the (percentile, value ms) rows of an `.hgrm` text; used by plots and tests.
pub fn parse_hgrm(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let value = f.next()?.parse::<f64>().ok()?;
            let q = f.next()?.parse::<f64>().ok()?;
            Some((q, value))
        })
        .collect()
}

/// Where and how a report was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Environment {
    pub command: String,
    pub broker: String,
    /// The machine's online CPUs (not only those the generator may use).
    pub cores: usize,
    #[serde(default)]
    pub cpu_model: String,
    /// The CPUs the generator may run on (its affinity, e.g. from `taskset`), as a list.
    #[serde(default)]
    pub generator_cpus: String,
    pub kernel: String,
    pub date_utc: String,
    pub bench_version: String,
}

impl Environment {
    pub fn capture(broker: &str, command: &str) -> Environment {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_string());
        let cores = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|list| cpu_list_len(list.trim()))
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                    .map(|(_, model)| model.trim().to_string())
            })
            .unwrap_or_default();
        Environment {
            command: command.to_string(),
            broker: broker.to_string(),
            cores,
            cpu_model,
            generator_cpus: cpu_list(&shard::executor::online_cpus()),
            kernel,
            date_utc: utc_now(),
            bench_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    pub fn header(&self) -> String {
        format!(
            "# command: {}\n# broker: {}\n# machine: {}, {}\n# generator on CPUs {}\n# date: {}\n",
            self.command,
            self.broker,
            self.machine(),
            self.kernel,
            self.generator_cpus,
            self.date_utc
        )
    }

    /// `2 cores (AMD EPYC 7B13)`, or without the model when unknown.
    pub fn machine(&self) -> String {
        let cores = if self.cores == 1 { "core" } else { "cores" };
        if self.cpu_model.is_empty() {
            format!("{} {cores}", self.cores)
        } else {
            format!("{} {cores} ({})", self.cores, self.cpu_model)
        }
    }
}

/// How many CPUs a kernel CPU list (`0-3,8,10-11`) names; None if it does not parse.
fn cpu_list_len(list: &str) -> Option<usize> {
    list.split(',').try_fold(0, |count, part| {
        let len = match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
        Some(count + len)
    })
}

/// Ascending CPU ids as a kernel CPU list: `[0, 1, 2, 5]` -> `0-2,5`.
fn cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// This process's command line, quoted where a word has spaces.
pub fn command_line() -> String {
    std::env::args()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `YYYY-MM-DDTHH:MM:SSZ` from the system clock (civil-from-days, Howard Hinnant).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    utc_from_unix(secs)
}

pub fn utc_from_unix(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// One run's figures (produce, consume or e2e).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    pub mode: String,
    pub topic: String,
    pub acks: String,
    pub message_bytes: usize,
    pub producers: usize,
    /// Consumer connections (group members with --group), for consume runs.
    #[serde(default)]
    pub consumers: usize,
    pub partitions: i32,
    pub cores: usize,
    pub batch_bytes: usize,
    pub linger_ms: f64,
    pub max_in_flight: usize,
    pub compression: String,
    /// Target rate (open loop), or None for closed loop.
    pub rate_target: Option<f64>,
    pub warmup_s: f64,
    /// Length of the measured window.
    pub measured_s: f64,
    /// Messages sent, including warm-up.
    pub sent: u64,
    /// Messages the broker acknowledged, including warm-up (0 for acks=0).
    pub acked: u64,
    /// Messages in the measured window (acked, or sent for acks=0 and dry runs).
    pub measured_messages: u64,
    pub msgs_per_s: f64,
    /// Payload megabytes (10^6) per second: message bytes only.
    pub mb_per_s: f64,
    /// Batch bytes (as on the wire and on disk) megabytes per second.
    pub wire_mb_per_s: f64,
    pub latency: Latency,
    /// Produce round trips, one sample per request: from the request's send to its answer.
    /// In an open-loop run the message latency is this plus the wait for the request's send
    /// (an in-flight slot, the generator's own turn); a tail in `latency` that this lacks was
    /// spent in the generator's pipeline, not at the broker. Empty for acks=0 and consume runs.
    #[serde(default)]
    pub round_trip: Latency,
    /// Latency samples that were past the histogram top and clamped.
    pub clamped: u64,
    pub errors: BTreeMap<String, u64>,
    /// Sum of the partitions' log end offsets after the run, when the topic was fresh.
    pub log_end_offset_total: Option<i64>,
    /// XOR of every batch CRC (dry runs): proof the work was done.
    pub checksum: Option<u32>,
    /// The broker's CPU-seconds in the measured window (with --broker-pid).
    #[serde(default)]
    pub broker_cpu_s: Option<f64>,
    /// The same per million measured messages.
    #[serde(default)]
    pub broker_cpu_s_per_million: Option<f64>,
    /// Busy CPU-seconds of the whole machine in the same window, per million measured
    /// messages: the broker, the kernel threads that work for it and this generator.
    #[serde(default)]
    pub machine_cpu_s_per_million: Option<f64>,
    /// Producers were idempotent (producer ids and sequence numbers).
    #[serde(default)]
    pub idempotent: bool,
    /// Batches sent twice (`--resend-every`) whose second copy the broker answered with the
    /// first one's offset, storing it once.
    #[serde(default)]
    pub duplicates_refused: u64,
}

impl Summary {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Records the broker's CPU-seconds of the measured window, and per million messages,
    /// with the whole machine's.
    pub fn set_broker_cpu(&mut self, used: Option<crate::broker_cpu::Used>) {
        let per_million = |cpu: f64| {
            (self.measured_messages > 0).then(|| cpu / (self.measured_messages as f64 / 1e6))
        };
        self.broker_cpu_s = used.map(|u| u.broker_s);
        self.broker_cpu_s_per_million = used.and_then(|u| per_million(u.broker_s));
        self.machine_cpu_s_per_million = used.and_then(|u| per_million(u.machine_s));
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn text(&self) -> String {
        let consume = self.mode.starts_with("consume");
        let mut s = if consume {
            format!(
                "{} {}: {} msgs/s, {:.1} MB/s of batches, {} messages in {:.2} s, \
                 {} consumers, {} partitions, {} cores\n",
                self.mode,
                self.topic,
                fmt_rate(self.msgs_per_s),
                self.wire_mb_per_s,
                self.measured_messages,
                self.measured_s,
                self.consumers,
                self.partitions,
                self.cores,
            )
        } else {
            format!(
                "{} {}: {} msgs/s, {:.1} MB/s payload ({:.1} MB/s batches), {} messages in \
                 {:.2} s (sent {}, acked {}), acks={}, {} B, {} producers, {} partitions, \
                 {} cores\n",
                self.mode,
                self.topic,
                fmt_rate(self.msgs_per_s),
                self.mb_per_s,
                self.wire_mb_per_s,
                self.measured_messages,
                self.measured_s,
                self.sent,
                self.acked,
                self.acks,
                self.message_bytes,
                self.producers,
                self.partitions,
                self.cores,
            )
        };
        let l = &self.latency;
        if l.count > 0 {
            let _ =
                writeln!(
                s,
                "{} ms: p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} p99.99 {:.3} max {:.3} (n={})",
                if consume { "fetch round trip" } else { "latency" },
                l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.p9999_ms, l.max_ms, l.count
            );
        }
        let r = &self.round_trip;
        if r.count > 0 {
            let _ = writeln!(
                s,
                "round trip ms (per request): p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} \
                 (n={})",
                r.p50_ms, r.p90_ms, r.p99_ms, r.p999_ms, r.max_ms, r.count
            );
        }
        if let (Some(cpu), Some(per_million)) = (self.broker_cpu_s, self.broker_cpu_s_per_million) {
            let _ = write!(
                s,
                "broker CPU: {cpu:.2} s in the measured window, {per_million:.3} s per million messages"
            );
            if let Some(machine) = self.machine_cpu_s_per_million {
                let _ = write!(
                    s,
                    " (the whole machine, this generator included: {machine:.3})"
                );
            }
            s.push('\n');
        }
        if self.idempotent {
            let _ = writeln!(
                s,
                "idempotent producers: {} resent batches refused as duplicates",
                self.duplicates_refused
            );
        }
        if let Some(c) = self.checksum {
            let _ = writeln!(
                s,
                "per core: {} msgs/s (checksum {c:08x})",
                fmt_rate(self.msgs_per_s / self.cores.max(1) as f64)
            );
        }
        if self.errors.is_empty() {
            s.push_str("errors: none\n");
        } else {
            let list: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(
                s,
                "ERRORS ({} messages): {}",
                self.error_count(),
                list.join(", ")
            );
        }
        s
    }
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

/// The side-by-side table of a matrix: one row per message size, a column group per acks.
pub fn table(env: &Environment, runs: &[Summary]) -> String {
    let mut out = env.header();
    out.push('\n');
    let cpu = runs.iter().any(|r| r.broker_cpu_s_per_million.is_some());
    let _ = writeln!(
        out,
        "{:>6} {:>5} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}{}",
        "size",
        "acks",
        "msgs/s",
        "MB/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "p99.99",
        "max ms",
        "errors",
        if cpu { "  CPU s/M" } else { "" }
    );
    let mut sorted: Vec<&Summary> = runs.iter().collect();
    sorted.sort_by(|a, b| {
        (a.message_bytes, acks_order(&a.acks)).cmp(&(b.message_bytes, acks_order(&b.acks)))
    });
    for r in sorted {
        let l = &r.latency;
        let ms = |v: f64| {
            if l.count == 0 {
                "-".to_string()
            } else {
                format!("{v:.3}")
            }
        };
        let cpu_column = match (cpu, r.broker_cpu_s_per_million) {
            (false, _) => String::new(),
            (true, Some(per_million)) => format!(" {per_million:>9.3}"),
            (true, None) => format!(" {:>9}", "-"),
        };
        let _ = writeln!(
            out,
            "{:>6} {:>5} {:>12.0} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}{cpu_column}",
            r.message_bytes,
            r.acks,
            r.msgs_per_s,
            r.mb_per_s,
            ms(l.p50_ms),
            ms(l.p90_ms),
            ms(l.p99_ms),
            ms(l.p999_ms),
            ms(l.p9999_ms),
            ms(l.max_ms),
            r.error_count()
        );
    }
    out.push_str("\nacks=0 has no acknowledgement, so no latency; its rate is the send rate.\n");
    if cpu {
        out.push_str(
            "CPU s/M: the broker's CPU-seconds (user + system, /proc/<pid>/stat) per million \
             messages in the measured window.\n",
        );
    }
    out
}

fn acks_order(acks: &str) -> u8 {
    match acks {
        "0" => 0,
        "1" => 1,
        _ => 2,
    }
}

/// results.json: the environment and every run.
#[derive(Debug, Serialize, Deserialize)]
pub struct MatrixReport {
    pub environment: Environment,
    pub runs: Vec<Summary>,
}

pub fn to_json<T: Serialize>(value: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_and_write_as_the_kernel_does() {
        assert_eq!(cpu_list_len("0-1"), Some(2));
        assert_eq!(cpu_list_len("0-3,8,10-11"), Some(7));
        assert_eq!(cpu_list_len("5"), Some(1));
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len("x"), None);
        assert_eq!(cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[0, 2, 3]), "0,2-3");
        assert_eq!(cpu_list(&[]), "");
    }

    #[test]
    fn percentiles_of_a_uniform_distribution() {
        let mut h = new_histogram();
        for us in 1..=10_000u64 {
            record(&mut h, us * 1_000, 1);
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 10_000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002;
        assert!(close(l.p50_ms, 5.0), "{}", l.p50_ms);
        assert!(close(l.p90_ms, 9.0), "{}", l.p90_ms);
        assert!(close(l.p99_ms, 9.9), "{}", l.p99_ms);
        assert!(close(l.p999_ms, 9.99), "{}", l.p999_ms);
        assert!(close(l.max_ms, 10.0), "{}", l.max_ms);
        assert!(close(l.mean_ms, 5.0005), "{}", l.mean_ms);
    }

    #[test]
    fn record_n_counts_each_message_and_clamps() {
        let mut h = new_histogram();
        assert!(!record(&mut h, 2_000_000, 500));
        assert!(record(&mut h, LATENCY_NS_MAX * 2, 1));
        assert!(
            !record(&mut h, 0, 1),
            "0 ns is recorded as 1 ns, not a clamp"
        );
        assert_eq!(h.len(), 502);
        assert!(h.max() >= LATENCY_NS_MAX);
    }

    #[test]
    fn merged_histograms_match_one_histogram() {
        let (mut a, mut b, mut all) = (new_histogram(), new_histogram(), new_histogram());
        for i in 1..1_000u64 {
            let v = i * i * 37;
            if i % 2 == 0 {
                record(&mut a, v, 1)
            } else {
                record(&mut b, v, 1)
            };
            record(&mut all, v, 1);
        }
        a.add(&b).expect("same bounds");
        assert_eq!(Latency::of(&a), Latency::of(&all));
    }

    #[test]
    fn hgrm_roundtrips_and_ends_at_total() {
        let mut h = new_histogram();
        for i in 1..=1_000u64 {
            record(&mut h, i * 10_000, 1);
        }
        let text = hgrm(&h);
        assert!(text.contains("#[Max     ="));
        let rows = parse_hgrm(&text);
        assert!(rows.len() > 20);
        let (q_last, v_last) = rows[rows.len() - 1];
        assert_eq!(q_last, 1.0);
        assert!((v_last - 10.0).abs() < 0.01, "{v_last}");
        assert!(rows
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let last_line = text
            .lines()
            .find(|l| l.contains(" 1.000000000000 "))
            .expect("last row");
        assert!(last_line.trim_end().ends_with("1000"));
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_from_unix(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
