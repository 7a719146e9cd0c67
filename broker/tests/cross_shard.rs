//! Requests that span shards are split per owner and merged in request order, pipelined
//! requests are answered in order, and a waiting fetch wakes as soon as data lands.
//!
//! Method: a real two-shard node; one topic with 8 partitions (placement spreads them over
//! both shards). Produce and Fetch requests name the partitions in a scrambled order with an
//! unknown partition in the middle; answers must follow the request's order exactly. Then
//! several requests are written back to back before any answer is read (the harness checks
//! each answer's correlation id). Last, a fetch parked at the log end with a long
//! `max_wait_ms` must return soon after another connection produces, and one that asks for
//! more bytes (`min_bytes`) than there are waits out its `max_wait_ms` without spending the
//! node's CPU, while one that names a topic id the node does not know is answered at once
//! with UNKNOWN_TOPIC_ID, as Kafka answers any error, beside partitions that would wait.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, values, Node};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "spread";
const ORDER: [i32; 9] = [5, 0, 7, 99, 2, 1, 6, 3, 4]; // 99 does not exist

fn name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// Creates the topic; returns its id.
fn create(client: &mut common::Client) -> uuid::Uuid {
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name())
        .with_num_partitions(8)
        .with_replication_factor(1)]);
    let ResponseKind::CreateTopics(answer) = client.call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.topics[0].error_code, 0);
    answer.topics[0].topic_id
}

fn produce_request(round: usize) -> ProduceRequest {
    let partitions = ORDER
        .iter()
        .map(|&p| {
            let value = format!("p{p}-r{round}");
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(batch(&[value.as_bytes()])))
        })
        .collect();
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name())
            .with_partition_data(partitions)])
}

fn fetch_request(wanted: &[i32], offsets: impl Fn(i32) -> i64, max_wait_ms: i32) -> FetchRequest {
    let partitions = wanted
        .iter()
        .map(|&p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(offsets(p))
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(16 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name())
            .with_partitions(partitions)])
}

#[test]
fn split_merge_pipeline_and_wake() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create(&mut client);

    // Pipelined: three produce requests written before any answer is read.
    for round in 0..3 {
        client.send(
            ApiKey::Produce,
            9,
            &RequestKind::Produce(produce_request(round)),
        );
    }
    for round in 0..3 {
        let ResponseKind::Produce(answer) = client.receive(ApiKey::Produce, 9) else {
            unreachable!()
        };
        let partitions = &answer.responses[0].partition_responses;
        let answered: Vec<i32> = partitions.iter().map(|p| p.index).collect();
        assert_eq!(answered, ORDER, "answers follow the request's order");
        for partition in partitions {
            let expected_error = if partition.index == 99 { 3 } else { 0 };
            assert_eq!(
                partition.error_code, expected_error,
                "partition {}",
                partition.index
            );
            if expected_error == 0 {
                assert_eq!(partition.base_offset, round as i64, "one batch per round");
            }
        }
    }

    let ResponseKind::Fetch(answer) =
        client.call(12, RequestKind::Fetch(fetch_request(&ORDER, |_| 0, 100)))
    else {
        unreachable!()
    };
    let partitions = &answer.responses[0].partitions;
    let answered: Vec<i32> = partitions.iter().map(|p| p.partition_index).collect();
    assert_eq!(answered, ORDER);
    for partition in partitions {
        if partition.partition_index == 99 {
            assert_eq!(partition.error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
            continue;
        }
        let expected: Vec<Bytes> = (0..3)
            .map(|round| Bytes::from(format!("p{}-r{round}", partition.partition_index)))
            .collect();
        let records = partition.records.as_ref().expect("records");
        assert_eq!(
            values(records),
            expected,
            "partition {}",
            partition.partition_index
        );
        assert_eq!(partition.high_watermark, 3);
    }

    // A fetch parked at the log end wakes when another connection produces.
    let port = node.port;
    let waiter = std::thread::spawn(move || {
        let mut client = common::Client::connect(port);
        // An error answers a fetch at once, so the parked fetch names existing partitions.
        let existing: Vec<i32> = ORDER.iter().copied().filter(|p| *p != 99).collect();
        let started = Instant::now();
        let ResponseKind::Fetch(answer) = client.call(
            12,
            RequestKind::Fetch(fetch_request(&existing, |_| 3, 20_000)),
        ) else {
            unreachable!()
        };
        (started.elapsed(), answer)
    });
    std::thread::sleep(Duration::from_millis(300));
    let single = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(6)
                .with_records(Some(batch(&[b"late".as_slice()])))])]);
    let ResponseKind::Produce(answer) = client.call(9, RequestKind::Produce(single)) else {
        unreachable!()
    };
    assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
    let (waited, answer) = waiter.join().expect("waiter thread");
    assert!(
        waited < Duration::from_secs(10),
        "a parked fetch returns when data lands, not at max_wait_ms (waited {waited:?})"
    );
    let woken = answer.responses[0]
        .partitions
        .iter()
        .find(|p| p.partition_index == 6);
    let records = woken
        .and_then(|p| p.records.as_ref())
        .expect("partition 6 has data");
    assert_eq!(values(records), vec![Bytes::from_static(b"late")]);
}

