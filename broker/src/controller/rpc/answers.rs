//! What the active controller answers: an outcome as the Kafka response to the request it
//! answers (inside an Envelope for a client's), with the controller's applied log end in
//! the response header, and the same read back by the requester.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    alter_partition_response, describe_quorum_response, AllocateProducerIdsResponse,
    AlterPartitionReassignmentsResponse, AlterPartitionResponse, ApiKey, BrokerHeartbeatResponse,
    BrokerId, BrokerRegistrationResponse, CreatePartitionsResponse, CreateTopicsResponse,
    DeleteTopicsResponse, DescribeQuorumResponse, ElectLeadersResponse, EnvelopeResponse,
    IncrementalAlterConfigsResponse, ProducerId, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use uuid::Uuid;

use super::{
    broker_ids, decode_body, is_enveloped, newest, only, request_key, topic_name, Call, Header,
    LOG_END_TAG, RESOURCE_BROKER, RESOURCE_TOPIC,
};
use crate::controller::cluster::{Executed, ForwardedRequest};
use crate::controller::partitions::PartitionOutcome;
use crate::controller::{QuorumView, Refusal};
use crate::errors::{code, NONE};
use crate::metadata::METADATA_TOPIC;

/// Encodes the answer to `call`: its outcome, and `log_end`, the controller's applied log
/// end once it had executed it.
pub(in crate::controller) fn encode_answer(
    call: &Call,
    outcome: Result<Executed, Refusal>,
    log_end: u64,
) -> Bytes {
    let refused_code = |outcome: &Result<Executed, Refusal>| match outcome {
        Ok(_) => NONE,
        Err(refusal) => refusal.error_code,
    };
    let refused_message = |outcome: &Result<Executed, Refusal>| match outcome {
        Ok(_) => None,
        Err(refusal) => Some(StrBytes::from_string(refusal.message.clone())),
    };
    let not_controller = code(ResponseError::NotController);
    if let Some(envelope) = call.envelope {
        if refused_code(&outcome) == not_controller {
            // Kafka says so on the Envelope itself: the forwarding node tries again.
            let body = EnvelopeResponse::default().with_error_code(not_controller);
            return answer_frame(envelope, &body, log_end);
        }
    }
    let (error_code, message) = (refused_code(&outcome), refused_message(&outcome));
    let inner = match &call.request {
        ForwardedRequest::Register { .. } => answer_frame(
            call.header,
            &BrokerRegistrationResponse::default()
                .with_error_code(error_code)
                .with_broker_epoch(outcome.map_or(-1, Executed::value)),
            log_end,
        ),
        ForwardedRequest::Heartbeat { .. } | ForwardedRequest::ControlledShutdown { .. } => {
            let (fenced, shutting_down) = match outcome {
                Ok(Executed::Heartbeat {
                    fenced,
                    shutting_down,
                }) => (fenced, shutting_down),
                _ => (true, false),
            };
            answer_frame(
                call.header,
                &BrokerHeartbeatResponse::default()
                    .with_error_code(error_code)
                    .with_is_caught_up(error_code == NONE)
                    .with_is_fenced(fenced)
                    .with_should_shut_down(shutting_down),
                log_end,
            )
        }
        ForwardedRequest::AllocateProducerIds { .. } => {
            let first = outcome.map_or(-1, Executed::value);
            answer_frame(
                call.header,
                &AllocateProducerIdsResponse::default()
                    .with_error_code(error_code)
                    .with_producer_id_start(ProducerId(first))
                    .with_producer_id_len(if first < 0 {
                        0
                    } else {
                        crate::controller::PRODUCER_ID_BLOCK_SIZE as i32
                    }),
                log_end,
            )
        }
        ForwardedRequest::CreateTopic(spec) => answer_frame(
            call.header,
            &CreateTopicsResponse::default().with_topics(vec![CreatableTopicResult::default()
                .with_name(topic_name(&spec.name))
                .with_error_code(error_code)
                .with_error_message(message)]),
            log_end,
        ),
        ForwardedRequest::AlterPartitions {
            broker_id, items, ..
        } => {
            let epochs = match outcome {
                Ok(executed) => executed.epochs(),
                Err(_) => Vec::new(),
            };
            let topics = items
                .iter()
                .zip(epochs.into_iter().map(Some).chain(std::iter::repeat(None)))
                .map(|(item, epoch)| {
                    let partition = alter_partition_response::PartitionData::default()
                        .with_partition_index(item.partition);
                    let partition = match epoch {
                        Some(Ok(epoch)) => partition
                            .with_leader_id(BrokerId(*broker_id))
                            .with_leader_epoch(item.leader_epoch)
                            .with_isr(broker_ids(&item.isr))
                            .with_partition_epoch(epoch as i32),
                        Some(Err(refusal)) => partition.with_error_code(refusal.error_code),
                        // An item the outcome has no answer for is not taken as done.
                        None if error_code == NONE => {
                            partition.with_error_code(code(ResponseError::UnknownServerError))
                        }
                        None => partition.with_error_code(error_code),
                    };
                    alter_partition_response::TopicData::default()
                        .with_topic_id(Uuid::from_u128(item.topic_id))
                        .with_partitions(vec![partition])
                })
                .collect();
            answer_frame(
                call.header,
                &AlterPartitionResponse::default()
                    .with_error_code(error_code)
                    .with_topics(topics),
                log_end,
            )
        }
        ForwardedRequest::DescribeQuorum => {
            let partition = match outcome {
                Ok(Executed::Quorum(view)) => describe_quorum_response::PartitionData::default()
                    .with_leader_id(BrokerId(view.leader))
                    .with_leader_epoch(view.epoch)
                    .with_high_watermark(view.high_watermark)
                    .with_current_voters(
                        view.voters
                            .iter()
                            .map(|&(id, end)| {
                                describe_quorum_response::ReplicaState::default()
                                    .with_replica_id(BrokerId(id))
                                    .with_replica_directory_id(
                                        view.directories.get(&id).copied().unwrap_or_default(),
                                    )
                                    .with_log_end_offset(end)
                            })
                            .collect(),
                    ),
                _ => describe_quorum_response::PartitionData::default()
                    .with_error_code(if error_code == NONE {
                        code(ResponseError::UnknownServerError)
                    } else {
                        error_code
                    })
                    .with_error_message(message),
            };
            answer_frame(
                call.header,
                &DescribeQuorumResponse::default().with_topics(vec![
                    describe_quorum_response::TopicData::default()
                        .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                        .with_partitions(vec![partition]),
                ]),
                log_end,
            )
        }
        ForwardedRequest::DeleteTopic { topic_id } => answer_frame(
            call.header,
            &DeleteTopicsResponse::default().with_responses(vec![DeletableTopicResult::default()
                .with_topic_id(Uuid::from_u128(*topic_id))
                .with_error_code(error_code)
                .with_error_message(message)]),
            log_end,
        ),
        ForwardedRequest::CreatePartitions { name, .. } => answer_frame(
            call.header,
            &CreatePartitionsResponse::default().with_results(vec![
                CreatePartitionsTopicResult::default()
                    .with_name(topic_name(name))
                    .with_error_code(error_code)
                    .with_error_message(message),
            ]),
            log_end,
        ),
        ForwardedRequest::AlterTopicConfigs { name, .. } => answer_frame(
            call.header,
            &configs_answer(RESOURCE_TOPIC, name, error_code, message),
            log_end,
        ),
        ForwardedRequest::AlterBrokerConfigs { resource, .. } => answer_frame(
            call.header,
            &configs_answer(RESOURCE_BROKER, resource, error_code, message),
            log_end,
        ),
        ForwardedRequest::ElectLeaders { .. } => {
            let results = by_topic(outcome, |partition, error_code, message| {
                PartitionResult::default()
                    .with_partition_id(partition)
                    .with_error_code(error_code)
                    .with_error_message(message)
            })
            .into_iter()
            .map(|(topic, partitions)| {
                ReplicaElectionResult::default()
                    .with_topic(topic_name(&topic))
                    .with_partition_result(partitions)
            })
            .collect();
            answer_frame(
                call.header,
                &ElectLeadersResponse::default()
                    .with_error_code(error_code)
                    .with_replica_election_results(results),
                log_end,
            )
        }
        ForwardedRequest::AlterReassignments { .. } => {
            let responses = by_topic(outcome, |partition, error_code, message| {
                ReassignablePartitionResponse::default()
                    .with_partition_index(partition)
                    .with_error_code(error_code)
                    .with_error_message(message)
            })
            .into_iter()
            .map(|(topic, partitions)| {
                ReassignableTopicResponse::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(partitions)
            })
            .collect();
            answer_frame(
                call.header,
                &AlterPartitionReassignmentsResponse::default()
                    .with_error_code(error_code)
                    .with_error_message(message)
                    .with_responses(responses),
                log_end,
            )
        }
    };
    match call.envelope {
        Some(envelope) => answer_frame(
            envelope,
            &EnvelopeResponse::default().with_response_data(Some(inner)),
            log_end,
        ),
        None => inner,
    }
}

