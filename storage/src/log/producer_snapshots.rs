//! Persistence of the producer state (format in docs/format.md): a snapshot is written at each
//! roll (by the writer, once the sealed segment is durable) and by a clean close; on open the
//! newest valid snapshot at or below the log end is loaded and the batches after it replayed.
//!
//! Invariants: a snapshot named N describes exactly the batches below N; one above the log end
//! (a crash took its batches back) or damaged is removed, never loaded; at most
//! `SNAPSHOTS_KEPT` are on disk after a write or an open (a crash between a write and its trim
//! leaves one more); replayed batches are recorded without checks (they were checked when
//! appended).

use super::open::remove_file_if_present;
use super::write_queue::Snapshot;
use super::{Inner, Log};
use crate::error::StorageError;
use crate::io::{read_small_file, sync_dir, write_small_file};
use crate::producer_state::{ProducerSnapshot, ProducerTable};
use crate::reaper;
use crate::segment::{segment_path, SNAPSHOT_SUFFIX};

/// Producer-state snapshots a log keeps: the newest, and one to fall back on should the
/// newest be damaged.
pub(super) const SNAPSHOTS_KEPT: usize = 2;
/// Producers a snapshot file may describe (about 100 bytes each); a larger file is taken for
/// damage and the state is rebuilt from the log instead.
const SNAPSHOT_PRODUCERS_MAX: u64 = 1 << 21;
/// Bytes read per step when the producer state is rebuilt from the log.
const PRODUCER_REPLAY_WINDOW_BYTES: usize = 1 << 20;

impl Inner {
    /// Writes a producer-state snapshot and makes its name durable, then removes all but the
    /// newest `SNAPSHOTS_KEPT` (an old one left by a crash is harmless: the newest is used).
    pub(super) async fn write_snapshot(&self, snapshot: Snapshot) -> Result<(), StorageError> {
        let path = segment_path(&self.dir, snapshot.offset, SNAPSHOT_SUFFIX);
        write_small_file(&path, snapshot.bytes).await?;
        sync_dir(&self.dir).await?;
        let stale: Vec<i64> = {
            let mut snapshots = self.snapshots.borrow_mut();
            if let Err(slot) = snapshots.binary_search(&snapshot.offset) {
                snapshots.insert(slot, snapshot.offset);
            }
            let stale_count = snapshots.len().saturating_sub(SNAPSHOTS_KEPT);
            snapshots.drain(..stale_count).collect()
        };
        // Off the shard: this runs at every roll.
        let paths = (stale.into_iter())
            .map(|offset| segment_path(&self.dir, offset, SNAPSHOT_SUFFIX))
            .collect();
        reaper::delete(paths, Vec::new()).await
    }
}

impl Log {
    /// Rebuilds the producer state: the newest valid snapshot at or below the log end (one
    /// above it describes batches a crash took back, and is removed), then every batch after
    /// it, replayed without checks. Of the older snapshots, all but the newest
    /// `SNAPSHOTS_KEPT - 1` are removed. Producers rebuilt from batches count as active at `now_ms`
    /// (the log keeps no append times), those from the snapshot keep their times.
    pub(super) async fn load_producers(
        &self,
        offsets: Vec<i64>,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let (log_start_offset, log_end_offset) = {
            let state = inner.state.borrow();
            (state.log_start_offset, state.log_end_offset)
        };
        let mut kept = Vec::new();
        let mut loaded = None;
        for &offset in offsets.iter().rev() {
            let path = segment_path(&inner.dir, offset, SNAPSHOT_SUFFIX);
            if loaded.is_some() {
                // Older ones than the loaded snapshot's fallback were left by a crash between
                // a snapshot's write and its trim.
                if kept.len() < SNAPSHOTS_KEPT {
                    kept.push(offset);
                } else {
                    remove_file_if_present(&path)?;
                }
                continue;
            }
            let bytes_max = ProducerSnapshot::bytes_max(SNAPSHOT_PRODUCERS_MAX);
            let decoded = if offset > log_end_offset {
                Err(format!("past the log end offset {log_end_offset}"))
            } else {
                match read_small_file(&path, bytes_max).await {
                    Ok(Some(bytes)) => ProducerSnapshot::decode(&bytes),
                    Ok(None) => Err("vanished".to_string()),
                    Err(StorageError::CorruptFile { reason, .. }) => Err(reason),
                    Err(error) => return Err(error),
                }
            };
            match decoded {
                Ok((snapshot_offset, table)) if snapshot_offset == offset => {
                    kept.push(offset);
                    loaded = Some((offset, table));
                }
                Ok((snapshot_offset, _)) => {
                    let reason = format!("says offset {snapshot_offset}");
                    tracing::warn!(path = %path.display(), reason, "removing a producer snapshot");
                    remove_file_if_present(&path)?;
                }
                Err(reason) => {
                    tracing::warn!(path = %path.display(), reason, "removing a producer snapshot");
                    remove_file_if_present(&path)?;
                }
            }
        }
        kept.reverse();
        *inner.snapshots.borrow_mut() = kept;
        let (from, mut table) = loaded.unwrap_or((log_start_offset, ProducerTable::default()));
        table.expire(now_ms, inner.config.get().producer_id_expiration_ms);
        let from = from.max(log_start_offset);
        if from < log_end_offset {
            tracing::info!(
                dir = %inner.dir.display(),
                from,
                log_end_offset,
                "rebuilding producer state from the log"
            );
            self.replay_producers(from, &mut table, now_ms).await?;
        }
        inner.state.borrow_mut().producers = table;
        Ok(())
    }

    /// Records in `table` every idempotent batch at or after `from`, walking the batch
    /// headers of the segments (read in windows of `PRODUCER_REPLAY_WINDOW_BYTES`).
    async fn replay_producers(
        &self,
        from: i64,
        table: &mut ProducerTable,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        self.for_each_header(from, PRODUCER_REPLAY_WINDOW_BYTES, |header| {
            if header.has_producer_id() {
                table.record(header, now_ms);
            }
        })
        .await
    }

    /// Forgets the idempotent producers that appended nothing for `producer.id.expiration.ms`
    /// (Kafka's expiry); a forgotten producer's next batch is accepted at any sequence.
    /// Returns how many were forgotten.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let expiration_ms = self.inner.config.get().producer_id_expiration_ms;
        let expired = self
            .inner
            .state
            .borrow_mut()
            .producers
            .expire(now_ms, expiration_ms);
        if expired > 0 {
            tracing::debug!(dir = %self.inner.dir.display(), expired, "producers expired");
        }
        expired
    }

    /// Idempotent producers the log remembers.
    pub fn producer_count(&self) -> usize {
        self.inner.state.borrow().producers.len()
    }
}

/// Wall-clock time in milliseconds since the epoch (0 if the clock is before it).
pub(super) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
