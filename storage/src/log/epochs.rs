//! The log's leader-epoch cache (`crate::leader_epoch`) on disk and its queries: the
//! `leader-epoch-checkpoint` of the partition directory, loaded on open (rebuilt from the batch
//! headers when missing or damaged) and written again whenever the cache changes.
//!
//! Invariants: the cache changes only under the state borrow that stores or drops the batches
//! it describes, and each change bumps `State::epochs_version`; checkpoint writes are one at a
//! time (`EpochCheckpoint::lock`) and each writes the newest version, so the file never goes back to
//! an older one; a rolled segment's seal writes the checkpoint before the segment after it gets
//! a file, so after a crash only the active segment can hold epochs the file lacks, and
//! recovery's scan of it adds them (`ScanOutcome::epoch_starts`).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::read::SegmentReader;
use super::{Inner, Log, State};
use crate::checkpoint::{read_text, write_atomically};
use crate::error::StorageError;
use crate::leader_epoch::{LeaderEpochCache, LEADER_EPOCH_CHECKPOINT_FILE};

/// Bytes read per step when the cache is rebuilt from the log.
const EPOCH_REBUILD_WINDOW_BYTES: usize = 1 << 20;

/// The cache the partition's checkpoint holds; `None` if it is missing or damaged (then it is
/// rebuilt from the log).
pub(super) async fn load_checkpoint(dir: &Path) -> Result<Option<LeaderEpochCache>, StorageError> {
    let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
    let reason = match read_text(&path).await {
        Ok(Some(text)) => match LeaderEpochCache::decode(&text) {
            Ok(cache) => return Ok(Some(cache)),
            Err(reason) => reason,
        },
        Ok(None) => "missing".to_string(),
        Err(StorageError::CorruptFile { reason, .. }) => reason,
        Err(error) => return Err(error),
    };
    tracing::info!(path = %path.display(), reason, "rebuilding the leader-epoch cache from the log");
    Ok(None)
}

impl State {
    /// Notes a change of the epoch cache, for `Inner::persist_epochs` to write.
    pub(super) fn epochs_changed(&mut self) {
        self.epochs_version += 1;
    }
}

/// The partition's `leader-epoch-checkpoint` and the cache version it holds. Shared by the
/// log and its background writes (`Rc`), so a write in flight does not keep the log alive.
pub(super) struct EpochCheckpoint {
    path: PathBuf,
    /// Held while the file is written: one write at a time.
    lock: glommio::sync::Semaphore,
    /// `State::epochs_version` of the file on disk.
    written: Cell<u64>,
}

impl EpochCheckpoint {
    pub(super) fn new(dir: &Path) -> Rc<EpochCheckpoint> {
        Rc::new(EpochCheckpoint {
            path: dir.join(LEADER_EPOCH_CHECKPOINT_FILE),
            lock: glommio::sync::Semaphore::new(1),
            written: Cell::new(0),
        })
    }

    /// Waits until no write of the file is in flight.
    pub(super) async fn wait_idle(&self) {
        let _ = self.lock.acquire_permit(1).await;
    }

    /// Writes the cache version and bytes `encode` returns, unless that version is on disk
    /// already. `encode` runs once the lock is held, so the newest version is what lands;
    /// `None` from it writes nothing.
    async fn write_newest(
        &self,
        encode: impl FnOnce() -> Option<(u64, Vec<u8>)>,
    ) -> Result<(), StorageError> {
        let _permit = self
            .lock
            .acquire_permit(1)
            .await
            .map_err(|e| StorageError::io("lock", &self.path, e.into()))?;
        let Some((version, bytes)) = encode() else {
            return Ok(());
        };
        if version == self.written.get() {
            return Ok(());
        }
        write_atomically(&self.path, bytes).await?;
        self.written.set(version);
        Ok(())
    }
}

