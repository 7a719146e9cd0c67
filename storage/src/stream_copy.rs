//! Copies into write chunks with non-temporal stores: a batch copied into a chunk is next
//! read by the disk's DMA, not by this core, so bringing the chunk's cache lines in before
//! overwriting them (a read from memory per line) and evicting what the shard is working on
//! is wasted. Streaming stores write whole lines straight to memory.
//!
//! Invariants: the result is byte for byte what `copy_from_slice` gives, for any lengths
//! and alignments; streaming stores only ever write whole 64-byte lines of `dst` (aligned
//! to 64 bytes), the ragged head and tail go through ordinary stores; every copy ends with
//! a store fence, so the bytes are in memory, in order, before anything that follows (an
//! io_uring submission) can hand them to a device.

/// Below this many bytes the lines are few and likely still cached: ordinary stores.
const STREAM_FROM_BYTES: usize = 4 << 10;

const LINE_BYTES: usize = 64;

/// `dst.copy_from_slice(src)`, with streaming stores for all but the ragged ends.
pub(crate) fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if src.len() >= STREAM_FROM_BYTES {
        let head = dst.as_ptr().align_offset(LINE_BYTES).min(dst.len());
        let lines = (dst.len() - head) / LINE_BYTES;
        let body_end = head + lines * LINE_BYTES;
        dst[..head].copy_from_slice(&src[..head]);
        // SAFETY: `dst[head..body_end]` is in bounds and starts on a 64-byte boundary, so
        // every store below is to a 16-byte aligned address inside `dst`, and every load
        // is from inside `src[head..body_end]` (unaligned loads); SSE2 is part of x86_64.
        unsafe {
            stream_lines(
                dst[head..body_end].as_mut_ptr(),
                src[head..].as_ptr(),
                lines,
            )
        };
        dst[body_end..].copy_from_slice(&src[body_end..]);
        return;
    }
    dst.copy_from_slice(src);
}

/// Copies `lines` 64-byte lines from `src` to the 64-byte aligned `dst`, then fences.
///
/// # Safety
/// `dst` must be 64-byte aligned and valid for `lines * 64` bytes of writes, `src` valid for
/// as many bytes of reads, and the two must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_lines(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let (mut dst, mut src) = (dst.cast::<__m128i>(), src.cast::<__m128i>());
    for _ in 0..lines {
        // SAFETY: the caller's bounds cover these four 16-byte lanes of one line.
        unsafe {
            let lanes = [
                _mm_loadu_si128(src),
                _mm_loadu_si128(src.add(1)),
                _mm_loadu_si128(src.add(2)),
                _mm_loadu_si128(src.add(3)),
            ];
            for (lane, value) in lanes.into_iter().enumerate() {
                _mm_stream_si128(dst.add(lane), value);
            }
            dst = dst.add(4);
            src = src.add(4);
        }
    }
    // Streaming stores are weakly ordered: make them visible before the writes that follow.
    // SAFETY: a fence has no operands.
    unsafe { _mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(len: usize, dst_skew: usize, src_skew: usize) {
        let src: Vec<u8> = (0..len + src_skew).map(|i| (i * 131 + 7) as u8).collect();
        let mut streamed = vec![0xAA_u8; len + dst_skew + 64];
        let mut plain = streamed.clone();
        copy_streaming(
            &mut streamed[dst_skew..dst_skew + len],
            &src[src_skew..src_skew + len],
        );
        plain[dst_skew..dst_skew + len].copy_from_slice(&src[src_skew..src_skew + len]);
        assert_eq!(
            streamed, plain,
            "len {len}, dst skew {dst_skew}, src skew {src_skew}"
        );
    }

    #[test]
    fn copies_what_copy_from_slice_copies_and_nothing_around_it() {
        for len in [
            0,
            1,
            63,
            64,
            STREAM_FROM_BYTES - 1,
            STREAM_FROM_BYTES,
            64 << 10,
        ] {
            for dst_skew in [0, 1, 15, 16, 63] {
                check(len, dst_skew, 3);
            }
        }
    }

    proptest! {
        #[test]
        fn any_length_and_alignment(len in 0usize..20_000, dst_skew in 0usize..64, src_skew in 0usize..64) {
            check(len, dst_skew, src_skew);
        }
    }
}
