//! Kafka v2 record batches and Produce request framing, built in place.
//!
//! Invariants:
//! - One `BatchBuilder` owns one buffer for its whole life; building a batch never allocates
//!   once the buffer has grown to `HEADROOM_BYTES + batch_bytes_max + TAIL_BYTES` (lz4 batches
//!   reuse their scratch buffer; lz4_flex's frame encoder allocates its tables once per batch).
//! - A finished batch is byte-exact Kafka v2 (magic 2): base offset 0, partition leader epoch -1,
//!   no producer id, CRC-32C over attributes..end. Record timestamps equal the batch base
//!   timestamp (delta 0), keys are null unless the builder has a key space (`with_keys`),
//!   records carry no headers.
//! - With a key space of N keys, record i of a builder's life has key `i mod N` as
//!   `KEY_BYTES` ASCII digits, so every key comes back after N records (a compacted topic
//!   has something to clean, and refuses records without key).
//! - The batch sits at `HEADROOM_BYTES` in the buffer so that `frame_produce` can write the
//!   request size, header and body prefix right before it: the batch bytes are never copied.
//! - A batch holds at least one record even if that record alone exceeds `batch_bytes_max`.
//! - lz4 costs far more than building a batch (lz4_flex compresses ~0.5 GB/s), so batches
//!   filled by `fill_batch` start at one of `TEMPLATES` fixed places in the payload pool in
//!   turn, and each distinct record section (start, record count) is compressed once and
//!   its lz4 frame reused, up to `LZ4_MEMO_BYTES_MAX`. Every batch is still a whole, valid
//!   lz4 batch with its own header and CRC; the broker sees `TEMPLATES` different contents
//!   cycling, as from producers sending the same events again.

use std::collections::HashMap;
use std::io::Write;

/// Room reserved in front of a batch for the request prefix (size, header, body fields).
/// Topic names are at most 249 bytes and client ids are capped below, so 512 always fits.
pub const HEADROOM_BYTES: usize = 512;
/// Produce v9+ ends with three empty tagged-field sections after the records.
const TAIL_BYTES: usize = 3;
/// Places in the payload pool where lz4 batches start, in turn.
const TEMPLATES: usize = 64;
/// Memory for compressed record sections kept for reuse, per builder.
const LZ4_MEMO_BYTES_MAX: usize = 16 << 20;
/// A record's key, when the builder has a key space: its number in zero-padded decimal.
pub const KEY_BYTES: usize = 8;
/// Keys that `KEY_BYTES` digits can number.
pub const KEYS_MAX: u64 = 100_000_000;
/// v2 batch header: base offset .. records count.
pub const BATCH_HEADER_BYTES: usize = 61;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
pub const CLIENT_ID_BYTES_MAX: usize = 128;
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
const _: () = assert!(
    HEADROOM_BYTES >= 4 + 10 + CLIENT_ID_BYTES_MAX + 1 + 16 + TOPIC_NAME_BYTES_MAX + 5 + 8 + 5
);

/// Kafka's compression codecs that the generator can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Lz4,
}

impl Compression {
    fn attribute_bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 3,
        }
    }
}

#[inline]
fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

#[inline]
pub fn uvarint_len(mut v: u32) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Writes `v` as an unsigned LEB128 varint at `out[pos..]`; returns the new position.
#[inline]
fn put_uvarint(out: &mut [u8], mut pos: usize, mut v: u32) -> usize {
    while v >= 0x80 {
        out[pos] = (v as u8) | 0x80;
        v >>= 7;
        pos += 1;
    }
    out[pos] = v as u8;
    pos + 1
}

#[cfg(test)]
fn push_uvarint(out: &mut Vec<u8>, v: u32) {
    let mut tmp = [0u8; 5];
    let n = put_uvarint(&mut tmp, 0, v);
    out.extend_from_slice(&tmp[..n]);
}

/// Builds one v2 record batch at a time into a reused buffer.
pub struct BatchBuilder {
    buf: Vec<u8>,
    batch_bytes_max: usize,
    compression: Compression,
    record_count: i32,
    base_timestamp_ms: i64,
    /// Uncompressed records of an lz4 batch (reused).
    scratch: Vec<u8>,
    /// Pool position of the current batch's first record, when it starts at a template.
    template_start: Option<usize>,
    /// lz4 frames of record sections compressed before, by (template start, record count).
    lz4_memo: HashMap<(usize, i32), Vec<u8>>,
    lz4_memo_bytes: usize,
    /// Producer id, epoch and base sequence written into the next finished batch; all -1
    /// for a producer that is not idempotent.
    producer: (i64, i16, i32),
    /// The key space and the next key's number; `None`: null keys.
    keys: Option<KeyCycle>,
}