/// A fetch's max_bytes is a budget its reads share: partitions at their log end cost nothing,
/// so the first partition with data still answers (at least one whole batch, KIP-74), and the
/// partitions after it answer their offsets without records.
#[test]
fn a_small_fetch_budget_reaches_the_first_partition_with_data() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create(&mut client);
    for round in 0..3 {
        let ResponseKind::Produce(answer) =
            client.call(9, RequestKind::Produce(produce_request(round)))
        else {
            unreachable!()
        };
        assert_eq!(answer.responses[0].partition_responses.len(), ORDER.len());
    }
    // 5, 0 and 7 are read from their log end (nothing to send); 99 does not exist.
    let at_end = [5, 0, 7];
    let offsets = |p: i32| if at_end.contains(&p) { 3 } else { 0 };
    let request = fetch_request(&ORDER, offsets, 0).with_max_bytes(1);
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let partitions = &answer.responses[0].partitions;
    let answered: Vec<i32> = partitions.iter().map(|p| p.partition_index).collect();
    assert_eq!(answered, ORDER);
    for partition in partitions {
        let got = partition.records.as_ref().map(values).unwrap_or_default();
        match partition.partition_index {
            99 => assert_eq!(partition.error_code, 3),
            2 => assert_eq!(got, vec![Bytes::from_static(b"p2-r0")], "one whole batch"),
            p => {
                assert_eq!(partition.error_code, 0, "partition {p}");
                assert!(got.is_empty(), "partition {p} is past the budget: {got:?}");
                assert_eq!(partition.high_watermark, 3, "partition {p}");
            }
        }
    }
}

/// User + system CPU seconds of process `pid` so far (`/proc/<pid>/stat`, USER_HZ ticks).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the node's stat");
    let after_name = &stat[stat.rfind(')').expect("stat format") + 1..];
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|field| field.parse::<u64>().expect("a tick count"))
        .sum();
    ticks as f64 / 100.0
}

#[test]
fn a_fetch_short_of_its_min_bytes_waits_without_spinning() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create(&mut client);
    let ResponseKind::Produce(answer) = client.call(9, RequestKind::Produce(produce_request(0)))
    else {
        unreachable!()
    };
    assert_eq!(answer.responses[0].partition_responses.len(), ORDER.len());
    // Every partition has one small batch at 0: far less than a megabyte, which no write
    // comes to complete, so the fetch is answered at its deadline with what there is.
    // (An unknown partition would answer at once with its error: only the real ones.)
    let existing: Vec<i32> = ORDER.iter().copied().filter(|&p| p != 99).collect();
    let wait = Duration::from_millis(2000);
    let request = fetch_request(&existing, |_| 0, wait.as_millis() as i32).with_min_bytes(1 << 20);
    let cpu_before = cpu_seconds(node.child.id());
    let started = Instant::now();
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let waited = started.elapsed();
    let cpu = cpu_seconds(node.child.id()) - cpu_before;
    assert!(
        waited >= wait - Duration::from_millis(50),
        "answered after {waited:?}"
    );
    let records = |answer: &FetchResponse| -> (usize, usize) {
        let partitions = &answer.responses[0].partitions;
        let count = partitions
            .iter()
            .map(|p| p.records.as_ref().map(values).unwrap_or_default().len())
            .sum();
        let bytes = partitions
            .iter()
            .map(|p| p.records.as_ref().map_or(0, Bytes::len))
            .sum();
        (count, bytes)
    };
    let (got, bytes) = records(&answer);
    assert_eq!(got, existing.len(), "one record from each partition");
    // Spinning (reading again and again while short of min_bytes) keeps a shard busy for
    // the whole wait: about 2 CPU-seconds. Waiting costs next to nothing.
    assert!(
        cpu < 0.5,
        "the node spent {cpu:.2} CPU-s on a {waited:?} wait"
    );

    // One byte more than there is: the next write, on any shard, completes the fetch.
    let request = fetch_request(&existing, |_| 0, 30_000).with_min_bytes(bytes as i32 + 1);
    let mut producer = node.connect();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let ResponseKind::Produce(answer) =
            producer.call(9, RequestKind::Produce(produce_request(1)))
        else {
            unreachable!()
        };
        assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
    });
    let started = Instant::now();
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let waited = started.elapsed();
    writer.join().expect("the producer");
    assert!(
        waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    assert!(records(&answer).0 > existing.len(), "with the new records");
}

#[test]
fn a_fetch_naming_an_unknown_topic_id_is_answered_at_once() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    let known = create(&mut client);
    let unknown = uuid::Uuid::from_u128(7);
    let topic = |id, partitions: &[i32]| {
        FetchTopic::default().with_topic_id(id).with_partitions(
            partitions
                .iter()
                .map(|&p| {
                    FetchPartition::default()
                        .with_partition(p)
                        .with_partition_max_bytes(1 << 20)
                })
                .collect(),
        )
    };
    // Every known partition is empty: alone, this fetch would wait out its 30 seconds. A
    // follower that names a topic its leader has not learnt yet sends such fetches.
    let request = FetchRequest::default()
        .with_max_wait_ms(30_000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![topic(known, &[0, 5]), topic(unknown, &[0])]);
    let started = Instant::now();
    let ResponseKind::Fetch(answer) = client.call(13, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "an error answers at once; answered after {waited:?}"
    );
    let errors: Vec<Vec<i16>> = answer
        .responses
        .iter()
        .map(|t| t.partitions.iter().map(|p| p.error_code).collect())
        .collect();
    assert_eq!(
        errors,
        [vec![0, 0], vec![100]],
        "UNKNOWN_TOPIC_ID for the unknown id only"
    );
}
