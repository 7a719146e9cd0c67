//! The quorum over real sockets: three voters on loopback ports in one process, each on its
//! own quorum thread with its own files. They elect a leader, replicate proposals in order,
//! survive the loss of the leader, take a restarted voter back, refuse a peer of another
//! cluster and a voter whose directory was wiped, and hand on a Kafka client's requests on
//! the controller listener. Every wait is bounded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use super::runner::{Quorum, QuorumConfig, ReplyTo};
use super::transport::{Membership, CLIENTS_MAX, CLIENT_REQUEST_BYTES_MAX};
use super::wire::{self, Frame, Hello, WireMessage};
use super::Committed;

/// Ticks of 20 ms: elections in well under a second.
const TICK: Duration = Duration::from_millis(20);
const WAIT: Duration = Duration::from_secs(20);
const CLUSTER: &str = "socket-tests-cluster";

struct Voters {
    dir: tempfile::TempDir,
    addresses: BTreeMap<u64, SocketAddr>,
    running: BTreeMap<u64, Quorum>,
    /// What each voter applied, in order: (index, data).
    applied: BTreeMap<u64, Vec<(u64, Vec<u8>)>>,
    /// Voters started from a new directory (their old one wiped).
    wiped: BTreeMap<u64, String>,
}

fn hello(id: u64) -> Hello {
    Hello {
        cluster_id: CLUSTER.into(),
        node_id: id,
        directory_id: format!("dir-{id}"),
    }
}

impl Voters {
    fn start_all(count: u64) -> Voters {
        let mut listeners = BTreeMap::new();
        for id in 1..=count {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            listeners.insert(id, listener);
        }
        let addresses = listeners
            .iter()
            .map(|(&id, l)| (id, l.local_addr().expect("address")))
            .collect();
        let mut voters = Voters {
            dir: tempfile::tempdir().expect("tmp"),
            addresses,
            running: BTreeMap::new(),
            applied: BTreeMap::new(),
            wiped: BTreeMap::new(),
        };
        for (id, listener) in listeners {
            voters.start_on(id, listener);
        }
        voters
    }

    fn config(&self, id: u64) -> QuorumConfig {
        QuorumConfig {
            dir: self.dir.path().join(id.to_string()),
            membership: Membership {
                local: Hello {
                    directory_id: self
                        .wiped
                        .get(&id)
                        .cloned()
                        .unwrap_or(hello(id).directory_id),
                    ..hello(id)
                },
                voters: self.addresses.clone(),
            },
            tick: TICK,
        }
    }

    /// Stops voter `id`, wipes its files, and starts it again from a new directory.
    fn wipe(&mut self, id: u64) {
        self.stop(id);
        std::fs::remove_dir_all(self.dir.path().join(id.to_string())).expect("wipe");
        self.wiped.insert(id, format!("dir-{id}-new"));
        self.restart(id);
    }

    fn start_on(&mut self, id: u64, listener: TcpListener) {
        let quorum = Quorum::start(self.config(id), listener).expect("starts");
        self.running.insert(id, quorum);
        // A restarted state machine is rebuilt from the log.
        self.applied.insert(id, Vec::new());
    }

    fn restart(&mut self, id: u64) {
        let listener = bind_again(self.addresses[&id]);
        self.start_on(id, listener);
    }

    fn stop(&mut self, id: u64) {
        self.running.remove(&id);
    }

    /// Applies what every running voter committed since the last call.
    fn drain(&mut self) {
        for (id, quorum) in &self.running {
            let applied = self.applied.get_mut(id).expect("state");
            for committed in quorum.committed().try_iter() {
                match committed {
                    Committed::Entry { index, data, .. } => {
                        if let Some(&(last, _)) = applied.last() {
                            assert!(index > last, "voter {id} applied {index} after {last}");
                        }
                        applied.push((index, data));
                    }
                    Committed::Snapshot { .. } => panic!("no snapshot was taken"),
                }
            }
        }
    }

    /// The leader every running voter agrees on.
    fn wait_for_leader(&mut self) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let leaders: Vec<Option<u64>> = self
                .running
                .values()
                .map(|q| q.status().and_then(|s| s.leader))
                .collect();
            if let Some(Some(leader)) = leaders.first().copied() {
                if leaders.iter().all(|l| *l == Some(leader)) && self.running.contains_key(&leader)
                {
                    return leader;
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Proposes `data` through whoever leads, retrying across elections.
    fn propose(&mut self, data: Vec<u8>) {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.wait_for_leader();
            if self.running[&leader].propose(data.clone()).is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "no leader took the proposal");
        }
    }

