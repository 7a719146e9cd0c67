//! `consume`: fetch throughput from earliest or latest, one connection per core, each owning
//! a share of the partitions and fetching them from their leader with explicit offsets.
//!
//! Invariants:
//! - Records are counted from v2 batch headers (record count, control flag), never decoded one
//!   by one; `--verify-crc` also checks every batch's CRC-32C.
//! - A partition's position only moves to the offset after the last whole batch received, so
//!   a batch is never counted twice.
//! - From earliest without --messages, the run ends when every partition reaches the log end
//!   offset it had at the start (or at --duration); from latest it runs for --duration.
//! - Consumer groups are not implemented: `--group` is refused, not ignored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::cli::{ConsumeArgs, StartFrom};
use crate::client::{self, error_name, Connection, PartitionLeader};
use crate::cores::{self, Counters, Progress};
use crate::pacing::clock;
use crate::produce::{assign, Tally};
use crate::report::{self, Latency, Summary};

struct Plan {
    topic: String,
    /// (partition, start offset, stop offset or None)
    positions: BTreeMap<i32, (i64, Option<i64>)>,
    messages: Option<u64>,
    end_ns: u64,
    partition_bytes_max: i32,
    verify_crc: bool,
    consumed: AtomicU64,
}

pub fn run(args: &ConsumeArgs) -> Result<Summary> {
    clock::init();
    if let Some(g) = &args.group {
        bail!("consumer groups are not supported yet (--group {g}); fetches use explicit offsets");
    }
    let bootstrap = args.common.bootstrap_server.clone();
    let topic = args.common.topic.clone();
    let from = args.from;
    let (leaders, starts, ends) = cores::run_local(async move {
        let addr = client::resolve(&bootstrap).await?;
        let mut conn = Connection::connect(addr).await?;
        let Some(leaders) = conn.leaders(&topic).await? else {
            bail!("topic {topic} does not exist");
        };
        // Single-leader clusters answer ListOffsets here; otherwise ask each partition's leader.
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        for l in &leaders {
            let mut c = if l.leader == addr {
                None
            } else {
                Some(Connection::connect(l.leader).await?)
            };
            let c = c.as_mut().unwrap_or(&mut conn);
            starts.extend(c.list_offsets(&topic, &[l.partition], -2).await?);
            ends.extend(c.list_offsets(&topic, &[l.partition], -1).await?);
        }
        Ok::<_, anyhow::Error>((leaders, starts, ends))
    })??;
    let ends: BTreeMap<i32, i64> = ends.into_iter().collect();
    let mut positions = BTreeMap::new();
    for (p, start) in starts {
        let end = ends.get(&p).copied().unwrap_or(start);
        let (from_offset, stop) = match from {
            StartFrom::Earliest if args.messages.is_none() => (start, Some(end)),
            StartFrom::Earliest => (start, None),
            StartFrom::Latest => (end, None),
        };
        positions.insert(p, (from_offset, stop));
    }
    let consumers = cores::cores_to_use(args.common.cores, leaders.len());
    let assignments = assign(consumers, consumers, &leaders, None, None);
    let started_ns = clock::now_ns();
    let plan = Arc::new(Plan {
        topic: args.common.topic.clone(),
        positions,
        messages: args.messages,
        end_ns: started_ns + args.duration.as_nanos() as u64,
        partition_bytes_max: args.fetch_max_bytes,
        verify_crc: args.verify_crc,
        consumed: AtomicU64::new(0),
    });
    let progress = Progress::new(consumers);
    let printer = progress.start_printer("consume");
    let tallies = {
        let plan = plan.clone();
        let assignments = Arc::new(assignments);
        let leaders = Arc::new(leaders);
        let progress = progress.clone();
        cores::run_on_cores(consumers, move |core| {
            let (plan, assignments, leaders, progress) = (
                plan.clone(),
                assignments.clone(),
                leaders.clone(),
                progress.clone(),
            );
            async move {
                let a = &assignments[core];
                consumer(&plan, &leaders, &a.partitions, &progress.cores[core]).await
            }
        })?
    };
    progress.finish(printer);
    let mut t = Tally::new();
    for x in tallies {
        t.merge(x);
    }
    let window_s = t.last_ns.saturating_sub(started_ns) as f64 / 1e9;
    let per_s = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
    Ok(Summary {
        mode: format!(
            "consume --from {}",
            if from == StartFrom::Earliest {
                "earliest"
            } else {
                "latest"
            }
        ),
        topic: args.common.topic.clone(),
        acks: "-".to_string(),
        partitions: plan.positions.len() as i32,
        cores: consumers,
        measured_s: window_s,
        sent: 0,
        acked: 0,
        measured_messages: t.measured_messages,
        msgs_per_s: per_s(t.measured_messages as f64),
        mb_per_s: per_s(t.measured_wire_bytes as f64) / 1e6,
        wire_mb_per_s: per_s(t.measured_wire_bytes as f64) / 1e6,
        latency: Latency::of(&t.hist),
        clamped: t.clamped,
        errors: t.errors,
        ..Summary::default()
    })
}

