//! A partition as its owning shard holds it: the log, its high watermark, who waits on
//! them, and this node's part in it (leader or follower, at which leader epoch) as the
//! metadata image last said.
//!
//! Invariants:
//! - The replica state follows the newest image the shard installed ([`Partition::update`]);
//!   the leader epoch never goes back. Batches appended here carry the current leader epoch.
//! - A `Partition` never leaves its shard (it is `!Send` through `Rc`).
//! - Appends are applied in the order they were queued ([`Partition::queue_append`] takes
//!   its place synchronously), whatever order the tasks doing them run in: a producer's
//!   requests keep their order on every path.
//! - The high watermark is the partition's own notion: consumers read only below it, and it
//!   never passes what a crash of the process could take back. A leader moves it to the
//!   minimum, over the ISR, of each member's log end (its own completed writes,
//!   [`storage::Log::written_end_offset`], and each follower's last fetch offset): with one
//!   replica, that is its completed writes. A follower takes the leader's from the fetch
//!   answers, capped by its own writes. It moves backwards only when a follower truncates its
//!   log below it; every forward move fires `high_watermark_moved`, so a fetch waiting for data
//!   and a producer waiting for acks=all wake the moment it moves.
//! - `written_moved` fires whenever the log's completed writes move, and when leadership
//!   changes: a follower's fetch, which reads up to them, waits on it, and must end when
//!   this node stops leading or the epoch it fetched in is over.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::{Rc, Weak};

use bytes::Bytes;
use shard::{Notify, Turns};
use storage::{AppendError, AppendInfo, Log, StorageError};
use uuid::Uuid;

use crate::errors::{self, code};
use crate::metadata::PartitionState;
use crate::replication::throttle::Throttled;
use crate::replication::ReplicaSet;
use crate::request::now_ms;
use kafka_protocol::error::ResponseError;

/// `replica_id` of a tool that may read any replica, leader or not (Kafka's
/// `DEBUGGING_REPLICA_ID`): Fetch, ListOffsets and OffsetsForLeaderEpoch skip the leadership
/// check.
pub const DEBUGGING_REPLICA_ID: i32 = -2;

/// This node's view of who leads a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// The leader's broker id, or `NO_LEADER`.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Whether the leader is this node.
    pub is_local: bool,
}

pub struct Partition {
    pub topic_id: Uuid,
    pub index: i32,
    pub log: Log,
    node_id: i32,
    leadership: Cell<Leadership>,
    replicas: RefCell<ReplicaSet>,
    high_watermark: Cell<i64>,
    /// Fired whenever the high watermark moves forward, the leadership changes, and when the
    /// partition goes away.
    pub high_watermark_moved: Notify,
    /// Fired whenever the log's completed writes move forward.
    pub written_moved: Notify,
    retired: Cell<bool>,
    /// The topic's settings a partition applies itself, as its last image gave them.
    settings: RefCell<TopicSettings>,
    /// `replica.fsync.before.fetch`: this node's own records count toward the high
    /// watermark once fdatasynced, not once written.
    counts_synced: Cell<bool>,
    /// Whose turn it is to append.
    append_turns: Rc<Turns>,
}

/// Outcome of appending one partition's records, in Kafka's terms.
pub struct AppendOutcome {
    pub error_code: i16,
    pub base_offset: i64,
    /// The offset after the last record appended (-1 when nothing was). For a retried
    /// idempotent batch, the end of the original, which the answer waits for as for an append.
    pub end_offset: i64,
    pub log_start_offset: i64,
}

