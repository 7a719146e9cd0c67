//! A bounded randomized run of faults against three nodes (each a broker and a metadata
//! voter) holding a replicated topic (RF 3, `min.insync.replicas=2`, 3 partitions), with a
//! checker in the spirit of Jepsen. Each node runs in a network namespace of its own
//! (`common/netns.rs`); the test, in the root namespace, reaches every node throughout.
//!
//! - Workload, the whole run: one writer per partition sends one-record batches, one at a
//!   time, each value `p<partition>-<sequence>` with the writer's next sequence number, to
//!   the leader the highest leader epoch in any node's Metadata names; mostly acks=all, one
//!   in [`WRITES_PER_ACKS_ONE`] acks=1. A value is never sent twice (a failed write is not
//!   retried, the next value is sent): without idempotence, any value the log holds twice is
//!   the broker's doing, and the broker's deduplication of retries, which
//!   `idempotent_produce.rs` checks, does not blur this check. For every write the writer
//!   records the broker it went to, the leader epoch Metadata gave, and the answer: the
//!   offset, an error code, a closed connection, or none within [`PRODUCE_IO_TIMEOUT`] (a
//!   frozen node).
//! - Nemesis: a schedule drawn from the seed: a quiet period ([`QUIET_MS`]), then one fault
//!   on one node, healed after a random time: kill -9 and restart ([`KILL_DOWN_MS`]),
//!   SIGSTOP then SIGCONT ([`PAUSE_MS`]), or a network partition of the node from the other
//!   two ([`PARTITION_MS`]), each kind as likely; the node is one of the three (3 in 5), the
//!   leader of a partition (1 in 5) or the active controller (1 in 5). Never more than one
//!   node faulty: after each heal the run waits (bounded) until every node gives the same
//!   account of the cluster and every ISR is whole again, so a majority of voters and two
//!   in-sync replicas stay possible throughout. Segments are small and leaderships go back
//!   to their preferred replicas every few seconds ([`SETTINGS`]).
//! - At the end, healed and whole, each writer must get acks=all writes through again, then
//!   the checker reads each partition's final log as its leader serves it and as every
//!   node's segment files hold it, and checks:
//!   1. no acknowledged acks=all write is lost: each is in the log at the offset it was
//!      acknowledged with, and no value is there twice (acks=1 promises nothing past a
//!      leader change: those writes are counted, not checked);
//!   2. order: along the log, each writer's sequence numbers increase (a write that was
//!      never answered may still be taken later by a node that was frozen with it, so its
//!      place is not checked), and the batches' leader epochs never go down;
//!   3. no two brokers accepted acks=all writes for one partition in one leader epoch (the
//!      `partition_leader_epoch` of the acknowledged batch in the final log, with the
//!      broker that answered), and no two Metadata answers name two leaders for one epoch;
//!   4. the replicas converge: every node's segment files hold the leader's batches, byte
//!      for byte, at the same offsets.
//!
//!   The checker itself is tested on made-up histories and logs (`mod checker`), which need
//!   no namespaces.
//!
//! `CHAOS_SEED` sets the seed (else a random one) and `CHAOS_SECONDS` how long faults go on
//! ([`DEFAULT_FAULT_SECONDS`] by default, which CI runs; `scripts/chaos.sh` runs an hour).
//! The seed is printed at the start and in every failure, with the fault schedule that ran;
//! the same seed draws the same schedule (kinds, victims as drawn, durations, quiet times)
//! and the same acks for each write, though not the same timing: which node leads when a
//! fault comes, and how the writes interleave with it, vary from run to run.
//! A node whose process ends when no fault killed it (a crash) fails the run at once, with
//! its exit status and the end of its log. Every wait is bounded. Without root or iproute2
//! the test says why and passes, except under CI (`CI` set), where it fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{account_of, Cluster};
use common::logs::{describe, outline, stored_batches, try_served_batches};
use common::netns::{Network, NODES};
use common::replicated::{create, states, PARTITIONS, TOPIC};
use common::{batch, fetch_one, metadata, produce_request, topic_name, Client};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, RequestKind, ResponseKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Faults go on this long unless `CHAOS_SECONDS` says otherwise: what fits CI.
const DEFAULT_FAULT_SECONDS: u64 = 60;
/// Fast failure detection, as the other replication tests have it: a follower retries a
/// moved leader soon, a leader shrinks its ISR soon (the cluster's settings add a 200 ms
/// heartbeat and a 1.5 s broker session). Small segments, so that recovery after kill -9
/// and truncation cross segment files; a leader balance every few seconds, so that
/// leaderships also move back to their preferred replicas under load, as controlled
/// elections. No time retention: the harness's records carry a CreateTime of 2023, so
/// retention would delete every closed segment (its first check comes five minutes in) and
/// the checker would find the logs starting past 0.
const SETTINGS: &[&str] = &[
    "replica.fetch.backoff.ms=100",
    "replica.lag.time.max.ms=2000",
    "log.segment.bytes=262144",
    "leader.imbalance.check.interval.seconds=5",
    "log.retention.ms=-1",
];
/// The quiet time before each fault, after the cluster is whole again.
const QUIET_MS: RangeInclusive<u64> = 500..=2_500;
/// How long a killed node stays down before its restart.
const KILL_DOWN_MS: RangeInclusive<u64> = 300..=5_000;
/// How long a node stays frozen: from less than the broker session (1.5 s) and the ISR's
/// lag limit (2 s), which it may survive unnoticed, to well past both.
const PAUSE_MS: RangeInclusive<u64> = 300..=6_000;
/// How long a node stays cut off.
const PARTITION_MS: RangeInclusive<u64> = 1_000..=8_000;
/// How long the cluster may take to be whole again after a heal, and the writers to get
/// writes through at the end.
const HEAL_MAX: Duration = Duration::from_secs(60);
/// The Produce timeout of every write: how long a leader waits for its ISR.
const PRODUCE_TIMEOUT_MS: i32 = 2_000;
/// How long a writer waits for an answer (past the Produce timeout: only a frozen node
/// does not answer in time).
const PRODUCE_IO_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a Metadata question or a connection may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(1);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause of a writer after a failed write or a failed search for the leader.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// One write in this many is acks=1, the others acks=all.
const WRITES_PER_ACKS_ONE: u32 = 8;
/// Writers stop on their own this long after the faults should have ended, whatever
/// happens to the rest of the test.
const WRITER_MARGIN: Duration = Duration::from_secs(600);
/// Violations of one kind shown in a failure, at most.
const SHOWN_MAX: usize = 20;

