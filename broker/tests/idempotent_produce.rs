//! An idempotent producer's batches are checked as Kafka's broker checks them (2.5+,
//! KIP-360): a retry is stored once and answered with the original offsets, a gap or a batch
//! older than the last five gets OUT_OF_ORDER_SEQUENCE_NUMBER, a stale epoch
//! INVALID_PRODUCER_EPOCH, a new epoch must start at sequence 0, and sequences wrap.
//!
//! Method: a real two-shard node, producer ids from InitProducerId, batches built with the
//! `kafka-protocol` codecs and sent as raw Produce requests; after each scenario the
//! partition is read back from offset 0, so a batch stored twice (or not at all) shows. The
//! topic has a partition on each shard, and each scenario runs on both.

mod common;

use bytes::Bytes;
use common::{
    create_topic, idempotent_batch, init_producer_id, produce, produce_answer, produce_request,
    read_values, Client, Node, Producer,
};
use kafka_protocol::messages::{ApiKey, RequestKind};

const TOPIC: &str = "idempotent";
const PARTITIONS: i32 = 2;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_RECORD: i16 = 87;

/// A node with the topic, a client, and a partition on each shard (0 and 1 are on
/// different shards of two).
fn setup() -> (Node, Client) {
    let owners: Vec<usize> = (0..PARTITIONS)
        .map(|p| shard::shard_for(TOPIC, p, 2))
        .collect();
    assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(&mut client, TOPIC, PARTITIONS, &[]);
    (node, client)
}

fn producer(id: i64, epoch: i16, base_sequence: i32) -> Producer {
    Producer {
        id,
        epoch,
        base_sequence,
    }
}

fn values(texts: &[&str]) -> Vec<Bytes> {
    texts.iter().map(|t| Bytes::from(t.to_string())).collect()
}

/// A batch of `texts` from `producer`.
fn records(producer: Producer, texts: &[&str]) -> Bytes {
    let values: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
    idempotent_batch(producer, &values)
}

#[test]
fn a_retried_batch_is_stored_once_and_answered_with_the_original_offsets() {
    let (_node, mut client) = setup();
    for partition in 0..PARTITIONS {
        let id = init_producer_id(&mut client);
        let first = records(producer(id, 0, 0), &["a", "b", "c"]);
        assert_eq!(
            produce(&mut client, TOPIC, partition, first.clone(), -1),
            (0, 0)
        );
        // Retries at every acks level (acks=0 is never answered: checked by the read-back).
        assert_eq!(
            produce(&mut client, TOPIC, partition, first.clone(), 1),
            (0, 0)
        );
        assert_eq!(
            produce(&mut client, TOPIC, partition, first.clone(), -1),
            (0, 0)
        );
        let request = produce_request(TOPIC, partition, first.clone(), 0);
        client.send_unanswered(ApiKey::Produce, 9, &RequestKind::Produce(request));
        // The original and its retry in flight together: the retry is answered only once the
        // original is written, with the original's offset.
        let second = records(producer(id, 0, 3), &["d"]);
        for acks in [1, -1] {
            for _ in 0..2 {
                let request = produce_request(TOPIC, partition, second.clone(), acks);
                client.send(ApiKey::Produce, 9, &RequestKind::Produce(request));
            }
        }
        for _ in 0..4 {
            assert_eq!(produce_answer(&mut client), (0, 3));
        }
        let third = records(producer(id, 0, 4), &["e"]);
        assert_eq!(produce(&mut client, TOPIC, partition, third, 1), (0, 4));
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            values(&["a", "b", "c", "d", "e"]),
            "partition {partition}"
        );
    }
}