impl State {
    /// The epoch cache's version and checkpoint bytes.
    fn encode_epochs(&self) -> (u64, Vec<u8>) {
        (self.epochs_version, self.epochs.encode())
    }
}

impl Inner {
    /// Writes the leader-epoch checkpoint if the cache changed since it was last written.
    pub(super) async fn persist_epochs(&self) -> Result<(), StorageError> {
        self.epoch_checkpoint
            .write_newest(|| Some(self.state.borrow().encode_epochs()))
            .await
    }

    /// Writes the checkpoint in the background (an append cannot wait), holding the log only
    /// weakly: dropping every `Log` stops the log as before. A failure latches the log, as a
    /// failed data write does. Call with the state not borrowed (glommio may start the task
    /// at once).
    pub(super) fn persist_epochs_later(self: &Rc<Inner>) {
        let log = Rc::downgrade(self);
        let checkpoint = self.epoch_checkpoint.clone();
        glommio::spawn_local(async move {
            let written = checkpoint
                .write_newest(|| {
                    let inner = log.upgrade()?;
                    if inner.signals.shutdown.get() {
                        return None;
                    }
                    let encoded = inner.state.borrow().encode_epochs();
                    Some(encoded)
                })
                .await;
            if let (Err(error), Some(inner)) = (written, log.upgrade()) {
                inner.latch(&error);
                inner.signals.progress.notify_all();
            }
        })
        .detach();
    }
}

impl Log {
    /// The latest leader epoch that wrote to the log, `None` if no batch carried one.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.inner.state.borrow().epochs.latest_epoch()
    }

    /// Kafka's OffsetsForLeaderEpoch for `epoch`: the largest epoch at or below it that wrote
    /// to the log, and that epoch's end offset (the first offset of the next higher epoch, or
    /// the log end offset for the latest epoch); below the earliest epoch the log holds,
    /// `epoch` itself with that earliest epoch's start offset, as Kafka answers. `None` above
    /// the latest (the broker answers UNDEFINED).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let state = self.inner.state.borrow();
        state.epochs.end_offset_for(epoch, state.log_end_offset)
    }

    /// Rebuilds the cache from the batch headers. Epochs never decrease along a log, so a
    /// segment whose first and last batches carry the same epoch adds at most its first batch;
    /// only a segment where the epoch changes is walked batch by batch. A log written by one
    /// leader epoch is thus rebuilt from two header reads per segment, not a read of all of it.
    pub(super) async fn rebuild_epochs(&self) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let segments: Vec<(i64, u64)> = {
            let state = inner.state.borrow();
            state
                .segments
                .iter()
                .filter(|segment| segment.size_bytes > 0)
                .map(|s| {
                    (
                        s.base_offset,
                        u64::from(s.index.last_position().unwrap_or(0)),
                    )
                })
                .collect()
        };
        let mut epochs = LeaderEpochCache::default();
        // Small windows for the two probes of each segment, large ones for a walk.
        let mut probe = SegmentReader::new(inner.config.get().index_interval_bytes as usize * 2);
        let mut reader = SegmentReader::new(EPOCH_REBUILD_WINDOW_BYTES);
        for (segment_base_offset, last_indexed) in segments {
            let Some(first) = probe.header_at(inner, segment_base_offset, 0).await? else {
                continue;
            };
            // The last batch: from the last index entry, at most about an index interval on.
            let (mut position, mut last) = (last_indexed, first);
            while let Some(header) = probe
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                position += header.total_bytes() as u64;
                last = header;
            }
            epochs.assign(first.partition_leader_epoch, first.base_offset);
            if last.partition_leader_epoch == first.partition_leader_epoch {
                continue;
            }
            let mut position = first.total_bytes() as u64;
            while let Some(header) = reader
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                epochs.assign(header.partition_leader_epoch, header.base_offset);
                position += header.total_bytes() as u64;
            }
        }
        let mut state = inner.state.borrow_mut();
        state.epochs = epochs;
        state.epochs_changed();
        Ok(())
    }
}