impl Partition {
    /// The partition over `log`, as `state` describes it, its high watermark starting at
    /// `high_watermark` (`replication::checkpoint::initial_high_watermark`).
    pub fn new(
        topic_id: Uuid,
        index: i32,
        log: Log,
        state: &PartitionState,
        node_id: i32,
        high_watermark: i64,
    ) -> Rc<Partition> {
        let replicas = ReplicaSet::new(state, node_id, now_ms(), log.log_end_offset());
        let partition = Rc::new(Partition {
            topic_id,
            index,
            node_id,
            leadership: Cell::new(Leadership::of(state, node_id)),
            replicas: RefCell::new(replicas),
            high_watermark: Cell::new(high_watermark),
            log,
            high_watermark_moved: Notify::new(),
            written_moved: Notify::new(),
            retired: Cell::new(false),
            settings: RefCell::new(TopicSettings::default()),
            counts_synced: Cell::new(false),
            append_turns: Turns::new(),
        });
        glommio::spawn_local(follow_written(Rc::downgrade(&partition))).detach();
        partition
    }

    /// Whether the topic is compacted, as its settings last said (an image install keeps it).
    pub fn compacted(&self) -> bool {
        self.settings.borrow().compacted
    }

    /// Takes the topic's settings that the partition applies itself.
    pub fn apply_settings(&self, settings: TopicSettings) {
        *self.settings.borrow_mut() = settings;
    }

    /// On the leader: whether what follower `replica` fetches is throttled (named in the
    /// topic's `leader.replication.throttled.replicas`, and outside the ISR).
    pub fn throttles_leader_traffic(&self, replica: i32) -> bool {
        let named = self
            .settings
            .borrow()
            .leader_throttled
            .as_ref()
            .is_some_and(|t| t.includes(self.index, replica));
        named && !self.replicas.borrow().isr().contains(&replica)
    }

    /// On a follower: whether what this node fetches is throttled (named in the topic's
    /// `follower.replication.throttled.replicas`, and outside the ISR).
    pub fn throttles_follower_traffic(&self) -> bool {
        let named = self
            .settings
            .borrow()
            .follower_throttled
            .as_ref()
            .is_some_and(|t| t.includes(self.index, self.node_id));
        named && !self.replicas.borrow().isr().contains(&self.node_id)
    }

    pub fn leadership(&self) -> Leadership {
        self.leadership.get()
    }

    /// Counts this node's records toward the high watermark once synced (with more than
    /// one replica; `replica.fsync.before.fetch`).
    pub fn count_synced(&self, synced: bool) {
        self.counts_synced.set(synced);
    }

    /// Takes the leader, leader epoch, replicas and ISR of a newer image; an older leader
    /// epoch is ignored. Waiters on the high watermark wake to see the change.
    pub fn update(&self, state: &PartitionState) {
        if state.leader_epoch < self.leadership.get().leader_epoch {
            return;
        }
        // Every change of a partition moves its partition epoch: an image that changed
        // other partitions, or none, leaves this one and its waiting fetches alone.
        let unchanged = {
            let replicas = self.replicas.borrow();
            replicas.partition_epoch() == state.partition_epoch
                && replicas.leader_epoch() == state.leader_epoch
        };
        if unchanged {
            return;
        }
        self.leadership.set(Leadership::of(state, self.node_id));
        self.replicas
            .borrow_mut()
            .update(state, now_ms(), self.log.log_end_offset());
        self.high_watermark_moved.notify_all();
        self.written_moved.notify_all();
        self.recompute_high_watermark();
    }

    /// The replicas and the ISR as the image last said.
    pub fn replicas_and_isr(&self) -> (Vec<i32>, Vec<i32>) {
        let replicas = self.replicas.borrow();
        (replicas.replicas().to_vec(), replicas.isr().to_vec())
    }

    /// On the leader: the ISR change to propose now, if any (see `ReplicaSet::wanted_isr`).
    pub fn isr_change(
        &self,
        lag_max_ms: i64,
        eligible: impl Fn(i32, i64) -> bool,
    ) -> Option<IsrChange> {
        if !self.leadership.get().is_local {
            return None;
        }
        let replicas = self.replicas.borrow();
        let isr = replicas.wanted_isr(now_ms(), lag_max_ms, self.high_watermark(), eligible)?;
        Some(IsrChange {
            leader_epoch: replicas.leader_epoch(),
            partition_epoch: replicas.partition_epoch(),
            broker_epochs: replicas.broker_epochs(&isr),
            isr,
        })
    }

