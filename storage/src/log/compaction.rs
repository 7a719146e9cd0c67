//! Log compaction (Kafka's `cleanup.policy=compact`): the latest record of each key survives,
//! older ones go, and tombstones (null values) go once `delete_retention_ms` has passed.
//!
//! ```text
//!  segments: [s0 clean][s1 clean][s2 dirty][s3 dirty][s4 too new][s5 active]
//!            ^ log start          ^ first dirty offset ^ first uncleanable offset
//! ```
//! A round (`Log::clean`) reads the dirty part of the cleanable (sealed, old enough, below
//! `CleanPolicy::end_offset_max`) segments into an offset map, key → latest offset, until the
//! map is full; it then rewrites every cleanable segment that starts below the offset the map
//! reached, adjacent ones merged into one as long as they fit `segment_bytes_max` together
//! (`merge_groups`), and records that offset as the new first dirty offset in the log's
//! `cleaner-offset-checkpoint`. A second round on an unchanged log reads nothing.
//!
//! Replacing a group of segments, the first at `<base>`, so that a crash at any point leaves
//! either the old segments or the new one, whole:
//! ```text
//!  <base>.log.cleaned  <base>.index.cleaned  <base>.timeindex.cleaned   written, fdatasynced
//!  → <base>.index.swap, <base>.timeindex.swap, then <base>.log.swap      (the commit point)
//!  → every file of the group's segments renamed to `.deleted` (`<base>.log.deleted`,
//!    `<base>.index.deleted`, `<later>.log.deleted`, ...), so that no rename replaces a file
//!  → the .swap files renamed to <base>.index, <base>.timeindex, then to <base>.log;
//!    the directory fsynced; on the blocking thread, the `.log.deleted` files renamed to
//!    spares while the log has room for them (`spares.rs`), the other `.deleted` unlinked
//!    and freed at a pace once the round's readers are done (`crate::reaper`)
//! ```
//! Renames in one directory reach the disk in the order they were made (the file system's
//! journal), so no `.deleted` file exists on disk without the commit before it.
//! On open (`complete_swaps`), `.cleaned` and `.deleted` files are deleted; for a `.log.swap`,
//! the segments that start inside the offsets it holds (the group merged into it) are
//! removed, then its index `.swap` files, if any are left, and itself are renamed into place;
//! an index `.swap` without its `.log.swap` is deleted. A later segment of a group that lost
//! every record starts past what the swap holds and may survive such a crash: it holds only
//! records a later one replaced, so the log reads the same.
//!
//! Invariants: the active segment, a segment the write queue still holds an op of, and any
//! segment that ends past `end_offset_max` or holds a record younger than
//! `min_compaction_lag_ms` are never cleaned; offsets never change (a cleaned segment has
//! gaps; a read at an offset in a gap answers the next batch after it); one round at a time
//! per log; the in-memory segments are replaced in the same synchronous step as the renames,
//! only if they are still the ones that were read (same files, same sizes, no truncation
//! since), with the batch cache's entries of those segments dropped in that step; readers
//! that planned on an old file keep it open (`Rc`) and re-read when they see the rewrite
//! count change; the first dirty offset only moves once every segment below it was
//! rewritten.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::open::remove_file_if_present;
use super::read::SegmentReader;
use super::spares::{keep_or_remove, FreedLog};
use super::{Inner, Log, State};
use crate::batch::BatchHeader;
use crate::checkpoint::{encode_lines, parse_lines, read_text, write_atomically};
use crate::compact::{filter_batch, for_each_record, Filtered, OffsetMap};
use crate::cpu_slice::CpuSlice;
use crate::error::StorageError;
use crate::io::{sync_dir, write_small_file, IoMode, SegmentFile};
use crate::io_throttle::IoThrottle;
use crate::reaper::{self, Unlinked};
use crate::segment::{segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};

/// `<partition>/cleaner-offset-checkpoint`: `0 | 1 | <first dirty offset> <tombstones due ms>`
/// (Kafka's text checkpoint form; one log per file).
pub(super) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// A cleaned segment's file being written.
pub(crate) const CLEANED_SUFFIX: &str = "cleaned";
/// A cleaned segment's file, complete, about to replace the old one.
pub(crate) const SWAP_SUFFIX: &str = "swap";
/// A file of a segment merged into the one before it, about to be unlinked.
pub(crate) const DELETED_SUFFIX: &str = "deleted";
/// Writes of a cleaned copy, in pieces of this size.
const CLEAN_IO_BYTES: usize = 1 << 20;
/// Reads of a segment being cleaned, in pieces of this size: a write the disk queues behind
/// a read waits for all of it.
const CLEAN_READ_BYTES: usize = 128 << 10;

