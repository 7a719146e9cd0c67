//! The stage: write-queue memory that outlives the process. In direct mode an append is
//! copied once into a chunk of the write queue, which an O_DIRECT write takes to its segment
//! file later; until that write completes, a `kill -9` would lose the chunk. With a stage
//! installed on the shard (`install`), chunk memory is a run of slots of a file in tmpfs,
//! mapped shared: the kernel keeps its pages when the process dies, as it keeps the page
//! cache of a buffered write. Each run has a header naming where its bytes belong (partition
//! directory, segment, file position) and how many are filled; the header is cleared once the
//! chunk's write completed. At start-up, before any log opens, `replay` writes every run still
//! pending into its segment file, and recovery runs as after any crash. A crash of the machine
//! loses tmpfs, as it loses page cache not yet synced: acks=1 never promised more.
//!
//! File `ringlog-<crc32 of the data directory>-<shard>.stage`, locked (`flock`) by its node:
//! ```text
//! [0, 4096)            superblock: magic | slot count | slot bytes | data at | dir len | data dir
//! [4096, data at)      one 512-byte header per slot; a run's header is its first slot's:
//!                      state (PENDING or 0) | seq | segment base offset | position | filled
//!                      bytes | dir len | partition directory
//! [data at, ...)       the slots, SLOT_BYTES each, page aligned
//! ```
//!
//! Invariants: only the thread that installed a stage allocates its runs and writes their
//! headers; a header is PENDING only while its run holds a chunk whose write has not
//! completed, and its filled length covers every byte appended to the chunk (stored before the
//! append returns); any thread may free a run (the last holder of a chunk can be a read on
//! another shard): it clears the header, then the slots' bits, with release ordering that the
//! allocator's acquire loads pair with, so a slot is rewritten only after its last reader is
//! done; a run is handed out only once its tmpfs pages are allocated (`fallocate`), so a full
//! tmpfs means heap chunks, never a SIGBUS. No lock is taken on any path.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::MmapRaw;

use crate::error::StorageError;
use crate::segment::{segment_path, LOG_SUFFIX};

/// The unit of the stage's allocator: the write queue's smallest chunk.
pub(crate) const SLOT_BYTES: usize = 64 << 10;
const SUPERBLOCK_BYTES: usize = 4096;
const HEADER_BYTES: usize = 512;
const HEADER_DIR_AT: usize = 48;
/// The longest partition directory a header names; a longer one's chunks are not staged.
const DIR_BYTES_MAX: usize = HEADER_BYTES - HEADER_DIR_AT;
const SUPERBLOCK_DIR_AT: usize = 40;
const MAGIC: &[u8; 8] = b"RLSTAGE1";
/// A header whose run must be written at start-up.
const PENDING: u64 = 0x5354_4147_4544_2121;
/// `statfs` of a tmpfs mount.
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// Slots whose pages a stage allocates at a time as it grows: 1 MiB.
const GROWTH_SLOTS: usize = 16;
/// How long `install` waits for its file's lock: another node starting beside this one holds
/// it only while its replay looks at the file, far less than this; a node running on the
/// same data directory holds it for good.
const INSTALL_LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

thread_local! {
    static STAGE: RefCell<Option<Arc<StageFile>>> = const { RefCell::new(None) };
}

/// One shard's stage file, mapped.
pub(crate) struct StageFile {
    map: MmapRaw,
    slots: usize,
    data_at: usize,
    /// One bit per slot, set while a run holds it.
    used: Box<[AtomicU64]>,
    /// Order of the runs' headers (replay writes a partition's runs in it).
    next_seq: AtomicU64,
    /// Slots below this have their tmpfs pages allocated (owner thread only).
    allocated_slots: AtomicUsize,
    /// tmpfs refused to grow the stage once (said once in the log).
    refused_growth: AtomicBool,
    path: PathBuf,
    /// Holds the `flock` for the node's life.
    file: File,
}