    /// Counts every follower as caught up now (after this node could not serve them).
    pub fn forgive_lag(&self) {
        self.replicas.borrow_mut().forgive_lag(now_ms());
    }

    /// The change was sent: until an image settles it, the high watermark counts the old
    /// and the proposed ISR together.
    pub fn propose_isr(&self, isr: Vec<i32>) {
        self.replicas.borrow_mut().propose_isr(isr);
    }

    /// The change was refused or lost: it may be proposed again.
    pub fn abandon_isr(&self) {
        self.replicas.borrow_mut().abandon_isr();
        self.recompute_high_watermark();
    }

    /// Whether `replica` is outside the ISR but has reached the high watermark: it may join.
    pub fn may_join_isr(&self, replica: i32, offset: i64) -> bool {
        offset >= self.high_watermark() && !self.replicas.borrow().isr().contains(&replica)
    }

    /// On the leader: incarnation `broker_epoch` of follower `replica` (-1: not named)
    /// fetched at `offset`. False (and nothing recorded) if it holds no replica of the
    /// partition.
    pub fn record_follower_fetch(
        &self,
        replica: i32,
        broker_epoch: i64,
        offset: i64,
        now_ms: i64,
    ) -> bool {
        let leader_end = self.log.log_end_offset();
        let known = self.replicas.borrow_mut().record_fetch(
            replica,
            broker_epoch,
            offset,
            leader_end,
            now_ms,
        );
        if known {
            self.recompute_high_watermark();
        }
        known
    }

    /// On a follower: the leader's high watermark, from a fetch answer.
    pub fn learn_leader_high_watermark(&self, offset: i64) {
        self.replicas
            .borrow_mut()
            .learn_leader_high_watermark(offset);
        self.recompute_high_watermark();
    }

    /// On a follower whose log was cut back to `offset`: the high watermark follows it down.
    pub fn truncated_to(&self, offset: i64) {
        if self.high_watermark.get() > offset {
            self.high_watermark.set(offset);
        }
    }

    fn recompute_high_watermark(&self) {
        let own_end = if self.counts_synced.get() {
            self.log.synced_end_offset()
        } else {
            self.log.written_end_offset()
        };
        let computed = self.replicas.borrow().high_watermark(own_end);
        if let Some(offset) = computed {
            self.advance_high_watermark(offset);
        }
    }

    /// Kafka's check of a request's view of the partition (`Partition.getLocalLog`): a
    /// `current_leader_epoch` older than this node's is FENCED_LEADER_EPOCH, a newer one
    /// UNKNOWN_LEADER_EPOCH (-1 asks for no check); then, if the request needs the leader,
    /// NOT_LEADER_OR_FOLLOWER unless this node leads.
    pub fn check_leader(&self, current_leader_epoch: i32, require_leader: bool) -> Result<(), i16> {
        let leadership = self.leadership.get();
        if current_leader_epoch >= 0 {
            if current_leader_epoch < leadership.leader_epoch {
                return Err(code(ResponseError::FencedLeaderEpoch));
            }
            if current_leader_epoch > leadership.leader_epoch {
                return Err(code(ResponseError::UnknownLeaderEpoch));
            }
        }
        if require_leader && !leadership.is_local {
            return Err(code(ResponseError::NotLeaderOrFollower));
        }
        Ok(())
    }

