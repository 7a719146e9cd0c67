//! Cluster state is data: a node started on a metadata log that names three brokers, in
//! which broker 2 leads a partition at leader epoch 5 and this node (broker 1) follows it,
//! answers every client from that image: Metadata, FindCoordinator, DescribeCluster,
//! Produce, Fetch and ListOffsets, with Kafka's leader and epoch checks.

mod common;

use std::path::Path;

use broker::metadata::image::{topic_records, PartitionState, TopicMeta};
use broker::metadata::records::{BrokerEndpoint, MetadataRecord, RegisterBrokerRecord};
use broker::metadata::{FileMetadataStore, MetadataStore};
use common::{batch, create_topic, metadata, produce, produce_request, Client, Node};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, DescribeClusterRequest, FetchRequest,
    FindCoordinatorRequest, ListOffsetsRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

const LOCAL: i32 = 1;

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn code(error: ResponseError) -> i16 {
    error.code()
}

fn broker(id: i32, port: u16) -> MetadataRecord {
    MetadataRecord::RegisterBroker(RegisterBrokerRecord {
        broker_id: id,
        incarnation_id: uuid::Uuid::new_v4(),
        broker_epoch: 10 + id as i64,
        endpoints: vec![BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: format!("127.0.0.{id}"),
            port,
            security_protocol: 0,
        }],
        rack: Some(format!("rack-{id}")),
        fenced: false,
        in_controlled_shutdown: false,
    })
}

fn topic(name: &str, partitions: &[(i32, i32, &[i32])]) -> Vec<MetadataRecord> {
    topic_records(&TopicMeta {
        name: name.into(),
        id: uuid::Uuid::new_v4(),
        partitions: partitions
            .iter()
            .map(|&(leader, leader_epoch, replicas)| PartitionState {
                replicas: replicas.to_vec(),
                isr: replicas.to_vec(),
                removing_replicas: vec![],
                adding_replicas: vec![],
                leader,
                leader_epoch,
                partition_epoch: leader_epoch,
            })
            .collect(),
        configs: Default::default(),
    })
}

/// A data directory whose metadata names brokers 2 and 3 beside this node, the topic
/// `followed` (led by 2 at epoch 5, this node a follower), `led` (led here at epoch 3), and
/// a one-partition `__consumer_offsets` led by broker 2.
fn seed(dir: &Path) {
    let mut store = FileMetadataStore::new(&dir.join("data"), LOCAL);
    store.load().expect("empty store");
    let mut records = vec![broker(2, 19092), broker(3, 19093)];
    records.extend(topic("followed", &[(2, 5, &[2, 1, 3])]));
    records.extend(topic("led", &[(1, 3, &[1, 2, 3])]));
    records.extend(topic("elsewhere", &[(3, 0, &[3, 2])]));
    records.extend(topic("__consumer_offsets", &[(2, 1, &[2, 3, 1])]));
    drop(store.propose(records).expect("seeded"));
}

fn fetch_error(client: &mut Client, topic: &str, current_leader_epoch: i32) -> i16 {
    fetch_answer(client, topic, current_leader_epoch).0
}

/// (error code, current leader id, its epoch) of a Fetch v12 of partition 0.
fn fetch_answer(client: &mut Client, topic: &str, current_leader_epoch: i32) -> (i16, i32, i32) {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_partition_max_bytes(1 << 20)])]);
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let partition = &answer.responses[0].partitions[0];
    let leader = &partition.current_leader;
    (
        partition.error_code,
        leader.leader_id.0,
        leader.leader_epoch,
    )
}

fn list_offsets(client: &mut Client, topic: &str, current_leader_epoch: i32) -> (i16, i32) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_timestamp(-1)])]);
    let ResponseKind::ListOffsets(answer) = client.call(7, RequestKind::ListOffsets(request))
    else {
        unreachable!()
    };
    let partition = &answer.topics[0].partitions[0];
    (partition.error_code, partition.leader_epoch)
}

/// (error code, leader epoch, end offset) of OffsetsForLeaderEpoch v4 for partition 0.
fn end_offset(
    client: &mut Client,
    topic: &str,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> (i16, i32, i64) {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::OffsetForLeaderEpochRequest;
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_leader_epoch(leader_epoch)])]);
    let ResponseKind::OffsetForLeaderEpoch(answer) =
        client.call(4, RequestKind::OffsetForLeaderEpoch(request))
    else {
        unreachable!()
    };
    let partition = &answer.topics[0].partitions[0];
    (
        partition.error_code,
        partition.leader_epoch,
        partition.end_offset,
    )
}

