//! The command line, named after Kafka's own perf tools where they have a name for a thing.
//!
//! Invariants:
//! - Parsing only: every value is validated here (ranges, units) so that the runners can
//!   assert instead of re-checking.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::encode::Compression;
use crate::kafka::TopicSpec;

#[derive(Parser, Debug)]
#[command(
    name = "ringlog-bench",
    version,
    about = "Load generator for Kafka-API brokers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Produce at full speed (closed loop) or at --rate (open loop) and report latency.
    Produce(ProduceArgs),
    /// Fetch a topic from earliest or latest and report throughput.
    Consume(ConsumeArgs),
    /// End-to-end latency: produce at a fixed rate, fetch, time from send to fetch.
    E2e(E2eArgs),
    /// Run acks × message-size and write a report folder.
    Matrix(MatrixArgs),
    /// Draw latency-by-percentile curves of several .hgrm files (e.g. two brokers' matrix
    /// reports) in one plot, as SVG and PNG.
    Plot(PlotArgs),
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Where to write the plot: PATH.svg and PATH.png.
    #[arg(long)]
    pub output: PathBuf,
    #[arg(long, default_value = "produce latency by percentile")]
    pub title: String,
    /// A line under the title (what was measured where).
    #[arg(long, default_value = "")]
    pub subtitle: String,
    /// LABEL=FILE.hgrm, one per curve.
    #[arg(required = true, value_parser = parse_series)]
    pub series: Vec<(String, PathBuf)>,
}

fn parse_series(s: &str) -> Result<(String, PathBuf), String> {
    let (label, path) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("expected LABEL=FILE.hgrm, got {s:?}"))?;
    Ok((label.to_string(), PathBuf::from(path)))
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Broker to bootstrap from.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    #[arg(long, default_value = "ringlog-bench")]
    pub topic: String,
    /// Partitions to create the topic with when it is missing.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=100_000))]
    pub partitions: i32,
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i16,
    /// A setting for the topic when it is created, e.g. --topic-config retention.bytes=4294967296
    /// for runs long enough to fill the disk (repeatable).
    #[arg(long = "topic-config", value_name = "KEY=VALUE", value_parser = parse_setting)]
    pub topic_configs: Vec<(String, String)>,
    /// Cores (glommio executors, one per core) to spread connections over; 0 = all online.
    #[arg(long, default_value_t = 0)]
    pub cores: usize,
    /// Print a machine-readable summary on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

impl Common {
    /// How to create the topic when it is missing.
    pub fn topic_spec(&self) -> TopicSpec {
        TopicSpec {
            partitions: Some(self.partitions),
            replication_factor: Some(self.replication_factor),
            configs: self.topic_configs.clone(),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Value bytes per message.
    #[arg(long, default_value_t = 100)]
    pub message_size: usize,
    /// Payload bytes: random (incompressible) or compressible JSON-like text.
    #[arg(long, value_enum, default_value_t = Payload::Random)]
    pub payload: Payload,
    /// Stop after this many messages in total (warm-up included).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Measured time after warm-up (e.g. 30s, 500ms, 2m); default 10s, or unbounded when
    /// --messages is given.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Time at the start whose messages are left out of the figures.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// 0, 1 or all (-1).
    #[arg(long, default_value = "1", value_parser = parse_acks)]
    pub acks: i16,
    /// Bytes per record batch (Kafka's batch.size).
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(128..=64 * 1024 * 1024))]
    pub batch_size: u64,
    /// How long an open-loop batch waits to fill (Kafka's linger.ms).
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    pub linger: Duration,
    /// Produce requests outstanding per connection.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_in_flight: u64,
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    pub compression: CompressionArg,
    /// Open loop: total messages per second; latency counts from each intended send time.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Producer connections, spread over cores.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// The broker's process id, when it runs on this machine: produce and matrix runs then
    /// report the broker's CPU-seconds per million messages (from /proc/<pid>/stat).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Produce runs: write every acknowledged request of the measured window to this file, one
    /// line each: its send time, its answer's arrival, the intended send time of its first
    /// message (its send time in closed loop), all in CLOCK_MONOTONIC nanoseconds, the clock
    /// `perf record -k CLOCK_MONOTONIC` stamps its samples with, and its message count; to
    /// line a latency tail up with a trace of the node. Held in memory until the run ends
    /// (32 bytes a request).
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<std::path::PathBuf>,
    /// Broker-side timeout for acks (Kafka's request timeout).
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: i32,
    /// Seed of the payload bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Records carry keys from a space of N (8 ASCII digits, 00000000 to N-1, in turn on
    /// each producer connection), so that keys repeat, as a compacted topic needs (it refuses
    /// records without key); by default keys are null.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=crate::encode::KEYS_MAX))]
    pub keys: Option<u64>,
    /// Idempotent producers, as Kafka's clients run by default: each connection takes a
    /// producer id (InitProducerId) and numbers its records per partition.
    #[arg(long)]
    pub idempotent: bool,
    /// With --idempotent: send every Nth batch a second time right after it, as a client
    /// retrying after a lost answer does; the broker must answer the copy with the first
    /// one's offset and not store it (reported as duplicates refused).
    #[arg(long, requires = "idempotent", value_parser = clap::value_parser!(u64).range(1..))]
    pub resend_every: Option<u64>,
}

