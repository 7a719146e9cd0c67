//! Bringing a partition's files back to a consistent state on open.
//!
//! Invariants: after `scan_segment` the segment holds exactly the prefix of valid batches of its
//! `.log` (sizes in bounds, magic 2, CRC-32C re-checked after the read from disk, offsets
//! increasing), so a torn tail or zero padding ends the segment; an index is used only if it is
//! consistent with its `.log` (`load_indexes`), otherwise it is rebuilt from the `.log`. The
//! clean-shutdown checkpoint is our own format, guarded by a CRC-32 (crc32fast):
//! ```text
//! magic "RLCS" | version u16 | log_end_offset i64 | active_base_offset i64
//! | active_size_bytes u64 | crc32 u32 over everything before it      (big endian, 34 bytes)
//! ```

use std::path::Path;

use bytes::Bytes;

use crate::batch::{check_batch, BatchHeader, BATCH_HEADER_BYTES};
use crate::error::StorageError;
use crate::index::{OffsetIndex, INDEX_ENTRY_BYTES};
use crate::io::{read_small_file, write_small_file, SegmentFile};
use crate::segment::{segment_path, Segment, INDEX_SUFFIX, TIMESTAMP_NONE, TIME_INDEX_SUFFIX};
use crate::time_index::{TimeIndex, TIME_INDEX_ENTRY_BYTES};

/// Bytes read per step while scanning a segment (reads of <= 256 KiB are fastest on the
/// machines measured, but a scan is sequential and larger steps mean fewer round trips).
const SCAN_WINDOW_BYTES: usize = 1 << 20;

pub(crate) const CLEAN_SHUTDOWN_FILE: &str = "clean_shutdown.checkpoint";
const CLEAN_SHUTDOWN_MAGIC: &[u8; 4] = b"RLCS";
const CLEAN_SHUTDOWN_VERSION: u16 = 1;
const CLEAN_SHUTDOWN_BYTES: usize = 4 + 2 + 8 + 8 + 8 + 4;

/// What a clean `close` recorded about the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CleanShutdown {
    pub log_end_offset: i64,
    pub active_base_offset: i64,
    pub active_size_bytes: u64,
}

impl CleanShutdown {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CLEAN_SHUTDOWN_BYTES);
        out.extend_from_slice(CLEAN_SHUTDOWN_MAGIC);
        out.extend_from_slice(&CLEAN_SHUTDOWN_VERSION.to_be_bytes());
        out.extend_from_slice(&self.log_end_offset.to_be_bytes());
        out.extend_from_slice(&self.active_base_offset.to_be_bytes());
        out.extend_from_slice(&self.active_size_bytes.to_be_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<CleanShutdown> {
        if bytes.len() != CLEAN_SHUTDOWN_BYTES || &bytes[..4] != CLEAN_SHUTDOWN_MAGIC {
            return None;
        }
        let (body, crc) = bytes.split_at(CLEAN_SHUTDOWN_BYTES - 4);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return None;
        }
        if u16::from_be_bytes([body[4], body[5]]) != CLEAN_SHUTDOWN_VERSION {
            return None;
        }
        let field = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&body[at..at + 8]);
            a
        };
        Some(CleanShutdown {
            log_end_offset: i64::from_be_bytes(field(6)),
            active_base_offset: i64::from_be_bytes(field(14)),
            active_size_bytes: u64::from_be_bytes(field(22)),
        })
    }
}

