//! Replicated partitions on three nodes (RF 3, `min.insync.replicas=2`): followers fetch
//! from their leaders, acks=all is answered once every ISR member holds the batch, and
//! losing brokers loses no acknowledged record.
//! - A follower that hangs (SIGSTOP) holds acks=all answers back until it is fenced and
//!   leaves the ISR; an answered record is visible at once (the high watermark passed it).
//! - kill -9 of a leader moves its leaderships to the ISR member left, which holds every
//!   acknowledged record; with one replica in sync, acks=all is refused with
//!   NOT_ENOUGH_REPLICAS while acks=1 still works.
//!
//! Every wait is bounded.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::cluster::{wait_for, Cluster};
use common::{batch, metadata, produce, read_values, topic_name, Client, Stopped};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "replicated";
const PARTITIONS: i32 = 3;

/// CreateTopics of [`TOPIC`]: 3 partitions, 3 replicas, `min.insync.replicas=2`.
fn create(client: &mut Client) -> i16 {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(TOPIC))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(3)
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("min.insync.replicas"))
                .with_value(Some(StrBytes::from_static_str("2")))])]);
    let ResponseKind::CreateTopics(answer) = client.call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    answer.topics[0].error_code
}

/// Partition → (leader, ISR), as node `id` answers.
fn states(cluster: &Cluster, id: i32) -> BTreeMap<i32, (i32, Vec<i32>)> {
    let answer = metadata(&mut cluster.client(id), &[TOPIC]);
    let Some(topic) = answer.topics.first() else {
        return BTreeMap::new();
    };
    topic
        .partitions
        .iter()
        .map(|p| {
            let mut isr: Vec<i32> = p.isr_nodes.iter().map(|id| id.0).collect();
            isr.sort_unstable();
            (p.partition_index, (p.leader_id.0, isr))
        })
        .collect()
}

/// Once every running node agrees that no partition is led by or in sync on a node not in
/// `alive`, and each has a leader: partition → leader.
fn leaders_among(cluster: &Cluster, alive: &[i32]) -> BTreeMap<i32, i32> {
    wait_for(|| {
        let seen: Vec<_> = cluster
            .nodes
            .keys()
            .map(|&id| states(cluster, id))
            .collect();
        let first = seen[0].clone();
        let settled = first.len() == PARTITIONS as usize
            && seen.iter().all(|s| *s == first)
            && first.values().all(|(leader, isr)| {
                alive.contains(leader) && isr.iter().all(|r| alive.contains(r))
            });
        settled.then(|| first.iter().map(|(&p, (leader, _))| (p, *leader)).collect())
    })
}

/// Produces `count` batches of one record to each partition through its leader with
/// `acks`, expecting `error` for each; what was acknowledged is added to `acknowledged`.
fn produce_round(
    cluster: &Cluster,
    leaders: &BTreeMap<i32, i32>,
    round: &str,
    acks: i16,
    error: i16,
    acknowledged: &mut BTreeMap<i32, Vec<Bytes>>,
) {
    for (&partition, &leader) in leaders {
        let mut client = cluster.client(leader);
        for i in 0..10 {
            let value = format!("{round}-{partition}-{i}");
            let (code, _) = produce(
                &mut client,
                TOPIC,
                partition,
                batch(&[value.as_bytes()]),
                acks,
            );
            assert_eq!(code, error, "{value} with acks={acks} on leader {leader}");
            if code == 0 {
                acknowledged
                    .entry(partition)
                    .or_default()
                    .push(Bytes::from(value));
            }
        }
    }
}

/// Waits until each partition's leader serves exactly what was acknowledged, in order.
fn wait_readable(
    cluster: &Cluster,
    leaders: &BTreeMap<i32, i32>,
    acknowledged: &BTreeMap<i32, Vec<Bytes>>,
) {
    for (&partition, &leader) in leaders {
        let expected = &acknowledged[&partition];
        wait_for(|| {
            let read = read_values(&mut cluster.client(leader), TOPIC, partition);
            assert!(
                read.len() <= expected.len() && read[..] == expected[..read.len()],
                "partition {partition} on {leader} serves what was not acknowledged, or out of \
                 order: {read:?}"
            );
            (read == *expected).then_some(())
        });
    }
}

#[test]
fn acknowledged_records_survive_a_hung_follower_and_a_killed_leader() {
    let mut cluster = Cluster::start_with(&["replica.fetch.backoff.ms=100"]);
    let controller = cluster.controller();
    assert_eq!(create(&mut cluster.client(controller)), 0);
    let mut alive: Vec<i32> = vec![1, 2, 3];
    let leaders = leaders_among(&cluster, &alive);
    for (partition, (_, isr)) in states(&cluster, controller) {
        assert_eq!(
            isr, alive,
            "partition {partition} starts with every replica in sync"
        );
    }
    let mut acknowledged = BTreeMap::new();
    produce_round(&cluster, &leaders, "all-three", -1, 0, &mut acknowledged);
    wait_readable(&cluster, &leaders, &acknowledged);

    // A follower of partition 0 hangs: an acks=all write to it is answered only once the
    // follower is fenced and out of the ISR, and what is answered is visible at once.
    let leader = leaders[&0];
    let hung = *alive.iter().find(|&&id| id != leader).expect("a follower");
    cluster.nodes[&hung].signal("STOP");
    let mut client = cluster.client(leader);
    let value = Bytes::from_static(b"while-one-hangs");
    let (code, _) = produce(&mut client, TOPIC, 0, batch(&[&value]), -1);
    assert_eq!(code, 0);
    acknowledged.get_mut(&0).expect("round one").push(value);
    assert_eq!(
        read_values(&mut client, TOPIC, 0),
        acknowledged[&0],
        "an acknowledged record is below the high watermark"
    );
    cluster.nodes[&hung].signal("CONT");
    alive.retain(|&id| id != hung);
    let leaders = leaders_among(&cluster, &alive);
    wait_readable(&cluster, &leaders, &acknowledged);
    // Two in sync is enough for min.insync.replicas=2.
    produce_round(&cluster, &leaders, "two-in-sync", -1, 0, &mut acknowledged);

    // kill -9 the leader of partition 0: the last ISR member leads everything, holds
    // everything acknowledged, and refuses acks=all.
    let killed = leaders[&0];
    let _killed: Stopped = cluster.nodes.remove(&killed).expect("running").kill();
    alive.retain(|&id| id != killed);
    let leaders = leaders_among(&cluster, &alive);
    wait_readable(&cluster, &leaders, &acknowledged);
    let refused = ResponseError::NotEnoughReplicas.code();
    produce_round(&cluster, &leaders, "alone", -1, refused, &mut acknowledged);
    produce_round(&cluster, &leaders, "alone-acks-1", 1, 0, &mut acknowledged);
    wait_readable(&cluster, &leaders, &acknowledged);
}
