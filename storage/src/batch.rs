//! Kafka v2 record batch header view: parse and validate, never re-encode.
//!
//! Invariants: every size field is checked against the buffer before it is used; a batch that
//! `validate_batches` accepts has magic 2, a batch length within `[BATCH_HEADER_BYTES - 12,
//! BATCH_BYTES_MAX - 12]` that fits the buffer, a matching CRC-32C over attributes..end, and
//! non-negative `last_offset_delta` and `record_count`. Records are never decoded here.
//!
//! Layout (big endian):
//! ```text
//!  0 base_offset i64 | 8 batch_length i32 | 12 partition_leader_epoch i32 | 16 magic i8
//! 17 crc u32 | 21 attributes i16 | 23 last_offset_delta i32 | 27 base_timestamp i64
//! 35 max_timestamp i64 | 43 producer_id i64 | 51 producer_epoch i16 | 53 base_sequence i32
//! 57 record_count i32 | 61 records...            CRC-32C covers [21, 12 + batch_length)
//! ```

use std::ops::Range;

/// Size of the fixed v2 batch header.
pub const BATCH_HEADER_BYTES: usize = 61;
/// The largest batch accepted from a producer or from disk (a sanity limit far above Kafka's
/// default `message.max.bytes` of 1 MiB; the broker enforces the topic's real limit).
pub const BATCH_BYTES_MAX: usize = 64 << 20;
/// Bytes before `batch_length` counts: base_offset (8) + batch_length (4).
pub const LOG_OVERHEAD_BYTES: usize = 12;

pub(crate) const BASE_OFFSET_AT: usize = 0;
pub(crate) const LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const CRC_FROM: usize = 21;
const COMPRESSION_CODEC_MAX: u8 = 4; // zstd
const ATTR_TRANSACTIONAL: i16 = 1 << 4;
const ATTR_CONTROL: i16 = 1 << 5;

const _: () = assert!(BATCH_HEADER_BYTES > CRC_FROM);
const _: () = assert!(BATCH_BYTES_MAX <= i32::MAX as usize);

#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// The buffer ends inside a batch (or its header).
    #[error("record batch truncated")]
    Truncated,
    /// A batch length field is impossible (below the header size or above `BATCH_BYTES_MAX`).
    #[error("record batch length is impossible")]
    SizeMismatch,
    #[error("unsupported record batch magic {0}")]
    UnsupportedMagic(i8),
    #[error("record batch crc mismatch: expected {expected:#010x}, actual {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    #[error("no record batches")]
    Empty,
    #[error("negative last offset delta {0}")]
    InvalidLastOffsetDelta(i32),
    #[error("record count {record_count} does not match last offset delta {last_offset_delta}")]
    InvalidRecordCount {
        record_count: i32,
        last_offset_delta: i32,
    },
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(u8),
    /// One batch above the log's `batch_bytes_max` (Kafka: MESSAGE_TOO_LARGE).
    #[error("record batch of {batch_bytes} bytes exceeds {batch_bytes_max}")]
    BatchTooLarge {
        batch_bytes: usize,
        batch_bytes_max: usize,
    },
    /// An idempotent batch (a producer id) without a sequence number (Kafka: INVALID_RECORD).
    #[error("invalid sequence number {base_sequence} in a batch of producer {producer_id}")]
    InvalidProducerSequence {
        producer_id: i64,
        base_sequence: i32,
    },
    /// An idempotent batch sent with other batches for the same partition: Kafka's clients
    /// send one batch per partition and request, and the broker checks sequences per batch
    /// (Kafka: INVALID_RECORD).
    #[error("an idempotent batch must be the only batch of its partition in a request")]
    ProducerBatchNotAlone,
    /// A follower's batch does not start where the log (or the batch before it) ends (Kafka:
    /// UnexpectedAppendOffsetException, OffsetsOutOfOrderException).
    #[error("record batch at offset {base_offset}, expected {expected}")]
    UnexpectedBaseOffset { expected: i64, base_offset: i64 },
    /// One append larger than a whole segment (Kafka: RECORD_LIST_TOO_LARGE).
    #[error("{records_bytes} bytes of records exceed segment_bytes_max {segment_bytes_max}")]
    RecordsTooLarge {
        records_bytes: usize,
        segment_bytes_max: u64,
    },
}

