//! Fetch: the request for one topic's partitions at given offsets, and a walk over the v2
//! record batch headers of fetched bytes that counts records without decoding them.
//!
//! Invariants:
//! - [`count_batches`] never panics on bad bytes: a batch whose length cannot hold its own
//!   header, or whose magic is not 2, is an error; a trailing partial batch is ignored, as
//!   Kafka allows.
//! - Control batches (transaction markers) are walked past but not counted as records.

use anyhow::{bail, Result};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use uuid::Uuid;

use crate::cluster::topic_name;

/// How much one Fetch may return.
#[derive(Clone, Copy, Debug)]
pub struct FetchLimits {
    pub max_wait_ms: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
}

/// A consumer's Fetch (replica id -1, no fetch session) of `topic` (named both by name, for
/// v12 and before, and by `topic_id`, from v13) at the given (partition, offset) positions.
pub fn fetch_request(
    topic: &str,
    topic_id: Uuid,
    positions: &[(i32, i64)],
    limits: FetchLimits,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(limits.max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(limits.max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_topic_id(topic_id)
            .with_partitions(
                positions
                    .iter()
                    .map(|&(partition, offset)| {
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_current_leader_epoch(-1)
                            .with_fetch_offset(offset)
                            .with_last_fetched_epoch(-1)
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(limits.partition_max_bytes)
                    })
                    .collect(),
            )])
}

/// Bytes of a v2 record batch header, up to and including the record count.
pub const BATCH_HEADER_BYTES: usize = 61;

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Records and bytes in a fetched record set, by v2 batch headers only (no record decoding).
/// Returns (records, bytes, next offset).
pub fn count_batches(records: &[u8], verify_crc: bool) -> Result<(u64, u64, Option<i64>)> {
    let mut at = 0;
    let (mut count, mut bytes, mut next) = (0u64, 0u64, None);
    while records.len() - at >= BATCH_HEADER_BYTES {
        // At least a whole header remains, so every index below is in bounds.
        let b = &records[at..];
        let base_offset = i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let batch_length = be_i32(b, 8);
        if batch_length < (BATCH_HEADER_BYTES - 12) as i32 {
            bail!("record batch at offset {base_offset} claims {batch_length} bytes");
        }
        let len = batch_length as usize + 12;
        if len > b.len() {
            break;
        }
        if b[16] != 2 {
            bail!("record batch magic {} at offset {base_offset}", b[16]);
        }
        if verify_crc {
            let want = be_i32(b, 17) as u32;
            if crc32c::crc32c(&b[21..len]) != want {
                bail!("CRC mismatch in batch at offset {base_offset}");
            }
        }
        let last_delta = be_i32(b, 23);
        let n = be_i32(b, 57);
        let control = be_i16(b, 21) & (1 << 5) != 0;
        if !control {
            count += n.max(0) as u64;
            bytes += len as u64;
        }
        next = Some(base_offset.wrapping_add(last_delta as i64).wrapping_add(1));
        at += len;
    }
    Ok((count, bytes, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use proptest::prelude::*;

    fn batch(base_offset: i64, count: usize) -> Vec<u8> {
        let records: Vec<Record> = (0..count)
            .map(|i| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                delete_horizon: false,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: base_offset + i as i64,
                sequence: -1,
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(Bytes::from_static(b"value")),
                headers: Default::default(),
            })
            .collect();
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
        out.to_vec()
    }

    #[test]
    fn count_batches_reads_headers_and_crc() {
        let mut log = Vec::new();
        for base in [0i64, 10, 20] {
            log.extend_from_slice(&batch(base, 10));
        }
        let full = log.len();
        log.extend_from_slice(&[0; 30]); // partial trailing batch
        let (count, bytes, next) = count_batches(&log, true).unwrap();
        assert_eq!((count, bytes as usize, next), (30, full, Some(30)));
        log[100] ^= 1;
        assert!(count_batches(&log, true).is_err());
    }

    #[test]
    fn a_batch_too_short_for_its_header_is_an_error() {
        let mut bad = batch(0, 1);
        bad[8..12].copy_from_slice(&5i32.to_be_bytes());
        assert!(count_batches(&bad, false).is_err());
        bad[8..12].copy_from_slice(&(-12i32).to_be_bytes());
        assert!(count_batches(&bad, false).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_record_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            verify in any::<bool>(),
        ) {
            let _ = count_batches(&bytes, verify);
        }

        #[test]
        fn garbled_batches_never_panic(at in 0usize..200, value in any::<u8>(), cut in 0usize..400) {
            let mut log = batch(0, 3);
            log.extend_from_slice(&batch(3, 2));
            let at = at % log.len();
            log[at] = value;
            let cut = cut.min(log.len());
            let _ = count_batches(&log[..cut], true);
        }
    }
}
