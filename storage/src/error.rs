//! Error types of the storage crate, one enum per layer.
//!
//! Invariants: an `AppendError::Batch` or `AppendError::Producer` affects only the producer
//! request that carried the batch; a `StorageError::Failed` affects the whole partition log until it is
//! reopened (the log latched after a failed write or fdatasync and will not pretend durability).

use std::path::PathBuf;

use crate::batch::BatchError;
use crate::producer_state::ProducerError;

/// Failures of the partition log's files.
#[derive(thiserror::Error, Debug)]
pub enum StorageError {
    /// An I/O operation failed. `op` names the operation ("write", "fdatasync", ...).
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The log latched a fatal failure (a failed write or fdatasync) and refuses further appends
    /// and syncs; reopening the log runs recovery.
    #[error("log {path} failed earlier and refuses writes: {reason}")]
    Failed { path: PathBuf, reason: String },
    /// A file on disk is not what it must be and could not be repaired.
    #[error("corrupt file {path}: {reason}")]
    CorruptFile { path: PathBuf, reason: String },
    /// The log was closed or deleted.
    #[error("log {path} is closed")]
    Closed { path: PathBuf },
    /// `Log::truncate_to` is under way; appends are refused until it returns (nothing was
    /// stored).
    #[error("log {path} is being truncated")]
    Truncating { path: PathBuf },
    /// Appends outran the disk: the bytes waiting to be written outside the stage reached
    /// their limit. The caller should `Log::wait_for_room` and retry (backpressure, nothing
    /// was stored).
    #[error("write buffer full: {pending_bytes} bytes pending outside the stage, limit {pending_bytes_max}")]
    WriteBufferFull {
        pending_bytes: usize,
        pending_bytes_max: usize,
    },
    /// The `LogConfig` is unusable.
    #[error("invalid log config: {0}")]
    InvalidConfig(String),
}

impl StorageError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        StorageError::CorruptFile {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// Failures of `Log::append`.
#[derive(thiserror::Error, Debug)]
pub enum AppendError {
    /// A batch of the request is invalid; nothing of the request was stored (CORRUPT_MESSAGE).
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// An idempotent batch does not follow what its producer appended before (Kafka:
    /// OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_PRODUCER_EPOCH); nothing was stored.
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Failures of `Log::read`.
#[derive(thiserror::Error, Debug)]
pub enum ReadError {
    /// The offset is outside `[log_start_offset, log_end_offset]` (OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Failures of `Log::truncate_to`.
#[derive(thiserror::Error, Debug)]
pub enum TruncateError {
    /// The offset is outside `[log_start_offset, log_end_offset]`; nothing changed.
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// The offset is inside the batch `[batch_base_offset, batch_last_offset]` (a log can only
    /// be cut between batches); nothing changed.
    #[error("offset {offset} is inside the batch [{batch_base_offset}, {batch_last_offset}]")]
    NotABatchBoundary {
        offset: i64,
        batch_base_offset: i64,
        batch_last_offset: i64,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}
