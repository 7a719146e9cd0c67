//! Offsets: log offsets by time (ListOffsets, sent to each partition's leader) and a group's
//! committed offsets (OffsetFetch and OffsetCommit, sent to the group's coordinator).
//!
//! Invariants:
//! - Answers are keyed by (topic, partition) and sorted, so plans and tables print in a
//!   stable order.
//! - A committed offset of -1 means "none" and is left out of [`committed`]'s answer.
//! - Any per-partition error fails the whole call with Kafka's error name; nothing is
//!   silently dropped.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    BrokerId, GroupId, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::{topic_name, Cluster, TopicInfo};
use crate::connection::Connection;
use crate::error::{check, codes};

/// ListOffsets' special timestamps.
pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;

/// A topic partition, as offsets are keyed.
pub type TopicPartition = (String, i32);

/// The offset of the first record at or after `timestamp` (or [`LATEST`]/[`EARLIEST`]) in
/// each of `partitions` of `topic`; `None` where no record is that recent.
pub async fn list_offsets(
    cluster: &mut Cluster,
    topic: &TopicInfo,
    partitions: &[i32],
    timestamp: i64,
) -> Result<BTreeMap<i32, Option<i64>>> {
    let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for partition in partitions {
        let info = topic
            .partitions
            .iter()
            .find(|p| p.partition == *partition)
            .ok_or_else(|| anyhow!("partition {partition} of {} does not exist", topic.name))?;
        by_leader.entry(info.leader).or_default().push(*partition);
    }
    let mut offsets = BTreeMap::new();
    for (leader, partitions) in by_leader {
        if leader < 0 {
            check(codes::LEADER_NOT_AVAILABLE, None, || {
                format!("offsets of {}", topic.name)
            })?;
        }
        let connection = cluster.broker(leader).await?;
        let version = connection.version::<ListOffsetsRequest>()?;
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(&topic.name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(*p)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )]);
        let response = connection.call_at(version, &request).await?;
        for answered in response.topics.iter().flat_map(|t| t.partitions.iter()) {
            check(answered.error_code, None, || {
                format!("offsets of {}-{}", topic.name, answered.partition_index)
            })?;
            let offset = (answered.offset >= 0).then_some(answered.offset);
            offsets.insert(answered.partition_index, offset);
        }
    }
    for partition in partitions {
        if !offsets.contains_key(partition) {
            bail!("ListOffsets did not answer for {}-{partition}", topic.name);
        }
    }
    Ok(offsets)
}

/// Like [`list_offsets`] for [`LATEST`] or [`EARLIEST`], which always have an answer.
pub async fn log_offsets(
    cluster: &mut Cluster,
    topic: &TopicInfo,
    partitions: &[i32],
    which: i64,
) -> Result<BTreeMap<i32, i64>> {
    if which != LATEST && which != EARLIEST {
        bail!("log offsets are LATEST or EARLIEST, not timestamp {which}");
    }
    Ok(list_offsets(cluster, topic, partitions, which)
        .await?
        .into_iter()
        .map(|(partition, offset)| (partition, offset.unwrap_or(0)))
        .collect())
}

/// `group`'s committed offsets, for `topics` (topic, partitions) or, when `None`, for
/// every partition it has committed.
pub async fn committed(
    coordinator: &mut Connection,
    group: &str,
    topics: Option<&[(String, Vec<i32>)]>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let version = coordinator.version::<OffsetFetchRequest>()?;
    let group_id = GroupId(StrBytes::from_string(group.to_string()));
    let mut request = OffsetFetchRequest::default();
    if version >= 8 {
        request.topics = Some(Vec::new());
        request.groups = vec![OffsetFetchRequestGroup::default()
            .with_group_id(group_id)
            .with_topics(topics.map(|topics| {
                topics
                    .iter()
                    .map(|(name, partitions)| {
                        OffsetFetchRequestTopics::default()
                            .with_name(topic_name(name))
                            .with_partition_indexes(partitions.clone())
                    })
                    .collect()
            }))];
    } else {
        if topics.is_none() && version < 2 {
            bail!("the coordinator's OffsetFetch (v{version}) cannot list every topic");
        }
        request.group_id = group_id;
        request.topics = topics.map(|topics| {
            topics
                .iter()
                .map(|(name, partitions)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(topic_name(name))
                        .with_partition_indexes(partitions.clone())
                })
                .collect()
        });
    }
    let response = coordinator.call_at(version, &request).await?;
    let what = || format!("committed offsets of group {group}");
    let mut offsets = BTreeMap::new();
    if version >= 8 {
        let answer = response
            .groups
            .first()
            .ok_or_else(|| anyhow!("OffsetFetch answered for no group"))?;
        check(answer.error_code, None, what)?;
        for topic in &answer.topics {
            for partition in &topic.partitions {
                check(partition.error_code, None, what)?;
                if partition.committed_offset >= 0 {
                    let key = (topic.name.0.to_string(), partition.partition_index);
                    offsets.insert(key, partition.committed_offset);
                }
            }
        }
    } else {
        if version >= 2 {
            check(response.error_code, None, what)?;
        }
        for topic in &response.topics {
            for partition in &topic.partitions {
                check(partition.error_code, None, what)?;
                if partition.committed_offset >= 0 {
                    let key = (topic.name.0.to_string(), partition.partition_index);
                    offsets.insert(key, partition.committed_offset);
                }
            }
        }
    }
    Ok(offsets)
}

/// Who commits: a member of the current generation, or an admin (generation -1, no member,
/// accepted by the coordinator only while the group is empty).
#[derive(Clone, Debug)]
pub struct Committer<'a> {
    pub generation_id: i32,
    pub member_id: &'a str,
}

pub const ADMIN: Committer<'static> = Committer {
    generation_id: -1,
    member_id: "",
};

/// Commits `offsets` for `group`.
pub async fn commit(
    coordinator: &mut Connection,
    group: &str,
    committer: &Committer<'_>,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let version = coordinator.version::<OffsetCommitRequest>()?;
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for ((topic, partition), offset) in offsets {
        if topics.last().is_none_or(|t| t.name.0.as_str() != topic) {
            topics.push(OffsetCommitRequestTopic::default().with_name(topic_name(topic)));
        }
        if let Some(last) = topics.last_mut() {
            last.partitions.push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset),
            );
        }
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(committer.generation_id)
        .with_member_id(StrBytes::from_string(committer.member_id.to_string()))
        .with_topics(topics);
    let response = coordinator.call_at(version, &request).await?;
    for topic in &response.topics {
        for partition in &topic.partitions {
            check(partition.error_code, None, || {
                format!(
                    "commit offsets of group {group} for {}-{}",
                    topic.name.0.as_str(),
                    partition.partition_index
                )
            })?;
        }
    }
    Ok(())
}
