//! OffsetDelete: removes a group's committed offsets for partitions it no longer consumes;
//! a topic some active member subscribes to gets GROUP_SUBSCRIBED_TO_TOPIC.

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, ResponseKind};

use super::group_route::{on_coordinator, string};
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: OffsetDeleteRequest) -> ResponseKind {
    let group_id = string(&request.group_id.0);
    let parts: Vec<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (string(&t.name.0), p.partition_index))
        })
        .collect();
    let group = group_id.clone();
    let result = on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
        owner.groups.delete_offsets(&owner, &group, parts).await
    })
    .await
    .and_then(|result| result);
    let codes = match result {
        Err(error_code) => {
            return ResponseKind::OffsetDelete(
                OffsetDeleteResponse::default().with_error_code(error_code),
            )
        }
        Ok(codes) => codes,
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
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or_default())
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_topics(topics))
}