/// How a round of cleaning runs (Kafka's names in the comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanPolicy {
    /// log.cleaner.dedupe.buffer.size (this log's share): memory of the offset map.
    pub dedupe_buffer_bytes: usize,
    /// min.compaction.lag.ms: a segment holding a record younger than this is not cleaned.
    pub min_compaction_lag_ms: i64,
    /// delete.retention.ms: how long a tombstone survives after its segment's last record.
    pub delete_retention_ms: i64,
    /// No segment that ends past this offset is cleaned (the high watermark: a follower may
    /// still truncate above it).
    pub end_offset_max: i64,
}

impl Default for CleanPolicy {
    fn default() -> Self {
        CleanPolicy {
            dedupe_buffer_bytes: 128 << 20,
            min_compaction_lag_ms: 0,
            delete_retention_ms: 86_400_000,
            end_offset_max: i64::MAX,
        }
    }
}

/// What a round of cleaning did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub segments_rewritten: usize,
    /// Bytes of the segments the round read to rewrite, whether they changed or not (Kafka's
    /// "MB of log processed"; the offset map's reads of the dirty part come on top).
    pub bytes_read: u64,
    /// Sizes of the rewritten segments before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    pub batches_removed: u64,
    /// Keys in the offset map.
    pub keys: usize,
    /// The first dirty offset after the round.
    pub first_dirty_offset: i64,
}

/// The cleanable part of a log, for choosing whether to clean it (Kafka's dirty ratio).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleanable {
    /// Bytes of cleanable segments below the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of cleanable segments at or past it.
    pub dirty_bytes: u64,
    /// Largest timestamp of the oldest dirty cleanable segment (max.compaction.lag.ms).
    pub oldest_dirty_timestamp_ms: Option<i64>,
    /// Tombstones an earlier round kept may go now.
    pub tombstones_due: bool,
}

impl Cleanable {
    /// Dirty bytes over all cleanable bytes (0 when there are none).
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            return 0.0;
        }
        self.dirty_bytes as f64 / total as f64
    }
}

/// The cleaner's part of a log's state.
pub(super) struct CleanerState {
    pub first_dirty_offset: i64,
    /// When the earliest tombstone a round kept may go (`i64::MAX`: none kept).
    pub tombstones_due_ms: i64,
    /// A round is under way.
    pub cleaning: bool,
    /// Segments replaced since the log was opened: a read that raced one is retried.
    pub rewrites: u64,
}

impl Default for CleanerState {
    fn default() -> Self {
        CleanerState {
            first_dirty_offset: 0,
            tombstones_due_ms: i64::MAX,
            cleaning: false,
            rewrites: 0,
        }
    }
}

/// A cleanable segment as the round found it.
struct Candidate {
    base_offset: i64,
    /// The next segment's base offset.
    end_offset: i64,
    file: Rc<SegmentFile>,
    size_bytes: u64,
    largest_timestamp_ms: i64,
}

/// Steps a test can stop a round at, leaving the files as a crash there would.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CleanStep {
    /// The `.cleaned` files are written and synced.
    Cleaned,
    /// The `.cleaned` files are renamed to `.swap`.
    Swap,
    /// The merged segments' files are renamed to `.deleted`.
    Deleted,
}

#[cfg(test)]
thread_local! {
    pub(crate) static STOP_AT: std::cell::Cell<Option<CleanStep>> =
        const { std::cell::Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// When set, a clean waits for a permit after each swap, before it frees the old files.
    pub(crate) static PAUSE_AFTER_SWAP: std::cell::RefCell<Option<Rc<glommio::sync::Semaphore>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
fn stop_at(step: CleanStep) -> Result<(), StorageError> {
    if STOP_AT.get() == Some(step) {
        let error = std::io::Error::other(format!("test stop at {step:?}"));
        return Err(StorageError::io("clean", PathBuf::new(), error));
    }
    Ok(())
}

pub(crate) fn cleaner_path(dir: &Path, base_offset: i64, suffix: &str, stage: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}.{stage}"))
}

/// Clears `cleaning` however the round ends.
struct Cleaning<'a>(&'a Inner);

