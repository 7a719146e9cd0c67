//! OffsetCommit: offsets are made durable in `__consumer_offsets` on the coordinator shard
//! before the answer; one error code per partition, in request order. Admitted in order: a
//! connection's commits reach the coordinator, and become visible, in the order it sent them.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, ResponseKind};

use net::{Answer, Reply};

use super::group_route::{dispatch_on_coordinator, ensure_offsets_topic, string};
use crate::groups::coordinator::{CommitPart, GroupCoordinator};
use crate::shard_state::Shard;

pub async fn admit(shard: &Rc<Shard>, request: OffsetCommitRequest) -> Answer {
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
    let dispatched = match ensure_offsets_topic(shard).await {
        Err(error_code) => Err(error_code),
        Ok(()) => {
            let job = move |owner: Rc<Shard>| {
                GroupCoordinator::commit(&owner, group, (member_id, instance_id), generation, parts)
            };
            dispatch_on_coordinator(shard, &group_id, job).await
        }
    };
    Box::pin(async move {
        let codes = match dispatched {
            Ok(pending) => pending
                .await
                .unwrap_or_else(|error_code| vec![error_code; count]),
            Err(error_code) => vec![error_code; count],
        };
        respond(request, codes)
    })
}

fn respond(request: OffsetCommitRequest, codes: Vec<i16>) -> Reply {
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
    let response = OffsetCommitResponse::default().with_topics(topics);
    Reply::Respond(Box::new(ResponseKind::OffsetCommit(response)))
}
