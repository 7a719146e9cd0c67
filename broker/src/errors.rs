//! Kafka error codes, by name, as the handlers use them.
//!
//! The codes come from `kafka-protocol`'s table (generated from Kafka's own); this module
//! maps storage and metadata failures onto them in one place.

use kafka_protocol::error::ResponseError;
use storage::batch::BatchError;
use storage::{AppendError, ProducerError, ReadError, StorageError};

pub const NONE: i16 = 0;

pub fn code(error: ResponseError) -> i16 {
    error.code()
}

/// The Kafka error for a failed append.
pub fn append_error(error: &AppendError) -> i16 {
    match error {
        AppendError::Batch(BatchError::BatchTooLarge { .. }) => {
            code(ResponseError::MessageTooLarge)
        }
        AppendError::Batch(BatchError::RecordsTooLarge { .. }) => {
            code(ResponseError::RecordListTooLarge)
        }
        AppendError::Batch(
            BatchError::InvalidProducerSequence { .. } | BatchError::ProducerBatchNotAlone,
        ) => code(ResponseError::InvalidRecord),
        AppendError::Batch(_) => code(ResponseError::CorruptMessage),
        AppendError::Producer(ProducerError::OutOfOrderSequence { .. }) => {
            code(ResponseError::OutOfOrderSequenceNumber)
        }
        AppendError::Producer(ProducerError::StaleEpoch { .. }) => {
            code(ResponseError::InvalidProducerEpoch)
        }
        AppendError::Storage(storage) => storage_error(storage),
    }
}

/// The Kafka error for a failed read.
pub fn read_error(error: &ReadError) -> i16 {
    match error {
        ReadError::OffsetOutOfRange { .. } => code(ResponseError::OffsetOutOfRange),
        ReadError::Storage(storage) => storage_error(storage),
    }
}

pub fn storage_error(_error: &StorageError) -> i16 {
    code(ResponseError::KafkaStorageError)
}
