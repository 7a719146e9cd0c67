//! DeleteRecords: make the records of a partition below an offset unreadable (-1: the high
//! watermark), on each owning shard; the answer is the partition's new low watermark (its
//! log start offset). Only the leader deletes (NOT_LEADER_OR_FOLLOWER elsewhere); an offset
//! past the high watermark is OFFSET_OUT_OF_RANGE; a topic whose `cleanup.policy` does not
//! delete is refused with POLICY_VIOLATION, as Kafka refuses it. On one node there are no
//! followers to wait for, so `timeout_ms` bounds nothing.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use crate::errors::{self, code};
use crate::shard_state::Shard;

/// The offset that asks for everything below the high watermark.
const HIGH_WATERMARK: i64 = -1;

pub async fn handle(shard: &Rc<Shard>, request: DeleteRecordsRequest) -> ResponseKind {
    let mut response = DeleteRecordsResponse::default();
    for topic in request.topics {
        let name = topic.name.to_string();
        let mut answers = Vec::with_capacity(topic.partitions.len());
        for wanted in topic.partitions {
            let (index, offset) = (wanted.partition_index, wanted.offset);
            let answer = if index < 0 {
                refused(index, code(ResponseError::UnknownTopicOrPartition))
            } else {
                let topic = name.clone();
                let job = move |owner: Rc<Shard>| async move {
                    delete_on_owner(&owner, &topic, index, offset).await
                };
                shard
                    .router
                    .call(shard, shard.owner(&name, index), job)
                    .await
                    .unwrap_or_else(|_| refused(index, code(ResponseError::NotLeaderOrFollower)))
            };
            answers.push(answer);
        }
        response.topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(answers),
        );
    }
    ResponseKind::DeleteRecords(response)
}

fn refused(index: i32, error_code: i16) -> DeleteRecordsPartitionResult {
    DeleteRecordsPartitionResult::default()
        .with_partition_index(index)
        .with_low_watermark(-1)
        .with_error_code(error_code)
}

async fn delete_on_owner(
    shard: &Shard,
    topic: &str,
    index: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let image = shard.image();
    let (Some(meta), Some(partition)) = (image.topic(topic), shard.partition(topic, index)) else {
        return refused(index, code(ResponseError::UnknownTopicOrPartition));
    };
    if let Err(error_code) = partition.check_leader(-1, true) {
        return refused(index, error_code);
    }
    if !shard.cleans_by(meta, "delete") {
        return refused(index, code(ResponseError::PolicyViolation));
    }
    let high_watermark = partition.high_watermark();
    let offset = if offset == HIGH_WATERMARK {
        high_watermark
    } else {
        offset
    };
    if !(0..=high_watermark).contains(&offset) {
        return refused(index, code(ResponseError::OffsetOutOfRange));
    }
    match partition.log.delete_records_before(offset).await {
        Ok(low_watermark) => DeleteRecordsPartitionResult::default()
            .with_partition_index(index)
            .with_low_watermark(low_watermark),
        Err(error) => refused(index, errors::read_error(&error)),
    }
}
