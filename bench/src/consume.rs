//! `consume`: fetch throughput from earliest or latest, with explicit offsets or as members
//! of a consumer group. Consumers are spread over cores; each fetches its partitions from
//! their leaders.
//!
//! Invariants:
//! - Records are counted from v2 batch headers (record count, control flag), never decoded one
//!   by one; `--verify-crc` also checks every batch's CRC-32C.
//! - A partition's position only moves to the offset after the last whole batch received, so
//!   a batch is never counted twice by one consumer. In a group a rebalance may hand a
//!   partition over before its last position was committed; the next owner then reads those
//!   records again (Kafka's at-least-once), and they are counted again.
//! - From earliest without --messages, the run ends when every partition has been consumed
//!   up to the log end offset it had at the start (or at --duration); from latest it runs for
//!   --duration. Progress is shared across consumers, so the end holds across rebalances.
//! - The measured window starts at the first Fetch, after any group join.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};

use client::fetch::count_batches;
use client::member::{must_rejoin, Heartbeat, Member, MemberConfig};
use client::offsets::{EARLIEST, LATEST};
use client::{Cluster, Connection};

use crate::cli::{ConsumeArgs, StartFrom};
use crate::cores::{self, Counters, Progress};
use crate::kafka::{self, error_name, PartitionLeader};
use crate::pacing::clock;
use crate::produce::Tally;
use crate::report::{self, Latency, Summary};

/// Kafka's `auto.commit.interval.ms` default.
const COMMIT_INTERVAL: Duration = Duration::from_secs(5);
/// How long Fetch may wait at the broker for data (Kafka's `fetch.max.wait.ms` default).
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Kafka's consumer defaults: `session.timeout.ms` 45 s, `max.poll.interval.ms` (the
/// rebalance timeout) 5 min.
const SESSION_TIMEOUT_MS: i32 = 45_000;
const REBALANCE_TIMEOUT_MS: i32 = 300_000;

struct Plan {
    topic: String,
    topic_id: uuid::Uuid,
    bootstrap: String,
    group: Option<String>,
    leaders: Vec<PartitionLeader>,
    /// partition → (start offset, stop offset or None)
    positions: BTreeMap<i32, (i64, Option<i64>)>,
    /// partition → furthest position any consumer reached.
    reached: BTreeMap<i32, AtomicI64>,
    messages: Option<u64>,
    duration_ns: u64,
    /// When the first Fetch was sent (0 until then): the measured window's start.
    first_fetch_ns: AtomicU64,
    partition_bytes_max: i32,
    verify_crc: bool,
    consumed: AtomicU64,
}

impl Plan {
    fn leader_of(&self, partition: i32) -> Option<SocketAddr> {
        self.leaders
            .iter()
            .find(|l| l.partition == partition)
            .map(|l| l.leader)
    }

    fn stop_of(&self, partition: i32) -> Option<i64> {
        self.positions.get(&partition).and_then(|x| x.1)
    }

    fn reach(&self, partition: i32, position: i64) {
        if let Some(r) = self.reached.get(&partition) {
            r.fetch_max(position, Ordering::Relaxed);
        }
    }

