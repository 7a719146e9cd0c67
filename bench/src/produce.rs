//! `produce`: producer connections spread over cores, closed loop (as fast as the broker
//! acknowledges) or open loop (`--rate`, latency from each message's intended send time).
//!
//! Invariants:
//! - Each producer owns one connection to the leader of its partitions and allocates
//!   nothing per record on it ([`pipeline`]).
//! - Every message ends up counted exactly once: acked, or under a Kafka error name
//!   (including NETWORK_EXCEPTION for a dropped connection and REQUEST_TIMED_OUT for requests
//!   never answered), or, for acks=0, as sent.
//! - Messages whose send (closed loop) or intended (open loop) time falls in the warm-up are
//!   acknowledged and counted in `sent`/`acked`, but left out of rates and histograms.

mod pipeline;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use client::offsets::LATEST;
use hdrhistogram::Histogram;

use crate::broker_cpu;
use crate::cli::{acks_name, LoadArgs, Payload};
use crate::cores::{self, Progress};
use crate::encode::Compression;
use crate::kafka::{self, PartitionLeader, TopicSpec};
use crate::pacing::clock;
use crate::report::{self, Latency, Summary};
use pipeline::dry_run_producer;
pub(crate) use pipeline::producer;

/// What every producer of a run shares.
#[derive(Clone, Debug)]
pub struct Plan {
    pub topic: String,
    pub acks: i16,
    pub message_bytes: usize,
    pub payload: Payload,
    pub batch_bytes: usize,
    pub linger: Duration,
    pub max_in_flight: u64,
    pub compression: Compression,
    pub request_timeout_ms: i32,
    pub seed: u64,
    pub dry_run: bool,
    /// Put each message's intended send time (ns, `clock`) in its first 8 value bytes.
    pub stamp: bool,
    pub timeline: Timeline,
    /// Each producer takes a producer id and numbers its batches (idempotent producer).
    pub idempotent: bool,
    /// Send every Nth batch twice (idempotent only), counting the copies the broker refused.
    pub resend_every: Option<u64>,
    /// Records carry keys from a space of this many (`None`: null keys).
    pub keys: Option<u64>,
    /// Keep each acknowledged request's times (`Tally::requests`) for `--request-log`.
    pub log_requests: bool,
}

impl Plan {
    /// The plan for producing `load` to `topic`; `stamp` puts send times in the values.
    pub fn new(topic: &str, load: &LoadArgs, dry_run: bool, stamp: bool) -> Plan {
        Plan {
            topic: topic.to_string(),
            acks: load.acks,
            message_bytes: load.message_size,
            payload: load.payload,
            batch_bytes: load.batch_size as usize,
            linger: load.linger,
            max_in_flight: load.max_in_flight,
            compression: load.compression.into(),
            request_timeout_ms: load.request_timeout_ms,
            seed: load.seed,
            dry_run,
            stamp,
            timeline: Timeline::new(load.warmup, load.run_time()),
            idempotent: load.idempotent,
            resend_every: load.resend_every,
            keys: load.keys,
            log_requests: load.request_log.is_some(),
        }
    }
}

/// Run times in `clock::now_ns` units.
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    pub start_ns: u64,
    pub warmup_end_ns: u64,
    /// Sending stops here (u64::MAX when the run is bounded by a message count only).
    pub end_ns: u64,
}

impl Timeline {
    /// `duration` None: run until the message count is reached.
    pub fn new(warmup: Duration, duration: Option<Duration>) -> Timeline {
        // Start slightly in the future so that every core starts on the same schedule.
        let start_ns = clock::now_ns() + 20_000_000;
        let warmup_end_ns = start_ns + warmup.as_nanos() as u64;
        let end_ns = duration.map_or(u64::MAX, |d| warmup_end_ns + d.as_nanos() as u64);
        Timeline {
            start_ns,
            warmup_end_ns,
            end_ns,
        }
    }
}

/// One producer connection's share of the work.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub id: usize,
    pub core: usize,
    pub leader: Option<SocketAddr>,
    pub partitions: Vec<i32>,
    /// Messages this producer sends, or None to run until the timeline ends.
    pub messages: Option<u64>,
    /// Open loop: this producer's messages per second.
    pub rate: Option<f64>,
}