// SAFETY: the mapping is shared memory that lives as long as the `StageFile`; the slot bits
// are atomics, and each run's bytes and header are reached only through the one `StagedRun`
// that owns them (module invariants).
unsafe impl Send for StageFile {}
// SAFETY: as above.
unsafe impl Sync for StageFile {}

impl StageFile {
    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    fn header(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.slots);
        // SAFETY: headers lie inside the mapping (`data_at` is past the last one).
        unsafe { self.base().add(SUPERBLOCK_BYTES + slot * HEADER_BYTES) }
    }

    /// The header word at `at`, as an atomic: freeing threads and the owner both store.
    fn header_word(&self, slot: usize, at: usize) -> &AtomicU64 {
        // SAFETY: 8-byte aligned (headers are 512-byte aligned in a page-aligned mapping),
        // inside the mapping, and only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.header(slot).add(at).cast()) }
    }

    /// First fit: the lowest free run of `count` slots, marked used. Keeps the pages in use
    /// few (tmpfs holds every page ever allocated until the file goes).
    fn take_run(&self, count: usize) -> Option<usize> {
        let (mut start, mut slot) = (0, 0);
        while slot < self.slots {
            let word = self.used[slot / 64].load(Ordering::Acquire);
            if slot % 64 == 0 && word == u64::MAX {
                slot += 64;
                start = slot;
                continue;
            }
            if word & (1 << (slot % 64)) != 0 {
                start = slot + 1;
            } else if slot + 1 - start == count {
                for taken in start..=slot {
                    self.used[taken / 64].fetch_or(1 << (taken % 64), Ordering::Relaxed);
                }
                return Some(start);
            }
            slot += 1;
        }
        None
    }

    /// Allocates the tmpfs pages of the slots below `end` (and a few more), so that no store
    /// into the mapping ever faults for want of memory (SIGBUS). False if tmpfs is full.
    fn allocate_to(&self, end: usize) -> bool {
        let allocated = self.allocated_slots.load(Ordering::Relaxed);
        if end <= allocated {
            return true;
        }
        let target = end.max(allocated + GROWTH_SLOTS).min(self.slots);
        let from = (self.data_at + allocated * SLOT_BYTES) as libc::off_t;
        let len = ((target - allocated) * SLOT_BYTES) as libc::off_t;
        // SAFETY: fallocate on a descriptor the stage owns; no memory is involved.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), 0, from, len) } != 0 {
            if !self.refused_growth.swap(true, Ordering::Relaxed) {
                let error = std::io::Error::last_os_error();
                tracing::warn!(path = %self.path.display(), %error, "stage cannot grow: chunks beyond it wait for their writes");
            }
            return false;
        }
        self.allocated_slots.store(target, Ordering::Relaxed);
        true
    }

    fn free_run(&self, start: usize, count: usize) {
        for slot in start..start + count {
            self.used[slot / 64].fetch_and(!(1 << (slot % 64)), Ordering::Release);
        }
    }

    fn pending_runs(&self) -> usize {
        (0..self.slots)
            .filter(|&slot| self.header_word(slot, 0).load(Ordering::Acquire) == PENDING.to_le())
            .count()
    }
}

/// Where a staged chunk's bytes belong.
pub(crate) struct StageTarget<'a> {
    /// The partition directory, as bytes of its absolute path.
    pub(crate) dir: &'a [u8],
    pub(crate) segment_base_offset: i64,
    /// File position of the chunk's first byte.
    pub(crate) position: u64,
}

/// A run of stage slots holding one chunk; frees them when dropped.
pub(crate) struct StagedRun {
    file: Arc<StageFile>,
    slot: usize,
    count: usize,
    len: usize,
}