    /// The offset below which consumers may read.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.get()
    }

    /// Moves the high watermark to `offset` if that is forward.
    fn advance_high_watermark(&self, offset: i64) {
        if offset > self.high_watermark.get() {
            self.high_watermark.set(offset);
            self.high_watermark_moved.notify_all();
        }
    }

    /// Whole batches from `offset` up to the log's completed writes, for a follower's fetch
    /// (a follower may hold what is not yet below the high watermark: that is how it moves).
    pub async fn read_for_follower(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<storage::ReadResult, storage::ReadError> {
        self.log
            .read_below(offset, max_bytes, self.log.written_end_offset())
            .await
    }

    /// Whole batches from `offset` below the high watermark, up to `max_bytes` (at least one
    /// batch, KIP-74).
    pub async fn read(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<storage::ReadResult, storage::ReadError> {
        self.log
            .read_below(offset, max_bytes, self.high_watermark())
            .await
    }

    /// Queues an append of `records` (one or more v2 batches) behind every append queued
    /// before, now, and returns the future that performs it when its turn comes. The log
    /// refuses them all, storing nothing, if one is invalid (CORRUPT_MESSAGE) or above the
    /// topic's `max.message.bytes` (MESSAGE_TOO_LARGE), or if an idempotent batch does not
    /// follow its producer's last ones (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH);
    /// a retry of one of those is answered with the original's offsets and not stored. Does not wait for the disk, except
    /// when appends outrun it: then the write queue is full, and the append (and every one
    /// behind it) waits for room.
    pub fn queue_append(
        self: &Rc<Self>,
        records: Bytes,
        now_ms: i64,
    ) -> impl Future<Output = AppendOutcome> + 'static {
        let ticket = self.append_turns.take();
        let partition = self.clone();
        async move {
            ticket.wait().await;
            let outcome = partition.append_now(&records, now_ms).await;
            drop(ticket);
            outcome
        }
    }

    async fn append_now(&self, records: &[u8], now_ms: i64) -> AppendOutcome {
        let refused = |error_code| AppendOutcome {
            error_code,
            base_offset: -1,
            end_offset: -1,
            log_start_offset: self.log.log_start_offset(),
        };
        let info: AppendInfo = loop {
            // Leadership can end while an append waits for its turn or for room.
            let leadership = self.leadership.get();
            if !leadership.is_local {
                return refused(code(ResponseError::NotLeaderOrFollower));
            }
            match self.log.append(records, leadership.leader_epoch, now_ms) {
                Ok(info) => break info,
                Err(AppendError::Storage(StorageError::WriteBufferFull { .. })) => {
                    if let Err(error) = self.log.wait_for_room(records.len()).await {
                        return refused(errors::storage_error(&error));
                    }
                }
                Err(AppendError::Producer(error)) => {
                    // The client's business (a fenced producer, lost batches), not the node's.
                    tracing::debug!(partition = self.index, %error, "idempotent batch refused");
                    return refused(errors::append_error(&AppendError::Producer(error)));
                }
                Err(error) => {
                    let latched = matches!(&error, AppendError::Storage(e) if already_reported(e));
                    if !latched {
                        tracing::warn!(partition = self.index, %error, "append refused");
                    }
                    return refused(errors::append_error(&error));
                }
            }
        };
        if info.duplicate {
            tracing::debug!(
                partition = self.index,
                base_offset = info.base_offset,
                "duplicate batch not written again"
            );
        }
        AppendOutcome {
            error_code: errors::NONE,
            base_offset: info.base_offset,
            end_offset: info.last_offset + 1,
            log_start_offset: self.log.log_start_offset(),
        }
    }

    /// Waits until every record below `end_offset` is written, so that a crash of the
    /// process cannot take it back (the acks=1 promise). Returns the Kafka error if the disk
    /// failed or the partition closed first.
    pub async fn wait_written(&self, end_offset: i64) -> i16 {
        match self.log.wait_written(end_offset).await {
            Ok(()) => errors::NONE,
            Err(error) => {
                if !already_reported(&error) {
                    tracing::warn!(partition = self.index, %error, "write not completed");
                }
                errors::storage_error(&error)
            }
        }
    }

    /// Waits until everything appended so far is on disk (one fdatasync shared by every
    /// waiter: group commit). Returns the Kafka error if the disk failed.
    pub async fn sync(&self) -> i16 {
        match self.log.sync().await {
            Ok(()) => {
                if self.counts_synced.get() {
                    self.recompute_high_watermark();
                }
                errors::NONE
            }
            Err(error) => {
                if !already_reported(&error) {
                    tracing::error!(partition = self.index, %error, "sync failed");
                }
                errors::storage_error(&error)
            }
        }
    }

    /// Whether an acks=all append may go ahead: NOT_ENOUGH_REPLICAS while the ISR is smaller
    /// than the topic's `min.insync.replicas`, as Kafka refuses it before appending.
    pub fn check_min_insync(&self) -> Result<(), i16> {
        let min_insync_replicas = self.settings.borrow().min_insync_replicas.max(1);
        if self.replicas.borrow().isr().len() < min_insync_replicas {
            return Err(code(ResponseError::NotEnoughReplicas));
        }
        Ok(())
    }

    /// Waits until the high watermark reaches `end_offset` (every ISR member holds the
    /// records below it: the acks=all promise with the leader's fsync). NOT_LEADER_OR_FOLLOWER
    /// if this node stops leading first, UNKNOWN_TOPIC_OR_PARTITION if the partition goes
    /// away, NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below `min.insync.replicas`
    /// on the way.
    pub async fn wait_replicated(&self, end_offset: i64) -> i16 {
        loop {
            let generation = self.high_watermark_moved.generation();
            if self.retired.get() {
                return code(ResponseError::UnknownTopicOrPartition);
            }
            if !self.leadership.get().is_local {
                return code(ResponseError::NotLeaderOrFollower);
            }
            if self.high_watermark() >= end_offset {
                return match self.check_min_insync() {
                    Ok(()) => errors::NONE,
                    Err(_) => code(ResponseError::NotEnoughReplicasAfterAppend),
                };
            }
            self.high_watermark_moved.changed_since(generation).await;
        }
    }

    /// The partition is going away (deleted or shut down): waiters stop waiting.
    pub fn retire(&self) {
        self.retired.set(true);
        self.high_watermark_moved.notify_all();
        self.written_moved.notify_all();
    }
}