#[test]
fn a_node_answers_from_the_cluster_image() {
    let tmp = tempfile::tempdir().expect("tmp");
    seed(tmp.path());
    let node = Node::start_in(tmp.path(), &["node.id=1", "broker.rack=rack-1"]);
    let mut client = node.connect();

    // Metadata: all three brokers, the leaders, epochs, replicas and ISRs of the image.
    let answer = metadata(&mut client, &["followed", "led", "elsewhere"]);
    let mut brokers: Vec<(i32, String, i32, Option<String>)> = answer
        .brokers
        .iter()
        .map(|b| {
            let rack = b.rack.as_ref().map(|r| r.to_string());
            (b.node_id.0, b.host.to_string(), b.port, rack)
        })
        .collect();
    brokers.sort();
    assert_eq!(
        brokers[0],
        (
            1,
            "127.0.0.1".into(),
            node.port as i32,
            Some("rack-1".into())
        )
    );
    assert_eq!(
        brokers[1],
        (2, "127.0.0.2".into(), 19092, Some("rack-2".into()))
    );
    assert_eq!(brokers[2].0, 3);
    let partition = |index: usize| &answer.topics[index].partitions[0];
    let ids = |ids: &[BrokerId]| ids.iter().map(|id| id.0).collect::<Vec<_>>();
    assert_eq!(partition(0).error_code, 0);
    assert_eq!(
        (partition(0).leader_id.0, partition(0).leader_epoch),
        (2, 5)
    );
    assert_eq!(ids(&partition(0).replica_nodes), vec![2, 1, 3]);
    assert_eq!(ids(&partition(0).isr_nodes), vec![2, 1, 3]);
    assert!(partition(0).offline_replicas.is_empty());
    assert_eq!(
        (partition(1).leader_id.0, partition(1).leader_epoch),
        (1, 3)
    );

    // Produce: only the leader takes records.
    let records = batch(&[b"a"]);
    assert_eq!(
        produce(&mut client, "followed", 0, records.clone(), 1).0,
        code(ResponseError::NotLeaderOrFollower)
    );
    let (error, base_offset) = produce(&mut client, "led", 0, records.clone(), 1);
    assert_eq!((error, base_offset), (0, 0));
    // From Produce v10 the refusal names the leader and its endpoint (KIP-951).
    let request = produce_request("followed", 0, records.clone(), 1);
    client.send(ApiKey::Produce, 11, &RequestKind::Produce(request));
    let ResponseKind::Produce(answer) = client.receive(ApiKey::Produce, 11) else {
        unreachable!()
    };
    let refused = &answer.responses[0].partition_responses[0];
    assert_eq!(refused.error_code, code(ResponseError::NotLeaderOrFollower));
    assert_eq!(
        (
            refused.current_leader.leader_id.0,
            refused.current_leader.leader_epoch
        ),
        (2, 5)
    );
    let endpoints: Vec<_> = answer
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, e.host.to_string(), e.port))
        .collect();
    assert_eq!(endpoints, vec![(2, "127.0.0.2".to_string(), 19092)]);
    // A partition of which this node holds no replica is not here at all.
    assert_eq!(
        produce(&mut client, "elsewhere", 0, records, 1).0,
        code(ResponseError::UnknownTopicOrPartition)
    );

    // Fetch and ListOffsets: the request's leader epoch first, then leadership.
    assert_eq!(
        fetch_error(&mut client, "followed", 4),
        code(ResponseError::FencedLeaderEpoch)
    );
    assert_eq!(
        fetch_error(&mut client, "followed", 6),
        code(ResponseError::UnknownLeaderEpoch)
    );
    assert_eq!(
        fetch_error(&mut client, "followed", 5),
        code(ResponseError::NotLeaderOrFollower)
    );
    assert_eq!(
        fetch_answer(&mut client, "followed", 5),
        (code(ResponseError::NotLeaderOrFollower), 2, 5)
    );
    assert_eq!(fetch_error(&mut client, "led", 3), 0);
    assert_eq!(fetch_error(&mut client, "led", -1), 0);
    assert_eq!(
        fetch_error(&mut client, "led", 2),
        code(ResponseError::FencedLeaderEpoch)
    );
    assert_eq!(
        list_offsets(&mut client, "followed", 4).0,
        code(ResponseError::FencedLeaderEpoch)
    );
    assert_eq!(
        list_offsets(&mut client, "followed", 6).0,
        code(ResponseError::UnknownLeaderEpoch)
    );
    assert_eq!(
        list_offsets(&mut client, "followed", -1).0,
        code(ResponseError::NotLeaderOrFollower)
    );
    assert_eq!(list_offsets(&mut client, "led", 3), (0, 3));

    // OffsetsForLeaderEpoch: from the leader-epoch checkpoint of the partition this node leads.
    assert_eq!(
        end_offset(&mut client, "led", -1, 3),
        (0, 3, 1),
        "the latest epoch: the log end"
    );
    assert_eq!(
        end_offset(&mut client, "led", 3, 2),
        (0, 2, 0),
        "below every epoch"
    );
    assert_eq!(
        end_offset(&mut client, "led", 3, 4),
        (0, -1, -1),
        "above the latest"
    );
    assert_eq!(
        end_offset(&mut client, "led", 2, 3).0,
        code(ResponseError::FencedLeaderEpoch)
    );
    assert_eq!(
        end_offset(&mut client, "followed", 5, 5).0,
        code(ResponseError::NotLeaderOrFollower)
    );

    // FindCoordinator: the leader of the group's offsets partition.
    let request = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![StrBytes::from_static_str("g")]);
    let ResponseKind::FindCoordinator(answer) =
        client.call(4, RequestKind::FindCoordinator(request))
    else {
        unreachable!()
    };
    let coordinator = &answer.coordinators[0];
    assert_eq!(coordinator.error_code, 0);
    assert_eq!(
        (
            coordinator.node_id.0,
            coordinator.host.to_string(),
            coordinator.port
        ),
        (2, "127.0.0.2".to_string(), 19092)
    );

    // DescribeCluster: the same brokers.
    let ResponseKind::DescribeCluster(answer) = client.call(
        1,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    ) else {
        unreachable!()
    };
    let mut ids: Vec<i32> = answer.brokers.iter().map(|b| b.broker_id.0).collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3]);

    // New topics are placed over the registered brokers, more replicas than brokers refused;
    // leaders are striped, and a partition's replicas are distinct brokers (each in a rack
    // of its own here).
    let create = |name: &str, replication_factor: i16| {
        CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(6)
            .with_replication_factor(replication_factor)])
    };
    let ResponseKind::CreateTopics(answer) =
        client.call(7, RequestKind::CreateTopics(create("wide", 4)))
    else {
        unreachable!()
    };
    assert_eq!(
        answer.topics[0].error_code,
        code(ResponseError::InvalidReplicationFactor)
    );
    let ResponseKind::CreateTopics(answer) =
        client.call(7, RequestKind::CreateTopics(create("striped", 2)))
    else {
        unreachable!()
    };
    assert_eq!(answer.topics[0].error_code, 0);
    assert_eq!(answer.topics[0].replication_factor, 2);
    let answer = metadata(&mut client, &["striped"]);
    let partitions = &answer.topics[0].partitions;
    assert_eq!(partitions.len(), 6);
    let mut leaders = [0; 4];
    for partition in partitions {
        let replicas: Vec<i32> = partition.replica_nodes.iter().map(|id| id.0).collect();
        assert_eq!(replicas.len(), 2);
        assert_ne!(replicas[0], replicas[1], "distinct brokers");
        assert_eq!(partition.isr_nodes, partition.replica_nodes);
        assert_eq!(partition.leader_id, partition.replica_nodes[0]);
        leaders[partition.leader_id.0 as usize] += 1;
    }
    assert_eq!(&leaders[1..], &[2, 2, 2], "leaders spread over the brokers");
    // Produce reaches only the partitions this node leads.
    for (index, partition) in partitions.iter().enumerate() {
        let (error, _) = produce(&mut client, "striped", index as i32, batch(&[b"x"]), 1);
        let expected = match partition.leader_id.0 {
            LOCAL => 0,
            _ if partition.replica_nodes.iter().any(|id| id.0 == LOCAL) => {
                code(ResponseError::NotLeaderOrFollower)
            }
            _ => code(ResponseError::UnknownTopicOrPartition),
        };
        assert_eq!(
            error, expected,
            "partition {index} led by {:?}",
            partition.leader_id
        );
    }
}

#[test]
fn a_single_node_leads_everything_at_epoch_zero() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    create_topic(&mut client, "solo", 2, &[]);
    let answer = metadata(&mut client, &["solo"]);
    assert_eq!(answer.brokers.len(), 1);
    assert_eq!(answer.brokers[0].node_id.0, 1);
    for partition in &answer.topics[0].partitions {
        assert_eq!((partition.error_code, partition.leader_id.0), (0, 1));
        assert_eq!(partition.leader_epoch, 0);
        assert_eq!(partition.replica_nodes, vec![BrokerId(1)]);
        assert_eq!(partition.isr_nodes, vec![BrokerId(1)]);
    }
    assert_eq!(list_offsets(&mut client, "solo", 0), (0, 0));
    // A restart is a new registration of the same broker, and changes no partition.
    let stopped = node.stop();
    let node = stopped.restart(&[]);
    let mut client = node.connect();
    let again = metadata(&mut client, &["solo"]);
    assert_eq!(again.topics, answer.topics);
    assert_eq!(again.brokers.len(), 1);
}