impl LoadArgs {
    /// How long to send after warm-up; None when bounded by --messages only.
    pub fn run_time(&self) -> Option<Duration> {
        match (self.duration, self.messages) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        }
    }
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Encode and checksum batches and Produce requests, send nowhere.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Where to start reading.
    #[arg(long, value_enum, default_value_t = StartFrom::Earliest)]
    pub from: StartFrom,
    /// Stop after this many messages.
    #[arg(long)]
    pub messages: Option<u64>,
    /// Stop after this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Bytes per partition per Fetch (Kafka's max.partition.fetch.bytes).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub fetch_max_bytes: i32,
    /// Consumer connections, spread over cores; default one per core, at most one per
    /// partition without --group. With --group, each is a member of the group.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub consumers: Option<u32>,
    /// Consumer group to join (Kafka's classic protocol, range assignor): members start from
    /// the group's committed offsets (else --from), commit every 5 s and when they stop.
    #[arg(long)]
    pub group: Option<String>,
    /// Check every batch's CRC-32C.
    #[arg(long)]
    pub verify_crc: bool,
}

#[derive(Args, Debug)]
pub struct E2eArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub load: LoadArgs,
}

#[derive(Args, Debug)]
pub struct MatrixArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Report folder (created).
    #[arg(long)]
    pub output: std::path::PathBuf,
    /// Acks settings to run.
    #[arg(long, value_delimiter = ',', default_value = "0,1,all", value_parser = parse_acks)]
    pub acks_list: Vec<i16>,
    /// Message sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "100,1024")]
    pub sizes: Vec<usize>,
    /// A name for the broker under test, recorded with its address.
    #[arg(long, default_value = "")]
    pub broker_label: String,
    /// Keep each run's topic; by default it is deleted once counted, so that a long matrix
    /// does not fill the broker's disk.
    #[arg(long)]
    pub keep_topics: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    Random,
    Compressible,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressionArg {
    None,
    Lz4,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Compression {
        match c {
            CompressionArg::None => Compression::None,
            CompressionArg::Lz4 => Compression::Lz4,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
}

pub fn acks_name(acks: i16) -> String {
    if acks == -1 {
        "all".to_string()
    } else {
        acks.to_string()
    }
}

/// `key=value`, split at the first `=`.
pub fn parse_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

pub fn parse_acks(s: &str) -> Result<i16, String> {
    match s {
        "0" => Ok(0),
        "1" => Ok(1),
        "all" | "-1" => Ok(-1),
        _ => Err(format!("acks must be 0, 1 or all, not {s:?}")),
    }
}

/// `250ms`, `30s`, `2m`, `1h`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" => n * 60.0,
        "h" => n * 3_600.0,
        _ => return Err(format!("bad duration unit in {s:?} (use ms, s, m, h)")),
    };
    if !(0.0..=86_400.0 * 365.0).contains(&secs) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_acks() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1_500)));
        assert!(parse_duration("3 weeks").is_err());
        assert_eq!(parse_acks("all"), Ok(-1));
        assert!(parse_acks("2").is_err());
    }

    #[test]
    fn cli_parses_kafka_style_flags() {
        let cli = Cli::try_parse_from([
            "ringlog-bench",
            "produce",
            "--bootstrap-server",
            "h:1",
            "--acks",
            "all",
            "--message-size",
            "1024",
            "--rate",
            "1000",
            "--dry-run",
            "--linger",
            "1ms",
            "--topic-config",
            "retention.bytes=1000",
            "--topic-config",
            "segment.ms=a=b",
            "--keys",
            "100",
        ])
        .expect("parses");
        let Command::Produce(p) = cli.command else {
            panic!("produce")
        };
        assert_eq!(p.common.bootstrap_server, "h:1");
        assert_eq!(
            (p.load.acks, p.load.message_size, p.load.rate),
            (-1, 1024, Some(1000.0))
        );
        assert!(p.dry_run);
        assert_eq!(p.load.keys, Some(100));
        let no_keys = ["ringlog-bench", "produce", "--keys", "0"];
        assert!(Cli::try_parse_from(no_keys).is_err());
        let spec = p.common.topic_spec();
        assert_eq!(
            spec.configs,
            vec![
                ("retention.bytes".to_string(), "1000".to_string()),
                ("segment.ms".to_string(), "a=b".to_string())
            ]
        );
        let no_value = ["ringlog-bench", "produce", "--topic-config", "retention.ms"];
        assert!(Cli::try_parse_from(no_value).is_err());
        let cli = Cli::try_parse_from([
            "ringlog-bench",
            "matrix",
            "--output",
            "/tmp/x",
            "--sizes",
            "10,20",
            "--acks-list",
            "1,all",
        ])
        .expect("parses");
        let Command::Matrix(m) = cli.command else {
            panic!("matrix")
        };
        assert_eq!((m.sizes, m.acks_list), (vec![10, 20], vec![1, -1]));
    }
}
