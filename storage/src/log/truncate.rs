//! `Log::truncate_to`: a follower cuts its log back to where it agrees with its leader.
//!
//! Invariants: while a truncation is under way appends and retention are refused
//! (`StorageError::Truncating`), syncs and read-aheads do not start, and the cut waits until
//! every queued op is done, no fdatasync and no read-ahead is in flight (no write, in
//! particular no direct-mode block write with its padding, can land after the file is cut);
//! later segments' files go first, newest first, and every spare file with them, then the
//! segment holding the offset is cut and fdatasynced, then the directory is fsynced, so once
//! the call returns no crash brings back a record at or past the offset; the in-memory state
//! changes in one borrow after the files; a failure (or cancellation) once files were touched
//! latches the log.

use std::rc::Rc;

use super::open::{load_tail_block, remove_file_if_present, unlink_segment_files};
use super::producer_snapshots::wall_clock_ms;
use super::read::SegmentReader;
use super::{Inner, Log};
use crate::error::{StorageError, TruncateError};
use crate::io::sync_dir;
use crate::io::IoMode;
use crate::reaper::{self, Unlinked};
use crate::recovery::scan_segment;
use crate::segment::{
    segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX,
};

/// Clears `State::truncating` however the truncation ends; if it ends part-way through the
/// files (an error, or the future dropped), the log latches: its files and state may disagree.
struct Truncation<'a> {
    inner: &'a Inner,
    cutting: bool,
}

impl Drop for Truncation<'_> {
    fn drop(&mut self) {
        if self.cutting {
            let error = StorageError::Failed {
                path: self.inner.dir.clone(),
                reason: "a truncation stopped part-way".to_string(),
            };
            self.inner.latch(&error);
        }
        self.inner.state.borrow_mut().truncating = false;
        self.inner.signals.progress.notify_all();
        self.inner.signals.writer.notify_all();
    }
}

impl Log {
    /// Removes every batch at or after `offset`, durably: once this returns, no crash and
    /// reopen shows a record at or past it. `offset` must be a batch boundary in
    /// `[log_start_offset, log_end_offset]` (the log end changes nothing); otherwise
    /// `TruncateError::NotABatchBoundary` or `OffsetOutOfRange`, and nothing changes.
    ///
    /// Later segments are deleted, the segment holding `offset` is cut there (and becomes the
    /// active segment), queued data past it is dropped (written, then cut away), as are index
    /// and time-index entries and cached batches past it; the producer state is rebuilt as of
    /// `offset` (snapshots past it are removed) and the leader-epoch cache loses the epochs
    /// that start at or after it. Appends during the call are refused with
    /// `StorageError::Truncating`; reads that race it are retried once it is done.
    pub async fn truncate_to(&self, offset: i64) -> Result<(), TruncateError> {
        let inner = &*self.inner;
        {
            let mut state = inner.state.borrow_mut();
            state.check_writable(&inner.dir)?;
            let (start, end) = (state.log_start_offset, state.log_end_offset);
            if offset < start || offset > end {
                return Err(TruncateError::OffsetOutOfRange {
                    offset,
                    log_start_offset: start,
                    log_end_offset: end,
                });
            }
            if offset == end {
                return Ok(());
            }
            state.truncating = true;
        }
        let mut truncation = Truncation {
            inner,
            cutting: false,
        };
        let (slot, position) = self.cut_position(offset).await?;
        self.flush().await?;
        inner
            .signals
            .progress
            .wait_until(|| {
                let state = inner.state.borrow();
                (!state.sync_in_flight && state.read_ahead.is_none()) || state.failed.is_some()
            })
            .await;
        if let Some(reason) = &inner.state.borrow().failed {
            return Err(inner.failed_error(reason).into());
        }
        truncation.cutting = true;
        self.cut(slot, position, offset).await?;
        truncation.cutting = false;
        drop(truncation);
        tracing::info!(dir = %inner.dir.display(), offset, "log truncated");
        Ok(())
    }

    /// The segment holding `offset` and the byte position of the batch starting there.
    async fn cut_position(&self, offset: i64) -> Result<(usize, u64), TruncateError> {
        let inner = &*self.inner;
        let (slot, segment_base_offset, mut position) = {
            let state = inner.state.borrow();
            let slot = state.segment_slot_for_offset(offset);
            let segment = &state.segments[slot];
            (
                slot,
                segment.base_offset,
                u64::from(segment.index.lookup(offset)),
            )
        };
        let window_bytes = inner.config.get().index_interval_bytes as usize * 2;
        let mut reader = SegmentReader::new(window_bytes);
        loop {
            let Some(header) = reader
                .header_at(inner, segment_base_offset, position)
                .await?
            else {
                let reason = format!("no batch at offset {offset}");
                let path = segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
                return Err(StorageError::corrupt(path, reason).into());
            };
            if header.last_offset() < offset {
                position += header.total_bytes() as u64;
                continue;
            }
            if header.base_offset != offset {
                return Err(TruncateError::NotABatchBoundary {
                    offset,
                    batch_base_offset: header.base_offset,
                    batch_last_offset: header.last_offset(),
                });
            }
            return Ok((slot, position));
        }
    }

