//! Topic administration, the cluster and producer ids: CreateTopics, DeleteTopics,
//! CreatePartitions, DescribeConfigs (a topic's overrides), DeleteRecords, DescribeCluster,
//! DescribeQuorum and InitProducerId. What changes metadata, and DescribeQuorum, goes to the
//! controller that Metadata names (as Kafka's admin client sends it); DeleteRecords to the
//! partition's leader; the rest to any broker.
//!
//! Invariants:
//! - Every call checks the per-topic error of its answer and fails with Kafka's error name
//!   and the broker's message ([`crate::error::KafkaError`]), so callers can match codes.
//! - Requests are built for the negotiated version: fields a version lacks stay at their
//!   defaults, and what changed shape (DeleteTopics v6 names topics in `topics`) is chosen by
//!   version.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeClusterRequest, DescribeQuorumRequest, InitProducerIdRequest, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::{topic_name, Cluster, PartitionLeader};
use crate::connection::Connection;
use crate::error::{check, code_of, codes};

/// DescribeConfigs config source of a per-topic override.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
/// How long the broker may take over a topic change before answering.
pub const ADMIN_TIMEOUT_MS: i32 = 30_000;

/// A topic to create; `None` asks for the broker's default (from CreateTopics v4 on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewTopic {
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
    /// Topic-level settings, Kafka's names (`retention.bytes`, `segment.bytes`, ...).
    pub configs: Vec<(String, String)>,
}

/// Creates `name`; TOPIC_ALREADY_EXISTS is an error like any other.
pub async fn create_topic(cluster: &mut Cluster, name: &str, topic: &NewTopic) -> Result<()> {
    let connection = cluster.controller().await?;
    let version = connection.version::<CreateTopicsRequest>()?;
    // Before v4 the broker defaults cannot be asked for with -1.
    let default = if version >= 4 { -1 } else { 1 };
    let mut creatable = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(topic.partitions.unwrap_or(default))
        .with_replication_factor(topic.replication_factor.unwrap_or(default as i16));
    for (key, value) in &topic.configs {
        creatable.configs.push(
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(key.clone()))
                .with_value(Some(StrBytes::from_string(value.clone()))),
        );
    }
    let request = CreateTopicsRequest::default()
        .with_topics(vec![creatable])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = connection.call_at(version, &request).await?;
    let result = response
        .topics
        .first()
        .ok_or_else(|| anyhow!("CreateTopics answered for no topic"))?;
    check(result.error_code, result.error_message.as_ref(), || {
        format!("create topic {name}")
    })
}

/// Deletes `name` and its data.
pub async fn delete_topic(cluster: &mut Cluster, name: &str) -> Result<()> {
    let connection = cluster.controller().await?;
    let version = connection.version::<DeleteTopicsRequest>()?;
    let mut request = DeleteTopicsRequest::default().with_timeout_ms(ADMIN_TIMEOUT_MS);
    if version >= 6 {
        request.topics = vec![DeleteTopicState::default().with_name(Some(topic_name(name)))];
    } else {
        request.topic_names = vec![topic_name(name)];
    }
    let response = connection.call_at(version, &request).await?;
    let result = response
        .responses
        .first()
        .ok_or_else(|| anyhow!("DeleteTopics answered for no topic"))?;
    check(result.error_code, result.error_message.as_ref(), || {
        format!("delete topic {name}")
    })
}

/// Grows `name` to `count` partitions.
pub async fn add_partitions(cluster: &mut Cluster, name: &str, count: i32) -> Result<()> {
    let connection = cluster.controller().await?;
    let version = connection.version::<CreatePartitionsRequest>()?;
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic_name(name))
            .with_count(count)])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = connection.call_at(version, &request).await?;
    let result = response
        .results
        .first()
        .ok_or_else(|| anyhow!("CreatePartitions answered for no topic"))?;
    check(result.error_code, result.error_message.as_ref(), || {
        format!("add partitions to topic {name}")
    })
}

