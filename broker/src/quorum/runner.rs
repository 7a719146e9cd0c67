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
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use raft::eraftpb::Message;

use super::node::{Committed, ProposalId, QuorumError, QuorumNode};
use super::transport::{Membership, Transport};

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
    /// Set once the voter stopped on a failure of its log.
    pub failed: Option<String>,
}

enum Input {
    Raft(Message),
    Propose {
        data: Vec<u8>,
        reply: flume::Sender<Result<ProposalId, QuorumError>>,
    },
    Compact {
        index: u64,
        data: Vec<u8>,
    },
    Status(flume::Sender<QuorumStatus>),
    Stop,
}

impl From<Message> for Input {
    fn from(message: Message) -> Input {
        Input::Raft(message)
    }
}

/// A running voter.
pub struct Quorum {
    input: flume::Sender<Input>,
    committed: flume::Receiver<Committed>,
    thread: Option<JoinHandle<()>>,
}

impl Quorum {
    /// Opens the voter's state in `config.dir` and starts its thread, accepting peers on
    /// `listener` (the controller listener).
    pub fn start(config: QuorumConfig, listener: TcpListener) -> Result<Quorum, QuorumError> {
        let (input, inputs) = flume::unbounded();
        let (committed_tx, committed) = flume::unbounded();
        let transport = Transport::start(config.membership.clone(), listener, input.clone())?;
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
                        drive(node, transport, inputs, committed_tx, config.tick);
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
            thread: Some(thread),
        })
    }

    /// Proposes `data`: its place in the log, or `NotLeader` with the leader this voter
    /// knows of. Blocks the caller for a round trip to the quorum thread (no disk wait).
    pub fn propose(&self, data: Vec<u8>) -> Result<ProposalId, QuorumError> {
        let (reply, answer) = flume::bounded(1);
        self.send(Input::Propose { data, reply })?;
        answer.recv().map_err(|_| stopped())?
    }

    /// `propose` for a task: awaits the quorum thread's answer instead of blocking.
    pub async fn propose_async(&self, data: Vec<u8>) -> Result<ProposalId, QuorumError> {
        let (reply, answer) = flume::bounded(1);
        self.send(Input::Propose { data, reply })?;
        answer.recv_async().await.map_err(|_| stopped())?
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

fn drive(
    mut node: QuorumNode,
    transport: Transport,
    inputs: flume::Receiver<Input>,
    committed: flume::Sender<Committed>,
    tick: Duration,
) {
    let mut next_tick = Instant::now() + tick;
    let mut failed: Option<String> = None;
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
                let _ = reply.send(status(&node, failed.clone()));
                continue;
            }
            Some(_) if failed.is_some() => continue,
            Some(Input::Raft(message)) => {
                if let Err(error) = node.step(message) {
                    tracing::debug!(%error, "quorum message refused");
                }
            }
            Some(Input::Propose { data, reply }) => {
                let _ = reply.send(node.propose(data));
            }
            Some(Input::Compact { index, data }) => {
                if let Err(error) = node.compact(index, data) {
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
            transport.send(&message);
        }
        for entry in node.take_committed() {
            let _ = committed.send(entry);
        }
    }
    transport.stop();
}

fn status(node: &QuorumNode, failed: Option<String>) -> QuorumStatus {
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
        failed,
    }
}
