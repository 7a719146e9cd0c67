//! A connection's receive buffer: frames are split off its front without copying, and its
//! free space is zeroed once, when first made, rather than before every read.
//!
//! ```text
//!   bytes: [ received, not yet taken | zeroed, free for the next read ]
//!          0                       filled                         len
//! ```
//! Invariant: `filled <= bytes.len()`; bytes past `filled` hold nothing a reader may see.

use bytes::{Buf, Bytes, BytesMut};

#[derive(Default)]
pub struct ReadBuffer {
    bytes: BytesMut,
    filled: usize,
}

impl ReadBuffer {
    pub fn with_capacity(capacity_bytes: usize) -> ReadBuffer {
        ReadBuffer {
            bytes: BytesMut::with_capacity(capacity_bytes),
            filled: 0,
        }
    }

    /// The bytes received and not yet taken.
    pub fn data(&self) -> &[u8] {
        &self.bytes[..self.filled]
    }

    pub fn is_empty(&self) -> bool {
        self.filled == 0
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_off_the_front_and_spare_space_is_reused() {
        let mut buffer = ReadBuffer::with_capacity(16);
        assert!(buffer.is_empty());
        let spare = buffer.spare(8);
        assert!(spare.len() >= 8);
        spare[..5].copy_from_slice(b"hello");
        buffer.commit(5);
        assert_eq!(buffer.data(), b"hello");
        // Space already made is offered again without growing.
        let spare_bytes = buffer.spare(2).len();
        assert_eq!(spare_bytes, 3);
        buffer.spare(2)[..3].copy_from_slice(b" wo");
        buffer.commit(3);
        buffer.skip(1);
        assert_eq!(buffer.take(4), Bytes::from_static(b"ello"));
        assert_eq!(buffer.data(), b" wo");
    }

    #[test]
    #[should_panic(expected = "cannot fill more")]
    fn committing_past_the_spare_space_is_a_bug() {
        let mut buffer = ReadBuffer::default();
        let spare_bytes = buffer.spare(4).len();
        buffer.commit(spare_bytes + 1);
    }
}