impl Drop for Cleaning<'_> {
    fn drop(&mut self) {
        self.0.state.borrow_mut().cleaner.cleaning = false;
    }
}

impl Inner {
    /// The cleanable segments, oldest first: sealed, off the write queue, ending at or below
    /// `end_offset_max`, and (with a lag) with no record younger than the lag.
    fn cleanable_segments(
        &self,
        state: &State,
        policy: &CleanPolicy,
        now_ms: i64,
    ) -> Vec<Candidate> {
        let mut candidates = Vec::new();
        for pair in state.segments.windows(2) {
            let (segment, next) = (&pair[0], &pair[1]);
            let Some(file) = segment.file.clone() else {
                break;
            };
            if state.queue.holds_segment(segment.base_offset)
                || next.base_offset > policy.end_offset_max
            {
                break;
            }
            let age = self.segment_age(segment, now_ms);
            let lag_start = now_ms.saturating_sub(policy.min_compaction_lag_ms);
            if policy.min_compaction_lag_ms > 0 && age.largest_timestamp_ms > lag_start {
                break;
            }
            candidates.push(Candidate {
                base_offset: segment.base_offset,
                end_offset: next.base_offset,
                file,
                size_bytes: segment.size_bytes,
                largest_timestamp_ms: age.largest_timestamp_ms,
            });
        }
        candidates
    }

    fn first_dirty_offset(state: &State) -> i64 {
        state
            .cleaner
            .first_dirty_offset
            .max(state.segments[0].base_offset)
    }
}

impl Log {
    /// How much of the log is cleanable, and how much of that is dirty.
    pub fn cleanable(&self, policy: CleanPolicy, now_ms: i64) -> Cleanable {
        let inner = &*self.inner;
        let state = inner.state.borrow();
        let first_dirty = Inner::first_dirty_offset(&state);
        let mut cleanable = Cleanable {
            tombstones_due: now_ms >= state.cleaner.tombstones_due_ms,
            ..Cleanable::default()
        };
        for candidate in inner.cleanable_segments(&state, &policy, now_ms) {
            if candidate.end_offset <= first_dirty {
                cleanable.clean_bytes += candidate.size_bytes;
            } else {
                cleanable.dirty_bytes += candidate.size_bytes;
                cleanable
                    .oldest_dirty_timestamp_ms
                    .get_or_insert(candidate.largest_timestamp_ms);
            }
        }
        cleanable
    }

    /// The first offset not yet read into an offset map (Kafka's cleaner checkpoint).
    pub fn first_dirty_offset(&self) -> i64 {
        Inner::first_dirty_offset(&self.inner.state.borrow())
    }

