//! Opening a partition log: finishing or undoing a cleaned segment's swap a crash interrupted
//! (`compaction::complete_swaps`), listing its directory (segments, spares, snapshots; index
//! files left without their `.log` removed), recovering each segment (`crate::recovery`),
//! loading the producer state and the cleaner's checkpoint, and starting the writer task.
//!
//! Invariants: after open the segments are contiguous (each ends where the next begins,
//! though a cleaned one may lack its last offsets) and each is valid to its end; the
//! clean-shutdown checkpoint is gone before anything can be appended; a segment cut short
//! (torn) removes every later one; in direct mode the active segment's partial last block is
//! held in memory for the next write to rewrite.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::write_queue::WriteQueue;
use super::{
    compaction, epochs, producer_snapshots, writer, DiskReads, DiskWrites, Inner, Log, LogConfig,
    Signals, State,
};
use crate::cache::BatchCache;
use crate::checkpoint::is_leftover;
use crate::error::StorageError;
use crate::io::{align_down, sync_dir, IoMode, SegmentFile};
use crate::leader_epoch::LEADER_EPOCH_CHECKPOINT_FILE;
use crate::producer_state::ProducerTable;
use crate::reaper::Unlinked;
use crate::recovery::{
    check_tail, load_indexes, read_clean_shutdown, scan_segment, write_indexes, CleanShutdown,
    CLEAN_SHUTDOWN_FILE,
};
use crate::segment::{
    parse_segment_file_name, segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    SPARE_SUFFIX, TIME_INDEX_SUFFIX,
};

impl Log {
    /// Opens (creating if missing) the log in `dir`, recovering it if the last shutdown was not
    /// clean, and starts its writer task on the current glommio executor.
    pub async fn open(
        dir: PathBuf,
        config: LogConfig,
        cache: Rc<BatchCache>,
    ) -> Result<Log, StorageError> {
        config.check()?;
        // glommio opens directories (for fsync) without the working directory, so a
        // relative path fails with EBADF: work with the absolute path from here on.
        let dir =
            std::path::absolute(&dir).map_err(|e| StorageError::io("resolve dir", &dir, e))?;
        // Blocking directory calls, once per open: glommio has no async mkdir/readdir.
        std::fs::create_dir_all(&dir).map_err(|e| StorageError::io("create dir", &dir, e))?;
        if compaction::complete_swaps(&dir).await? {
            sync_dir(&dir).await?;
        }
        let (bases, spares, snapshots) = list_segment_bases(&dir)?;
        let clean_shutdown = read_clean_shutdown(&dir).await?;
        let checkpoint_path = dir.join(CLEAN_SHUTDOWN_FILE);
        if checkpoint_path.exists() {
            // Gone before anything is appended: a crash from here on must run recovery.
            std::fs::remove_file(&checkpoint_path)
                .map_err(|e| StorageError::io("remove", &checkpoint_path, e))?;
            sync_dir(&dir).await?;
        }
        let loaded_epochs = epochs::load_checkpoint(&dir).await?;
        let (segments, scanned_epochs) =
            open_segments(&dir, &config, &bases, clean_shutdown).await?;
        let first_base_offset = segments[0].base_offset;
        let log_end_offset = segments.last().map_or(first_base_offset, |s| s.next_offset);
        // DeleteRecords may have moved the start into the first segment.
        let log_start_offset = Inner::recorded_log_start(&dir)
            .await?
            .map_or(first_base_offset, |recorded| {
                recorded.clamp(first_base_offset, log_end_offset)
            });
        // A checkpoint may describe batches a crash took back, or segments retention deleted;
        // batches recovery scanned may carry epochs it never saw.
        let rebuild_epochs = loaded_epochs.is_none();
        let mut epochs = loaded_epochs.unwrap_or_default();
        let mut epochs_changed = epochs.truncate_from_end(log_end_offset);
        epochs_changed |= epochs.truncate_from_start(log_start_offset);
        for (epoch, start_offset) in scanned_epochs {
            epochs_changed |= epochs.assign(epoch, start_offset);
        }
        let mut cleaner = compaction::load_cleaner_state(&dir).await?;
        cleaner.first_dirty_offset = cleaner.first_dirty_offset.min(log_end_offset);
        let state = State {
            segments,
            log_start_offset,
            log_end_offset,
            files_end_offset: log_end_offset,
            // Recovery keeps only what the file holds; whether the disk holds it is unknown,
            // but nothing of it is in a cache this process could lose.
            synced_end_offset: log_end_offset,
            queue: WriteQueue::new(&dir, cache.clone()),
            sync_in_flight: false,
            dirty_files: Vec::new(),
            failed: None,
            closed: false,
            closed_cleanly: false,
            read_ahead: None,
            producers: ProducerTable::default(),
            epochs,
            epochs_version: u64::from(epochs_changed),
            truncating: false,
            truncations: 0,
            cleaner,
        };
        let signals = Rc::new(Signals::default());
        let inner = Rc::new(Inner {
            epoch_checkpoint: epochs::EpochCheckpoint::new(&dir),
            dir,
            log_id: cache.register_log(),
            config: Cell::new(config),
            cache,
            state: RefCell::new(state),
            signals: signals.clone(),
            disk_reads: Cell::new(DiskReads::default()),
            disk_writes: Cell::new(DiskWrites::default()),
            spares: RefCell::new(spares),
            snapshots: RefCell::new(Vec::new()),
        });
        glommio::spawn_local(writer::writer_task(Rc::downgrade(&inner), signals)).detach();
        let log = Log { inner };
        log.load_producers(snapshots, producer_snapshots::wall_clock_ms())
            .await?;
        if rebuild_epochs {
            log.rebuild_epochs().await?;
        }
        log.inner.persist_epochs().await?;
        Ok(log)
    }
}

