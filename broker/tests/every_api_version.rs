//! Every API at every version the node announces gets a well-formed answer.
//!
//! Method: start a real node, read its ApiVersions, and for each (API, version) pair send a
//! representative request encoded by the `kafka-protocol` codecs, as a client of that
//! version would; decode the answer at the same version and check its error codes and
//! contents. This catches a handler setting a field its version lacks (the node would fail
//! to encode and close the connection) and any version whose semantics drifted.

mod common;

use bytes::Bytes;
use common::{batch, values, Node};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

#[test]
fn every_announced_version_answers() {
    let node = Node::start(&[]);
    let mut client = node.connect();
    let ResponseKind::ApiVersions(versions) =
        client.call(3, RequestKind::ApiVersions(ApiVersionsRequest::default()))
    else {
        panic!("ApiVersions answers with ApiVersions");
    };
    assert_eq!(versions.error_code, 0);
    let range = |key: ApiKey| {
        let api = versions.api_keys.iter().find(|a| a.api_key == key as i16);
        let api = api.unwrap_or_else(|| panic!("{key:?} is announced"));
        api.min_version..=api.max_version
    };
    for version in range(ApiKey::ApiVersions) {
        let ResponseKind::ApiVersions(answer) = client.call(
            version,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        ) else {
            unreachable!()
        };
        assert_eq!(answer.error_code, 0, "ApiVersions v{version}");
        assert_eq!(answer.api_keys.len(), versions.api_keys.len());
    }

    // Topics: create (then grow, describe, delete) one per CreateTopics version.
    for version in range(ApiKey::CreateTopics) {
        let topic = format!("created-v{version}");
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(&topic))
                .with_num_partitions(2)
                .with_replication_factor(1)]);
        let ResponseKind::CreateTopics(answer) =
            client.call(version, RequestKind::CreateTopics(request))
        else {
            unreachable!()
        };
        assert_eq!(answer.topics[0].error_code, 0, "CreateTopics v{version}");
        if version >= 5 {
            assert_eq!(answer.topics[0].num_partitions, 2);
        }
    }
    let topics_created: Vec<String> = range(ApiKey::CreateTopics)
        .map(|v| format!("created-v{v}"))
        .collect();
    for (version, topic) in range(ApiKey::CreatePartitions).zip(topics_created.iter().cycle()) {
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name(topic))
                .with_count(3 + version as i32)]);
        let ResponseKind::CreatePartitions(answer) =
            client.call(version, RequestKind::CreatePartitions(request))
        else {
            unreachable!()
        };
        assert_eq!(
            answer.results[0].error_code, 0,
            "CreatePartitions v{version}"
        );
    }
    for version in range(ApiKey::DescribeConfigs) {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topics_created[0].clone())),
            DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str("1")),
        ]);
        let ResponseKind::DescribeConfigs(answer) =
            client.call(version, RequestKind::DescribeConfigs(request))
        else {
            unreachable!()
        };
        for result in &answer.results {
            assert_eq!(result.error_code, 0, "DescribeConfigs v{version}");
            assert!(!result.configs.is_empty());
        }
        let retention = answer.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == "retention.ms");
        assert!(retention.is_some(), "topic configs include retention.ms");
    }
    for version in range(ApiKey::DescribeCluster) {
        let ResponseKind::DescribeCluster(answer) = client.call(
            version,
            RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        ) else {
            unreachable!()
        };
        assert_eq!(answer.error_code, 0);
        assert_eq!(answer.brokers.len(), 1);
        assert_eq!(answer.brokers[0].port, node.port as i32);
    }

    // InitProducerId: an idempotent producer gets a fresh id at epoch 0 at every version,
    // also when it names the id and epoch it had (v3+); a transactional one is refused.
    let mut producer_ids = Vec::new();
    for version in range(ApiKey::InitProducerId) {
        let mut request = InitProducerIdRequest::default()
            // Null, not the codec's default of "": an empty transactional id is refused.
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        if version >= 3 {
            let previous = producer_ids.last().copied().unwrap_or(-1);
            request = request
                .with_producer_id(ProducerId(previous))
                .with_producer_epoch(if previous < 0 { -1 } else { 0 });
        }
        let ResponseKind::InitProducerId(answer) =
            client.call(version, RequestKind::InitProducerId(request))
        else {
            unreachable!()
        };
        assert_eq!(answer.error_code, 0, "InitProducerId v{version}");
        assert_eq!(answer.producer_epoch, 0, "InitProducerId v{version}");
        assert!(
            !producer_ids.contains(&answer.producer_id.0) && answer.producer_id.0 >= 0,
            "InitProducerId v{version} gave {:?} after {producer_ids:?}",
            answer.producer_id
        );
        producer_ids.push(answer.producer_id.0);
        let transactional = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
            .with_transaction_timeout_ms(60_000);
        let ResponseKind::InitProducerId(answer) =
            client.call(version, RequestKind::InitProducerId(transactional))
        else {
            unreachable!()
        };
        assert_eq!(
            answer.error_code, 35,
            "InitProducerId v{version}: transactions are not offered"
        );
        assert_eq!(answer.producer_id.0, -1);
        // The codec's default transactional id is "", which Kafka refuses as INVALID_REQUEST.
        let empty = InitProducerIdRequest::default().with_transaction_timeout_ms(60_000);
        let ResponseKind::InitProducerId(answer) =
            client.call(version, RequestKind::InitProducerId(empty))
        else {
            unreachable!()
        };
        assert_eq!(answer.error_code, 42, "InitProducerId v{version} with \"\"");
    }

    // Metadata, which auto-creates the topic the data-path calls use.
    for version in range(ApiKey::Metadata) {
        let wanted = MetadataRequestTopic::default().with_name(Some(name("auto")));
        let request = MetadataRequest::default()
            .with_topics(Some(vec![wanted]))
            .with_allow_auto_topic_creation(true);
        let ResponseKind::Metadata(answer) = client.call(version, RequestKind::Metadata(request))
        else {
            unreachable!()
        };
        assert_eq!(answer.topics.len(), 1);
        assert_eq!(answer.topics[0].error_code, 0, "Metadata v{version}");
        assert_eq!(answer.topics[0].partitions.len(), 1);
        assert_eq!(answer.brokers[0].port, node.port as i32);
        if version >= 10 {
            assert!(!answer.topics[0].topic_id.is_nil(), "topic ids from v10");
        }
    }

    // Produce one batch per version; every later read sees them all, in order.
    let mut produced: Vec<Bytes> = Vec::new();
    for version in range(ApiKey::Produce) {
        let value = format!("produced-v{version}");
        let partition = PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(batch(&[value.as_bytes()])));
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("auto"))
                .with_partition_data(vec![partition])]);
        let ResponseKind::Produce(answer) = client.call(version, RequestKind::Produce(request))
        else {
            unreachable!()
        };
        let partition = &answer.responses[0].partition_responses[0];
        assert_eq!(partition.error_code, 0, "Produce v{version}");
        assert_eq!(
            partition.base_offset,
            produced.len() as i64,
            "offsets are dense"
        );
        produced.push(Bytes::from(value));
    }
    // From Fetch v13 topics are named by id (KIP-516), which Metadata gives.
    let auto_id = common::metadata(&mut client, &["auto"]).topics[0].topic_id;
    for version in range(ApiKey::Fetch) {
        let fetch = |topic_id| {
            let wanted = FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20);
            FetchRequest::default()
                .with_max_wait_ms(100)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name("auto"))
                    .with_topic_id(topic_id)
                    .with_partitions(vec![wanted])])
        };
        if version >= 13 {
            let unknown = fetch(uuid::Uuid::from_u128(7));
            let ResponseKind::Fetch(answer) = client.call(version, RequestKind::Fetch(unknown))
            else {
                unreachable!()
            };
            let topic = &answer.responses[0];
            assert_eq!(topic.topic_id, uuid::Uuid::from_u128(7), "Fetch v{version}");
            assert_eq!(topic.partitions[0].error_code, 100, "UNKNOWN_TOPIC_ID");
        }
        let request = fetch(auto_id);
        let ResponseKind::Fetch(answer) = client.call(version, RequestKind::Fetch(request)) else {
            unreachable!()
        };
        if version >= 13 {
            assert_eq!(answer.responses[0].topic_id, auto_id, "Fetch v{version}");
        }
        let partition = &answer.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "Fetch v{version}");
        assert_eq!(partition.high_watermark, produced.len() as i64);
        let records = partition.records.as_ref().expect("records");
        assert_eq!(
            values(records),
            produced,
            "Fetch v{version} returns every batch in order"
        );
    }
    for version in range(ApiKey::ListOffsets) {
        let query = |timestamp| {
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(name("auto"))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp)])])
        };
        for (timestamp, expected) in [(-1, produced.len() as i64), (-2, 0), (1_700_000_000_000, 0)]
        {
            let ResponseKind::ListOffsets(answer) =
                client.call(version, RequestKind::ListOffsets(query(timestamp)))
            else {
                unreachable!()
            };
            let partition = &answer.topics[0].partitions[0];
            assert_eq!(
                partition.error_code, 0,
                "ListOffsets v{version} at {timestamp}"
            );
            assert_eq!(
                partition.offset, expected,
                "ListOffsets v{version} at {timestamp}"
            );
        }
    }

    // Leadership and replicas: on one node every election is not needed, a move to where a
    // partition is changes nothing, and there is no move to cancel or list.
    for version in range(ApiKey::ElectLeaders) {
        let request = ElectLeadersRequest::default()
            .with_timeout_ms(5000)
            .with_topic_partitions(Some(vec![
                kafka_protocol::messages::elect_leaders_request::TopicPartitions::default()
                    .with_topic(name("auto"))
                    .with_partitions(vec![0]),
            ]));
        let ResponseKind::ElectLeaders(answer) =
            client.call(version, RequestKind::ElectLeaders(request))
        else {
            unreachable!()
        };
        assert_eq!(answer.error_code, 0, "ElectLeaders v{version}");
        let result = &answer.replica_election_results[0].partition_result[0];
        assert_eq!(result.error_code, 84, "ElectLeaders v{version}: not needed");
    }
    for version in range(ApiKey::AlterPartitionReassignments) {
        use kafka_protocol::messages::alter_partition_reassignments_request::{
            ReassignablePartition, ReassignableTopic,
        };
        for (replicas, expected) in [(Some(vec![BrokerId(1)]), 0), (None, 85)] {
            let request = AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![ReassignableTopic::default()
                    .with_name(name("auto"))
                    .with_partitions(vec![ReassignablePartition::default()
                        .with_partition_index(0)
                        .with_replicas(replicas)])]);
            let ResponseKind::AlterPartitionReassignments(answer) =
                client.call(version, RequestKind::AlterPartitionReassignments(request))
            else {
                unreachable!()
            };
            let code = answer.responses[0].partitions[0].error_code;
            assert_eq!(code, expected, "AlterPartitionReassignments v{version}");
        }
    }
    for version in range(ApiKey::ListPartitionReassignments) {
        let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(5000);
        let ResponseKind::ListPartitionReassignments(answer) =
            client.call(version, RequestKind::ListPartitionReassignments(request))
        else {
            unreachable!()
        };
        assert_eq!(
            answer.error_code, 0,
            "ListPartitionReassignments v{version}"
        );
        assert!(answer.topics.is_empty(), "no move in progress");
    }
    for version in range(ApiKey::AlterConfigs) {
        use kafka_protocol::messages::alter_configs_request::{
            AlterConfigsResource, AlterableConfig,
        };
        let value = format!("{}", 1000 + version);
        let request =
            AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("auto"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_string(value)))])]);
        let ResponseKind::AlterConfigs(answer) =
            client.call(version, RequestKind::AlterConfigs(request))
        else {
            unreachable!()
        };
        assert_eq!(answer.responses[0].error_code, 0, "AlterConfigs v{version}");
    }
    for version in range(ApiKey::DescribeLogDirs) {
        let request = DescribeLogDirsRequest::default().with_topics(None);
        let ResponseKind::DescribeLogDirs(answer) =
            client.call(version, RequestKind::DescribeLogDirs(request))
        else {
            unreachable!()
        };
        assert_eq!(answer.error_code, 0, "DescribeLogDirs v{version}");
        let dir = &answer.results[0];
        let auto = dir.topics.iter().find(|t| t.name.as_str() == "auto");
        let partition = &auto.expect("the topic written to").partitions[0];
        assert!(partition.partition_size > 0, "DescribeLogDirs v{version}");
        if version >= 4 {
            assert!(dir.total_bytes >= dir.usable_bytes && dir.usable_bytes > 0);
        }
    }

    for version in range(ApiKey::DeleteTopics) {
        let topic = &topics_created[version as usize % topics_created.len()];
        let request = DeleteTopicsRequest::default().with_timeout_ms(5000);
        let request = if version >= 6 {
            request.with_topics(vec![
                DeleteTopicState::default().with_name(Some(name(topic)))
            ])
        } else {
            request.with_topic_names(vec![name(topic)])
        };
        let ResponseKind::DeleteTopics(answer) =
            client.call(version, RequestKind::DeleteTopics(request))
        else {
            unreachable!()
        };
        assert_eq!(
            answer.responses[0].error_code, 0,
            "DeleteTopics v{version} of {topic}"
        );
    }
}