impl StagedRun {
    /// A run of whole slots, at least `len` bytes, from this thread's stage, its header
    /// pending for `target` with nothing filled; `None` without a stage, when it is full, or
    /// when the directory is too long for a header.
    pub(crate) fn allocate(len: usize, target: &StageTarget) -> Option<StagedRun> {
        if target.dir.len() > DIR_BYTES_MAX {
            return None;
        }
        let file = STAGE.with_borrow(|stage| stage.clone())?;
        let count = len.div_ceil(SLOT_BYTES);
        let slot = file.take_run(count)?;
        if !file.allocate_to(slot + count) {
            file.free_run(slot, count);
            return None;
        }
        let seq = file.next_seq.fetch_add(1, Ordering::Relaxed);
        let header = file.header(slot);
        // SAFETY: the run was just taken by this thread, so nothing else reads or writes its
        // header; every field lies inside the header.
        unsafe {
            header.add(8).cast::<u64>().write(seq.to_le());
            header
                .add(16)
                .cast::<i64>()
                .write(target.segment_base_offset.to_le());
            header.add(24).cast::<u64>().write(target.position.to_le());
            header
                .add(40)
                .cast::<u64>()
                .write((target.dir.len() as u64).to_le());
            std::ptr::copy_nonoverlapping(
                target.dir.as_ptr(),
                header.add(HEADER_DIR_AT),
                target.dir.len(),
            );
        }
        file.header_word(slot, 32).store(0, Ordering::Relaxed);
        file.header_word(slot, 0)
            .store(PENDING.to_le(), Ordering::Release);
        Some(StagedRun {
            file,
            slot,
            count,
            len: count * SLOT_BYTES,
        })
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the run's slots lie inside the mapping.
        unsafe {
            self.file
                .base()
                .add(self.file.data_at + self.slot * SLOT_BYTES)
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: the run owns these bytes (its slots are marked used until it drops).
        unsafe { std::slice::from_raw_parts(self.data(), self.len) }
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.data(), self.len) }
    }

    /// The run's first `bytes` bytes hold the chunk: what a replay writes.
    pub(crate) fn set_filled(&self, bytes: usize) {
        debug_assert!(bytes <= self.len);
        self.file
            .header_word(self.slot, 32)
            .store((bytes as u64).to_le(), Ordering::Release);
    }

    /// The chunk's write completed: nothing to replay any more.
    pub(crate) fn written(&self) {
        self.file
            .header_word(self.slot, 0)
            .store(0, Ordering::Release);
    }
}

impl Drop for StagedRun {
    fn drop(&mut self) {
        self.written();
        self.file.free_run(self.slot, self.count);
    }
}

/// What `replay` wrote back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub chunks: usize,
    pub bytes: u64,
}

