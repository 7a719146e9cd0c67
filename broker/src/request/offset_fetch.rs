//! OffsetFetch: committed offsets of one group (v0–v7) or several (v8+); a partition with
//! no commit reports offset -1, as Kafka does.

use std::rc::Rc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetFetchRequest, OffsetFetchResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::group_route::{ensure_offsets_topic, on_coordinator, string};
use crate::errors::NONE;
use crate::groups::coordinator::{Committed, CommittedByTopic};
use crate::shard_state::Shard;

async fn fetch(
    shard: &Rc<Shard>,
    group_id: String,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Result<CommittedByTopic, i16> {
    ensure_offsets_topic(shard).await?;
    let group = group_id.clone();
    on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
        owner.groups.fetch_offsets(&owner, &group, wanted)
    })
    .await?
}

pub async fn handle(shard: &Rc<Shard>, request: OffsetFetchRequest, version: i16) -> ResponseKind {
    let text = StrBytes::from_string;
    if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in request.groups {
            let wanted = group.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .map(|t| (string(&t.name.0), t.partition_indexes.clone()))
                    .collect()
            });
            let answer = OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone());
            groups.push(
                match fetch(shard, string(&group.group_id.0), wanted).await {
                    Err(error_code) => answer.with_error_code(error_code),
                    Ok(found) => answer.with_topics(
                        found
                            .into_iter()
                            .map(|(topic, partitions)| {
                                let partitions = partitions
                                    .into_iter()
                                    .map(|(index, committed)| {
                                        let (offset, epoch, metadata) = fields(committed);
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(index)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(text(metadata)))
                                    })
                                    .collect();
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(text(topic)))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    ),
                },
            );
        }
        return ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(groups));
    }
    let wanted = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .map(|t| (string(&t.name.0), t.partition_indexes.clone()))
            .collect()
    });
    let GroupId(group_id) = request.group_id;
    let mut response = OffsetFetchResponse::default();
    match fetch(shard, string(&group_id), wanted).await {
        Err(error_code) => {
            if version >= 2 {
                response.error_code = error_code;
            } else if let Some(topics) = request.topics {
                // v1 has no top-level error: every partition carries it.
                response.topics = topics
                    .into_iter()
                    .map(|t| {
                        let partitions = t
                            .partition_indexes
                            .iter()
                            .map(|p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(-1)
                                    .with_error_code(error_code)
                            })
                            .collect();
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(partitions)
                    })
                    .collect();
            }
        }
        Ok(found) => {
            response.error_code = NONE;
            response.topics = found
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, committed)| {
                            let (offset, epoch, metadata) = fields(committed);
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
                                .with_metadata(Some(text(metadata)))
                        })
                        .collect();
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(text(topic)))
                        .with_partitions(partitions)
                })
                .collect();
        }
    }
    ResponseKind::OffsetFetch(response)
}

/// (offset, leader epoch, metadata) of a commit, or Kafka's "no commit" values.
fn fields(committed: Option<Committed>) -> (i64, i32, String) {
    match committed {
        Some(c) => (c.offset, c.leader_epoch, c.metadata),
        None => (-1, -1, String::new()),
    }
}
