//! One voter of the metadata quorum: raft-rs's `RawNode` driven as a state machine (tick,
//! step, ready, advance) by its caller, with the log kept durable by [`Wal`].
//!
//! The caller owns time and the network: it calls [`QuorumNode::tick`] every tick interval,
//! hands received messages to [`QuorumNode::step`], calls [`QuorumNode::process_ready`]
//! after either, and sends what [`QuorumNode::take_messages`] returns. Committed records
//! come out of [`QuorumNode::take_committed`] in log order, once each; a snapshot installed
//! from the leader comes out the same way, and replaces all state before it.
//!
//! Invariants: entries and the hard state are fsynced before any message that
//! acknowledges them is released (raft-rs's persisted messages); a proposal is accepted
//! only by the leader, and is known committed when an entry of its index and term is
//! committed (another term at that index means it was lost with its leader); pre-vote and
//! check-quorum are on, so a partitioned node cannot depose a healthy leader and a leader
//! that loses its quorum steps down.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use raft::eraftpb::{Entry, EntryType, Message, Snapshot};
use raft::storage::MemStorage;
use raft::{Config, GetEntriesContext, RaftState, RawNode, StateRole, Storage};

use super::wal::Wal;

/// Ticks without a leader's word before a follower campaigns (randomized up to twice this).
pub const ELECTION_TICKS: usize = 10;
pub const HEARTBEAT_TICKS: usize = 2;

/// A proposal's place in the log: committed when an entry with this index and term is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProposalId {
    pub index: u64,
    pub term: u64,
}

/// What the state machine applies, in log order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Committed {
    /// A proposed record batch, committed at `index` in `term`.
    Entry {
        index: u64,
        term: u64,
        data: Vec<u8>,
    },
    /// The state as of `index`, from the leader: replaces everything applied before.
    Snapshot { index: u64, data: Vec<u8> },
}

#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("not the leader (the leader is {leader:?})")]
    NotLeader { leader: Option<u64> },
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("raft log: {0}")]
    Io(#[from] std::io::Error),
}

/// raft-rs's in-memory storage, with the latest snapshot's data for followers far behind.
struct QuorumStorage {
    mem: MemStorage,
    snapshot: Rc<RefCell<Snapshot>>,
}

impl Storage for QuorumStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.mem.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.mem.entries(low, high, max_size, context)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        self.mem.term(index)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.mem.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.mem.last_index()
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let snapshot = self.snapshot.borrow();
        if snapshot.get_metadata().index < request_index {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(snapshot.clone())
    }
}

pub struct QuorumNode {
    raw: RawNode<QuorumStorage>,
    wal: Wal,
    mem: MemStorage,
    snapshot: Rc<RefCell<Snapshot>>,
    outbox: Vec<Message>,
    committed: Vec<Committed>,
    voters: Vec<u64>,
    /// The last index handed out by `take_committed` (empty entries included).
    applied: u64,
}

impl QuorumNode {
    /// Voter `id` of a quorum of `voters`, its state in `dir` (replayed if it exists). The
    /// state machine starts from the returned snapshot, if any, then applies what is
    /// committed after it.
    pub fn open(
        dir: &Path,
        id: u64,
        voters: &[u64],
        logger: &slog::Logger,
    ) -> Result<QuorumNode, QuorumError> {
        let replayed = Wal::open(dir, voters)?;
        let snapshot = Rc::new(RefCell::new(replayed.snapshot));
        let applied = snapshot.borrow().get_metadata().index;
        let config = Config {
            id,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            applied,
            pre_vote: true,
            check_quorum: true,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            ..Config::default()
        };
        let storage = QuorumStorage {
            mem: replayed.storage.clone(),
            snapshot: snapshot.clone(),
        };
        let raw = RawNode::new(&config, storage, logger)?;
        let mut committed = Vec::new();
        if applied > 0 {
            committed.push(Committed::Snapshot {
                index: applied,
                data: snapshot.borrow().data.to_vec(),
            });
        }
        Ok(QuorumNode {
            raw,
            wal: replayed.wal,
            mem: replayed.storage,
            snapshot,
            outbox: Vec::new(),
            committed,
            voters: voters.to_vec(),
            applied,
        })
    }

