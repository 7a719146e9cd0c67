//! Appends to a partition log: a leader's (`Log::append`: the log assigns offsets and the
//! leader epoch, and checks idempotent producers) and a follower's (`Log::append_replicated`:
//! batches keep the offsets and epochs their leader gave them).
//!
//! Invariants: every batch of a request is validated (sizes, magic, CRC-32C) before anything
//! is stored, and nothing is stored if one fails; the checks and the store happen under one
//! `RefCell` borrow with no `.await` between them; offsets stay dense (a leader's batches start
//! at the log end offset, a follower's must); each batch is copied once, into the write queue,
//! with nothing allocated per batch; a batch whose epoch is above the cache's latest adds an
//! epoch entry, and the checkpoint is written in the background.

use super::{roll, AppendInfo, Log, State};
use crate::batch::LEADER_EPOCH_AT;
use crate::batch::{BatchError, BatchHeader, BatchIter, BASE_OFFSET_AT, BATCH_HEADER_BYTES};
use crate::error::{AppendError, StorageError};
use crate::producer_state::Verdict;

impl Log {
    /// Validates every batch in `records` first (nothing is stored if any is invalid), then
    /// assigns offsets: each batch's base offset becomes the log end offset and its partition
    /// leader epoch is set to `leader_epoch` (both outside the CRC). Copies the bytes once, into
    /// the write queue, and does not wait for I/O. Rolls the segment by size or age first.
    pub fn append(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        let inner = &*self.inner;
        let config = &inner.config.get();
        if records.is_empty() {
            return Err(BatchError::Empty.into());
        }
        let mut offset_count: u64 = 0;
        let mut batch_count = 0;
        // The batch to check against the producer state, if it comes from a producer with an id.
        let mut producer_batch: Option<BatchHeader> = None;
        for item in BatchIter::new(records) {
            let (header, _) = item?;
            if header.total_bytes() > config.batch_bytes_max {
                return Err(BatchError::BatchTooLarge {
                    batch_bytes: header.total_bytes(),
                    batch_bytes_max: config.batch_bytes_max,
                }
                .into());
            }
            // Kafka's produce check: a producer's batch has one offset per record.
            if i64::from(header.record_count) != i64::from(header.last_offset_delta) + 1 {
                return Err(BatchError::InvalidRecordCount {
                    record_count: header.record_count,
                    last_offset_delta: header.last_offset_delta,
                }
                .into());
            }
            if header.has_producer_id() {
                if header.base_sequence < 0 {
                    return Err(BatchError::InvalidProducerSequence {
                        producer_id: header.producer_id,
                        base_sequence: header.base_sequence,
                    }
                    .into());
                }
                producer_batch = Some(header);
            }
            offset_count += header.last_offset_delta as u64 + 1;
            batch_count += 1;
        }
        if producer_batch.is_some() && batch_count > 1 {
            return Err(BatchError::ProducerBatchNotAlone.into());
        }
        self.check_request_size(records, offset_count)?;

        let mut state = inner.state.borrow_mut();
        state.check_writable(&inner.dir)?;
        // Checked here, under the same borrow that assigns the offsets below: no other append
        // can come between the check and the append.
        if let Some(batch) = &producer_batch {
            if let Verdict::Duplicate {
                base_offset,
                last_offset,
            } = state.producers.check(batch)?
            {
                return Ok(AppendInfo::duplicate(base_offset, last_offset));
            }
        }
        self.make_room(&mut state, records.len(), offset_count, now_ms)?;
        let (info, epochs_changed) = self.store(
            &mut state,
            records,
            batch_count,
            |_| leader_epoch,
            false,
            now_ms,
        );
        drop(state);
        self.stored(epochs_changed);
        Ok(info)
    }

    /// A follower's append: `records` are batches as the partition's leader stored them, and
    /// keep their base offsets and leader epochs. The first must start at or after the log end
    /// offset and each next one at or after the end of the one before (else
    /// `BatchError::UnexpectedBaseOffset`): a compacted leader log skips the offsets its
    /// cleaner removed;
    /// sizes, magic and CRC-32C are checked as on the leader's path, and nothing is stored if
    /// any check fails. The checks that are the leader's to make are not repeated: the topic's
    /// `batch_bytes_max` (it may have changed since) and one offset per record (a compacted
    /// batch keeps its offset range with fewer records). The producer state follows the idempotent batches without checking
    /// them (the leader did), as Kafka's followers do; an epoch above the latest adds an entry
    /// to the leader-epoch cache. Does not wait for I/O.
    pub fn append_replicated(
        &self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        let inner = &*self.inner;
        if records.is_empty() {
            return Err(BatchError::Empty.into());
        }
        let mut state = inner.state.borrow_mut();
        state.check_writable(&inner.dir)?;
        let mut expected = state.log_end_offset;
        let mut batch_count = 0;
        for item in BatchIter::new(records) {
            let (header, _) = item?;
            if header.base_offset < expected {
                return Err(BatchError::UnexpectedBaseOffset {
                    expected,
                    base_offset: header.base_offset,
                }
                .into());
            }
            expected = header.last_offset() + 1;
            batch_count += 1;
        }
        let offset_count = (expected - state.log_end_offset) as u64;
        self.check_request_size(records, offset_count)?;
        self.make_room(&mut state, records.len(), offset_count, now_ms)?;
        let (info, epochs_changed) = self.store(
            &mut state,
            records,
            batch_count,
            |header| header.partition_leader_epoch,
            true,
            now_ms,
        );
        drop(state);
        self.stored(epochs_changed);
        Ok(info)
    }

