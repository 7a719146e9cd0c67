//! `e2e`: end-to-end latency. Producers send at a fixed rate with each message's intended send
//! time in its first 8 value bytes; a consumer fetching from the latest offsets records
//! (time the Fetch returned − intended send time) for every message.
//!
//! Invariants:
//! - Producer and consumer run in this process and read the same monotonic clock, so the
//!   stamped times need no clock sync. Times count from the intended send time (open loop), so
//!   a stalled producer shows up as latency.
//! - The consumer starts at the log end offsets taken before the producers start, so it sees
//!   exactly this run's messages; it stops once it has every message the producers sent
//!   (or 10 s after they stop).
//! - With two or more cores, producers run on core 0 and the consumer on core 1.

use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::Bytes;
use kafka_protocol::records::{Compression as RecordCompression, RecordBatchDecoder};

use crate::cli::{acks_name, E2eArgs};
use crate::cores::{self, Progress};
use crate::kafka::{self, error_name, PartitionLeader};
use crate::pacing::clock;
use crate::produce::{self, assign, Plan, Tally};
use crate::report::{self, Latency, Summary};
use client::fetch::count_batches;
use client::offsets::LATEST;

const DEFAULT_RATE: f64 = 10_000.0;

struct Shared {
    producers_left: AtomicUsize,
    sent: AtomicU64,
}