/// Spreads `producers` over `cores` and over the partitions, one leader per producer.
pub fn assign(
    producers: usize,
    cores: usize,
    leaders: &[PartitionLeader],
    messages: Option<u64>,
    rate: Option<f64>,
) -> Vec<Assignment> {
    assert!(producers >= 1 && cores >= 1);
    // Group partitions by leader; producer p serves leader group p % groups.
    let mut groups: BTreeMap<SocketAddr, Vec<i32>> = BTreeMap::new();
    for l in leaders {
        groups.entry(l.leader).or_default().push(l.partition);
    }
    let groups: Vec<(SocketAddr, Vec<i32>)> = groups.into_iter().collect();
    let mut out = Vec::with_capacity(producers);
    for p in 0..producers {
        let share = |total: u64| {
            total / producers as u64 + u64::from((p as u64) < total % producers as u64)
        };
        let (leader, partitions) = if groups.is_empty() {
            (None, vec![p as i32])
        } else {
            let g = p % groups.len();
            let (addr, parts) = &groups[g];
            // Producers of this group: g, g + groups, g + 2 * groups, ...
            let peers = (producers - g).div_ceil(groups.len());
            let rank = p / groups.len();
            let mine: Vec<i32> = if parts.len() >= peers {
                parts.iter().copied().skip(rank).step_by(peers).collect()
            } else {
                vec![parts[rank % parts.len()]]
            };
            (Some(*addr), mine)
        };
        out.push(Assignment {
            id: p,
            core: p % cores,
            leader,
            partitions,
            messages: messages.map(share),
            rate: rate.map(|r| r / producers as f64),
        });
    }
    out
}

/// What one core (or one producer) measured; merged into a `Summary`.
pub struct Tally {
    pub hist: Histogram<u64>,
    /// Request round trips (send to answer) in the measured window, one sample per request.
    pub round_trip: Histogram<u64>,
    /// With `Plan::log_requests`: each acknowledged request of the measured window.
    pub requests: Vec<RequestTimes>,
    pub sent: u64,
    pub acked: u64,
    pub measured_messages: u64,
    pub measured_wire_bytes: u64,
    /// Last acknowledgement (or send, for acks=0) in the measured window.
    pub last_ns: u64,
    pub clamped: u64,
    pub errors: BTreeMap<String, u64>,
    pub checksum: u32,
    /// Batches sent a second time that the broker answered with the first copy's offset.
    pub duplicates_refused: u64,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            hist: report::new_histogram(),
            round_trip: report::new_histogram(),
            requests: Vec::new(),
            sent: 0,
            acked: 0,
            measured_messages: 0,
            measured_wire_bytes: 0,
            last_ns: 0,
            clamped: 0,
            errors: BTreeMap::new(),
            checksum: 0,
            duplicates_refused: 0,
        }
    }

    pub fn error(&mut self, name: &str, messages: u64) {
        *self.errors.entry(name.to_string()).or_default() += messages.max(1);
    }

    pub fn merge(&mut self, other: Tally) {
        // Both come from `report::new_histogram`, so the bounds match.
        self.hist.add(&other.hist).expect("same histogram bounds");
        self.round_trip
            .add(&other.round_trip)
            .expect("same histogram bounds");
        self.requests.extend(other.requests);
        self.sent += other.sent;
        self.acked += other.acked;
        self.measured_messages += other.measured_messages;
        self.measured_wire_bytes += other.measured_wire_bytes;
        self.last_ns = self.last_ns.max(other.last_ns);
        self.clamped += other.clamped;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.checksum ^= other.checksum;
        self.duplicates_refused += other.duplicates_refused;
    }
}

/// One acknowledged Produce request, in `clock::now_ns` units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestTimes {
    pub send_ns: u64,
    pub answer_ns: u64,
    /// The intended send time of its first message (open loop), else its send time.
    pub first_intended_ns: u64,
    pub messages: u64,
}