/// The faults that ran, one line each with its time since the start: printed on failure.
static SCHEDULE: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Whether the seed and schedule were printed already (a failure can panic on several
/// threads).
static REPORTED: AtomicBool = AtomicBool::new(false);

#[test]
fn acknowledged_writes_survive_kills_pauses_and_partitions_and_the_replicas_converge() {
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .map(|s| s.trim().parse().expect("CHAOS_SEED is a number"))
        .unwrap_or_else(rand::random);
    let fault_seconds: u64 = std::env::var("CHAOS_SECONDS")
        .ok()
        .map(|s| s.trim().parse().expect("CHAOS_SECONDS is a number"))
        .unwrap_or(DEFAULT_FAULT_SECONDS);
    let replay = format!("CHAOS_SEED={seed} CHAOS_SECONDS={fault_seconds}");
    println!("chaos: seed {seed}, {fault_seconds} s of faults (replay: {replay})");
    let network = match Network::create() {
        Ok(network) => network,
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("CI must run this test, but {reason}")
        }
        Err(reason) => {
            eprintln!("chaos skipped: {reason}");
            return;
        }
    };
    report_seed_on_panic(replay.clone());
    let clock = Instant::now();
    let hosts = NODES.iter().map(|&id| (id, network.host(id))).collect();
    let mut cluster = Cluster::start_on(hosts, SETTINGS);
    let controller = cluster.controller();
    assert_eq!(
        create(&mut cluster.client(controller)),
        0,
        "creating {TOPIC}"
    );
    wait_whole(&mut cluster, "the topic's creation");
    note(clock, format!("{TOPIC} created, every ISR whole"));

    let addresses: BTreeMap<i32, SocketAddr> = cluster
        .nodes
        .iter()
        .map(|(&id, node)| (id, node.address()))
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let writer_seeds: Vec<u64> = (0..PARTITIONS).map(|_| rng.gen()).collect();
    let stop = AtomicBool::new(false);
    let acknowledged_counts: Vec<AtomicUsize> =
        (0..PARTITIONS).map(|_| AtomicUsize::new(0)).collect();
    let writers_end = Instant::now() + Duration::from_secs(fault_seconds) + WRITER_MARGIN;
    let (histories, faults) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..PARTITIONS)
            .map(|partition| {
                let seed = writer_seeds[partition as usize];
                let acknowledged = &acknowledged_counts[partition as usize];
                let (addresses, stop) = (&addresses, &stop);
                scope.spawn(move || {
                    let writer = Writer::new(partition, seed, addresses, clock);
                    writer.run(stop, acknowledged, writers_end)
                })
            })
            .collect();
        // A failure below must not leave the scope waiting for the writers.
        let _stop = StopOnDrop(&stop);
        let mut nemesis = Nemesis {
            cluster: &mut cluster,
            network: &network,
            rng,
            clock,
        };
        let faults = nemesis.run(Duration::from_secs(fault_seconds));
        wait_writes_go_through(&acknowledged_counts, clock);
        stop.store(true, Ordering::Relaxed);
        let histories: Vec<History> = handles
            .into_iter()
            .map(|handle| handle.join().expect("a writer ends"))
            .collect();
        (histories, faults)
    });

    wait_whole(&mut cluster, "the end of the writes");
    let mut violations = Violations::default();
    let logs = converged_logs(&cluster, &mut violations);
    let mut summary = format!(
        "chaos: seed {seed}, {faults} faults in {:.1} s",
        clock.elapsed().as_secs_f64()
    );
    for history in &histories {
        let log = &logs[&history.partition];
        let checked = check(history, log, &mut violations);
        let _ = write!(summary, "\n  {TOPIC}-{}: {checked}", history.partition);
    }
    if !violations.is_empty() {
        let failed: Vec<String> = histories.iter().map(failed_writes).collect();
        fail(format!(
            "chaos: seed {seed} (replay: {replay}): the checker found violations\n{}\n\
             fault schedule:\n{}\nwrites that failed, in runs:\n{}\n{summary}",
            violations.report(),
            schedule(),
            failed.join("\n")
        ));
    }
    println!("{summary}");
}

/// Prints the seed (with how to replay it) and the faults that ran before the first panic's
/// message, whatever panics.
fn report_seed_on_panic(replay: String) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !REPORTED.swap(true, Ordering::SeqCst) {
            eprintln!(
                "chaos: FAILED (replay: {replay})\nfault schedule:\n{}",
                schedule()
            );
        }
        default(info);
    }));
}

/// Panics with `report`, which holds the seed and schedule already.
fn fail(report: String) -> ! {
    REPORTED.store(true, Ordering::SeqCst);
    panic!("{report}");
}