    /// Compacts the log's cleanable segments (see the module comment): a record survives if
    /// it is the latest of its key the offset map saw (or newer than what the map covers), a
    /// record without a key survives, and a tombstone survives until `delete_retention_ms`
    /// after its segment's largest timestamp. Returns at once when nothing is dirty and no
    /// kept tombstone is due. A segment that retention or a truncation took meanwhile ends
    /// the round early, with the first dirty offset where it was.
    pub async fn clean(
        &self,
        policy: CleanPolicy,
        now_ms: i64,
        throttle: &IoThrottle,
    ) -> Result<CleanStats, StorageError> {
        let inner = &*self.inner;
        let (candidates, first_dirty, truncations) = {
            let mut state = inner.state.borrow_mut();
            if let Some(reason) = &state.failed {
                return Err(inner.failed_error(reason));
            }
            if state.closed {
                return Err(StorageError::Closed {
                    path: inner.dir.clone(),
                });
            }
            let first_dirty = Inner::first_dirty_offset(&state);
            let idle = CleanStats {
                first_dirty_offset: first_dirty,
                ..CleanStats::default()
            };
            if state.truncating || state.cleaner.cleaning {
                return Ok(idle);
            }
            let candidates = inner.cleanable_segments(&state, &policy, now_ms);
            let dirty = candidates.iter().any(|c| c.end_offset > first_dirty);
            if candidates.is_empty() || (!dirty && now_ms < state.cleaner.tombstones_due_ms) {
                return Ok(idle);
            }
            state.cleaner.cleaning = true;
            (candidates, first_dirty, state.truncations)
        };
        let _cleaning = Cleaning(inner);
        let mut map = OffsetMap::new(policy.dedupe_buffer_bytes);
        let slice = CpuSlice::new();
        let mut stats = CleanStats {
            first_dirty_offset: first_dirty,
            ..CleanStats::default()
        };
        let map_end = match self
            .build_offset_map(&candidates, first_dirty, &mut map, throttle, &slice)
            .await
        {
            Ok(map_end) => map_end,
            Err(error) => return self.round_ended(error, stats, &candidates),
        };
        stats.keys = map.len();
        let mut tombstones_due_ms = i64::MAX;
        let cleaned = candidates.partition_point(|c| c.base_offset < map_end);
        let segment_bytes_max = inner.config.get().segment_bytes_max;
        for group in merge_groups(&candidates[..cleaned], segment_bytes_max) {
            let round = Round {
                policy: &policy,
                now_ms,
                map: &map,
                truncations,
                throttle,
                slice: &slice,
            };
            match self.clean_group(group, &round, &mut stats).await {
                Ok(Some(due_ms)) => tombstones_due_ms = tombstones_due_ms.min(due_ms),
                Ok(None) => {}
                Err(error) => return self.round_ended(error, stats, &candidates),
            }
            if stats.first_dirty_offset < 0 {
                // The segment changed under the round.
                stats.first_dirty_offset = first_dirty;
                return Ok(stats);
            }
        }
        let first_dirty = map_end.max(first_dirty);
        let line = format!("{first_dirty} {tombstones_due_ms}");
        let path = inner.dir.join(CLEANER_CHECKPOINT_FILE);
        write_atomically(&path, encode_lines(std::iter::once(line))).await?;
        let mut state = inner.state.borrow_mut();
        state.cleaner.first_dirty_offset = first_dirty;
        state.cleaner.tombstones_due_ms = tombstones_due_ms;
        stats.first_dirty_offset = first_dirty;
        tracing::debug!(dir = %inner.dir.display(), ?stats, "cleaned log");
        Ok(stats)
    }

    /// A round that failed: a segment read went away because retention or a truncation took
    /// it (the round ends, nothing lost), or the log itself failed or closed.
    fn round_ended(
        &self,
        error: StorageError,
        stats: CleanStats,
        candidates: &[Candidate],
    ) -> Result<CleanStats, StorageError> {
        let inner = &*self.inner;
        let state = inner.state.borrow();
        let raced = matches!(
            error,
            StorageError::Closed { .. } | StorageError::CorruptFile { .. }
        ) && !state.closed
            && state.failed.is_none()
            && candidates
                .iter()
                .any(|candidate| !inner.reads_from(candidate.base_offset, &candidate.file));
        if raced {
            return Ok(stats);
        }
        Err(error)
    }

    /// Reads the dirty batches of `candidates` from `first_dirty` into `map` until it is
    /// full; returns the offset the map covers up to (a batch boundary or a segment end).
    /// At least one batch is read, so every round makes progress.
    async fn build_offset_map(
        &self,
        candidates: &[Candidate],
        first_dirty: i64,
        map: &mut OffsetMap,
        throttle: &IoThrottle,
        slice: &CpuSlice,
    ) -> Result<i64, StorageError> {
        let inner = &*self.inner;
        let mut covered = first_dirty;
        for candidate in candidates.iter().filter(|c| c.end_offset > first_dirty) {
            let base = candidate.base_offset;
            let mut reader = SegmentReader::background(CLEAN_READ_BYTES);
            let mut position = 0;
            while let Some(header) = reader.header_at(inner, base, position).await? {
                let total_bytes = header.total_bytes();
                if header.last_offset() >= first_dirty && !header.is_control() {
                    let records = usize::try_from(header.record_count).unwrap_or(0);
                    if !map.is_empty() && !map.has_room(records) {
                        return Ok(header.base_offset.max(first_dirty));
                    }
                    let batch = reader.bytes(inner, base, position, total_bytes).await?;
                    // A batch whose records cannot be read is kept whole: it adds no key.
                    let _ = for_each_record(&batch, &header, |record| {
                        if let Some(key) = record.key {
                            map.put(key, record.offset);
                        }
                    });
                }
                position += total_bytes as u64;
                throttle.moved(total_bytes).await;
                // Decompressing and hashing are the cleaner's CPU: let others run between.
                slice.yield_if_due().await;
            }
            covered = candidate.end_offset;
        }
        Ok(covered)
    }

