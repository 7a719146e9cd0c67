//! File I/O behind one small interface: direct (O_DIRECT `DmaFile`) or buffered (page cache
//! `BufferedFile`), chosen per log by `IoMode`.
//!
//! Invariants: in direct mode every write starts at a multiple of `BLOCK_BYTES` and has a length
//! that is a multiple of `BLOCK_BYTES` (the caller pads with zeros); a write that lands fewer
//! bytes than asked is an error, never silently retried. Direct reads are widened to whole
//! blocks here and trimmed back. A device's O_DIRECT I/O goes to glommio's busy-polled ring
//! only if the device itself can poll ([`prime_iopoll_probe`]).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use glommio::io::{BufferedFile, DmaFile, OpenOptions, ReadResult};

use crate::chunk_memory::SharedChunk;
use crate::error::StorageError;

/// O_DIRECT alignment used for every direct write (a multiple of any logical block size).
pub(crate) const BLOCK_BYTES: usize = 4096;

/// How a log reaches its segment files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IoMode {
    /// O_DIRECT with aligned DMA buffers; recent data is served from the `BatchCache`.
    Direct,
    /// Through the kernel page cache.
    #[default]
    Buffered,
}

pub(crate) fn align_down(value: u64) -> u64 {
    value - value % BLOCK_BYTES as u64
}

pub(crate) fn align_up(value: u64) -> u64 {
    align_down(value + BLOCK_BYTES as u64 - 1)
}

enum FileKind {
    /// O_DIRECT through glommio's `DmaFile`, on its polled ring only where the device polls
    /// (see [`prime_iopoll_probe`]).
    Direct(DmaFile),
    Buffered(BufferedFile),
}

/// One open file of a segment: the seam between the log and the disk. Its backend is the real
/// glommio file of the log's `IoMode` (an enum: no dynamic dispatch on the write path); in
/// tests a fault plan (`testing::DiskFaults`) can stand in front of it and fail a write, fail
/// an fdatasync, or tear a write at a chosen byte.
pub(crate) struct SegmentFile {
    kind: FileKind,
    path: PathBuf,
    /// The file's size as this handle last set or saw it: blocks up to here are allocated.
    allocated_bytes: Cell<u64>,
    #[cfg(test)]
    faults: Option<std::rc::Rc<testing::DiskFaults>>,
}

