//! Produce: split by owning shard, queue each part's appends on its owner in arrival order,
//! wait for the write (`acks=1`) or the disk (`acks=all`), merge the answers in request
//! order.
//!
//! ```text
//! admit:  request ─▶ per-owner parts ─▶ router.dispatch(owner) ─▶ Partition::queue_append
//! answer:                                  appends in queue order (one copy each)
//!                                          └▶ acks=1: write done · acks=all: fdatasync
//!         ◀─ merged in request order ◀─────┘
//! ```
//! Order: the connection admits one request at a time, and admission ends only once every
//! part has taken its place in its partitions' queues (on this shard, or on the owner as the
//! first thing its inbox does with the job), so requests of one connection are applied to a
//! partition in the order they arrived, even when an owner's inbox or a partition's write
//! queue is full.
//!
//! A compacted topic refuses a batch with a record that has no key: INVALID_RECORD, with
//! the offending records in the answer's record errors (KIP-467).
//!
//! A partition this node does not lead answers NOT_LEADER_OR_FOLLOWER with, from v10, the
//! leader it knows and that leader's endpoint (KIP-951), so the client need not ask Metadata.
//!
//! Durability (docs/ARCHITECTURE.md): `acks=1` is answered once the batch's write on the
//! leader has completed, `acks=all` once it is fdatasynced on the leader and the high
//! watermark has passed it (every ISR member holds it), within the request's `timeout_ms`
//! (REQUEST_TIMED_OUT past it). An acks=all batch is refused with NOT_ENOUGH_REPLICAS when
//! the ISR is smaller than `min.insync.replicas`, and answered
//! NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank below while the batch waited. With
//! `acks=0` nothing is sent back; if any part failed the connection is closed, which is how
//! Kafka tells an acks=0 producer that something went wrong.

use std::future::Future;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use net::{Answer, Reply};

use super::now_ms;
use crate::errors::{code, NONE};
use crate::partition::Partition;
use crate::shard_state::Shard;

/// One partition's part of the request, as sent to its owner, with its place in the
/// response (topic index, partition index).
struct Part {
    slot: (usize, usize),
    topic: String,
    partition: i32,
    records: Option<Bytes>,
}