#[test]
fn a_sequence_gap_is_out_of_order_and_stores_nothing() {
    let (_node, mut client) = setup();
    for partition in 0..PARTITIONS {
        let id = init_producer_id(&mut client);
        let first = records(producer(id, 0, 0), &["a", "b"]);
        assert_eq!(produce(&mut client, TOPIC, partition, first, 1), (0, 0));
        let gap = records(producer(id, 0, 3), &["lost"]);
        let (error, base_offset) = produce(&mut client, TOPIC, partition, gap, 1);
        assert_eq!((error, base_offset), (OUT_OF_ORDER_SEQUENCE_NUMBER, -1));
        let next = records(producer(id, 0, 2), &["c"]);
        assert_eq!(produce(&mut client, TOPIC, partition, next, 1), (0, 2));
        // A producer id without a sequence number is no idempotent batch at all.
        let unsequenced = records(producer(id, 0, -1), &["x"]);
        let (error, _) = produce(&mut client, TOPIC, partition, unsequenced, 1);
        assert_eq!(error, INVALID_RECORD);
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            values(&["a", "b", "c"])
        );
    }
}

#[test]
fn a_stale_epoch_is_fenced_and_a_new_epoch_starts_at_zero() {
    let (_node, mut client) = setup();
    for partition in 0..PARTITIONS {
        let id = init_producer_id(&mut client);
        let send = |client: &mut Client, epoch, sequence, text: &str| {
            let batch = records(producer(id, epoch, sequence), &[text]);
            produce(client, TOPIC, partition, batch, 1)
        };
        assert_eq!(send(&mut client, 0, 0, "a"), (0, 0));
        assert_eq!(send(&mut client, 0, 1, "b"), (0, 1));
        // The client bumped its epoch (KIP-360): only sequence 0 may start it.
        let (error, _) = send(&mut client, 1, 2, "no");
        assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert_eq!(send(&mut client, 1, 0, "c"), (0, 2));
        // The old epoch is fenced, its retries included.
        let (error, _) = send(&mut client, 0, 2, "no");
        assert_eq!(error, INVALID_PRODUCER_EPOCH);
        let (error, _) = send(&mut client, 0, 1, "b");
        assert_eq!(error, INVALID_PRODUCER_EPOCH);
        assert_eq!(send(&mut client, 1, 1, "d"), (0, 3));
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            values(&["a", "b", "c", "d"])
        );
    }
}

#[test]
fn only_the_last_five_batches_are_recognised_as_retries() {
    let (_node, mut client) = setup();
    for partition in 0..PARTITIONS {
        let id = init_producer_id(&mut client);
        let batch = |sequence: i32| {
            let text = format!("v{sequence}");
            records(producer(id, 0, sequence), &[text.as_str()])
        };
        for sequence in 0..7 {
            let answer = produce(&mut client, TOPIC, partition, batch(sequence), 1);
            assert_eq!(answer, (0, i64::from(sequence)));
        }
        for sequence in 2..7 {
            let answer = produce(&mut client, TOPIC, partition, batch(sequence), 1);
            assert_eq!(
                answer,
                (0, i64::from(sequence)),
                "retry of sequence {sequence}"
            );
        }
        for sequence in 0..2 {
            let (error, _) = produce(&mut client, TOPIC, partition, batch(sequence), 1);
            assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence {sequence}");
        }
        let expected: Vec<String> = (0..7).map(|s| format!("v{s}")).collect();
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            values(&expected)
        );
    }
}

#[test]
fn an_unknown_producer_starts_anywhere_and_sequences_wrap_at_i32_max() {
    let (_node, mut client) = setup();
    for partition in 0..PARTITIONS {
        let id = init_producer_id(&mut client);
        // Sequences i32::MAX - 1, i32::MAX, 0: the batch straddles the wrap.
        let straddling = records(producer(id, 0, i32::MAX - 1), &["a", "b", "c"]);
        let answer = produce(&mut client, TOPIC, partition, straddling.clone(), 1);
        assert_eq!(answer, (0, 0));
        let after = records(producer(id, 0, 1), &["d"]);
        assert_eq!(produce(&mut client, TOPIC, partition, after, 1), (0, 3));
        assert_eq!(
            produce(&mut client, TOPIC, partition, straddling, 1),
            (0, 0)
        );
        let behind = records(producer(id, 0, 0), &["no"]);
        let (error, _) = produce(&mut client, TOPIC, partition, behind, 1);
        assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert_eq!(
            read_values(&mut client, TOPIC, partition),
            values(&["a", "b", "c", "d"])
        );
    }
}
