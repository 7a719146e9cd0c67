//! A partition as its owning shard holds it: the log plus who waits on it.
//!
//! Invariants: a `Partition` never leaves its shard (it is `!Send` through `Rc`); every
//! successful append fires `appended`, so a fetch waiting for data wakes the moment data
//! arrives rather than when its timer runs out. On a single node the high watermark is the
//! log end offset: the only replica is the leader.

use std::rc::Rc;

use glommio::sync::Semaphore;
use kafka_protocol::error::ResponseError;
use shard::Notify;
use storage::{AppendError, AppendInfo, Log, StorageError};
use uuid::Uuid;

use crate::errors;

pub struct Partition {
    pub topic_id: Uuid,
    pub index: i32,
    pub log: Log,
    pub appended: Notify,
    /// One permit: whose turn it is to append.
    append_turn: Semaphore,
}

/// Outcome of appending one partition's records, in Kafka's terms.
pub struct AppendOutcome {
    pub error_code: i16,
    pub base_offset: i64,
    pub log_start_offset: i64,
}

impl Partition {
    pub fn new(topic_id: Uuid, index: i32, log: Log) -> Rc<Partition> {
        Rc::new(Partition {
            topic_id,
            index,
            log,
            appended: Notify::new(),
            append_turn: Semaphore::new(1),
        })
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.log_end_offset()
    }

    /// Appends `records` (one or more v2 batches). The log refuses them all, storing
    /// nothing, if one is invalid (CORRUPT_MESSAGE) or above the topic's `max.message.bytes`
    /// (MESSAGE_TOO_LARGE). Does not wait for the disk, except when appends
    /// outrun it: then the write queue is full, and the append waits for it to drain.
    ///
    /// Appends take turns in arrival order (a FIFO semaphore), so an append that waits for
    /// the queue is never overtaken by a later one: a producer's batches keep their order.
    pub async fn append(&self, records: &[u8], now_ms: i64) -> AppendOutcome {
        let refused = |error_code| AppendOutcome {
            error_code,
            base_offset: -1,
            log_start_offset: self.log.log_start_offset(),
        };
        let Ok(_turn) = self.append_turn.acquire_permit(1).await else {
            return refused(errors::code(ResponseError::NotLeaderOrFollower));
        };
        let info: AppendInfo = loop {
            match self.log.append(records, 0, now_ms) {
                Ok(info) => break info,
                Err(AppendError::Storage(StorageError::WriteBufferFull { .. })) => {
                    if let Err(error) = self.log.wait_for_room(records.len()).await {
                        return refused(errors::storage_error(&error));
                    }
                }
                Err(error) => {
                    tracing::warn!(partition = self.index, %error, "append refused");
                    return refused(errors::append_error(&error));
                }
            }
        };
        self.appended.notify_all();
        AppendOutcome {
            error_code: errors::NONE,
            base_offset: info.base_offset,
            log_start_offset: self.log.log_start_offset(),
        }
    }

    /// Waits until everything appended so far is on disk (one fdatasync shared by every
    /// waiter: group commit). Returns the Kafka error if the disk failed.
    pub async fn sync(&self) -> i16 {
        match self.log.sync().await {
            Ok(()) => errors::NONE,
            Err(error) => {
                tracing::error!(partition = self.index, %error, "sync failed");
                errors::storage_error(&error)
            }
        }
    }
}