    fn started(&self, now_ns: u64) {
        let _ = self.first_fetch_ns.compare_exchange(
            0,
            now_ns.max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Whether the run is over, for every consumer.
    fn done(&self) -> bool {
        let first = self.first_fetch_ns.load(Ordering::Relaxed);
        let by_time = first != 0 && clock::now_ns() >= first + self.duration_ns;
        let by_count = self
            .messages
            .is_some_and(|m| self.consumed.load(Ordering::Relaxed) >= m);
        let by_offsets = self.positions.iter().all(|(p, (_, stop))| {
            stop.is_some_and(|s| self.reached[p].load(Ordering::Relaxed) >= s)
        });
        by_time || by_count || by_offsets
    }
}

pub fn run(args: &ConsumeArgs) -> Result<Summary> {
    clock::init();
    let bootstrap = args.common.bootstrap_server.clone();
    let topic = args.common.topic.clone();
    let from = args.from;
    let (leaders, topic_id, starts, ends) = cores::run_local(async move {
        let mut cluster = kafka::cluster(&bootstrap).await?;
        let Some(leaders) = cluster.leaders(&topic).await? else {
            bail!("topic {topic} does not exist");
        };
        let topic_id = kafka::topic_id(&mut cluster, &topic).await?;
        let parts: Vec<i32> = leaders.iter().map(|l| l.partition).collect();
        let starts = kafka::log_offsets(&mut cluster, &topic, &parts, EARLIEST).await?;
        let ends = kafka::log_offsets(&mut cluster, &topic, &parts, LATEST).await?;
        Ok::<_, anyhow::Error>((leaders, topic_id, starts, ends))
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
    // Without a group each consumer owns a fixed share, so more consumers than partitions
    // would idle; a group may have idle members, as Kafka's do.
    let consumers = match (args.consumers, &args.group) {
        (Some(n), Some(_)) => n as usize,
        (Some(n), None) => (n as usize).min(leaders.len()),
        (None, _) => cores::cores_to_use(args.common.cores, leaders.len()),
    };
    let cores = cores::cores_to_use(args.common.cores, consumers);
    let plan = Arc::new(Plan {
        topic: args.common.topic.clone(),
        topic_id,
        bootstrap: args.common.bootstrap_server.clone(),
        group: args.group.clone(),
        reached: positions
            .iter()
            .map(|(p, (start, _))| (*p, AtomicI64::new(*start)))
            .collect(),
        positions,
        leaders,
        messages: args.messages,
        duration_ns: args.duration.as_nanos() as u64,
        first_fetch_ns: AtomicU64::new(0),
        partition_bytes_max: args.fetch_max_bytes,
        verify_crc: args.verify_crc,
        consumed: AtomicU64::new(0),
    });
    // Consumer i owns partitions i, i + consumers, ... unless a group assigns them.
    let partitions: Vec<i32> = plan.positions.keys().copied().collect();
    let shares: Arc<Vec<Vec<i32>>> = Arc::new(
        (0..consumers)
            .map(|i| {
                partitions
                    .iter()
                    .copied()
                    .skip(i)
                    .step_by(consumers)
                    .collect()
            })
            .collect(),
    );
    let progress = Progress::new(cores);
    let printer = progress.start_printer("consume");
    let tallies = {
        let plan = plan.clone();
        let progress = progress.clone();
        cores::run_on_cores(cores, move |core| {
            let (plan, shares, progress) = (plan.clone(), shares.clone(), progress.clone());
            async move {
                let mut tasks = Vec::new();
                for id in (core..shares.len()).step_by(cores) {
                    let (plan, shares, progress) = (plan.clone(), shares.clone(), progress.clone());
                    tasks.push(glommio::spawn_local(async move {
                        consumer(&plan, id, &shares[id], &progress.cores[core]).await
                    }));
                }
                let mut total = Tally::new();
                for t in tasks {
                    total.merge(t.await);
                }
                total
            }
        })?
    };
    progress.finish(printer);
    let mut t = Tally::new();
    for x in tallies {
        t.merge(x);
    }
    let first_ns = plan.first_fetch_ns.load(Ordering::Relaxed);
    let window_s = t.last_ns.saturating_sub(first_ns) as f64 / 1e9;
    let per_s = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
    let mut mode = format!(
        "consume --from {}",
        if from == StartFrom::Earliest {
            "earliest"
        } else {
            "latest"
        }
    );
    if let Some(g) = &args.group {
        mode.push_str(&format!(" --group {g}"));
    }
    Ok(Summary {
        mode,
        topic: args.common.topic.clone(),
        acks: "-".to_string(),
        partitions: plan.positions.len() as i32,
        consumers,
        cores,
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

/// One consumer until the plan says stop; the histogram holds Fetch round trips.
async fn consumer(plan: &Plan, id: usize, share: &[i32], counters: &Counters) -> Tally {
    let mut t = Tally::new();
    let mut fetcher = Fetcher::default();
    let outcome = match &plan.group {
        None => {
            let mut positions = share
                .iter()
                .map(|p| (*p, plan.positions[p].0))
                .collect::<Vec<_>>();
            fetch_until(plan, &mut fetcher, &mut positions, None, &mut t, counters)
                .await
                .map(|_| ())
        }
        Some(g) => member(plan, g, id, &mut fetcher, &mut t, counters).await,
    };
    if let Err(e) = outcome {
        eprintln!("consumer {id}: {e:#}");
        let name = client::code_of(&e).map_or("NETWORK_EXCEPTION".to_string(), error_name);
        t.error(&name, 1);
    }
    t
}

/// A group member and the cluster it talks to.
struct GroupMember {
    member: Member,
    cluster: Cluster,
}

impl GroupMember {
    /// Commits `positions` (partition, next offset) of `topic` for this generation.
    async fn commit(&mut self, topic: &str, positions: &[(i32, i64)]) -> Result<()> {
        let positions = positions
            .iter()
            .map(|&(p, offset)| ((topic.to_string(), p), offset))
            .collect();
        self.member.commit(&mut self.cluster, &positions).await
    }
}

/// Consumes as a member of `group` until the run is over, then leaves it.
async fn member(
    plan: &Plan,
    group: &str,
    id: usize,
    fetcher: &mut Fetcher,
    t: &mut Tally,
    counters: &Counters,
) -> Result<()> {
    let mut cluster = kafka::cluster(&plan.bootstrap).await?;
    let mut config = MemberConfig::new(group, vec![plan.topic.clone()]);
    config.session_timeout_ms = SESSION_TIMEOUT_MS;
    config.rebalance_timeout_ms = REBALANCE_TIMEOUT_MS;
    let mut joining_ns = clock::now_ns();
    let member = Member::join(&mut cluster, config).await?;
    let mut joined = GroupMember { member, cluster };
    loop {
        let assigned = joined.member.partitions(&plan.topic);
        let committed = joined.member.committed(&mut joined.cluster).await?;
        eprintln!(
            "consumer {id}: joined group {group} in {:.0} ms, partitions {assigned:?}",
            (clock::now_ns() - joining_ns) as f64 / 1e6
        );
        let mut positions: Vec<(i32, i64)> = assigned
            .iter()
            .map(|p| {
                let start = committed
                    .get(&(plan.topic.clone(), *p))
                    .copied()
                    .unwrap_or_else(|| plan.positions.get(p).map_or(0, |x| x.0));
                plan.reach(*p, start);
                (*p, start)
            })
            .collect();
        let stop = fetch_until(
            plan,
            fetcher,
            &mut positions,
            Some(&mut joined),
            t,
            counters,
        )
        .await?;
        // Eager protocol: commit what was consumed before giving the partitions up.
        if let Err(e) = joined.commit(&plan.topic, &positions).await {
            if !must_rejoin(&e) {
                return Err(e);
            }
        }
        if stop == Stop::Done {
            return joined.member.leave(&mut joined.cluster).await;
        }
        joining_ns = clock::now_ns();
        joined.member.rejoin(&mut joined.cluster).await?;
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The run is over.
    Done,
    /// The group is rebalancing: commit and join again.
    Rebalance,
}

/// Fetches `positions` until the run is over or, in a group, a rebalance starts; moves each
/// position past the batches received.
async fn fetch_until(
    plan: &Plan,
    fetcher: &mut Fetcher,
    positions: &mut [(i32, i64)],
    mut member: Option<&mut GroupMember>,
    t: &mut Tally,
    counters: &Counters,
) -> Result<Stop> {
    let mut commit_at = clock::now_ns() + COMMIT_INTERVAL.as_nanos() as u64;
    loop {
        if plan.done() {
            return Ok(Stop::Done);
        }
        if let Some(joined) = member.as_deref_mut() {
            let now = clock::now_ns();
            if joined.member.heartbeat_due()
                && joined.member.heartbeat(&mut joined.cluster).await? == Heartbeat::Rebalance
            {
                return Ok(Stop::Rebalance);
            }
            if now >= commit_at {
                match joined.commit(&plan.topic, positions).await {
                    Ok(()) => {}
                    Err(e) if must_rejoin(&e) => return Ok(Stop::Rebalance),
                    Err(e) => return Err(e),
                }
                commit_at = now + COMMIT_INTERVAL.as_nanos() as u64;
            }
        }
        let mut wanted: BTreeMap<SocketAddr, Vec<(i32, i64)>> = BTreeMap::new();
        for &(p, o) in positions.iter() {
            if plan.stop_of(p).is_none_or(|s| o < s) {
                if let Some(leader) = plan.leader_of(p) {
                    wanted.entry(leader).or_default().push((p, o));
                }
            }
        }
        if wanted.is_empty() {
            // Nothing (left) to read here: wait for the others, or for a rebalance.
            glommio::timer::sleep(Duration::from_millis(20)).await;
            continue;
        }
        for (leader, wanted) in wanted {
            fetch_once(plan, fetcher, leader, &wanted, positions, t, counters).await?;
        }
    }
}

/// One Fetch from `leader`; counts what it brings and moves `positions` past it.
async fn fetch_once(
    plan: &Plan,
    fetcher: &mut Fetcher,
    leader: SocketAddr,
    wanted: &[(i32, i64)],
    positions: &mut [(i32, i64)],
    t: &mut Tally,
    counters: &Counters,
) -> Result<()> {
    let conn = fetcher.connection(leader).await?;
    let sent_ns = clock::now_ns();
    plan.started(sent_ns);
    let response = kafka::fetch(
        conn,
        &plan.topic,
        plan.topic_id,
        wanted,
        FETCH_MAX_WAIT_MS,
        plan.partition_bytes_max,
    )
    .await?;
    let done_ns = clock::now_ns();
    if response.error_code != 0 {
        bail!("fetch: {}", error_name(response.error_code));
    }
    let mut got = 0;
    for p in response
        .responses
        .iter()
        .flat_map(|topic| &topic.partitions)
    {
        if p.error_code != 0 {
            t.error(&error_name(p.error_code), 1);
            continue;
        }
        let Some(records) = &p.records else { continue };
        match count_batches(records, plan.verify_crc) {
            Ok((n, bytes, next)) => {
                got += n;
                t.measured_wire_bytes += bytes;
                if let (Some(next), Some(pos)) = (
                    next,
                    positions.iter_mut().find(|(q, _)| *q == p.partition_index),
                ) {
                    pos.1 = pos.1.max(next);
                    plan.reach(pos.0, pos.1);
                }
            }
            Err(e) => {
                eprintln!("consumer: partition {}: {e:#}", p.partition_index);
                t.error("CORRUPT_MESSAGE", 1);
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
    Ok(())
}

/// One connection per partition leader, opened on first use.
#[derive(Default)]
struct Fetcher {
    connections: BTreeMap<SocketAddr, Connection>,
}

impl Fetcher {
    async fn connection(&mut self, leader: SocketAddr) -> Result<&mut Connection> {
        use std::collections::btree_map::Entry;
        Ok(match self.connections.entry(leader) {
            Entry::Occupied(c) => c.into_mut(),
            Entry::Vacant(v) => v.insert(kafka::connect(leader).await?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{fill_batch, BatchBuilder, Compression, PayloadPool};
    use clap::Parser;

    #[test]
    fn the_bench_encoders_batches_are_counted_and_crc_checked() {
        let mut pool = PayloadPool::new(100, false, 1);
        let mut builder = BatchBuilder::new(4096, Compression::None);
        let mut log = Vec::new();
        let mut total = 0;
        for base in [0i64, 10, 20] {
            builder.reset(0);
            let n = fill_batch(&mut builder, &mut pool, 10);
            total += n;
            let mut batch = builder.finish().to_vec();
            batch[0..8].copy_from_slice(&base.to_be_bytes());
            log.extend_from_slice(&batch);
        }
        let full = log.len();
        log.extend_from_slice(&[0; 30]); // partial trailing batch
        let (count, bytes, next) = count_batches(&log, true).expect("counts");
        assert_eq!((count, bytes as usize, next), (total, full, Some(30)));
        log[100] ^= 1;
        assert!(count_batches(&log, true).is_err());
    }

    #[test]
    fn consume_from_earliest_reads_everything_produced() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let addr = broker.addr.to_string();
        let mut load = crate::produce::tests::load(20_000);
        load.batch_size = 4_096;
        crate::produce::run(&addr, "c", &crate::produce::tests::spec(3), 0, &load, false)
            .expect("produces");
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
}