    /// Rewrites a group of adjacent segments as one, without the records the round removes,
    /// and swaps it in if any record went or the group merged segments. Returns when the
    /// tombstones it kept are due, if it kept any. Sets `stats.first_dirty_offset` to -1 when
    /// a segment changed under the round.
    async fn clean_group(
        &self,
        group: &[Candidate],
        round: &Round<'_>,
        stats: &mut CleanStats,
    ) -> Result<Option<i64>, StorageError> {
        let inner = &*self.inner;
        let base = group[0].base_offset;
        let dir = &inner.dir;
        let cleaned_log = cleaner_path(dir, base, LOG_SUFFIX, CLEANED_SUFFIX);
        reaper::delete(vec![cleaned_log.clone()], Vec::new()).await?;
        let output = SegmentFile::open(&cleaned_log, IoMode::Buffered).await?;
        let index_interval_bytes = inner.config.get().index_interval_bytes;
        let mut segment = Segment::new(base, None);
        let mut pending: Vec<u8> = Vec::with_capacity(CLEAN_IO_BYTES);
        let mut pending_position = 0u64;
        let mut changed = group.len() > 1;
        let mut records_removed = 0u64;
        let mut batches_removed = 0u64;
        let mut due_ms: Option<i64> = None;
        for member in group {
            let deletes_due_ms = member
                .largest_timestamp_ms
                .saturating_add(round.policy.delete_retention_ms);
            let retain_deletes = round.now_ms < deletes_due_ms;
            let mut tombstone_kept = false;
            let mut reader = SegmentReader::background(CLEAN_READ_BYTES);
            let mut position = 0u64;
            let member_base = member.base_offset;
            while let Some(header) = reader.header_at(inner, member_base, position).await? {
                let total_bytes = header.total_bytes();
                let batch = reader
                    .bytes(inner, member_base, position, total_bytes)
                    .await?;
                position += total_bytes as u64;
                round.throttle.moved(total_bytes).await;
                round.slice.yield_if_due().await;
                // An idempotent producer's batch stays, empty if need be, while the producer
                // state remembers it: a replay of the log must find it again (Kafka keeps the
                // last batch of each producer).
                let keep_empty = header.has_producer_id()
                    && (inner.state.borrow().producers)
                        .remembers(header.producer_id, header.last_offset());
                let filtered = filter_batch(&batch, &header, keep_empty, |record| {
                    let Some(key) = record.key else {
                        return true;
                    };
                    if round
                        .map
                        .get(key)
                        .is_some_and(|latest| record.offset < latest)
                    {
                        return false;
                    }
                    if record.is_tombstone {
                        tombstone_kept |= retain_deletes;
                        return retain_deletes;
                    }
                    true
                });
                let kept: Cow<[u8]> = match filtered {
                    Filtered::Unchanged => Cow::Borrowed(&batch),
                    Filtered::Rewritten {
                        bytes,
                        records_removed: removed,
                    } => {
                        records_removed += u64::from(removed);
                        Cow::Owned(bytes)
                    }
                    Filtered::Removed {
                        records_removed: removed,
                    } => {
                        records_removed += u64::from(removed);
                        batches_removed += 1;
                        changed = true;
                        continue;
                    }
                };
                changed |= matches!(kept, Cow::Owned(_));
                let kept_header = BatchHeader::parse(&kept).map_err(|e| {
                    StorageError::corrupt(&cleaned_log, format!("rewritten batch: {e}"))
                })?;
                segment.on_batch(
                    &kept_header,
                    pending_position + pending.len() as u64,
                    index_interval_bytes,
                );
                pending.extend_from_slice(&kept);
                if pending.len() >= CLEAN_IO_BYTES {
                    let bytes = std::mem::take(&mut pending);
                    let len = bytes.len() as u64;
                    output.write_buffered(bytes, pending_position).await?;
                    pending_position += len;
                    round.throttle.moved(len as usize).await;
                }
            }
            if tombstone_kept {
                due_ms = Some(due_ms.map_or(deletes_due_ms, |due| due.min(deletes_due_ms)));
            }
        }
        stats.bytes_read += group.iter().map(|c| c.size_bytes).sum::<u64>();
        if !changed {
            drop(output);
            reaper::delete(vec![cleaned_log], Vec::new()).await?;
            return Ok(due_ms);
        }
        if !pending.is_empty() {
            output.write_buffered(pending, pending_position).await?;
        }
        keep_modified_time(&segment_path(dir, base, LOG_SUFFIX), &cleaned_log)?;
        output.fdatasync().await?;
        let last = group.last().expect("a group has a segment");
        segment.written_bytes = segment.size_bytes;
        segment.next_offset = last.end_offset;
        segment.complete_time_index();
        let index_path = cleaner_path(dir, base, INDEX_SUFFIX, CLEANED_SUFFIX);
        write_small_file(&index_path, segment.index.encode()).await?;
        let time_index_path = cleaner_path(dir, base, TIME_INDEX_SUFFIX, CLEANED_SUFFIX);
        write_small_file(&time_index_path, segment.time_index.encode()).await?;
        #[cfg(test)]
        stop_at(CleanStep::Cleaned)?;
        let file = match inner.config.get().io_mode {
            IoMode::Buffered => Rc::new(output),
            IoMode::Direct => {
                drop(output);
                Rc::new(SegmentFile::open(&cleaned_log, IoMode::Direct).await?)
            }
        };
        segment.file = Some(file);
        let size_after = segment.size_bytes;
        let Some(freed) = self.swap_in(group, segment, round.truncations)? else {
            let cleaned = [INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX]
                .map(|suffix| cleaner_path(dir, base, suffix, CLEANED_SUFFIX));
            reaper::delete(cleaned.into(), Vec::new()).await?;
            stats.first_dirty_offset = -1;
            return Ok(None);
        };
        sync_dir(dir).await?;
        #[cfg(test)]
        if let Some(pause) = PAUSE_AFTER_SWAP.with_borrow(Clone::clone) {
            pause.acquire(1).await.expect("pause");
        }
        // Freed at a pace once the round's readers are done with them (`crate::reaper`).
        let (spare_room, blocking_dir) = (inner.spare_room(), dir.clone());
        let (spares, unlinked) = glommio::executor()
            .spawn_blocking(move || {
                let mut unlinked = Unlinked::default();
                for path in freed.indexes {
                    unlinked.unlink(&path)?;
                }
                let spares = keep_or_remove(&blocking_dir, freed.logs, spare_room, &mut unlinked)?;
                Ok::<_, StorageError>((spares, unlinked))
            })
            .await?;
        let readers = group.iter().map(|c| Rc::downgrade(&c.file)).collect();
        reaper::free_paced(unlinked, readers);
        let truncated = {
            let state = inner.state.borrow();
            state.truncating || state.truncations != round.truncations
        };
        if truncated {
            // A truncation began since the swap and may have moved the log end below what the
            // spares held: it unlinked the spares it found, and these must go too.
            reaper::delete(spares, Vec::new()).await?;
        } else {
            inner.spares.borrow_mut().extend(spares);
        }
        stats.segments_rewritten += group.len();
        stats.bytes_before += group.iter().map(|c| c.size_bytes).sum::<u64>();
        stats.bytes_after += size_after;
        stats.records_removed += records_removed;
        stats.batches_removed += batches_removed;
        Ok(due_ms)
    }