/// The 61-byte header of a v2 record batch, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Decodes the header at the start of `bytes`. Checks the header is complete, magic == 2 and
    /// that the batch length is plausible; does not check that the whole batch is present nor
    /// its CRC (see `validate_batches`).
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated);
        }
        let magic = bytes[MAGIC_AT] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let batch_length = be_i32(bytes, 8);
        let length_min = (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32;
        let length_max = (BATCH_BYTES_MAX - LOG_OVERHEAD_BYTES) as i32;
        if !(length_min..=length_max).contains(&batch_length) {
            return Err(BatchError::SizeMismatch);
        }
        Ok(BatchHeader {
            base_offset: be_i64(bytes, BASE_OFFSET_AT),
            batch_length,
            partition_leader_epoch: be_i32(bytes, LEADER_EPOCH_AT),
            magic,
            crc: be_i32(bytes, CRC_AT) as u32,
            attributes: be_i16(bytes, CRC_FROM),
            last_offset_delta: be_i32(bytes, 23),
            base_timestamp: be_i64(bytes, 27),
            max_timestamp: be_i64(bytes, 35),
            producer_id: be_i64(bytes, 43),
            producer_epoch: be_i16(bytes, 51),
            base_sequence: be_i32(bytes, 53),
            record_count: be_i32(bytes, 57),
        })
    }

    /// Size of the whole batch on disk and on the wire: `batch_length + 12`.
    pub fn total_bytes(&self) -> usize {
        // parse() guarantees batch_length is in [49, BATCH_BYTES_MAX - 12].
        self.batch_length as usize + LOG_OVERHEAD_BYTES
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// The batch comes from an idempotent (or transactional) producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & 0x7) as u8
    }

    /// Checks the fields that must hold for any stored batch (CRC aside).
    fn check_fields(&self) -> Result<(), BatchError> {
        if self.last_offset_delta < 0 {
            return Err(BatchError::InvalidLastOffsetDelta(self.last_offset_delta));
        }
        if self.record_count < 0 {
            return Err(BatchError::InvalidRecordCount {
                record_count: self.record_count,
                last_offset_delta: self.last_offset_delta,
            });
        }
        if self.compression() > COMPRESSION_CODEC_MAX {
            return Err(BatchError::UnsupportedCompression(self.compression()));
        }
        Ok(())
    }
}

/// CRC-32C of a complete batch's bytes, as Kafka defines it (attributes..end).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[CRC_FROM..])
}

/// Parses and fully checks the batch at the start of `bytes` (sizes, magic, fields, CRC).
/// Returns the header; the batch occupies `[0, header.total_bytes())`.
pub fn check_batch(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = check_framing(bytes)?;
    let actual = compute_crc(&bytes[..header.total_bytes()]);
    if actual != header.crc {
        return Err(BatchError::CrcMismatch {
            expected: header.crc,
            actual,
        });
    }
    Ok(header)
}

/// [`check_batch`] without the CRC: the header's fields, and its length within `bytes`.
fn check_framing(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    if bytes.len() < LOG_OVERHEAD_BYTES {
        return Err(BatchError::Truncated);
    }
    let header = BatchHeader::parse(bytes)?;
    if header.total_bytes() > bytes.len() {
        return Err(BatchError::Truncated);
    }
    header.check_fields()?;
    Ok(header)
}

/// Iterator over the v2 batches of a records buffer; yields each batch's header and byte range,
/// and stops after the first error. Allocates nothing.
pub struct BatchIter<'a> {
    records: &'a [u8],
    position: usize,
    failed: bool,
    check_crc: bool,
}

impl<'a> BatchIter<'a> {
    /// Every batch checked whole, CRC-32C included.
    pub fn new(records: &'a [u8]) -> Self {
        BatchIter {
            records,
            position: 0,
            failed: false,
            check_crc: true,
        }
    }

    /// Batches whose CRCs were already checked (the same bytes went through [`Self::new`]):
    /// headers and lengths only, which costs nothing per byte.
    pub fn checked(records: &'a [u8]) -> Self {
        BatchIter {
            check_crc: false,
            ..BatchIter::new(records)
        }
    }
}

