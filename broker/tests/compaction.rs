//! Log compaction on a running node: a topic with `cleanup.policy=compact` keeps only the
//! latest value of each key, at its original offset.
//!
//! Method: a node whose cleaner runs every 100 ms; a compacted topic with 100-byte segments,
//! so that every produced batch rolls the one before it into a sealed, cleanable segment. The
//! keys user1 → A, B, C, user2 → X and user3 → Z are produced one record a batch, then a
//! filler record seals the last of them. Within a bounded wait, a read from offset 0 must
//! find C, X and Z (and the filler) at the offsets they were produced at, and only them;
//! after a `kill -9` and a restart, the same. A `compact,delete` topic is cleaned too, and a
//! `delete` topic is not. `__consumer_offsets` is compacted as well: six commits of one
//! group's offset, each rolled into a segment of its own, leave two records, and the
//! committed offset replays from them after a restart. A compacted topic refuses a batch
//! holding a record without key, naming those records (KIP-467). The cleaner's own settings
//! change at run time: a node whose cleaner sleeps for ten minutes cleans within seconds of
//! a cluster-wide `log.cleaner.backoff.ms=100` (with two cleanings at once and a rate limit),
//! and refuses `log.cleaner.threads=0` and a change of `log.cleaner.enable`.

mod common;

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use common::{
    alter_resource, commit_offset, committed_offset, create_topic, fetch_at, produce, Client, Node,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const SETTINGS: &[&str] = &["log.cleaner.backoff.ms=100"];

/// One record, `key` → `value`, in a batch of its own.
fn keyed(key: &str, value: &str) -> Bytes {
    batch_of(&[(Some(key), value)], Compression::None)
}

/// One batch of the records `key → value` (`None`: no key), compressed with `compression`.
fn batch_of(records: &[(Option<&str>, &str)], compression: Compression) -> Bytes {
    let records: Vec<Record> = (0..)
        .zip(records)
        .map(|(offset, &(key, value))| record_of(offset, key, value))
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("batch encodes");
    out.freeze()
}

fn record_of(offset: i64, key: Option<&str>, value: &str) -> Record {
    Record {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        delete_horizon: false,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: key.map(|key| Bytes::from(key.to_string())),
        value: Some(Bytes::from(value.to_string())),
        headers: Default::default(),
    }
}

/// Every record of partition 0 of `topic` below its high watermark, as (offset, key, value),
/// following the gaps compaction leaves.
fn read_raw(client: &mut Client, topic: &str) -> Vec<(i64, Bytes, Bytes)> {
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
                let (key, value) = (
                    record.key.unwrap_or_default(),
                    record.value.unwrap_or_default(),
                );
                out.push((record.offset, key, value));
            }
        }
    }
    panic!("reading {topic} did not end");
}

/// As [`read_raw`], with keys and values as text.
fn read_records(client: &mut Client, topic: &str) -> Vec<(i64, String, String)> {
    let text = |bytes: Bytes| String::from_utf8(bytes.to_vec()).expect("utf-8");
    read_raw(client, topic)
        .into_iter()
        .map(|(offset, key, value)| (offset, text(key), text(value)))
        .collect()
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

#[test]
fn the_cleaners_settings_change_at_run_time() {
    let node = Node::start(&["log.cleaner.backoff.ms=600000"]);
    let mut client = node.connect();
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "100"),
        ("segment.ms", "100"),
        ("retention.ms", "-1"),
    ];
    for topic in ["users", "users-too"] {
        create_topic(&mut client, topic, 1, &configs);
        produce_users(&mut client, topic);
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        read_records(&mut client, "users").len(),
        6,
        "not cleaned yet"
    );

    const SET: i8 = 0;
    const BROKER: i8 = 4;
    let refused = |client: &mut Client, key, value| {
        alter_resource(client, (BROKER, ""), &[(key, SET, Some(value))], false)
    };
    assert_eq!(
        refused(&mut client, "log.cleaner.threads", "0"),
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(
        refused(&mut client, "log.cleaner.enable", "false"),
        ResponseError::InvalidRequest.code()
    );
    let ops = [
        ("log.cleaner.backoff.ms", SET, Some("100")),
        ("log.cleaner.threads", SET, Some("2")),
        ("log.cleaner.io.max.bytes.per.second", SET, Some("1000000")),
    ];
    assert_eq!(alter_resource(&mut client, (BROKER, ""), &ops, false), 0);
    assert_eq!(wait_for(&mut client, "users", &latest()), latest());
    assert_eq!(wait_for(&mut client, "users-too", &latest()), latest());
}

