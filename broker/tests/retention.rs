//! Retention deletes what a topic's `retention.bytes` / `retention.ms` let go, and nothing of
//! a topic whose cleanup policy does not delete.
//!
//! Method: a real node that checks retention every 100 ms; topics with 4 KiB segments, each
//! given 40 batches of about 500 bytes. With `retention.bytes=8192`, the earliest offset
//! (ListOffsets) must move past 0 within a bounded wait, a fetch at 0 must get
//! OFFSET_OUT_OF_RANGE while one at the new start returns the records from there, and the
//! data directory must hold only a few segments; the same limit with `cleanup.policy=compact`
//! keeps offset 0. Under the default `retention.ms` (7 days), records stamped two years ago
//! all go and the log keeps its end offset. Both starts must survive a `kill -9`.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, earliest_offset, fetch_values as fetch, Client, Node};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const SETTINGS: &[&str] = &["log.retention.check.interval.ms=100"];
const BATCHES: i64 = 40;
const OFFSET_OUT_OF_RANGE: i16 = 1;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// A topic with 4 KiB segments and `settings` on top.
fn create(client: &mut Client, topic: &str, settings: &[(&str, &str)]) {
    let mut configs = vec![("segment.bytes", "4096")];
    configs.extend_from_slice(settings);
    common::create_topic(client, topic, 1, &configs);
}

/// Produces one batch; its base offset.
fn produce(client: &mut Client, topic: &str, value: &[u8]) -> i64 {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[value])))])]);
    let ResponseKind::Produce(answer) = client.call(9, RequestKind::Produce(request)) else {
        unreachable!()
    };
    let partition = &answer.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0);
    partition.base_offset
}

/// Every record value from `offset` to `end`, fetched a segment at a time.
fn fetch_to(client: &mut Client, topic: &str, mut offset: i64, end: i64) -> Vec<Bytes> {
    let mut out = Vec::new();
    while offset < end {
        let (error, records) = fetch(client, topic, offset);
        assert_eq!(error, 0, "fetch at {offset}");
        assert!(!records.is_empty(), "fetch at {offset} below the end {end}");
        offset += records.len() as i64;
        out.extend(records);
    }
    out
}

fn value(i: i64) -> Vec<u8> {
    let mut value = format!("record-{i:04}-").into_bytes();
    value.resize(500, b'.');
    value
}

fn segment_files(node: &Node, topic: &str) -> usize {
    common::partition_files(&node.dir, topic, 0, ".log")
}

#[test]
fn retention_bytes_deletes_old_segments_of_delete_topics_only() {
    let node = Node::start(SETTINGS);
    let mut client = node.connect();
    // The harness's records carry timestamps of November 2023.
    let by_size = [("retention.bytes", "8192"), ("retention.ms", "-1")];
    create(&mut client, "aging", &by_size);
    create(
        &mut client,
        "kept",
        &[("cleanup.policy", "compact"), by_size[0]],
    );
    create(&mut client, "expired", &[]);
    for i in 0..BATCHES {
        for topic in ["aging", "kept", "expired"] {
            produce(&mut client, topic, &value(i));
        }
    }

    // Passes that ran while the batches were still arriving deleted less: wait for the pass
    // that sees them all (every 100 ms), and for its files to go (the log start moves first).
    let deadline = Instant::now() + Duration::from_secs(20);
    let start = loop {
        let start = earliest_offset(&mut client, "aging");
        let removed = segment_files(&node, "aging") <= 3;
        if (start >= 21 && removed) || Instant::now() > deadline {
            break start;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // About 560 bytes a batch, 7 to a 4 KiB segment: 40 batches make 6 segments, and
    // keeping 8 KiB means keeping the last 2 or 3 of them.
    assert!(
        (21..BATCHES).contains(&start),
        "earliest offset {start} after retention"
    );
    assert!(segment_files(&node, "aging") <= 3);
    let (error, records) = fetch(&mut client, "aging", 0);
    assert_eq!(error, OFFSET_OUT_OF_RANGE);
    assert!(records.is_empty());
    let expected: Vec<Bytes> = (start..BATCHES).map(|i| Bytes::from(value(i))).collect();
    assert!(fetch_to(&mut client, "aging", start, BATCHES) == expected);

    assert_eq!(earliest_offset(&mut client, "kept"), 0);
    let (error, records) = fetch(&mut client, "kept", 0);
    assert_eq!(error, 0);
    assert_eq!(records.first(), Some(&Bytes::from(value(0))));

    // Everything in "expired" is older than the default 7 days: all of it goes, and the
    // log keeps its end offset.
    let deadline = Instant::now() + Duration::from_secs(20);
    while earliest_offset(&mut client, "expired") < BATCHES && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(earliest_offset(&mut client, "expired"), BATCHES);
    assert_eq!(fetch(&mut client, "expired", BATCHES), (0, Vec::new()));

    let node = node.kill().restart(SETTINGS);
    let mut client = node.connect();
    assert_eq!(earliest_offset(&mut client, "aging"), start);
    assert!(fetch_to(&mut client, "aging", start, BATCHES) == expected);
    assert_eq!(earliest_offset(&mut client, "expired"), BATCHES);
    assert_eq!(produce(&mut client, "expired", b"later"), BATCHES);
}
