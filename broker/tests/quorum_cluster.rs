//! Three nodes, each broker and controller (Kafka's combined mode), in one metadata quorum
//! over loopback: they elect a controller, all three register as brokers, a topic created
//! through the controller reaches every node with its partitions led across the three, a
//! node that is not the controller forwards its clients' admin changes there and answers
//! once it serves their outcome itself, and when the
//! controller is killed the other two elect another one, which takes changes, and the
//! killed node comes back and catches up; a node stopped by SIGTERM hands its leaderships
//! back before it exits; every node's controller listener answers Kafka's admin tools
//! (`--bootstrap-controller`). Every wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::cluster::{broker_ids, wait_for, Cluster};
use common::{alter_resource, batch, metadata, produce, read_values, topic_name, Client, Stopped};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerHeartbeatRequest, BrokerId, CreatePartitionsRequest,
    CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeQuorumRequest, MetadataRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

/// CreateTopics of `topic` (3 partitions, one replica each): the topic's error code.
fn create(client: &mut Client, topic: &str) -> i16 {
    create_replicated(client, topic, 1)
}

fn create_replicated(client: &mut Client, topic: &str, replication_factor: i16) -> i16 {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(3)
            .with_replication_factor(replication_factor)]);
    let ResponseKind::CreateTopics(answer) = client.call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    answer.topics[0].error_code
}

/// CreatePartitions of `topic` to `count`: the topic's error code.
fn create_partitions(client: &mut Client, topic: &str, count: i32) -> i16 {
    let request = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic_name(topic))
            .with_count(count)]);
    let ResponseKind::CreatePartitions(answer) =
        client.call(3, RequestKind::CreatePartitions(request))
    else {
        unreachable!()
    };
    answer.results[0].error_code
}

/// IncrementalAlterConfigs SET of `key` on `topic`: the resource's error code.
fn set_config(client: &mut Client, topic: &str, key: &str, value: &str) -> i16 {
    alter_resource(client, (2, topic), &[(key, 0, Some(value))], false)
}

/// The value DescribeConfigs gives `key` of `topic`.
fn config(client: &mut Client, topic: &str, key: &str) -> Option<String> {
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.into()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(key.into())]))]);
    let ResponseKind::DescribeConfigs(answer) =
        client.call(4, RequestKind::DescribeConfigs(request))
    else {
        unreachable!()
    };
    let found = answer.results[0].configs.first()?;
    found.value.as_ref().map(|v| v.to_string())
}

/// The topics a node's Metadata lists (asking for all of them creates none).
fn topics(client: &mut Client) -> Vec<String> {
    let request = kafka_protocol::messages::MetadataRequest::default().with_topics(None);
    let ResponseKind::Metadata(answer) = client.call(12, RequestKind::Metadata(request)) else {
        unreachable!()
    };
    answer
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .collect()
}

/// DeleteTopics of `topic`: its error code.
fn delete(client: &mut Client, topic: &str) -> i16 {
    let request = DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            DeleteTopicState::default().with_name(Some(topic_name(topic)))
        ]);
    let ResponseKind::DeleteTopics(answer) = client.call(6, RequestKind::DeleteTopics(request))
    else {
        unreachable!()
    };
    answer.responses[0].error_code
}

