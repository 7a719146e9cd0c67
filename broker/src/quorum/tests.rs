//! The quorum glue under a deterministic, in-process network: manual ticks, messages that
//! can be cut, dropped and reordered, voters that crash and restart from their files. The
//! state machine of each voter is the list of (index, record) it applied; every test checks
//! that no voter applies an index twice or out of order, and that the voters never disagree
//! on an index they both applied.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use raft::eraftpb::Message;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::node::{Committed, ProposalId, QuorumNode, ELECTION_TICKS};

type Applied = Vec<(u64, Vec<u8>)>;

struct Cluster {
    dir: tempfile::TempDir,
    voters: Vec<u64>,
    nodes: BTreeMap<u64, Option<QuorumNode>>,
    applied: BTreeMap<u64, Applied>,
    snapshots_installed: BTreeMap<u64, usize>,
    in_flight: VecDeque<Message>,
    cut: BTreeSet<u64>,
    drop_rate: f64,
    reorder: bool,
    rng: StdRng,
    logger: slog::Logger,
}

impl Cluster {
    fn new(size: u64, seed: u64) -> Cluster {
        let voters: Vec<u64> = (1..=size).collect();
        let mut cluster = Cluster {
            dir: tempfile::tempdir().expect("tmp"),
            voters: voters.clone(),
            nodes: BTreeMap::new(),
            applied: BTreeMap::new(),
            snapshots_installed: BTreeMap::new(),
            in_flight: VecDeque::new(),
            cut: BTreeSet::new(),
            drop_rate: 0.0,
            reorder: false,
            rng: StdRng::seed_from_u64(seed),
            logger: slog::Logger::root(slog::Discard, slog::o!()),
        };
        for id in voters {
            cluster.start(id);
        }
        cluster
    }

    fn start(&mut self, id: u64) {
        let dir = self.dir.path().join(id.to_string());
        let node = QuorumNode::open(&dir, id, &self.voters, &self.logger).expect("opens");
        self.nodes.insert(id, Some(node));
        // A restarted state machine starts empty and is rebuilt from the snapshot and log.
        self.applied.insert(id, Vec::new());
    }

    fn crash(&mut self, id: u64) {
        self.nodes.insert(id, None);
    }

    fn node(&mut self, id: u64) -> &mut QuorumNode {
        self.nodes
            .get_mut(&id)
            .and_then(Option::as_mut)
            .expect("a running voter")
    }

    /// Every running voter handles its ready state; what it commits is applied.
    fn process(&mut self) {
        for (&id, node) in self.nodes.iter_mut() {
            let Some(node) = node else { continue };
            node.process_ready().expect("ready");
            self.in_flight.extend(node.take_messages());
            let applied = self.applied.get_mut(&id).expect("state machine");
            for committed in node.take_committed() {
                match committed {
                    Committed::Entry { index, data, .. } => {
                        if let Some(&(last, _)) = applied.last() {
                            assert!(index > last, "voter {id} applied {index} after {last}");
                        }
                        applied.push((index, data));
                    }
                    Committed::Snapshot { index, data } => {
                        let state: Applied = serde_json::from_slice(&data).expect("snapshot");
                        assert!(
                            state.last().map_or(0, |(i, _)| *i) <= index,
                            "snapshot past its index"
                        );
                        *applied = state;
                        *self.snapshots_installed.entry(id).or_default() += 1;
                    }
                }
            }
        }
    }

    /// Delivers the messages in flight (dropped or reordered as configured); returns
    /// whether any was delivered.
    fn deliver(&mut self) -> bool {
        let mut batch: Vec<Message> = self.in_flight.drain(..).collect();
        if self.reorder {
            batch.shuffle(&mut self.rng);
        }
        let mut delivered = false;
        for message in batch {
            let severed = self.cut.contains(&message.from) || self.cut.contains(&message.to);
            if severed || self.rng.gen_bool(self.drop_rate) {
                continue;
            }
            if let Some(Some(node)) = self.nodes.get_mut(&message.to) {
                // A stale or unexpected message is the library's to refuse.
                let _ = node.step(message);
                delivered = true;
            }
        }
        delivered
    }