/// Adds a line to the schedule (and prints it), stamped with the time since `clock`.
fn note(clock: Instant, line: String) {
    let line = format!("{:8.1} s  {line}", clock.elapsed().as_secs_f64());
    println!("chaos: {line}");
    SCHEDULE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(line);
}

fn schedule() -> String {
    SCHEDULE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .join("\n")
}

/// Stops the writers however the scope ends.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Waits until every node gives the same account of the cluster, with all three brokers
/// live, and each partition of [`TOPIC`] has a leader and all three replicas in its ISR;
/// panics with every node's account past [`HEAL_MAX`], or at once if a node's process
/// ended on its own (no fault kills a node without restarting it before this). Answers how
/// long it took.
fn wait_whole(cluster: &mut Cluster, after: &str) -> Duration {
    let started = Instant::now();
    loop {
        assert_running(
            cluster,
            &format!("waiting for a whole cluster after {after}"),
        );
        let answers: BTreeMap<i32, Option<MetadataResponse>> = cluster
            .nodes
            .iter()
            .map(|(&id, node)| (id, metadata_of_all(node.address())))
            .collect();
        let accounts: BTreeMap<i32, String> = answers
            .iter()
            .map(|(&id, answer)| {
                let account = answer
                    .as_ref()
                    .map_or_else(|| "no answer".into(), account_of);
                (id, account)
            })
            .collect();
        let first = &accounts[&NODES[0]];
        let agreed = answers.values().all(Option::is_some) && accounts.values().all(|a| a == first);
        let whole = answers[&NODES[0]].as_ref().is_some_and(|answer| {
            let topic = answer
                .topics
                .iter()
                .find(|t| t.name == Some(topic_name(TOPIC)));
            topic.is_some_and(|topic| {
                topic.partitions.len() == PARTITIONS as usize
                    && topic.partitions.iter().all(|p| {
                        let mut isr: Vec<i32> = p.isr_nodes.iter().map(|id| id.0).collect();
                        isr.sort_unstable();
                        NODES.contains(&p.leader_id.0) && isr == NODES
                    })
            })
        });
        if agreed && whole && first.lines().any(|line| line == "brokers [1, 2, 3]") {
            return started.elapsed();
        }
        if started.elapsed() > HEAL_MAX {
            let accounts: Vec<String> = accounts
                .iter()
                .map(|(id, account)| format!("node {id}:\n{account}"))
                .collect();
            panic!(
                "the cluster was not whole within {HEAL_MAX:?} of {after}:\n{}",
                accounts.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node's Metadata for every topic, `None` if it does not answer in time (the node may
/// have died: [`assert_running`] tells).
fn metadata_of_all(address: SocketAddr) -> Option<MetadataResponse> {
    let mut client = Client::try_connect_to(address, CONNECT_TIMEOUT, METADATA_TIMEOUT).ok()?;
    let request = MetadataRequest::default().with_topics(None);
    match client.try_call(12, RequestKind::Metadata(request)).ok()? {
        ResponseKind::Metadata(answer) => Some(answer),
        other => panic!("Metadata answered with {other:?}"),
    }
}

/// Panics if a node's process ended though no fault is killing it: the broker crashed.
fn assert_running(cluster: &mut Cluster, during: &str) {
    for (id, node) in &mut cluster.nodes {
        if let Ok(Some(status)) = node.child.try_wait() {
            let log = node.log_text();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "node {id} exited on its own ({status}), found {during}; its log ends:\n{}",
                lines[lines.len().saturating_sub(20)..].join("\n")
            );
        }
    }
}

/// Waits until every writer has had one more acks=all write acknowledged: the healed
/// cluster takes writes again (bounded by [`HEAL_MAX`]).
fn wait_writes_go_through(acknowledged_counts: &[AtomicUsize], clock: Instant) {
    let before: Vec<usize> = acknowledged_counts
        .iter()
        .map(|count| count.load(Ordering::Relaxed))
        .collect();
    let started = Instant::now();
    loop {
        let stuck: Vec<usize> = (0..acknowledged_counts.len())
            .filter(|&p| acknowledged_counts[p].load(Ordering::Relaxed) == before[p])
            .collect();
        if stuck.is_empty() {
            note(clock, "every writer's acks=all writes go through".into());
            return;
        }
        assert!(
            started.elapsed() < HEAL_MAX,
            "the writers of partitions {stuck:?} had no acks=all write acknowledged within \
             {HEAL_MAX:?} of the cluster being whole"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Pause,
    Partition,
}

impl Fault {
    fn duration_ms(self) -> RangeInclusive<u64> {
        match self {
            Fault::Kill => KILL_DOWN_MS,
            Fault::Pause => PAUSE_MS,
            Fault::Partition => PARTITION_MS,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill -9",
            Fault::Pause => "SIGSTOP",
            Fault::Partition => "cut off",
        }
    }
}

/// The node a fault hits: drawn as one of the three, or as whichever leads a partition or
/// the metadata quorum when the fault comes (faults to leaders are where records are lost
/// if any are, and leaderships gather on fewer nodes as faults go on).
#[derive(Clone, Copy, Debug)]
enum Victim {
    Node(i32),
    LeaderOf(i32),
    Controller,
}

/// Brings faults to the cluster, one node at a time, from its seeded generator.
struct Nemesis<'a> {
    cluster: &'a mut Cluster,
    network: &'a Network,
    rng: StdRng,
    clock: Instant,
}

impl Nemesis<'_> {
    /// Faults, each healed and followed by a whole cluster, until `fault_time` has passed
    /// (the last one runs to its end): how many ran.
    fn run(&mut self, fault_time: Duration) -> usize {
        let end = Instant::now() + fault_time;
        let mut faults = 0;
        while Instant::now() < end {
            // Every choice is drawn up front, so a seed always gives the same schedule.
            let quiet_ms = self.rng.gen_range(QUIET_MS);
            let fault = [Fault::Kill, Fault::Pause, Fault::Partition][self.rng.gen_range(0..3)];
            let victim = match self.rng.gen_range(0..5) {
                choice @ 0..=2 => Victim::Node(NODES[choice]),
                3 => Victim::LeaderOf(self.rng.gen_range(0..PARTITIONS)),
                _ => Victim::Controller,
            };
            let fault_ms = self.rng.gen_range(fault.duration_ms());
            std::thread::sleep(Duration::from_millis(quiet_ms));
            assert_running(self.cluster, &format!("before fault {}", faults + 1));
            let node = self.resolve(victim);
            let roles = self.roles(node);
            let name = fault.name();
            note(
                self.clock,
                format!("{name} node {node} ({victim:?}: {roles}) for {fault_ms} ms"),
            );
            let fault_time = Duration::from_millis(fault_ms);
            match fault {
                Fault::Kill => {
                    let node_dir = self.cluster.nodes.remove(&node).expect("running").kill();
                    std::thread::sleep(fault_time);
                    drop(node_dir);
                    let restarted = self.cluster.launch(node);
                    self.cluster.nodes.insert(node, restarted);
                    note(self.clock, format!("node {node} restarted"));
                }
                Fault::Pause => {
                    self.cluster.nodes[&node].signal("STOP");
                    std::thread::sleep(fault_time);
                    self.cluster.nodes[&node].signal("CONT");
                    note(self.clock, format!("node {node} resumed (SIGCONT)"));
                }
                Fault::Partition => {
                    self.network.cut_off(node);
                    std::thread::sleep(fault_time);
                    self.network.heal();
                    note(self.clock, format!("node {node} reconnected"));
                }
            }
            faults += 1;
            let took = wait_whole(self.cluster, &format!("healing fault {faults}"));
            let roles = self.roles(node);
            note(
                self.clock,
                format!(
                    "whole again after {:.1} s; node {node} now {roles}",
                    took.as_secs_f64()
                ),
            );
        }
        faults
    }

    /// The node `victim` names in the (whole) cluster.
    fn resolve(&self, victim: Victim) -> i32 {
        match victim {
            Victim::Node(node) => node,
            Victim::LeaderOf(partition) => states(self.cluster, NODES[0])[&partition].0,
            Victim::Controller => self.cluster.controller(),
        }
    }

    /// What `node` is in the (whole) cluster: the partitions it leads, and whether it is
    /// the active controller.
    fn roles(&self, node: i32) -> String {
        let led: Vec<String> = states(self.cluster, node)
            .iter()
            .filter(|(_, (leader, _))| *leader == node)
            .map(|(partition, _)| format!("p{partition}"))
            .collect();
        let mut roles = if led.is_empty() {
            "leads nothing".to_string()
        } else {
            format!("leads {}", led.join(", "))
        };
        let controller = metadata(&mut self.cluster.client(node), &[])
            .controller_id
            .0;
        if controller == node {
            roles.push_str(", the controller");
        }
        roles
    }
}

/// What became of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Answered without error, at this offset.
    Acknowledged { offset: i64 },
    /// Answered with this error code: the record may be in the log (a timeout after the
    /// append) or not, but if it is, it was appended before the answer.
    Refused { code: i16 },
    /// The connection ended first: the node died, or closed it.
    Closed,
    /// No answer within [`PRODUCE_IO_TIMEOUT`]: the node is frozen with the request, and may
    /// append it whenever it thaws.
    Unanswered,
}

/// One write of one value.
#[derive(Clone, Debug)]
struct Attempt {
    sequence: u64,
    acks: i16,
    /// The broker it went to, and the leader epoch Metadata gave that broker.
    broker: i32,
    epoch_seen: i32,
    /// When it was sent, since the start.
    sent_ms: u64,
    outcome: Outcome,
}

/// One writer's writes, in the order sent (sequence 1, 2, …), and the leaders Metadata
/// named, per leader epoch.
struct History {
    partition: i32,
    attempts: Vec<Attempt>,
    leaders_seen: BTreeMap<i32, BTreeSet<i32>>,
}

/// The leader a writer writes to and its connection.
struct Target {
    leader: i32,
    epoch: i32,
    client: Client,
}

/// Writes to one partition, one write at a time, each a new value.
struct Writer<'a> {
    partition: i32,
    rng: StdRng,
    addresses: &'a BTreeMap<i32, SocketAddr>,
    clock: Instant,
    target: Option<Target>,
    history: History,
}

fn value_of(partition: i32, sequence: u64) -> String {
    format!("p{partition}-{sequence:09}")
}

/// The sequence number in `value` if a writer of `partition` wrote it.
fn sequence_in(value: &[u8], partition: i32) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let digits = text.strip_prefix(&format!("p{partition}-"))?;
    if digits.len() != 9 {
        return None;
    }
    digits.parse().ok()
}