impl Iterator for BatchIter<'_> {
    type Item = Result<(BatchHeader, Range<usize>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.records.len() {
            return None;
        }
        let start = self.position;
        let bytes = &self.records[start..];
        let checked = if self.check_crc {
            check_batch(bytes)
        } else {
            check_framing(bytes)
        };
        match checked {
            Ok(header) => {
                let end = start + header.total_bytes();
                self.position = end;
                Some(Ok((header, start..end)))
            }
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

/// Validates every v2 batch of a produce request's records field: every size field is checked
/// against the buffer before use, magic == 2, and the CRC-32C. Yields (header, byte range).
pub fn validate_batches(records: &[u8]) -> Result<Vec<(BatchHeader, Range<usize>)>, BatchError> {
    if records.is_empty() {
        return Err(BatchError::Empty);
    }
    BatchIter::new(records).collect()
}

/// Attribute bit 3: timestamps are the broker's append time (the batch max timestamp).
pub(crate) const ATTR_LOG_APPEND_TIME: i16 = 0x08;

/// The offset and timestamp of the first record at or after `timestamp` in `batch` (one
/// whole, validated batch), for ListOffsets by time, which Kafka answers per record.
/// Walks the record framing without decoding keys or values. `None` when no record
/// qualifies, and for a compressed batch, whose records cannot be read without
/// decompressing it: the caller then answers with the batch's base offset, which is at or
/// before the exact record.
pub fn first_record_at_or_after(batch: &[u8], timestamp: i64) -> Option<(i64, i64)> {
    let header = BatchHeader::parse(batch).ok()?;
    if header.max_timestamp < timestamp || header.compression() != 0 {
        return None;
    }
    if header.attributes & ATTR_LOG_APPEND_TIME != 0 {
        return Some((header.base_offset, header.max_timestamp));
    }
    let end = header.total_bytes().min(batch.len());
    let mut position = BATCH_HEADER_BYTES;
    for _ in 0..header.record_count {
        let (length, after_length) = read_varint(batch, position, end)?;
        let record_end = after_length.checked_add(usize::try_from(length).ok()?)?;
        if record_end > end {
            return None;
        }
        let body = after_length + 1; // the record's attributes byte
        let (timestamp_delta, after_timestamp) = read_varint(batch, body, record_end)?;
        let (offset_delta, _) = read_varint(batch, after_timestamp, record_end)?;
        let record_timestamp = header.base_timestamp.checked_add(timestamp_delta)?;
        if record_timestamp >= timestamp {
            return Some((header.base_offset + offset_delta, record_timestamp));
        }
        position = record_end;
    }
    None
}

/// A zigzag varint (Kafka's varint/varlong) at `position`, not reading past `end`: the
/// value and the position after it.
pub(crate) fn read_varint(bytes: &[u8], mut position: usize, end: usize) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for shift in (0..64).step_by(7) {
        if position >= end {
            return None;
        }
        let byte = bytes[position];
        position += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            let value = (raw >> 1) as i64 ^ -((raw & 1) as i64);
            return Some((value, position));
        }
    }
    None
}

#[cfg(test)]
#[path = "../tests/common/mod.rs"]
pub(crate) mod test_batches;

#[cfg(test)]
mod tests {
    use super::test_batches::{encode_batch, BatchSpec};
    use super::*;
    use proptest::prelude::*;

    fn three_records() -> Vec<u8> {
        encode_batch(&BatchSpec {
            record_count: 3,
            ..BatchSpec::default()
        })
    }

    #[test]
    fn finds_the_first_record_at_or_after_a_time() {
        // Record i has timestamp base + i and offset base_offset + i.
        let batch = encode_batch(&BatchSpec {
            base_offset: 100,
            record_count: 5,
            base_timestamp: 1_000,
            ..BatchSpec::default()
        });
        assert_eq!(first_record_at_or_after(&batch, 0), Some((100, 1_000)));
        assert_eq!(first_record_at_or_after(&batch, 1_003), Some((103, 1_003)));
        assert_eq!(first_record_at_or_after(&batch, 1_004), Some((104, 1_004)));
        assert_eq!(first_record_at_or_after(&batch, 1_005), None);
        // Cut records never read past the buffer.
        for cut in 0..batch.len() {
            let _ = first_record_at_or_after(&batch[..cut], 1_003);
        }
    }

