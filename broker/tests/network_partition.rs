//! A network partition cuts the leader of a replicated partition (RF 3,
//! `min.insync.replicas=2`) off from the other two nodes, and Kafka's promises hold. Each node
//! runs in a network namespace of its own, the test in the root namespace reaching every node
//! throughout; a partition is blackhole routes between the namespaces (`common/netns.rs`). It
//! happens twice: to the active controller, so that the metadata quorum moves as well as the
//! leadership, then to a leader that is not the controller, which cannot reach the controller
//! with its ISR change.
//! - Cut off, the old leader answers no acks=all write successfully (its followers stop
//!   fetching, and the shrink of its ISR cannot be committed: the controller is on the other
//!   side) and its consumers see nothing past what every replica held; it still takes acks=1
//!   writes alone, as Kafka allows.
//! - The other two elect a new leader from the ISR within a bounded time (printed) and
//!   acks=all goes on there, in a newer leader epoch.
//! - Healed, the old leader follows the new one, truncates what only it held and rejoins the
//!   ISR: every node's log of every partition holds the same batches, byte for byte, at the
//!   same offsets as the leader serves them (read from each node's segment files, as Kafka's
//!   DumpLogSegments reads them), and that log is exactly what was acknowledged with acks=all,
//!   each record once, in order, with none of what the old leader took alone.
//!
//! Every wait is bounded. Namespaces, links and routes carry the test's pid in their names and
//! are removed at the end, on a panic too. Without root or iproute2 the test says why and
//! passes, except under CI (`CI` set), where it fails.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{wait_for, Cluster};
use common::logs::{served_batches, stored_batches, wait_same_log};
use common::netns::{Network, NODES};
use common::replicated::{
    leaders_among, produce_round, wait_isr, wait_readable, with_topic, Acknowledged, TOPIC,
};
use common::{batch, metadata, produce_answer, produce_request, read_values, values, Client};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestKind};

/// The Produce timeout of writes to the node cut off: an acks=all write there must end in an
/// error, and this keeps each attempt short.
const CUT_OFF_TIMEOUT_MS: i32 = 1_000;
/// A new leader is due within the broker session (1.5 s) and a quorum election (about 2 s)
/// of the cut; this leaves room for a slow machine.
const ELECTION_MAX: Duration = Duration::from_secs(15);

#[test]
fn a_leader_cut_off_acknowledges_no_acks_all_write_and_truncates_what_it_took_alone() {
    let network = match Network::create() {
        Ok(network) => network,
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("CI must run this test, but {reason}")
        }
        Err(reason) => {
            eprintln!("network_partition skipped: {reason}");
            return;
        }
    };
    let hosts = NODES.iter().map(|&id| (id, network.host(id))).collect();
    // Followers retry a moved leader soon; a leader cut off tries to shrink its ISR soon.
    let settings = [
        "replica.fetch.backoff.ms=100",
        "replica.lag.time.max.ms=2000",
    ];
    let (cluster, _, mut acknowledged) = with_topic(Cluster::start_on(hosts, &settings));

    // First the active controller (leaders are striped over the brokers, so it leads a
    // partition): the metadata quorum moves as well as the leadership. Then a leader that is
    // not the controller: its ISR change goes to a controller it cannot reach.
    let controller = cluster.controller();
    cut_off_and_heal(&network, &cluster, controller, &mut acknowledged);
    let controller = cluster.controller();
    let leaders = leaders_among(&cluster, &NODES);
    let leader = *leaders
        .values()
        .find(|&&leader| leader != controller)
        .expect("a leader that is not the controller");
    cut_off_and_heal(&network, &cluster, leader, &mut acknowledged);
}

