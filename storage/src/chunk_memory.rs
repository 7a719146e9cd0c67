//! The memory of direct-mode write chunks: filled by one log on its shard (`ChunkMemory`,
//! unique and mutable), then frozen (`SharedChunk`) and shared, without a copy, by the write
//! in flight, the shard's cache, and the reads the cache answers, which travel to other
//! shards and to sockets as `Bytes`.
//!
//! Invariants: a `SharedChunk` never changes once frozen; its memory is block aligned and
//! comes from the global allocator (`glommio::allocate_dma_buffer_global`), never from a
//! ring's registered arena, so any thread may read it and the last owner, on whatever thread,
//! frees it.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use glommio::io::DmaBuffer;

/// A chunk's memory while its log fills it.
pub(crate) struct ChunkMemory(DmaBuffer);

impl ChunkMemory {
    /// `capacity` bytes, block aligned, not zeroed.
    pub(crate) fn allocate(capacity: usize) -> ChunkMemory {
        ChunkMemory(glommio::allocate_dma_buffer_global(capacity))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }

    /// The first `len` bytes, frozen for sharing.
    pub(crate) fn freeze(mut self, len: usize) -> Arc<SharedChunk> {
        self.0.trim_to_size(len);
        Arc::new(SharedChunk(self.0))
    }
}

/// A chunk's memory once frozen: immutable, readable from any thread.
pub(crate) struct SharedChunk(DmaBuffer);

// SAFETY: the buffer is only built by `ChunkMemory::allocate` (memory of the global
// allocator, which any thread may read and free; not a ring's registered buffer, which
// belongs to its executor) and is never written again once frozen.
unsafe impl Send for SharedChunk {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for SharedChunk {}

impl SharedChunk {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The bytes of `range` as `Bytes` that keep the chunk alive: no copy.
    pub(crate) fn slice(self: &Arc<Self>, range: Range<usize>) -> Bytes {
        Bytes::from_owner(Owner(self.clone())).slice(range)
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
}
