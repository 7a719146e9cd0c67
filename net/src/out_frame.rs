//! A response frame built for one vectored write. The encoder writes small fields into a
//! buffer; a large shared byte string (a Fetch response's records, straight from the log)
//! is kept by reference instead of copied, and the socket gets every piece in one
//! `sendmsg`. Fetch answers thereby copy their records once in user space (out of the log)
//! rather than twice.
//!
//! Invariants: the frame's bytes are the length prefix, then `pieces` in order, then
//! `tail`; the prefix always equals the bytes after it (set by [`OutFrame::seal`]);
//! `closed_bytes` is the sum of the pieces' lengths, and nothing is ever written before
//! it again (gaps, which the codec only uses inside record batches, never span a piece).

use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

use crate::frame::LENGTH_PREFIX_BYTES;

/// Shared byte strings shorter than this are copied: a separate iovec costs more than
/// copying a few kilobytes.
const SHARE_MIN_BYTES: usize = 4096;

/// One response frame: length prefix, encoded fields and shared byte strings.
#[derive(Default)]
pub struct OutFrame {
    prefix: [u8; LENGTH_PREFIX_BYTES],
    /// Closed pieces, in order: encoded bytes and shared byte strings.
    pieces: Vec<Bytes>,
    /// Bytes in `pieces`.
    closed_bytes: usize,
    /// Bytes encoded since the last shared piece.
    tail: BytesMut,
}

impl OutFrame {
    pub fn with_capacity(bytes: usize) -> OutFrame {
        OutFrame {
            tail: BytesMut::with_capacity(bytes),
            ..OutFrame::default()
        }
    }

    /// Empties the frame, keeping the tail buffer's room for the next one.
    pub fn clear(&mut self) {
        self.prefix = [0; LENGTH_PREFIX_BYTES];
        self.pieces.clear();
        self.closed_bytes = 0;
        self.tail.clear();
    }

    /// Memory the encode buffer holds, kept across frames by `clear`.
    pub fn capacity_bytes(&self) -> usize {
        self.tail.capacity()
    }

    /// Bytes after the length prefix.
    pub fn body_len(&self) -> usize {
        self.closed_bytes + self.tail.len()
    }

    /// Sets the length prefix from the bytes encoded so far.
    pub fn seal(&mut self) {
        let length = i32::try_from(self.body_len()).expect("responses are bounded far below 2 GiB");
        self.prefix = length.to_be_bytes();
    }

    /// The whole frame as slices for a vectored write.
    pub fn io_slices(&self) -> Vec<IoSlice<'_>> {
        let mut slices = Vec::with_capacity(self.pieces.len() + 2);
        slices.push(IoSlice::new(&self.prefix));
        slices.extend(self.pieces.iter().map(|piece| IoSlice::new(piece)));
        if !self.tail.is_empty() {
            slices.push(IoSlice::new(&self.tail));
        }
        slices
    }

    /// The whole frame in one buffer (tests and small answers).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(LENGTH_PREFIX_BYTES + self.body_len());
        for slice in self.io_slices() {
            out.extend_from_slice(&slice);
        }
        out.freeze()
    }

    /// Pieces after the prefix.
    #[cfg(test)]
    fn piece_count(&self) -> usize {
        self.pieces.len() + usize::from(!self.tail.is_empty())
    }
}

// SAFETY: every method forwards to the tail `BytesMut`, whose implementation upholds the
// trait's contract; `closed_bytes` only offsets the positions `ByteBufMut` reports.
unsafe impl BufMut for OutFrame {
    fn remaining_mut(&self) -> usize {
        self.tail.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, count: usize) {
        // SAFETY: the caller initialised `count` bytes of `chunk_mut`, the tail's chunk.
        unsafe { self.tail.advance_mut(count) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.tail.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        self.tail.extend_from_slice(src);
    }
}

impl ByteBufMut for OutFrame {
    fn offset(&self) -> usize {
        self.body_len()
    }

    fn seek(&mut self, offset: usize) {
        let in_tail = offset
            .checked_sub(self.closed_bytes)
            .expect("a frame never seeks back into a shared piece");
        self.tail.resize(in_tail, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let start = r
            .start
            .checked_sub(self.closed_bytes)
            .expect("a frame never rewrites a shared piece");
        &mut self.tail[start..r.end - self.closed_bytes]
    }

    fn put_shared(&mut self, bytes: &Bytes) {
        if bytes.len() < SHARE_MIN_BYTES {
            self.tail.extend_from_slice(bytes);
            return;
        }
        if !self.tail.is_empty() {
            let encoded = self.tail.split().freeze();
            self.closed_bytes += encoded.len();
            self.pieces.push(encoded);
        }
        self.closed_bytes += bytes.len();
        self.pieces.push(bytes.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::protocol::Encodable;

    fn shared(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    fn fetch_response(records: &[Bytes]) -> FetchResponse {
        let partitions = records
            .iter()
            .enumerate()
            .map(|(index, records)| {
                PartitionData::default()
                    .with_partition_index(index as i32)
                    .with_records(Some(records.clone()))
            })
            .collect();
        FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default().with_partitions(partitions)
        ])
    }

    #[test]
    fn a_frame_holds_the_same_bytes_as_a_plain_buffer_without_copying_records() {
        let large = [
            shared(SHARE_MIN_BYTES, 7),
            shared(10, 1),
            shared(100_000, 9),
        ];
        let response = fetch_response(&large);
        // v4..v11 length-prefix records with an i32, v12 on with a varint.
        for version in [4, 11, 12, 16] {
            let mut plain = BytesMut::new();
            response.encode(&mut plain, version).expect("encodes");
            let mut frame = OutFrame::with_capacity(256);
            response.encode(&mut frame, version).expect("encodes");
            frame.seal();
            let bytes = frame.to_bytes();
            assert_eq!(
                &bytes[..4],
                &(plain.len() as i32).to_be_bytes(),
                "v{version}"
            );
            assert!(bytes[4..] == plain[..], "v{version}");
            for records in [&large[0], &large[2]] {
                assert!(
                    frame.pieces.iter().any(|p| p.as_ptr() == records.as_ptr()),
                    "v{version}: large records are referenced, not copied"
                );
            }
            assert!(
                frame.pieces.iter().all(|p| p.as_ptr() != large[1].as_ptr()),
                "v{version}: small records are copied"
            );
            // Fields, records, fields (with the small records), records, and from v12 on
            // the tagged fields that close the partition and the response.
            let pieces = if version >= 12 { 5 } else { 4 };
            assert_eq!(frame.piece_count(), pieces, "v{version}");
        }
    }

    #[test]
    fn gaps_after_a_shared_piece_are_filled_in_the_tail() {
        let mut frame = OutFrame::default();
        frame.put_shared(&shared(SHARE_MIN_BYTES, 1));
        let gap = frame.put_gap(4);
        frame.put_u8(9);
        frame.gap_buf(gap).copy_from_slice(&5i32.to_be_bytes());
        frame.seal();
        let bytes = frame.to_bytes();
        assert_eq!(&bytes[4 + SHARE_MIN_BYTES..], &[0, 0, 0, 5, 9]);
        frame.clear();
        assert_eq!(frame.body_len(), 0);
        frame.seal();
        assert_eq!(&frame.to_bytes()[..], &[0, 0, 0, 0]);
    }
}