impl<'a> Writer<'a> {
    fn new(
        partition: i32,
        seed: u64,
        addresses: &'a BTreeMap<i32, SocketAddr>,
        clock: Instant,
    ) -> Writer<'a> {
        Writer {
            partition,
            rng: StdRng::seed_from_u64(seed),
            addresses,
            clock,
            target: None,
            history: History {
                partition,
                attempts: Vec::new(),
                leaders_seen: BTreeMap::new(),
            },
        }
    }

    /// Writes until `stop` (or `end`), counting acknowledged acks=all writes in
    /// `acknowledged`: the history.
    fn run(mut self, stop: &AtomicBool, acknowledged: &AtomicUsize, end: Instant) -> History {
        let mut sequence = 0;
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            if self.target.is_none() {
                self.target = self.find_leader();
            }
            let Some(target) = self.target.as_mut() else {
                std::thread::sleep(RETRY_PAUSE);
                continue;
            };
            sequence += 1;
            let acks = if self.rng.gen_ratio(1, WRITES_PER_ACKS_ONE) {
                1
            } else {
                -1
            };
            let value = value_of(self.partition, sequence);
            let request = produce_request(TOPIC, self.partition, batch(&[value.as_bytes()]), acks)
                .with_timeout_ms(PRODUCE_TIMEOUT_MS);
            let sent_ms = self.clock.elapsed().as_millis() as u64;
            let outcome = match target.client.try_call(9, RequestKind::Produce(request)) {
                Ok(ResponseKind::Produce(answer)) => {
                    let answer = &answer.responses[0].partition_responses[0];
                    match answer.error_code {
                        0 => Outcome::Acknowledged {
                            offset: answer.base_offset,
                        },
                        code => Outcome::Refused { code },
                    }
                }
                Ok(other) => panic!("a Produce answered with {other:?}"),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    Outcome::Unanswered
                }
                Err(_) => Outcome::Closed,
            };
            self.history.attempts.push(Attempt {
                sequence,
                acks,
                broker: target.leader,
                epoch_seen: target.epoch,
                sent_ms,
                outcome,
            });
            match outcome {
                Outcome::Acknowledged { .. } => {
                    if acks == -1 {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ => {
                    // Whatever went wrong, ask again who leads.
                    self.target = None;
                    std::thread::sleep(RETRY_PAUSE);
                }
            }
        }
        self.history
    }

    /// The leader the highest leader epoch names among the nodes' Metadata answers (a node
    /// cut off or behind names an older one), connected; `None` if no node answers with one.
    /// Every (epoch, leader) answered goes into the history.
    fn find_leader(&mut self) -> Option<Target> {
        let mut newest: Option<(i32, i32)> = None;
        for &address in self.addresses.values() {
            let Ok(mut client) = Client::try_connect_to(address, CONNECT_TIMEOUT, METADATA_TIMEOUT)
            else {
                continue;
            };
            let request = MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(TOPIC))),
            ]));
            let Ok(ResponseKind::Metadata(answer)) =
                client.try_call(12, RequestKind::Metadata(request))
            else {
                continue;
            };
            let found = answer.topics.iter().flat_map(|t| &t.partitions).find(|p| {
                p.partition_index == self.partition && p.error_code == 0 && p.leader_id.0 >= 0
            });
            let Some(found) = found else {
                continue;
            };
            let (epoch, leader) = (found.leader_epoch, found.leader_id.0);
            self.history
                .leaders_seen
                .entry(epoch)
                .or_default()
                .insert(leader);
            if newest.is_none_or(|(newest_epoch, _)| epoch > newest_epoch) {
                newest = Some((epoch, leader));
            }
        }
        let (epoch, leader) = newest?;
        let address = *self.addresses.get(&leader)?;
        let client = Client::try_connect_to(address, CONNECT_TIMEOUT, PRODUCE_IO_TIMEOUT).ok()?;
        Some(Target {
            leader,
            epoch,
            client,
        })
    }
}

