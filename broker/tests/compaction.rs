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
//! committed offset replays from them after a restart.

mod common;

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use common::{create_topic, fetch_at, produce, topic_name, Client, Node};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetFetchRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
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

/// A standalone consumer's commit (generation -1) of `offset` for partition 0 of `topic`.
fn commit(client: &mut Client, group: &str, topic: &str, offset: i64) {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let ResponseKind::OffsetCommit(answer) = client.call(8, RequestKind::OffsetCommit(request))
    else {
        unreachable!()
    };
    assert_eq!(
        answer.topics[0].partitions[0].error_code, 0,
        "commit {offset}"
    );
}

fn committed(client: &mut Client, group: &str, topic: &str) -> i64 {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(vec![0])]));
    let ResponseKind::OffsetFetch(answer) = client.call(7, RequestKind::OffsetFetch(request))
    else {
        unreachable!()
    };
    answer.topics[0].partitions[0].committed_offset
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