/// Cuts node `cut`, the leader of a partition, off from the two others while a client
/// writes to it, checks what it and the others answer, heals the partition and checks that
/// every log converges on what was acknowledged with acks=all (`acknowledged`, to which
/// this adds).
fn cut_off_and_heal(
    network: &Network,
    cluster: &Cluster,
    cut: i32,
    acknowledged: &mut Acknowledged,
) {
    let leaders = leaders_among(cluster, &NODES);
    let partition = *leaders
        .iter()
        .find(|&(_, &leader)| leader == cut)
        .expect("the node cut off leads a partition")
        .0;
    let others: Vec<i32> = NODES.iter().copied().filter(|&id| id != cut).collect();
    let before = leadership(cluster, cut, partition);
    let held_by_all = acknowledged[&partition].clone();
    println!(
        "cutting off node {cut}, leader of {TOPIC}-{partition} at epoch {} (controller: {})",
        before.epoch,
        cluster.controller()
    );

    network.cut_off(cut);
    let cut_at = Instant::now();
    let address = cluster.nodes[&cut].address();
    let stop = AtomicBool::new(false);
    let (new_leader, alone) = std::thread::scope(|scope| {
        // A client keeps writing to the node cut off, acks=all and acks=1 in turn, until the
        // new leader has taken acks=all writes.
        let writer = scope.spawn(|| write_alone(address, cut, partition, &stop));
        let _stop = StopOnDrop(&stop);

        let new_leader = wait_for(|| {
            let seen: Vec<Leadership> = others
                .iter()
                .map(|&id| leadership(cluster, id, partition))
                .collect();
            let agreed = seen.iter().all(|s| *s == seen[0]);
            let moved = others.contains(&seen[0].leader) && seen[0].epoch > before.epoch;
            (agreed && moved).then(|| seen[0].clone())
        });
        let election = cut_at.elapsed();
        println!(
            "node {} leads {TOPIC}-{partition} at epoch {} (ISR {:?}) {election:?} after the cut",
            new_leader.leader, new_leader.epoch, new_leader.isr
        );
        assert!(
            before.isr.contains(&new_leader.leader),
            "the new leader comes from the ISR"
        );
        assert!(
            election < ELECTION_MAX,
            "a new leader took {election:?}, more than {ELECTION_MAX:?}"
        );
        // Every partition settles on the two: the old leader is out of every ISR, and acks=all
        // is answered on each, the cut-off node's former partition included.
        let leaders = leaders_among(cluster, &others);
        assert_eq!(leaders[&partition], new_leader.leader);
        let round = format!("while-{cut}-is-cut-off");
        produce_round(cluster, &leaders, &round, -1, 0, acknowledged);
        wait_readable(cluster, &leaders, acknowledged);

        // The old leader, still cut off, believes it leads at its old epoch: yet consumers
        // there see nothing past what every replica held, and acks=all is still refused
        // while the new leader takes it.
        let mut client = cluster.client(cut);
        assert_eq!(
            leadership(cluster, cut, partition).epoch,
            before.epoch,
            "the node cut off learns nothing"
        );
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            held_by_all,
            "the node cut off serves what its followers never held"
        );
        let late = Bytes::from(format!("alone-on-{cut}-all-late"));
        let code = produce_within(&mut client, partition, &late, -1);
        assert_ne!(
            code, 0,
            "the node cut off acknowledged an acks=all write after node {} took over",
            new_leader.leader
        );
        stop.store(true, Ordering::Relaxed);
        let mut alone = writer.join().expect("the writer ends");
        alone.all.push((late, code));
        (new_leader, alone)
    });
    alone.check();
    // What it took alone is in its log, after what every replica held: the comparison of the
    // logs after the heal proves it was cut away. Its acks=1 writes were answered from the
    // stage; they reach the segment files read here within the stage's hold.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stored = loop {
        let stored = stored_batches(&cluster.dirs[&cut], TOPIC, partition).unwrap_or_default();
        let stored: Vec<Bytes> = stored.iter().flat_map(values).collect();
        let all_in = alone.one.iter().all(|(value, _)| stored.contains(value));
        if all_in || Instant::now() > deadline {
            break stored;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(stored.starts_with(&held_by_all), "{stored:?}");
    for (value, _) in &alone.one {
        assert!(
            stored.contains(value),
            "node {cut} lost {value:?}: {stored:?}"
        );
    }

    network.heal();
    let healed_at = Instant::now();
    // The old leader catches up with the quorum, is unfenced, truncates, fetches and rejoins
    // every ISR; every node gives the same account of the cluster.
    wait_isr(cluster, &NODES);
    let rejoined = healed_at.elapsed();
    cluster.wait_agreed();
    let after = leadership(cluster, cut, partition);
    assert_eq!(
        (after.leader, after.epoch),
        (new_leader.leader, new_leader.epoch),
        "node {cut} follows the new leader"
    );
    let leaders = leaders_among(cluster, &NODES);
    let round = format!("after-{cut}-healed");
    produce_round(cluster, &leaders, &round, -1, 0, acknowledged);
    wait_readable(cluster, &leaders, acknowledged);

    // Every replica of every partition holds the leader's batches, byte for byte.
    let mut batches_compared = 0;
    for (&p, &leader) in &leaders {
        let served = served_batches(&mut cluster.client(leader), TOPIC, p);
        batches_compared += served.len();
        for (&id, dir) in &cluster.dirs {
            wait_same_log(id, dir, TOPIC, p, &served);
        }
        let log: Vec<Bytes> = served.iter().flat_map(values).collect();
        for (value, _) in alone.all.iter().chain(&alone.one) {
            assert!(
                !log.contains(value),
                "{TOPIC}-{p} holds {value:?}, which node {cut} took alone"
            );
        }
        assert_eq!(
            log, acknowledged[&p],
            "{TOPIC}-{p} holds exactly what was acknowledged with acks=all, each once, in order"
        );
    }
    println!(
        "healed: node {cut} back in every ISR after {rejoined:?}, every log the same after {:?} \
         ({batches_compared} batches on each node)",
        healed_at.elapsed()
    );
}

