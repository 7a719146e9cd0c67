//! OffsetCommit: offsets are made durable in `__consumer_offsets` on the coordinator shard
//! before the answer; one error code per partition, in request order.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, ResponseKind};

use super::group_route::{ensure_offsets_topic, on_coordinator, string};
use crate::groups::coordinator::CommitPart;
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: OffsetCommitRequest) -> ResponseKind {
    let group_id = string(&request.group_id.0);
    let member_id = string(&request.member_id);
    let instance_id = request.group_instance_id.as_ref().map(string);
    let generation = request.generation_id_or_member_epoch;
    let parts: Vec<CommitPart> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| CommitPart {
                topic: string(&topic.name.0),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(string),
            })
        })
        .collect();
    let count = parts.len();
    let group = group_id.clone();
    let codes = match ensure_offsets_topic(shard).await {
        Err(error_code) => vec![error_code; count],
        Ok(()) => on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
            let instance = instance_id.as_deref();
            owner
                .groups
                .commit(&owner, &group, &member_id, instance, generation, parts)
                .await
        })
        .await
        .unwrap_or_else(|error_code| vec![error_code; count]),
    };
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or_default())
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics))
}