/// Picks the `step`-th version of `range`, staying at the newest once past it, so one loop
/// over the longest range visits every version of every API.
fn nth(range: &std::ops::RangeInclusive<i16>, step: i16) -> i16 {
    (*range.start() + step).min(*range.end())
}

#[test]
fn every_group_api_version_answers() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;

    let node = Node::start(&["group.initial.rebalance.delay.ms=0"]);
    let mut client = node.connect();
    let ResponseKind::ApiVersions(versions) =
        client.call(3, RequestKind::ApiVersions(ApiVersionsRequest::default()))
    else {
        unreachable!()
    };
    let range = |key: ApiKey| {
        let api = versions.api_keys.iter().find(|a| a.api_key == key as i16);
        let api = api.unwrap_or_else(|| panic!("{key:?} is announced"));
        api.min_version..=api.max_version
    };
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("consumed"))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    client.call(7, RequestKind::CreateTopics(request));
    let keys = [
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::ListGroups,
        ApiKey::DescribeGroups,
        ApiKey::DeleteGroups,
        ApiKey::OffsetDelete,
    ];
    let steps = keys
        .iter()
        .map(|k| range(*k).end() - range(*k).start())
        .max()
        .unwrap_or(0);
    for step in 0..=steps {
        let group = format!("group-step-{step}");
        let group_id = GroupId(StrBytes::from_string(group.clone()));

        let version = nth(&range(ApiKey::FindCoordinator), step);
        let request = if version >= 4 {
            FindCoordinatorRequest::default()
                .with_coordinator_keys(vec![StrBytes::from_string(group.clone())])
        } else {
            FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.clone()))
        };
        let ResponseKind::FindCoordinator(answer) =
            client.call(version, RequestKind::FindCoordinator(request))
        else {
            unreachable!()
        };
        let error = if version >= 4 {
            answer.coordinators[0].error_code
        } else {
            answer.error_code
        };
        assert_eq!(error, 0, "FindCoordinator v{version}");

        let version = nth(&range(ApiKey::JoinGroup), step);
        let join = |member: &str| {
            let request = JoinGroupRequest::default()
                .with_group_id(group_id.clone())
                .with_session_timeout_ms(10_000)
                .with_member_id(StrBytes::from_string(member.to_string()))
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(Bytes::from_static(b"subscription"))]);
            if version >= 1 {
                request.with_rebalance_timeout_ms(10_000)
            } else {
                request
            }
        };
        let ResponseKind::JoinGroup(mut joined) =
            client.call(version, RequestKind::JoinGroup(join("")))
        else {
            unreachable!()
        };
        if version >= 4 {
            assert_eq!(
                joined.error_code, 79,
                "JoinGroup v{version}: MEMBER_ID_REQUIRED"
            );
            let member = joined.member_id.to_string();
            let ResponseKind::JoinGroup(again) =
                client.call(version, RequestKind::JoinGroup(join(&member)))
            else {
                unreachable!()
            };
            joined = again;
        }
        assert_eq!(joined.error_code, 0, "JoinGroup v{version}");
        let member = joined.member_id.clone();
        let generation = joined.generation_id;

        let version = nth(&range(ApiKey::SyncGroup), step);
        let request = SyncGroupRequest::default()
            .with_group_id(group_id.clone())
            .with_generation_id(generation)
            .with_member_id(member.clone())
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(member.clone())
                .with_assignment(Bytes::from_static(b"assignment"))]);
        let request = if version >= 5 {
            request
                .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
                .with_protocol_name(Some(StrBytes::from_static_str("range")))
        } else {
            request
        };
        let ResponseKind::SyncGroup(synced) = client.call(version, RequestKind::SyncGroup(request))
        else {
            unreachable!()
        };
        assert_eq!(synced.error_code, 0, "SyncGroup v{version}");
        assert_eq!(synced.assignment, Bytes::from_static(b"assignment"));

        let version = nth(&range(ApiKey::Heartbeat), step);
        let request = HeartbeatRequest::default()
            .with_group_id(group_id.clone())
            .with_generation_id(generation)
            .with_member_id(member.clone());
        let ResponseKind::Heartbeat(beat) = client.call(version, RequestKind::Heartbeat(request))
        else {
            unreachable!()
        };
        assert_eq!(beat.error_code, 0, "Heartbeat v{version}");

        let version = nth(&range(ApiKey::OffsetCommit), step);
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id.clone())
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(member.clone())
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(name("consumed"))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(step as i64 + 10)])]);
        let ResponseKind::OffsetCommit(committed) =
            client.call(version, RequestKind::OffsetCommit(request))
        else {
            unreachable!()
        };
        assert_eq!(
            committed.topics[0].partitions[0].error_code, 0,
            "OffsetCommit v{version}"
        );

        let version = nth(&range(ApiKey::OffsetFetch), step);
        let request = if version >= 8 {
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(group_id.clone())
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(name("consumed"))
                    .with_partition_indexes(vec![0])]))])
        } else {
            OffsetFetchRequest::default()
                .with_group_id(group_id.clone())
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(name("consumed"))
                    .with_partition_indexes(vec![0])]))
        };
        let ResponseKind::OffsetFetch(fetched) =
            client.call(version, RequestKind::OffsetFetch(request))
        else {
            unreachable!()
        };
        let offset = if version >= 8 {
            fetched.groups[0].topics[0].partitions[0].committed_offset
        } else {
            fetched.topics[0].partitions[0].committed_offset
        };
        assert_eq!(offset, step as i64 + 10, "OffsetFetch v{version}");

        let version = nth(&range(ApiKey::ListGroups), step);
        let ResponseKind::ListGroups(listed) = client.call(
            version,
            RequestKind::ListGroups(ListGroupsRequest::default()),
        ) else {
            unreachable!()
        };
        assert!(
            listed.groups.iter().any(|g| g.group_id == group_id),
            "ListGroups v{version}"
        );

        let version = nth(&range(ApiKey::DescribeGroups), step);
        let request = DescribeGroupsRequest::default().with_groups(vec![group_id.clone()]);
        let ResponseKind::DescribeGroups(described) =
            client.call(version, RequestKind::DescribeGroups(request))
        else {
            unreachable!()
        };
        assert_eq!(
            described.groups[0].group_state.as_str(),
            "Stable",
            "DescribeGroups v{version}"
        );
        assert_eq!(described.groups[0].members.len(), 1);

        let version = nth(&range(ApiKey::LeaveGroup), step);
        let request = if version >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(group_id.clone())
                .with_members(vec![
                    MemberIdentity::default().with_member_id(member.clone())
                ])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(group_id.clone())
                .with_member_id(member)
        };
        let ResponseKind::LeaveGroup(left) = client.call(version, RequestKind::LeaveGroup(request))
        else {
            unreachable!()
        };
        assert_eq!(left.error_code, 0, "LeaveGroup v{version}");

        let version = nth(&range(ApiKey::OffsetDelete), step);
        let request = OffsetDeleteRequest::default().with_group_id(group_id.clone()).with_topics(
            vec![kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(name("consumed"))
                .with_partitions(vec![
                    kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ])],
        );
        let ResponseKind::OffsetDelete(deleted) =
            client.call(version, RequestKind::OffsetDelete(request))
        else {
            unreachable!()
        };
        assert_eq!(deleted.error_code, 0, "OffsetDelete v{version}");

        let version = nth(&range(ApiKey::DeleteGroups), step);
        let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id.clone()]);
        let ResponseKind::DeleteGroups(removed) =
            client.call(version, RequestKind::DeleteGroups(request))
        else {
            unreachable!()
        };
        assert_eq!(removed.results[0].error_code, 0, "DeleteGroups v{version}");
    }
}