/// Makes the records of partition `partition` of `name` below `offset` unreadable (`-1`:
/// below the high watermark), as kafka-delete-records does; the partition's new low
/// watermark.
pub async fn delete_records(
    cluster: &mut Cluster,
    name: &str,
    partition: i32,
    offset: i64,
) -> Result<i64> {
    let topic = cluster.topic(name).await?;
    let Some(info) = topic.partitions.iter().find(|p| p.partition == partition) else {
        bail!("topic {name} has no partition {partition}");
    };
    if info.leader < 0 {
        bail!("partition {partition} of {name} has no leader");
    }
    let connection = cluster.broker(info.leader).await?;
    let version = connection.version::<DeleteRecordsRequest>()?;
    let request = DeleteRecordsRequest::default()
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(topic_name(name))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(partition)
                .with_offset(offset)])])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = connection.call_at(version, &request).await?;
    let result = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| anyhow!("DeleteRecords answered for no partition"))?;
    check(result.error_code, None, || {
        format!("delete records of {name} partition {partition}")
    })?;
    Ok(result.low_watermark)
}

/// The topic's settings that differ from the broker's defaults, sorted by name.
pub async fn overridden_configs(
    cluster: &mut Cluster,
    name: &str,
) -> Result<Vec<(String, String)>> {
    let resource = crate::configs::Resource::Topic(name.to_string());
    let entries = crate::configs::describe(cluster, &resource).await?;
    Ok(entries
        .into_iter()
        .filter(|entry| entry.source == SOURCE_DYNAMIC_TOPIC)
        .map(|entry| {
            let value = entry.value.unwrap_or_else(|| "(sensitive)".to_string());
            (entry.name, value)
        })
        .collect())
}

/// How often, and how many times, `ensure_topic` asks for a new topic's leaders.
const TOPIC_READY_POLL_MS: u64 = 50;
const TOPIC_READY_POLLS: u64 = 600;

/// The leaders of `name`, creating it as `topic` says when it is missing (another client
/// creating it at the same moment is fine), and waiting until every partition it created
/// has a leader that knows it leads.
pub async fn ensure_topic(
    cluster: &mut Cluster,
    name: &str,
    topic: &NewTopic,
) -> Result<Vec<PartitionLeader>> {
    let existed = cluster.leaders(name).await?.is_some();
    if !existed {
        match create_topic(cluster, name, topic).await {
            Err(error) if code_of(&error) != Some(codes::TOPIC_ALREADY_EXISTS) => {
                return Err(error)
            }
            _ => {}
        }
    }
    // A topic that was there keeps the partitions it has.
    let partitions = if existed {
        1
    } else {
        topic.partitions.unwrap_or(1)
    };
    // Leaders can take a moment to be elected after creation, and each leader to learn
    // that it leads: a producer sent to it sooner would get UNKNOWN_TOPIC_OR_PARTITION. A
    // cluster that has just started (a JVM still warming up) can take seconds; Kafka's
    // clients wait up to `max.block.ms` (60 s) for metadata, this waits half of that.
    for _ in 0..TOPIC_READY_POLLS {
        let response = cluster.metadata(Some(&[name])).await?;
        if let Some(leaders) = cluster.leaders_in(&response, name)? {
            if leaders.len() as i32 >= partitions
                && leaders_know_topic(cluster, &response, name).await?
            {
                return Ok(leaders);
            }
        }
        glommio::timer::sleep(Duration::from_millis(TOPIC_READY_POLL_MS)).await;
    }
    bail!(
        "topic {name} has no leaders that know it {} s after creation",
        TOPIC_READY_POLLS * TOPIC_READY_POLL_MS / 1000
    )
}

/// Whether every broker that `response` (Metadata for `topic`) names as a leader knows
/// the topic itself.
async fn leaders_know_topic(
    cluster: &mut Cluster,
    response: &MetadataResponse,
    topic: &str,
) -> Result<bool> {
    let leader_ids: std::collections::BTreeSet<i32> = response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.leader_id.0))
        .collect();
    for leader_id in leader_ids {
        if !cluster.broker_knows_topic(leader_id, topic).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// An idempotent producer's identity, from InitProducerId.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub id: i64,
    pub epoch: i16,
}

/// A broker as DescribeCluster lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerDescription {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Known from DescribeCluster v2 on; false before.
    pub fenced: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: String,
    pub controller_id: i32,
    /// By broker id, fenced ones included when the broker can say (v2).
    pub brokers: Vec<BrokerDescription>,
}

