//! Frees the blocks of deleted files a cut at a time, so that no deletion stalls the disk.
//!
//! Freeing a large file's blocks at once, by an unlink, a rename over it or the last close of
//! an unlinked file, stalls every write to the disk while it discards them (a `discard`
//! mount): a 16 MiB file freed whole cost 64 KiB appends beside it up to 3 ms, the same bytes
//! freed a megabyte at a time about 1 ms (`scripts/free_stall.py`, docs/BENCHMARKS.md). So a
//! deleted file is unlinked at once, by whatever blocking call the caller makes
//! ([`Unlinked::unlink`]), while a descriptor keeps its blocks; this shard's reaper then cuts
//! it [`CUT_BYTES`] at a time on the executor's blocking thread, [`CUT_PAUSE`] apart (the
//! pause is a timer on the shard, never a sleep on the blocking thread, whose other work, a
//! seal's truncate, must not wait behind it), and closes it once empty.
//!
//! Invariants: a file's name is gone when the caller's unlink returns, exactly as with a
//! plain unlink, so recovery never sees a short file; a file is cut only once no reader holds
//! it (the `Weak` handles given with it are dead), since a cut would turn a read of it into
//! a short one, and if readers hold it for [`READERS_WAIT_MAX`] the reaper closes its
//! descriptor without cutting (the last reader's close frees the blocks); a crash leaves only
//! unlinked inodes, which the file system frees when it mounts. The cut grows with the
//! backlog so that what waits drains within [`BACKLOG_DRAIN`]: deletions never fall behind
//! the writes that fill the disk.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::path::Path;
use std::rc::Weak;
use std::time::{Duration, Instant};

use crate::error::StorageError;
use crate::io::SegmentFile;

/// The bytes freed by one cut while the backlog is small.
pub(crate) const CUT_BYTES: u64 = 1 << 20;
/// The pause between two cuts.
pub(crate) const CUT_PAUSE: Duration = Duration::from_millis(2);
/// The time within which the backlog drains: the cut grows when 1 MiB per 2 ms (500 MiB/s)
/// would take longer.
pub(crate) const BACKLOG_DRAIN: Duration = Duration::from_secs(4);
/// How long a file waits for its readers before the reaper gives up cutting it (Kafka's
/// `file.delete.delay.ms` default).
pub(crate) const READERS_WAIT_MAX: Duration = Duration::from_secs(60);
/// How often the reaper looks again at files whose readers are still there.
const READERS_POLL: Duration = Duration::from_millis(10);

/// Files unlinked by a blocking call and kept open for the reaper: built on the blocking
/// thread, handed to [`free_paced`] on the shard.
#[derive(Default)]
pub(crate) struct Unlinked {
    files: Vec<(File, u64)>,
}

impl Unlinked {
    /// Unlinks `path` (nothing if it is absent), keeping it open to free its blocks later.
    /// Blocking.
    pub(crate) fn unlink(&mut self, path: &Path) -> Result<(), StorageError> {
        let file = match File::options().write(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StorageError::io("open", path, e)),
        };
        let bytes = file
            .metadata()
            .map_err(|e| StorageError::io("stat", path, e))?
            .len();
        std::fs::remove_file(path).map_err(|e| StorageError::io("remove", path, e))?;
        self.files.push((file, bytes));
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, bytes)| bytes).sum()
    }
}

/// Unlinks `paths` on the blocking thread and frees their blocks at a pace once `readers`
/// are done with them. Returns once the names are gone.
pub(crate) async fn delete(
    paths: Vec<std::path::PathBuf>,
    readers: Vec<Weak<SegmentFile>>,
) -> Result<(), StorageError> {
    if paths.is_empty() {
        return Ok(());
    }
    let unlinked = glommio::executor()
        .spawn_blocking(move || {
            let mut unlinked = Unlinked::default();
            paths.iter().try_for_each(|path| unlinked.unlink(path))?;
            Ok::<_, StorageError>(unlinked)
        })
        .await?;
    free_paced(unlinked, readers);
    Ok(())
}

/// Hands `unlinked` to this shard's reaper, to be cut once `readers` are done with them.
pub(crate) fn free_paced(unlinked: Unlinked, readers: Vec<Weak<SegmentFile>>) {
    if unlinked.files.is_empty() {
        return;
    }
    let start = REAPER.with_borrow_mut(|reaper| {
        reaper.backlog_bytes += unlinked.bytes();
        reaper.jobs.push_back(Job {
            unlinked,
            readers,
            since: Instant::now(),
        });
        !std::mem::replace(&mut reaper.running, true)
    });
    if start {
        glommio::spawn_local(run()).detach();
    }
}

/// Waits until this shard's reaper has freed everything handed to it (tests).
#[cfg(test)]
pub(crate) async fn idle() {
    while REAPER.with_borrow(|reaper| reaper.running) {
        glommio::timer::sleep(READERS_POLL).await;
    }
}

/// The bytes freed by one cut with `backlog_bytes` waiting.
fn cut_bytes(backlog_bytes: u64) -> u64 {
    let cuts = (BACKLOG_DRAIN.as_nanos() / CUT_PAUSE.as_nanos()) as u64;
    CUT_BYTES.max(backlog_bytes.div_ceil(cuts))
}

struct Job {
    unlinked: Unlinked,
    readers: Vec<Weak<SegmentFile>>,
    since: Instant,
}

impl Job {
    fn readers_done(&self) -> bool {
        self.readers.iter().all(|reader| reader.strong_count() == 0)
    }
}

