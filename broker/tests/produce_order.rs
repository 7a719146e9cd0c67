//! One connection's produce requests are stored in the order they were sent, on every path:
//! the partition on the connection's own shard and the one on the other shard, requests
//! naming one partition or several, with the partitions' write queues full.
//!
//! Method: a real two-shard node whose write queues hold little (`log.write.buffer.bytes` =
//! 64 KiB, so eight of them = 512 KiB outside the stage, and a stage of 1 MiB per shard),
//! a topic with a partition on each shard, and one
//! connection that keeps a window of pipelined Produce requests in flight, batches of 1 KiB
//! to 1 MiB (each a single record carrying its sequence number). Most appends find the queue
//! full and wait for room, which is where a later request used to overtake a waiting one.
//! Every partition is then read back from offset 0 and its sequence numbers must be exactly
//! the ones sent to it, in the order sent, one batch at a time.

mod common;

use std::collections::HashMap;

use bytes::Bytes;
use common::{batch, Node};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "ordered";
const PARTITIONS: i32 = 4;
const REQUESTS: usize = 360;
/// Requests written before the first answer is read (the node handles 32 at once).
const WINDOW: usize = 24;

fn name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// Sizes from 1 KiB to 1 MiB, spread without a pattern the queue could fall into.
fn value_bytes(sequence: u64) -> usize {
    let spread = sequence.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44; // 0 .. 2^20
    (1 << 10).max(spread as usize % (1 << 20))
}

fn record(sequence: u64) -> Bytes {
    let mut value = vec![b'x'; value_bytes(sequence)];
    value[..8].copy_from_slice(&sequence.to_be_bytes());
    batch(&[&value])
}

/// The partitions request `index` names: one partition, or every one.
fn targets(index: usize) -> Vec<i32> {
    if index % 5 == 4 {
        (0..PARTITIONS).collect()
    } else {
        vec![(index % PARTITIONS as usize) as i32]
    }
}

#[test]
fn pipelined_requests_are_stored_in_the_order_sent_on_both_shards() {
    let node = Node::start(&["log.write.buffer.bytes=65536", "log.stage.bytes=1048576"]);
    let owners: Vec<usize> = (0..PARTITIONS)
        .map(|p| shard::shard_for(TOPIC, p, 2))
        .collect();
    assert!(
        owners.contains(&0) && owners.contains(&1),
        "the topic spans both shards: {owners:?}"
    );
    let mut client = node.connect();
    let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name())
        .with_num_partitions(PARTITIONS)
        .with_replication_factor(1)]);
    let ResponseKind::CreateTopics(created) = client.call(7, RequestKind::CreateTopics(create))
    else {
        unreachable!()
    };
    assert_eq!(created.topics[0].error_code, 0);

    let mut sent: HashMap<i32, Vec<u64>> = HashMap::new();
    let mut next_sequence = 0u64;
    let mut outstanding = 0;
    for index in 0..REQUESTS {
        let partitions = targets(index)
            .into_iter()
            .map(|p| {
                let sequence = next_sequence;
                next_sequence += 1;
                sent.entry(p).or_default().push(sequence);
                PartitionProduceData::default()
                    .with_index(p)
                    .with_records(Some(record(sequence)))
            })
            .collect();
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name())
                .with_partition_data(partitions)]);
        client.send(ApiKey::Produce, 9, &RequestKind::Produce(request));
        outstanding += 1;
        if outstanding == WINDOW || index + 1 == REQUESTS {
            for _ in 0..outstanding {
                let ResponseKind::Produce(answer) = client.receive(ApiKey::Produce, 9) else {
                    unreachable!()
                };
                for partition in &answer.responses[0].partition_responses {
                    assert_eq!(partition.error_code, 0, "partition {}", partition.index);
                }
            }
            outstanding = 0;
        }
    }

    for partition in 0..PARTITIONS {
        let stored = read_sequences(&mut client, partition);
        assert_eq!(
            stored, sent[&partition],
            "partition {partition} (shard {}) holds the batches in the order sent",
            owners[partition as usize]
        );
    }
}

/// Every record's sequence number in `partition`, from offset 0, in offset order.
fn read_sequences(client: &mut common::Client, partition: i32) -> Vec<u64> {
    common::read_values(client, TOPIC, partition)
        .iter()
        .map(|value| u64::from_be_bytes(value[..8].try_into().expect("8 bytes")))
        .collect()
}