pub fn run(args: &E2eArgs) -> Result<Summary> {
    clock::init();
    let load = &args.load;
    if load.message_size < 8 {
        bail!("e2e needs --message-size of at least 8 bytes (the send time rides in the value)");
    }
    if load.broker_pid.is_some() {
        bail!("--broker-pid is for produce and matrix runs");
    }
    if load.request_log.is_some() {
        bail!("--request-log is for produce runs");
    }
    let rate = load.rate.unwrap_or(DEFAULT_RATE);
    let bootstrap = args.common.bootstrap_server.clone();
    let topic = args.common.topic.clone();
    let spec = args.common.topic_spec();
    let (leaders, topic_id, starts) = cores::run_local(async move {
        let mut cluster = kafka::cluster(&bootstrap).await?;
        let leaders = client::admin::ensure_topic(&mut cluster, &topic, &spec).await?;
        let topic_id = kafka::topic_id(&mut cluster, &topic).await?;
        let parts: Vec<i32> = leaders.iter().map(|l| l.partition).collect();
        let starts = kafka::log_offsets(&mut cluster, &topic, &parts, LATEST).await?;
        Ok::<_, anyhow::Error>((leaders, topic_id, starts))
    })??;
    let producers = load.producers.max(1);
    let cores = cores::cores_to_use(args.common.cores, 2);
    let plan = Arc::new(Plan::new(&args.common.topic, load, false, true));
    // All producers on core 0; the consumer on the last core.
    let assignments = Arc::new(assign(producers, 1, &leaders, load.messages, Some(rate)));
    let shared = Arc::new(Shared {
        producers_left: AtomicUsize::new(producers),
        sent: AtomicU64::new(0),
    });
    let progress = Progress::new(cores);
    let printer = progress.start_printer("e2e");
    let results = {
        let (plan, assignments, shared, progress) = (
            plan.clone(),
            assignments.clone(),
            shared.clone(),
            progress.clone(),
        );
        let leaders = Arc::new(leaders);
        cores::run_on_cores(cores, move |core| {
            let (plan, assignments, shared, progress, leaders, starts) = (
                plan.clone(),
                assignments.clone(),
                shared.clone(),
                progress.clone(),
                leaders.clone(),
                starts.clone(),
            );
            async move {
                let mut tasks = Vec::new();
                if core == 0 {
                    for a in assignments.iter() {
                        let a = a.clone();
                        let (plan, shared, progress) =
                            (plan.clone(), shared.clone(), progress.clone());
                        tasks.push(glommio::spawn_local(async move {
                            let t = produce::producer(&plan, &a, &progress.cores[0]).await;
                            shared.sent.fetch_add(t.sent, Ordering::Relaxed);
                            shared.producers_left.fetch_sub(1, Ordering::Release);
                            (t, false)
                        }));
                    }
                }
                if core == cores - 1 {
                    let (plan, shared, progress) = (plan.clone(), shared.clone(), progress.clone());
                    tasks.push(glommio::spawn_local(async move {
                        let t = consumer(
                            &plan,
                            topic_id,
                            &leaders,
                            &starts,
                            &shared,
                            &progress.cores[core],
                        )
                        .await;
                        (t, true)
                    }));
                }
                let mut out = Vec::new();
                for t in tasks {
                    out.push(t.await);
                }
                out
            }
        })?
    };
    progress.finish(printer);
    let (mut produced, mut consumed) = (Tally::new(), Tally::new());
    for (t, is_consumer) in results.into_iter().flatten() {
        if is_consumer {
            consumed.merge(t);
        } else {
            produced.merge(t);
        }
    }
    let window_s = consumed.last_ns.saturating_sub(plan.timeline.warmup_end_ns) as f64 / 1e9;
    let per_s = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
    let mut errors = produced.errors.clone();
    for (k, v) in &consumed.errors {
        *errors.entry(k.clone()).or_default() += v;
    }
    let missing = produced.acked.saturating_sub(consumed.sent);
    if load.acks != 0 && missing > 0 {
        *errors.entry("NOT_CONSUMED".to_string()).or_default() += missing;
    }
    Ok(Summary {
        mode: "e2e".to_string(),
        topic: plan.topic.clone(),
        acks: acks_name(load.acks),
        message_bytes: load.message_size,
        producers,
        consumers: 1,
        partitions: plan_partitions(&assignments),
        cores,
        batch_bytes: plan.batch_bytes,
        linger_ms: plan.linger.as_secs_f64() * 1e3,
        max_in_flight: plan.max_in_flight as usize,
        compression: format!("{:?}", plan.compression).to_lowercase(),
        rate_target: Some(rate),
        warmup_s: load.warmup.as_secs_f64(),
        measured_s: window_s,
        sent: produced.sent,
        acked: produced.acked,
        measured_messages: consumed.measured_messages,
        msgs_per_s: per_s(consumed.measured_messages as f64),
        mb_per_s: per_s((consumed.measured_messages * load.message_size as u64) as f64) / 1e6,
        wire_mb_per_s: per_s(consumed.measured_wire_bytes as f64) / 1e6,
        latency: Latency::of(&consumed.hist),
        round_trip: Latency::default(),
        clamped: consumed.clamped,
        errors,
        log_end_offset_total: None,
        checksum: None,
        broker_cpu_s: None,
        broker_cpu_s_per_million: None,
        machine_cpu_s_per_million: None,
        idempotent: plan.idempotent,
        duplicates_refused: produced.duplicates_refused,
    })
}

fn plan_partitions(assignments: &[produce::Assignment]) -> i32 {
    let mut all: Vec<i32> = assignments
        .iter()
        .flat_map(|a| a.partitions.iter().copied())
        .collect();
    all.sort();
    all.dedup();
    all.len() as i32
}

fn decompress(buf: &mut Bytes, compression: RecordCompression) -> anyhow::Result<Bytes> {
    match compression {
        RecordCompression::None => Ok(buf.clone()),
        RecordCompression::Lz4 => {
            let mut out = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&buf[..]).read_to_end(&mut out)?;
            Ok(Bytes::from(out))
        }
        other => bail!("{other:?} batches are not decoded by ringlog-bench"),
    }
}

