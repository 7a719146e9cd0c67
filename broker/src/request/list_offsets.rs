//! ListOffsets: earliest (-2), latest (-1), or the first offset whose batch timestamp is at
//! or after a time, through the time index; asked of each owner. Versions up to 6, so the
//! max-timestamp query (-3, v7) is never asked.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};

use crate::errors::{self, code};
use crate::shard_state::Shard;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

pub async fn handle(shard: &Rc<Shard>, request: ListOffsetsRequest, version: i16) -> ResponseKind {
    let mut response = ListOffsetsResponse::default();
    for topic in request.topics {
        let name = topic.name.to_string();
        let mut answers = Vec::with_capacity(topic.partitions.len());
        for wanted in topic.partitions {
            let (index, timestamp) = (wanted.partition_index, wanted.timestamp);
            let answer = if index < 0 {
                unknown(index)
            } else {
                let topic = name.clone();
                let owner = shard.owner(&name, index);
                let job = move |owner: Rc<Shard>| {
                    offset_on_owner(owner, topic, index, timestamp, version)
                };
                shard
                    .router
                    .call(shard, owner, job)
                    .await
                    .unwrap_or_else(|_| unknown(index))
            };
            answers.push(answer);
        }
        response.topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(answers),
        );
    }
    ResponseKind::ListOffsets(response)
}

fn unknown(index: i32) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(index)
        .with_error_code(code(ResponseError::UnknownTopicOrPartition))
        .with_timestamp(-1)
        .with_offset(-1)
}

async fn offset_on_owner(
    shard: Rc<Shard>,
    topic: String,
    index: i32,
    timestamp: i64,
    version: i16,
) -> ListOffsetsPartitionResponse {
    let Some(partition) = shard.partition(&topic, index) else {
        return unknown(index);
    };
    let answer = ListOffsetsPartitionResponse::default()
        .with_partition_index(index)
        .with_timestamp(-1)
        // The leader epoch exists from v4 on; the codec refuses it in older versions.
        .with_leader_epoch(if version >= 4 { 0 } else { -1 });
    match timestamp {
        LATEST => answer.with_offset(partition.high_watermark()),
        EARLIEST => answer.with_offset(partition.log.log_start_offset()),
        0.. => match partition.log.offset_for_timestamp(timestamp).await {
            // Only what consumers may read counts, as in Kafka.
            Ok(Some((offset, found))) if offset < partition.high_watermark() => {
                answer.with_offset(offset).with_timestamp(found)
            }
            Ok(_) => answer.with_offset(-1),
            Err(error) => answer
                .with_error_code(errors::storage_error(&error))
                .with_offset(-1),
        },
        _ => answer
            .with_error_code(code(ResponseError::InvalidRequest))
            .with_offset(-1),
    }
}