    /// Cuts the files, then the state, at `offset` (byte `position` of segment `slot`). The
    /// write queue is empty and nothing is in flight.
    async fn cut(&self, slot: usize, position: u64, offset: i64) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let dir = &inner.dir;
        let (kept, later_bases, later_readers, was_active) = {
            let state = inner.state.borrow();
            let segment = &state.segments[slot];
            let later = &state.segments[slot + 1..];
            let bases: Vec<i64> = later.iter().map(|s| s.base_offset).collect();
            let readers: Vec<_> = (later.iter())
                .filter_map(|s| s.file.as_ref().map(Rc::downgrade))
                .collect();
            let kept = (
                segment.base_offset,
                segment.file.clone(),
                segment.roll_base_ms,
            );
            (kept, bases, readers, slot + 1 == state.segments.len())
        };
        let (base_offset, file, roll_base_ms) = kept;
        // Newest first: a crash part-way leaves a shorter log, never a hole. On the blocking
        // thread, as retention does: freeing a large file's extents would stall the shard.
        // Spares go too: the cleaner's may hold offsets at or past the cut, which a segment
        // created past it could otherwise take over (`spares.rs`).
        let blocking_dir = dir.clone();
        let spares = inner.take_spares();
        let unlinked = glommio::executor()
            .spawn_blocking(move || {
                let mut unlinked = Unlinked::default();
                for &base in later_bases.iter().rev() {
                    unlink_segment_files(&blocking_dir, base, &mut unlinked)?;
                }
                for spare in &spares {
                    unlinked.unlink(spare)?;
                }
                Ok::<_, StorageError>(unlinked)
            })
            .await?;
        reaper::free_paced(unlinked, later_readers);
        let stale_snapshots: Vec<i64> = inner
            .snapshots
            .borrow()
            .iter()
            .copied()
            .filter(|&snapshot| snapshot > offset)
            .collect();
        for &snapshot in stale_snapshots.iter().rev() {
            remove_file_if_present(&segment_path(dir, snapshot, SNAPSHOT_SUFFIX))?;
        }
        if !was_active {
            // The segment becomes active again: its indexes live in memory from here on.
            for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                remove_file_if_present(&segment_path(dir, base_offset, suffix))?;
            }
        }
        let file = file.expect("a segment holding batches has a file");
        file.truncate(position).await?;
        file.fdatasync().await?;
        sync_dir(dir).await?;

        let mut segment = Segment::new(base_offset, Some(file.clone()));
        let outcome = scan_segment(
            &file,
            position,
            &mut segment,
            inner.config.get().index_interval_bytes,
        )
        .await?;
        if outcome.valid_bytes != position || segment.next_offset != offset {
            let reason = format!(
                "cut at {position} ends at offset {}, not {offset}: {}",
                segment.next_offset,
                outcome.stop_reason.unwrap_or_default()
            );
            let path = segment_path(dir, base_offset, LOG_SUFFIX);
            return Err(StorageError::corrupt(path, reason));
        }
        segment.roll_base_ms = if was_active { roll_base_ms } else { None };
        if inner.config.get().io_mode == IoMode::Direct {
            load_tail_block(&mut segment).await?;
        }
        let snapshots: Vec<i64> = {
            let mut state = inner.state.borrow_mut();
            state.segments.truncate(slot);
            state.segments.push(segment);
            state.log_end_offset = offset;
            state.files_end_offset = state.files_end_offset.min(offset);
            state.synced_end_offset = state.synced_end_offset.min(offset);
            let live: Vec<_> = state
                .segments
                .iter()
                .filter_map(|s| s.file.clone())
                .collect();
            state
                .dirty_files
                .retain(|dirty| live.iter().any(|f| std::rc::Rc::ptr_eq(f, dirty)));
            if state.epochs.truncate_from_end(offset) {
                state.epochs_changed();
            }
            state.truncations += 1;
            // Records appended from here on are dirty: none was read into an offset map.
            state.cleaner.first_dirty_offset = state.cleaner.first_dirty_offset.min(offset);
            inner
                .snapshots
                .borrow()
                .iter()
                .copied()
                .filter(|&s| s <= offset)
                .collect()
        };
        inner.cache.remove_segments_from(inner.log_id, base_offset);
        self.load_producers(snapshots, wall_clock_ms()).await?;
        inner.persist_epochs().await
    }
}