/// Fetches from `starts` and records now − stamped time per message. `sent` in the returned
/// tally counts every message consumed (warm-up included).
async fn consumer(
    plan: &Plan,
    topic_id: uuid::Uuid,
    leaders: &[PartitionLeader],
    starts: &[(i32, i64)],
    shared: &Shared,
    counters: &cores::Counters,
) -> Tally {
    let mut t = Tally::new();
    let Some(leader) = leaders.first().map(|l| l.leader) else {
        return t;
    };
    if leaders.iter().any(|l| l.leader != leader) {
        t.error("E2E_NEEDS_ONE_LEADER", 1);
        return t;
    }
    let mut conn = match kafka::connect(leader).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("e2e consumer: {e:#}");
            t.error("NETWORK_EXCEPTION", 1);
            return t;
        }
    };
    let mut positions = starts.to_vec();
    let tl = plan.timeline;
    let mut producers_done_ns = None;
    loop {
        let now = clock::now_ns();
        if shared.producers_left.load(Ordering::Acquire) == 0 {
            let done_ns = *producers_done_ns.get_or_insert(now);
            if t.sent >= shared.sent.load(Ordering::Relaxed) || now > done_ns + 10_000_000_000 {
                break;
            }
        }
        let response =
            match kafka::fetch(&mut conn, &plan.topic, topic_id, &positions, 100, 8 << 20).await {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("e2e consumer: fetch failed: {e:#}");
                    t.error("NETWORK_EXCEPTION", 1);
                    break;
                }
            };
        let fetched_ns = clock::now_ns();
        let before = t.sent;
        for topic in &response.responses {
            for p in &topic.partitions {
                if p.error_code != 0 {
                    t.error(&error_name(p.error_code), 1);
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let Some(records) = &p.records else { continue };
                // Ignore a trailing partial batch: decode whole batches only.
                let whole = match count_batches(records, false) {
                    Ok((_, bytes, _)) => bytes as usize,
                    Err(_) => 0,
                };
                let mut buf = records.slice(..whole.min(records.len()));
                while !buf.is_empty() {
                    let set = match RecordBatchDecoder::decode_with_custom_compression(
                        &mut buf,
                        Some(decompress as fn(&mut Bytes, RecordCompression) -> _),
                    ) {
                        Ok(set) => set,
                        Err(e) => {
                            eprintln!("e2e consumer: {e:#}");
                            t.error("CORRUPT_MESSAGE", 1);
                            break;
                        }
                    };
                    for r in &set.records {
                        if let Some(pos) =
                            positions.iter_mut().find(|(q, _)| *q == p.partition_index)
                        {
                            pos.1 = pos.1.max(r.offset + 1);
                        }
                        if r.control {
                            continue;
                        }
                        t.sent += 1;
                        let Some(v) = r.value.as_ref().filter(|v| v.len() >= 8) else {
                            continue;
                        };
                        // The filter above guarantees 8 bytes.
                        let stamp = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
                        if stamp >= tl.warmup_end_ns {
                            t.clamped += u64::from(report::record(
                                &mut t.hist,
                                fetched_ns.saturating_sub(stamp),
                                1,
                            ));
                            t.measured_messages += 1;
                            t.measured_wire_bytes += (v.len() + 8) as u64;
                            t.last_ns = fetched_ns;
                        }
                    }
                }
            }
        }
        cores::Counters::add(&counters.acked, t.sent - before);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn e2e_sees_every_message_with_a_latency() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let addr = broker.addr.to_string();
        let cli = crate::cli::Cli::try_parse_from([
            "ringlog-bench",
            "e2e",
            "--bootstrap-server",
            &addr,
            "--topic",
            "e",
            "--rate",
            "20000",
            "--messages",
            "4000",
            "--warmup",
            "20ms",
            "--partitions",
            "2",
        ])
        .expect("parses");
        let crate::cli::Command::E2e(args) = cli.command else {
            panic!("e2e")
        };
        let s = run(&args).expect("runs");
        assert!(s.ok(), "{:?}", s.errors);
        assert_eq!((s.sent, s.acked), (4_000, 4_000));
        // 20 ms of warm-up at 20 000/s is ~400 messages left out of the figures.
        assert!(
            s.latency.count > 3_000 && s.latency.count < 4_000,
            "{}",
            s.latency.count
        );
        assert!(s.latency.p50_ms > 0.0 && s.latency.max_ms < 5_000.0);
    }
}