    #[test]
    fn parses_header_fields() {
        let spec = BatchSpec {
            base_offset: 7,
            record_count: 3,
            base_timestamp: 1_000,
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: 11,
            ..BatchSpec::default()
        };
        let bytes = encode_batch(&spec);
        let header = BatchHeader::parse(&bytes).expect("valid header");
        assert_eq!(header.base_offset, 7);
        assert_eq!(header.magic, 2);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.last_offset(), 9);
        assert_eq!(header.record_count, 3);
        assert_eq!(header.base_timestamp, 1_000);
        assert_eq!(header.max_timestamp, 1_002);
        assert_eq!(header.producer_id, 42);
        assert_eq!((header.producer_epoch, header.base_sequence), (3, 11));
        assert!(header.has_producer_id());
        assert_eq!(header.total_bytes(), bytes.len());
        assert!(!header.is_control());
        assert!(!header.is_transactional());
        assert_eq!(header.compression(), 0);
    }

    #[test]
    fn validates_several_batches() {
        let mut records = three_records();
        let second = encode_batch(&BatchSpec {
            record_count: 1,
            ..BatchSpec::default()
        });
        records.extend_from_slice(&second);
        let batches = validate_batches(&records).expect("valid");
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].1.end, batches[1].1.start);
        assert_eq!(batches[1].1.end, records.len());
    }

    #[test]
    fn rejects_bad_crc() {
        let mut records = three_records();
        let last = records.len() - 1;
        records[last] ^= 0xff;
        assert!(matches!(
            validate_batches(&records),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn checked_batches_are_walked_by_their_headers_only() {
        let mut records = three_records();
        records.extend_from_slice(&three_records());
        let whole: Vec<_> = BatchIter::new(&records).map(|b| b.unwrap().1).collect();
        let walked: Vec<_> = BatchIter::checked(&records).map(|b| b.unwrap().1).collect();
        assert_eq!(walked, whole);
        // A payload byte changed: the CRC walk refuses it, the header walk does not look.
        let last = records.len() - 1;
        records[last] ^= 0xff;
        assert!(BatchIter::new(&records).any(|b| b.is_err()));
        assert!(BatchIter::checked(&records).all(|b| b.is_ok()));
        // Lengths are still checked.
        assert!(BatchIter::checked(&records[..records.len() - 1]).any(|b| b.is_err()));
    }

    #[test]
    fn base_offset_and_epoch_are_outside_the_crc() {
        let mut records = three_records();
        records[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&99i64.to_be_bytes());
        records[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&5i32.to_be_bytes());
        assert!(validate_batches(&records).is_ok());
    }

    #[test]
    fn rejects_lying_sizes() {
        let mut records = three_records();
        let too_long = records.len() as i32; // claims 12 bytes more than present
        records[8..12].copy_from_slice(&too_long.to_be_bytes());
        assert!(matches!(
            validate_batches(&records),
            Err(BatchError::Truncated)
        ));

        records[8..12].copy_from_slice(&10i32.to_be_bytes());
        assert!(matches!(
            validate_batches(&records),
            Err(BatchError::SizeMismatch)
        ));

        records[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            validate_batches(&records),
            Err(BatchError::SizeMismatch)
        ));
    }

    #[test]
    fn rejects_truncation_and_empty() {
        let records = three_records();
        for cut in [1, 11, 12, 60, records.len() - 1] {
            assert!(
                matches!(
                    validate_batches(&records[..cut]),
                    Err(BatchError::Truncated)
                ),
                "cut at {cut}"
            );
        }
        assert_eq!(validate_batches(&[]).unwrap_err(), BatchError::Empty);
    }

    #[test]
    fn rejects_other_magic() {
        let mut records = three_records();
        records[MAGIC_AT] = 1;
        assert_eq!(
            validate_batches(&records).unwrap_err(),
            BatchError::UnsupportedMagic(1)
        );
    }

    #[test]
    fn rejects_negative_last_offset_delta() {
        let mut records = three_records();
        records[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = compute_crc(&records);
        records[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            validate_batches(&records).unwrap_err(),
            BatchError::InvalidLastOffsetDelta(-1)
        );
    }

    proptest! {
        #[test]
        fn validate_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = validate_batches(&bytes);
        }

        #[test]
        fn validate_never_panics_on_mutated_batches(
            flip_at in 0usize..200, flip in any::<u8>(), cut in 0usize..200,
        ) {
            let mut records = three_records();
            let at = flip_at % records.len();
            records[at] ^= flip;
            let cut = cut.min(records.len());
            let _ = validate_batches(&records[..records.len() - cut]);
        }
    }
}