impl SegmentFile {
    /// Opens `path` for reading and writing, creating it if missing.
    pub async fn open(path: &Path, mode: IoMode) -> Result<SegmentFile, StorageError> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true);
        let kind = match mode {
            IoMode::Direct => {
                let dir = path.parent().unwrap_or(Path::new("."));
                prime_iopoll_probe(dir).await?;
                let file = options
                    .dma_open(path)
                    .await
                    .map_err(|e| StorageError::io("open", path, e.into()))?;
                FileKind::Direct(file)
            }
            IoMode::Buffered => FileKind::Buffered(
                options
                    .buffered_open(path)
                    .await
                    .map_err(|e| StorageError::io("open", path, e.into()))?,
            ),
        };
        let file = SegmentFile {
            kind,
            path: path.to_path_buf(),
            allocated_bytes: Cell::new(0),
            #[cfg(test)]
            faults: testing::faults_for(path),
        };
        file.allocated_bytes.set(file.size_bytes().await?);
        Ok(file)
    }

    /// Makes the file at least `end` bytes long, in whole `step`s, with allocated (zeroed)
    /// blocks. A write that extends a file makes the next fdatasync commit the file
    /// system's journal for the new size and blocks; writes inside the allocated size need
    /// only the data flushed, so acks=all pays for a journal commit once per `step`.
    /// Bytes past the segment's data read as zeros, which recovery stops at, and sealing and
    /// closing truncate the file to its data.
    pub async fn allocate_to(&self, end: u64, step: u64) -> Result<(), StorageError> {
        if end <= self.allocated_bytes.get() {
            return Ok(());
        }
        let size = end.div_ceil(step) * step;
        let result = match &self.kind {
            FileKind::Direct(file) => file.pre_allocate(size, false).await,
            FileKind::Buffered(file) => file.pre_allocate(size, false).await,
        };
        result.map_err(|e| StorageError::io("fallocate", &self.path, e.into()))?;
        // Two writes in flight may allocate at once; the larger size holds.
        self.allocated_bytes
            .set(self.allocated_bytes.get().max(size));
        Ok(())
    }

    /// Writes a whole aligned DMA buffer at an aligned position (direct mode only). `durable`:
    /// the write completes only once it is as durable as an fdatasync after it would make it
    /// (`RWF_DSYNC`); a failure of that sync is the write's error.
    pub(crate) async fn write_direct(
        &self,
        buf: Arc<SharedChunk>,
        position: u64,
        durable: bool,
    ) -> Result<(), StorageError> {
        let FileKind::Direct(file) = &self.kind else {
            return Err(StorageError::corrupt(
                &self.path,
                "direct write to a buffered file",
            ));
        };
        assert!(position % BLOCK_BYTES as u64 == 0 && buf.len() % BLOCK_BYTES == 0);
        #[cfg(test)]
        self.before_write(position, buf.as_bytes(), durable)?;
        let wanted = buf.len();
        let written = if durable {
            file.write_arc_at_durable(buf, position).await
        } else {
            file.write_arc_at(buf, position).await
        }
        .map_err(|e| StorageError::io("write", &self.path, e.into()))?;
        self.check_written(written, wanted)
    }

    /// Writes `buf` at `position` (buffered mode only).
    pub async fn write_buffered(&self, buf: Vec<u8>, position: u64) -> Result<(), StorageError> {
        let FileKind::Buffered(file) = &self.kind else {
            return Err(StorageError::corrupt(
                &self.path,
                "buffered write to a direct file",
            ));
        };
        #[cfg(test)]
        self.before_write(position, &buf, false)?;
        let wanted = buf.len();
        let written = file
            .write_at(buf, position)
            .await
            .map_err(|e| StorageError::io("write", &self.path, e.into()))?;
        self.check_written(written, wanted)
    }

    /// Tests: applies the fault plan to a write of `bytes` at `position` (see `DiskFaults`); a
    /// durable write fails as an fdatasync would, too.
    #[cfg(test)]
    fn before_write(&self, position: u64, bytes: &[u8], durable: bool) -> Result<(), StorageError> {
        let Some(faults) = &self.faults else {
            return Ok(());
        };
        faults
            .before_write(&self.path, position, bytes)
            .and_then(|()| match durable {
                true => faults.before_sync(),
                false => Ok(()),
            })
            .map_err(|e| StorageError::io("write", &self.path, e))
    }

    fn check_written(&self, written: usize, wanted: usize) -> Result<(), StorageError> {
        if written == wanted {
            Ok(())
        } else {
            let message = format!("short write: {written} of {wanted} bytes");
            Err(StorageError::io(
                "write",
                &self.path,
                std::io::Error::other(message),
            ))
        }
    }

    /// Direct mode: the whole blocks around `[position, position + len)`, in glommio's
    /// buffer (no copy), with the file position of its first byte; fewer bytes only at the
    /// end of the file.
    pub async fn read_blocks(
        &self,
        position: u64,
        len: usize,
    ) -> Result<(u64, ReadResult), StorageError> {
        let FileKind::Direct(file) = &self.kind else {
            unreachable!("read_blocks is for direct mode")
        };
        let block_position = align_down(position);
        let block_end = align_up(position + len as u64);
        let size = (block_end - block_position) as usize;
        let data = file
            .read_at_aligned(block_position, size)
            .await
            .map_err(|e| StorageError::io("read", &self.path, e.into()))?;
        Ok((block_position, data))
    }

    /// Reads up to `len` bytes at `position`; fewer only at the end of the file.
    pub async fn read(&self, position: u64, len: usize) -> Result<Bytes, StorageError> {
        let (block_position, data) = match &self.kind {
            FileKind::Direct(_) => self.read_blocks(position, len).await?,
            FileKind::Buffered(file) => (
                position,
                file.read_at(position, len)
                    .await
                    .map_err(|e| StorageError::io("read", &self.path, e.into()))?,
            ),
        };
        let from = ((position - block_position) as usize).min(data.len());
        let to = (from + len).min(data.len());
        // The copy out of glommio's buffer is the read's one copy: `Bytes` must own its memory.
        Ok(Bytes::copy_from_slice(&data[from..to]))
    }

    /// Reads exactly `len` bytes at `position`, failing if the file is shorter.
    pub async fn read_exact(&self, position: u64, len: usize) -> Result<Bytes, StorageError> {
        let data = self.read(position, len).await?;
        if data.len() == len {
            Ok(data)
        } else {
            let reason = format!("{} bytes at {position}, wanted {len}", data.len());
            Err(StorageError::corrupt(&self.path, reason))
        }
    }

    pub async fn fdatasync(&self) -> Result<(), StorageError> {
        #[cfg(test)]
        if let Some(faults) = &self.faults {
            faults
                .before_sync()
                .map_err(|e| StorageError::io("fdatasync", &self.path, e))?;
        }
        let result = match &self.kind {
            FileKind::Direct(file) => file.fdatasync().await,
            FileKind::Buffered(file) => file.fdatasync().await,
        };
        result.map_err(|e| StorageError::io("fdatasync", &self.path, e.into()))
    }

    /// Cuts the file to `size_bytes`, on glommio's blocking thread: freeing blocks (a seal's
    /// allocated tail, a truncated follower's data) waits, on a `discard` mount, until the
    /// disk has discarded them, which held the shard, and every request on it, for
    /// milliseconds (`perf record -g -e sched:sched_switch`: the shard thread asleep in
    /// `blkdev_issue_discard` under `ftruncate`).
    pub async fn truncate(&self, size_bytes: u64) -> Result<(), StorageError> {
        use std::os::fd::{AsRawFd, BorrowedFd};
        let fd = match &self.kind {
            FileKind::Direct(file) => file.as_raw_fd(),
            FileKind::Buffered(file) => file.as_raw_fd(),
        };
        // SAFETY: `self` keeps the descriptor open for this call; the blocking thread gets a
        // duplicate of its own.
        let duplicate = unsafe { BorrowedFd::borrow_raw(fd) }
            .try_clone_to_owned()
            .map_err(|e| StorageError::io("truncate", &self.path, e))?;
        let file = std::fs::File::from(duplicate);
        glommio::executor()
            .spawn_blocking(move || file.set_len(size_bytes))
            .await
            .map_err(|e| StorageError::io("truncate", &self.path, e))?;
        self.allocated_bytes.set(size_bytes);
        Ok(())
    }

    pub async fn size_bytes(&self) -> Result<u64, StorageError> {
        let result = match &self.kind {
            FileKind::Direct(file) => file.file_size().await,
            FileKind::Buffered(file) => file.file_size().await,
        };
        result.map_err(|e| StorageError::io("stat", &self.path, e.into()))
    }
}