    /// Runs `ticks` ticks, letting messages settle after each.
    fn run(&mut self, ticks: usize) {
        for _ in 0..ticks {
            for node in self.nodes.values_mut().flatten() {
                node.tick();
            }
            self.settle();
        }
    }

    fn settle(&mut self) {
        for _ in 0..50 {
            self.process();
            if !self.deliver() && self.in_flight.is_empty() {
                break;
            }
        }
        self.process();
    }

    /// The running leader of the highest term, after up to `ticks` ticks.
    fn leader_within(&mut self, ticks: usize) -> u64 {
        for _ in 0..ticks {
            let leader = self
                .nodes
                .values()
                .flatten()
                .filter(|node| node.is_leader() && !self.cut.contains(&node.id()))
                .max_by_key(|node| node.term())
                .map(QuorumNode::id);
            if let Some(leader) = leader {
                return leader;
            }
            self.run(1);
        }
        panic!("no leader within {ticks} ticks");
    }

    fn propose(&mut self, data: &str) -> ProposalId {
        let leader = self.leader_within(20 * ELECTION_TICKS);
        let id = self
            .node(leader)
            .propose(data.as_bytes().to_vec())
            .expect("leader proposes");
        self.settle();
        id
    }

    fn records(&self, id: u64) -> Vec<String> {
        self.applied[&id]
            .iter()
            .map(|(_, data)| String::from_utf8(data.clone()).expect("utf-8"))
            .collect()
    }

    /// No two voters disagree on an index both applied.
    fn check_agreement(&self) {
        let mut by_index: BTreeMap<u64, &[u8]> = BTreeMap::new();
        for (id, applied) in &self.applied {
            for (index, data) in applied {
                let first = by_index.entry(*index).or_insert(data);
                assert_eq!(*first, data.as_slice(), "voter {id} disagrees at {index}");
            }
        }
    }

    fn check_all_applied(&self, expected: &[String]) {
        self.check_agreement();
        for (&id, node) in &self.nodes {
            if node.is_some() {
                assert_eq!(self.records(id), expected, "voter {id}");
            }
        }
    }

    /// The state machine of `id` as snapshot data.
    fn snapshot_of(&self, id: u64) -> (u64, Vec<u8>) {
        let applied = &self.applied[&id];
        let index = applied.last().map_or(0, |(index, _)| *index);
        (index, serde_json::to_vec(applied).expect("serializes"))
    }
}

fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn a_leader_is_elected_and_what_it_commits_reaches_every_voter() {
    let mut cluster = Cluster::new(3, 1);
    let records = names("r", 20);
    for record in &records {
        cluster.propose(record);
    }
    cluster.run(5);
    cluster.check_all_applied(&records);
}

#[test]
fn a_single_voter_is_its_own_quorum() {
    let mut cluster = Cluster::new(1, 2);
    let records = names("solo", 5);
    for record in &records {
        cluster.propose(record);
    }
    cluster.check_all_applied(&records);
}

#[test]
fn a_lagging_voter_catches_up() {
    let mut cluster = Cluster::new(3, 3);
    let leader = cluster.leader_within(200);
    let lagging = cluster
        .voters
        .iter()
        .copied()
        .find(|&id| id != leader)
        .expect("a follower");
    cluster.cut.insert(lagging);
    let records = names("r", 50);
    for record in &records {
        cluster.propose(record);
    }
    assert!(cluster.records(lagging).len() < records.len());
    cluster.cut.clear();
    cluster.run(10);
    cluster.check_all_applied(&records);
}

#[test]
fn a_restarted_voter_resumes_from_its_files_and_applies_each_record_once() {
    let mut cluster = Cluster::new(3, 4);
    let mut records = names("before", 10);
    for record in &records {
        cluster.propose(record);
    }
    let leader = cluster.leader_within(200);
    let restarted = cluster
        .voters
        .iter()
        .copied()
        .find(|&id| id != leader)
        .expect("a follower");
    cluster.crash(restarted);
    for record in names("while-down", 10) {
        cluster.propose(&record);
        records.push(record);
    }
    cluster.start(restarted);
    cluster.run(10);
    cluster.check_all_applied(&records);
    // The whole cluster restarts: every voter rebuilds the same state from its files.
    for id in cluster.voters.clone() {
        cluster.crash(id);
        cluster.start(id);
    }
    for record in names("after", 3) {
        cluster.propose(&record);
        records.push(record);
    }
    cluster.run(5);
    cluster.check_all_applied(&records);
}

