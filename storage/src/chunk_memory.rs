//! The memory of direct-mode write chunks: filled by one log on its shard (`ChunkMemory`,
//! unique and mutable), then frozen (`SharedChunk`) and shared, without a copy, by the write
//! in flight, the shard's cache, and the reads the cache answers, which travel to other
//! shards and to sockets as `Bytes`. The memory is a run of the shard's stage
//! (`crate::stage`, memory that outlives the process) when one is installed and has room,
//! else heap memory; the last owner of a frozen heap chunk keeps its memory as a spare for the
//! next chunk of the same size allocated on its thread, and the last owner of a staged one
//! gives its slots back.
//!
//! Invariants: a `SharedChunk` never changes once frozen; its memory is block aligned and
//! comes from the global allocator (`glommio::allocate_dma_buffer_global`) or the stage's
//! mapping, never from a ring's registered arena, so any thread may read it, keep it as a
//! spare and free it; a staged chunk's filled length is recorded (`ChunkMemory::set_filled`)
//! before its bytes count as appended, and cleared as pending once written
//! (`SharedChunk::written`); a thread keeps at most `SPARE_BYTES_MAX` of spares, the most
//! recently freed ones (the sizes in use now), so a burst of one size never keeps the spares
//! from others.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use glommio::io::DmaBuffer;

use crate::stage::{StageTarget, StagedRun};

/// Spare chunk memory a thread keeps. The cache evicts about one chunk as each new one
/// comes, mostly of the sizes just allocated: without spares, allocating chunks took 3 % of
/// a node's time in the replicated benchmark, beside the page faults of memory trimmed and
/// touched again.
const SPARE_BYTES_MAX: usize = 4 << 20;

thread_local! {
    static SPARES: RefCell<Spares> = const {
        RefCell::new(Spares {
            buffers: VecDeque::new(),
            bytes: 0,
        })
    };
}

/// Memory of chunks that were freed on this thread, for reuse at the same size: the oldest
/// first, the newest last.
struct Spares {
    buffers: VecDeque<DmaBuffer>,
    bytes: usize,
}

impl Spares {
    /// The newest spare of `capacity` bytes.
    fn take(&mut self, capacity: usize) -> Option<DmaBuffer> {
        let index = self.buffers.iter().rposition(|b| b.len() == capacity)?;
        self.bytes -= capacity;
        self.buffers.remove(index)
    }

    /// Keeps `buf`, freeing the oldest spares it leaves no room for.
    fn keep(&mut self, buf: DmaBuffer) {
        if buf.len() > SPARE_BYTES_MAX {
            return;
        }
        while self.bytes + buf.len() > SPARE_BYTES_MAX {
            let oldest = self
                .buffers
                .pop_front()
                .expect("spares hold the bytes counted");
            self.bytes -= oldest.len();
        }
        self.bytes += buf.len();
        self.buffers.push_back(buf);
    }
}

/// Where a chunk's bytes live.
enum Memory {
    Heap(DmaBuffer),
    Staged(StagedRun),
}

impl Memory {
    fn len(&self) -> usize {
        match self {
            Memory::Heap(buf) => buf.len(),
            Memory::Staged(run) => run.len(),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Memory::Heap(buf) => buf.as_bytes(),
            Memory::Staged(run) => run.as_bytes(),
        }
    }
}

/// A chunk's memory while its log fills it.
pub(crate) struct ChunkMemory(Memory);

impl ChunkMemory {
    /// `capacity` bytes of heap memory, block aligned, not zeroed: a spare of that size if
    /// this thread has one.
    pub(crate) fn allocate(capacity: usize) -> ChunkMemory {
        let spare = SPARES.with(|spares| spares.borrow_mut().take(capacity));
        let buf = spare.unwrap_or_else(|| glommio::allocate_dma_buffer_global(capacity));
        ChunkMemory(Memory::Heap(buf))
    }

    /// At least `capacity` bytes (whole slots) of this thread's stage, pending for `target`,
    /// when it has a stage with room.
    pub(crate) fn allocate_staged(capacity: usize, target: &StageTarget) -> Option<ChunkMemory> {
        StagedRun::allocate(capacity, target).map(|run| ChunkMemory(Memory::Staged(run)))
    }

    /// The memory outlives the process (see `crate::stage`).
    pub(crate) fn is_staged(&self) -> bool {
        matches!(self.0, Memory::Staged(_))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Memory::Heap(buf) => buf.as_bytes_mut(),
            Memory::Staged(run) => run.as_bytes_mut(),
        }
    }

    /// The first `len` bytes hold the chunk (what a replay after a crash writes back);
    /// nothing to record for heap memory.
    pub(crate) fn set_filled(&self, len: usize) {
        if let Memory::Staged(run) = &self.0 {
            run.set_filled(len);
        }
    }

    /// The first `len` bytes, frozen for sharing.
    pub(crate) fn freeze(self, len: usize) -> Arc<SharedChunk> {
        assert!(len <= self.len());
        Arc::new(SharedChunk {
            buf: Some(self.0),
            len,
        })
    }
}