/// The cluster as the broker `connection` leads to sees it (DescribeCluster).
pub async fn describe_cluster(connection: &mut Connection) -> Result<ClusterDescription> {
    let version = connection.version::<DescribeClusterRequest>()?;
    let request = DescribeClusterRequest::default().with_include_fenced_brokers(version >= 2);
    let answer = connection.call_at(version, &request).await?;
    check(answer.error_code, answer.error_message.as_ref(), || {
        "DescribeCluster".to_string()
    })?;
    let mut brokers: Vec<BrokerDescription> = answer
        .brokers
        .iter()
        .map(|broker| BrokerDescription {
            id: broker.broker_id.0,
            host: broker.host.to_string(),
            port: broker.port,
            rack: broker.rack.as_ref().map(|rack| rack.to_string()),
            fenced: broker.is_fenced,
        })
        .collect();
    brokers.sort_by_key(|broker| broker.id);
    Ok(ClusterDescription {
        cluster_id: answer.cluster_id.to_string(),
        controller_id: answer.controller_id.0,
        brokers,
    })
}

/// One voter of the metadata quorum and how far its log goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub log_end_offset: i64,
}

/// The metadata quorum (DescribeQuorum): its leader, high watermark and voters; `None`
/// when the broker does not offer the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<Voter>,
}

pub async fn describe_quorum(connection: &mut Connection) -> Result<Option<QuorumDescription>> {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    if !connection.supports::<DescribeQuorumRequest>() {
        return Ok(None);
    }
    let version = connection.version::<DescribeQuorumRequest>()?;
    let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(topic_name("__cluster_metadata"))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let answer = connection.call_at(version, &request).await?;
    check(answer.error_code, answer.error_message.as_ref(), || {
        "DescribeQuorum".to_string()
    })?;
    let partition = answer
        .topics
        .first()
        .and_then(|topic| topic.partitions.first())
        .ok_or_else(|| anyhow!("DescribeQuorum answered no partition"))?;
    check(
        partition.error_code,
        partition.error_message.as_ref(),
        || "DescribeQuorum".to_string(),
    )?;
    Ok(Some(QuorumDescription {
        leader_id: partition.leader_id.0,
        leader_epoch: partition.leader_epoch,
        high_watermark: partition.high_watermark,
        voters: partition
            .current_voters
            .iter()
            .map(|voter| Voter {
                id: voter.replica_id.0,
                log_end_offset: voter.log_end_offset,
            })
            .collect(),
    }))
}