#[test]
fn a_partitioned_leader_steps_down_and_its_uncommitted_proposal_is_lost() {
    let mut cluster = Cluster::new(3, 5);
    let mut records = names("r", 5);
    for record in &records {
        cluster.propose(record);
    }
    let old = cluster.leader_within(200);
    let old_term = cluster.node(old).term();
    cluster.cut.insert(old);
    let lost = cluster
        .node(old)
        .propose(b"lost".to_vec())
        .expect("still thinks it leads");
    cluster.run(3 * ELECTION_TICKS);
    assert!(
        !cluster.node(old).is_leader(),
        "check-quorum: a leader without a quorum steps down"
    );
    let new = cluster.leader_within(20 * ELECTION_TICKS);
    assert_ne!(new, old);
    assert!(cluster.node(new).term() > old_term);
    for record in names("new", 5) {
        cluster.propose(&record);
        records.push(record);
    }
    cluster.cut.clear();
    cluster.run(10);
    cluster.check_all_applied(&records);
    // The lost proposal's index holds another term's entry everywhere.
    let at_index = cluster.applied[&old]
        .iter()
        .find(|(index, _)| *index == lost.index);
    assert_ne!(
        at_index.map(|(_, data)| data.as_slice()),
        Some(&b"lost"[..])
    );
    // Pre-vote: the healed node did not depose the new leader by campaigning.
    assert!(cluster.node(new).is_leader());
}

#[test]
fn a_voter_far_behind_is_sent_a_snapshot() {
    let mut cluster = Cluster::new(3, 6);
    let leader = cluster.leader_within(200);
    let behind = cluster
        .voters
        .iter()
        .copied()
        .find(|&id| id != leader)
        .expect("a follower");
    cluster.cut.insert(behind);
    let records = names("r", 30);
    for record in &records {
        cluster.propose(record);
    }
    for id in cluster.voters.clone() {
        if id == behind {
            continue;
        }
        let (index, data) = cluster.snapshot_of(id);
        cluster.node(id).compact(index, data).expect("compacts");
    }
    cluster.cut.clear();
    cluster.run(20);
    cluster.check_all_applied(&records);
    assert!(
        cluster
            .snapshots_installed
            .get(&behind)
            .copied()
            .unwrap_or(0)
            >= 1
    );
    // The snapshot is durable: restarted, the voter starts from it.
    cluster.crash(behind);
    cluster.start(behind);
    cluster.run(5);
    cluster.check_all_applied(&records);
}

#[test]
fn dropped_and_reordered_messages_lose_nothing_committed() {
    let mut cluster = Cluster::new(3, 7);
    cluster.drop_rate = 0.2;
    cluster.reorder = true;
    let mut proposals = Vec::new();
    for record in names("r", 40) {
        let leader = cluster.leader_within(50 * ELECTION_TICKS);
        if let Ok(id) = cluster.node(leader).propose(record.clone().into_bytes()) {
            proposals.push((id, record));
        }
        cluster.run(1);
        cluster.check_agreement();
    }
    cluster.drop_rate = 0.0;
    cluster.run(30);
    cluster.check_agreement();
    // Every voter applied the same records, and every proposal committed at its own
    // index and term is among them.
    let reference = cluster.records(1);
    for id in cluster.voters.clone() {
        assert_eq!(cluster.records(id), reference, "voter {id}");
    }
    let applied: BTreeSet<(u64, &[u8])> = cluster.applied[&1]
        .iter()
        .map(|(index, data)| (*index, data.as_slice()))
        .collect();
    let committed = proposals
        .iter()
        .filter(|(id, record)| applied.contains(&(id.index, record.as_bytes())))
        .count();
    assert!(committed > 0, "something committed under a lossy network");
}