/// Writes `--request-log`: one line per request, in send order, times on CLOCK_MONOTONIC.
fn write_request_log(path: &std::path::Path, mut requests: Vec<RequestTimes>) -> Result<()> {
    use std::io::Write as _;
    requests.sort_by_key(|r| r.send_ns);
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    writeln!(
        out,
        "# send_ns answer_ns first_intended_ns messages (CLOCK_MONOTONIC)"
    )?;
    for r in requests {
        writeln!(
            out,
            "{} {} {} {}",
            clock::monotonic_ns(r.send_ns),
            clock::monotonic_ns(r.answer_ns),
            clock::monotonic_ns(r.first_intended_ns),
            r.messages
        )?;
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

/// The result of `run`: the summary and the merged histogram (for .hgrm files).
pub struct Outcome {
    pub summary: Summary,
    pub hist: Histogram<u64>,
}

/// A produce run from parsed arguments: topic setup, cores, summary.
pub fn run(
    bootstrap: &str,
    topic: &str,
    spec: &TopicSpec,
    cores_requested: usize,
    load: &LoadArgs,
    dry_run: bool,
) -> Result<Outcome> {
    clock::init();
    if load.message_size > 16 * 1024 * 1024 {
        bail!("--message-size is capped at 16 MiB");
    }
    let producers = load.producers.max(1);
    let cores = cores::cores_to_use(cores_requested, producers);
    let mut created = false;
    let leaders = if dry_run {
        Vec::new()
    } else {
        let bootstrap = bootstrap.to_string();
        let topic = topic.to_string();
        let spec = spec.clone();
        let (leaders, fresh) = cores::run_local(async move {
            let mut cluster = kafka::cluster(&bootstrap).await?;
            let fresh = cluster.leaders(&topic).await?.is_none();
            let leaders = client::admin::ensure_topic(&mut cluster, &topic, &spec).await?;
            Ok::<_, anyhow::Error>((leaders, fresh))
        })??;
        created = fresh;
        leaders
    };
    let plan = Plan::new(topic, load, dry_run, false);
    let broker_cpu = load
        .broker_pid
        .map(|pid| broker_cpu::Window::open(pid, plan.timeline.warmup_end_ns))
        .transpose()?;
    let assignments = assign(producers, cores, &leaders, load.messages, load.rate);
    let progress = Progress::new(cores);
    let printer = progress.start_printer(if dry_run { "dry-run" } else { "produce" });
    let tallies = {
        let plan = Arc::new(plan.clone());
        let assignments = Arc::new(assignments);
        let progress = progress.clone();
        cores::run_on_cores(cores, move |core| {
            let plan = plan.clone();
            let assignments = assignments.clone();
            let progress = progress.clone();
            async move { run_core(plan, assignments, progress, core).await }
        })?
    };
    progress.finish(printer);
    let cpu_used = broker_cpu.map(broker_cpu::Window::finish).transpose()?;
    let mut total = Tally::new();
    for t in tallies {
        total.merge(t);
    }
    if let Some(path) = &load.request_log {
        write_request_log(path, std::mem::take(&mut total.requests))?;
    }
    let log_end_offset_total = if created && !dry_run {
        let bootstrap = bootstrap.to_string();
        let topic = topic.to_string();
        let parts: Vec<i32> = leaders.iter().map(|l| l.partition).collect();
        let sent = total.sent as i64;
        cores::run_local(async move {
            let mut cluster = kafka::cluster(&bootstrap).await?;
            // acks=0 requests may still be in the broker's queue: wait until the count reaches
            // what was sent or stops moving for a second (at most 10 s).
            let (mut last, mut still_ms) = (-1i64, 0);
            for _ in 0..200 {
                let offsets = kafka::log_offsets(&mut cluster, &topic, &parts, LATEST).await?;
                let sum = offsets.iter().map(|(_, o)| o).sum::<i64>();
                if sum >= sent || still_ms >= 1_000 {
                    return Ok::<_, anyhow::Error>(sum);
                }
                still_ms = if sum == last { still_ms + 50 } else { 0 };
                last = sum;
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
            Ok(last)
        })?
        .ok()
    } else {
        None
    };
    let mut summary = summarize(
        &plan,
        load,
        producers,
        cores,
        spec.partitions.unwrap_or(1),
        &total,
        log_end_offset_total,
    );
    summary.set_broker_cpu(cpu_used);
    Ok(Outcome {
        summary,
        hist: total.hist,
    })
}

fn summarize(
    plan: &Plan,
    load: &LoadArgs,
    producers: usize,
    cores: usize,
    partitions: i32,
    t: &Tally,
    log_end_offset_total: Option<i64>,
) -> Summary {
    let window_ns = t.last_ns.saturating_sub(plan.timeline.warmup_end_ns).max(1);
    let measured_s = if t.measured_messages == 0 {
        0.0
    } else {
        window_ns as f64 / 1e9
    };
    let per_s = |n: f64| {
        if measured_s > 0.0 {
            n / measured_s
        } else {
            0.0
        }
    };
    Summary {
        mode: if plan.dry_run {
            "produce --dry-run"
        } else {
            "produce"
        }
        .to_string(),
        topic: plan.topic.clone(),
        acks: acks_name(plan.acks),
        message_bytes: plan.message_bytes,
        producers,
        consumers: 0,
        partitions,
        cores,
        batch_bytes: plan.batch_bytes,
        linger_ms: plan.linger.as_secs_f64() * 1e3,
        max_in_flight: plan.max_in_flight as usize,
        compression: format!("{:?}", plan.compression).to_lowercase(),
        rate_target: load.rate,
        warmup_s: load.warmup.as_secs_f64(),
        measured_s,
        sent: t.sent,
        acked: t.acked,
        measured_messages: t.measured_messages,
        msgs_per_s: per_s(t.measured_messages as f64),
        mb_per_s: per_s((t.measured_messages * plan.message_bytes as u64) as f64) / 1e6,
        wire_mb_per_s: per_s(t.measured_wire_bytes as f64) / 1e6,
        latency: Latency::of(&t.hist),
        round_trip: Latency::of(&t.round_trip),
        clamped: t.clamped,
        errors: t.errors.clone(),
        log_end_offset_total,
        checksum: plan.dry_run.then_some(t.checksum),
        broker_cpu_s: None,
        broker_cpu_s_per_million: None,
        machine_cpu_s_per_million: None,
        idempotent: plan.idempotent,
        duplicates_refused: t.duplicates_refused,
    }
}

async fn run_core(
    plan: Arc<Plan>,
    assignments: Arc<Vec<Assignment>>,
    progress: Arc<Progress>,
    core: usize,
) -> Tally {
    let mine: Vec<Assignment> = assignments
        .iter()
        .filter(|a| a.core == core)
        .cloned()
        .collect();
    let mut tasks = Vec::new();
    for a in mine {
        let plan = plan.clone();
        let progress = progress.clone();
        tasks.push(glommio::spawn_local(async move {
            let counters = &progress.cores[core];
            if plan.dry_run {
                dry_run_producer(&plan, &a, counters).await
            } else {
                producer(&plan, &a, counters).await
            }
        }));
    }
    let mut total = Tally::new();
    for t in tasks {
        total.merge(t.await);
    }
    total
}

/// Prints the outcome (text or JSON) and returns whether the run was clean.
pub fn print(summary: &Summary, json: bool) -> Result<bool> {
    if json {
        println!("{}", report::to_json(summary)?);
    } else {
        print!("{}", summary.text());
    }
    Ok(summary.ok())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn leaders(n: i32, brokers: u16) -> Vec<PartitionLeader> {
        (0..n)
            .map(|p| PartitionLeader {
                partition: p,
                leader: SocketAddr::from(([127, 0, 0, 1], 9000 + (p as u16 % brokers))),
            })
            .collect()
    }

    #[test]
    fn assignment_covers_every_partition_with_its_leader() {
        for (producers, parts, brokers) in [
            (1, 1, 1),
            (1, 8, 1),
            (4, 8, 1),
            (3, 8, 2),
            (8, 2, 1),
            (5, 6, 3),
        ] {
            let ls = leaders(parts, brokers);
            let out = assign(producers, 2, &ls, Some(1_001), Some(1_000.0));
            assert_eq!(out.len(), producers);
            let total: u64 = out.iter().map(|a| a.messages.expect("bounded")).sum();
            assert_eq!(total, 1_001);
            let mut seen = std::collections::BTreeSet::new();
            for a in &out {
                assert!(!a.partitions.is_empty());
                assert!(a.core < 2);
                for p in &a.partitions {
                    let l = ls.iter().find(|l| l.partition == *p).expect("exists");
                    assert_eq!(
                        Some(l.leader),
                        a.leader,
                        "producer writes to the partition's leader"
                    );
                    seen.insert(*p);
                }
                assert!((a.rate.expect("rate") - 1_000.0 / producers as f64).abs() < 1e-9);
            }
            if producers <= parts as usize {
                assert_eq!(
                    seen.len(),
                    parts as usize,
                    "{producers} producers, {parts} partitions"
                );
            }
        }
    }

    pub fn spec(partitions: i32) -> TopicSpec {
        TopicSpec {
            partitions: Some(partitions),
            replication_factor: Some(1),
            configs: Vec::new(),
        }
    }

    pub fn load(messages: u64) -> LoadArgs {
        LoadArgs {
            message_size: 100,
            payload: Payload::Random,
            messages: Some(messages),
            duration: None,
            warmup: Duration::ZERO,
            acks: 1,
            batch_size: 16_384,
            linger: Duration::from_millis(5),
            max_in_flight: 5,
            compression: crate::cli::CompressionArg::None,
            rate: None,
            producers: 2,
            request_timeout_ms: 30_000,
            seed: 1,
            broker_pid: None,
            request_log: None,
            idempotent: false,
            resend_every: None,
            keys: None,
        }
    }

    #[test]
    fn produce_against_a_broker_counts_every_acked_message() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let addr = broker.addr.to_string();
        for (i, (acks, rate, compression)) in [
            (1, None, crate::cli::CompressionArg::None),
            (-1, None, crate::cli::CompressionArg::Lz4),
            (0, None, crate::cli::CompressionArg::None),
            (1, Some(20_000.0), crate::cli::CompressionArg::None),
            (0, Some(20_000.0), crate::cli::CompressionArg::None),
        ]
        .into_iter()
        .enumerate()
        {
            let mut l = load(5_000);
            l.acks = acks;
            l.rate = rate;
            l.compression = compression;
            // Open loop: 5 000 messages take 250 ms, so a 20 ms warm-up leaves most measured.
            l.warmup = Duration::from_millis(if rate.is_some() { 20 } else { 0 });
            let topic = format!("t{i}");
            let out = run(&addr, &topic, &spec(3), 0, &l, false).expect("runs");
            let s = &out.summary;
            assert!(s.ok(), "{:?}", s.errors);
            assert_eq!(s.sent, 5_000, "case {i}");
            assert_eq!(s.log_end_offset_total, Some(5_000), "case {i}");
            if acks != 0 {
                assert_eq!(s.acked, 5_000, "case {i}");
                assert!(s.latency.count > 0 && s.latency.count <= 5_000, "case {i}");
                assert_eq!(s.latency.count, s.measured_messages, "case {i}");
                // One round trip per request, each no longer than its messages' latency.
                let r = &s.round_trip;
                assert!(r.count > 0 && r.count < s.latency.count, "case {i}: {r:?}");
                assert!(r.p50_ms <= s.latency.max_ms, "case {i}: {r:?}");
            } else {
                assert_eq!(s.round_trip.count, 0, "case {i}");
            }
            assert!(s.measured_messages > 0 && s.msgs_per_s > 0.0, "case {i}");
        }
    }

    #[test]
    fn the_request_log_holds_every_measured_request_on_the_monotonic_clock() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("requests.txt");
        let mut l = load(5_000);
        l.rate = Some(20_000.0);
        l.warmup = Duration::from_millis(20);
        l.request_log = Some(path.clone());
        let out = run(&broker.addr.to_string(), "log", &spec(3), 0, &l, false).expect("runs");
        let text = std::fs::read_to_string(&path).expect("request log written");
        let rows: Vec<Vec<u64>> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| {
                line.split(' ')
                    .map(|f| f.parse().expect("number"))
                    .collect()
            })
            .collect();
        let s = &out.summary;
        assert_eq!(rows.len() as u64, s.round_trip.count);
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
        let mut last_send = 0;
        for row in &rows {
            let [send, answer, first_intended, messages] = row[..] else {
                panic!("four fields: {row:?}");
            };
            assert!(
                first_intended <= send && send <= answer && answer <= now_ns,
                "{row:?}"
            );
            // Within the run: 5 000 messages at 20 000 a second take 250 ms.
            assert!(now_ns - send < 30_000_000_000, "{row:?}");
            assert!(send >= last_send && messages > 0, "{row:?}");
            last_send = send;
        }
        let logged: u64 = rows.iter().map(|row| row[3]).sum();
        assert!(
            logged >= s.measured_messages && logged <= s.acked,
            "{logged}"
        );
    }

    #[test]
    fn unreachable_broker_is_an_error() {
        let _executors = crate::cores::executor_test_lock();
        let l = load(10);
        assert!(run("127.0.0.1:1", "t", &spec(1), 0, &l, false).is_err());
    }

    #[test]
    fn dry_run_counts_every_message() {
        let _executors = crate::cores::executor_test_lock();
        let load = LoadArgs {
            message_size: 100,
            payload: Payload::Random,
            messages: Some(100_000),
            duration: None,
            warmup: Duration::ZERO,
            acks: 1,
            batch_size: 16_384,
            linger: Duration::from_millis(5),
            max_in_flight: 5,
            compression: crate::cli::CompressionArg::None,
            rate: None,
            producers: 2,
            request_timeout_ms: 30_000,
            seed: 1,
            broker_pid: None,
            request_log: None,
            idempotent: false,
            resend_every: None,
            keys: None,
        };
        let out = run("127.0.0.1:1", "t", &spec(1), 0, &load, true).expect("dry run");
        assert_eq!(out.summary.sent, 100_000);
        assert_eq!(out.summary.measured_messages, 100_000);
        assert!(out.summary.msgs_per_s > 0.0 && out.summary.ok());
        assert!(out.summary.checksum.is_some());
    }
}