/// Admits a Produce request: every part is queued on its owner before this returns; the
/// answer comes from the returned future.
pub async fn admit(shard: &Rc<Shard>, request: ProduceRequest, version: i16) -> Answer {
    let acks = request.acks;
    let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
    let mut response = ProduceResponse::default();
    let mut parts_by_owner: Vec<Vec<Part>> = (0..shard.router.shard_count())
        .map(|_| Vec::new())
        .collect();
    for (topic_index, topic_data) in request.topic_data.into_iter().enumerate() {
        let topic = topic_data.name.to_string();
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for (partition_index, data) in topic_data.partition_data.into_iter().enumerate() {
            if data.index < 0 {
                let unknown = code(ResponseError::UnknownTopicOrPartition);
                partitions.push(no_append(data.index).with_error_code(unknown));
                continue;
            }
            // Overwritten by the owner's answer, unless the owner stopped before it gave
            // one: then the answer of a broker shutting down, which a client retries.
            let stopped = code(ResponseError::NotLeaderOrFollower);
            partitions.push(no_append(data.index).with_error_code(stopped));
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
        let job = move |owner: Rc<Shard>| append_on_owner(owner, parts, acks, timeout);
        // Every part runs from here on, whatever the answer awaits first, and to its end
        // even if the client leaves and the answer is given up.
        let pending = shard.router.dispatch(shard, owner, job).await;
        calls.push((
            owner,
            pending.map(|pending| glommio::spawn_local(pending).detach()),
        ));
    }
    let shard = shard.clone();
    Box::pin(async move {
        for (owner, call) in calls {
            let answers = match call {
                // None only if the shard stopped under the task.
                Ok(task) => task.await.unwrap_or(Err(shard::ShardStopped(owner))),
                Err(stopped) => Err(stopped),
            };
            let answers = match answers {
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
        if version >= 10 {
            response.node_endpoints = leader_endpoints(&shard, &response);
        }
        finish(response, acks, invalid_acks, version)
    })
}

/// The reply once every owner answered.
fn finish(mut response: ProduceResponse, acks: i16, invalid_acks: bool, version: i16) -> Reply {
    if invalid_acks {
        for topic in &mut response.responses {
            for partition in &mut topic.partition_responses {
                partition.error_code = code(ResponseError::InvalidRequiredAcks);
            }
        }
    }
    for partition in response
        .responses
        .iter_mut()
        .flat_map(|t| &mut t.partition_responses)
    {
        // The codec refuses fields outside their versions unless they hold the default.
        if version < 5 {
            partition.log_start_offset = -1;
        }
        if version < 10 {
            partition.current_leader = LeaderIdAndEpoch::default();
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

/// The endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers (KIP-951).
fn leader_endpoints(shard: &Shard, response: &ProduceResponse) -> Vec<NodeEndpoint> {
    let leaders: Vec<i32> = response
        .responses
        .iter()
        .flat_map(|topic| &topic.partition_responses)
        .filter(|p| p.error_code == code(ResponseError::NotLeaderOrFollower))
        .map(|p| p.current_leader.leader_id.0)
        .collect();
    super::leader_endpoints(shard, leaders)
        .into_iter()
        .map(|leader| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(leader.node_id))
                .with_host(StrBytes::from_string(leader.host))
                .with_port(leader.port)
                .with_rack(leader.rack.map(StrBytes::from_string))
        })
        .collect()
}

/// The answer refusing `records` for a partition of `topic` if the topic is compacted and
/// a record has no key: INVALID_RECORD naming each such record (KIP-467, Produce v8+), the
/// batch refused whole as Kafka refuses it; CORRUPT_MESSAGE if its records cannot be read.
fn refuse_keyless(
    partition: &Partition,
    topic: &str,
    records: &[u8],
) -> Option<PartitionProduceResponse> {
    if !partition.compacted() {
        return None;
    }
    let partition = partition.index;
    let refused = no_append(partition);
    let Some(keyless) = storage::keyless_records(records) else {
        return Some(refused.with_error_code(code(ResponseError::CorruptMessage)));
    };
    if keyless.is_empty() {
        return None;
    }
    let message = format!(
        "Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
    );
    let record_errors = keyless
        .into_iter()
        .map(|batch_index| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(batch_index)
                .with_batch_index_error_message(Some(StrBytes::from_string(message.clone())))
        })
        .collect();
    Some(
        refused
            .with_error_code(code(ResponseError::InvalidRecord))
            .with_error_message(Some(StrBytes::from_string(message)))
            .with_record_errors(record_errors),
    )
}

/// A partition's answer before (or without) an append.
fn no_append(index: i32) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
}

/// Runs on the owning shard. Called, it queues every part's append on its partition at
/// once (this is what fixes their order); the returned future appends them, then waits for
/// what `acks` asks, once per partition and for all partitions at the same time.
fn append_on_owner(
    shard: Rc<Shard>,
    parts: Vec<Part>,
    acks: i16,
    timeout: std::time::Duration,
) -> impl Future<Output = Vec<((usize, usize), PartitionProduceResponse)>> {
    let now = now_ms();
    let queued: Vec<_> = parts
        .into_iter()
        .map(|part| {
            let refused = |error| no_append(part.partition).with_error_code(code(error));
            let queued = match (shard.partition(&part.topic, part.partition), part.records) {
                (None, _) => Err(refused(ResponseError::UnknownTopicOrPartition)),
                (Some(_), None) => Err(refused(ResponseError::CorruptMessage)),
                (Some(partition), Some(records)) => {
                    let too_few = match acks {
                        -1 => partition.check_min_insync().err(),
                        _ => None,
                    };
                    let refusal = too_few
                        .map(|error_code| no_append(part.partition).with_error_code(error_code))
                        .or_else(|| refuse_keyless(&partition, &part.topic, &records));
                    match refusal {
                        Some(refusal) => Err(refusal),
                        None => {
                            let append = partition.queue_append(records, now);
                            Ok((partition, append))
                        }
                    }
                }
            };
            (part.slot, part.partition, queued)
        })
        .collect();
    async move {
        let mut answers = Vec::with_capacity(queued.len());
        let mut waits = Vec::new();
        for (slot, index, queued) in queued {
            let mut answer = no_append(index);
            match queued {
                Err(refusal) => answer = refusal,
                Ok((partition, append)) => {
                    let outcome = append.await;
                    answer.error_code = outcome.error_code;
                    if outcome.error_code == code(ResponseError::NotLeaderOrFollower) {
                        let leadership = partition.leadership();
                        answer.current_leader = LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(leadership.leader))
                            .with_leader_epoch(leadership.leader_epoch);
                    }
                    answer.base_offset = outcome.base_offset;
                    answer.log_start_offset = outcome.log_start_offset;
                    if outcome.error_code == NONE && acks != 0 {
                        waits.push((answers.len(), partition, outcome.end_offset));
                    }
                }
            }
            answers.push((slot, answer));
        }
        // Start every partition's wait before awaiting any, so they overlap.
        let waits: Vec<_> = waits
            .into_iter()
            .map(|(answer_index, partition, end_offset)| {
                let wait = glommio::spawn_local(async move {
                    if acks != -1 {
                        return partition.wait_written(end_offset).await;
                    }
                    let replicated = async {
                        match partition.sync().await {
                            NONE => partition.wait_replicated(end_offset).await,
                            failed => failed,
                        }
                    };
                    let timed_out = async {
                        glommio::timer::sleep(timeout).await;
                        code(ResponseError::RequestTimedOut)
                    };
                    futures_lite::future::or(replicated, timed_out).await
                });
                (answer_index, wait)
            })
            .collect();
        for (answer_index, wait) in waits {
            let error_code = wait.await;
            if error_code != NONE {
                let answer = &mut answers[answer_index].1;
                answer.error_code = error_code;
                answer.base_offset = -1;
            }
        }
        answers
    }
}