    /// Replaces the segments `group` was read from by `segment`, on disk (renames) and in
    /// memory, in one step without an `.await`: the `.swap` commit, the replaced files renamed
    /// to `.deleted` (the first segment's `.log`, the later segments' `.log` and indexes;
    /// returned, for the caller to keep as spares or unlink), the `.swap` files renamed into
    /// place. `None` if a segment is not the one read any more (retention, a
    /// truncation or a close came in between).
    fn swap_in(
        &self,
        group: &[Candidate],
        segment: Segment,
        truncations: u64,
    ) -> Result<Option<Freed>, StorageError> {
        let inner = &*self.inner;
        let mut state = inner.state.borrow_mut();
        let state = &mut *state;
        let base = group[0].base_offset;
        let slot = state.segment_slot(base).filter(|&slot| {
            slot + group.len() < state.segments.len()
                && group.iter().enumerate().all(|(i, candidate)| {
                    let current = &state.segments[slot + i];
                    current.base_offset == candidate.base_offset
                        && current.size_bytes == candidate.size_bytes
                        && current
                            .file
                            .as_ref()
                            .is_some_and(|f| Rc::ptr_eq(f, &candidate.file))
                })
        });
        let Some(slot) = slot else {
            return Ok(None);
        };
        if state.truncating
            || state.closed
            || state.failed.is_some()
            || state.truncations != truncations
        {
            return Ok(None);
        }
        let dir = &inner.dir;
        let rename = |from: PathBuf, to: PathBuf| {
            std::fs::rename(&from, &to).map_err(|e| StorageError::io("rename", &from, e))
        };
        // The .log last: its .swap is the commit point recovery goes by.
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX] {
            rename(
                cleaner_path(dir, base, suffix, CLEANED_SUFFIX),
                cleaner_path(dir, base, suffix, SWAP_SUFFIX),
            )?;
        }
        #[cfg(test)]
        stop_at(CleanStep::Swap)?;
        let mut freed = Freed::default();
        for member in group {
            // The first member's files too, which the swap's renames would otherwise replace:
            // every replaced `.log` may become a spare, and a rename over a file frees that
            // file's blocks on this thread, which waits for the disk to discard them on a
            // `discard` mount (`SegmentFile::truncate`); the blocking thread unlinks the rest.
            let base_offset = member.base_offset;
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let from = segment_path(dir, base_offset, suffix);
                let to = cleaner_path(dir, base_offset, suffix, DELETED_SUFFIX);
                match std::fs::rename(&from, &to) {
                    Ok(()) if suffix == LOG_SUFFIX => freed.logs.push(FreedLog {
                        base_offset,
                        path: to,
                    }),
                    Ok(()) => freed.indexes.push(to),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StorageError::io("rename", &from, e)),
                }
            }
        }
        #[cfg(test)]
        stop_at(CleanStep::Deleted)?;
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX] {
            rename(
                cleaner_path(dir, base, suffix, SWAP_SUFFIX),
                segment_path(dir, base, suffix),
            )?;
        }
        // Readers holding the old files keep them open until they are done with them.
        let _old: Vec<Segment> = state
            .segments
            .splice(slot..slot + group.len(), std::iter::once(segment))
            .collect();
        state.cleaner.rewrites += 1;
        for member in group {
            inner.cache.remove_segment(inner.log_id, member.base_offset);
        }
        Ok(Some(freed))
    }
}

