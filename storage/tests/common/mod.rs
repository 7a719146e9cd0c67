//! Test-only encoder of Kafka v2 record batches: N uncompressed records with zigzag varint
//! framing and a CRC-32C, as a producer would send them. Shared by the unit tests (through a
//! `#[path]` module) and the integration tests; it names no crate item so it compiles in both.
#![allow(dead_code)]

/// What to put in the batch. Record i gets timestamp `base_timestamp + i` and value
/// `value_bytes` bytes of `value_fill`.
#[derive(Clone, Debug)]
pub struct BatchSpec {
    pub base_offset: i64,
    pub record_count: i32,
    pub base_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Sequence number of the first record (an idempotent producer's; -1 otherwise).
    pub base_sequence: i32,
    pub value_bytes: usize,
    pub value_fill: u8,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            base_offset: 0,
            record_count: 1,
            base_timestamp: 1_700_000_000_000,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            value_bytes: 10,
            value_fill: b'v',
        }
    }
}

/// Appends `value` as a zigzag varlong (Kafka's record framing).
pub fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

/// Encodes one valid v2 batch.
pub fn encode_batch(spec: &BatchSpec) -> Vec<u8> {
    assert!(spec.record_count >= 1);
    let mut records = Vec::new();
    let mut body = Vec::new();
    for i in 0..spec.record_count {
        body.clear();
        body.push(0); // record attributes
        put_varlong(&mut body, i64::from(i)); // timestamp delta
        put_varlong(&mut body, i64::from(i)); // offset delta
        put_varlong(&mut body, -1); // null key
        put_varlong(&mut body, spec.value_bytes as i64);
        body.resize(body.len() + spec.value_bytes, spec.value_fill);
        put_varlong(&mut body, 0); // no headers
        put_varlong(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    let last_offset_delta = spec.record_count - 1;
    let mut out = Vec::with_capacity(61 + records.len());
    out.extend_from_slice(&spec.base_offset.to_be_bytes());
    out.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    out.push(2); // magic
    out.extend_from_slice(&0u32.to_be_bytes()); // crc, patched below
    out.extend_from_slice(&0i16.to_be_bytes()); // attributes
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&spec.base_timestamp.to_be_bytes());
    let max_timestamp = spec.base_timestamp + i64::from(last_offset_delta);
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&spec.producer_id.to_be_bytes());
    out.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    out.extend_from_slice(&spec.base_sequence.to_be_bytes());
    out.extend_from_slice(&spec.record_count.to_be_bytes());
    out.extend_from_slice(&records);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Reads the base offset of every batch in `bytes` (which must hold whole batches).
pub fn batch_base_offsets(bytes: &[u8]) -> Vec<i64> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let mut base = [0u8; 8];
        base.copy_from_slice(&bytes[at..at + 8]);
        offsets.push(i64::from_be_bytes(base));
        let mut length = [0u8; 4];
        length.copy_from_slice(&bytes[at + 8..at + 12]);
        at += 12 + i32::from_be_bytes(length) as usize;
    }
    offsets
}