/// A producer id and epoch for an idempotent producer (no transactional id), from the
/// broker `connection` leads to; `None` when it does not offer InitProducerId.
pub async fn init_producer_id(connection: &mut Connection) -> Result<Option<ProducerIdentity>> {
    if !connection.supports::<InitProducerIdRequest>() {
        return Ok(None);
    }
    let version = connection.version::<InitProducerIdRequest>()?;
    let request = InitProducerIdRequest::default()
        // Null, not the codec's default of "": an empty transactional id is refused.
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let answer = connection.call_at(version, &request).await?;
    check(answer.error_code, None, || "InitProducerId".to_string())?;
    Ok(Some(ProducerIdentity {
        id: answer.producer_id.0,
        epoch: answer.producer_epoch,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, BrokerId, CreateTopicsResponse, DeleteTopicsResponse, MetadataResponse,
        RequestKind, ResponseKind,
    };

    use super::*;
    use crate::fake_broker::{api_versions, broker_entry, FakeBroker};

    /// A broker on which `t` appears only once someone created it, and CreateTopics answers
    /// TOPIC_ALREADY_EXISTS (another client won the race).
    fn fake(delete_max: i16, deleted: Arc<Mutex<Vec<String>>>) -> FakeBroker {
        let created = Arc::new(Mutex::new(false));
        FakeBroker::start(Box::new(move |request, _, port| match request {
            RequestKind::ApiVersions(_) => api_versions(&[
                (ApiKey::ApiVersions, 0, 3),
                (ApiKey::Metadata, 0, 12),
                (ApiKey::CreateTopics, 0, 7),
                (ApiKey::DeleteTopics, 0, delete_max),
            ]),
            RequestKind::Metadata(_) => {
                let exists = *created.lock().unwrap();
                let topic = MetadataResponseTopic::default()
                    .with_name(Some(topic_name("t")))
                    .with_error_code(if exists { 0 } else { 3 })
                    .with_partitions(if exists {
                        vec![MetadataResponsePartition::default().with_leader_id(BrokerId(1))]
                    } else {
                        Vec::new()
                    });
                ResponseKind::Metadata(
                    MetadataResponse::default()
                        .with_brokers(vec![broker_entry(port)])
                        .with_topics(vec![topic]),
                )
            }
            RequestKind::CreateTopics(_) => {
                *created.lock().unwrap() = true;
                ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(vec![
                    CreatableTopicResult::default()
                        .with_name(topic_name("t"))
                        .with_error_code(codes::TOPIC_ALREADY_EXISTS),
                ]))
            }
            RequestKind::DeleteTopics(request) => {
                let mut names: Vec<String> = request
                    .topic_names
                    .iter()
                    .map(|n| n.0.to_string())
                    .collect();
                names.extend(
                    request
                        .topics
                        .iter()
                        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())),
                );
                deleted.lock().unwrap().extend(names);
                ResponseKind::DeleteTopics(
                    DeleteTopicsResponse::default()
                        .with_responses(vec![DeletableTopicResult::default()]),
                )
            }
            other => panic!("not scripted: {other:?}"),
        }))
    }

    #[test]
    fn ensure_topic_accepts_a_creation_race_and_delete_speaks_both_shapes() {
        for delete_max in [6, 5] {
            let deleted = Arc::new(Mutex::new(Vec::new()));
            let fake = fake(delete_max, deleted.clone());
            crate::blocking::run(async {
                let mut cluster = Cluster::connect(&fake.address(), "test").await.unwrap();
                let topic = NewTopic {
                    partitions: Some(1),
                    ..NewTopic::default()
                };
                let leaders = ensure_topic(&mut cluster, "t", &topic).await.unwrap();
                assert_eq!(leaders.len(), 1);
                let error = create_topic(&mut cluster, "t", &topic).await.unwrap_err();
                assert_eq!(code_of(&error), Some(codes::TOPIC_ALREADY_EXISTS));
                delete_topic(&mut cluster, "t").await.unwrap();
            })
            .unwrap();
            assert_eq!(
                *deleted.lock().unwrap(),
                ["t"],
                "DeleteTopics v{delete_max}"
            );
            assert_eq!(fake.seen(ApiKey::DeleteTopics), [delete_max]);
        }
    }

    /// The bootstrap broker (node 1) names node 2 as the leader, and node 2 learns the
    /// topic only at its fourth Metadata answer: `ensure_topic` waits for that.
    #[test]
    fn ensure_topic_waits_until_each_leader_knows_the_topic() {
        let topic = |known: bool| {
            MetadataResponseTopic::default()
                .with_name(Some(topic_name("t")))
                .with_error_code(if known { 0 } else { 3 })
                .with_partitions(if known {
                    vec![MetadataResponsePartition::default().with_leader_id(BrokerId(2))]
                } else {
                    Vec::new()
                })
        };
        let versions = || api_versions(&[(ApiKey::ApiVersions, 0, 3), (ApiKey::Metadata, 0, 12)]);
        let answers = Arc::new(Mutex::new(0));
        let leader = FakeBroker::start(Box::new({
            let answers = answers.clone();
            move |request, _, _| match request {
                RequestKind::ApiVersions(_) => versions(),
                RequestKind::Metadata(_) => {
                    let mut answers = answers.lock().unwrap();
                    *answers += 1;
                    ResponseKind::Metadata(
                        MetadataResponse::default().with_topics(vec![topic(*answers >= 4)]),
                    )
                }
                other => panic!("not scripted: {other:?}"),
            }
        }));
        let leader_port = leader.port;
        let bootstrap = FakeBroker::start(Box::new(move |request, _, port| match request {
            RequestKind::ApiVersions(_) => versions(),
            RequestKind::Metadata(_) => ResponseKind::Metadata(
                MetadataResponse::default()
                    .with_brokers(vec![
                        broker_entry(port),
                        broker_entry(leader_port).with_node_id(BrokerId(2)),
                    ])
                    .with_topics(vec![topic(true)]),
            ),
            other => panic!("not scripted: {other:?}"),
        }));
        crate::blocking::run(async {
            let mut cluster = Cluster::connect(&bootstrap.address(), "test")
                .await
                .unwrap();
            let leaders = ensure_topic(&mut cluster, "t", &NewTopic::default())
                .await
                .unwrap();
            assert_eq!(leaders.len(), 1);
        })
        .unwrap();
        assert_eq!(
            *answers.lock().unwrap(),
            4,
            "returned before the leader knew the topic"
        );
    }
}