#[derive(Default)]
struct Reaper {
    jobs: VecDeque<Job>,
    backlog_bytes: u64,
    running: bool,
}

thread_local! {
    static REAPER: RefCell<Reaper> = RefCell::new(Reaper::default());
}

#[cfg(test)]
thread_local! {
    /// The sizes the reaper cut files to, in order (tests).
    static CUTS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The reaper: frees the first job whose readers are done, oldest first, until none is left.
async fn run() {
    loop {
        let next = REAPER.with_borrow_mut(|reaper| {
            if reaper.jobs.is_empty() {
                reaper.running = false;
                return None;
            }
            let ready = reaper
                .jobs
                .iter()
                .position(|job| job.readers_done() || job.since.elapsed() >= READERS_WAIT_MAX);
            Some(ready.and_then(|at| reaper.jobs.remove(at)))
        });
        match next {
            None => return,
            Some(None) => glommio::timer::sleep(READERS_POLL).await,
            Some(Some(job)) if !job.readers_done() => {
                tracing::warn!(
                    files = job.unlinked.files.len(),
                    "deleted files still read after {READERS_WAIT_MAX:?}: closed uncut"
                );
                let bytes = job.unlinked.bytes();
                REAPER.with_borrow_mut(|reaper| reaper.backlog_bytes -= bytes);
                glommio::executor()
                    .spawn_blocking(move || drop(job.unlinked))
                    .await;
            }
            Some(Some(job)) => {
                for (file, bytes) in job.unlinked.files {
                    free(file, bytes).await;
                }
            }
        }
    }
}

/// Cuts `file` (`bytes` long) down to nothing, a cut per pause, then closes it, all on the
/// blocking thread.
async fn free(mut file: File, bytes: u64) {
    let mut size = bytes;
    while size > 0 {
        let cut = cut_bytes(REAPER.with_borrow(|reaper| reaper.backlog_bytes)).min(size);
        size -= cut;
        let (returned, result) = glommio::executor()
            .spawn_blocking(move || {
                let result = file.set_len(size);
                (file, result)
            })
            .await;
        file = returned;
        #[cfg(test)]
        CUTS.with_borrow_mut(|cuts| cuts.push(size));
        if let Err(e) = result {
            // Closing frees the rest at once: slower for writes beside it, never wrong.
            tracing::warn!(error = %e, "cutting a deleted file");
            REAPER.with_borrow_mut(|reaper| reaper.backlog_bytes -= size + cut);
            break;
        }
        REAPER.with_borrow_mut(|reaper| reaper.backlog_bytes -= cut);
        glommio::timer::sleep(CUT_PAUSE).await;
    }
    glommio::executor().spawn_blocking(move || drop(file)).await;
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::io::IoMode;
    use crate::log_tests::run;

    const MIB: u64 = 1 << 20;

    fn take_cuts() -> Vec<u64> {
        CUTS.with_borrow_mut(std::mem::take)
    }

    fn allocated_bytes(file: &File) -> u64 {
        use std::os::unix::fs::MetadataExt;
        file.metadata().expect("stat").blocks() * 512
    }

    #[test]
    fn the_cut_grows_only_when_the_backlog_would_outlast_the_drain_time() {
        assert_eq!(cut_bytes(0), CUT_BYTES);
        // 2000 cuts in 4 s: 1 MiB each drains 2000 MiB in time.
        assert_eq!(cut_bytes(2000 * MIB), CUT_BYTES);
        assert_eq!(cut_bytes(8000 * MIB), 4 * MIB);
    }

    #[test]
    fn a_deleted_file_is_gone_at_once_and_freed_a_cut_at_a_time() {
        run(|| async move {
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path();
            let path = dir.join("00000000000000000000.log");
            std::fs::write(&path, vec![7u8; (3 * MIB + MIB / 2) as usize]).expect("write");
            let watch = File::open(&path).expect("open");
            take_cuts();
            delete(vec![path.clone()], Vec::new())
                .await
                .expect("delete");
            assert!(!path.exists(), "the name goes before delete returns");
            idle().await;
            assert_eq!(
                take_cuts(),
                vec![2 * MIB + MIB / 2, 3 * MIB / 2, MIB / 2, 0],
                "1 MiB at a time, from the end"
            );
            assert_eq!(allocated_bytes(&watch), 0, "every block freed");
        });
    }

    #[test]
    fn a_file_still_read_is_not_cut_until_its_reader_is_done() {
        run(|| async move {
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path();
            let path = dir.join("00000000000000000000.log");
            std::fs::write(&path, vec![9u8; (2 * MIB) as usize]).expect("write");
            let reader = Rc::new(
                SegmentFile::open(&path, IoMode::Buffered)
                    .await
                    .expect("open"),
            );
            take_cuts();
            delete(vec![path.clone()], vec![Rc::downgrade(&reader)])
                .await
                .expect("delete");
            glommio::timer::sleep(READERS_POLL * 5).await;
            assert!(take_cuts().is_empty(), "nothing cut while read");
            let tail = reader.read_exact(2 * MIB - 4096, 4096).await;
            assert_eq!(
                tail.expect("read").as_ref(),
                [9u8; 4096],
                "the reader reads it all"
            );
            drop(reader);
            idle().await;
            assert_eq!(take_cuts(), vec![MIB, 0]);
        });
    }

    #[test]
    fn absent_files_are_skipped() {
        run(|| async move {
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path();
            take_cuts();
            delete(vec![dir.join("absent.log")], Vec::new())
                .await
                .expect("delete");
            idle().await;
            assert!(take_cuts().is_empty());
        });
    }
}