/// What the checker found wrong, by kind.
#[derive(Default)]
struct Violations {
    by_kind: BTreeMap<&'static str, Vec<String>>,
}

impl Violations {
    fn add(&mut self, kind: &'static str, evidence: String) {
        self.by_kind.entry(kind).or_default().push(evidence);
    }

    fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    fn report(&self) -> String {
        let mut report = String::new();
        for (kind, found) in &self.by_kind {
            let _ = writeln!(report, "{kind}: {} violation(s)", found.len());
            for evidence in found.iter().take(SHOWN_MAX) {
                let _ = writeln!(report, "  - {evidence}");
            }
            if found.len() > SHOWN_MAX {
                let _ = writeln!(report, "  - … and {} more", found.len() - SHOWN_MAX);
            }
        }
        report
    }
}

/// Each partition's log as its leader serves it, once every node's segment files hold the
/// same batches (bounded by [`HEAL_MAX`]); a node whose copy still differs then is a
/// violation, shown from the first batch that differs. The leader is asked anew each time:
/// the leader balance may move a leadership meanwhile.
fn converged_logs(cluster: &Cluster, violations: &mut Violations) -> BTreeMap<i32, Vec<Bytes>> {
    let deadline = Instant::now() + HEAL_MAX;
    let mut logs = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let mut last_refusal = None;
        let (leader, served, stored) = loop {
            let leader = states(cluster, NODES[0])[&partition].0;
            let served = try_served_batches(&mut cluster.client(leader), TOPIC, partition);
            let stored: BTreeMap<i32, Vec<Bytes>> = cluster
                .dirs
                .iter()
                .map(|(&id, dir)| {
                    let batches = stored_batches(dir, TOPIC, partition).unwrap_or_default();
                    (id, batches)
                })
                .collect();
            match served {
                Ok(served) => {
                    let same = stored.values().all(|batches| *batches == served);
                    if same || Instant::now() > deadline {
                        break (leader, served, stored);
                    }
                }
                Err((offset, code)) => last_refusal = Some((leader, offset, code)),
            }
            if Instant::now() > deadline {
                fail_unreadable(cluster, partition, last_refusal);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        for (id, batches) in stored {
            if batches == served {
                continue;
            }
            let first = batches
                .iter()
                .zip(&served)
                .position(|(a, b)| a != b)
                .unwrap_or(batches.len().min(served.len()));
            let from = first.saturating_sub(2);
            let window =
                |log: &[Bytes]| describe(&log[from.min(log.len())..(first + 3).min(log.len())]);
            violations.add(
                "replicas diverge",
                format!(
                    "node {id}'s {TOPIC}-{partition} holds {} batches, leader {leader} serves {}; \
                     the first that differs is batch {first}:\n  node {id}:\n{}\n  leader \
                     {leader}:\n{}",
                    batches.len(),
                    served.len(),
                    window(&batches),
                    window(&served)
                ),
            );
        }
        logs.insert(partition, served);
    }
    logs
}

/// Panics saying why `partition`'s log could not be read from its leader to the end: the
/// last refusal (leader, offset, error), what the leader answers a fetch at that offset,
/// and the shape of every node's copy.
fn fail_unreadable(cluster: &Cluster, partition: i32, refusal: Option<(i32, i64, i16)>) -> ! {
    let mut evidence = format!("{TOPIC}-{partition}: no leader served its log within {HEAL_MAX:?}");
    if let Some((leader, offset, code)) = refusal {
        let answer = fetch_answer(cluster.nodes[&leader].address(), partition, offset);
        let _ = write!(
            evidence,
            "; node {leader}, the leader, refused a fetch at {offset} with {}, and answers \
             one now with {answer}",
            error_name(code)
        );
    }
    for (id, dir) in &cluster.dirs {
        let stored = stored_batches(dir, TOPIC, partition).unwrap_or_default();
        let _ = write!(evidence, "\n  node {id} holds {}", outline(&stored));
    }
    panic!("{evidence}");
}

/// What a node answers a consumer's fetch of `partition` at `offset`, but the records.
fn fetch_answer(address: SocketAddr, partition: i32, offset: i64) -> String {
    let request = fetch_one(TOPIC, partition, offset, 0, 1 << 20);
    let answer = Client::try_connect_to(address, CONNECT_TIMEOUT, METADATA_TIMEOUT)
        .and_then(|mut client| client.try_call(12, RequestKind::Fetch(request)));
    match answer {
        Ok(ResponseKind::Fetch(answer)) => {
            let data = &answer.responses[0].partitions[0];
            format!(
                "{} (high watermark {}, log start {}, {} bytes of records)",
                error_name(data.error_code),
                data.high_watermark,
                data.log_start_offset,
                data.records.as_ref().map_or(0, Bytes::len)
            )
        }
        Ok(other) => format!("{other:?}"),
        Err(error) => format!("no answer ({error})"),
    }
}

/// A writer's writes that were not acknowledged, in runs of the same answer from the same
/// node, with their times: where each fault showed to the clients.
fn failed_writes(history: &History) -> String {
    let mut lines = vec![format!("{TOPIC}-{}:", history.partition)];
    let mut run: Option<(i32, String, u64, u64, usize)> = None;
    let flush = |run: &mut Option<(i32, String, u64, u64, usize)>, lines: &mut Vec<String>| {
        if let Some((broker, answer, first_ms, last_ms, count)) = run.take() {
            lines.push(format!(
                "  {:8.1} – {:8.1} s  node {broker}: {answer} × {count}",
                first_ms as f64 / 1000.0,
                last_ms as f64 / 1000.0
            ));
        }
    };
    for attempt in &history.attempts {
        let answer = match attempt.outcome {
            Outcome::Acknowledged { .. } => {
                flush(&mut run, &mut lines);
                continue;
            }
            Outcome::Refused { code } => error_name(code),
            Outcome::Closed => "connection closed".to_string(),
            Outcome::Unanswered => "no answer".to_string(),
        };
        match &mut run {
            Some((broker, same, _, last_ms, count))
                if *broker == attempt.broker && *same == answer =>
            {
                *last_ms = attempt.sent_ms;
                *count += 1;
            }
            _ => {
                flush(&mut run, &mut lines);
                run = Some((attempt.broker, answer, attempt.sent_ms, attempt.sent_ms, 1));
            }
        }
    }
    flush(&mut run, &mut lines);
    lines.join("\n")
}

/// One record of the final log.
struct Entry {
    offset: i64,
    epoch: i32,
    value: Bytes,
}

fn entries(batches: &[Bytes]) -> Vec<Entry> {
    let mut entries = Vec::new();
    for batch in batches {
        let mut bytes = batch.clone();
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes)
            .expect("a served batch decodes");
        entries.extend(set.records.into_iter().map(|record| Entry {
            offset: record.offset,
            epoch: record.partition_leader_epoch,
            value: record.value.unwrap_or_default(),
        }));
    }
    entries
}

