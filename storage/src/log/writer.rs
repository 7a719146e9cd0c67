//! The writer of a partition log: a task that starts queued ops as soon as
//! `WriteQueue::next_job` allows, each as its own task; segment files, created on first write
//! (from a spare when there is one) and allocated ahead of the writes; the sealing of rolled
//! segments; and `Log::sync`, the group commit.
//!
//! Invariants: a write is reported done to the queue only once it returned whole; a failed
//! write or fdatasync latches the log (`Inner::latch`) and is never retried (the kernel may
//! have dropped the dirty pages); one fdatasync round per log at a time, and it marks synced
//! only the ops done before it began; a durable write (`RWF_DSYNC`, for a sync waiting on
//! it) counts as synced only once every op before it is (`WriteQueue::advance_synced`); a
//! round cancelled mid-way hands its files back to the dirty list and frees the slot; the
//! writer holds the log weakly, so dropping every `Log` stops it.

use std::path::Path;
use std::rc::{Rc, Weak};
use std::time::Instant;

use super::write_queue::{ChunkInfo, Job, Snapshot};
use super::{DiskWrites, Inner, Log, Signals};
use crate::error::StorageError;
use crate::io::{align_up, sync_dir, SegmentFile};
use crate::recovery::write_indexes;
use crate::segment::{segment_path, LOG_SUFFIX};

#[cfg(test)]
thread_local! {
    /// When set, a seal waits for a permit once its `.log` is durable and the epochs are
    /// checkpointed, before it writes the indexes.
    pub(crate) static PAUSE_SEAL: std::cell::RefCell<Option<Rc<glommio::sync::Semaphore>>> =
        const { std::cell::RefCell::new(None) };
}

/// Segment files grow in allocated steps of this size (see `SegmentFile::allocate_to`).
pub(super) const ALLOCATION_STEP_BYTES: u64 = 32 << 20;

impl Inner {
    /// The file of a segment, created (and made durable in the directory) on first use.
    pub(super) async fn segment_file(
        &self,
        segment_base_offset: i64,
    ) -> Result<Rc<SegmentFile>, StorageError> {
        let existing = {
            let state = self.state.borrow();
            let slot = state.segment_slot(segment_base_offset);
            slot.and_then(|slot| state.segments[slot].file.clone())
        };
        if let Some(file) = existing {
            return Ok(file);
        }
        let path = segment_path(&self.dir, segment_base_offset, LOG_SUFFIX);
        self.reuse_spare(&path);
        let file = Rc::new(SegmentFile::open(&path, self.config.get().io_mode).await?);
        sync_dir(&self.dir).await?;
        let mut state = self.state.borrow_mut();
        match state.segment_slot(segment_base_offset) {
            // A segment keeps the first file it got: reads check that the file they read is
            // still their segment's (`Inner::reads_from`).
            Some(slot) => Ok(state.segments[slot].file.get_or_insert(file).clone()),
            None => Ok(file),
        }
    }

    /// How far ahead of its writes a segment file is allocated: `ALLOCATION_STEP_BYTES`, or
    /// a whole segment when segments are smaller.
    fn allocation_step(&self) -> u64 {
        align_up(self.config.get().segment_bytes_max).min(ALLOCATION_STEP_BYTES)
    }

    /// Makes a spare file the new segment file `path`, unless `path` exists already. No
    /// `.await` between the check and the rename, so two callers never both rename onto it.
    /// The spare's old batches past what the new segment writes are never read: reads stop
    /// at the segment's size, sealing and closing truncate the file to it, and recovery
    /// stops at the first batch whose offset is below the segment's (a spare always held
    /// older offsets of the same partition).
    fn reuse_spare(&self, path: &Path) {
        if path.exists() {
            return;
        }
        let Some(spare) = self.spares.borrow_mut().pop() else {
            return;
        };
        if let Err(error) = std::fs::rename(&spare, path) {
            tracing::warn!(spare = %spare.display(), %error, "could not reuse a spare segment file");
        }
    }

    /// Takes the next op the writer may start, noting how many are in flight.
    fn take_job(&self) -> Option<Job> {
        let mut state = self.state.borrow_mut();
        let job = state.take_job(Instant::now())?;
        let writes = self.disk_writes.get();
        self.disk_writes.set(DiskWrites {
            most_in_flight: writes.most_in_flight.max(state.queue.writes_in_flight),
            ..writes
        });
        Some(job)
    }

    fn count_disk_write(&self, bytes: usize, durable: bool) {
        let writes = self.disk_writes.get();
        self.disk_writes.set(DiskWrites {
            count: writes.count + 1,
            bytes: writes.bytes + bytes as u64,
            durable: writes.durable + u64::from(durable),
            ..writes
        });
    }