    pub fn id(&self) -> u64 {
        self.raw.raft.id
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The leader this voter knows of.
    pub fn leader(&self) -> Option<u64> {
        Some(self.raw.raft.leader_id).filter(|&id| id != raft::INVALID_ID)
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The highest index known committed.
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// The last index whose entry was handed out as committed (or skipped, if empty).
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// The term of the entry at `index`, if this voter's log still holds it.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        self.mem.term(index).ok()
    }

    /// The leader may serve as the active controller: it committed an entry of its own term,
    /// so everything earlier leaders committed is committed here too, and was handed out.
    pub fn is_active_leader(&self) -> bool {
        self.is_leader()
            && self.raw.raft.commit_to_current_term()
            && self.applied >= self.commit_index()
    }

    /// The voters of the quorum.
    pub fn voters(&self) -> Vec<u64> {
        self.voters.clone()
    }

    /// The index of the last entry in this voter's log.
    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// On the leader, how far each voter's log is known to match its own (this voter's own
    /// entry is its last index); empty elsewhere.
    pub fn voter_progress(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let own = self.id();
        let mut progress: Vec<(u64, u64)> = self
            .raw
            .raft
            .prs()
            .iter()
            .map(|(&id, pr)| {
                (
                    id,
                    if id == own {
                        self.last_index()
                    } else {
                        pr.matched
                    },
                )
            })
            .collect();
        progress.sort_unstable();
        progress
    }

    /// Bytes of log since the last snapshot.
    pub fn log_bytes(&self) -> u64 {
        self.wal.bytes()
    }

    /// Advances the logical clock by one tick.
    pub fn tick(&mut self) {
        self.raw.tick();
    }

    /// Takes a message from another voter. Messages from voters outside the quorum, or
    /// stale ones, are the library's to ignore.
    pub fn step(&mut self, message: Message) -> Result<(), QuorumError> {
        self.raw.step(message).map_err(QuorumError::from)
    }

    /// Proposes `data` (one batch of records); only the leader accepts.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<ProposalId, QuorumError> {
        if !self.is_leader() {
            return Err(QuorumError::NotLeader {
                leader: self.leader(),
            });
        }
        let id = ProposalId {
            index: self.raw.raft.raft_log.last_index() + 1,
            term: self.raw.raft.term,
        };
        self.raw.propose(Vec::new(), data)?;
        Ok(id)
    }

    /// Handles what the library has ready: persists entries, the hard state and installed
    /// snapshots (one fsync), releases messages, and collects committed entries.
    pub fn process_ready(&mut self) -> Result<(), QuorumError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        // A leader's messages may go before its own append is durable (Raft §10.2.1).
        self.outbox.extend(ready.take_messages());
        if !ready.snapshot().is_empty() {
            self.install(ready.snapshot().clone())?;
        }
        self.collect(ready.take_committed_entries());
        self.wal.persist(ready.entries(), ready.hs())?;
        self.mem.wl().append(ready.entries())?;
        if let Some(state) = ready.hs() {
            self.mem.wl().set_hardstate(state.clone());
        }
        self.outbox.extend(ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.mem.wl().mut_hard_state().commit = commit;
        }
        self.outbox.extend(light.take_messages());
        self.collect(light.take_committed_entries());
        self.raw.advance_apply();
        Ok(())
    }

    /// Messages to send, each to its `to`.
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// What was committed since the last call, in log order.
    pub fn take_committed(&mut self) -> Vec<Committed> {
        std::mem::take(&mut self.committed)
    }

    /// Compacts the log up to `index` (applied), whose state is `data`: followers too far
    /// behind get this snapshot instead of the entries.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> Result<(), QuorumError> {
        let applied = self.raw.raft.raft_log.applied;
        assert!(index <= applied, "compacting past what was applied");
        if index <= self.snapshot.borrow().get_metadata().index {
            return Ok(());
        }
        let mut snapshot = Snapshot {
            data: data.into(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = self.mem.term(index)?;
        meta.set_conf_state(self.mem.initial_state()?.conf_state);
        let last = self.mem.last_index()?;
        let after = self
            .mem
            .entries(index + 1, last + 1, None, GetEntriesContext::empty(false))?;
        let hard_state = self.mem.rl().hard_state().clone();
        self.wal.install_snapshot(&snapshot, &after, &hard_state)?;
        // Keep the entry at `index`: its term answers the leader's consistency check.
        self.mem.wl().compact(index)?;
        *self.snapshot.borrow_mut() = snapshot;
        Ok(())
    }

    fn install(&mut self, snapshot: Snapshot) -> Result<(), QuorumError> {
        let hard_state = self.mem.rl().hard_state().clone();
        self.wal.install_snapshot(&snapshot, &[], &hard_state)?;
        self.mem.wl().apply_snapshot(snapshot.clone())?;
        self.applied = self.applied.max(snapshot.get_metadata().index);
        self.committed.push(Committed::Snapshot {
            index: snapshot.get_metadata().index,
            data: snapshot.data.to_vec(),
        });
        *self.snapshot.borrow_mut() = snapshot;
        Ok(())
    }

    fn collect(&mut self, entries: Vec<Entry>) {
        for entry in entries {
            self.applied = self.applied.max(entry.index);
            // Empty entries are a new leader's own (Raft §8); configuration changes are
            // not used while the voters are static.
            if entry.data.is_empty() || entry.get_entry_type() != EntryType::EntryNormal {
                continue;
            }
            self.committed.push(Committed::Entry {
                index: entry.index,
                term: entry.term,
                data: entry.data.to_vec(),
            });
        }
    }
}