/// The settings of a partition's topic that the partition applies itself (the log takes its
/// own through `Log::reconfigure`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicSettings {
    /// `cleanup.policy` includes `compact`: records without key are refused.
    pub compacted: bool,
    /// `min.insync.replicas`: acks=all needs an ISR at least this large.
    pub min_insync_replicas: usize,
    /// `leader.replication.throttled.replicas`.
    pub leader_throttled: Option<Throttled>,
    /// `follower.replication.throttled.replicas`.
    pub follower_throttled: Option<Throttled>,
}

/// An ISR change a leader proposes, with the epochs it was computed at (the controller
/// refuses it if the partition moved on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsrChange {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    /// The broker epoch each member of `isr` fetched as, -1 where unknown (KIP-903's
    /// NewIsrWithEpochs): the controller refuses a member whose registration moved on.
    pub broker_epochs: Vec<i64>,
}

impl Leadership {
    fn of(state: &PartitionState, node_id: i32) -> Leadership {
        Leadership {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            is_local: state.leader == node_id,
        }
    }
}

/// Follows the log's completed writes: fires `written_moved` and recomputes the high
/// watermark at each move. Holds the partition weakly and stops when the partition is dropped
/// or its log stops.
async fn follow_written(partition: Weak<Partition>) {
    loop {
        let (log, next) = match partition.upgrade() {
            Some(partition) => (
                partition.log.clone(),
                partition.log.written_end_offset() + 1,
            ),
            None => return,
        };
        if log.wait_written(next).await.is_err() {
            return;
        }
        match partition.upgrade() {
            Some(partition) => {
                partition.written_moved.notify_all();
                partition.recompute_high_watermark();
            }
            None => return,
        }
    }
}

/// Whether the log has said this already: a log that failed logged its first error when it
/// latched it (`storage::log`), and every request it refuses afterwards carries that same
/// failure, so logging each one would flood the log, on a disk that may well be full.
fn already_reported(error: &StorageError) -> bool {
    matches!(error, StorageError::Failed { .. })
}
