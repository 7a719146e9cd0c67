//! A replicated topic on a [`Cluster`] (RF 3, `min.insync.replicas=2`): its leaders and
//! ISRs as each node answers, rounds of writes through the leaders, and what was
//! acknowledged, which the leaders must serve exactly. Every wait is bounded.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::cluster::{wait_for, Cluster};
use super::{batch, metadata, produce, read_values, topic_name, Client};

pub const TOPIC: &str = "replicated";
pub const PARTITIONS: i32 = 3;

/// What each partition's leader answered acks=all for, in order.
pub type Acknowledged = BTreeMap<i32, Vec<Bytes>>;

/// CreateTopics of [`TOPIC`]: 3 partitions, 3 replicas, `min.insync.replicas=2`.
pub fn create(client: &mut Client) -> i16 {
    create_named(client, TOPIC)
}

/// CreateTopics of `name` as [`create`] makes [`TOPIC`].
pub fn create_named(client: &mut Client, name: &str) -> i16 {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(name))
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

/// Creates [`TOPIC`] on a fresh `cluster`, checks every replica is in sync, and writes a
/// first round of acks=all records that every leader serves: the cluster, the leaders and
/// what was acknowledged.
#[track_caller]
pub fn with_topic(cluster: Cluster) -> (Cluster, BTreeMap<i32, i32>, Acknowledged) {
    let controller = cluster.controller();
    assert_eq!(create(&mut cluster.client(controller)), 0);
    let leaders = leaders_among(&cluster, &[1, 2, 3]);
    for (partition, (_, isr)) in states(&cluster, controller) {
        assert_eq!(
            isr,
            [1, 2, 3],
            "partition {partition} starts with every replica in sync"
        );
    }
    let mut acknowledged = BTreeMap::new();
    produce_round(&cluster, &leaders, "all-three", -1, 0, &mut acknowledged);
    wait_readable(&cluster, &leaders, &acknowledged);
    (cluster, leaders, acknowledged)
}

/// Partition → (leader, ISR), as node `id` answers.
pub fn states(cluster: &Cluster, id: i32) -> BTreeMap<i32, (i32, Vec<i32>)> {
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

/// Once every node in `alive` agrees that no partition is led by or in sync on a node not
/// in `alive`, and each has a leader: partition → leader.
#[track_caller]
pub fn leaders_among(cluster: &Cluster, alive: &[i32]) -> BTreeMap<i32, i32> {
    wait_for(|| {
        let seen: Vec<_> = alive.iter().map(|&id| states(cluster, id)).collect();
        let first = seen[0].clone();
        let settled = first.len() == PARTITIONS as usize
            && seen.iter().all(|s| *s == first)
            && first.values().all(|(leader, isr)| {
                alive.contains(leader) && isr.iter().all(|r| alive.contains(r))
            });
        settled.then(|| first.iter().map(|(&p, (leader, _))| (p, *leader)).collect())
    })
}

/// Waits until every running node names all of `isr` (sorted) as each partition's ISR.
#[track_caller]
pub fn wait_isr(cluster: &Cluster, isr: &[i32]) {
    wait_for(|| {
        cluster
            .nodes
            .keys()
            .all(|&id| {
                let states = states(cluster, id);
                states.len() == PARTITIONS as usize && states.values().all(|(_, i)| i == isr)
            })
            .then_some(())
    });
}

/// Produces a batch of one record `value` to `topic`-`partition` on the node `client` is
/// connected to, which Metadata names its leader: the answer's error code. The leader's
/// shard may open the partition, or take its leadership, a moment after its Metadata names
/// it: those answers are retried, as clients retry them.
pub fn produce_to_leader(
    client: &mut Client,
    topic: &str,
    partition: i32,
    value: &str,
    acks: i16,
) -> i16 {
    let retriable = [
        ResponseError::UnknownTopicOrPartition.code(),
        ResponseError::NotLeaderOrFollower.code(),
    ];
    wait_for(|| {
        let (code, _) = produce(client, topic, partition, batch(&[value.as_bytes()]), acks);
        (!retriable.contains(&code)).then_some(code)
    })
}

/// Produces ten batches of one record to each partition through its leader with
/// `acks`, expecting `error` for each; what was acknowledged is added to `acknowledged`.
pub fn produce_round(
    cluster: &Cluster,
    leaders: &BTreeMap<i32, i32>,
    round: &str,
    acks: i16,
    error: i16,
    acknowledged: &mut Acknowledged,
) {
    for (&partition, &leader) in leaders {
        let mut client = cluster.client(leader);
        for i in 0..10 {
            let value = format!("{round}-{partition}-{i}");
            let code = produce_to_leader(&mut client, TOPIC, partition, &value, acks);
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
#[track_caller]
pub fn wait_readable(cluster: &Cluster, leaders: &BTreeMap<i32, i32>, acknowledged: &Acknowledged) {
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

/// Fetch v15 of partition 0 of [`TOPIC`] at `offset` as follower `replica`, incarnation
/// `broker_epoch` (KIP-903's replica state), waiting up to `max_wait_ms` for at least one
/// byte: the partition's error code.
pub fn fetch_as_follower(
    client: &mut Client,
    topic_id: uuid::Uuid,
    replica: i32,
    broker_epoch: i64,
    offset: i64,
    max_wait_ms: i32,
) -> i16 {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
    use kafka_protocol::messages::{BrokerId, FetchRequest};
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(replica))
                .with_replica_epoch(broker_epoch),
        )
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_last_fetched_epoch(-1)
                .with_partition_max_bytes(1 << 20)])]);
    let ResponseKind::Fetch(answer) = client.call(15, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    answer.responses[0].partitions[0].error_code
}