/// The name of a Kafka error code, "no error" for 0.
fn error_name(code: i16) -> String {
    if code == 0 {
        return "no error".into();
    }
    ResponseError::try_from_code(code).map_or_else(|| format!("error {code}"), |e| format!("{e:?}"))
}

/// Checks one writer's `history` against its partition's final `log`, adding what is wrong
/// to `violations`: a summary of what was written and found.
fn check(history: &History, log: &[Bytes], violations: &mut Violations) -> String {
    let partition = history.partition;
    let entries = entries(log);
    let at_offset: BTreeMap<i64, &Entry> = entries.iter().map(|e| (e.offset, e)).collect();
    let mut offsets_of: BTreeMap<&[u8], Vec<i64>> = BTreeMap::new();
    for entry in &entries {
        offsets_of
            .entry(&entry.value[..])
            .or_default()
            .push(entry.offset);
    }
    let attempt = |sequence: u64| history.attempts.get((sequence as usize).checked_sub(1)?);

    // Every value is a write of this partition's writer, once.
    for (value, offsets) in &offsets_of {
        let sequence = sequence_in(value, partition);
        if sequence.and_then(attempt).is_none() {
            violations.add(
                "a value nobody wrote",
                format!("{TOPIC}-{partition} holds {value:?} at {offsets:?}"),
            );
        }
        if offsets.len() > 1 {
            let sent = sequence.and_then(attempt);
            violations.add(
                "a value twice",
                format!("{TOPIC}-{partition} holds {value:?} at offsets {offsets:?}; sent once: {sent:?}"),
            );
        }
    }

    // Order: sequence numbers increase along the log, but for writes never answered (a
    // frozen node may take them late); leader epochs never go down.
    let mut previous: Option<(&Entry, u64)> = None;
    let mut previous_epoch: Option<&Entry> = None;
    for entry in &entries {
        if let Some(before) = previous_epoch {
            if entry.epoch < before.epoch {
                violations.add(
                    "leader epochs go down along the log",
                    format!(
                        "{TOPIC}-{partition}: {:?} at offset {} has epoch {}, after {:?} at {} \
                         with epoch {}",
                        entry.value,
                        entry.offset,
                        entry.epoch,
                        before.value,
                        before.offset,
                        before.epoch
                    ),
                );
            }
        }
        previous_epoch = Some(entry);
        let Some(sequence) = sequence_in(&entry.value, partition) else {
            continue;
        };
        if attempt(sequence).is_none_or(|a| a.outcome == Outcome::Unanswered) {
            continue;
        }
        if let Some((before, before_sequence)) = previous {
            if sequence <= before_sequence {
                violations.add(
                    "out of order",
                    format!(
                        "{TOPIC}-{partition}: {:?} at offset {} comes after {:?} at {}; sent: \
                         {:?} then {:?}",
                        entry.value,
                        entry.offset,
                        before.value,
                        before.offset,
                        attempt(before_sequence),
                        attempt(sequence)
                    ),
                );
            }
        }
        previous = Some((entry, sequence));
    }

    // Acknowledged acks=all writes are where they were acknowledged; who acknowledged in
    // each epoch.
    let mut acknowledgers: BTreeMap<i32, BTreeMap<i32, Vec<&Attempt>>> = BTreeMap::new();
    let (mut all_acknowledged, mut one_acknowledged, mut one_kept) = (0, 0, 0);
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    let (mut closed, mut unanswered, mut landed) = (0, 0, 0);
    for attempt in &history.attempts {
        let value = value_of(partition, attempt.sequence);
        let found = offsets_of.get(value.as_bytes());
        match attempt.outcome {
            Outcome::Acknowledged { offset } if attempt.acks == -1 => {
                all_acknowledged += 1;
                match at_offset.get(&offset) {
                    Some(entry) if entry.value == value.as_bytes() => acknowledgers
                        .entry(entry.epoch)
                        .or_default()
                        .entry(attempt.broker)
                        .or_default()
                        .push(attempt),
                    held => violations.add(
                        "acknowledged acks=all write lost",
                        format!(
                            "{TOPIC}-{partition}: {value} acknowledged at offset {offset} by \
                             node {} (leader epoch {} in Metadata) at {} ms; the log holds {:?} \
                             there, and the value at {:?}",
                            attempt.broker,
                            attempt.epoch_seen,
                            attempt.sent_ms,
                            held.map(|e| (&e.value, e.epoch)),
                            found
                        ),
                    ),
                }
            }
            Outcome::Acknowledged { .. } => {
                one_acknowledged += 1;
                one_kept += usize::from(found.is_some());
            }
            Outcome::Refused { code } => {
                *refused.entry(error_name(code)).or_default() += 1;
                landed += usize::from(found.is_some());
            }
            Outcome::Closed => {
                closed += 1;
                landed += usize::from(found.is_some());
            }
            Outcome::Unanswered => {
                unanswered += 1;
                landed += usize::from(found.is_some());
            }
        }
    }

    // One leader per epoch: among the brokers that acknowledged acks=all writes whose
    // batches carry the epoch, and among the leaders Metadata named for it.
    for (epoch, brokers) in &acknowledgers {
        if brokers.len() > 1 {
            let evidence: Vec<String> = brokers
                .iter()
                .map(|(broker, attempts)| {
                    let first = attempts[0];
                    format!(
                        "node {broker} acknowledged {} writes, the first {} at {} ms",
                        attempts.len(),
                        value_of(partition, first.sequence),
                        first.sent_ms
                    )
                })
                .collect();
            violations.add(
                "two leaders took acks=all writes in one epoch",
                format!("{TOPIC}-{partition} epoch {epoch}: {}", evidence.join("; ")),
            );
        }
        if let Some(named) = history.leaders_seen.get(epoch) {
            for broker in brokers.keys().filter(|b| !named.contains(b)) {
                violations.add(
                    "a write acknowledged by a node Metadata did not name leader",
                    format!(
                        "{TOPIC}-{partition} epoch {epoch}: node {broker} acknowledged writes \
                         of that epoch, Metadata named {named:?}"
                    ),
                );
            }
        }
    }
    for (epoch, leaders) in &history.leaders_seen {
        if leaders.len() > 1 {
            violations.add(
                "Metadata named two leaders for one epoch",
                format!("{TOPIC}-{partition} epoch {epoch}: leaders {leaders:?}"),
            );
        }
    }

    let epochs: BTreeMap<i32, Vec<i32>> = acknowledgers
        .iter()
        .map(|(epoch, brokers)| (*epoch, brokers.keys().copied().collect()))
        .collect();
    format!(
        "{} writes: {all_acknowledged} acks=all acknowledged (each checked), {one_acknowledged} \
         acks=1 acknowledged ({one_kept} kept), refused {refused:?}, {closed} cut short, \
         {unanswered} unanswered ({landed} of the unacknowledged in the log); {} records in \
         the log; epoch → acknowledging leader {epochs:?}",
        history.attempts.len(),
        entries.len()
    )
}

