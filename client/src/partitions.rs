//! Partition leadership and replica moves, sent to the controller that Metadata names (as
//! Kafka's admin client sends them): ElectLeaders (preferred or unclean),
//! AlterPartitionReassignments (start or cancel moves) and ListPartitionReassignments.
//!
//! Invariants: an answer's per-partition errors are returned per partition (one partition
//! refused does not hide the others' outcome); an error of the whole request is an error of
//! the call, with Kafka's name for it.

use anyhow::Result;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::admin::ADMIN_TIMEOUT_MS;
use crate::cluster::{topic_name, Cluster};
use crate::error::{check, KafkaError};

/// Kafka's `ElectionType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionType {
    /// The preferred (first) replica, if it is in sync and live.
    Preferred = 0,
    /// For a partition without a leader: any live replica, in sync or not.
    Unclean = 1,
}

/// A partition to move, by topic name and index, and the replicas to move it to (`None`:
/// cancel its move in progress).
pub type Move = ((String, i32), Option<Vec<i32>>);

/// One partition's outcome: `Ok` or Kafka's error for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOutcome {
    pub topic: String,
    pub partition: i32,
    pub result: Result<(), KafkaError>,
}

/// A move in progress, as ListPartitionReassignments gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OngoingMove {
    pub topic: String,
    pub partition: i32,
    /// Every replica while the move lasts: the targets first, then those leaving.
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

fn outcome(
    topic: &str,
    partition: i32,
    code: i16,
    message: Option<&StrBytes>,
    what: &str,
) -> PartitionOutcome {
    PartitionOutcome {
        topic: topic.to_string(),
        partition,
        result: if code == 0 {
            Ok(())
        } else {
            Err(KafkaError {
                code,
                what: format!("{what} {topic}-{partition}"),
                message: message.map(|m| m.to_string()),
            })
        },
    }
}

/// Elects leaders for `partitions` (every partition when `None`: then the answer names only
/// the partitions whose leader changed or could not).
pub async fn elect_leaders(
    cluster: &mut Cluster,
    election: ElectionType,
    partitions: Option<&[(String, i32)]>,
) -> Result<Vec<PartitionOutcome>> {
    let connection = cluster.controller().await?;
    let version = connection.version::<ElectLeadersRequest>()?;
    if version == 0 && election != ElectionType::Preferred {
        anyhow::bail!("the broker knows only preferred elections (ElectLeaders v0)");
    }
    let topic_partitions = partitions.map(|partitions| {
        let mut topics: Vec<TopicPartitions> = Vec::new();
        for (topic, partition) in partitions {
            match topics.iter_mut().find(|t| t.topic.as_str() == topic) {
                Some(entry) => entry.partitions.push(*partition),
                None => topics.push(
                    TopicPartitions::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(vec![*partition]),
                ),
            }
        }
        topics
    });
    let request = ElectLeadersRequest::default()
        .with_election_type(election as i8)
        .with_topic_partitions(topic_partitions)
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let response = connection.call_at(version, &request).await?;
    check(response.error_code, None, || "elect leaders".into())?;
    Ok(response
        .replica_election_results
        .iter()
        .flat_map(|topic| {
            topic.partition_result.iter().map(|p| {
                outcome(
                    &topic.topic,
                    p.partition_id,
                    p.error_code,
                    p.error_message.as_ref(),
                    "elect a leader of",
                )
            })
        })
        .collect())
}

/// Starts moving each partition to the replicas given (the first the preferred leader), or
/// cancels its move in progress (`None`).
pub async fn alter_reassignments(
    cluster: &mut Cluster,
    moves: &[Move],
) -> Result<Vec<PartitionOutcome>> {
    let connection = cluster.controller().await?;
    let version = connection.version::<AlterPartitionReassignmentsRequest>()?;
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for ((topic, partition), replicas) in moves {
        let partition = ReassignablePartition::default()
            .with_partition_index(*partition)
            .with_replicas(
                replicas
                    .as_ref()
                    .map(|ids| ids.iter().copied().map(BrokerId).collect()),
            );
        match topics.iter_mut().find(|t| t.name.as_str() == topic) {
            Some(entry) => entry.partitions.push(partition),
            None => topics.push(
                ReassignableTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_allow_replication_factor_change(true)
        .with_topics(topics);
    let response = connection.call_at(version, &request).await?;
    check(response.error_code, response.error_message.as_ref(), || {
        "reassign partitions".into()
    })?;
    Ok(response
        .responses
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| {
                outcome(
                    &topic.name,
                    p.partition_index,
                    p.error_code,
                    p.error_message.as_ref(),
                    "reassign",
                )
            })
        })
        .collect())
}

/// The moves in progress, of `topics` (all partitions of each) or of every topic.
pub async fn list_reassignments(
    cluster: &mut Cluster,
    topics: Option<&[String]>,
) -> Result<Vec<OngoingMove>> {
    let wanted = match topics {
        None => None,
        Some(names) => {
            let mut wanted = Vec::new();
            for name in names {
                let info = cluster.topic(name).await?;
                wanted.push(
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(name))
                        .with_partition_indexes(
                            info.partitions.iter().map(|p| p.partition).collect(),
                        ),
                );
            }
            Some(wanted)
        }
    };
    let connection = cluster.controller().await?;
    let version = connection.version::<ListPartitionReassignmentsRequest>()?;
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(wanted);
    let response = connection.call_at(version, &request).await?;
    check(response.error_code, response.error_message.as_ref(), || {
        "list partition reassignments".into()
    })?;
    let ids = |ids: &[BrokerId]| ids.iter().map(|id| id.0).collect();
    let mut moves: Vec<OngoingMove> = response
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| OngoingMove {
                topic: topic.name.to_string(),
                partition: p.partition_index,
                replicas: ids(&p.replicas),
                adding: ids(&p.adding_replicas),
                removing: ids(&p.removing_replicas),
            })
        })
        .collect();
    moves.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(moves)
}