/// The files a swap replaced, renamed to `.deleted`.
#[derive(Default)]
struct Freed {
    logs: Vec<FreedLog>,
    indexes: Vec<PathBuf>,
}

/// Gives the cleaned file the old one's modification time, as Kafka does: retention ages a
/// segment without timestamps (an emptied one, say) by it, and cleaning must not make
/// it young again.
fn keep_modified_time(old: &Path, cleaned: &Path) -> Result<(), StorageError> {
    let modified = std::fs::metadata(old)
        .and_then(|metadata| metadata.modified())
        .map_err(|e| StorageError::io("stat", old, e))?;
    std::fs::File::options()
        .write(true)
        .open(cleaned)
        .and_then(|file| file.set_modified(modified))
        .map_err(|e| StorageError::io("set modified time", cleaned, e))
}

/// Runs of adjacent candidates to rewrite as one segment each, as Kafka groups them: as many
/// as fit `segment_bytes_max` together (as they are now: a round shrinks them, and the next
/// round merges more) with offsets the indexes can hold relative to the first.
fn merge_groups(candidates: &[Candidate], segment_bytes_max: u64) -> Vec<&[Candidate]> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < candidates.len() {
        let mut end = start + 1;
        let mut bytes = candidates[start].size_bytes;
        while let Some(next) = candidates.get(end) {
            let span = next.end_offset - candidates[start].base_offset;
            if bytes + next.size_bytes > segment_bytes_max || span > i64::from(u32::MAX) {
                break;
            }
            bytes += next.size_bytes;
            end += 1;
        }
        groups.push(&candidates[start..end]);
        start = end;
    }
    groups
}