/// Partition index → (error code, leader, leader epoch), as `id`'s node answers.
fn partitions(cluster: &Cluster, id: i32, topic: &str) -> BTreeMap<i32, (i16, i32, i32)> {
    let answer = metadata(&mut cluster.client(id), &[topic]);
    answer
        .topics
        .first()
        .map(|topic| {
            topic
                .partitions
                .iter()
                .map(|p| {
                    let state = (p.error_code, p.leader_id.0, p.leader_epoch);
                    (p.partition_index, state)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Partition index → leader, as `id`'s node answers, once every partition has one.
fn leaders(cluster: &Cluster, id: i32, topic: &str) -> Option<BTreeMap<i32, i32>> {
    let answer = metadata(&mut cluster.client(id), &[topic]);
    let topic = answer.topics.first()?;
    if topic.error_code != 0 || topic.partitions.len() != 3 {
        return None;
    }
    Some(
        topic
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect(),
    )
}

fn describe_quorum(client: &mut Client) -> kafka_protocol::messages::DescribeQuorumResponse {
    let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(topic_name("__cluster_metadata"))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let ResponseKind::DescribeQuorum(answer) = client.call(2, RequestKind::DescribeQuorum(request))
    else {
        unreachable!()
    };
    answer
}

#[test]
fn three_nodes_agree_on_brokers_and_topics_and_survive_the_loss_of_the_controller() {
    let mut cluster = Cluster::start();
    let controller = cluster.controller();

    // Every node knows all three brokers.
    for &id in cluster.nodes.keys() {
        wait_for(|| {
            (broker_ids(&metadata(&mut cluster.client(id), &[])) == [1, 2, 3]).then_some(())
        });
    }
    // The controller describes the quorum: three voters, itself leading.
    let quorum = describe_quorum(&mut cluster.client(controller));
    let partition = &quorum.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.leader_id.0, controller);
    assert!(partition.high_watermark > 0);
    let mut voters: Vec<i32> = partition
        .current_voters
        .iter()
        .map(|v| v.replica_id.0)
        .collect();
    voters.sort_unstable();
    assert_eq!(voters, [1, 2, 3]);
    assert_eq!(quorum.nodes.len(), 3, "every voter's controller listener");
    // Every voter's log end is known to the leader, and a voter that does not lead gives
    // the leader's account, not its own partial one.
    wait_for(|| {
        let quorum = describe_quorum(&mut cluster.client(controller));
        let partition = &quorum.topics[0].partitions[0];
        partition
            .current_voters
            .iter()
            .all(|v| v.log_end_offset > 0)
            .then_some(())
    });
    // Each voter is named with the directory it speaks from (KIP-853), by every node.
    let directory_of = |id: i32| {
        let properties =
            std::fs::read_to_string(cluster.dirs[&id].join("data").join("meta.properties"))
                .expect("a formatted directory");
        let text = properties
            .lines()
            .find_map(|line| line.strip_prefix("directory.id="))
            .expect("a directory id")
            .to_string();
        client::parse_kafka_uuid(&text).expect("Kafka's text form of a uuid")
    };
    for &id in cluster.nodes.keys() {
        let asked = describe_quorum(&mut cluster.client(id));
        for voter in &asked.topics[0].partitions[0].current_voters {
            assert_eq!(
                voter.replica_directory_id,
                directory_of(voter.replica_id.0),
                "node {id} names voter {}'s directory",
                voter.replica_id.0
            );
        }
    }
    for &id in cluster.nodes.keys().filter(|&&id| id != controller) {
        let asked = describe_quorum(&mut cluster.client(id));
        let partition = &asked.topics[0].partitions[0];
        assert_eq!(partition.leader_id.0, controller, "node {id}");
        assert!(
            partition
                .current_voters
                .iter()
                .all(|v| v.log_end_offset > 0),
            "node {id} knows every voter's log end: {:?}",
            partition.current_voters
        );
    }

    // A node that is not the controller forwards its clients' admin changes there, and
    // answers once its own shards serve the outcome: no waiting for it to show.
    let other = *cluster
        .nodes
        .keys()
        .find(|&&id| id != controller)
        .expect("another node");
    let mut client = cluster.client(other);
    assert_eq!(create(&mut client, "forwarded"), 0);
    assert_eq!(partitions(&cluster, other, "forwarded").len(), 3);
    assert_eq!(
        create(&mut client, "forwarded"),
        ResponseError::TopicAlreadyExists.code()
    );
    assert_eq!(create_partitions(&mut client, "forwarded", 5), 0);
    assert_eq!(partitions(&cluster, other, "forwarded").len(), 5);
    assert_eq!(
        create_partitions(&mut client, "forwarded", 2),
        ResponseError::InvalidPartitions.code()
    );
    assert_eq!(
        set_config(&mut client, "forwarded", "retention.ms", "60000"),
        0
    );
    assert_eq!(
        config(&mut client, "forwarded", "retention.ms").as_deref(),
        Some("60000")
    );
    assert_eq!(
        set_config(&mut client, "forwarded", "retention.ms", "soon"),
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(delete(&mut client, "forwarded"), 0);
    assert!(!topics(&mut client).contains(&"forwarded".to_string()));
    assert_eq!(
        delete(&mut client, "forwarded"),
        ResponseError::UnknownTopicOrPartition.code()
    );
    assert_eq!(create(&mut cluster.client(controller), "spread"), 0);
    // A partition has up to one replica per broker.
    assert_eq!(
        create_replicated(&mut cluster.client(controller), "replicated", 4),
        ResponseError::InvalidReplicationFactor.code()
    );
    assert_eq!(
        create_replicated(&mut cluster.client(controller), "replicated", 3),
        0
    );
    // Every node sees the topic, with the same leaders, spread over the three brokers.
    let spread = wait_for(|| leaders(&cluster, controller, "spread"));
    for &id in cluster.nodes.keys() {
        let seen = wait_for(|| leaders(&cluster, id, "spread"));
        assert_eq!(seen, spread, "node {id}");
    }
    cluster.wait_agreed();
    let mut led: Vec<i32> = spread.values().copied().collect();
    led.sort_unstable();
    assert_eq!(led, [1, 2, 3], "one partition led by each broker");
    // Each partition takes records at its leader (once the shard that owns it there has
    // the topic: until then the answer is the retriable UNKNOWN_TOPIC_OR_PARTITION).
    for (&partition, &leader) in &spread {
        let mut client = cluster.client(leader);
        let value = format!("p{partition}");
        wait_for(|| {
            let records = batch(&[value.as_bytes()]);
            let (error, _) = produce(&mut client, "spread", partition, records, -1);
            assert!(
                error == 0 || error == ResponseError::UnknownTopicOrPartition.code(),
                "partition {partition} at broker {leader}: {error}"
            );
            (error == 0).then_some(())
        });
        assert_eq!(
            read_values(&mut client, "spread", partition),
            vec![bytes::Bytes::from(value)]
        );
    }

    // The controller dies: the other two elect another, which takes changes, and fences
    // the dead broker once it has been silent for a session: its partition has no leader.
    let before = partitions(&cluster, controller, "spread");
    let orphaned = *spread
        .iter()
        .find(|(_, &leader)| leader == controller)
        .expect("a partition of the killed node")
        .0;
    let killed_at = Instant::now();
    let _killed: Stopped = cluster.nodes.remove(&controller).expect("running").kill();
    let successor = cluster.controller();
    eprintln!(
        "a new active controller (node {successor}) {:?} after the kill of node {controller}",
        killed_at.elapsed()
    );
    assert_ne!(successor, controller);
    wait_for(|| {
        (broker_ids(&metadata(&mut cluster.client(successor), &[])).len() == 2).then_some(())
    });
    let fenced = wait_for(|| {
        let state = partitions(&cluster, successor, "spread")[&orphaned];
        (state.1 == -1).then_some(state)
    });
    assert_eq!(fenced.0, ResponseError::LeaderNotAvailable.code());
    assert!(
        fenced.2 > before[&orphaned].2,
        "losing its leader bumps the epoch"
    );
    // The other partitions keep their leaders.
    let kept = partitions(&cluster, successor, "spread");
    for (partition, &leader) in &spread {
        if leader != controller {
            assert_eq!(kept[partition].1, leader);
        }
    }
    assert_eq!(
        wait_for(|| {
            let code = create(&mut cluster.client(successor), "after");
            (code != ResponseError::NotController.code()).then_some(code)
        }),
        0
    );
    cluster.wait_agreed();
    // The survivors replaced their logs by snapshots meanwhile.
    for &id in cluster.nodes.keys() {
        let snapshot = cluster.dirs[&id].join("data/__cluster_metadata/raft/snapshot");
        wait_for(|| snapshot.exists().then_some(()));
    }
    // Back from its files, the old controller catches up with what it missed.
    let node = cluster.launch(controller);
    cluster.nodes.insert(controller, node);
    wait_for(|| leaders(&cluster, controller, "after"));
    // It leads its partition again, at a newer epoch.
    let back = wait_for(|| {
        let state = partitions(&cluster, successor, "spread")[&orphaned];
        (state.1 == controller).then_some(state)
    });
    assert_eq!(back.0, 0);
    assert!(back.2 > fenced.2);
    wait_for(|| {
        (broker_ids(&metadata(&mut cluster.client(controller), &[])) == [1, 2, 3]).then_some(())
    });
    cluster.wait_agreed();

    // A SIGTERM is a controlled shutdown: the stopping broker has the controller take its
    // leaderships away before it exits, so its partition is leaderless the moment it is
    // gone, not a session later.
    let active = cluster.controller();
    let (&led, &leaving) = spread
        .iter()
        .find(|(_, &leader)| leader != active)
        .expect("a partition led by another node");
    wait_for(|| (partitions(&cluster, active, "spread")[&led].1 == leaving).then_some(()));
    let _stopped: Stopped = cluster.nodes.remove(&leaving).expect("running").stop();
    let state = partitions(&cluster, active, "spread")[&led];
    assert_eq!(
        state.1, -1,
        "partition {led} after broker {leaving} stopped"
    );
    assert_eq!(state.0, ResponseError::LeaderNotAvailable.code());
    assert_eq!(
        broker_ids(&metadata(&mut cluster.client(active), &[])).len(),
        2,
        "the stopped broker is fenced"
    );
    cluster.wait_agreed();
}

#[test]
fn a_killed_broker_is_fenced_once_its_connections_close_not_a_session_later() {
    // A session longer than any wait here: only the closed connections can fence the
    // killed broker in time.
    let mut cluster = Cluster::start_with(&[
        "broker.session.timeout.ms=120000",
        "broker.heartbeat.interval.ms=500",
    ]);
    let controller = cluster.controller();
    assert_eq!(
        create_replicated(&mut cluster.client(controller), "moves", 3),
        0
    );
    let before = wait_for(|| {
        leaders(&cluster, controller, "moves").filter(|led| led.values().all(|&l| l >= 0))
    });
    let victim = *cluster
        .nodes
        .keys()
        .find(|&&id| id != controller)
        .expect("a node that is not the controller");
    let killed_at = Instant::now();
    let _killed: Stopped = cluster.nodes.remove(&victim).expect("running").kill();
    wait_for(|| {
        (!broker_ids(&metadata(&mut cluster.client(controller), &[])).contains(&victim))
            .then_some(())
    });
    eprintln!(
        "node {victim} fenced {:?} after its kill",
        killed_at.elapsed()
    );
    // Its partitions have other leaders from their ISRs; the others kept theirs.
    let after = wait_for(|| {
        leaders(&cluster, controller, "moves")
            .filter(|led| led.values().all(|&l| l >= 0 && l != victim))
    });
    for (partition, &leader) in &before {
        if leader != victim {
            assert_eq!(after[partition], leader);
        }
    }
}

/// An admin tool given `--bootstrap-controller` (KIP-919) asks a controller listener as it
/// asks Kafka's controllers: every node's lists the controller's APIs, describes the
/// controllers with the active one named, gives the leader's account of the quorum, and
/// takes a broker's heartbeat (refusing a stale one there, sending it to the active
/// controller elsewhere). A request for a broker is not served there.
#[test]
fn every_controller_listener_answers_kafkas_admin_tools() {
    let cluster = Cluster::start();
    let controller = cluster.controller();
    for id in 1..=3 {
        let address = cluster.controller_address(id);
        let mut client = Client::connect_to(address);
        let ResponseKind::ApiVersions(versions) =
            client.call(3, RequestKind::ApiVersions(ApiVersionsRequest::default()))
        else {
            unreachable!()
        };
        assert_eq!(versions.error_code, 0);
        let keys: Vec<i16> = versions.api_keys.iter().map(|k| k.api_key).collect();
        for served in [
            ApiKey::DescribeCluster,
            ApiKey::DescribeQuorum,
            ApiKey::BrokerRegistration,
            ApiKey::BrokerHeartbeat,
        ] {
            assert!(keys.contains(&(served as i16)), "node {id}: {keys:?}");
        }
        assert!(
            !keys.contains(&(ApiKey::Produce as i16)),
            "node {id}: {keys:?}"
        );

        let described = wait_for(|| {
            let request = DescribeClusterRequest::default().with_endpoint_type(2);
            let ResponseKind::DescribeCluster(described) =
                client.call(1, RequestKind::DescribeCluster(request))
            else {
                unreachable!()
            };
            (described.controller_id.0 == controller).then_some(described)
        });
        assert_eq!(described.error_code, 0);
        assert_eq!(described.endpoint_type, 2);
        assert_eq!(described.cluster_id.as_str(), common::cluster::CLUSTER_ID);
        let controllers: Vec<(i32, u16)> = described
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.port as u16))
            .collect();
        let expected: Vec<(i32, u16)> = (1..=3)
            .map(|n| (n, cluster.controller_address(n).port()))
            .collect();
        assert_eq!(controllers, expected, "node {id}");
        let ResponseKind::DescribeCluster(for_brokers) = client.call(
            1,
            RequestKind::DescribeCluster(DescribeClusterRequest::default().with_endpoint_type(1)),
        ) else {
            unreachable!()
        };
        assert_eq!(
            for_brokers.error_code,
            ResponseError::MismatchedEndpointType.code()
        );

        let quorum = describe_quorum(&mut client);
        let partition = &quorum.topics[0].partitions[0];
        assert_eq!(partition.leader_id.0, controller, "node {id}");
        assert_eq!(partition.current_voters.len(), 3, "node {id}");

        let stale = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(id))
            .with_broker_epoch(0)
            .with_current_metadata_offset(0);
        let ResponseKind::BrokerHeartbeat(answer) =
            client.call(1, RequestKind::BrokerHeartbeat(stale))
        else {
            unreachable!()
        };
        let expected = if id == controller {
            ResponseError::StaleBrokerEpoch
        } else {
            ResponseError::NotController
        };
        assert_eq!(answer.error_code, expected.code(), "node {id}");

        // A broker's request: the connection closes, the node stays up.
        let mut asked = Client::connect_to(address);
        let metadata = RequestKind::Metadata(MetadataRequest::default().with_topics(None));
        assert!(asked.try_call(12, metadata).is_err(), "node {id}");
    }
    for id in 1..=3 {
        assert_eq!(
            broker_ids(&metadata(&mut cluster.client(id), &[])),
            [1, 2, 3]
        );
    }
}
