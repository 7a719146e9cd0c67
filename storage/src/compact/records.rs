//! The records of one v2 batch as the cleaner sees them, and the filtering of a batch.
//!
//! Record layout (varints zigzag-encoded, as in Kafka):
//! ```text
//! length varint | attributes i8 | timestamp_delta varlong | offset_delta varint
//! | key_length varint (-1: null) | key | value_length varint (-1: null, a tombstone)
//! | value | header_count varint | headers
//! ```

use super::codec::{compress, decompress, CodecError};
use crate::batch::{read_varint, BatchHeader, ATTR_LOG_APPEND_TIME, BATCH_HEADER_BYTES};

const LENGTH_AT: usize = 8;
const CRC_AT: usize = 17;
const CRC_FROM: usize = 21;
const ATTRIBUTES_AT: usize = 21;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const RECORD_COUNT_AT: usize = 57;
const COMPRESSION_MASK: i16 = 0x7;

/// What the cleaner needs to know of one record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordInfo<'a> {
    pub offset: i64,
    /// `None` for a record without a key.
    pub key: Option<&'a [u8]>,
    /// The value is null: the record deletes its key.
    pub is_tombstone: bool,
}

struct Record<'a> {
    /// The whole record, length prefix included.
    bytes: &'a [u8],
    timestamp: i64,
    info: RecordInfo<'a>,
}

/// What is left of a batch after cleaning.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Filtered {
    /// Every record survives (or the batch is one the cleaner keeps whole): copy it as it is.
    Unchanged,
    /// Some records survive (or none, in a batch that must stay for its producer state).
    Rewritten {
        bytes: Vec<u8>,
        records_removed: u32,
    },
    /// No record survives and the batch carries no producer state anyone needs: drop it.
    Removed { records_removed: u32 },
}

/// Why a batch's records could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    Codec(CodecError),
    Framing(&'static str),
}

/// Calls `each` with every record of `batch` (one whole, CRC-checked batch), in order.
/// Control and transactional batches have no records for the cleaner (see `filter_batch`).
pub(crate) fn for_each_record(
    batch: &[u8],
    header: &BatchHeader,
    mut each: impl FnMut(&RecordInfo),
) -> Result<(), DecodeError> {
    if header.is_control() || header.is_transactional() {
        return Ok(());
    }
    let data = records_data(batch, header)?;
    for record in parse_records(header, &data)? {
        each(&record.info);
    }
    Ok(())
}

/// The places (0-based, in batch order) of the records of `batch` (one whole batch) that
/// have no key: what a compacted topic refuses. A control batch has none.
pub(crate) fn keyless_records(batch: &[u8], header: &BatchHeader) -> Result<Vec<i32>, DecodeError> {
    if header.is_control() {
        return Ok(Vec::new());
    }
    let data = records_data(batch, header)?;
    let records = parse_records(header, &data)?;
    Ok((0..)
        .zip(&records)
        .filter(|(_, record)| record.info.key.is_none())
        .map(|(place, _)| place)
        .collect())
}

/// Keeps the records of `batch` for which `retain` says so; a batch left with no record
/// stays (empty) if `keep_empty`, for the producer state it carries. Control batches
/// (transaction markers) and transactional batches are kept whole and add no key to the
/// offset map: cleaning them belongs with transaction support, which must also drop
/// aborted data and markers past `delete.retention.ms` and never clean past the last
/// stable offset.
pub(crate) fn filter_batch(
    batch: &[u8],
    header: &BatchHeader,
    keep_empty: bool,
    mut retain: impl FnMut(&RecordInfo) -> bool,
) -> Filtered {
    if header.is_control() || header.is_transactional() {
        return Filtered::Unchanged;
    }
    let Ok(data) = records_data(batch, header) else {
        return Filtered::Unchanged;
    };
    let Ok(records) = parse_records(header, &data) else {
        return Filtered::Unchanged;
    };
    let kept: Vec<&Record> = records.iter().filter(|r| retain(&r.info)).collect();
    let records_removed = (records.len() - kept.len()) as u32;
    if records_removed == 0 {
        return Filtered::Unchanged;
    }
    if kept.is_empty() && !keep_empty {
        return Filtered::Removed { records_removed };
    }
    match encode(batch, header, &kept) {
        // Never larger than before: a segment's size bounds stay as they were.
        Ok(bytes) if bytes.len() <= batch.len() => Filtered::Rewritten {
            bytes,
            records_removed,
        },
        _ => Filtered::Unchanged,
    }
}

/// The records part of a batch, decompressed if the batch is compressed.
fn records_data<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    let end = header.total_bytes();
    if batch.len() < end || end < BATCH_HEADER_BYTES {
        return Err(DecodeError::Framing("batch cut short"));
    }
    let data = &batch[BATCH_HEADER_BYTES..end];
    match header.compression() {
        0 => Ok(std::borrow::Cow::Borrowed(data)),
        codec => decompress(codec, data)
            .map(std::borrow::Cow::Owned)
            .map_err(DecodeError::Codec),
    }
}