/// Reads the answer to `request`, sent as `correlation_id`: its outcome, and the
/// controller's applied log end once it had executed it (0 if it did not say).
pub(in crate::controller) fn decode_answer(
    request: &ForwardedRequest,
    correlation_id: i32,
    frame: Bytes,
) -> Result<(Result<Executed, Refusal>, u64), String> {
    let key = request_key(request);
    let enveloped = is_enveloped(request);
    let outer_key = if enveloped { ApiKey::Envelope } else { key };
    let (log_end, mut body) =
        decode_response_header(outer_key, newest(outer_key), correlation_id, frame)?;
    if enveloped {
        let envelope = decode_body::<EnvelopeResponse>(&mut body, 0)?;
        if envelope.error_code != NONE {
            return Ok((Err(refusal(envelope.error_code, None)), log_end));
        }
        let Some(inner) = envelope.response_data else {
            return Err("an Envelope answer without its response".into());
        };
        let (_, inner_body) = decode_response_header(key, newest(key), correlation_id, inner)?;
        body = inner_body;
    }
    let version = newest(key);
    let outcome = match request {
        ForwardedRequest::Register { .. } => {
            let answer = decode_body::<BrokerRegistrationResponse>(&mut body, version)?;
            checked(answer.error_code, None).map(|()| Executed::Value(answer.broker_epoch))
        }
        ForwardedRequest::Heartbeat { .. } | ForwardedRequest::ControlledShutdown { .. } => {
            let answer = decode_body::<BrokerHeartbeatResponse>(&mut body, version)?;
            checked(answer.error_code, None).map(|()| Executed::Heartbeat {
                fenced: answer.is_fenced,
                shutting_down: answer.should_shut_down,
            })
        }
        ForwardedRequest::AllocateProducerIds { .. } => {
            let answer = decode_body::<AllocateProducerIdsResponse>(&mut body, version)?;
            checked(answer.error_code, None).map(|()| Executed::Value(answer.producer_id_start.0))
        }
        ForwardedRequest::CreateTopic(_) => {
            let answer = decode_body::<CreateTopicsResponse>(&mut body, version)?;
            let topic = only(answer.topics)?;
            checked(topic.error_code, topic.error_message).map(|()| Executed::Value(0))
        }
        ForwardedRequest::AlterPartitions { items, .. } => {
            let answer = decode_body::<AlterPartitionResponse>(&mut body, version)?;
            checked(answer.error_code, None).and_then(|()| {
                let partitions: Vec<_> = answer
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .collect();
                if partitions.len() != items.len() {
                    return Err(unreadable(format!(
                        "AlterPartition answered {} partitions of {}",
                        partitions.len(),
                        items.len()
                    )));
                }
                Ok(Executed::Epochs(
                    partitions
                        .into_iter()
                        .map(|p| checked(p.error_code, None).map(|()| i64::from(p.partition_epoch)))
                        .collect(),
                ))
            })
        }
        ForwardedRequest::DescribeQuorum => {
            let answer = decode_body::<DescribeQuorumResponse>(&mut body, version)?;
            checked(answer.error_code, answer.error_message).and_then(|()| {
                let topic = only(answer.topics).map_err(unreadable)?;
                let partition = only(topic.partitions).map_err(unreadable)?;
                checked(partition.error_code, partition.error_message)?;
                Ok(Executed::Quorum(QuorumView {
                    leader: partition.leader_id.0,
                    epoch: partition.leader_epoch,
                    high_watermark: partition.high_watermark,
                    voters: partition
                        .current_voters
                        .iter()
                        .map(|v| (v.replica_id.0, v.log_end_offset))
                        .collect(),
                    directories: partition
                        .current_voters
                        .iter()
                        .filter(|v| !v.replica_directory_id.is_nil())
                        .map(|v| (v.replica_id.0, v.replica_directory_id))
                        .collect(),
                }))
            })
        }
        ForwardedRequest::DeleteTopic { .. } => {
            let answer = decode_body::<DeleteTopicsResponse>(&mut body, version)?;
            let topic = only(answer.responses)?;
            checked(topic.error_code, topic.error_message).map(|()| Executed::Value(0))
        }
        ForwardedRequest::CreatePartitions { .. } => {
            let answer = decode_body::<CreatePartitionsResponse>(&mut body, version)?;
            let topic = only(answer.results)?;
            checked(topic.error_code, topic.error_message).map(|()| Executed::Value(0))
        }
        ForwardedRequest::AlterTopicConfigs { .. }
        | ForwardedRequest::AlterBrokerConfigs { .. } => {
            let answer = decode_body::<IncrementalAlterConfigsResponse>(&mut body, version)?;
            let resource = only(answer.responses)?;
            checked(resource.error_code, resource.error_message).map(|()| Executed::Value(0))
        }
        ForwardedRequest::ElectLeaders { .. } => {
            let answer = decode_body::<ElectLeadersResponse>(&mut body, version)?;
            checked(answer.error_code, None).map(|()| {
                Executed::Partitions(
                    answer
                        .replica_election_results
                        .into_iter()
                        .flat_map(|topic| {
                            let name = topic.topic.to_string();
                            topic
                                .partition_result
                                .into_iter()
                                .map(move |p| PartitionOutcome {
                                    topic: name.clone(),
                                    partition: p.partition_id,
                                    refusal: checked(p.error_code, p.error_message).err(),
                                })
                        })
                        .collect(),
                )
            })
        }
        ForwardedRequest::AlterReassignments { .. } => {
            let answer = decode_body::<AlterPartitionReassignmentsResponse>(&mut body, version)?;
            checked(answer.error_code, answer.error_message).map(|()| {
                Executed::Partitions(
                    answer
                        .responses
                        .into_iter()
                        .flat_map(|topic| {
                            let name = topic.name.to_string();
                            topic.partitions.into_iter().map(move |p| PartitionOutcome {
                                topic: name.clone(),
                                partition: p.partition_index,
                                refusal: checked(p.error_code, p.error_message).err(),
                            })
                        })
                        .collect(),
                )
            })
        }
    };
    Ok((outcome, log_end))
}

