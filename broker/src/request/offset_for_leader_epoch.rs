//! OffsetsForLeaderEpoch (KIP-101, KIP-320): for each partition and leader epoch asked, the
//! largest epoch at or below it that wrote to the log and where it ended, from the
//! partition's leader-epoch checkpoint. Consumers ask it after a leader change to check that
//! their position was not truncated away; followers ask it to find where their log diverges.
//! Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, except for the debugging
//! replica id -2), after the request's `current_leader_epoch` is checked as Fetch checks it;
//! an epoch above the latest is answered UNDEFINED (-1, -1) without an error.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};

use crate::errors::code;
use crate::partition::DEBUGGING_REPLICA_ID;
use crate::shard_state::Shard;

const UNDEFINED_EPOCH: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

pub async fn handle(shard: &Rc<Shard>, request: OffsetForLeaderEpochRequest) -> ResponseKind {
    let require_leader = request.replica_id.0 != DEBUGGING_REPLICA_ID;
    let mut response = OffsetForLeaderEpochResponse::default();
    for topic in request.topics {
        let name = topic.topic.to_string();
        let mut answers = Vec::with_capacity(topic.partitions.len());
        for wanted in topic.partitions {
            let index = wanted.partition;
            let answer = if index < 0 {
                unknown(index)
            } else {
                let topic = name.clone();
                let (current, epoch) = (wanted.current_leader_epoch, wanted.leader_epoch);
                let job = move |owner: Rc<Shard>| async move {
                    end_offset_on_owner(&owner, &topic, index, current, epoch, require_leader)
                };
                shard
                    .router
                    .call(shard, shard.owner(&name, index), job)
                    .await
                    .unwrap_or_else(|_| unknown(index))
            };
            answers.push(answer);
        }
        response.topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(answers),
        );
    }
    ResponseKind::OffsetForLeaderEpoch(response)
}

fn unknown(index: i32) -> EpochEndOffset {
    undefined(index).with_error_code(code(ResponseError::UnknownTopicOrPartition))
}

fn undefined(index: i32) -> EpochEndOffset {
    EpochEndOffset::default()
        .with_partition(index)
        .with_leader_epoch(UNDEFINED_EPOCH)
        .with_end_offset(UNDEFINED_OFFSET)
}

fn end_offset_on_owner(
    shard: &Shard,
    topic: &str,
    index: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
    require_leader: bool,
) -> EpochEndOffset {
    let Some(partition) = shard.partition(topic, index) else {
        return unknown(index);
    };
    if let Err(error_code) = partition.check_leader(current_leader_epoch, require_leader) {
        return undefined(index).with_error_code(error_code);
    }
    match partition.log.end_offset_for_epoch(leader_epoch) {
        Some((epoch, end_offset)) => EpochEndOffset::default()
            .with_partition(index)
            .with_leader_epoch(epoch)
            .with_end_offset(end_offset),
        None => undefined(index),
    }
}
