//! The quorum thread: one voter's [`QuorumNode`] driven on a thread of its own, with the
//! network of [`super::transport`]. Its log's fdatasyncs block only this thread, never a
//! shard; shards talk to it through channels (`flume`, usable from glommio tasks and from
//! plain threads alike).
//!
//! The loop: wait for the next input or the next tick, whichever comes first; hand a
//! message to the library, a proposal to the leader, a tick to the clock; then process what
//! the library has ready (persist, fsync, release messages) and pass on what was committed.
//!
//! Invariants: the node is touched by this thread only; messages leave only after
//! `process_ready` has made what they acknowledge durable (see `QuorumNode`); committed
//! entries are passed on in log order, once each; a failed write of the Raft log stops the
//! voter (it may have acknowledged nothing it did not persist, but cannot go on without
//! its log) and its status says why.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use super::directories::VoterDirectories;
use super::node::{Committed, ProposalId, QuorumError, QuorumNode};
use super::transport::{Inbound, Membership, Transport};
use super::wire::Frame;

/// Kafka's KRaft waits 1–2 s for a leader's word before it campaigns; with
/// `ELECTION_TICKS` of this interval, so does this quorum.
pub const TICK: Duration = Duration::from_millis(100);

/// What one voter runs with.
#[derive(Clone, Debug)]
pub struct QuorumConfig {
    /// Where the voter's Raft log and snapshot live.
    pub dir: PathBuf,
    pub membership: Membership,
    pub tick: Duration,
}

/// Where the quorum stands, as this voter sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    /// The highest index known committed (the metadata log's high watermark).
    pub commit_index: u64,
    /// The last index of this voter's log.
    pub last_index: u64,
    /// On the leader: each voter with the index its log is known to match; elsewhere each
    /// voter with `None`.
    pub voters: Vec<(u64, Option<u64>)>,
    /// The last index handed out as committed.
    pub applied_index: u64,
    /// Bytes of this voter's log since its last snapshot.
    pub log_bytes: u64,
    /// This voter leads and has handed out everything committed before its term: it may
    /// act as the active controller.
    pub active: bool,
    /// Set once the voter stopped on a failure of its log.
    pub failed: Option<String>,
    /// The voters whose own end closed their last connection to this one, and that have
    /// none now, with since when.
    pub disconnected: Vec<(u64, Instant)>,
    /// The directory id each voter speaks from, where known (this voter's own always).
    pub directories: BTreeMap<u64, String>,
}

/// A request for this voter's controller: forwarded by another voter for its active
/// controller, or sent by a Kafka client of the controller listener; answered with
/// [`Quorum::reply`].
#[derive(Debug)]
pub struct ForwardRequest {
    /// The voter that forwarded it; `None` for a Kafka client.
    pub from: Option<u64>,
    pub body: Vec<u8>,
    pub reply_to: ReplyTo,
}

/// Where the answer to a [`ForwardRequest`] goes.
#[derive(Debug)]
pub enum ReplyTo {
    /// Request `id` of voter `to`, answered in a `Forwarded` frame.
    Voter { to: u64, id: u64 },
    /// A Kafka client's connection, which writes the answer (or closes, if it is empty).
    Client(flume::Sender<Vec<u8>>),
}

type Done = flume::Sender<Result<(), QuorumError>>;
type ForwardReply = flume::Sender<Result<Vec<u8>, String>>;

enum Input {
    Inbound(Inbound),
    Propose {
        data: Vec<u8>,
        reply: flume::Sender<Result<ProposalId, QuorumError>>,
        /// Told once the proposal is committed, or lost to another leader's entry.
        done: Option<Done>,
    },
    Forward {
        body: Vec<u8>,
        reply: ForwardReply,
    },
    Reply {
        to: u64,
        id: u64,
        result: Result<Vec<u8>, String>,
    },
    Compact {
        index: u64,
        data: Vec<u8>,
    },
    Status(flume::Sender<QuorumStatus>),
    Stop,
}