/// A partition's leadership as one node answers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Leadership {
    leader: i32,
    epoch: i32,
    isr: Vec<i32>,
}

fn leadership(cluster: &Cluster, id: i32, partition: i32) -> Leadership {
    let answer = metadata(&mut cluster.client(id), &[TOPIC]);
    let found = &answer.topics[0].partitions[partition as usize];
    assert_eq!(found.partition_index, partition);
    let mut isr: Vec<i32> = found.isr_nodes.iter().map(|id| id.0).collect();
    isr.sort_unstable();
    Leadership {
        leader: found.leader_id.0,
        epoch: found.leader_epoch,
        isr,
    }
}

/// Produces one record of `value` with `acks` and a Produce timeout of
/// [`CUT_OFF_TIMEOUT_MS`]: the answer's error code.
fn produce_within(client: &mut Client, partition: i32, value: &[u8], acks: i16) -> i16 {
    let request = produce_request(TOPIC, partition, batch(&[value]), acks)
        .with_timeout_ms(CUT_OFF_TIMEOUT_MS);
    client.send(ApiKey::Produce, 9, &RequestKind::Produce(request));
    produce_answer(client).0
}

/// What was written to the node cut off, and how it answered: (value, error code).
struct WrittenAlone {
    all: Vec<(Bytes, i16)>,
    one: Vec<(Bytes, i16)>,
}

impl WrittenAlone {
    /// Not one acks=all write succeeded; every acks=1 write did (the leader's write alone is
    /// all acks=1 asks, and the node knows of no other leader).
    fn check(&self) {
        let mut codes: BTreeMap<i16, usize> = BTreeMap::new();
        for (value, code) in &self.all {
            assert_ne!(
                *code, 0,
                "the node cut off acknowledged {value:?}, an acks=all write"
            );
            *codes.entry(*code).or_default() += 1;
        }
        let answers: Vec<String> = codes
            .iter()
            .map(|(code, count)| {
                let name = ResponseError::try_from_code(*code)
                    .map_or_else(|| "an unknown error".to_string(), |e| format!("{e:?}"));
                format!("{count} × {name} ({code})")
            })
            .collect();
        println!(
            "the node cut off answered {} acks=all writes with {} and acknowledged {} acks=1 \
             writes",
            self.all.len(),
            answers.join(", "),
            self.one.len()
        );
        for (value, code) in &self.one {
            assert_eq!(*code, 0, "acks=1 write {value:?} to the node cut off");
        }
        assert!(!self.one.is_empty(), "the node cut off took writes alone");
    }
}

/// Writes to `partition` on node `id` at `address` until `stop`, acks=all then acks=1, one
/// record each; bounded by the harness's wait even if nobody stops it.
fn write_alone(address: SocketAddr, id: i32, partition: i32, stop: &AtomicBool) -> WrittenAlone {
    let deadline = Instant::now() + common::cluster::WAIT;
    let mut client = Client::connect_to(address);
    let mut written = WrittenAlone {
        all: Vec::new(),
        one: Vec::new(),
    };
    for i in 0.. {
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            break;
        }
        let value = Bytes::from(format!("alone-on-{id}-all-{i}"));
        let code = produce_within(&mut client, partition, &value, -1);
        written.all.push((value, code));
        let value = Bytes::from(format!("alone-on-{id}-one-{i}"));
        let code = produce_within(&mut client, partition, &value, 1);
        written.one.push((value, code));
    }
    written
}

/// Stops the writer however the scope ends (a failed check must not wait on it).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
