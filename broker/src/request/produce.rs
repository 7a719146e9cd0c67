//! Produce: split by owning shard, append on each owner, wait for the disk when
//! `acks=all`, merge the answers in request order.
//!
//! ```text
//! request ─▶ per-owner parts ─▶ router.call(owner) ─▶ Partition::append (one copy)
//!                                                   └▶ acks=all: Partition::sync (group commit)
//!        ◀─ merged in request order ◀───────────────┘
//! ```
//! With `acks=0` nothing is sent back; if any part failed the connection is closed, which
//! is how Kafka tells an acks=0 producer that something went wrong.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind};
use net::Reply;

use super::now_ms;
use crate::errors::{code, NONE};
use crate::shard_state::Shard;

/// One partition's part of the request, as sent to its owner, with its place in the
/// response (topic index, partition index).
struct Part {
    slot: (usize, usize),
    topic: String,
    partition: i32,
    records: Option<Bytes>,
}

pub async fn handle(shard: &Rc<Shard>, request: ProduceRequest, version: i16) -> Reply {
    let acks = request.acks;
    let mut response = ProduceResponse::default();
    let mut parts_by_owner: Vec<Vec<Part>> = (0..shard.router.shard_count())
        .map(|_| Vec::new())
        .collect();
    for (topic_index, topic_data) in request.topic_data.into_iter().enumerate() {
        let topic = topic_data.name.to_string();
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for (partition_index, data) in topic_data.partition_data.into_iter().enumerate() {
            // Overwritten by the owner's answer; a partition no owner has stays unknown.
            partitions.push(
                no_append(data.index).with_error_code(code(ResponseError::UnknownTopicOrPartition)),
            );
            if data.index < 0 {
                continue; // answered below as UNKNOWN_TOPIC_OR_PARTITION
            }
            parts_by_owner[shard.owner(&topic, data.index)].push(Part {
                slot: (topic_index, partition_index),
                topic: topic.clone(),
                partition: data.index,
                records: data.records,
            });
        }
        response.responses.push(
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_partition_responses(partitions),
        );
    }
    let invalid_acks = !matches!(acks, -1..=1);
    let mut calls = Vec::new();
    for (owner, parts) in parts_by_owner.into_iter().enumerate() {
        if parts.is_empty() || invalid_acks {
            continue;
        }
        let shard = shard.clone();
        calls.push(glommio::spawn_local(async move {
            shard
                .router
                .call(&shard, owner, move |owner: Rc<Shard>| {
                    append_on_owner(owner, parts, acks)
                })
                .await
        }));
    }
    for call in calls {
        let answers = match call.await {
            Ok(answers) => answers,
            Err(stopped) => {
                tracing::warn!(%stopped, "produce part lost");
                continue;
            }
        };
        for ((topic_index, partition_index), answer) in answers {
            response.responses[topic_index].partition_responses[partition_index] = answer;
        }
    }
    if invalid_acks {
        for topic in &mut response.responses {
            for partition in &mut topic.partition_responses {
                partition.error_code = code(ResponseError::InvalidRequiredAcks);
            }
        }
    }
    if version < 5 {
        // log_start_offset exists from v5 on; the codec refuses it in older versions.
        for partition in response
            .responses
            .iter_mut()
            .flat_map(|t| &mut t.partition_responses)
        {
            partition.log_start_offset = -1;
        }
    }
    if acks == 0 {
        let failed = response
            .responses
            .iter()
            .flat_map(|topic| &topic.partition_responses)
            .any(|partition| partition.error_code != NONE);
        return if failed { Reply::Close } else { Reply::Silent };
    }
    Reply::Respond(Box::new(ResponseKind::Produce(response)))
}

/// A partition's answer before (or without) an append.
fn no_append(index: i32) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
}

/// Runs on the owning shard: append every part, then wait for the disk once per partition.
async fn append_on_owner(
    shard: Rc<Shard>,
    parts: Vec<Part>,
    acks: i16,
) -> Vec<((usize, usize), PartitionProduceResponse)> {
    let now = now_ms();
    let mut answers = Vec::with_capacity(parts.len());
    let mut to_sync = Vec::new();
    for part in parts {
        let mut answer = no_append(part.partition);
        match (shard.partition(&part.topic, part.partition), part.records) {
            (None, _) => answer.error_code = code(ResponseError::UnknownTopicOrPartition),
            (Some(_), None) => answer.error_code = code(ResponseError::CorruptMessage),
            (Some(partition), Some(records)) => {
                let outcome = partition.append(&records, now).await;
                answer.error_code = outcome.error_code;
                answer.base_offset = outcome.base_offset;
                answer.log_start_offset = outcome.log_start_offset;
                if outcome.error_code == NONE && acks == -1 {
                    to_sync.push((answers.len(), partition));
                }
            }
        }
        answers.push((part.slot, answer));
    }
    // Start every partition's sync before awaiting any, so they overlap.
    let syncs: Vec<_> = to_sync
        .into_iter()
        .map(|(answer_index, partition)| {
            (
                answer_index,
                glommio::spawn_local(async move { partition.sync().await }),
            )
        })
        .collect();
    for (answer_index, sync) in syncs {
        let error_code = sync.await;
        if error_code != NONE {
            let answer = &mut answers[answer_index].1;
            answer.error_code = error_code;
            answer.base_offset = -1;
        }
    }
    answers
}