/// A response frame: header (with the log end tagged on) and body.
fn answer_frame<M: Encodable + HeaderVersion>(header: Header, body: &M, log_end: u64) -> Bytes {
    let mut out = BytesMut::new();
    let mut tagged = BTreeMap::new();
    tagged.insert(LOG_END_TAG, Bytes::copy_from_slice(&log_end.to_be_bytes()));
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .with_unknown_tagged_fields(tagged)
        .encode(
            &mut out,
            header.api_key.response_header_version(header.version),
        )
        .expect("response headers always encode");
    body.encode(&mut out, header.version)
        .expect("answers built here always encode");
    out.freeze()
}

/// Reads a response header: the log end it carries, and the body after it.
fn decode_response_header(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut frame: Bytes,
) -> Result<(u64, Bytes), String> {
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
        .map_err(|error| format!("{key:?} answer header: {error}"))?;
    if header.correlation_id != correlation_id {
        return Err(format!(
            "an answer to request {} came for request {correlation_id}",
            header.correlation_id
        ));
    }
    let log_end = header
        .unknown_tagged_fields
        .get(&LOG_END_TAG)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_ref()).ok())
        .map_or(0, u64::from_be_bytes);
    Ok((log_end, frame))
}

fn refusal(error_code: i16, message: Option<StrBytes>) -> Refusal {
    let message = message.map(|m| m.to_string()).unwrap_or_else(|| {
        ResponseError::try_from_code(error_code).map_or_else(String::new, |e| e.to_string())
    });
    Refusal {
        error_code,
        message,
    }
}