/// Segment base offsets, spare files and snapshot offsets of a partition directory.
type DirListing = (Vec<i64>, Vec<PathBuf>, Vec<i64>);

/// Base offsets of the segments in `dir`, ascending, the spare files there, and the offsets
/// of the producer-state snapshots, ascending. Index files without their `.log` (left by a
/// crash while retention deleted a segment) are removed.
fn list_segment_bases(dir: &Path) -> Result<DirListing, StorageError> {
    let mut bases = Vec::new();
    let mut index_bases = Vec::new();
    let mut spares = Vec::new();
    let mut snapshots = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io("read dir", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read dir", dir, e))?;
        match entry.file_name().to_str().and_then(parse_segment_file_name) {
            Some((base, LOG_SUFFIX)) => bases.push(base),
            Some((_, SPARE_SUFFIX)) => spares.push(entry.path()),
            Some((offset, SNAPSHOT_SUFFIX)) => snapshots.push(offset),
            Some((base, _)) => index_bases.push(base),
            None => {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if is_leftover(&name, LEADER_EPOCH_CHECKPOINT_FILE)
                    || is_leftover(&name, super::delete_records::LOG_START_FILE)
                    || is_leftover(&name, compaction::CLEANER_CHECKPOINT_FILE)
                {
                    remove_file_if_present(&entry.path())?;
                }
            }
        }
    }
    bases.sort_unstable();
    snapshots.sort_unstable();
    for base in index_bases {
        if bases.binary_search(&base).is_err() {
            tracing::info!(
                base_offset = base,
                "removing the indexes of a deleted segment"
            );
            remove_segment_files(dir, base)?;
        }
    }
    Ok((bases, spares, snapshots))
}

const SEGMENT_SUFFIXES: [&str; 3] = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX];

pub(super) fn remove_segment_files(dir: &Path, base_offset: i64) -> Result<(), StorageError> {
    for suffix in SEGMENT_SUFFIXES {
        remove_file_if_present(&segment_path(dir, base_offset, suffix))?;
    }
    Ok(())
}

/// Unlinks a segment's files into `unlinked`, for the reaper to free (`crate::reaper`).
/// Blocking.
pub(super) fn unlink_segment_files(
    dir: &Path,
    base_offset: i64,
    unlinked: &mut Unlinked,
) -> Result<(), StorageError> {
    for suffix in SEGMENT_SUFFIXES {
        unlinked.unlink(&segment_path(dir, base_offset, suffix))?;
    }
    Ok(())
}

pub(super) fn remove_file_if_present(path: &Path) -> Result<(), StorageError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io("remove", path, e)),
    }
}

