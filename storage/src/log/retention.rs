//! Applying retention to a partition log (which segments may go is `crate::retention`'s
//! decision): deleting the oldest whole segments, moving the log start offset, and keeping
//! deleted `.log` files as spares for new segments to reuse (`spares.rs`).
//!
//! Invariants: the log start offset is the first remaining segment's base offset, or past it
//! where DeleteRecords moved it (`delete_records.rs`); a segment
//! the write queue still holds an op of (data or seal) is not deleted; files go oldest first,
//! so a crash part-way leaves a shorter log, never a hole; the active segment is never
//! deleted (when every record expired it is rolled first and its successor's file created).

use std::rc::Rc;

use super::open::unlink_segment_files;
use super::spares::{keep_or_remove, FreedLog};
use super::{roll, Deleted, Inner, Log};
use crate::error::StorageError;
use crate::reaper::{self, Unlinked};
use crate::retention::{expired_prefix, Retention, SegmentAge};
use crate::segment::{segment_path, Segment, LOG_SUFFIX};

impl Inner {
    /// A segment as retention sees it. Like Kafka, a segment whose batches carried no
    /// timestamp is as old as its file's last modification (or, failing that, new).
    pub(super) fn segment_age(&self, segment: &Segment, now_ms: i64) -> SegmentAge {
        let largest_timestamp_ms = if segment.max_timestamp >= 0 {
            segment.max_timestamp
        } else {
            std::fs::metadata(segment_path(&self.dir, segment.base_offset, LOG_SUFFIX))
                .and_then(|metadata| metadata.modified())
                .ok()
                .and_then(|modified| modified.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(now_ms, |since| since.as_millis() as i64)
        };
        SegmentAge {
            size_bytes: segment.size_bytes,
            largest_timestamp_ms,
        }
    }
}

impl Log {
    /// Deletes the oldest segments that `retention` lets go (see [`Retention`]) and moves the
    /// log start offset to the first segment kept. When every record has expired, the active
    /// segment is rolled first and its empty successor's file created, so the log keeps its
    /// end offset across restarts. A segment still waiting for its write or seal is kept until
    /// a later call. Deleted `.log` files are kept as spares for new segments while there is
    /// room (`spares.rs`); the rest are unlinked. Both happen on the executor's blocking
    /// thread, since freeing a large file's extents would stall the shard.
    pub async fn apply_retention(
        &self,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Deleted, StorageError> {
        let inner = &*self.inner;
        let (keep_from, roll_active) = {
            let state = inner.state.borrow();
            if state.truncating {
                // The next round applies it.
                return Ok(Deleted::default());
            }
            state.check_writable(&inner.dir)?;
            let ages: Vec<SegmentAge> = state
                .segments
                .iter()
                .map(|segment| inner.segment_age(segment, now_ms))
                .collect();
            let expired = expired_prefix(&ages, retention, now_ms);
            if expired == 0 {
                return Ok(Deleted::default());
            }
            match state.segments.get(expired) {
                Some(kept) => (kept.base_offset, false),
                None => (state.log_end_offset, true),
            }
        };
        if roll_active {
            {
                let mut state = inner.state.borrow_mut();
                let log_end_offset = state.log_end_offset;
                if state.active().base_offset < keep_from {
                    roll(&mut state, log_end_offset);
                }
            }
            self.flush().await?;
            inner.segment_file(keep_from).await?;
        }
        self.delete_segments_before(keep_from, "retention deleted segments")
            .await
    }

    /// Deletes every segment that ends at or below `keep_from` (its successor starts there
    /// or before), oldest first, and moves the log start offset up to the first one kept
    /// (never down: DeleteRecords may have moved it into that segment already).
    pub(super) async fn delete_segments_before(
        &self,
        keep_from: i64,
        why: &'static str,
    ) -> Result<Deleted, StorageError> {
        let inner = &*self.inner;
        let (deleted, bases, readers) = {
            let mut state = inner.state.borrow_mut();
            let state = &mut *state;
            if state.truncating {
                return Ok(Deleted::default());
            }
            let queue = &state.queue;
            let count = state
                .segments
                .windows(2)
                .take_while(|pair| {
                    let base = pair[0].base_offset;
                    pair[1].base_offset <= keep_from && !queue.holds_segment(base)
                })
                .count();
            if count == 0 {
                return Ok(Deleted::default());
            }
            let removed: Vec<Segment> = state.segments.drain(..count).collect();
            state.log_start_offset = state.log_start_offset.max(state.segments[0].base_offset);
            if state.epochs.truncate_from_start(state.log_start_offset) {
                state.epochs_changed();
            }
            let deleted = Deleted {
                segments: count,
                bytes: removed.iter().map(|s| s.size_bytes).sum(),
            };
            let bases: Vec<i64> = removed.iter().map(|s| s.base_offset).collect();
            let readers: Vec<_> = removed
                .iter()
                .filter_map(|s| s.file.as_ref().map(Rc::downgrade))
                .collect();
            (deleted, bases, readers)
        };
        let log_start_offset = self.log_start_offset();
        inner
            .cache
            .remove_segments_before(inner.log_id, log_start_offset);
        tracing::info!(
            dir = %inner.dir.display(),
            segments = deleted.segments,
            bytes = deleted.bytes,
            log_start_offset,
            "{why}"
        );
        let dir = inner.dir.clone();
        let spare_room = inner.spare_room();
        let (spares, unlinked) = glommio::executor()
            .spawn_blocking(move || {
                // Oldest first: a crash part-way leaves a shorter log, never a hole.
                let mut spares = Vec::new();
                let mut unlinked = Unlinked::default();
                for base_offset in bases {
                    let path = segment_path(&dir, base_offset, LOG_SUFFIX);
                    let freed = vec![FreedLog { base_offset, path }];
                    let room = spare_room - spares.len();
                    spares.extend(keep_or_remove(&dir, freed, room, &mut unlinked)?);
                    unlink_segment_files(&dir, base_offset, &mut unlinked)?;
                }
                Ok::<_, StorageError>((spares, unlinked))
            })
            .await?;
        // Freed at a pace once readers of the removed segments are done (`crate::reaper`).
        reaper::free_paced(unlinked, readers);
        inner.spares.borrow_mut().extend(spares);
        inner.persist_epochs().await?;
        Ok(deleted)
    }
}