    /// Runs an op the writer took. Its place in flight is given back whether it succeeds
    /// (by `complete_*`) or fails (here).
    async fn run_job(&self, job: Job) -> Result<(), StorageError> {
        let seal = matches!(job, Job::Seal { .. });
        let result = self.write_job(job).await;
        if result.is_err() {
            let mut state = self.state.borrow_mut();
            if seal {
                state.queue.end_seal();
            } else {
                state.queue.end_write();
            }
        }
        result
    }

    /// The chunk's segment file, allocated past the `bytes` about to be written at the
    /// chunk's position; counts the write.
    async fn file_for_write(
        &self,
        chunk: &ChunkInfo,
        bytes: usize,
    ) -> Result<Rc<SegmentFile>, StorageError> {
        let file = self.segment_file(chunk.segment_base_offset).await?;
        file.allocate_to(chunk.position + bytes as u64, self.allocation_step())
            .await?;
        self.count_disk_write(bytes, chunk.durable);
        Ok(file)
    }

    async fn write_job(&self, job: Job) -> Result<(), StorageError> {
        match job {
            Job::Direct { chunk, buf } => {
                let file = self.file_for_write(&chunk, buf.len()).await?;
                file.write_direct(buf, chunk.position, chunk.durable)
                    .await?;
                let written = self.state.borrow_mut().complete_data(chunk, &file);
                if let Some(buf) = written {
                    self.cache.insert(
                        self.log_id,
                        chunk.segment_base_offset,
                        chunk.position,
                        chunk.len,
                        chunk.capacity_bytes,
                        buf,
                    );
                }
            }
            Job::Buffered { chunk, buf } => {
                let file = self.file_for_write(&chunk, buf.len()).await?;
                file.write_buffered(buf, chunk.position).await?;
                self.state.borrow_mut().complete_data(chunk, &file);
            }
            Job::Seal {
                segment_base_offset,
                snapshot,
            } => {
                self.seal_segment(segment_base_offset, snapshot).await?;
                self.state.borrow_mut().complete_seal();
            }
        }
        Ok(())
    }

    /// Makes a segment's files final: `.log` without padding and durable, the leader-epoch
    /// checkpoint, indexes written, then the producer-state snapshot as of the segment's end
    /// (everything it describes is durable by then). Runs beside the next segment's writes,
    /// so a crash may find that segment with a file while this one is unsealed; recovery then
    /// rebuilds this one from its `.log` (its indexes are missing), epochs included, and
    /// trusts its indexes only once they exist, which is after the checkpoint holds its
    /// epochs.
    async fn seal_segment(
        &self,
        segment_base_offset: i64,
        snapshot: Snapshot,
    ) -> Result<(), StorageError> {
        let file = self.segment_file(segment_base_offset).await?;
        let (size_bytes, index_bytes, time_index_bytes) = {
            let state = self.state.borrow();
            let slot = state
                .segment_slot(segment_base_offset)
                .expect("sealed segment exists");
            let segment = &state.segments[slot];
            (
                segment.size_bytes,
                segment.index.encode(),
                segment.time_index.encode(),
            )
        };
        // Direct mode pads the last block, and a reused spare holds older bytes past the end.
        file.truncate(size_bytes).await?;
        file.fdatasync().await?;
        // Before the indexes: recovery scans for epochs only the segments it rebuilds.
        self.persist_epochs().await?;
        #[cfg(test)]
        if let Some(pause) = PAUSE_SEAL.with_borrow(Clone::clone) {
            pause.acquire(1).await.expect("pause");
        }
        write_indexes(
            &self.dir,
            segment_base_offset,
            index_bytes,
            time_index_bytes,
        )
        .await?;
        self.write_snapshot(snapshot).await
    }
}