thread_local! {
    /// Devices (`st_dev`) whose iopoll probe [`prime_iopoll_probe`] has run on this thread
    /// (glommio keeps its answer per thread, that is per executor).
    static PROBED_DEVICES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// glommio decides once per block device and executor whether `DmaFile` I/O goes to its
/// polled ring, by reading the first block of the first `DmaFile` opened there. When that
/// file is a new, empty segment the read stops at the end of the file without reaching the
/// device and "succeeds", so on a device without poll queues (`queue/io_poll` 0, such as
/// virtio-blk) every later write went to the polled ring: the shard busy-polled while one was
/// out, and the io-wq worker doing the write, on the same CPU, waited for a scheduler tick
/// (acks=all took ~4 ms per write). Opening a file that holds a whole block first makes the
/// probe ask the device itself.
async fn prime_iopoll_probe(dir: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(dir)
        .map_err(|e| StorageError::io("stat", dir, e))?
        .dev();
    if PROBED_DEVICES.with(|probed| probed.borrow().contains(&device)) {
        return Ok(());
    }
    let path = dir.join(".iopoll-probe");
    write_small_file(&path, vec![0xA5; BLOCK_BYTES]).await?;
    let opened = OpenOptions::new().read(true).dma_open(&path).await;
    let _ = std::fs::remove_file(&path);
    let file = opened.map_err(|e| StorageError::io("open", &path, e.into()))?;
    file.close()
        .await
        .map_err(|e| StorageError::io("close", &path, e.into()))?;
    PROBED_DEVICES.with(|probed| probed.borrow_mut().push(device));
    Ok(())
}

/// Writes a small file of our own (index, checkpoint) whole, fdatasyncs it, and closes it.
pub(crate) async fn write_small_file(path: &Path, data: Vec<u8>) -> Result<(), StorageError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .buffered_open(path)
        .await
        .map_err(|e| StorageError::io("create", path, e.into()))?;
    let wanted = data.len();
    if wanted > 0 {
        let written = file
            .write_at(data, 0)
            .await
            .map_err(|e| StorageError::io("write", path, e.into()))?;
        if written != wanted {
            let message = format!("short write: {written} of {wanted} bytes");
            return Err(StorageError::io(
                "write",
                path,
                std::io::Error::other(message),
            ));
        }
    }
    file.fdatasync()
        .await
        .map_err(|e| StorageError::io("fdatasync", path, e.into()))?;
    file.close()
        .await
        .map_err(|e| StorageError::io("close", path, e.into()))
}