/// A standalone consumer's commit (generation -1) of `offset` for partition 0 of `topic`.
fn commit(client: &mut Client, group: &str, topic: &str, offset: i64) {
    assert_eq!(
        commit_offset(client, group, topic, 0, offset),
        0,
        "commit {offset}"
    );
}

fn committed(client: &mut Client, group: &str, topic: &str) -> i64 {
    committed_offset(client, group, topic, 0).1
}

#[test]
fn consumer_offsets_are_cleaned_too() {
    // Segments of every topic roll after 50 ms; one offsets partition.
    let settings = [
        SETTINGS[0],
        "log.roll.ms=50",
        "offsets.topic.num.partitions=1",
    ];
    let node = Node::start(&settings);
    let mut client = node.connect();
    create_topic(&mut client, "events", 1, &[]);
    // Each commit lands in a segment of its own: the next one rolls it.
    for offset in 0..6 {
        commit(&mut client, "standalone", "events", offset);
        std::thread::sleep(Duration::from_millis(60));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let kept = loop {
        let kept = read_raw(&mut client, "__consumer_offsets").len();
        if kept <= 2 || Instant::now() > deadline {
            break kept;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(kept, 2, "the latest sealed commit and the active one");
    let node = node.kill().restart(&settings);
    let mut client = node.connect();
    assert_eq!(
        committed(&mut client, "standalone", "events"),
        5,
        "replayed after cleaning"
    );
}

/// The whole answer to a Produce (v9) of `records` to partition 0 of `topic`.
fn produce_answer_of(
    client: &mut Client,
    topic: &str,
    records: Bytes,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    let request = common::produce_request(topic, 0, records, 1);
    let ResponseKind::Produce(mut answer) = client.call(9, RequestKind::Produce(request)) else {
        unreachable!()
    };
    answer.responses.remove(0).partition_responses.remove(0)
}

#[test]
fn a_compacted_topic_refuses_a_batch_with_a_record_without_key() {
    let node = Node::start(SETTINGS);
    let mut client = node.connect();
    create_topic(&mut client, "users", 1, &[("cleanup.policy", "compact")]);
    create_topic(
        &mut client,
        "both",
        1,
        &[("cleanup.policy", "compact,delete")],
    );
    create_topic(&mut client, "events", 1, &[]);
    let mixed = [(Some("a"), "1"), (None, "2"), (Some("b"), "3"), (None, "4")];
    // (Compressed batches are decoded first: storage tests keyless_records with every codec.)
    for topic in ["users", "both"] {
        let answer = produce_answer_of(&mut client, topic, batch_of(&mixed, Compression::None));
        assert_eq!(
            answer.error_code,
            kafka_protocol::error::ResponseError::InvalidRecord.code(),
            "{topic}"
        );
        let places: Vec<i32> = answer.record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(places, [1, 3], "{topic}: the records without key");
        let message = answer.error_message.expect("a message").to_string();
        assert!(message.contains("without key"), "{message}");
    }
    // Refused whole: nothing of it was stored, and a batch with every key lands at 0.
    let keyed_only = [(Some("a"), "1"), (Some("b"), "2")];
    let answer = produce_answer_of(
        &mut client,
        "users",
        batch_of(&keyed_only, Compression::None),
    );
    assert_eq!((answer.error_code, answer.base_offset), (0, 0));
    assert_eq!(
        read_records(&mut client, "users"),
        [record(0, "a", "1"), record(1, "b", "2")]
    );
    // A topic that only deletes takes records without key.
    let answer = produce_answer_of(&mut client, "events", batch_of(&mixed, Compression::None));
    assert_eq!((answer.error_code, answer.base_offset), (0, 0));
    assert!(answer.record_errors.is_empty());
}