/// Reads the clean-shutdown checkpoint; `None` if absent or invalid (then recovery runs).
pub(crate) async fn read_clean_shutdown(dir: &Path) -> Result<Option<CleanShutdown>, StorageError> {
    let path = dir.join(CLEAN_SHUTDOWN_FILE);
    match read_small_file(&path, CLEAN_SHUTDOWN_BYTES as u64).await {
        Ok(Some(bytes)) => {
            let decoded = CleanShutdown::decode(&bytes);
            if decoded.is_none() {
                tracing::warn!(path = %path.display(), "invalid clean shutdown checkpoint");
            }
            Ok(decoded)
        }
        Ok(None) => Ok(None),
        Err(StorageError::CorruptFile { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

pub(crate) async fn write_clean_shutdown(
    dir: &Path,
    checkpoint: &CleanShutdown,
) -> Result<(), StorageError> {
    write_small_file(&dir.join(CLEAN_SHUTDOWN_FILE), checkpoint.encode()).await
}

/// Why a scan stopped before the end of the file (a torn tail, corruption or zero padding).
pub(crate) struct ScanOutcome {
    pub valid_bytes: u64,
    pub stop_reason: Option<String>,
    /// Each batch whose leader epoch is above every epoch before it in the scan, as
    /// `(epoch, base_offset)`: what the scanned batches add to a leader-epoch cache.
    pub epoch_starts: Vec<(i32, i64)>,
}

/// Rebuilds `segment` (which must be fresh) from its `.log`: reads `[0, file_bytes)` batch by
/// batch and stops at the first invalid one. The caller truncates the file if it wants to.
pub(crate) async fn scan_segment(
    file: &SegmentFile,
    file_bytes: u64,
    segment: &mut Segment,
    index_interval_bytes: u32,
) -> Result<ScanOutcome, StorageError> {
    assert_eq!(segment.size_bytes, 0, "scan needs a fresh segment");
    scan_batches(file, 0, file_bytes, segment, index_interval_bytes).await
}

/// Re-checks the batches after a segment's last index entry, which a clean shutdown vouches
/// for: they must be valid, end exactly at `file_bytes` and at `next_offset` (a cheap pair
/// check of the checkpoint, bounded by about one index interval of reading).
pub(crate) async fn check_tail(
    file: &SegmentFile,
    base_offset: i64,
    from_position: u64,
    file_bytes: u64,
    next_offset: i64,
) -> Result<Result<(), String>, StorageError> {
    let mut scratch = Segment::new(base_offset, None);
    let outcome = scan_batches(file, from_position, file_bytes, &mut scratch, u32::MAX).await?;
    if outcome.valid_bytes != file_bytes {
        let reason = outcome.stop_reason.unwrap_or_default();
        return Ok(Err(format!(
            "invalid batch after the last index entry: {reason}"
        )));
    }
    if from_position < file_bytes && scratch.next_offset != next_offset {
        let found = scratch.next_offset;
        return Ok(Err(format!(
            "log ends at offset {found}, checkpoint says {next_offset}"
        )));
    }
    Ok(Ok(()))
}

/// Scans batches from `start_position` (a batch boundary) to the first invalid one.
async fn scan_batches(
    file: &SegmentFile,
    start_position: u64,
    file_bytes: u64,
    segment: &mut Segment,
    index_interval_bytes: u32,
) -> Result<ScanOutcome, StorageError> {
    let mut window = Bytes::new();
    let mut window_position = start_position;
    let mut position = start_position;
    let mut stop_reason = None;
    let mut epoch_starts: Vec<(i32, i64)> = Vec::new();
    while position < file_bytes {
        let remaining_bytes = file_bytes - position;
        let window_end = window_position + window.len() as u64;
        let header_bytes = (BATCH_HEADER_BYTES as u64).min(remaining_bytes);
        if position < window_position || window_end < position + header_bytes {
            let len = (SCAN_WINDOW_BYTES as u64).min(remaining_bytes) as usize;
            window = file.read_exact(position, len).await?;
            window_position = position;
        }
        let at = (position - window_position) as usize;
        let header = match BatchHeader::parse(&window[at..]) {
            Ok(header) => header,
            Err(error) => {
                stop_reason = Some(error.to_string());
                break;
            }
        };
        let total_bytes = header.total_bytes() as u64;
        if total_bytes > remaining_bytes {
            stop_reason = Some(format!(
                "batch of {total_bytes} bytes cut at the end of the file"
            ));
            break;
        }
        if (window_position + window.len() as u64) < position + total_bytes {
            let len = total_bytes
                .max(SCAN_WINDOW_BYTES as u64)
                .min(remaining_bytes) as usize;
            window = file.read_exact(position, len).await?;
            window_position = position;
        }
        let at = (position - window_position) as usize;
        if let Err(error) = check_batch(&window[at..at + total_bytes as usize]) {
            stop_reason = Some(error.to_string());
            break;
        }
        let relative_last_offset = header.last_offset() - segment.base_offset;
        if header.base_offset < segment.next_offset || relative_last_offset > i64::from(u32::MAX) {
            stop_reason = Some(format!(
                "batch offset {} out of sequence",
                header.base_offset
            ));
            break;
        }
        if position + total_bytes > i32::MAX as u64 {
            stop_reason = Some("segment larger than 2 GiB".to_string());
            break;
        }
        segment.on_batch(&header, position, index_interval_bytes);
        if epoch_starts
            .last()
            .is_none_or(|&(epoch, _)| header.partition_leader_epoch > epoch)
        {
            epoch_starts.push((header.partition_leader_epoch, header.base_offset));
        }
        position += total_bytes;
    }
    segment.size_bytes = position;
    segment.written_bytes = position;
    Ok(ScanOutcome {
        valid_bytes: position,
        stop_reason,
        epoch_starts,
    })
}

/// Loads a segment's `.index` and `.timeindex` and checks them against the `.log`
/// (`log_bytes` long, offsets below `next_offset`). `Ok(Err(reason))`: missing or inconsistent,
/// rebuild from the `.log`.
pub(crate) async fn load_indexes(
    dir: &Path,
    segment: &mut Segment,
    log_bytes: u64,
    next_offset: i64,
) -> Result<Result<(), String>, StorageError> {
    let base_offset = segment.base_offset;
    // Each entry indexes a distinct batch of at least BATCH_HEADER_BYTES bytes.
    let batches_max = log_bytes / BATCH_HEADER_BYTES as u64 + 1;
    let index_path = segment_path(dir, base_offset, INDEX_SUFFIX);
    let time_index_path = segment_path(dir, base_offset, TIME_INDEX_SUFFIX);
    let index_bytes_max = batches_max * INDEX_ENTRY_BYTES as u64;
    let time_index_bytes_max = batches_max * TIME_INDEX_ENTRY_BYTES as u64;
    let index_bytes = match read_small_file(&index_path, index_bytes_max).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Err("offset index missing".to_string())),
        Err(StorageError::CorruptFile { reason, .. }) => return Ok(Err(reason)),
        Err(error) => return Err(error),
    };
    let time_index_bytes = match read_small_file(&time_index_path, time_index_bytes_max).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Err("time index missing".to_string())),
        Err(StorageError::CorruptFile { reason, .. }) => return Ok(Err(reason)),
        Err(error) => return Err(error),
    };
    let relative_offset_end = (next_offset - base_offset).max(0) as u64;
    let index = match OffsetIndex::decode(base_offset, &index_bytes, log_bytes) {
        Ok(index) => index,
        Err(reason) => return Ok(Err(reason)),
    };
    let time_index = match TimeIndex::decode(base_offset, &time_index_bytes, relative_offset_end) {
        Ok(index) => index,
        Err(reason) => return Ok(Err(reason)),
    };
    segment.bytes_since_index_entry = log_bytes - u64::from(index.last_position().unwrap_or(0));
    (segment.max_timestamp, segment.offset_of_max_timestamp) =
        time_index.last().unwrap_or((TIMESTAMP_NONE, base_offset));
    segment.index = index;
    segment.time_index = time_index;
    segment.size_bytes = log_bytes;
    segment.written_bytes = log_bytes;
    segment.next_offset = next_offset;
    Ok(Ok(()))
}

/// Writes both index files of a segment whole (each fdatasynced).
pub(crate) async fn write_indexes(
    dir: &Path,
    base_offset: i64,
    index_bytes: Vec<u8>,
    time_index_bytes: Vec<u8>,
) -> Result<(), StorageError> {
    write_small_file(&segment_path(dir, base_offset, INDEX_SUFFIX), index_bytes).await?;
    write_small_file(
        &segment_path(dir, base_offset, TIME_INDEX_SUFFIX),
        time_index_bytes,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_shutdown_round_trip_and_crc() {
        let checkpoint = CleanShutdown {
            log_end_offset: 77,
            active_base_offset: 70,
            active_size_bytes: 999,
        };
        let mut bytes = checkpoint.encode();
        assert_eq!(bytes.len(), CLEAN_SHUTDOWN_BYTES);
        assert_eq!(CleanShutdown::decode(&bytes), Some(checkpoint));
        bytes[10] ^= 1;
        assert_eq!(CleanShutdown::decode(&bytes), None);
        assert_eq!(CleanShutdown::decode(&bytes[..20]), None);
    }
}