fn stage_path(stage_dir: &Path, data_dir: &Path, shard: usize) -> PathBuf {
    let hash = crc32fast::hash(data_dir.as_os_str().as_bytes());
    stage_dir.join(format!("ringlog-{hash:08x}-{shard}.stage"))
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StorageError {
    let path = path.to_path_buf();
    move |e| StorageError::io(action, &path, e)
}

/// The stage file at `path`, for reading and writing, created empty if missing.
fn open_or_create(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Takes the `flock` of an open stage file; false if another process holds it.
fn lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor the caller owns; no memory is involved.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// `lock`, tried again every few milliseconds until `patience` has passed. Blocking.
fn lock_within(file: &File, patience: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        if lock(file) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether `path` still names the open `file` (not removed, nor replaced since it was
/// opened).
fn still_named(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

fn is_tmpfs(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `statfs` writes only into the struct it is given.
    let mut stats: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a struct of the right type.
    let done = unsafe { libc::statfs(path.as_ptr(), &mut stats) } == 0;
    done && stats.f_type as i64 == TMPFS_MAGIC
}

/// Installs a stage of about `bytes` on this thread (a shard of the node whose data
/// directory is `data_dir`, absolute): the direct-mode chunks its logs allocate from then on
/// live in `stage_dir` (which must be tmpfs: anything else would turn a crash of the machine
/// into replayed garbage). Returns the file, or `None` when the stage is off (`bytes` under
/// one slot), `stage_dir` is not tmpfs, or another process holds the file for longer than
/// `INSTALL_LOCK_PATIENCE`. Run `replay` first: installing starts the file afresh. Blocking.
pub fn install(
    stage_dir: &Path,
    data_dir: &Path,
    shard: usize,
    bytes: u64,
) -> Result<Option<PathBuf>, StorageError> {
    let slots = (bytes / SLOT_BYTES as u64) as usize;
    let data_dir_bytes = data_dir.as_os_str().as_bytes();
    if slots == 0 || data_dir_bytes.len() > SUPERBLOCK_BYTES - SUPERBLOCK_DIR_AT {
        return Ok(None);
    }
    if !is_tmpfs(stage_dir) {
        tracing::warn!(dir = %stage_dir.display(), "log.stage.dir is not tmpfs: no stage, acks=1 waits for the disk");
        return Ok(None);
    }
    let path = stage_path(stage_dir, data_dir, shard);
    let file = open_or_create(&path).map_err(io_error("create", &path))?;
    // A node starting beside this one may have opened the file this call just created and
    // hold its lock while its replay finds it is not a stage file yet: wait that out.
    if !lock_within(&file, INSTALL_LOCK_PATIENCE) {
        tracing::warn!(path = %path.display(), "stage file in use by another process: no stage");
        return Ok(None);
    }
    let data_at = (SUPERBLOCK_BYTES + slots * HEADER_BYTES).next_multiple_of(4096);
    let size = (data_at + slots * SLOT_BYTES) as u64;
    // Emptied first: no page of an earlier run survives. The slots' pages are allocated as
    // first use reaches them (`StageFile::allocate_to`); the superblock's and headers' now.
    file.set_len(0).map_err(io_error("truncate", &path))?;
    file.set_len(size).map_err(io_error("truncate", &path))?;
    // SAFETY: fallocate on a descriptor we own; no memory is involved.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, data_at as libc::off_t) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(path = %path.display(), %error, "no room for a stage");
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    let mut superblock = vec![0u8; SUPERBLOCK_BYTES];
    superblock[..8].copy_from_slice(MAGIC);
    for (at, value) in [(8, slots), (16, SLOT_BYTES), (24, data_at)] {
        superblock[at..at + 8].copy_from_slice(&(value as u64).to_le_bytes());
    }
    superblock[32..40].copy_from_slice(&(data_dir_bytes.len() as u64).to_le_bytes());
    superblock[SUPERBLOCK_DIR_AT..SUPERBLOCK_DIR_AT + data_dir_bytes.len()]
        .copy_from_slice(data_dir_bytes);
    file.write_all_at(&superblock, 0)
        .map_err(io_error("write", &path))?;
    let map = MmapRaw::map_raw(&file).map_err(io_error("map", &path))?;
    let stage = StageFile {
        map,
        slots,
        data_at,
        used: (0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        next_seq: AtomicU64::new(1),
        allocated_slots: AtomicUsize::new(0),
        refused_growth: AtomicBool::new(false),
        path: path.clone(),
        file,
    };
    // Slots past the last one never show as free.
    if slots % 64 != 0 {
        stage.used[slots / 64].store(!0 << (slots % 64), Ordering::Relaxed);
    }
    STAGE.with_borrow_mut(|installed| *installed = Some(Arc::new(stage)));
    Ok(Some(path))
}

/// Ends this thread's stage (after its logs closed): the file goes unless a run is still
/// pending (a log that failed to write it), which the next start replays. Chunks still
/// cached keep the mapping until they drop.
pub fn uninstall() {
    let Some(stage) = STAGE.with_borrow_mut(Option::take) else {
        return;
    };
    let pending = stage.pending_runs();
    if pending > 0 {
        tracing::warn!(path = %stage.path.display(), pending, "stage kept: chunks not written");
        return;
    }
    if let Err(error) = std::fs::remove_file(&stage.path) {
        tracing::warn!(path = %stage.path.display(), %error, "could not remove the stage file");
    }
}

/// Writes every pending run of the stage files of `data_dir` (absolute, as given to
/// `install`) in `stage_dir` into its segment file, syncs those files, and removes the stage
/// files; a run whose partition directory is gone (the partition was deleted) is dropped.
/// Stage files of data directories that no longer exist are removed; those of other live
/// nodes (locked) are left alone. Blocking: run at start-up, before any log of `data_dir`
/// opens.
pub fn replay(stage_dir: &Path, data_dir: &Path) -> Result<Replayed, StorageError> {
    let mut replayed = Replayed::default();
    let entries = match std::fs::read_dir(stage_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(replayed),
        Err(error) => return Err(StorageError::io("list", stage_dir, error)),
    };
    for entry in entries {
        let path = entry.map_err(io_error("list", stage_dir))?.path();
        let name = path.file_name().map(OsStrExt::as_bytes).unwrap_or_default();
        if !(name.starts_with(b"ringlog-") && name.ends_with(b".stage")) {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue;
        };
        // Another node starting beside this one may have held the lock first and removed
        // the file: what the lock then guards is no longer the file of that name.
        if !lock(&file) || !still_named(&file, &path) {
            continue;
        }
        let Some(layout) = Layout::read(&file) else {
            tracing::warn!(path = %path.display(), "not a stage file; left alone");
            continue;
        };
        if layout.data_dir != data_dir {
            if !layout.data_dir.exists() {
                std::fs::remove_file(&path).map_err(io_error("remove", &path))?;
            }
            continue;
        }
        let done = replay_file(&file, &layout)?;
        replayed.chunks += done.chunks;
        replayed.bytes += done.bytes;
        std::fs::remove_file(&path).map_err(io_error("remove", &path))?;
    }
    Ok(replayed)
}

/// A stage file's superblock.
struct Layout {
    slots: usize,
    slot_bytes: usize,
    data_at: usize,
    data_dir: PathBuf,
}

impl Layout {
    fn read(file: &File) -> Option<Layout> {
        let mut superblock = vec![0u8; SUPERBLOCK_BYTES];
        file.read_exact_at(&mut superblock, 0).ok()?;
        let word = |at: usize| {
            let bytes: [u8; 8] = superblock[at..at + 8].try_into().expect("8 bytes");
            u64::from_le_bytes(bytes) as usize
        };
        let dir_len = word(32);
        let layout = Layout {
            slots: word(8),
            slot_bytes: word(16),
            data_at: word(24),
            data_dir: PathBuf::from(std::ffi::OsStr::from_bytes(
                superblock.get(SUPERBLOCK_DIR_AT..SUPERBLOCK_DIR_AT.checked_add(dir_len)?)?,
            )),
        };
        let size = file.metadata().ok()?.len() as usize;
        let headers_end = SUPERBLOCK_BYTES.checked_add(layout.slots.checked_mul(HEADER_BYTES)?)?;
        let data_end = layout
            .data_at
            .checked_add(layout.slots.checked_mul(layout.slot_bytes)?)?;
        let fits = &superblock[..8] == MAGIC && headers_end <= layout.data_at && data_end <= size;
        fits.then_some(layout)
    }
}

/// A pending run found by `replay_file`.
struct PendingRun {
    seq: u64,
    dir: PathBuf,
    segment_base_offset: i64,
    position: u64,
    data: std::ops::Range<usize>,
}

fn replay_file(file: &File, layout: &Layout) -> Result<Replayed, StorageError> {
    let map = map_locked(file)?;
    let bytes: &[u8] = &map;
    let word = |at: usize| {
        let raw: [u8; 8] = bytes[at..at + 8].try_into().expect("8 bytes");
        u64::from_le_bytes(raw)
    };
    let mut runs = Vec::new();
    for slot in 0..layout.slots {
        let header = SUPERBLOCK_BYTES + slot * HEADER_BYTES;
        if word(header) != PENDING {
            continue;
        }
        let filled = word(header + 32) as usize;
        let dir_len = word(header + 40) as usize;
        let data_at = layout.data_at + slot * layout.slot_bytes;
        if dir_len > DIR_BYTES_MAX || filled > (layout.slots - slot) * layout.slot_bytes {
            tracing::warn!(slot, "stage header out of bounds; skipped");
            continue;
        }
        let dir_at = header + HEADER_DIR_AT;
        runs.push(PendingRun {
            seq: word(header + 8),
            dir: PathBuf::from(std::ffi::OsStr::from_bytes(
                &bytes[dir_at..dir_at + dir_len],
            )),
            segment_base_offset: word(header + 16) as i64,
            position: word(header + 24),
            data: data_at..data_at + filled,
        });
    }
    runs.sort_by_key(|run| run.seq);
    let mut replayed = Replayed::default();
    let mut touched: Vec<(PathBuf, File)> = Vec::new();
    for run in runs {
        if !run.dir.is_dir() {
            tracing::info!(dir = %run.dir.display(), "staged chunk of a deleted partition dropped");
            continue;
        }
        let path = segment_path(&run.dir, run.segment_base_offset, LOG_SUFFIX);
        let index = match touched.iter().position(|(p, _)| *p == path) {
            Some(index) => index,
            None => {
                let segment = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(io_error("open", &path))?;
                touched.push((path.clone(), segment));
                touched.len() - 1
            }
        };
        touched[index]
            .1
            .write_all_at(&bytes[run.data.clone()], run.position)
            .map_err(io_error("write", &path))?;
        replayed.chunks += 1;
        replayed.bytes += run.data.len() as u64;
        tracing::info!(path = %path.display(), position = run.position, bytes = run.data.len(), "staged chunk replayed");
    }
    for (path, segment) in &touched {
        segment.sync_data().map_err(io_error("fdatasync", path))?;
    }
    for dir in touched.iter().filter_map(|(path, _)| path.parent()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("fsync dir", dir))?;
    }
    Ok(replayed)
}

fn map_locked(file: &File) -> Result<memmap2::Mmap, StorageError> {
    // SAFETY: the file is locked (`flock`) by this process, which alone writes stage files of
    // its data directory; nothing changes it while mapped.
    unsafe { memmap2::Mmap::map(file) }.map_err(|e| StorageError::io("map", Path::new("stage"), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn target(dir: &Path, position: u64) -> (Vec<u8>, u64) {
        (dir.as_os_str().as_bytes().to_vec(), position)
    }

    fn allocate(len: usize, dir: &[u8], segment_base_offset: i64, position: u64) -> StagedRun {
        let target = StageTarget {
            dir,
            segment_base_offset,
            position,
        };
        StagedRun::allocate(len, &target).expect("room in the stage")
    }

    /// A stage of `slots` slots on this thread for `data_dir`, in a new tmpfs directory.
    fn installed(data_dir: &Path, slots: usize) -> (tempfile::TempDir, PathBuf) {
        let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
        let path = install(shm.path(), data_dir, 0, (slots * SLOT_BYTES) as u64)
            .expect("install")
            .expect("/dev/shm is tmpfs");
        (shm, path)
    }

    #[test]
    fn runs_are_first_fit_and_freed_from_any_thread() {
        std::thread::spawn(|| {
            let data = tempfile::tempdir().expect("tmp");
            let (_shm, _path) = installed(data.path(), 70);
            let (dir, _) = target(data.path(), 0);
            let stage = STAGE.with_borrow(|stage| stage.clone()).expect("installed");
            let blocks = || std::fs::metadata(&stage.path).expect("stat").blocks() * 512;
            let before = blocks();
            let a = allocate(SLOT_BYTES, &dir, 0, 0);
            let b = allocate(3 * SLOT_BYTES - 4096, &dir, 0, 0);
            assert_eq!((a.slot, b.slot, b.count), (0, 1, 3));
            assert_eq!(b.as_bytes().len(), 3 * SLOT_BYTES, "whole slots");
            // Memory for the slots is allocated ahead of their use, a step at a time.
            assert_eq!(blocks() - before, (GROWTH_SLOTS * SLOT_BYTES) as u64);
            // The rest of the 70 slots, across the first word of bits: then it is full.
            let rest = allocate(66 * SLOT_BYTES, &dir, 0, 0);
            assert_eq!(rest.slot, 4);
            let target = StageTarget {
                dir: &dir,
                segment_base_offset: 0,
                position: 0,
            };
            assert!(StagedRun::allocate(1, &target).is_none(), "full");
            // A run freed on another thread (a read that held the chunk last) is reused.
            std::thread::spawn(move || drop(b)).join().expect("free");
            let again = allocate(2 * SLOT_BYTES, &dir, 0, 0);
            assert_eq!(again.slot, 1);
            assert!(
                StagedRun::allocate(2 * SLOT_BYTES, &target).is_none(),
                "one slot left"
            );
            assert_eq!(allocate(SLOT_BYTES, &dir, 0, 0).slot, 3);
            assert_eq!(blocks() - before, (70 * SLOT_BYTES) as u64);
            drop((a, rest, again, stage));
            uninstall();
        })
        .join()
        .expect("test thread");
    }

    #[test]
    fn a_run_is_pending_until_written_or_dropped() {
        std::thread::spawn(|| {
            let data = tempfile::tempdir().expect("tmp");
            let (_shm, path) = installed(data.path(), 4);
            let stage = STAGE.with_borrow(|stage| stage.clone()).expect("installed");
            let (dir, _) = target(data.path(), 0);
            let mut run = allocate(SLOT_BYTES, &dir, 5, 8192);
            run.as_bytes_mut()[..3].copy_from_slice(b"abc");
            run.set_filled(3);
            assert_eq!(stage.pending_runs(), 1);
            assert_eq!(
                u64::from_le(stage.header_word(0, 32).load(Ordering::Acquire)),
                3
            );
            run.written();
            assert_eq!(stage.pending_runs(), 0);
            let other = allocate(SLOT_BYTES, &dir, 5, 0);
            assert_eq!(stage.pending_runs(), 1);
            drop(other);
            assert_eq!(stage.pending_runs(), 0, "a dropped chunk is never replayed");
            drop((run, stage));
            uninstall();
            assert!(!path.exists(), "nothing pending: the file goes");
        })
        .join()
        .expect("test thread");
    }

    #[test]
    fn replay_writes_pending_runs_in_order_and_drops_the_rest() {
        let data = tempfile::tempdir().expect("tmp");
        let data_dir = std::path::absolute(data.path()).expect("absolute");
        let partition = data_dir.join("topic-0");
        std::fs::create_dir(&partition).expect("partition dir");
        let segment = segment_path(&partition, 100, LOG_SUFFIX);
        std::fs::write(&segment, vec![b'.'; 8192]).expect("segment");
        let crashed = tempfile::tempdir_in("/dev/shm").expect("shm");
        let gone_stage = {
            let (data_dir, crashed) = (data_dir.clone(), crashed.path().to_path_buf());
            std::thread::spawn(move || {
                let (_shm, path) = installed(&data_dir, 8);
                let partition = data_dir.join("topic-0");
                let dir = partition.as_os_str().as_bytes();
                // Two runs of one segment, the later one rewriting the first one's last
                // block, as a chunk after a partial block does; one written; one of a
                // partition deleted since.
                let mut first = allocate(SLOT_BYTES, dir, 100, 0);
                first.as_bytes_mut()[..6000].fill(b'a');
                first.set_filled(6000);
                let mut second = allocate(SLOT_BYTES, dir, 100, 4096);
                second.as_bytes_mut()[..1904].fill(b'a');
                second.as_bytes_mut()[1904..3000].fill(b'b');
                second.set_filled(3000);
                let mut written = allocate(SLOT_BYTES, dir, 100, 65536);
                written.as_bytes_mut()[..10].fill(b'w');
                written.set_filled(10);
                written.written();
                let deleted = data_dir.join("gone-0");
                let orphan = allocate(SLOT_BYTES, deleted.as_os_str().as_bytes(), 0, 0);
                orphan.set_filled(100);
                // What a `kill -9` leaves now: the stage file as it is.
                let name = path.file_name().expect("name");
                std::fs::copy(&path, crashed.join(name)).expect("copy");
                drop((first, second, written, orphan));
                uninstall();
                // A stage of a data directory that is gone since.
                let gone = tempfile::tempdir().expect("tmp");
                let gone_stage = install(&crashed, gone.path(), 9, SLOT_BYTES as u64)
                    .expect("install")
                    .expect("tmpfs");
                STAGE.with_borrow_mut(Option::take);
                gone_stage
            })
            .join()
            .expect("test thread")
        };
        let replayed = replay(crashed.path(), &data_dir).expect("replay");
        assert_eq!(
            replayed,
            Replayed {
                chunks: 2,
                bytes: 9000
            }
        );
        let bytes = std::fs::read(&segment).expect("segment");
        assert_eq!(bytes.len(), 8192);
        assert!(bytes[..6000].iter().all(|&b| b == b'a'));
        assert!(bytes[6000..7096].iter().all(|&b| b == b'b'));
        assert!(bytes[7096..].iter().all(|&b| b == b'.'));
        assert!(!data_dir.join("gone-0").exists(), "no directory is created");
        assert!(
            !gone_stage.exists(),
            "the stage of a directory that is gone goes"
        );
        assert_eq!(std::fs::read_dir(crashed.path()).expect("list").count(), 0);
    }

    #[test]
    fn install_waits_out_a_lock_held_for_a_moment_and_not_one_held_for_good() {
        let shm = tempfile::tempdir_in("/dev/shm").expect("shm");
        let data = tempfile::tempdir().expect("tmp");
        let path = stage_path(shm.path(), data.path(), 0);
        // Another open file description of the same file: its flock conflicts with
        // install's as another process's would.
        let held = |for_good: bool| {
            let file = open_or_create(&path).expect("open");
            assert!(lock(&file));
            if !for_good {
                // What a replay beside this node does: look, then let go.
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    drop(file);
                });
                None
            } else {
                Some(file)
            }
        };
        let install_here = || {
            let (shm, data) = (shm.path().to_path_buf(), data.path().to_path_buf());
            std::thread::spawn(move || {
                let installed = install(&shm, &data, 0, SLOT_BYTES as u64).expect("install");
                STAGE.with_borrow_mut(Option::take);
                installed
            })
            .join()
            .expect("install thread")
        };
        let _brief = held(false);
        assert_eq!(
            install_here(),
            Some(path.clone()),
            "a moment's lock is waited out"
        );
        std::fs::remove_file(&path).expect("remove");
        let started = std::time::Instant::now();
        let _for_good = held(true);
        assert_eq!(install_here(), None, "a lock held for good: no stage");
        assert!(started.elapsed() >= INSTALL_LOCK_PATIENCE);
    }

    #[test]
    fn nodes_starting_side_by_side_remove_a_dead_nodes_stages_without_tripping() {
        // Stage files of data directories that are gone, as killed nodes leave them.
        let shm = tempfile::tempdir_in("/dev/shm").expect("shm");
        let stale: Vec<PathBuf> = std::thread::spawn({
            let shm = shm.path().to_path_buf();
            move || {
                (0..256)
                    .map(|shard| {
                        let gone = tempfile::tempdir().expect("tmp");
                        let path = install(&shm, gone.path(), shard, SLOT_BYTES as u64)
                            .expect("install")
                            .expect("tmpfs");
                        STAGE.with_borrow_mut(Option::take);
                        path
                    })
                    .collect()
            }
        })
        .join()
        .expect("installs");
        // Four nodes replay the same directory at once, each for its own data directory.
        let start = Arc::new(std::sync::Barrier::new(4));
        let replays: Vec<_> = (0..4)
            .map(|_| {
                let (shm, start) = (shm.path().to_path_buf(), start.clone());
                std::thread::spawn(move || {
                    let data = tempfile::tempdir().expect("tmp");
                    start.wait();
                    replay(&shm, data.path())
                })
            })
            .collect();
        for replayed in replays {
            let replayed = replayed.join().expect("replay thread");
            assert_eq!(replayed.expect("replay"), Replayed::default());
        }
        assert!(
            stale.iter().all(|path| !path.exists()),
            "every stale stage goes"
        );
    }
}
