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
//!   never passes what a crash of the process could take back. On a single node it follows
//!   the log's completed writes ([`storage::Log::written_end_offset`]); replication will move
//!   it by the followers instead. It never moves backwards, and every move fires
//!   `high_watermark_moved`, so a fetch waiting for data wakes the moment data is visible.

use std::cell::Cell;
use std::future::Future;
use std::rc::{Rc, Weak};

use bytes::Bytes;
use shard::{Notify, Turns};
use storage::{AppendError, AppendInfo, Log, StorageError};
use uuid::Uuid;

use crate::errors::{self, code};
use crate::metadata::PartitionState;
use kafka_protocol::error::ResponseError;

/// `replica_id` of a tool that may read any replica, leader or not (Kafka's
/// `DEBUGGING_REPLICA_ID`): ListOffsets and OffsetsForLeaderEpoch skip the leadership check.
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
    leadership: Cell<Leadership>,
    high_watermark: Cell<i64>,
    /// Fired whenever the high watermark moves forward (and when the partition goes away).
    pub high_watermark_moved: Notify,
    /// Whose turn it is to append.
    append_turns: Rc<Turns>,
    /// The topic's `cleanup.policy` includes `compact`: records without key are refused.
    compacted: Cell<bool>,
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
    pub fn new(
        topic_id: Uuid,
        index: i32,
        log: Log,
        state: &PartitionState,
        node_id: i32,
    ) -> Rc<Partition> {
        let partition = Rc::new(Partition {
            topic_id,
            index,
            leadership: Cell::new(Leadership::of(state, node_id)),
            high_watermark: Cell::new(log.written_end_offset()),
            log,
            high_watermark_moved: Notify::new(),
            append_turns: Turns::new(),
            compacted: Cell::new(false),
        });
        glommio::spawn_local(follow_written(Rc::downgrade(&partition))).detach();
        partition
    }

    /// Whether the topic is compacted, as its settings last said (an image install keeps it).
    pub fn compacted(&self) -> bool {
        self.compacted.get()
    }

    pub fn set_compacted(&self, compacted: bool) {
        self.compacted.set(compacted);
    }

    pub fn leadership(&self) -> Leadership {
        self.leadership.get()
    }

    /// Takes the leader and leader epoch of a newer image; an older epoch is ignored.
    pub fn update(&self, state: &PartitionState, node_id: i32) {
        if state.leader_epoch >= self.leadership.get().leader_epoch {
            self.leadership.set(Leadership::of(state, node_id));
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
            Ok(()) => errors::NONE,
            Err(error) => {
                if !already_reported(&error) {
                    tracing::error!(partition = self.index, %error, "sync failed");
                }
                errors::storage_error(&error)
            }
        }
    }

    /// The partition is going away (deleted or shut down): waiters stop waiting.
    pub fn retire(&self) {
        self.high_watermark_moved.notify_all();
    }
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

/// A single node's high watermark: the end of what the log has written. Holds the partition
/// weakly and stops when the partition is dropped or its log stops.
async fn follow_written(partition: Weak<Partition>) {
    loop {
        let (log, next) = match partition.upgrade() {
            Some(partition) => (partition.log.clone(), partition.high_watermark() + 1),
            None => return,
        };
        if log.wait_written(next).await.is_err() {
            return;
        }
        match partition.upgrade() {
            Some(partition) => partition.advance_high_watermark(log.written_end_offset()),
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
