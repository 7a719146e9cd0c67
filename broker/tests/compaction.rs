//! Log compaction on a running node: a topic with `cleanup.policy=compact` keeps only the
//! latest value of each key, at its original offset.
//!
//! Method: a node whose cleaner runs every 100 ms; a compacted topic with 100-byte segments,
//! so that every produced batch rolls the one before it into a sealed, cleanable segment. The
//! keys user1 → A, B, C, user2 → X and user3 → Z are produced one record a batch, then a
//! filler record seals the last of them. Within a bounded wait, a read from offset 0 must
//! find C, X and Z (and the filler) at the offsets they were produced at, and only them;
//! after a `kill -9` and a restart, the same. A `compact,delete` topic is cleaned too, and a
//! `delete` topic is not.

mod common;

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use common::{create_topic, fetch_at, produce, Client, Node};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const SETTINGS: &[&str] = &["log.cleaner.backoff.ms=100"];

/// One record, `key` → `value`, in a batch of its own.
fn keyed(key: &str, value: &str) -> Bytes {
    let record = Record {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        delete_horizon: false,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: Some(Bytes::from(key.to_string())),
        value: Some(Bytes::from(value.to_string())),
        headers: Default::default(),
    };
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &[record], &options).expect("batch encodes");
    out.freeze()
}

/// Every record of partition 0 of `topic` below its high watermark, as (offset, key, value),
/// following the gaps compaction leaves.
fn read_records(client: &mut Client, topic: &str) -> Vec<(i64, String, String)> {
    let text = |bytes: Option<Bytes>| String::from_utf8(bytes.unwrap_or_default().to_vec());
    let mut out = Vec::new();
    let mut offset = 0i64;
    for _ in 0..1_000 {
        let Some(mut records) = fetch_at(client, topic, 0, offset) else {
            return out;
        };
        while records.has_remaining() {
            let set = RecordBatchDecoder::decode(&mut records).expect("stored batches decode");
            let from = offset;
            for record in set.records.into_iter().filter(|r| r.offset >= from) {
                offset = record.offset + 1;
                let (key, value) = (text(record.key), text(record.value));
                out.push((record.offset, key.expect("utf-8"), value.expect("utf-8")));
            }
        }
    }
    panic!("reading {topic} did not end");
}

fn record(offset: i64, key: &str, value: &str) -> (i64, String, String) {
    (offset, key.to_string(), value.to_string())
}

/// user1 → A, B, C; user2 → X; user3 → Z; then the filler that seals them.
fn produce_users(client: &mut Client, topic: &str) {
    let records = [
        ("user1", "A"),
        ("user2", "X"),
        ("user1", "B"),
        ("user1", "C"),
        ("user3", "Z"),
        ("filler", "-"),
    ];
    for (offset, (key, value)) in records.into_iter().enumerate() {
        assert_eq!(
            produce(client, topic, 0, keyed(key, value), 1),
            (0, offset as i64)
        );
    }
}

fn latest() -> Vec<(i64, String, String)> {
    vec![
        record(1, "user2", "X"),
        record(3, "user1", "C"),
        record(4, "user3", "Z"),
        record(5, "filler", "-"),
    ]
}

/// Waits (bounded) until `topic` reads as `expected`; what it read last.
fn wait_for(
    client: &mut Client,
    topic: &str,
    expected: &[(i64, String, String)],
) -> Vec<(i64, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let records = read_records(client, topic);
        if records == expected || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_compacted_topic_keeps_the_latest_value_of_each_key() {
    let node = Node::start(SETTINGS);
    let mut client = node.connect();
    let small = [("segment.bytes", "100"), ("segment.ms", "100")];
    let topics = [
        ("users", "compact"),
        ("users-both", "compact,delete"),
        ("users-delete", "delete"),
    ];
    for (topic, policy) in topics {
        let mut configs = small.to_vec();
        configs.push(("cleanup.policy", policy));
        // The harness's records are from November 2023: keep them from retention.ms.
        configs.push(("retention.ms", "-1"));
        create_topic(&mut client, topic, 1, &configs);
        produce_users(&mut client, topic);
    }
    assert_eq!(wait_for(&mut client, "users", &latest()), latest());
    assert_eq!(wait_for(&mut client, "users-both", &latest()), latest());
    assert_eq!(
        read_records(&mut client, "users-delete").len(),
        6,
        "not compacted"
    );

    let node = node.kill().restart(SETTINGS);
    let mut client = node.connect();
    assert_eq!(
        read_records(&mut client, "users"),
        latest(),
        "after a restart"
    );
    assert_eq!(
        produce(&mut client, "users", 0, keyed("user2", "Y"), 1),
        (0, 6)
    );
}
