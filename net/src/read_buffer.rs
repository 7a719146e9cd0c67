//! A connection's receive buffer: frames are split off its front without copying; it grows
//! only as bytes arrive and is let go once empty, so an idle connection holds next to
//! nothing.
//!
//! ```text
//!   bytes: [ received, not yet taken | zeroed, free for the next read ]  (capacity beyond)
//!          0                       filled                         len
//! ```
//! Invariants: `filled <= bytes.len()`; bytes past `filled` hold nothing a reader may see;
//! `held_bytes()` (= `bytes.len()`) is the memory the buffer has touched for frames not yet
//! taken, which the connection covers with its request-budget reservation. Capacity past
//! `len` is reserved address space only: it is never written until a read needs it.

use bytes::{Buf, Bytes, BytesMut};

#[derive(Default)]
pub struct ReadBuffer {
    bytes: BytesMut,
    filled: usize,
}

impl ReadBuffer {
    pub fn new() -> ReadBuffer {
        ReadBuffer::default()
    }

    /// The bytes received and not yet taken.
    pub fn data(&self) -> &[u8] {
        &self.bytes[..self.filled]
    }

    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Memory the buffer holds for frames not yet taken: received bytes and the zeroed room
    /// after them.
    pub fn held_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// What `held_bytes` would be after `spare(want_bytes)`.
    pub fn held_bytes_with(&self, want_bytes: usize) -> usize {
        self.bytes.len().max(self.filled + want_bytes)
    }

    /// Makes room for `total_bytes` from the front without touching it, so that a frame
    /// read in many pieces is never moved.
    pub fn reserve_capacity(&mut self, total_bytes: usize) {
        self.bytes
            .reserve(total_bytes.saturating_sub(self.bytes.len()));
    }

    /// Free space of at least `want_bytes`, for the next read to fill.
    pub fn spare(&mut self, want_bytes: usize) -> &mut [u8] {
        if self.bytes.len() - self.filled < want_bytes {
            self.bytes.resize(self.filled + want_bytes, 0);
        }
        &mut self.bytes[self.filled..]
    }

    /// Marks `count` bytes of the spare space as received.
    pub fn commit(&mut self, count: usize) {
        assert!(
            self.filled + count <= self.bytes.len(),
            "a read cannot fill more than it got"
        );
        self.filled += count;
    }

    /// Drops `count` received bytes from the front.
    pub fn skip(&mut self, count: usize) {
        assert!(count <= self.filled);
        self.bytes.advance(count);
        self.filled -= count;
    }

    /// Takes `count` received bytes from the front, without copying them.
    pub fn take(&mut self, count: usize) -> Bytes {
        assert!(count <= self.filled);
        self.filled -= count;
        self.bytes.split_to(count).freeze()
    }

    /// Lets the memory go when nothing received is left in it.
    pub fn release_if_empty(&mut self) {
        if self.filled == 0 {
            self.bytes = BytesMut::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_off_the_front_and_spare_space_is_reused() {
        let mut buffer = ReadBuffer::new();
        assert!(buffer.is_empty());
        assert_eq!(buffer.held_bytes_with(8), 8);
        let spare = buffer.spare(8);
        assert!(spare.len() >= 8);
        spare[..5].copy_from_slice(b"hello");
        buffer.commit(5);
        assert_eq!(buffer.data(), b"hello");
        // Space already made is offered again without growing.
        assert_eq!(buffer.held_bytes_with(2), 8);
        let spare_bytes = buffer.spare(2).len();
        assert_eq!(spare_bytes, 3);
        buffer.spare(2)[..3].copy_from_slice(b" wo");
        buffer.commit(3);
        buffer.skip(1);
        assert_eq!(buffer.take(4), Bytes::from_static(b"ello"));
        assert_eq!(buffer.data(), b" wo");
        assert_eq!(buffer.held_bytes(), 3);
        buffer.release_if_empty();
        assert_eq!(buffer.held_bytes(), 3, "bytes still to be taken stay");
        buffer.skip(3);
        buffer.release_if_empty();
        assert_eq!(buffer.held_bytes(), 0);
    }

    #[test]
    fn reserved_capacity_is_not_held_until_read_into() {
        let mut buffer = ReadBuffer::new();
        buffer.reserve_capacity(1 << 20);
        assert_eq!(buffer.held_bytes(), 0);
        let pointer = buffer.spare(10).as_ptr();
        buffer.commit(10);
        buffer.spare(100_000);
        assert_eq!(
            buffer.data().as_ptr(),
            pointer,
            "growing within capacity moves nothing"
        );
    }

    #[test]
    #[should_panic(expected = "cannot fill more")]
    fn committing_past_the_spare_space_is_a_bug() {
        let mut buffer = ReadBuffer::default();
        let spare_bytes = buffer.spare(4).len();
        buffer.commit(spare_bytes + 1);
    }
}
