//! Test-only encoder of keyed v2 batches, compressed with any codec the cleaner reads, and
//! a decoder of what a read returns: `(offset, key, value)` of every record.

use super::codec::{compress, decompress};
use crate::batch::test_batches::put_varlong;
use crate::batch::{BatchHeader, BatchIter, BATCH_HEADER_BYTES};

/// One record: key and value (`None`: null).
pub(crate) type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// A batch of `records` at offset deltas 0, 1, …, timestamps `base_timestamp + i`.
#[derive(Clone, Debug)]
pub(crate) struct KeyedBatch<'a> {
    pub records: Vec<KeyValue<'a>>,
    pub base_timestamp: i64,
    /// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub codec: u8,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl Default for KeyedBatch<'_> {
    fn default() -> Self {
        KeyedBatch {
            records: Vec::new(),
            base_timestamp: 1_700_000_000_000,
            codec: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varlong(out, -1),
        Some(bytes) => {
            put_varlong(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}

pub(crate) fn encode_keyed_batch(spec: &KeyedBatch) -> Vec<u8> {
    assert!(!spec.records.is_empty());
    let mut records = Vec::new();
    for (i, (key, value)) in spec.records.iter().enumerate() {
        let mut body = vec![0u8];
        put_varlong(&mut body, i as i64);
        put_varlong(&mut body, i as i64);
        put_bytes(&mut body, *key);
        put_bytes(&mut body, *value);
        put_varlong(&mut body, 0);
        put_varlong(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    if spec.codec != 0 {
        records = compress(spec.codec, &records).expect("compress");
    }
    let last_offset_delta = spec.records.len() as i32 - 1;
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.push(2);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&i16::from(spec.codec).to_be_bytes());
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&spec.base_timestamp.to_be_bytes());
    let max_timestamp = spec.base_timestamp + i64::from(last_offset_delta);
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&spec.producer_id.to_be_bytes());
    out.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    out.extend_from_slice(&spec.base_sequence.to_be_bytes());
    out.extend_from_slice(&(spec.records.len() as i32).to_be_bytes());
    out.extend_from_slice(&records);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

/// A decoded record: offset, key, value.
pub(crate) type Decoded = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Every record of `bytes` (whole batches, CRCs checked), with its batch header.
pub(crate) fn decode_records(bytes: &[u8]) -> Vec<(BatchHeader, Vec<Decoded>)> {
    let mut out = Vec::new();
    for item in BatchIter::new(bytes) {
        let (header, range) = item.expect("valid batch");
        let batch = &bytes[range];
        let mut data = batch[BATCH_HEADER_BYTES..].to_vec();
        if header.compression() != 0 {
            data = decompress(header.compression(), &data).expect("decompress");
        }
        let mut records = Vec::new();
        let mut at = 0;
        let varint = |at: &mut usize, data: &[u8]| {
            let (value, next) = crate::batch::read_varint(data, *at, data.len()).expect("varint");
            *at = next;
            value
        };
        for _ in 0..header.record_count {
            let length = varint(&mut at, &data) as usize;
            let end = at + length;
            at += 1;
            let _timestamp_delta = varint(&mut at, &data);
            let offset_delta = varint(&mut at, &data);
            let field = |at: &mut usize| {
                let length = varint(at, &data);
                (length >= 0).then(|| {
                    let bytes = data[*at..*at + length as usize].to_vec();
                    *at += length as usize;
                    bytes
                })
            };
            let key = field(&mut at);
            let value = field(&mut at);
            records.push((header.base_offset + offset_delta, key, value));
            at = end;
        }
        assert_eq!(at, data.len(), "records fill the batch");
        out.push((header, records));
    }
    out
}