/// Fetches `partitions` until the plan says stop; the histogram holds Fetch round trips.
async fn consumer(
    plan: &Plan,
    leaders: &[PartitionLeader],
    partitions: &[i32],
    counters: &Counters,
) -> Tally {
    let mut t = Tally::new();
    let Some(leader) = leaders
        .iter()
        .find(|l| partitions.contains(&l.partition))
        .map(|l| l.leader)
    else {
        return t;
    };
    let mut conn = match Connection::connect(leader).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("consumer: {e:#}");
            t.error("NETWORK_EXCEPTION", 1);
            return t;
        }
    };
    let mut positions: Vec<(i32, i64)> = partitions
        .iter()
        .map(|p| (*p, plan.positions.get(p).map_or(0, |x| x.0)))
        .collect();
    let stops: BTreeMap<i32, Option<i64>> = partitions
        .iter()
        .map(|p| (*p, plan.positions.get(p).and_then(|x| x.1)))
        .collect();
    loop {
        let now = clock::now_ns();
        let done_by_offsets = !stops.is_empty()
            && positions
                .iter()
                .all(|(p, o)| stops.get(p).copied().flatten().is_some_and(|s| *o >= s));
        let done_by_count = plan
            .messages
            .is_some_and(|m| plan.consumed.load(Ordering::Relaxed) >= m);
        if now >= plan.end_ns || done_by_offsets || done_by_count {
            break;
        }
        let wanted: Vec<(i32, i64)> = positions
            .iter()
            .copied()
            .filter(|(p, o)| stops.get(p).copied().flatten().is_none_or(|s| *o < s))
            .collect();
        let sent_ns = clock::now_ns();
        let response = match conn
            .fetch(&plan.topic, &wanted, 500, plan.partition_bytes_max)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("consumer: fetch failed: {e:#}");
                t.error("NETWORK_EXCEPTION", 1);
                break;
            }
        };
        let done_ns = clock::now_ns();
        if response.error_code != 0 {
            t.error(&error_name(response.error_code), 1);
            break;
        }
        let mut got = 0;
        for topic in &response.responses {
            for p in &topic.partitions {
                if p.error_code != 0 {
                    t.error(&error_name(p.error_code), 1);
                    continue;
                }
                let Some(records) = &p.records else { continue };
                match client::count_batches(records, plan.verify_crc) {
                    Ok((n, bytes, next)) => {
                        got += n;
                        t.measured_wire_bytes += bytes;
                        if let (Some(next), Some(pos)) = (
                            next,
                            positions.iter_mut().find(|(q, _)| *q == p.partition_index),
                        ) {
                            pos.1 = pos.1.max(next);
                        }
                    }
                    Err(e) => {
                        eprintln!("consumer: partition {}: {e:#}", p.partition_index);
                        t.error("CORRUPT_MESSAGE", 1);
                    }
                }
            }
        }
        if got > 0 {
            report::record(&mut t.hist, done_ns - sent_ns, 1);
            t.measured_messages += got;
            t.last_ns = done_ns;
            plan.consumed.fetch_add(got, Ordering::Relaxed);
            Counters::add(&counters.acked, got);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn consume_from_earliest_reads_everything_produced() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let addr = broker.addr.to_string();
        let mut load = crate::produce::tests::load(20_000);
        load.batch_size = 4_096;
        crate::produce::run(&addr, "c", 3, 1, 0, &load, false).expect("produces");
        let cli = crate::cli::Cli::try_parse_from([
            "ringlog-bench",
            "consume",
            "--bootstrap-server",
            &addr,
            "--topic",
            "c",
            "--verify-crc",
            "--fetch-max-bytes",
            "65536",
        ])
        .expect("parses");
        let crate::cli::Command::Consume(args) = cli.command else {
            panic!("consume")
        };
        let s = run(&args).expect("consumes");
        assert!(s.ok(), "{:?}", s.errors);
        assert_eq!(s.measured_messages, 20_000);
        assert!(s.latency.count > 0);
    }

    #[test]
    fn groups_are_refused_not_ignored() {
        let _executors = crate::cores::executor_test_lock();
        let cli = crate::cli::Cli::try_parse_from(["ringlog-bench", "consume", "--group", "g"])
            .expect("parses");
        let crate::cli::Command::Consume(args) = cli.command else {
            panic!("consume")
        };
        let e = run(&args).expect_err("refused");
        assert!(format!("{e}").contains("not supported"));
    }
}