/// Keys `0..count` in turn.
#[derive(Clone, Copy, Debug)]
struct KeyCycle {
    count: u64,
    next: u64,
}

/// `key` as `KEY_BYTES` zero-padded decimal digits.
#[inline]
fn key_digits(mut key: u64) -> [u8; KEY_BYTES] {
    let mut digits = [b'0'; KEY_BYTES];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (key % 10) as u8;
        key /= 10;
    }
    digits
}

impl BatchBuilder {
    pub fn new(batch_bytes_max: usize, compression: Compression) -> Self {
        let capacity = HEADROOM_BYTES + batch_bytes_max.max(BATCH_HEADER_BYTES) + TAIL_BYTES + 64;
        let mut builder = BatchBuilder {
            buf: Vec::with_capacity(capacity),
            batch_bytes_max,
            compression,
            record_count: 0,
            base_timestamp_ms: 0,
            scratch: Vec::new(),
            template_start: None,
            lz4_memo: HashMap::new(),
            lz4_memo_bytes: 0,
            producer: (-1, -1, -1),
            keys: None,
        };
        builder.reset(0);
        builder
    }

    /// Records carry keys `0..count` in turn (`None`: null keys). `count` is at most
    /// `KEYS_MAX`.
    pub fn with_keys(mut self, count: Option<u64>) -> Self {
        assert!(count.is_none_or(|n| (1..=KEYS_MAX).contains(&n)));
        self.keys = count.map(|count| KeyCycle { count, next: 0 });
        self
    }

    /// Starts a new, empty batch whose records are all stamped `base_timestamp_ms`.
    pub fn reset(&mut self, base_timestamp_ms: i64) {
        self.buf.clear();
        self.buf.resize(HEADROOM_BYTES + BATCH_HEADER_BYTES, 0);
        self.scratch.clear();
        self.record_count = 0;
        self.base_timestamp_ms = base_timestamp_ms;
        self.template_start = None;
    }

    /// Bytes the batch would occupy uncompressed (header + records).
    pub fn batch_bytes(&self) -> usize {
        match self.compression {
            Compression::None => self.buf.len() - HEADROOM_BYTES,
            Compression::Lz4 => BATCH_HEADER_BYTES + self.scratch.len(),
        }
    }

    /// Size of one record carrying a key of `key_len` bytes (0: null) and a value of
    /// `value_len` bytes at `offset_delta`.
    #[inline]
    fn record_bytes(offset_delta: i32, key_len: usize, value_len: usize) -> (usize, usize) {
        // attributes(1) + timestamp delta(1: zero) + offset delta + key length(1: null or
        // KEY_BYTES) + key + value length + value + header count(1: zero)
        let body = 1
            + 1
            + uvarint_len(zigzag32(offset_delta))
            + 1
            + key_len
            + uvarint_len(zigzag32(value_len as i32))
            + value_len
            + 1;
        (body, uvarint_len(zigzag32(body as i32)) + body)
    }

    /// Appends a record with the next key of the key space (or a null key) and `value`;
    /// returns false (and appends nothing, the key staying next) when the record would push
    /// a non-empty batch past `batch_bytes_max`.
    #[inline]
    pub fn try_append(&mut self, value: &[u8]) -> bool {
        let offset_delta = self.record_count;
        let key_len = if self.keys.is_some() { KEY_BYTES } else { 0 };
        let (body_bytes, total_bytes) = Self::record_bytes(offset_delta, key_len, value.len());
        if self.record_count > 0 && self.batch_bytes() + total_bytes > self.batch_bytes_max {
            return false;
        }
        let mut head = [0u8; 24 + KEY_BYTES];
        let mut pos = put_uvarint(&mut head, 0, zigzag32(body_bytes as i32));
        head[pos] = 0; // record attributes
        head[pos + 1] = 0; // timestamp delta
        pos = put_uvarint(&mut head, pos + 2, zigzag32(offset_delta));
        match &mut self.keys {
            None => {
                head[pos] = 1; // key length -1 (null), zigzag
                pos += 1;
            }
            Some(keys) => {
                head[pos] = zigzag32(KEY_BYTES as i32) as u8;
                head[pos + 1..pos + 1 + KEY_BYTES].copy_from_slice(&key_digits(keys.next));
                pos += 1 + KEY_BYTES;
                keys.next = (keys.next + 1) % keys.count;
            }
        }
        pos = put_uvarint(&mut head, pos, zigzag32(value.len() as i32));
        let out = match self.compression {
            Compression::None => &mut self.buf,
            Compression::Lz4 => &mut self.scratch,
        };
        out.extend_from_slice(&head[..pos]);
        out.extend_from_slice(value);
        out.push(0); // header count
        self.record_count += 1;
        true
    }

