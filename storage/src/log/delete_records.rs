//! Kafka's DeleteRecords on one log: records below an offset become unreadable at once, and
//! the segments that hold nothing else go.
//!
//! ```text
//! <partition>/log-start-offset-checkpoint   0 | 1 | <log start offset>   (Kafka's text form)
//! ```
//!
//! Invariants: the new log start offset is durable (the checkpoint written, synced and
//! renamed) before any read is refused for it, and it only moves forward; on open the log
//! start offset is the larger of the first segment's base offset and the checkpoint (never
//! past the log end); whole segments below it are deleted as retention deletes them,
//! oldest first.

use std::path::Path;

use super::{Inner, Log};
use crate::checkpoint::{encode_lines, parse_lines, read_text, write_atomically};
use crate::error::{ReadError, StorageError};

pub(super) const LOG_START_FILE: &str = "log-start-offset-checkpoint";

impl Log {
    /// Moves the log start offset up to `offset` (DeleteRecords): reads below it answer
    /// OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, and the segments wholly below
    /// it are deleted. `offset` must be in `[log start, log end]`; one at or below the
    /// current start changes nothing. Returns the log start offset after the call.
    pub async fn delete_records_before(&self, offset: i64) -> Result<i64, ReadError> {
        let inner = &*self.inner;
        {
            let state = inner.state.borrow();
            state.check_writable(&inner.dir)?;
            if offset > state.log_end_offset || offset < 0 {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: state.log_start_offset,
                    log_end_offset: state.log_end_offset,
                });
            }
            if offset <= state.log_start_offset {
                return Ok(state.log_start_offset);
            }
        }
        let path = inner.dir.join(LOG_START_FILE);
        write_atomically(&path, encode_lines(std::iter::once(offset.to_string()))).await?;
        {
            let mut state = inner.state.borrow_mut();
            state.log_start_offset = state.log_start_offset.max(offset);
            let start = state.log_start_offset;
            if state.epochs.truncate_from_start(start) {
                state.epochs_changed();
            }
        }
        inner.persist_epochs().await?;
        self.delete_segments_before(offset, "deleted records before the log start offset")
            .await?;
        Ok(self.log_start_offset())
    }
}

impl Inner {
    /// The log start offset DeleteRecords recorded in `dir`, if any.
    pub(super) async fn recorded_log_start(dir: &Path) -> Result<Option<i64>, StorageError> {
        let path = dir.join(LOG_START_FILE);
        let Some(text) = read_text(&path).await? else {
            return Ok(None);
        };
        let lines = parse_lines(&text, 1).map_err(|reason| StorageError::corrupt(&path, reason))?;
        match lines.as_slice() {
            [fields] => fields[0]
                .parse::<i64>()
                .ok()
                .filter(|offset| *offset >= 0)
                .map(Some)
                .ok_or_else(|| StorageError::corrupt(&path, "not an offset")),
            _ => Err(StorageError::corrupt(&path, "expected one entry")),
        }
    }
}