/// What every segment of a round is cleaned against.
struct Round<'a> {
    policy: &'a CleanPolicy,
    now_ms: i64,
    map: &'a OffsetMap,
    truncations: u64,
    /// log.cleaner.io.max.bytes.per.second (this log's cleaner's share): reads and writes.
    throttle: &'a IoThrottle,
    /// The cleaner's turns on the shard's CPU.
    slice: &'a CpuSlice,
}

/// The cleaner's state as its checkpoint in `dir` recorded it (defaults without one).
pub(super) async fn load_cleaner_state(dir: &Path) -> Result<CleanerState, StorageError> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let Some(text) = read_text(&path).await? else {
        return Ok(CleanerState::default());
    };
    let lines = parse_lines(&text, 2).map_err(|reason| StorageError::corrupt(&path, reason))?;
    let [fields] = lines.as_slice() else {
        return Err(StorageError::corrupt(&path, "expected one entry"));
    };
    let (Ok(first_dirty_offset), Ok(tombstones_due_ms)) =
        (fields[0].parse::<i64>(), fields[1].parse::<i64>())
    else {
        return Err(StorageError::corrupt(&path, "not an offset and a time"));
    };
    Ok(CleanerState {
        first_dirty_offset: first_dirty_offset.max(0),
        tombstones_due_ms,
        ..CleanerState::default()
    })
}

/// Finishes or undoes what a crash left of a round in `dir` (see the module comment).
/// Returns whether anything changed.
pub(super) async fn complete_swaps(dir: &Path) -> Result<bool, StorageError> {
    let mut log_swaps = Vec::new();
    let mut index_swaps = Vec::new();
    let mut log_bases = Vec::new();
    let mut changed = false;
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io("read dir", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read dir", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((base, LOG_SUFFIX)) = crate::segment::parse_segment_file_name(name) {
            log_bases.push(base);
            continue;
        }
        let Some((file, stage)) = name.rsplit_once('.') else {
            continue;
        };
        let Some((base, suffix)) = crate::segment::parse_segment_file_name(file) else {
            continue;
        };
        match (stage, suffix) {
            (CLEANED_SUFFIX | DELETED_SUFFIX, _) => {
                tracing::info!(file = name, "removing a file a crash left mid-clean");
                remove_file_if_present(&entry.path())?;
                changed = true;
            }
            (SWAP_SUFFIX, LOG_SUFFIX) => log_swaps.push(base),
            (SWAP_SUFFIX, INDEX_SUFFIX | TIME_INDEX_SUFFIX) => index_swaps.push((base, suffix)),
            _ => {}
        }
    }
    for &base in &log_swaps {
        // The segments merged into the swap: those that start inside what it holds. A later
        // one of the group that lost every record holds only replaced records: it may stay.
        let swap = cleaner_path(dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let file = SegmentFile::open(&swap, IoMode::Buffered).await?;
        let mut scanned = Segment::new(base, None);
        let file_bytes = file.size_bytes().await?;
        crate::recovery::scan_segment(&file, file_bytes, &mut scanned, u32::MAX).await?;
        drop(file);
        for &merged in log_bases
            .iter()
            .filter(|&&b| b > base && b < scanned.next_offset)
        {
            tracing::info!(
                base_offset = merged,
                "removing a segment merged by the cleaner"
            );
            super::open::remove_segment_files(dir, merged)?;
        }
    }
    for (base, suffix) in index_swaps {
        let swap = cleaner_path(dir, base, suffix, SWAP_SUFFIX);
        if log_swaps.contains(&base) {
            let target = segment_path(dir, base, suffix);
            std::fs::rename(&swap, &target).map_err(|e| StorageError::io("rename", &swap, e))?;
        } else {
            remove_file_if_present(&swap)?;
        }
        changed = true;
    }
    for base in log_swaps {
        tracing::info!(
            base_offset = base,
            "completing the swap of a cleaned segment"
        );
        let swap = cleaner_path(dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let target = segment_path(dir, base, LOG_SUFFIX);
        std::fs::rename(&swap, &target).map_err(|e| StorageError::io("rename", &swap, e))?;
        changed = true;
    }
    Ok(changed)
}