fn parse_records<'a>(header: &BatchHeader, data: &'a [u8]) -> Result<Vec<Record<'a>>, DecodeError> {
    let framing = DecodeError::Framing;
    let count = usize::try_from(header.record_count).map_err(|_| framing("record count"))?;
    // Each record takes at least 7 bytes: no allocation beyond what `data` can hold.
    if count > data.len() / 7 + 1 {
        return Err(framing("record count above what the batch holds"));
    }
    let mut records = Vec::with_capacity(count);
    let mut at = 0;
    for _ in 0..count {
        let (length, body) = read_varint(data, at, data.len()).ok_or(framing("record length"))?;
        let length = usize::try_from(length).map_err(|_| framing("record length"))?;
        let end = body.checked_add(length).filter(|&end| end <= data.len());
        let end = end.ok_or(framing("record past the batch"))?;
        let after_attributes = body + 1;
        let (timestamp_delta, next) =
            read_varint(data, after_attributes, end).ok_or(framing("timestamp delta"))?;
        let (offset_delta, next) = read_varint(data, next, end).ok_or(framing("offset delta"))?;
        let (key_length, next) = read_varint(data, next, end).ok_or(framing("key length"))?;
        let (key, next) = match key_length {
            -1 => (None, next),
            length if length >= 0 && next as i64 + length <= end as i64 => {
                let key_end = next + length as usize;
                (Some(&data[next..key_end]), key_end)
            }
            _ => return Err(framing("key length")),
        };
        let (value_length, _) = read_varint(data, next, end).ok_or(framing("value length"))?;
        if value_length < -1 || offset_delta < 0 || offset_delta > i64::from(i32::MAX) {
            return Err(framing("value length or offset delta"));
        }
        records.push(Record {
            bytes: &data[at..end],
            timestamp: header.base_timestamp.wrapping_add(timestamp_delta),
            info: RecordInfo {
                offset: header.base_offset + offset_delta,
                key,
                is_tombstone: value_length == -1,
            },
        });
        at = end;
    }
    if at != data.len() {
        return Err(framing("bytes after the last record"));
    }
    Ok(records)
}

/// The batch with only `kept` records: header fields kept (see the module's invariants),
/// records copied as they are and recompressed with the batch's codec. A batch left with no
/// record is written uncompressed, with both timestamps the old max timestamp, as Kafka
/// writes an empty batch.
fn encode(batch: &[u8], header: &BatchHeader, kept: &[&Record]) -> Result<Vec<u8>, CodecError> {
    let mut records = Vec::with_capacity(kept.iter().map(|r| r.bytes.len()).sum());
    for record in kept {
        records.extend_from_slice(record.bytes);
    }
    let mut attributes = header.attributes;
    let (base_timestamp, max_timestamp, payload) = if kept.is_empty() {
        attributes &= !COMPRESSION_MASK;
        (header.max_timestamp, header.max_timestamp, Vec::new())
    } else {
        let max_timestamp = if header.attributes & ATTR_LOG_APPEND_TIME != 0 {
            header.max_timestamp
        } else {
            kept.iter()
                .map(|r| r.timestamp)
                .max()
                .unwrap_or(header.max_timestamp)
        };
        let payload = match header.compression() {
            0 => records,
            codec => compress(codec, &records)?,
        };
        (header.base_timestamp, max_timestamp, payload)
    };
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
    out.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    out.extend_from_slice(&payload);
    let batch_length = (out.len() - 12) as i32;
    out[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
    out[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    out[BASE_TIMESTAMP_AT..BASE_TIMESTAMP_AT + 8].copy_from_slice(&base_timestamp.to_be_bytes());
    out[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    let record_count = kept.len() as i32;
    out[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&record_count.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_FROM..]);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_records::{encode_keyed_batch, KeyedBatch};
    use super::*;

    #[test]
    fn keyless_records_are_found_in_plain_and_compressed_batches_and_counted_across_batches() {
        let records = vec![
            (Some(&b"k1"[..]), Some(&b"v"[..])),
            (None, Some(&b"v"[..])),
            (Some(&b"k2"[..]), None),
            (None, None),
        ];
        for codec in [0, 1, 2, 3, 4] {
            let batch = encode_keyed_batch(&KeyedBatch {
                records: records.clone(),
                codec,
                ..KeyedBatch::default()
            });
            let header = BatchHeader::parse(&batch).expect("header");
            assert_eq!(
                keyless_records(&batch, &header),
                Ok(vec![1, 3]),
                "codec {codec}"
            );
        }
        let keyed = encode_keyed_batch(&KeyedBatch {
            records: vec![(Some(&b"k"[..]), Some(&b"v"[..])); 2],
            ..KeyedBatch::default()
        });
        let keyless = encode_keyed_batch(&KeyedBatch {
            records: vec![(None, Some(&b"v"[..]))],
            codec: 3,
            ..KeyedBatch::default()
        });
        assert_eq!(crate::keyless_records(&keyed), Some(vec![]));
        assert_eq!(
            crate::keyless_records(&[keyed.clone(), keyless].concat()),
            Some(vec![2])
        );
        // A corrupt compressed payload cannot be checked.
        let mut corrupt = encode_keyed_batch(&KeyedBatch {
            records: records.clone(),
            codec: 1,
            ..KeyedBatch::default()
        });
        let last = corrupt.len() - 3;
        corrupt[BATCH_HEADER_BYTES..last].fill(0xAB);
        assert_eq!(crate::keyless_records(&corrupt), None);
    }
}
