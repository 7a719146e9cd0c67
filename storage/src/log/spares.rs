//! Spare segment files: the `.log` files of segments that retention deleted or the cleaner
//! replaced, renamed `<base>.spare` instead of unlinked, for new segments to take over
//! (`Inner::reuse_spare` in `writer.rs`). Freeing a file's blocks costs the file system, and
//! on a `discard` mount the disk, far more than a rename, and produce's writes queue behind
//! those discards; overwriting blocks already written also spares ext4 the conversion of
//! unwritten extents.
//!
//! Invariants: a log keeps at most `SPARES_MAX` spares, the rest of what it frees is
//! unlinked; a spare only ever held offsets below the base of any segment that may take it
//! over (retention frees segments below the log start, the cleaner sealed ones below the log
//! end), so recovery, which stops at the first batch below a segment's base offset, never
//! reads a spare's old batches as the segment's; a truncation, which moves the log end back
//! below what spares may hold, unlinks them all before it makes its cut durable, and a
//! cleaner's spares freed while a truncation began are unlinked instead of kept.

use std::path::{Path, PathBuf};

use super::Inner;
use crate::error::StorageError;
use crate::reaper::Unlinked;
use crate::segment::{segment_path, SPARE_SUFFIX};

/// Freed segment files a log keeps for new segments to reuse.
const SPARES_MAX: usize = 2;

/// The `.log` file of a freed segment, under whatever name it has now, and the segment's base
/// offset.
pub(super) struct FreedLog {
    pub(super) base_offset: i64,
    pub(super) path: PathBuf,
}

impl Inner {
    /// How many more spares this log may keep.
    pub(super) fn spare_room(&self) -> usize {
        SPARES_MAX.saturating_sub(self.spares.borrow().len())
    }

    /// Forgets every spare, for the caller to unlink: a truncation's part,
    /// see the invariants.
    pub(super) fn take_spares(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.spares.borrow_mut())
    }
}

/// Renames the first `room` of `freed` to their `.spare` names (where no spare has that name)
/// and unlinks the rest into `unlinked`, for the reaper to free (`crate::reaper`). Blocking:
/// for the executor's blocking thread. Returns the spares kept.
pub(super) fn keep_or_remove(
    dir: &Path,
    freed: Vec<FreedLog>,
    room: usize,
    unlinked: &mut Unlinked,
) -> Result<Vec<PathBuf>, StorageError> {
    let mut spares = Vec::new();
    for file in freed {
        let to = segment_path(dir, file.base_offset, SPARE_SUFFIX);
        // A spare of that name may be there already: the cleaner freed a segment's first file,
        // retention now the file that replaced it.
        if spares.len() < room && !to.try_exists().unwrap_or(true) {
            std::fs::rename(&file.path, &to)
                .map_err(|e| StorageError::io("rename", &file.path, e))?;
            spares.push(to);
        } else {
            unlinked.unlink(&file.path)?;
        }
    }
    Ok(spares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::LOG_SUFFIX;

    fn freed(dir: &Path, base_offset: i64) -> FreedLog {
        let path = segment_path(dir, base_offset, LOG_SUFFIX);
        std::fs::write(&path, base_offset.to_string()).expect("write");
        FreedLog { base_offset, path }
    }

    #[test]
    fn keeps_what_fits_and_unlinks_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir = dir.path();
        let files = vec![freed(dir, 0), freed(dir, 3), freed(dir, 6)];
        let spares = keep_or_remove(dir, files, 2, &mut Unlinked::default()).expect("keep");
        let names = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .expect("list")
                .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            spares,
            vec![
                segment_path(dir, 0, SPARE_SUFFIX),
                segment_path(dir, 3, SPARE_SUFFIX)
            ]
        );
        assert_eq!(
            names(dir),
            ["00000000000000000000.spare", "00000000000000000003.spare"]
        );
        assert_eq!(std::fs::read_to_string(&spares[1]).expect("read"), "3");
    }

    #[test]
    fn a_spare_of_the_same_name_stays_and_the_freed_file_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir = dir.path();
        let kept =
            keep_or_remove(dir, vec![freed(dir, 0)], 2, &mut Unlinked::default()).expect("keep");
        std::fs::write(segment_path(dir, 0, LOG_SUFFIX), "new").expect("write");
        let again = FreedLog {
            base_offset: 0,
            path: segment_path(dir, 0, LOG_SUFFIX),
        };
        assert!(
            keep_or_remove(dir, vec![again], 1, &mut Unlinked::default())
                .expect("keep")
                .is_empty()
        );
        assert_eq!(std::fs::read_to_string(&kept[0]).expect("read"), "0");
        assert!(!segment_path(dir, 0, LOG_SUFFIX).exists());
    }
}