/// The checker on made-up histories and logs: it finds what it is there to find, and
/// nothing in a history without faults of the broker's.
mod checker {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// A log of one-record batches: (offset, leader epoch, sequence of partition 0's writer).
    fn log_of(records: &[(i64, i32, u64)]) -> Vec<Bytes> {
        records
            .iter()
            .map(|&(offset, epoch, sequence)| {
                let record = Record {
                    transactional: false,
                    control: false,
                    partition_leader_epoch: epoch,
                    delete_horizon: false,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset,
                    sequence: -1,
                    timestamp: 1_700_000_000_000,
                    key: None,
                    value: Some(Bytes::from(value_of(0, sequence))),
                    headers: Default::default(),
                };
                let mut out = bytes::BytesMut::new();
                let options = RecordEncodeOptions {
                    version: 2,
                    compression: Compression::None,
                };
                RecordBatchEncoder::encode(&mut out, &[record], &options).expect("encodes");
                out.freeze()
            })
            .collect()
    }

    fn acknowledged(offset: i64) -> Outcome {
        Outcome::Acknowledged { offset }
    }

    /// Partition 0's writer's attempts, sequence 1, 2, …: (acks, broker, outcome); Metadata
    /// named node 1 for epoch 0 and node 2 for epochs 1 and 2.
    fn history(attempts: &[(i16, i32, Outcome)]) -> History {
        History {
            partition: 0,
            attempts: attempts
                .iter()
                .enumerate()
                .map(|(i, &(acks, broker, outcome))| Attempt {
                    sequence: i as u64 + 1,
                    acks,
                    broker,
                    epoch_seen: 0,
                    sent_ms: i as u64,
                    outcome,
                })
                .collect(),
            leaders_seen: [(0, [1].into()), (1, [2].into()), (2, [2].into())].into(),
        }
    }

