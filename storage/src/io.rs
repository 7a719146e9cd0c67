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
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{BufferedFile, DmaBuffer, DmaFile, OpenOptions, ReadResult};

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

/// One open file of a segment.
pub(crate) struct SegmentFile {
    kind: FileKind,
    path: PathBuf,
    /// The file's size as this handle last set or saw it: blocks up to here are allocated.
    allocated_bytes: Cell<u64>,
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

    /// Writes a whole aligned DMA buffer at an aligned position (direct mode only).
    pub async fn write_direct(
        &self,
        buf: Rc<DmaBuffer>,
        position: u64,
    ) -> Result<(), StorageError> {
        let FileKind::Direct(file) = &self.kind else {
            return Err(StorageError::corrupt(
                &self.path,
                "direct write to a buffered file",
            ));
        };
        assert!(position % BLOCK_BYTES as u64 == 0 && buf.len() % BLOCK_BYTES == 0);
        let wanted = buf.len();
        let written = file
            .write_rc_at(buf, position)
            .await
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
        let wanted = buf.len();
        let written = file
            .write_at(buf, position)
            .await
            .map_err(|e| StorageError::io("write", &self.path, e.into()))?;
        self.check_written(written, wanted)
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
        let result = match &self.kind {
            FileKind::Direct(file) => file.fdatasync().await,
            FileKind::Buffered(file) => file.fdatasync().await,
        };
        result.map_err(|e| StorageError::io("fdatasync", &self.path, e.into()))
    }

    pub async fn truncate(&self, size_bytes: u64) -> Result<(), StorageError> {
        let result = match &self.kind {
            FileKind::Direct(file) => file.truncate(size_bytes).await,
            FileKind::Buffered(file) => file.truncate(size_bytes).await,
        };
        result.map_err(|e| StorageError::io("truncate", &self.path, e.into()))?;
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
