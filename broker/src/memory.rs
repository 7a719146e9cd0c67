//! The allocator's side of the memory bounds: keep freed buffers for reuse while the node is
//! busy, and give them back to the system once they have been idle.
//!
//! Request frames and write chunks are 64 KiB to a few MiB, allocated and freed at line rate.
//! glibc serves such sizes with fresh mmaps by default, so every request paid page faults,
//! kernel page zeroing and munmap (a quarter of a shard's time at 5 M msgs/s); raised
//! thresholds keep them in the per-thread heaps instead, where warm pages are reused. The
//! cost is that the heaps keep what a burst (a flood of connections, a wave of large
//! requests) left free: a background thread returns it with `malloc_trim` once the heaps hold
//! more than `TRIM_FREE_BYTES_MIN` free, checked every `TRIM_INTERVAL`, so memory freed after
//! a flood goes back within about that interval. While the node is busy the free memory is
//! reused at once and a trim costs a few page faults per trimmed page, not per request.

use std::time::Duration;

/// How often the heaps' free memory is looked at.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(2);
/// Free heap memory kept without trimming.
const TRIM_FREE_BYTES_MIN: usize = 32 << 20;
/// Allocations at least this large get their own mmap (glibc's default is 128 KiB).
const MMAP_THRESHOLD_BYTES: libc::c_int = 64 << 20;
/// Free memory at the top of a heap that glibc keeps on its own before it trims.
const TRIM_THRESHOLD_BYTES: libc::c_int = 256 << 20;

/// Sets the allocator's thresholds; called before any shard thread starts allocating.
pub fn keep_freed_memory_for_reuse() {
    // SAFETY: mallopt only adjusts glibc's allocator tunables.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    }
}

/// Starts the thread that gives idle free memory back to the system.
pub fn trim_periodically() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("memory".into())
        .spawn(|| loop {
            std::thread::sleep(TRIM_INTERVAL);
            if free_heap_bytes() > TRIM_FREE_BYTES_MIN {
                // SAFETY: malloc_trim takes the allocator's own locks; any thread may call it.
                unsafe { libc::malloc_trim(0) };
            }
        })
        .map(drop)
}

/// Bytes the heaps of every thread hold free (in chunks not in use).
pub fn free_heap_bytes() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    info.fordblks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_memory_is_kept_free_for_reuse_until_a_trim() {
        keep_freed_memory_for_reuse();
        let blocks: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 1 << 20]).collect();
        drop(blocks);
        // The heap keeps the freed megabytes (below the raised thresholds), which the
        // memory thread would now trim.
        assert!(
            free_heap_bytes() > TRIM_FREE_BYTES_MIN,
            "{}",
            free_heap_bytes()
        );
    }
}