/// Opens every segment. Indexes are trusted only when consistent with their `.log`; the active
/// segment is re-scanned unless the clean-shutdown checkpoint vouches for it; a segment whose
/// scan ends early (torn tail) is truncated and every later segment removed, since nothing in
/// them can have been synced (a sync covers all earlier segments too). Index files of an
/// inactive segment can be trusted because the writer's seal writes them only once the
/// `.log` is cut to its size and fdatasynced and the leader-epoch checkpoint holds the
/// segment's epochs; a segment whose seal a crash interrupted (the next one's writes go on
/// beside it) lacks them, and is rebuilt here.
async fn open_segments(
    dir: &Path,
    config: &LogConfig,
    bases: &[i64],
    clean_shutdown: Option<CleanShutdown>,
) -> Result<(Vec<Segment>, Vec<(i32, i64)>), StorageError> {
    let mut segments = Vec::with_capacity(bases.len().max(1));
    let mut epoch_starts = Vec::new();
    if bases.is_empty() {
        let path = segment_path(dir, 0, LOG_SUFFIX);
        let file = Rc::new(SegmentFile::open(&path, config.io_mode).await?);
        sync_dir(dir).await?;
        segments.push(Segment::new(0, Some(file)));
        return Ok((segments, epoch_starts));
    }
    for (slot, &base_offset) in bases.iter().enumerate() {
        let is_active = slot + 1 == bases.len();
        let path = segment_path(dir, base_offset, LOG_SUFFIX);
        let file = Rc::new(SegmentFile::open(&path, config.io_mode).await?);
        let file_bytes = file.size_bytes().await?;
        let known_next_offset = if is_active {
            clean_shutdown
                .filter(|c| {
                    c.active_base_offset == base_offset && c.active_size_bytes == file_bytes
                })
                .map(|c| c.log_end_offset)
        } else {
            Some(bases[slot + 1])
        };
        let mut segment = Segment::new(base_offset, Some(file.clone()));
        let mut loaded = match known_next_offset {
            Some(next_offset) => load_indexes(dir, &mut segment, file_bytes, next_offset).await?,
            None => Err("last shutdown was not clean".to_string()),
        };
        if let (true, Ok(()), Some(next_offset)) = (is_active, &loaded, known_next_offset) {
            let from_position = u64::from(segment.index.last_position().unwrap_or(0));
            loaded = check_tail(&file, base_offset, from_position, file_bytes, next_offset).await?;
        }
        let mut torn = false;
        if let Err(reason) = loaded {
            tracing::info!(path = %path.display(), %reason, "rebuilding segment from its .log");
            segment = Segment::new(base_offset, Some(file.clone()));
            let outcome =
                scan_segment(&file, file_bytes, &mut segment, config.index_interval_bytes).await?;
            epoch_starts.extend(outcome.epoch_starts.iter().copied());
            if outcome.valid_bytes < file_bytes {
                tracing::warn!(
                    path = %path.display(),
                    valid_bytes = outcome.valid_bytes,
                    file_bytes,
                    reason = outcome.stop_reason.as_deref().unwrap_or(""),
                    "truncating segment at the first invalid batch"
                );
                file.truncate(outcome.valid_bytes).await?;
                file.fdatasync().await?;
            }
            if !is_active {
                // Only missing offsets count: cutting direct-mode zero padding loses nothing.
                // A segment that ends in valid batches is whole even if its last offsets are
                // missing: the cleaner removed them. A crash cannot cut one at a batch end:
                // a lost tail reads as zeros inside the file's length (files are allocated
                // ahead of their writes), and only the seal shortens a file, after its
                // fdatasync.
                torn = segment.next_offset != bases[slot + 1] && outcome.valid_bytes < file_bytes;
                if !torn {
                    segment.next_offset = bases[slot + 1];
                }
                segment.complete_time_index();
                let (index, time_index) = (segment.index.encode(), segment.time_index.encode());
                write_indexes(dir, base_offset, index, time_index).await?;
            }
        }
        segments.push(segment);
        if torn {
            for &later in &bases[slot + 1..] {
                tracing::warn!(base_offset = later, "removing segment after a torn one");
                remove_segment_files(dir, later)?;
            }
            sync_dir(dir).await?;
            break;
        }
    }
    if config.io_mode == IoMode::Direct {
        let active = segments
            .last_mut()
            .expect("at least one segment was opened");
        load_tail_block(active).await?;
    }
    Ok((segments, epoch_starts))
}

/// Direct mode: reads the partial last block of a segment about to be appended to, which its
/// next write rewrites (`Segment::tail_block`).
pub(super) async fn load_tail_block(segment: &mut Segment) -> Result<(), StorageError> {
    let block_position = align_down(segment.size_bytes);
    let tail_bytes = (segment.size_bytes - block_position) as usize;
    segment.tail_block.clear();
    if tail_bytes > 0 {
        let file = segment
            .file
            .clone()
            .expect("a segment with bytes has a file");
        segment.tail_block = file.read_exact(block_position, tail_bytes).await?.to_vec();
    }
    Ok(())
}
