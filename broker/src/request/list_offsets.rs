//! ListOffsets: earliest (-2), latest (-1), the record with the largest timestamp (-3,
//! v7), the earliest local offset (-4, v8) and the latest tiered one (-5, v9), or the first
//! offset whose record timestamp is at or after a time, through the time index; asked of
//! each owner. For a consumer (replica id -1) only what it may read counts (the high
//! watermark), under either isolation level until transactions exist; for a replica or a
//! tool (replica id -2, or a broker's id) the whole local log counts (the log end offset),
//! as in Kafka, so that a tool can see how far each replica's log reaches. Without tiered storage the local log is the
//! whole log, and nothing is tiered: -4 answers the log start offset and -5 no offset, as
//! Kafka does. v10's timeout bounds remote lookups, of which there are none. Only the
//! partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, except for the debugging
//! replica id -2), and a `current_leader_epoch` (v4+) that is not the leader's is fenced or
//! unknown, as Kafka checks it.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};

use crate::errors::{self, code};
use crate::partition::DEBUGGING_REPLICA_ID;
use crate::shard_state::Shard;

/// The replica id consumers send.
const CONSUMER_REPLICA_ID: i32 = -1;
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub async fn handle(shard: &Rc<Shard>, request: ListOffsetsRequest, version: i16) -> ResponseKind {
    let mut response = ListOffsetsResponse::default();
    let require_leader = request.replica_id.0 != DEBUGGING_REPLICA_ID;
    let consumer = request.replica_id.0 == CONSUMER_REPLICA_ID;
    for topic in request.topics {
        let name = topic.name.to_string();
        let mut answers = Vec::with_capacity(topic.partitions.len());
        for wanted in topic.partitions {
            let (index, timestamp) = (wanted.partition_index, wanted.timestamp);
            let asked = Asked {
                timestamp,
                current_leader_epoch: if version >= 4 {
                    wanted.current_leader_epoch
                } else {
                    -1
                },
                require_leader,
                consumer,
                version,
            };
            let answer = if index < 0 {
                unknown(index)
            } else {
                let topic = name.clone();
                let owner = shard.owner(&name, index);
                let job = move |owner: Rc<Shard>| offset_on_owner(owner, topic, index, asked);
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

/// What one partition's lookup asks.
#[derive(Clone, Copy)]
struct Asked {
    timestamp: i64,
    current_leader_epoch: i32,
    require_leader: bool,
    /// A consumer's request (replica id -1): only up to the high watermark counts.
    consumer: bool,
    version: i16,
}

async fn offset_on_owner(
    shard: Rc<Shard>,
    topic: String,
    index: i32,
    asked: Asked,
) -> ListOffsetsPartitionResponse {
    let Some(partition) = shard.partition(&topic, index) else {
        return unknown(index);
    };
    let Asked {
        timestamp, version, ..
    } = asked;
    if let Err(error_code) =
        partition.check_leader(asked.current_leader_epoch, asked.require_leader)
    {
        return unknown(index).with_error_code(error_code);
    }
    let answer = ListOffsetsPartitionResponse::default()
        .with_partition_index(index)
        .with_timestamp(-1)
        // The leader epoch exists from v4 on; the codec refuses it in older versions.
        .with_leader_epoch(if version >= 4 {
            partition.leadership().leader_epoch
        } else {
            -1
        });
    // A query the version cannot carry is refused as Kafka refuses it.
    let since = match timestamp {
        MAX_TIMESTAMP => 7,
        EARLIEST_LOCAL => 8,
        LATEST_TIERED => 9,
        _ => 0,
    };
    if version < since {
        return answer
            .with_error_code(code(ResponseError::UnsupportedVersion))
            .with_offset(-1);
    }
    let visible = if asked.consumer {
        partition.high_watermark()
    } else {
        partition.log.log_end_offset()
    };
    let looked_up = match timestamp {
        LATEST => return answer.with_offset(visible),
        EARLIEST | EARLIEST_LOCAL => return answer.with_offset(partition.log.log_start_offset()),
        LATEST_TIERED => return answer.with_offset(-1).with_leader_epoch(-1),
        MAX_TIMESTAMP => partition.log.max_timestamp_record().await,
        0.. => partition.log.offset_for_timestamp(timestamp).await,
        _ => {
            return answer
                .with_error_code(code(ResponseError::InvalidRequest))
                .with_offset(-1)
        }
    };
    match looked_up {
        Ok(Some((offset, found_at))) if offset < visible => {
            answer.with_offset(offset).with_timestamp(found_at)
        }
        Ok(_) => answer.with_offset(-1),
        Err(error) => answer
            .with_error_code(errors::storage_error(&error))
            .with_offset(-1),
    }
}