    fn found(history: &History, log: &[Bytes]) -> Vec<&'static str> {
        let mut violations = Violations::default();
        check(history, log, &mut violations);
        violations.by_kind.keys().copied().collect()
    }

    /// Acknowledged acks=all on node 1 at epoch 0, acks=1, a timeout whose record stayed, a
    /// write never answered that never landed, then acks=all on node 2 at epoch 1.
    fn faultless() -> (History, Vec<Bytes>) {
        let history = history(&[
            (-1, 1, acknowledged(0)),
            (1, 1, acknowledged(1)),
            (-1, 1, Outcome::Refused { code: 7 }),
            (-1, 1, Outcome::Unanswered),
            (-1, 2, acknowledged(3)),
        ]);
        (
            history,
            log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 1, 5)]),
        )
    }

    #[test]
    fn a_history_without_faults_of_the_brokers_passes() {
        let (history, log) = faultless();
        assert_eq!(found(&history, &log), Vec::<&str>::new());
        // A write never answered may land late, after later writes (a node thawed with it).
        let late = log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 1, 5), (4, 2, 4)]);
        assert_eq!(found(&history, &late), Vec::<&str>::new());
        // acks=1 promises nothing past a leader change: node 2 took over without 2.
        let mut history = history;
        history.attempts[4].outcome = acknowledged(2);
        let without_acks_one = log_of(&[(0, 0, 1), (1, 0, 3), (2, 1, 5)]);
        assert_eq!(found(&history, &without_acks_one), Vec::<&str>::new());
    }

    #[test]
    fn a_lost_or_moved_acknowledged_write_is_found() {
        let (history, _) = faultless();
        let lost = log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3)]);
        assert_eq!(found(&history, &lost), ["acknowledged acks=all write lost"]);
        let moved = log_of(&[(0, 0, 1), (1, 0, 2), (2, 1, 5)]);
        assert_eq!(
            found(&history, &moved),
            ["acknowledged acks=all write lost"]
        );
    }

    #[test]
    fn a_value_twice_or_one_nobody_wrote_is_found() {
        let (history, _) = faultless();
        let twice = log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 1, 5), (4, 1, 5)]);
        assert_eq!(found(&history, &twice), ["a value twice", "out of order"]);
        let unwritten = log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 1, 5), (4, 1, 6)]);
        assert_eq!(found(&history, &unwritten), ["a value nobody wrote"]);
    }

    #[test]
    fn writes_out_of_order_are_found() {
        // 3 was answered (refused) before 5 was sent, yet lies after it.
        let (history, _) = faultless();
        let reordered = log_of(&[(0, 0, 1), (1, 0, 2), (2, 1, 5), (3, 1, 3)]);
        let mut history = history;
        history.attempts[4].outcome = acknowledged(2);
        assert_eq!(found(&history, &reordered), ["out of order"]);
    }

    #[test]
    fn two_leaders_in_one_epoch_are_found() {
        // Node 2 acknowledged a write that carries node 1's epoch.
        let (history, _) = faultless();
        let log = log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 0, 5)]);
        assert_eq!(
            found(&history, &log),
            [
                "a write acknowledged by a node Metadata did not name leader",
                "two leaders took acks=all writes in one epoch"
            ]
        );
        let mut history = history;
        history.leaders_seen.entry(1).or_default().insert(3);
        let log = log_of(&[(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 1, 5)]);
        assert_eq!(
            found(&history, &log),
            ["Metadata named two leaders for one epoch"]
        );
    }

    #[test]
    fn leader_epochs_going_down_are_found() {
        let (history, _) = faultless();
        let log = log_of(&[(0, 0, 1), (1, 1, 2), (2, 0, 3), (3, 1, 5)]);
        assert_eq!(
            found(&history, &log),
            ["leader epochs go down along the log"]
        );
    }
}