/// Starts queued ops in order as soon as the writer may (see `State::next_job`), each as its
/// own task so that a second write can start while the first is in flight. Holds the log only
/// weakly so that dropping every `Log` handle stops it; a write in flight holds it strongly.
/// A chunk held back to fill (`WriteQueue::held_until`) is taken once its hold ends, or earlier
/// when appends fill it or someone waits for it.
pub(super) async fn writer_task(log: Weak<Inner>, signals: Rc<Signals>) {
    loop {
        // The hold the writer sleeps through; a chunk that starts another one (or ends this
        // one) wakes the writer to sleep through that one instead.
        let held_until = log
            .upgrade()
            .and_then(|inner| inner.state.borrow().queue.held_until());
        let woken = signals.writer.wait_until(|| {
            signals.shutdown.get()
                || match log.upgrade() {
                    Some(inner) => {
                        let state = inner.state.borrow();
                        state.writer_has_work(Instant::now())
                            || state.queue.held_until() != held_until
                    }
                    None => true,
                }
        });
        // A hold that ended already holds nothing: the writer then waits for its writes.
        let hold = held_until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|hold| !hold.is_zero());
        match hold {
            Some(hold) => futures_lite::future::or(woken, glommio::timer::sleep(hold)).await,
            None => woken.await,
        }
        if signals.shutdown.get() {
            break;
        }
        let Some(inner) = log.upgrade() else { break };
        let Some(job) = inner.take_job() else {
            continue;
        };
        glommio::spawn_local(async move {
            if let Err(error) = inner.run_job(job).await {
                inner.latch(&error);
            }
            inner.signals.progress.notify_all();
            inner.signals.writer.notify_all();
        })
        .detach();
    }
    signals.progress.notify_all();
}

/// The one fdatasync round in flight. If its caller's future is dropped mid-way (say, by a
/// request timeout), the files go back to the dirty list and the slot is freed, so the next
/// caller syncs them: cancellation must not make unsynced data look synced nor stall syncs.
struct SyncInFlight<'a> {
    inner: &'a Inner,
    files: Vec<Rc<SegmentFile>>,
    finished: bool,
}

impl Drop for SyncInFlight<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.inner.state.borrow_mut();
        state.sync_in_flight = false;
        for file in self.files.drain(..) {
            if !state.dirty_files.iter().any(|f| Rc::ptr_eq(f, &file)) {
                state.dirty_files.push(file);
            }
        }
        drop(state);
        self.inner.signals.progress.notify_all();
    }
}

impl Log {
    /// Makes everything appended before the call durable. Direct chunks not yet written when
    /// it is called are written durable (`RWF_DSYNC`) and need nothing more once every op
    /// before them is durable. Anything else waits for a group commit: one fdatasync at a
    /// time per log covers every caller whose data was written before it started; a caller
    /// whose data it did not cover waits for the next one.
    pub async fn sync(&self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let target = {
            let mut state = inner.state.borrow_mut();
            state.queue.want_synced();
            state.queue.ops_enqueued
        };
        inner.signals.writer.notify_all();
        loop {
            let files = {
                let mut state = inner.state.borrow_mut();
                if let Some(reason) = &state.failed {
                    return Err(inner.failed_error(reason));
                }
                if state.queue.ops_synced >= target {
                    return Ok(());
                }
                if state.sync_in_flight || state.truncating || state.queue.ops_done < target {
                    None
                } else {
                    state.sync_in_flight = true;
                    let covered = (state.queue.ops_done, state.files_end_offset);
                    Some((covered, std::mem::take(&mut state.dirty_files)))
                }
            };
            let Some(((covered, covered_end_offset), files)) = files else {
                inner
                    .signals
                    .progress
                    .wait_until(|| {
                        let state = inner.state.borrow();
                        state.failed.is_some()
                            || state.queue.ops_synced >= target
                            || (!state.sync_in_flight
                                && !state.truncating
                                && state.queue.ops_done >= target)
                            || inner.signals.shutdown.get()
                    })
                    .await;
                let state = inner.state.borrow();
                if state.queue.ops_synced < target && state.queue.ops_done < target {
                    state.check_done(&inner.dir, target)?;
                }
                continue;
            };
            let mut in_flight = SyncInFlight {
                inner,
                files,
                finished: false,
            };
            let mut result = Ok(());
            for file in &in_flight.files {
                result = file.fdatasync().await;
                if result.is_err() {
                    break;
                }
            }
            in_flight.finished = true;
            let fdatasyncs = in_flight.files.len() as u64;
            match result {
                Ok(()) => {
                    let mut state = inner.state.borrow_mut();
                    state.sync_in_flight = false;
                    state.queue.mark_synced(covered);
                    state.synced_end_offset = state.synced_end_offset.max(covered_end_offset);
                    drop(state);
                    let writes = inner.disk_writes.get();
                    inner.disk_writes.set(DiskWrites {
                        fdatasyncs: writes.fdatasyncs + fdatasyncs,
                        ..writes
                    });
                }
                // Never retried: the kernel may have dropped the dirty pages (fsyncgate).
                Err(error) => {
                    inner.latch(&error);
                    inner.signals.progress.notify_all();
                    return Err(error);
                }
            }
            inner.signals.progress.notify_all();
        }
    }
}