impl From<Inbound> for Input {
    fn from(inbound: Inbound) -> Input {
        Input::Inbound(inbound)
    }
}

/// A running voter.
pub struct Quorum {
    input: flume::Sender<Input>,
    committed: flume::Receiver<Committed>,
    requests: flume::Receiver<ForwardRequest>,
    thread: Option<JoinHandle<()>>,
}

/// A cheap handle to propose and forward through a running voter, for futures that must
/// not borrow the [`Quorum`].
#[derive(Clone)]
pub struct Proposer {
    input: flume::Sender<Input>,
}

impl Proposer {
    /// Proposes `data` and resolves once it is committed: `NotLeader` if this voter does
    /// not lead, an error if another leader's entry took its place.
    pub async fn commit(&self, data: Vec<u8>) -> Result<(), QuorumError> {
        let (reply, answer) = flume::bounded(1);
        let (done, committed) = flume::bounded(1);
        let propose = Input::Propose {
            data,
            reply,
            done: Some(done),
        };
        self.input.send(propose).map_err(|_| stopped())?;
        answer.recv_async().await.map_err(|_| stopped())??;
        committed.recv_async().await.map_err(|_| stopped())?
    }

    /// Sends `body` to the leader's active controller and resolves with its answer; an
    /// error if no other voter leads, or the leader changed before it answered.
    pub async fn forward(&self, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let (reply, answer) = flume::bounded(1);
        self.input
            .send(Input::Forward { body, reply })
            .map_err(|_| "the quorum thread has stopped".to_string())?;
        answer
            .recv_async()
            .await
            .map_err(|_| "the quorum thread has stopped".to_string())?
    }
}

impl Quorum {
    /// Opens the voter's state in `config.dir` and starts its thread, accepting peers on
    /// `listener` (the controller listener).
    pub fn start(config: QuorumConfig, listener: TcpListener) -> Result<Quorum, QuorumError> {
        let (input, inputs) = flume::unbounded();
        let (committed_tx, committed) = flume::unbounded();
        let (requests_tx, requests) = flume::unbounded();
        std::fs::create_dir_all(&config.dir)?;
        let directories = Arc::new(VoterDirectories::open(
            config.dir.join("voter-directories"),
        )?);
        let transport = Transport::start(
            config.membership.clone(),
            directories.clone(),
            listener,
            input.clone(),
        )?;
        // The node holds `Rc`s: it is opened, and lives, on its thread.
        let (opened_tx, opened) = flume::bounded(1);
        let thread = std::thread::Builder::new()
            .name("quorum".into())
            .spawn(move || {
                let voters: Vec<u64> = config.membership.voters.keys().copied().collect();
                let id = config.membership.local.node_id;
                let logger = slog::Logger::root(slog::Discard, slog::o!());
                match QuorumNode::open(&config.dir, id, &voters, &logger) {
                    Ok(node) => {
                        let _ = opened_tx.send(Ok(()));
                        let outputs = Outputs {
                            transport,
                            directories,
                            local_directory: config.membership.local.directory_id.clone(),
                            committed: committed_tx,
                            requests: requests_tx,
                        };
                        let driven = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            drive(node, outputs, inputs, config.tick)
                        }));
                        if driven.is_err() {
                            // raft-rs panics where its state is beyond repair (a log that
                            // lost what it acknowledged): a node that cannot follow the
                            // metadata log must not go on serving from a stale image.
                            tracing::error!("the metadata quorum failed; the node stops");
                            std::process::abort();
                        }
                    }
                    Err(error) => {
                        let _ = opened_tx.send(Err(error));
                        transport.stop();
                    }
                }
            })?;
        opened.recv().map_err(|_| stopped())??;
        Ok(Quorum {
            input,
            committed,
            requests,
            thread: Some(thread),
        })
    }

    /// Proposes `data`: its place in the log, or `NotLeader` with the leader this voter
    /// knows of. Blocks the caller for a round trip to the quorum thread (no disk wait).
    pub fn propose(&self, data: Vec<u8>) -> Result<ProposalId, QuorumError> {
        let (reply, answer) = flume::bounded(1);
        self.send(Input::Propose {
            data,
            reply,
            done: None,
        })?;
        answer.recv().map_err(|_| stopped())?
    }

    pub fn proposer(&self) -> Proposer {
        Proposer {
            input: self.input.clone(),
        }
    }

    /// Requests other voters forwarded to this one's active controller.
    pub fn requests(&self) -> &flume::Receiver<ForwardRequest> {
        &self.requests
    }

    /// Answers a request for this voter's controller.
    pub fn reply(&self, reply_to: ReplyTo, answer: Vec<u8>) {
        match reply_to {
            ReplyTo::Voter { to, id } => {
                let _ = self.send(Input::Reply {
                    to,
                    id,
                    result: Ok(answer),
                });
            }
            ReplyTo::Client(connection) => {
                let _ = connection.send(answer);
            }
        }
    }

    /// Compacts the voter's log up to `index`, whose state machine state is `data`.
    pub fn compact(&self, index: u64, data: Vec<u8>) -> Result<(), QuorumError> {
        self.send(Input::Compact { index, data })
    }

    /// Where the quorum stands; `None` once the thread is gone.
    pub fn status(&self) -> Option<QuorumStatus> {
        let (reply, answer) = flume::bounded(1);
        self.send(Input::Status(reply)).ok()?;
        answer.recv().ok()
    }

    pub async fn status_async(&self) -> Option<QuorumStatus> {
        let (reply, answer) = flume::bounded(1);
        self.send(Input::Status(reply)).ok()?;
        answer.recv_async().await.ok()
    }

    /// What the voter committed, in log order, once each (a snapshot replaces all state
    /// before it).
    pub fn committed(&self) -> &flume::Receiver<Committed> {
        &self.committed
    }

    fn send(&self, input: Input) -> Result<(), QuorumError> {
        self.input.send(input).map_err(|_| stopped())
    }
}