    /// Waits until every running voter applied `count` entries of data.
    fn wait_applied(&mut self, count: usize) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.drain();
            let done = self
                .running
                .keys()
                .all(|id| self.applied[id].len() >= count);
            if done {
                return;
            }
            let counts: Vec<usize> = self.applied.values().map(Vec::len).collect();
            assert!(Instant::now() < deadline, "applied {counts:?} of {count}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every pair of voters agrees on every index both applied.
    fn check_agreement(&self) {
        let mut by_index: BTreeMap<u64, &Vec<u8>> = BTreeMap::new();
        for applied in self.applied.values() {
            for (index, data) in applied {
                if let Some(other) = by_index.insert(*index, data) {
                    assert_eq!(other, data, "two values at index {index}");
                }
            }
        }
    }
}

/// Binds an address a stopped voter used; its port may linger for a moment.
fn bind_again(address: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpListener::bind(address) {
            Ok(listener) => return listener,
            Err(error) => {
                assert!(Instant::now() < deadline, "rebinding {address}: {error}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn data_of(applied: &[(u64, Vec<u8>)]) -> Vec<Vec<u8>> {
    applied.iter().map(|(_, data)| data.clone()).collect()
}

#[test]
fn three_voters_elect_a_leader_and_replicate_in_order() {
    let mut voters = Voters::start_all(3);
    let leader = voters.wait_for_leader();
    let status = voters.running[&leader].status().expect("status");
    assert_eq!(status.leader, Some(leader));
    for i in 0..100u32 {
        voters.propose(i.to_le_bytes().to_vec());
    }
    voters.wait_applied(100);
    voters.check_agreement();
    let expected: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect();
    for (id, applied) in &voters.applied {
        assert_eq!(data_of(applied), expected, "voter {id}");
    }
    // The leader knows every voter's log matches its own.
    let deadline = Instant::now() + WAIT;
    loop {
        let status = voters.running[&leader].status().expect("status");
        let matched: Vec<Option<u64>> = status.voters.iter().map(|(_, m)| *m).collect();
        if matched.iter().all(|m| *m == Some(status.last_index)) {
            assert_eq!(status.voters.len(), 3);
            assert!(status.commit_index >= 100);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "followers never caught up: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn losing_the_leader_elects_another_and_a_restarted_voter_catches_up() {
    let mut voters = Voters::start_all(3);
    for i in 0..20u32 {
        voters.propose(i.to_le_bytes().to_vec());
    }
    voters.wait_applied(20);
    let old = voters.wait_for_leader();
    voters.stop(old);
    let new = voters.wait_for_leader();
    assert_ne!(new, old);
    for i in 20..40u32 {
        voters.propose(i.to_le_bytes().to_vec());
    }
    voters.wait_applied(40);
    // Back from its files: it replays what it had and fetches what it missed.
    voters.restart(old);
    voters.wait_applied(40);
    voters.check_agreement();
    let expected: Vec<Vec<u8>> = (0..40u32).map(|i| i.to_le_bytes().to_vec()).collect();
    assert_eq!(data_of(&voters.applied[&old]), expected);
}

/// A connection to `address` that says hello as `hello` and then sends a vote request.
fn intrude(address: SocketAddr, hello: Hello, from: u64) -> bool {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut message = raft::eraftpb::Message {
        msg_type: raft::eraftpb::MessageType::MsgRequestVote,
        to: 1,
        from,
        term: 1_000,
        ..Default::default()
    };
    message.log_term = 1_000;
    message.index = 1_000;
    let _ = stream.write_all(&wire::PREAMBLE);
    let _ = stream.write_all(&wire::encode(&Frame::Hello(hello)));
    let _ = stream.write_all(&wire::encode(&Frame::Raft(Box::new(WireMessage::from(
        &message,
    )))));
    is_closed(&mut stream)
}

/// Whether the voter closes `stream` (perhaps after its own hello): the reads reach the end
/// (or a reset), where on a connection it keeps they would time out.
fn is_closed(stream: &mut TcpStream) -> bool {
    let mut bytes = [0u8; 256];
    loop {
        match stream.read(&mut bytes) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(error) => {
                return !matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

#[test]
fn garbage_and_peers_of_another_cluster_or_speaking_for_another_voter_are_refused() {
    let mut voters = Voters::start_all(3);
    for i in 0..5u32 {
        voters.propose(i.to_le_bytes().to_vec());
    }
    voters.wait_applied(5);
    let leader = voters.wait_for_leader();
    let term = voters.running[&leader].status().expect("status").term;
    let target = voters.addresses[&1];
    let foreign = Hello {
        cluster_id: "another-cluster".into(),
        ..hello(2)
    };
    assert!(
        intrude(target, foreign, 2),
        "another cluster's peer is closed"
    );
    assert!(
        intrude(target, hello(2), 3),
        "voter 2 speaking as 3 is closed"
    );
    // Garbage, a frame that claims 4 GiB, and a hello cut short are closed as well.
    for junk in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        [u32::MAX.to_le_bytes(), [0; 4]].concat(),
        [
            &wire::PREAMBLE[..],
            &wire::encode(&Frame::Hello(hello(2)))[..10],
        ]
        .concat(),
    ] {
        let mut stream = TcpStream::connect(target).expect("connect");
        // Past the 2 s a voter gives a hello to arrive whole.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream.write_all(&junk).expect("write");
        assert!(is_closed(&mut stream), "{junk:?} is closed");
    }
    // None disturbed the quorum: the huge term they carried was never taken.
    std::thread::sleep(TICK * 20);
    let after = voters.running[&leader].status().expect("status");
    assert_eq!(after.term, term, "{after:?}");
    assert_eq!(voters.wait_for_leader(), leader);
}

#[test]
fn a_voter_whose_directory_was_wiped_is_not_counted_as_its_old_self() {
    let mut voters = Voters::start_all(3);
    for i in 0..5u32 {
        voters.propose(i.to_le_bytes().to_vec());
    }
    voters.wait_applied(5);
    let leader = voters.wait_for_leader();
    let wiped = *voters
        .addresses
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    let other = *voters
        .addresses
        .keys()
        .find(|&&id| id != leader && id != wiped)
        .expect("the third");
    voters.wipe(wiped);
    // The other two go on without it (it knows no leader: nobody talks to it).
    voters.running[&leader]
        .propose(5u32.to_le_bytes().to_vec())
        .expect("still leading");
    let deadline = Instant::now() + WAIT;
    while voters.running[&leader]
        .status()
        .expect("status")
        .commit_index
        < 6
    {
        assert!(Instant::now() < deadline, "the two intact voters commit");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Alone with the wiped voter, the leader has no quorum: it steps down (check-quorum)
    // and nothing it is asked commits. Counted as its old self, the wiped voter would have
    // made a majority with it.
    voters.stop(other);
    let before = voters.running[&leader]
        .status()
        .expect("status")
        .commit_index;
    let _ = voters.running[&leader].propose(b"lost".to_vec());
    std::thread::sleep(TICK * 60);
    let status = voters.running[&leader].status().expect("status");
    assert_eq!(status.commit_index, before, "{status:?}");
    assert_ne!(status.leader, Some(leader), "{status:?}");
    assert_eq!(
        voters.running[&wiped]
            .status()
            .expect("status")
            .commit_index,
        0,
        "the wiped voter learns nothing"
    );
    // Its intact peer back, the quorum works again, still without the wiped voter.
    voters.restart(other);
    voters.stop(wiped);
    voters.propose(b"after".to_vec());
    voters.wait_applied(7);
}

#[test]
fn a_voter_with_no_peers_up_elects_nobody_and_keeps_its_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let local = listener.local_addr().expect("address");
    let mut addresses = BTreeMap::new();
    addresses.insert(1, local);
    // Peers on ports nobody listens on.
    for id in 2..=3 {
        let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
        addresses.insert(id, closed.local_addr().expect("address"));
    }
    let config = QuorumConfig {
        dir: dir.path().join("1"),
        membership: Membership {
            local: hello(1),
            voters: addresses,
        },
        tick: TICK,
    };
    let quorum = Quorum::start(config, listener).expect("starts");
    std::thread::sleep(TICK * 60);
    let status = quorum.status().expect("status");
    assert_eq!(status.leader, None, "one of three voters is no quorum");
    assert!(quorum.propose(b"x".to_vec()).is_err());
    drop(quorum);
    assert!(Path::new(&dir.path().join("1").join("wal")).exists());
}

#[test]
fn a_commit_resolves_after_its_entry_is_handed_out_and_only_on_the_leader() {
    let mut voters = Voters::start_all(3);
    let leader = voters.wait_for_leader();
    let proposer = voters.running[&leader].proposer();
    futures_lite::future::block_on(proposer.commit(b"first".to_vec())).expect("commits");
    let handed_out: Vec<Committed> = voters.running[&leader].committed().try_iter().collect();
    assert!(
        matches!(handed_out.last(), Some(Committed::Entry { data, .. }) if data == b"first"),
        "the entry is out before its commit resolves: {handed_out:?}"
    );
    let follower = *voters
        .running
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    let refused =
        futures_lite::future::block_on(voters.running[&follower].proposer().commit(b"x".to_vec()));
    assert!(
        matches!(refused, Err(super::QuorumError::NotLeader { leader: Some(l) }) if l == leader),
        "{refused:?}"
    );
}

#[test]
fn a_forwarded_request_reaches_the_leader_and_its_answer_comes_back() {
    let mut voters = Voters::start_all(3);
    let leader = voters.wait_for_leader();
    // Wait until every voter knows the leader, so the follower forwards to it.
    let follower = *voters
        .running
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    let requests = voters.running[&leader].requests().clone();
    let answered = std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            let request = requests.recv_timeout(WAIT).expect("a forwarded request");
            assert_eq!(request.from, Some(follower));
            let mut answer = request.body.clone();
            answer.reverse();
            voters.running[&leader].reply(request.reply_to, answer);
        });
        let answer = futures_lite::future::block_on(
            voters.running[&follower]
                .proposer()
                .forward(b"abc".to_vec()),
        );
        server.join().expect("server");
        answer
    });
    assert_eq!(answered, Ok(b"cba".to_vec()));
    // The leader has nobody to forward to.
    let own =
        futures_lite::future::block_on(voters.running[&leader].proposer().forward(b"abc".to_vec()));
    assert!(own.is_err());
}

/// A Kafka frame: length (i32 big-endian), then `body`.
fn kafka_frame(body: &[u8]) -> Vec<u8> {
    [&(body.len() as i32).to_be_bytes()[..], body].concat()
}

/// A connection that is not a voter's is a Kafka client's: each request reaches the
/// voter's requests as from no voter, and its answer comes back framed as Kafka frames it;
/// an empty answer, a request over the limit, and a client past the limit are closed; the
/// quorum goes on.
#[test]
fn a_kafka_clients_requests_are_handed_on_and_answered_in_kafka_frames() {
    let mut voters = Voters::start_all(3);
    let leader = voters.wait_for_leader();
    let term = voters.running[&leader].status().expect("status").term;
    let target = voters.addresses[&1];
    let requests = voters.running[&1].requests().clone();
    let quorum = &voters.running[&1];
    let mut client = TcpStream::connect(target).expect("connect");
    client.set_read_timeout(Some(WAIT)).expect("timeout");
    for body in [b"first request".to_vec(), vec![7u8; 4000]] {
        client.write_all(&kafka_frame(&body)).expect("write");
        let request = requests.recv_timeout(WAIT).expect("handed on");
        assert_eq!((request.from, &request.body), (None, &body));
        assert!(matches!(request.reply_to, ReplyTo::Client(_)));
        let mut answer = body.clone();
        answer.reverse();
        quorum.reply(request.reply_to, answer.clone());
        let mut length = [0u8; 4];
        client.read_exact(&mut length).expect("an answer");
        let mut got = vec![0u8; i32::from_be_bytes(length) as usize];
        client.read_exact(&mut got).expect("its body");
        assert_eq!(got, answer);
    }
    client
        .write_all(&kafka_frame(b"unanswerable"))
        .expect("write");
    let request = requests.recv_timeout(WAIT).expect("handed on");
    quorum.reply(request.reply_to, Vec::new());
    assert!(is_closed(&mut client), "an empty answer closes");

    let mut huge = TcpStream::connect(target).expect("connect");
    huge.set_read_timeout(Some(WAIT)).expect("timeout");
    let claimed = (CLIENT_REQUEST_BYTES_MAX + 1) as i32;
    huge.write_all(&claimed.to_be_bytes()).expect("write");
    assert!(is_closed(&mut huge), "a request over the limit closes");

    // Clients whose requests wait for their answers (held here unanswered).
    let held: Vec<_> = (0..CLIENTS_MAX)
        .map(|_| {
            let mut stream = TcpStream::connect(target).expect("connect");
            stream
                .write_all(&kafka_frame(b"held request"))
                .expect("write");
            let request = requests.recv_timeout(WAIT).expect("handed on");
            (stream, request)
        })
        .collect();
    let mut one_more = TcpStream::connect(target).expect("connect");
    one_more.set_read_timeout(Some(WAIT)).expect("timeout");
    one_more
        .write_all(&kafka_frame(b"one client too many"))
        .expect("write");
    assert!(
        is_closed(&mut one_more),
        "a client past the limit is closed"
    );
    assert!(
        requests.try_recv().is_err(),
        "and its request never handed on"
    );
    for (mut stream, request) in held {
        quorum.reply(request.reply_to, b"late".to_vec());
        let mut answer = [0u8; 8];
        stream.read_exact(&mut answer).expect("answered");
        assert_eq!(&answer[4..], b"late");
    }

    assert_eq!(voters.wait_for_leader(), leader);
    assert_eq!(voters.running[&leader].status().expect("status").term, term);
}
