//! What a partition knows of its idempotent producers survives a crash and a restart: a
//! retry of a batch acknowledged before `kill -9` is still recognised and not stored again,
//! also when the batches lie in sealed segments and the state comes from a snapshot; and an
//! idle producer is forgotten after `producer.id.expiration.ms`.
//!
//! Method: a real node; idempotent batches acknowledged with acks=1 and acks=all; the node is
//! killed with SIGKILL (or stopped with SIGTERM) and restarted on the same data directory;
//! the same batches are sent again, and the partition is read back from offset 0. With
//! 256-byte segments every two or three batches roll a segment, so the producer state is
//! rebuilt from a `.snapshot` file written at a roll plus the batches after it.

mod common;

use bytes::Bytes;
use common::{
    create_topic, idempotent_batch, init_producer_id, produce, read_values, Node, Producer,
};

const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

fn producer(id: i64, base_sequence: i32) -> Producer {
    Producer {
        id,
        epoch: 0,
        base_sequence,
    }
}

fn batch(id: i64, sequence: i32) -> Bytes {
    idempotent_batch(producer(id, sequence), &[format!("v{sequence}").as_bytes()])
}

fn expected(count: i32) -> Vec<Bytes> {
    (0..count).map(|s| Bytes::from(format!("v{s}"))).collect()
}

fn snapshot_files(dir: &std::path::Path, topic: &str, partition: i32) -> usize {
    common::partition_files(dir, topic, partition, ".snapshot")
}

#[test]
fn an_acknowledged_batch_is_recognised_after_kill_9() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(&mut client, "crashed", 2, &[]);
    let ids: Vec<i64> = (0..2).map(|_| init_producer_id(&mut client)).collect();
    for (partition, &id) in ids.iter().enumerate() {
        let partition = partition as i32;
        assert_eq!(
            produce(&mut client, "crashed", partition, batch(id, 0), 1),
            (0, 0)
        );
        assert_eq!(
            produce(&mut client, "crashed", partition, batch(id, 1), -1),
            (0, 1)
        );
    }
    let node = node.kill().restart(&[]);
    let mut client = node.connect();
    for (partition, &id) in ids.iter().enumerate() {
        let partition = partition as i32;
        for sequence in 0..2 {
            let answer = produce(&mut client, "crashed", partition, batch(id, sequence), -1);
            assert_eq!(answer, (0, i64::from(sequence)), "retry of {sequence}");
        }
        let (error, _) = produce(&mut client, "crashed", partition, batch(id, 3), 1);
        assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert_eq!(
            produce(&mut client, "crashed", partition, batch(id, 2), 1),
            (0, 2)
        );
        assert_eq!(read_values(&mut client, "crashed", partition), expected(3));
    }
}

#[test]
fn retries_are_recognised_across_segment_rolls_snapshots_and_restarts() {
    const BATCHES: i32 = 12;
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(&mut client, "rolled", 1, &[("segment.bytes", "256")]);
    let id = init_producer_id(&mut client);
    for sequence in 0..BATCHES {
        let acks = if sequence % 2 == 0 { 1 } else { -1 };
        let answer = produce(&mut client, "rolled", 0, batch(id, sequence), acks);
        assert_eq!(answer, (0, i64::from(sequence)));
    }
    // Rolls are sealed (and their snapshots written) by the log's writer, after the answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while snapshot_files(&node.dir, "rolled", 0) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        snapshot_files(&node.dir, "rolled", 0) >= 1,
        "a roll wrote a snapshot"
    );
    let mut node = node.kill().restart(&[]);
    for restart in ["kill -9", "clean stop"] {
        let mut client = node.connect();
        // The last five batches (spread over several segments) are retries; older ones not.
        for sequence in BATCHES - 5..BATCHES {
            let answer = produce(&mut client, "rolled", 0, batch(id, sequence), 1);
            assert_eq!(
                answer,
                (0, i64::from(sequence)),
                "after {restart}: {sequence}"
            );
        }
        let (error, _) = produce(&mut client, "rolled", 0, batch(id, BATCHES - 6), 1);
        assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER, "after {restart}");
        assert_eq!(read_values(&mut client, "rolled", 0), expected(BATCHES));
        assert!(
            snapshot_files(&node.dir, "rolled", 0) <= 2,
            "old snapshots go"
        );
        node = node.stop().restart(&[]);
    }
    let mut client = node.connect();
    let answer = produce(&mut client, "rolled", 0, batch(id, BATCHES), 1);
    assert_eq!(answer, (0, i64::from(BATCHES)));
    assert_eq!(read_values(&mut client, "rolled", 0), expected(BATCHES + 1));
}

#[test]
fn idle_producers_expire_and_may_then_start_anywhere() {
    let settings = [
        "producer.id.expiration.ms=1000",
        "producer.id.expiration.check.interval.ms=100",
    ];
    let node = Node::start(&settings);
    let mut client = node.connect();
    create_topic(&mut client, "expiring", 1, &[]);
    let id = init_producer_id(&mut client);
    let first = idempotent_batch(producer(id, 0), &[b"a".as_slice()]);
    assert_eq!(produce(&mut client, "expiring", 0, first, 1), (0, 0));
    let later = idempotent_batch(producer(id, 7), &[b"b".as_slice()]);
    let (error, _) = produce(&mut client, "expiring", 0, later.clone(), 1);
    assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER, "remembered at first");
    // Bounded wait: expiry after 1 s, checked every 100 ms.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let answer = loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let answer = produce(&mut client, "expiring", 0, later.clone(), 1);
        if answer.0 == 0 || std::time::Instant::now() > deadline {
            break answer;
        }
        assert_eq!(answer.0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    };
    assert_eq!(answer, (0, 1), "forgotten after producer.id.expiration.ms");
    assert_eq!(
        read_values(&mut client, "expiring", 0),
        vec![Bytes::from("a"), Bytes::from("b")]
    );
}