fn checked(error_code: i16, message: Option<StrBytes>) -> Result<(), Refusal> {
    match error_code {
        NONE => Ok(()),
        error_code => Err(refusal(error_code, message)),
    }
}

fn unreadable(reason: String) -> Refusal {
    Refusal {
        error_code: code(ResponseError::UnknownServerError),
        message: format!("an answer of the controller is unreadable: {reason}"),
    }
}

/// The partitions of an outcome per partition, each made an `entry` from its index, error
/// code and message, with consecutive ones of a topic together, in order (none if refused).
fn by_topic<E>(
    outcome: Result<Executed, Refusal>,
    entry: impl Fn(i32, i16, Option<StrBytes>) -> E,
) -> Vec<(String, Vec<E>)> {
    let outcomes = outcome.map_or_else(|_| Vec::new(), Executed::partitions);
    let mut grouped: Vec<(String, Vec<E>)> = Vec::new();
    for outcome in outcomes {
        let made = match outcome.refusal {
            None => entry(outcome.partition, NONE, None),
            Some(refusal) => entry(
                outcome.partition,
                refusal.error_code,
                Some(StrBytes::from_string(refusal.message)),
            ),
        };
        match grouped.last_mut() {
            Some((topic, entries)) if *topic == outcome.topic => entries.push(made),
            _ => grouped.push((outcome.topic, vec![made])),
        }
    }
    grouped
}

fn configs_answer(
    resource_type: i8,
    name: &str,
    error_code: i16,
    message: Option<StrBytes>,
) -> IncrementalAlterConfigsResponse {
    IncrementalAlterConfigsResponse::default().with_responses(vec![
        AlterConfigsResourceResponse::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_error_code(error_code)
            .with_error_message(message),
    ])
}