impl Drop for Quorum {
    /// Stops the thread and its network, and waits for them.
    fn drop(&mut self) {
        let _ = self.input.send(Input::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn stopped() -> QuorumError {
    QuorumError::Io(std::io::Error::other("the quorum thread has stopped"))
}

struct Outputs {
    transport: Transport,
    /// The directory other voters speak from, and this voter's own.
    directories: Arc<VoterDirectories>,
    local_directory: String,
    committed: flume::Sender<Committed>,
    requests: flume::Sender<ForwardRequest>,
}

/// What the loop keeps besides the node: who waits for what.
#[derive(Default)]
struct Waiting {
    /// Proposals by index, with the term they were proposed in.
    proposals: BTreeMap<u64, (u64, Done)>,
    /// Requests forwarded to the leader, by id, with the leader they went to.
    forwards: BTreeMap<u64, (u64, ForwardReply)>,
    next_forward_id: u64,
}

impl Waiting {
    /// Tells every proposal at or below what was handed out whether its entry made it.
    fn settle_proposals(&mut self, node: &QuorumNode) {
        let applied = node.applied_index();
        while let Some(entry) = self.proposals.first_entry() {
            if *entry.key() > applied {
                break;
            }
            let index = *entry.key();
            let (term, done) = entry.remove();
            // An entry replaced by another leader's is a proposal of a deposed leader: what
            // its proposer hears is that it no longer leads (not a failure of the log).
            let result = if node.term_at(index).is_none_or(|t| t == term) {
                Ok(())
            } else {
                Err(QuorumError::NotLeader {
                    leader: node.leader(),
                })
            };
            let _ = done.send(result);
        }
    }

    /// Fails forwarded requests whose leader is no longer the leader, and forgets those
    /// whose caller stopped waiting (a bounded wait ran out: its frame may have been lost).
    fn settle_forwards(&mut self, leader: Option<u64>) {
        self.forwards.retain(|_, (to, reply)| {
            if reply.is_disconnected() {
                return false;
            }
            let keep = Some(*to) == leader;
            if !keep {
                let _ = reply.send(Err(format!("voter {to} stopped leading")));
            }
            keep
        });
    }
}

/// The connections other voters opened to this one: how many each has open (an old one
/// may end after its replacement opened), and since when each voter whose last connection
/// its own end closed has none. A connection that went silent (a follower has nothing to
/// say to another follower) or that this end refused says nothing of the peer's life.
#[derive(Default)]
struct Connections {
    open: BTreeMap<u64, usize>,
    lost_since: BTreeMap<u64, Instant>,
}

impl Connections {
    fn opened(&mut self, voter: u64) {
        *self.open.entry(voter).or_default() += 1;
        self.lost_since.remove(&voter);
    }

    fn closed(&mut self, voter: u64, by_peer: bool) {
        let open = self.open.entry(voter).or_default();
        *open = open.saturating_sub(1);
        if *open == 0 && by_peer {
            self.lost_since.insert(voter, Instant::now());
        }
    }
}

fn drive(mut node: QuorumNode, out: Outputs, inputs: flume::Receiver<Input>, tick: Duration) {
    let mut next_tick = Instant::now() + tick;
    let mut failed: Option<String> = None;
    let mut waiting = Waiting::default();
    let mut connections = Connections::default();
    loop {
        let input = match inputs.recv_deadline(next_tick) {
            Ok(input) => Some(input),
            Err(flume::RecvTimeoutError::Timeout) => None,
            Err(flume::RecvTimeoutError::Disconnected) => break,
        };
        // Ticks keep time even while inputs never stop coming.
        while failed.is_none() && Instant::now() >= next_tick {
            node.tick();
            next_tick += tick;
        }
        match input {
            None => {}
            Some(Input::Stop) => break,
            Some(Input::Status(reply)) => {
                let _ = reply.send(status(&node, failed.clone(), &connections, &out));
                continue;
            }
            Some(Input::Inbound(Inbound::Connected { from })) => {
                connections.opened(from);
                continue;
            }
            Some(Input::Inbound(Inbound::Closed { from, by_peer })) => {
                connections.closed(from, by_peer);
                continue;
            }
            Some(Input::Reply { to, id, result }) => {
                out.transport
                    .send_frame(to, &Frame::Forwarded { id, result });
                continue;
            }
            Some(_) if failed.is_some() => continue,
            Some(Input::Inbound(Inbound::Raft(message))) => {
                if let Err(error) = node.step(message) {
                    tracing::debug!(%error, "quorum message refused");
                }
            }
            Some(Input::Inbound(Inbound::Forward { from, id, body })) => {
                let reply_to = ReplyTo::Voter { to: from, id };
                let _ = out.requests.send(ForwardRequest {
                    from: Some(from),
                    body,
                    reply_to,
                });
                continue;
            }
            Some(Input::Inbound(Inbound::Request { body, reply })) => {
                let reply_to = ReplyTo::Client(reply);
                let _ = out.requests.send(ForwardRequest {
                    from: None,
                    body,
                    reply_to,
                });
                continue;
            }
            Some(Input::Inbound(Inbound::Forwarded { id, result })) => {
                if let Some((_, reply)) = waiting.forwards.remove(&id) {
                    let _ = reply.send(result);
                }
                continue;
            }
            Some(Input::Forward { body, reply }) => {
                match node.leader().filter(|&leader| leader != node.id()) {
                    Some(leader) => {
                        let id = waiting.next_forward_id;
                        waiting.next_forward_id += 1;
                        waiting.forwards.insert(id, (leader, reply));
                        out.transport
                            .send_frame(leader, &Frame::Forward { id, body });
                    }
                    None => {
                        let _ = reply.send(Err("no other voter leads".into()));
                    }
                }
                continue;
            }
            Some(Input::Propose { data, reply, done }) => {
                let proposed = node.propose(data);
                if let (Ok(id), Some(done)) = (&proposed, done) {
                    waiting.proposals.insert(id.index, (id.term, done));
                }
                let _ = reply.send(proposed);
            }
            Some(Input::Compact { index, data }) => {
                // Only what this voter handed out can be in the state it is given.
                if index > node.applied_index() {
                    tracing::warn!(index, "a snapshot past what was applied is refused");
                } else if let Err(error) = node.compact(index, data) {
                    tracing::warn!(%error, "compacting the metadata log");
                }
            }
        }
        if failed.is_some() {
            continue;
        }
        if let Err(error) = node.process_ready() {
            tracing::error!(%error, "the metadata log failed: this voter stops");
            failed = Some(error.to_string());
            continue;
        }
        for message in node.take_messages() {
            out.transport.send(&message);
        }
        // Entries go out before their proposers hear of them: a proposer that learns its
        // proposal committed finds it among the committed entries.
        for entry in node.take_committed() {
            let _ = out.committed.send(entry);
        }
        waiting.settle_proposals(&node);
        waiting.settle_forwards(node.leader());
    }
    out.transport.stop();
}

fn status(
    node: &QuorumNode,
    failed: Option<String>,
    connections: &Connections,
    out: &Outputs,
) -> QuorumStatus {
    let mut directories = out.directories.known();
    directories.insert(node.id(), out.local_directory.clone());
    let progress = node.voter_progress();
    let voters = if progress.is_empty() {
        node.voters().into_iter().map(|id| (id, None)).collect()
    } else {
        progress
            .into_iter()
            .map(|(id, matched)| (id, Some(matched)))
            .collect()
    };
    QuorumStatus {
        node_id: node.id(),
        leader: node.leader(),
        term: node.term(),
        commit_index: node.commit_index(),
        last_index: node.last_index(),
        voters,
        applied_index: node.applied_index(),
        log_bytes: node.log_bytes(),
        active: node.is_active_leader(),
        failed,
        disconnected: connections
            .lost_since
            .iter()
            .map(|(&voter, &since)| (voter, since))
            .collect(),
        directories,
    }
}

#[cfg(test)]
mod connection_tests {
    use super::Connections;

    #[test]
    fn a_voter_is_disconnected_once_its_end_closed_its_last_connection() {
        let mut connections = Connections::default();
        connections.opened(2);
        connections.opened(2);
        connections.closed(2, true);
        assert!(connections.lost_since.is_empty(), "a newer one is open");
        connections.closed(2, true);
        assert!(connections.lost_since.contains_key(&2));
        connections.opened(2);
        assert!(connections.lost_since.is_empty(), "back");
        connections.opened(3);
        connections.closed(3, false);
        assert!(
            connections.lost_since.is_empty(),
            "silence or a refusal says nothing of the peer's life"
        );
    }
}

#[cfg(test)]
mod forward_tests {
    use super::Waiting;

    #[test]
    fn forwards_are_failed_when_their_leader_goes_and_forgotten_when_their_caller_does() {
        let mut waiting = Waiting::default();
        let (to_gone, gone_answer) = flume::bounded(1);
        let (to_waiting, waiting_answer) = flume::bounded(1);
        let (to_deposed, deposed_answer) = flume::bounded(1);
        waiting.forwards.insert(1, (2, to_gone));
        waiting.forwards.insert(2, (2, to_waiting));
        waiting.forwards.insert(3, (3, to_deposed));
        // The first caller's bounded wait ran out: nobody will read its answer.
        drop(gone_answer);
        waiting.settle_forwards(Some(2));
        assert_eq!(waiting.forwards.keys().copied().collect::<Vec<_>>(), [2]);
        assert!(
            waiting_answer.try_recv().is_err(),
            "still waiting for voter 2"
        );
        assert_eq!(
            deposed_answer.try_recv().expect("answered"),
            Err("voter 3 stopped leading".to_string())
        );
    }
}