/// Reads a small file of our own whole; `None` if it does not exist. Files larger than
/// `size_bytes_max` are reported as corrupt before anything is allocated.
pub(crate) async fn read_small_file(
    path: &Path,
    size_bytes_max: u64,
) -> Result<Option<Vec<u8>>, StorageError> {
    let file = match BufferedFile::open(path).await {
        Ok(file) => file,
        Err(error) => {
            let error: std::io::Error = error.into();
            if error.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(StorageError::io("open", path, error));
        }
    };
    let size_bytes = file
        .file_size()
        .await
        .map_err(|e| StorageError::io("stat", path, e.into()))?;
    if size_bytes > size_bytes_max {
        let _ = file.close().await;
        let reason = format!("{size_bytes} bytes, at most {size_bytes_max} expected");
        return Err(StorageError::corrupt(path, reason));
    }
    let data = file
        .read_at(0, size_bytes as usize)
        .await
        .map_err(|e| StorageError::io("read", path, e.into()))?;
    let data = data.to_vec();
    file.close()
        .await
        .map_err(|e| StorageError::io("close", path, e.into()))?;
    Ok(Some(data))
}

/// fdatasyncs a directory so that files created or removed in it survive a crash.
pub(crate) async fn sync_dir(path: &Path) -> Result<(), StorageError> {
    let dir = glommio::io::Directory::open(path)
        .await
        .map_err(|e| StorageError::io("open dir", path, e.into()))?;
    dir.sync()
        .await
        .map_err(|e| StorageError::io("fsync dir", path, e.into()))?;
    dir.close()
        .await
        .map_err(|e| StorageError::io("close dir", path, e.into()))
}

/// A fault plan for the segment files of a directory, for tests through the real `Log` code:
/// fail the next data write, fail the next fdatasync, or tear the next write that reaches a
/// chosen file position (the bytes before it land, then the write fails, as a crash mid-write
/// leaves a file).
#[cfg(test)]
pub(crate) mod testing {
    use std::cell::{Cell, RefCell};
    use std::os::unix::fs::FileExt;
    use std::path::{Path, PathBuf};
    use std::rc::Rc;

    thread_local! {
        /// Plans by directory; a segment file opened in one of them gets its plan.
        static PLANS: RefCell<Vec<(PathBuf, Rc<DiskFaults>)>> = const { RefCell::new(Vec::new()) };
    }

    #[derive(Default)]
    pub(crate) struct DiskFaults {
        fail_next_write: Cell<bool>,
        fail_next_sync: Cell<bool>,
        /// The next write that covers this position of a file lands only its bytes below it.
        tear_at: Cell<Option<u64>>,
        /// Faults injected so far.
        pub injected: Cell<u32>,
    }

    impl DiskFaults {
        pub fn fail_next_write(&self) {
            self.fail_next_write.set(true);
        }

        pub fn fail_next_sync(&self) {
            self.fail_next_sync.set(true);
        }

        pub fn tear_next_write_at(&self, position: u64) {
            self.tear_at.set(Some(position));
        }

        fn injected(&self, what: &str) -> std::io::Error {
            self.injected.set(self.injected.get() + 1);
            std::io::Error::other(format!("injected: {what}"))
        }

        pub(super) fn before_write(
            &self,
            path: &Path,
            position: u64,
            bytes: &[u8],
        ) -> std::io::Result<()> {
            if self.fail_next_write.replace(false) {
                return Err(self.injected("write failed"));
            }
            let end = position + bytes.len() as u64;
            match self.tear_at.get() {
                Some(tear) if (position..end).contains(&tear) => {
                    self.tear_at.set(None);
                    let landed = &bytes[..(tear - position) as usize];
                    // Through a separate, ordinary descriptor: the O_DIRECT file takes whole
                    // blocks only, and a torn write is exactly what it never writes.
                    let file = std::fs::OpenOptions::new().write(true).open(path)?;
                    file.write_all_at(landed, position)?;
                    file.sync_data()?;
                    Err(self.injected("write torn"))
                }
                _ => Ok(()),
            }
        }

        pub(super) fn before_sync(&self) -> std::io::Result<()> {
            if self.fail_next_sync.replace(false) {
                return Err(self.injected("fdatasync failed"));
            }
            Ok(())
        }
    }

    /// Installs a fault plan for the segment files opened in `dir` from now on (on this
    /// thread, that is this executor).
    pub(crate) fn plan_faults(dir: &Path) -> Rc<DiskFaults> {
        let faults = Rc::new(DiskFaults::default());
        let dir = std::path::absolute(dir).expect("absolute dir");
        PLANS.with(|plans| plans.borrow_mut().push((dir, faults.clone())));
        faults
    }

    pub(super) fn faults_for(path: &Path) -> Option<Rc<DiskFaults>> {
        PLANS.with(|plans| {
            plans
                .borrow()
                .iter()
                .find(|(dir, _)| path.parent() == Some(dir.as_path()))
                .map(|(_, faults)| faults.clone())
        })
    }
}