    /// One request must fit a segment, and its offsets the index's relative offsets.
    fn check_request_size(&self, records: &[u8], offset_count: u64) -> Result<(), AppendError> {
        let segment_bytes_max = self.inner.config.get().segment_bytes_max;
        if records.len() as u64 > segment_bytes_max || offset_count > u64::from(u32::MAX) {
            return Err(BatchError::RecordsTooLarge {
                records_bytes: records.len(),
                segment_bytes_max,
            }
            .into());
        }
        Ok(())
    }

    /// Refuses a request the write queue has no room for (backpressure), then rolls the active
    /// segment if the request would make it too big, too old, or overflow its offsets.
    fn make_room(
        &self,
        state: &mut State,
        records_bytes: usize,
        offset_count: u64,
        now_ms: i64,
    ) -> Result<(), AppendError> {
        let config = &self.inner.config.get();
        let pending_bytes_max = config.pending_bytes_max();
        if !state.queue.has_room(records_bytes, pending_bytes_max) {
            return Err(StorageError::WriteBufferFull {
                pending_bytes: state.queue.heap_pending_bytes,
                pending_bytes_max,
            }
            .into());
        }
        let log_end_offset = state.log_end_offset;
        let active = state.active();
        let too_big = active.size_bytes + records_bytes as u64 > config.segment_bytes_max;
        let too_old = active
            .roll_base_ms
            .is_some_and(|base_ms| now_ms.saturating_sub(base_ms) > config.segment_ms_max as i64);
        let relative_end = log_end_offset + offset_count as i64 - 1 - active.base_offset;
        let offsets_overflow = relative_end > i64::from(u32::MAX);
        if active.size_bytes > 0 && (too_big || too_old || offsets_overflow) {
            roll(state, log_end_offset);
        }
        let active = state.active_mut();
        if active.roll_base_ms.is_none() {
            active.roll_base_ms = Some(now_ms);
        }
        Ok(())
    }

    /// Stores validated batches at the log end: each gets the log end offset as its base
    /// offset and `epoch_of(header)` as its leader epoch in the header copy, then header and
    /// body go into the write queue; the segment's indexes, the producer state and the epoch
    /// cache follow each batch. True if the epoch cache changed.
    fn store(
        &self,
        state: &mut State,
        records: &[u8],
        batch_count: usize,
        epoch_of: impl Fn(&BatchHeader) -> i32,
        keep_offsets: bool,
        now_ms: i64,
    ) -> (AppendInfo, bool) {
        let config = &self.inner.config.get();
        let log_end_offset = state.log_end_offset;
        let mut info = AppendInfo {
            base_offset: log_end_offset,
            last_offset: log_end_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: log_end_offset,
            batch_count,
            bytes: records.len(),
            duplicate: false,
        };
        let mut next_offset = log_end_offset;
        let mut epochs_changed = false;
        let position = state.active().size_bytes;
        state.reserve(config, position, records.len());
        for (index, item) in BatchIter::checked(records).enumerate() {
            // Validated above; the second pass re-parses headers only to avoid a Vec per call.
            let (mut header, range) = item.expect("validated in the first pass");
            if keep_offsets {
                // A leader's compacted log may skip offsets (checked to increase above).
                next_offset = header.base_offset;
                if index == 0 {
                    info.base_offset = next_offset;
                }
            }
            let leader_epoch = epoch_of(&header);
            header.base_offset = next_offset;
            header.partition_leader_epoch = leader_epoch;
            let mut head = [0u8; BATCH_HEADER_BYTES];
            head.copy_from_slice(&records[range.start..range.start + BATCH_HEADER_BYTES]);
            head[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&next_offset.to_be_bytes());
            head[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&leader_epoch.to_be_bytes());
            let position = state.active().size_bytes;
            state
                .active_mut()
                .on_batch(&header, position, config.index_interval_bytes);
            if header.has_producer_id() {
                state.producers.record(&header, now_ms);
            }
            epochs_changed |= state.epochs.assign(leader_epoch, next_offset);
            state.push_bytes(config, position, &head);
            let body = &records[range.start + BATCH_HEADER_BYTES..range.end];
            state.push_bytes(config, position + BATCH_HEADER_BYTES as u64, body);
            if header.max_timestamp > info.max_timestamp {
                info.max_timestamp = header.max_timestamp;
                info.offset_of_max_timestamp = header.base_offset;
            }
            info.last_offset = header.last_offset();
            next_offset = header.last_offset() + 1;
            state.queue.set_batches_end(next_offset);
        }
        state.log_end_offset = next_offset;
        if epochs_changed {
            state.epochs_changed();
        }
        (info, epochs_changed)
    }

    /// After a store, with the state no longer borrowed: wakes the writer (and the waiters
    /// of written offsets when the batches are staged), and has the leader-epoch checkpoint
    /// written if the cache changed.
    fn stored(&self, epochs_changed: bool) {
        self.inner.signals.writer.notify_all();
        if self.inner.state.borrow().queue.all_staged() {
            // Staged: written (to the kernel) already; acks=1 and the high watermark move.
            self.inner.signals.progress.notify_all();
        }
        if epochs_changed {
            self.inner.persist_epochs_later();
        }
    }
}