/// A chunk's memory once frozen: immutable, readable from any thread. Its first `len` bytes
/// are the chunk's; the memory past them (kept whole for reuse) is not part of it.
pub(crate) struct SharedChunk {
    /// Always `Some` until dropped.
    buf: Option<Memory>,
    len: usize,
}

// SAFETY: the memory is only built by `ChunkMemory` (memory of the global allocator, which
// any thread may read and free, or a stage run, which any thread may read and free; never a
// ring's registered buffer, which belongs to its executor) and is never written again once
// frozen.
unsafe impl Send for SharedChunk {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for SharedChunk {}

impl SharedChunk {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn memory(&self) -> &Memory {
        self.buf
            .as_ref()
            .expect("a chunk holds its memory until dropped")
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.memory().as_bytes()[..self.len]
    }

    /// Its memory is a run of the stage.
    pub(crate) fn is_staged(&self) -> bool {
        matches!(self.memory(), Memory::Staged(_))
    }

    /// The chunk's write completed: a staged chunk is no longer replayed after a crash.
    pub(crate) fn written(&self) {
        if let Memory::Staged(run) = self.memory() {
            run.written();
        }
    }

    /// The bytes of `range` as `Bytes` that keep the chunk alive: no copy.
    pub(crate) fn slice(self: &Arc<Self>, range: Range<usize>) -> Bytes {
        Bytes::from_owner(Owner(self.clone())).slice(range)
    }
}

impl Drop for SharedChunk {
    fn drop(&mut self) {
        // A staged run gives its slots back as it drops.
        if let Some(Memory::Heap(buf)) = self.buf.take() {
            // A thread being torn down frees it instead.
            let _ = SPARES.try_with(|spares| spares.borrow_mut().keep(buf));
        }
    }
}

impl AsRef<[u8]> for SharedChunk {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// What a `Bytes` made by `SharedChunk::slice` holds.
struct Owner(Arc<SharedChunk>);

impl AsRef<[u8]> for Owner {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_the_frozen_bytes_across_threads() {
        let mut memory = ChunkMemory::allocate(8192);
        memory.as_bytes_mut().fill(7);
        memory.as_bytes_mut()[4096] = 9;
        let chunk = memory.freeze(4608);
        assert_eq!(chunk.as_bytes().len(), 4608);
        let slice = chunk.slice(4090..4100);
        assert_eq!(&slice[..], &[7, 7, 7, 7, 7, 7, 9, 7, 7, 7]);
        // The slice points into the chunk, and outlives every other owner on another thread.
        assert_eq!(slice.as_ptr(), chunk.as_bytes()[4090..].as_ptr());
        drop(chunk);
        let moved = std::thread::spawn(move || slice.to_vec())
            .join()
            .expect("thread");
        assert_eq!(moved[6], 9);
    }

    #[test]
    fn freed_chunks_are_reused_at_their_size_up_to_the_bound() {
        let chunk = ChunkMemory::allocate(16384).freeze(4096);
        let address = chunk.as_bytes().as_ptr();
        drop(chunk);
        let other = ChunkMemory::allocate(8192);
        assert_ne!(other.as_bytes().as_ptr(), address, "another size");
        let again = ChunkMemory::allocate(16384);
        assert_eq!(again.as_bytes().as_ptr(), address, "the spare");
        assert_eq!(again.len(), 16384, "whole again");
        // More than the bound of spares: the oldest are freed.
        let many: Vec<_> = (0..2 * SPARE_BYTES_MAX / 65536)
            .map(|_| ChunkMemory::allocate(65536).freeze(65536))
            .collect();
        let newest = many.last().expect("many").as_bytes().as_ptr();
        drop(many);
        let kept = SPARES.with(|spares| spares.borrow().bytes);
        assert_eq!(kept, SPARE_BYTES_MAX);
        // A size freed after a burst of another still finds its spare, and the newest spare
        // of a size goes first.
        let small = ChunkMemory::allocate(8192).freeze(8192);
        let small_address = small.as_bytes().as_ptr();
        drop(small);
        assert!(SPARES.with(|spares| spares.borrow().bytes) <= SPARE_BYTES_MAX);
        assert_eq!(
            ChunkMemory::allocate(8192).as_bytes().as_ptr(),
            small_address
        );
        assert_eq!(ChunkMemory::allocate(65536).as_bytes().as_ptr(), newest);
    }
}