    /// The idempotent producer (id, epoch) and the sequence of the first record of the
    /// batches finished from now on.
    pub fn set_producer(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        self.producer = (producer_id, producer_epoch, base_sequence);
    }

    /// Completes the header and CRC; returns the batch bytes (start at `HEADROOM_BYTES`).
    pub fn finish(&mut self) -> &[u8] {
        assert!(self.record_count > 0, "a batch needs at least one record");
        if self.compression == Compression::Lz4 {
            self.compress_records();
        }
        let batch_len = self.buf.len() - HEADROOM_BYTES;
        let last_offset_delta = self.record_count - 1;
        let attributes = self.compression.attribute_bits();
        let ts = self.base_timestamp_ms;
        let h = &mut self.buf[HEADROOM_BYTES..HEADROOM_BYTES + BATCH_HEADER_BYTES];
        h[0..8].copy_from_slice(&0i64.to_be_bytes()); // base offset
        h[8..12].copy_from_slice(&((batch_len - 12) as i32).to_be_bytes()); // batch length
        h[12..16].copy_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        h[16] = 2; // magic
        h[21..23].copy_from_slice(&attributes.to_be_bytes());
        h[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
        h[27..35].copy_from_slice(&ts.to_be_bytes()); // base timestamp
        h[35..43].copy_from_slice(&ts.to_be_bytes()); // max timestamp
        let (producer_id, producer_epoch, base_sequence) = self.producer;
        h[43..51].copy_from_slice(&producer_id.to_be_bytes());
        h[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
        h[53..57].copy_from_slice(&base_sequence.to_be_bytes());
        h[57..61].copy_from_slice(&self.record_count.to_be_bytes());
        let crc = crc32c::crc32c(&self.buf[HEADROOM_BYTES + ATTRIBUTES_OFFSET..]);
        let at = HEADROOM_BYTES + CRC_OFFSET;
        self.buf[at..at + 4].copy_from_slice(&crc.to_be_bytes());
        &self.buf[HEADROOM_BYTES..]
    }

    /// Puts the lz4 frame of the records after the header: from the memo when this record
    /// section was compressed before, else compressed now (and kept, within the budget).
    fn compress_records(&mut self) {
        self.buf.truncate(HEADROOM_BYTES + BATCH_HEADER_BYTES);
        // Keyed records differ from one batch to the next even from the same template.
        let key = self
            .template_start
            .filter(|_| self.keys.is_none())
            .map(|start| (start, self.record_count));
        if let Some(frame) = key.and_then(|key| self.lz4_memo.get(&key)) {
            self.buf.extend_from_slice(frame);
            return;
        }
        let info = lz4_flex::frame::FrameInfo::new()
            .block_size(lz4_flex::frame::BlockSize::Max64KB)
            .block_mode(lz4_flex::frame::BlockMode::Independent);
        let mut encoder =
            lz4_flex::frame::FrameEncoder::with_frame_info(info, std::mem::take(&mut self.buf));
        // Writing into a Vec cannot fail.
        encoder.write_all(&self.scratch).expect("lz4 into Vec");
        self.buf = encoder.finish().expect("lz4 into Vec");
        let frame = &self.buf[HEADROOM_BYTES + BATCH_HEADER_BYTES..];
        if let Some(key) = key {
            if self.lz4_memo_bytes + frame.len() <= LZ4_MEMO_BYTES_MAX {
                self.lz4_memo_bytes += frame.len();
                self.lz4_memo.insert(key, frame.to_vec());
            }
        }
    }

    /// Frames the finished batch as a whole Produce request (size prefix included) and returns
    /// it. Call after `finish`.
    pub fn frame_produce(&mut self, request: &ProduceFraming, correlation_id: i32) -> &[u8] {
        let batch_len = self.buf.len() - HEADROOM_BYTES;
        self.buf.truncate(HEADROOM_BYTES + batch_len);
        let flexible = request.version >= 9;
        let mut prefix = [0u8; HEADROOM_BYTES];
        let mut p = 4; // size, filled below
        let mut put = |bytes: &[u8], p: &mut usize| {
            prefix[*p..*p + bytes.len()].copy_from_slice(bytes);
            *p += bytes.len();
        };
        put(&0i16.to_be_bytes(), &mut p); // api key: Produce
        put(&request.version.to_be_bytes(), &mut p);
        put(&correlation_id.to_be_bytes(), &mut p);
        put(&(request.client_id.len() as i16).to_be_bytes(), &mut p);
        put(request.client_id.as_bytes(), &mut p);
        if flexible {
            put(&[0], &mut p); // header tagged fields
            put(&[0], &mut p); // transactional id: null (compact)
        } else {
            put(&(-1i16).to_be_bytes(), &mut p); // transactional id: null
        }
        put(&request.acks.to_be_bytes(), &mut p);
        put(&request.timeout_ms.to_be_bytes(), &mut p);
        let mut varint = [0u8; 5];
        if flexible {
            put(&[2], &mut p); // one topic
            let n = put_uvarint(&mut varint, 0, request.topic.len() as u32 + 1);
            put(&varint[..n], &mut p);
            put(request.topic.as_bytes(), &mut p);
            put(&[2], &mut p); // one partition
            put(&request.partition.to_be_bytes(), &mut p);
            let n = put_uvarint(&mut varint, 0, batch_len as u32 + 1);
            put(&varint[..n], &mut p);
        } else {
            put(&1i32.to_be_bytes(), &mut p);
            put(&(request.topic.len() as i16).to_be_bytes(), &mut p);
            put(request.topic.as_bytes(), &mut p);
            put(&1i32.to_be_bytes(), &mut p);
            put(&request.partition.to_be_bytes(), &mut p);
            put(&(batch_len as i32).to_be_bytes(), &mut p);
        }
        let tail = if flexible { TAIL_BYTES } else { 0 };
        let size = (p - 4 + batch_len + tail) as i32;
        prefix[0..4].copy_from_slice(&size.to_be_bytes());
        let start = HEADROOM_BYTES - p;
        self.buf[start..HEADROOM_BYTES].copy_from_slice(&prefix[..p]);
        if flexible {
            self.buf.extend_from_slice(&[0, 0, 0]); // partition, topic, request tagged fields
        }
        &self.buf[start..]
    }
}

/// What stays the same across the Produce requests of one producer and partition.
#[derive(Clone, Debug)]
pub struct ProduceFraming {
    pub version: i16,
    pub client_id: String,
    pub acks: i16,
    pub timeout_ms: i32,
    pub topic: String,
    pub partition: i32,
}

impl ProduceFraming {
    pub fn new(version: i16, client_id: &str, acks: i16, timeout_ms: i32, topic: &str) -> Self {
        assert!(
            (3..=12).contains(&version),
            "Produce v{version} is not framed here"
        );
        assert!(client_id.len() <= CLIENT_ID_BYTES_MAX);
        assert!(topic.len() <= TOPIC_NAME_BYTES_MAX);
        ProduceFraming {
            version,
            client_id: client_id.to_string(),
            acks,
            timeout_ms,
            topic: topic.to_string(),
            partition: 0,
        }
    }
}

/// The bytes that record values are sliced from: random or compressible, made once.
pub struct PayloadPool {
    bytes: Vec<u8>,
    value_bytes: usize,
    cursor: usize,
    stride: usize,
    /// The template the last lz4 batch started at.
    template: usize,
}

/// Kept within a 1 MiB L2 along with the batch buffers.
const POOL_BYTES: usize = 256 * 1024;

impl PayloadPool {
    pub fn new(value_bytes: usize, compressible: bool, seed: u64) -> Self {
        let len = POOL_BYTES + value_bytes;
        let mut bytes = Vec::with_capacity(len);
        let mut x = seed | 1;
        let mut next = move || {
            // xorshift64*: deterministic, fast, good enough for payload bytes.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        if compressible {
            // JSON-like text: a fixed shape with varying small numbers (lz4 ratio ≈ 3).
            let mut i = 0u64;
            while bytes.len() < len {
                let r = next();
                let line = format!(
                    "{{\"id\":{},\"user\":\"u{:04}\",\"event\":\"{}\",\"value\":{}.{:02}}}\n",
                    i,
                    r % 9973,
                    ["click", "view", "buy", "scroll"][(r >> 20) as usize % 4],
                    (r >> 32) % 1000,
                    (r >> 8) % 100
                );
                bytes.extend_from_slice(line.as_bytes());
                i += 1;
            }
            bytes.truncate(len);
        } else {
            while bytes.len() < len {
                bytes.extend_from_slice(&next().to_le_bytes());
            }
            bytes.truncate(len);
        }
        PayloadPool {
            bytes,
            value_bytes,
            cursor: 0,
            template: 0,
            // Consecutive values do not overlap, and an odd step spreads alignments.
            stride: value_bytes + 13,
        }
    }

    #[inline]
    pub fn next_value(&mut self) -> &[u8] {
        let start = self.cursor;
        self.cursor += self.stride;
        if self.cursor >= POOL_BYTES {
            self.cursor -= POOL_BYTES;
        }
        &self.bytes[start..start + self.value_bytes]
    }
}

/// Fills `builder` (already reset) with up to `count_max` values from `pool`; returns how many
/// records went in. An lz4 batch starts at the pool's next template (see the module notes).
#[inline]
pub fn fill_batch(builder: &mut BatchBuilder, pool: &mut PayloadPool, count_max: u64) -> u64 {
    if builder.compression == Compression::Lz4 {
        pool.template = (pool.template + 1) % TEMPLATES;
        pool.cursor = pool.template * (POOL_BYTES / TEMPLATES);
        builder.template_start = Some(pool.cursor);
    }
    let mut n = 0;
    while n < count_max {
        let save = pool.cursor;
        if !builder.try_append(pool.next_value()) {
            pool.cursor = save;
            break;
        }
        n += 1;
    }
    n
}

/// Like `fill_batch`, but the first 8 bytes of message `i`'s value are `stamp(i)` big-endian
/// (end-to-end runs carry their intended send time this way). Values must be ≥ 8 bytes.
pub fn fill_batch_stamped(
    builder: &mut BatchBuilder,
    pool: &mut PayloadPool,
    count_max: u64,
    value: &mut Vec<u8>,
    mut stamp: impl FnMut(u64) -> u64,
) -> u64 {
    assert!(pool.value_bytes >= 8, "stamped values need 8 bytes");
    let mut n = 0;
    while n < count_max {
        let save = pool.cursor;
        value.clear();
        value.extend_from_slice(pool.next_value());
        value[..8].copy_from_slice(&stamp(n).to_be_bytes());
        if !builder.try_append(value) {
            pool.cursor = save;
            break;
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::{ProduceRequest, RequestHeader};
    use kafka_protocol::protocol::Decodable;
    use kafka_protocol::records::{self, RecordBatchDecoder};
    use std::io::Read;

    fn lz4_decompress(buf: &mut Bytes, compression: records::Compression) -> anyhow::Result<Bytes> {
        if compression == records::Compression::None {
            return Ok(buf.clone());
        }
        assert_eq!(compression, records::Compression::Lz4);
        let mut out = Vec::new();
        lz4_flex::frame::FrameDecoder::new(&buf[..]).read_to_end(&mut out)?;
        Ok(Bytes::from(out))
    }

    fn decode(batch: &[u8]) -> records::RecordSet {
        let mut bytes = Bytes::copy_from_slice(batch);
        let set = RecordBatchDecoder::decode_with_custom_compression(
            &mut bytes,
            Some(lz4_decompress as fn(&mut Bytes, records::Compression) -> _),
        )
        .expect("decodes");
        assert!(bytes.is_empty(), "one batch, nothing left over");
        set
    }

    #[test]
    fn zigzag_and_varint_match_kafka() {
        assert_eq!(zigzag32(0), 0);
        assert_eq!(zigzag32(-1), 1);
        assert_eq!(zigzag32(1), 2);
        assert_eq!(zigzag32(i32::MIN), u32::MAX);
        let mut out = Vec::new();
        push_uvarint(&mut out, 300);
        assert_eq!(out, [0xAC, 0x02]);
        assert_eq!(uvarint_len(127), 1);
        assert_eq!(uvarint_len(128), 2);
        assert_eq!(uvarint_len(u32::MAX), 5);
    }

    #[test]
    fn batch_decodes_with_kafka_protocol_and_crc_checks() {
        for &(size, compressible) in &[(100usize, false), (1024, true), (0, false), (200, true)] {
            let mut pool = PayloadPool::new(size, compressible, 7);
            let mut builder = BatchBuilder::new(16 * 1024, Compression::None);
            builder.reset(1_700_000_000_123);
            let mut expected = Vec::new();
            loop {
                let save = pool.cursor;
                let v = pool.next_value().to_vec();
                if !builder.try_append(&v) {
                    pool.cursor = save;
                    break;
                }
                expected.push(v);
            }
            let n = expected.len();
            assert!(n > 1 && builder.batch_bytes() <= 16 * 1024);
            let batch = builder.finish().to_vec();
            assert_eq!(batch.len(), builder.batch_bytes());
            let set = decode(&batch);
            assert_eq!(set.version, 2);
            assert_eq!(set.records.len(), n);
            for (i, r) in set.records.iter().enumerate() {
                assert_eq!(r.offset, i as i64);
                assert_eq!(r.timestamp, 1_700_000_000_123);
                assert!(r.key.is_none());
                assert_eq!(r.value.as_deref(), Some(&expected[i][..]));
                assert!(r.headers.is_empty());
                assert_eq!(r.producer_id, -1);
            }
            // The CRC covers attributes..end: flipping a byte must fail the decoder.
            let mut bad = batch.clone();
            let last = bad.len() - 2;
            bad[last] ^= 0x40;
            let mut bytes = Bytes::from(bad);
            assert!(RecordBatchDecoder::decode(&mut bytes).is_err());
        }
    }

    #[test]
    fn an_idempotent_batch_carries_its_producer_and_sequences() {
        let mut builder = BatchBuilder::new(16 * 1024, Compression::None);
        builder.reset(1);
        builder.set_producer(77, 2, i32::MAX - 1);
        for value in [b"a", b"b", b"c"] {
            assert!(builder.try_append(value));
        }
        let set = decode(builder.finish());
        let sequences: Vec<i32> = set.records.iter().map(|r| r.sequence).collect();
        // The codec wraps to i32::MIN where Kafka wraps to 0; only the base is on the wire.
        assert_eq!(sequences[..2], [i32::MAX - 1, i32::MAX]);
        assert!(set
            .records
            .iter()
            .all(|r| (r.producer_id, r.producer_epoch) == (77, 2)));
    }

    #[test]
    fn keyed_records_cycle_through_the_key_space() {
        for compression in [Compression::None, Compression::Lz4] {
            let mut pool = PayloadPool::new(100, true, 5);
            let mut builder = BatchBuilder::new(2048, compression).with_keys(Some(7));
            let mut keys = Vec::new();
            for round in 0..3 {
                builder.reset(round);
                let n = fill_batch(&mut builder, &mut pool, u64::MAX);
                assert!(n > 7, "{n} records of about 110 bytes in 2 KiB");
                assert!(builder.batch_bytes() <= 2048);
                let set = decode(builder.finish());
                assert_eq!(set.records.len() as u64, n);
                for record in &set.records {
                    assert_eq!(record.value.as_ref().map(|v| v.len()), Some(100));
                    let key = record.key.clone().expect("a key");
                    keys.push(String::from_utf8(key.to_vec()).expect("ascii"));
                }
            }
            let expected: Vec<String> = (0..keys.len()).map(|i| format!("{:08}", i % 7)).collect();
            assert_eq!(
                keys, expected,
                "{compression:?}: keys in turn across batches"
            );
        }
        assert_eq!(key_digits(KEYS_MAX - 1), *b"99999999");
        assert_eq!(key_digits(42), *b"00000042");
    }

    #[test]
    fn builder_is_reusable_without_growth() {
        let mut pool = PayloadPool::new(100, false, 1);
        let mut builder = BatchBuilder::new(64 * 1024, Compression::None);
        let capacity = builder.buf.capacity();
        for round in 0..50 {
            builder.reset(round);
            let n = fill_batch(&mut builder, &mut pool, u64::MAX);
            assert!(n > 500);
            let batch = builder.finish().to_vec();
            assert_eq!(decode(&batch).records.len() as u64, n);
            let framing = ProduceFraming::new(7, "b", 1, 30_000, "t");
            builder.frame_produce(&framing, round as i32);
        }
        assert_eq!(
            builder.buf.capacity(),
            capacity,
            "no reallocation after the first batch"
        );
    }

    #[test]
    fn oversized_record_still_makes_a_batch() {
        let mut builder = BatchBuilder::new(100, Compression::None);
        builder.reset(0);
        assert!(builder.try_append(&[7u8; 500]));
        assert!(!builder.try_append(&[7u8; 1]));
        let batch = builder.finish().to_vec();
        assert_eq!(decode(&batch).records.len(), 1);
    }

    #[test]
    fn lz4_batch_decodes_and_is_smaller() {
        let mut pool = PayloadPool::new(100, true, 3);
        let mut builder = BatchBuilder::new(64 * 1024, Compression::Lz4);
        builder.reset(5);
        let n = fill_batch(&mut builder, &mut pool, u64::MAX);
        let uncompressed = builder.batch_bytes();
        let batch = builder.finish().to_vec();
        assert!(
            batch.len() * 2 < uncompressed,
            "{} vs {}",
            batch.len(),
            uncompressed
        );
        let set = decode(&batch);
        assert_eq!(set.compression, records::Compression::Lz4);
        assert_eq!(set.records.len() as u64, n);
    }

    #[test]
    fn lz4_record_sections_are_compressed_once_per_template() {
        let mut pool = PayloadPool::new(100, true, 3);
        let mut builder = BatchBuilder::new(16 * 1024, Compression::Lz4);
        let mut values_of = Vec::new();
        for i in 0..2 * TEMPLATES {
            builder.reset(1_000 + i as i64);
            let n = fill_batch(&mut builder, &mut pool, u64::MAX);
            let set = decode(builder.finish());
            assert_eq!(set.records.len() as u64, n, "batch {i}");
            assert!(set.records.iter().all(|r| r.timestamp == 1_000 + i as i64));
            let values: Vec<Bytes> = set.records.iter().filter_map(|r| r.value.clone()).collect();
            values_of.push(values);
        }
        assert_eq!(builder.lz4_memo.len(), TEMPLATES, "one frame per template");
        for i in 0..TEMPLATES {
            assert_eq!(
                values_of[i],
                values_of[i + TEMPLATES],
                "template {i} repeats"
            );
            assert_ne!(
                values_of[i],
                values_of[(i + 1) % TEMPLATES],
                "templates differ"
            );
        }
        // Stamped batches (end-to-end runs) differ every time and are never memoised.
        builder.reset(0);
        let mut value = Vec::new();
        fill_batch_stamped(&mut builder, &mut pool, 10, &mut value, |i| i);
        decode(builder.finish());
        assert_eq!(builder.lz4_memo.len(), TEMPLATES);
    }

    #[test]
    fn produce_request_decodes_at_every_framed_version() {
        let mut pool = PayloadPool::new(100, false, 9);
        let mut builder = BatchBuilder::new(4096, Compression::None);
        for version in 3..=12i16 {
            builder.reset(42);
            let n = fill_batch(&mut builder, &mut pool, 10);
            assert_eq!(n, 10);
            let batch = builder.finish().to_vec();
            let mut framing = ProduceFraming::new(version, "ringlog-bench", -1, 1234, "topic-a");
            framing.partition = 3;
            let frame = Bytes::copy_from_slice(builder.frame_produce(&framing, 77));
            let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
            assert_eq!(size, frame.len() - 4);
            let mut body = frame.slice(4..);
            let header_version = if version >= 9 { 2 } else { 1 };
            let header = RequestHeader::decode(&mut body, header_version).expect("header");
            assert_eq!(header.request_api_key, 0);
            assert_eq!(header.request_api_version, version);
            assert_eq!(header.correlation_id, 77);
            assert_eq!(header.client_id.as_deref(), Some("ringlog-bench"));
            let request = ProduceRequest::decode(&mut body, version).expect("body");
            assert!(body.is_empty(), "v{version}: trailing bytes");
            assert_eq!(request.acks, -1);
            assert_eq!(request.timeout_ms, 1234);
            assert_eq!(request.topic_data.len(), 1);
            let topic = &request.topic_data[0];
            assert_eq!(&*topic.name.0, "topic-a");
            assert_eq!(topic.partition_data[0].index, 3);
            let records = topic.partition_data[0].records.clone().expect("records");
            assert_eq!(&records[..], &batch[..]);
        }
    }
}
