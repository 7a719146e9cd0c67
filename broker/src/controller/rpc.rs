//! What a node asks the active controller, in Kafka's own messages, as KRaft's brokers send
//! them: BrokerRegistration; BrokerHeartbeat, which also asks to be unfenced and carries a
//! controlled shutdown; AllocateProducerIds; AlterPartition; CreateTopics for the topics a
//! broker creates; DescribeQuorum; and an Envelope around each client request a node
//! forwards (DeleteTopics, CreatePartitions, IncrementalAlterConfigs, ElectLeaders,
//! AlterPartitionReassignments). A frame here is a Kafka request or response without its
//! length prefix (header, then body); the quorum's transport carries it between voters.
//!
//! One addition rides in the response header's tagged fields, where a Kafka peer skips it:
//! [`LOG_END_TAG`], the end of the controller's applied metadata log once it had executed
//! the request, which the requester reaches before it answers its own client.
//!
//! Invariants: requests are encoded at the newest version kafka-protocol knows and decoded
//! at the version their header names (a version outside the message's range is refused); a
//! forwarded client request names exactly one topic or resource, because the forwarding
//! node validates and forwards a client's request topic by topic; decoding never panics,
//! and an answer is read against the request it answers, item by item in request order.

use std::collections::BTreeMap;
use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    alter_partition_response, describe_quorum_request, describe_quorum_response,
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse, AlterPartitionRequest, AlterPartitionResponse, ApiKey,
    BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerId, BrokerRegistrationRequest,
    BrokerRegistrationResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DefaultPrincipalData, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeQuorumRequest, DescribeQuorumResponse, ElectLeadersRequest,
    ElectLeadersResponse, EnvelopeRequest, EnvelopeResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, ProducerId, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request, StrBytes};
use uuid::Uuid;

use super::alter_partitions::AlterPartitionItem;
use super::cluster::{Executed, ForwardedRequest};
use super::partitions::PartitionOutcome;
use super::{Election, QuorumView, Refusal, TopicSpec};
use crate::errors::{code, NONE};
use crate::metadata::records::BrokerEndpoint;
use crate::metadata::METADATA_TOPIC;

/// The response header's tagged field that carries the controller's applied log end.
pub(super) const LOG_END_TAG: i32 = 0x524c_0001;
/// IncrementalAlterConfigs resource types and operations.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const CONFIG_SET: i8 = 0;
const CONFIG_DELETE: i8 = 1;
/// How long a forwarded request may take, as its `timeout_ms` says (the forwarding node
/// bounds its own wait the same way).
const TIMEOUT_MS: i32 = 30_000;

/// A request as its header names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
}

/// A request received from another node: what to execute, and how to answer it.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) request: ForwardedRequest,
    header: Header,
    /// The Envelope the request came in, if forwarded for a client.
    envelope: Option<Header>,
    /// The address of the client a forwarded request is for, as its Envelope names it.
    pub(super) client: Option<IpAddr>,
}

/// Encodes `request` as the Kafka request that asks it, from node `node_id`, for a client at
/// `client` if it is a client's.
pub(super) fn encode_call(
    request: &ForwardedRequest,
    node_id: i32,
    correlation_id: i32,
    client: Option<IpAddr>,
) -> Bytes {
    let client_id = format!("ringlog-{node_id}-to-controller");
    let frame = |body: &dyn Fn(&mut BytesMut, i16), key: ApiKey, version: i16| {
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(client_id.clone())))
            .encode(&mut out, key.request_header_version(version))
            .expect("request headers always encode");
        body(&mut out, version);
        out.freeze()
    };
    let direct = |request: &dyn AnyRequest| {
        frame(
            &|out, version| request.encode_at(out, version),
            request.key(),
            request.newest(),
        )
    };
    let enveloped = |request: &dyn AnyRequest| {
        let inner = direct(request);
        direct(&envelope(inner, client))
    };
    match request {
        ForwardedRequest::Register {
            broker_id,
            cluster_id,
            incarnation_id,
            endpoints,
            rack,
        } => direct(
            &BrokerRegistrationRequest::default()
                .with_broker_id(BrokerId(*broker_id))
                .with_cluster_id(StrBytes::from_string(cluster_id.clone()))
                .with_incarnation_id(*incarnation_id)
                .with_listeners(endpoints.iter().map(listener).collect())
                .with_rack(rack.clone().map(StrBytes::from_string))
                .with_previous_broker_epoch(-1),
        ),
        ForwardedRequest::Heartbeat {
            broker_id,
            broker_epoch,
            metadata_offset,
            want_fence,
        } => direct(
            &BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(*broker_id))
                .with_broker_epoch(*broker_epoch)
                .with_current_metadata_offset(*metadata_offset)
                .with_want_fence(*want_fence),
        ),
        ForwardedRequest::ControlledShutdown {
            broker_id,
            broker_epoch,
        } => direct(
            &BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(*broker_id))
                .with_broker_epoch(*broker_epoch)
                .with_current_metadata_offset(-1)
                .with_want_fence(true)
                .with_want_shut_down(true),
        ),
        ForwardedRequest::AllocateProducerIds {
            broker_id,
            broker_epoch,
        } => direct(
            &AllocateProducerIdsRequest::default()
                .with_broker_id(BrokerId(*broker_id))
                .with_broker_epoch(*broker_epoch),
        ),
        ForwardedRequest::CreateTopic(spec) => direct(&create_topics(spec)),
        ForwardedRequest::AlterPartitions {
            broker_id,
            broker_epoch,
            items,
        } => direct(
            &AlterPartitionRequest::default()
                .with_broker_id(BrokerId(*broker_id))
                .with_broker_epoch(*broker_epoch)
                .with_topics(items.iter().map(alter_partition_topic).collect()),
        ),
        ForwardedRequest::DescribeQuorum => {
            direct(&DescribeQuorumRequest::default().with_topics(vec![
                describe_quorum_request::TopicData::default()
                    .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                    .with_partitions(vec![describe_quorum_request::PartitionData::default()]),
            ]))
        }
        ForwardedRequest::DeleteTopic { topic_id } => enveloped(
            &DeleteTopicsRequest::default()
                .with_topics(vec![
                    DeleteTopicState::default().with_topic_id(Uuid::from_u128(*topic_id))
                ])
                .with_timeout_ms(TIMEOUT_MS),
        ),
        ForwardedRequest::CreatePartitions {
            name,
            partition_count,
            assignments,
            validate_only,
        } => enveloped(
            &CreatePartitionsRequest::default()
                .with_topics(vec![CreatePartitionsTopic::default()
                    .with_name(topic_name(name))
                    .with_count(*partition_count)
                    .with_assignments(assignments.as_ref().map(|assignments| {
                        assignments
                            .iter()
                            .map(|replicas| {
                                CreatePartitionsAssignment::default()
                                    .with_broker_ids(broker_ids(replicas))
                            })
                            .collect()
                    }))])
                .with_timeout_ms(TIMEOUT_MS)
                .with_validate_only(*validate_only),
        ),
        ForwardedRequest::AlterTopicConfigs {
            name,
            changes,
            validate_only,
        } => enveloped(&alter_configs(
            RESOURCE_TOPIC,
            name,
            changes,
            *validate_only,
        )),
        ForwardedRequest::AlterBrokerConfigs {
            resource,
            changes,
            validate_only,
        } => enveloped(&alter_configs(
            RESOURCE_BROKER,
            resource,
            changes,
            *validate_only,
        )),
        ForwardedRequest::ElectLeaders {
            election,
            partitions,
        } => enveloped(
            &ElectLeadersRequest::default()
                .with_election_type(election_type(*election))
                .with_topic_partitions(partitions.as_ref().map(|partitions| {
                    group_by_topic(partitions.iter().map(|(topic, p)| (topic.as_str(), *p)))
                        .into_iter()
                        .map(|(topic, partitions)| {
                            TopicPartitions::default()
                                .with_topic(topic_name(topic))
                                .with_partitions(partitions)
                        })
                        .collect()
                }))
                .with_timeout_ms(TIMEOUT_MS),
        ),
        ForwardedRequest::AlterReassignments {
            reassignments,
            allow_replication_factor_change,
        } => {
            let mut topics: Vec<ReassignableTopic> = Vec::new();
            for ((topic, partition), replicas) in reassignments {
                let entry = ReassignablePartition::default()
                    .with_partition_index(*partition)
                    .with_replicas(replicas.as_deref().map(broker_ids));
                match topics.last_mut() {
                    Some(last) if last.name.as_str() == topic => last.partitions.push(entry),
                    _ => topics.push(
                        ReassignableTopic::default()
                            .with_name(topic_name(topic))
                            .with_partitions(vec![entry]),
                    ),
                }
            }
            enveloped(
                &AlterPartitionReassignmentsRequest::default()
                    .with_timeout_ms(TIMEOUT_MS)
                    .with_allow_replication_factor_change(*allow_replication_factor_change)
                    .with_topics(topics),
            )
        }
    }
}

/// Reads a request another node sent. `Err` says why it cannot be read.
pub(super) fn decode_call(frame: Bytes) -> Result<Call, String> {
    let (header, mut body) = decode_header(frame)?;
    if header.api_key != ApiKey::Envelope {
        let request = decode_direct(header, &mut body)?;
        return Ok(Call {
            request,
            header,
            envelope: None,
            client: None,
        });
    }
    let envelope = EnvelopeRequest::decode(&mut body, header.version)
        .map_err(|error| format!("Envelope v{}: {error}", header.version))?;
    let client = match envelope.client_host_address.len() {
        4 => <[u8; 4]>::try_from(&envelope.client_host_address[..])
            .ok()
            .map(IpAddr::from),
        16 => <[u8; 16]>::try_from(&envelope.client_host_address[..])
            .ok()
            .map(IpAddr::from),
        _ => None,
    };
    let (inner, mut inner_body) = decode_header(envelope.request_data)?;
    let request = decode_enveloped(inner, &mut inner_body)?;
    Ok(Call {
        request,
        header: inner,
        envelope: Some(header),
        client,
    })
}

/// Encodes the answer to `call`: its outcome, and `log_end`, the controller's applied log
/// end once it had executed it.
pub(super) fn encode_answer(
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
                        super::PRODUCER_ID_BLOCK_SIZE as i32
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
pub(super) fn decode_answer(
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

/// A request of any kind, to encode without naming its type.
trait AnyRequest {
    fn key(&self) -> ApiKey;
    fn newest(&self) -> i16;
    fn encode_at(&self, out: &mut BytesMut, version: i16);
}

impl<R: Request> AnyRequest for R {
    fn key(&self) -> ApiKey {
        ApiKey::try_from(R::KEY).expect("kafka-protocol's requests have known keys")
    }

    fn newest(&self) -> i16 {
        R::VERSIONS.max
    }

    fn encode_at(&self, out: &mut BytesMut, version: i16) {
        self.encode(out, version)
            .expect("requests built here always encode");
    }
}

/// The newest version of `key`'s messages this node speaks.
fn newest(key: ApiKey) -> i16 {
    match key {
        ApiKey::BrokerRegistration => BrokerRegistrationRequest::VERSIONS.max,
        ApiKey::BrokerHeartbeat => BrokerHeartbeatRequest::VERSIONS.max,
        ApiKey::AllocateProducerIds => AllocateProducerIdsRequest::VERSIONS.max,
        ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS.max,
        ApiKey::AlterPartition => AlterPartitionRequest::VERSIONS.max,
        ApiKey::DescribeQuorum => DescribeQuorumRequest::VERSIONS.max,
        ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS.max,
        ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS.max,
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS.max,
        ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS.max,
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::VERSIONS.max,
        _ => EnvelopeRequest::VERSIONS.max,
    }
}

fn request_key(request: &ForwardedRequest) -> ApiKey {
    match request {
        ForwardedRequest::Register { .. } => ApiKey::BrokerRegistration,
        ForwardedRequest::Heartbeat { .. } | ForwardedRequest::ControlledShutdown { .. } => {
            ApiKey::BrokerHeartbeat
        }
        ForwardedRequest::AllocateProducerIds { .. } => ApiKey::AllocateProducerIds,
        ForwardedRequest::CreateTopic(_) => ApiKey::CreateTopics,
        ForwardedRequest::AlterPartitions { .. } => ApiKey::AlterPartition,
        ForwardedRequest::DescribeQuorum => ApiKey::DescribeQuorum,
        ForwardedRequest::DeleteTopic { .. } => ApiKey::DeleteTopics,
        ForwardedRequest::CreatePartitions { .. } => ApiKey::CreatePartitions,
        ForwardedRequest::AlterTopicConfigs { .. }
        | ForwardedRequest::AlterBrokerConfigs { .. } => ApiKey::IncrementalAlterConfigs,
        ForwardedRequest::ElectLeaders { .. } => ApiKey::ElectLeaders,
        ForwardedRequest::AlterReassignments { .. } => ApiKey::AlterPartitionReassignments,
    }
}

/// Client requests travel in an Envelope; a broker's own requests go as they are.
fn is_enveloped(request: &ForwardedRequest) -> bool {
    matches!(
        request_key(request),
        ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::ElectLeaders
            | ApiKey::AlterPartitionReassignments
    )
}

/// An Envelope around `inner`, a request frame of a client at `client`, from the anonymous
/// principal (ringlog has no authorizer). An unknown address is sent as no bytes.
fn envelope(inner: Bytes, client: Option<IpAddr>) -> EnvelopeRequest {
    let principal = DefaultPrincipalData::default()
        .with_type(StrBytes::from_static_str("User"))
        .with_name(StrBytes::from_static_str("ANONYMOUS"));
    // Kafka's principal serde: the data's version, then the data.
    let mut serialized = BytesMut::new();
    serialized.extend_from_slice(&0i16.to_be_bytes());
    principal
        .encode(&mut serialized, 0)
        .expect("principals always encode");
    EnvelopeRequest::default()
        .with_request_data(inner)
        .with_request_principal(Some(serialized.freeze()))
        .with_client_host_address(match client {
            Some(IpAddr::V4(v4)) => Bytes::copy_from_slice(&v4.octets()),
            Some(IpAddr::V6(v6)) => Bytes::copy_from_slice(&v6.octets()),
            None => Bytes::new(),
        })
}

fn decode_header(mut frame: Bytes) -> Result<(Header, Bytes), String> {
    if frame.len() < 4 {
        return Err(format!("a request of {} bytes", frame.len()));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api_key = ApiKey::try_from(key).map_err(|()| format!("unknown api key {key}"))?;
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|error| format!("{api_key:?} v{version} header: {error}"))?;
    let header = Header {
        api_key,
        version,
        correlation_id: header.correlation_id,
    };
    Ok((header, frame))
}

fn decode_body<M: Decodable + Message>(body: &mut Bytes, version: i16) -> Result<M, String> {
    if version < M::VERSIONS.min || version > M::VERSIONS.max {
        return Err(format!("version {version} is not one of {:?}", M::VERSIONS));
    }
    M::decode(body, version).map_err(|error| error.to_string())
}

/// A broker's own request.
fn decode_direct(header: Header, body: &mut Bytes) -> Result<ForwardedRequest, String> {
    let version = header.version;
    Ok(match header.api_key {
        ApiKey::BrokerRegistration => {
            let request = decode_body::<BrokerRegistrationRequest>(body, version)?;
            ForwardedRequest::Register {
                broker_id: request.broker_id.0,
                cluster_id: request.cluster_id.to_string(),
                incarnation_id: request.incarnation_id,
                endpoints: request
                    .listeners
                    .iter()
                    .map(|l| BrokerEndpoint {
                        name: l.name.to_string(),
                        host: l.host.to_string(),
                        port: l.port,
                        security_protocol: l.security_protocol,
                    })
                    .collect(),
                rack: request.rack.map(|rack| rack.to_string()),
            }
        }
        ApiKey::BrokerHeartbeat => {
            let request = decode_body::<BrokerHeartbeatRequest>(body, version)?;
            if request.want_shut_down {
                ForwardedRequest::ControlledShutdown {
                    broker_id: request.broker_id.0,
                    broker_epoch: request.broker_epoch,
                }
            } else {
                ForwardedRequest::Heartbeat {
                    broker_id: request.broker_id.0,
                    broker_epoch: request.broker_epoch,
                    metadata_offset: request.current_metadata_offset,
                    want_fence: request.want_fence,
                }
            }
        }
        ApiKey::AllocateProducerIds => {
            let request = decode_body::<AllocateProducerIdsRequest>(body, version)?;
            ForwardedRequest::AllocateProducerIds {
                broker_id: request.broker_id.0,
                broker_epoch: request.broker_epoch,
            }
        }
        ApiKey::CreateTopics => {
            let request = decode_body::<CreateTopicsRequest>(body, version)?;
            ForwardedRequest::CreateTopic(topic_spec(only(request.topics)?))
        }
        ApiKey::AlterPartition => {
            let request = decode_body::<AlterPartitionRequest>(body, version)?;
            let mut items = Vec::new();
            for topic in request.topics {
                for partition in topic.partitions {
                    let (isr, broker_epochs) = if partition.new_isr_with_epochs.is_empty() {
                        let isr: Vec<i32> = partition.new_isr.iter().map(|id| id.0).collect();
                        let epochs = vec![-1; isr.len()];
                        (isr, epochs)
                    } else {
                        partition
                            .new_isr_with_epochs
                            .iter()
                            .map(|b| (b.broker_id.0, b.broker_epoch))
                            .unzip()
                    };
                    items.push(AlterPartitionItem {
                        topic_id: topic.topic_id.as_u128(),
                        partition: partition.partition_index,
                        leader_epoch: partition.leader_epoch,
                        partition_epoch: partition.partition_epoch,
                        isr,
                        broker_epochs,
                    });
                }
            }
            ForwardedRequest::AlterPartitions {
                broker_id: request.broker_id.0,
                broker_epoch: request.broker_epoch,
                items,
            }
        }
        ApiKey::DescribeQuorum => {
            decode_body::<DescribeQuorumRequest>(body, version)?;
            ForwardedRequest::DescribeQuorum
        }
        key => return Err(format!("{key:?} is not a request for the controller")),
    })
}

/// A client's request, forwarded in an Envelope.
fn decode_enveloped(header: Header, body: &mut Bytes) -> Result<ForwardedRequest, String> {
    let version = header.version;
    Ok(match header.api_key {
        ApiKey::DeleteTopics => {
            let request = decode_body::<DeleteTopicsRequest>(body, version)?;
            let topic = only(request.topics)?;
            ForwardedRequest::DeleteTopic {
                topic_id: topic.topic_id.as_u128(),
            }
        }
        ApiKey::CreatePartitions => {
            let request = decode_body::<CreatePartitionsRequest>(body, version)?;
            let topic = only(request.topics)?;
            ForwardedRequest::CreatePartitions {
                name: topic.name.to_string(),
                partition_count: topic.count,
                assignments: topic.assignments.map(|assignments| {
                    assignments
                        .iter()
                        .map(|a| a.broker_ids.iter().map(|id| id.0).collect())
                        .collect()
                }),
                validate_only: request.validate_only,
            }
        }
        ApiKey::IncrementalAlterConfigs => {
            let request = decode_body::<IncrementalAlterConfigsRequest>(body, version)?;
            let resource = only(request.resources)?;
            let mut changes = Vec::with_capacity(resource.configs.len());
            for config in &resource.configs {
                let value = match config.config_operation {
                    CONFIG_SET => config.value.as_ref().map(|v| v.to_string()),
                    CONFIG_DELETE => None,
                    operation => return Err(format!("config operation {operation}")),
                };
                changes.push((config.name.to_string(), value));
            }
            let (name, validate_only) = (resource.resource_name.to_string(), request.validate_only);
            match resource.resource_type {
                RESOURCE_TOPIC => ForwardedRequest::AlterTopicConfigs {
                    name,
                    changes,
                    validate_only,
                },
                RESOURCE_BROKER => ForwardedRequest::AlterBrokerConfigs {
                    resource: name,
                    changes,
                    validate_only,
                },
                other => return Err(format!("resource type {other}")),
            }
        }
        ApiKey::ElectLeaders => {
            let request = decode_body::<ElectLeadersRequest>(body, version)?;
            let election = Election::from_election_type(request.election_type)
                .ok_or_else(|| format!("election type {}", request.election_type))?;
            ForwardedRequest::ElectLeaders {
                election,
                partitions: request.topic_partitions.map(|topics| {
                    topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.to_string(), p)))
                        .collect()
                }),
            }
        }
        ApiKey::AlterPartitionReassignments => {
            let request = decode_body::<AlterPartitionReassignmentsRequest>(body, version)?;
            ForwardedRequest::AlterReassignments {
                reassignments: request
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(|p| {
                            let replicas = p
                                .replicas
                                .as_ref()
                                .map(|r| r.iter().map(|id| id.0).collect());
                            ((t.name.to_string(), p.partition_index), replicas)
                        })
                    })
                    .collect(),
                allow_replication_factor_change: request.allow_replication_factor_change,
            }
        }
        key => return Err(format!("{key:?} is not forwarded in an Envelope")),
    })
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

fn only<T>(items: Vec<T>) -> Result<T, String> {
    let count = items.len();
    let mut items = items.into_iter();
    match (items.next(), items.next()) {
        (Some(item), None) => Ok(item),
        _ => Err(format!("{count} items where one was expected")),
    }
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

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().map(|&id| BrokerId(id)).collect()
}

fn listener(endpoint: &BrokerEndpoint) -> Listener {
    Listener::default()
        .with_name(StrBytes::from_string(endpoint.name.clone()))
        .with_host(StrBytes::from_string(endpoint.host.clone()))
        .with_port(endpoint.port)
        .with_security_protocol(endpoint.security_protocol)
}

/// Kafka's `ElectionType`: 0 preferred, 1 unclean. Clients ask for no other election.
fn election_type(election: Election) -> i8 {
    match election {
        Election::Preferred => 0,
        Election::Unclean => 1,
        Election::Online => unreachable!("only the controller itself runs online elections"),
    }
}

/// Consecutive partitions of one topic, together, in order.
fn group_by_topic<'a>(
    partitions: impl Iterator<Item = (&'a str, i32)>,
) -> Vec<(&'a str, Vec<i32>)> {
    let mut grouped: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, partition) in partitions {
        match grouped.last_mut() {
            Some((last, list)) if *last == topic => list.push(partition),
            _ => grouped.push((topic, vec![partition])),
        }
    }
    grouped
}

fn create_topics(spec: &TopicSpec) -> CreateTopicsRequest {
    let assignments = spec
        .assignments
        .as_ref()
        .map_or_else(Vec::new, |assignments| {
            assignments
                .iter()
                .zip(0..)
                .map(|(replicas, index)| {
                    CreatableReplicaAssignment::default()
                        .with_partition_index(index)
                        .with_broker_ids(broker_ids(replicas))
                })
                .collect()
        });
    CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(&spec.name))
            .with_num_partitions(spec.partition_count)
            .with_replication_factor(spec.replication_factor)
            .with_assignments(assignments)
            .with_configs(
                spec.configs
                    .iter()
                    .map(|(name, value)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(name.clone()))
                            .with_value(Some(StrBytes::from_string(value.clone())))
                    })
                    .collect(),
            )])
        .with_timeout_ms(TIMEOUT_MS)
}

/// The spec a CreateTopics names, as the requester defaulted it (its assignments, if any,
/// decide the partitions).
fn topic_spec(topic: CreatableTopic) -> TopicSpec {
    let assignments = (!topic.assignments.is_empty()).then(|| {
        topic
            .assignments
            .iter()
            .map(|a| a.broker_ids.iter().map(|id| id.0).collect())
            .collect()
    });
    TopicSpec {
        name: topic.name.to_string(),
        partition_count: topic.num_partitions,
        replication_factor: topic.replication_factor,
        assignments,
        configs: topic
            .configs
            .into_iter()
            .filter_map(|c| Some((c.name.to_string(), c.value?.to_string())))
            .collect(),
    }
}

fn alter_partition_topic(item: &AlterPartitionItem) -> TopicData {
    TopicData::default()
        .with_topic_id(Uuid::from_u128(item.topic_id))
        .with_partitions(vec![PartitionData::default()
            .with_partition_index(item.partition)
            .with_leader_epoch(item.leader_epoch)
            .with_partition_epoch(item.partition_epoch)
            .with_new_isr_with_epochs(
                item.isr
                    .iter()
                    .zip(&item.broker_epochs)
                    .map(|(&id, &epoch)| {
                        BrokerState::default()
                            .with_broker_id(BrokerId(id))
                            .with_broker_epoch(epoch)
                    })
                    .collect(),
            )])
}

fn alter_configs(
    resource_type: i8,
    name: &str,
    changes: &[(String, Option<String>)],
    validate_only: bool,
) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default()
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(
                changes
                    .iter()
                    .map(|(name, value)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(name.clone()))
                            .with_config_operation(if value.is_some() {
                                CONFIG_SET
                            } else {
                                CONFIG_DELETE
                            })
                            .with_value(value.clone().map(StrBytes::from_string))
                    })
                    .collect(),
            )])
        .with_validate_only(validate_only)
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

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::RequestKind;

    use super::*;

    const CLIENT: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 7));

    fn refusal_of(error: ResponseError, message: &str) -> Refusal {
        Refusal {
            error_code: code(error),
            message: message.into(),
        }
    }

    /// One request of every kind the controller is asked.
    fn every_request() -> Vec<ForwardedRequest> {
        let topic_id = Uuid::new_v4().as_u128();
        vec![
            ForwardedRequest::Register {
                broker_id: 2,
                cluster_id: "c1".into(),
                incarnation_id: Uuid::new_v4(),
                endpoints: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.2".into(),
                    port: 9093,
                    security_protocol: 0,
                }],
                rack: Some("r1".into()),
            },
            ForwardedRequest::Heartbeat {
                broker_id: 2,
                broker_epoch: 7,
                metadata_offset: 41,
                want_fence: false,
            },
            ForwardedRequest::Heartbeat {
                broker_id: 3,
                broker_epoch: 1,
                metadata_offset: 0,
                want_fence: true,
            },
            ForwardedRequest::ControlledShutdown {
                broker_id: 2,
                broker_epoch: 7,
            },
            ForwardedRequest::AllocateProducerIds {
                broker_id: 2,
                broker_epoch: 7,
            },
            ForwardedRequest::CreateTopic(TopicSpec {
                name: "__consumer_offsets".into(),
                partition_count: 50,
                replication_factor: 3,
                assignments: None,
                configs: [("cleanup.policy".to_string(), "compact".to_string())].into(),
            }),
            ForwardedRequest::CreateTopic(TopicSpec {
                name: "placed".into(),
                partition_count: -1,
                replication_factor: -1,
                assignments: Some(vec![vec![1, 2], vec![2, 3]]),
                configs: BTreeMap::new(),
            }),
            ForwardedRequest::AlterPartitions {
                broker_id: 1,
                broker_epoch: 4,
                items: vec![
                    AlterPartitionItem {
                        topic_id,
                        partition: 0,
                        leader_epoch: 3,
                        partition_epoch: 9,
                        isr: vec![1, 3],
                        broker_epochs: vec![4, 6],
                    },
                    AlterPartitionItem {
                        topic_id,
                        partition: 5,
                        leader_epoch: 1,
                        partition_epoch: 2,
                        isr: vec![1],
                        broker_epochs: vec![-1],
                    },
                ],
            },
            ForwardedRequest::DescribeQuorum,
            ForwardedRequest::DeleteTopic { topic_id },
            ForwardedRequest::CreatePartitions {
                name: "t".into(),
                partition_count: 6,
                assignments: Some(vec![vec![3, 1]]),
                validate_only: true,
            },
            ForwardedRequest::CreatePartitions {
                name: "t".into(),
                partition_count: 8,
                assignments: None,
                validate_only: false,
            },
            ForwardedRequest::AlterTopicConfigs {
                name: "t".into(),
                changes: vec![
                    ("retention.ms".into(), Some("1000".into())),
                    ("segment.bytes".into(), None),
                ],
                validate_only: false,
            },
            ForwardedRequest::AlterBrokerConfigs {
                resource: "".into(),
                changes: vec![("log.cleaner.threads".into(), Some("2".into()))],
                validate_only: true,
            },
            ForwardedRequest::ElectLeaders {
                election: Election::Preferred,
                partitions: Some(vec![("a".into(), 0), ("a".into(), 2), ("b".into(), 1)]),
            },
            ForwardedRequest::ElectLeaders {
                election: Election::Unclean,
                partitions: None,
            },
            ForwardedRequest::AlterReassignments {
                reassignments: vec![
                    (("a".into(), 0), Some(vec![2, 3])),
                    (("a".into(), 1), None),
                    (("b".into(), 0), Some(vec![1])),
                ],
                allow_replication_factor_change: false,
            },
        ]
    }

    /// A success of each request's kind, as the controller reports it.
    fn success(request: &ForwardedRequest) -> Executed {
        let outcomes = |refused: bool| {
            vec![
                PartitionOutcome {
                    topic: "a".into(),
                    partition: 0,
                    refusal: None,
                },
                PartitionOutcome {
                    topic: "b".into(),
                    partition: 1,
                    refusal: refused
                        .then(|| refusal_of(ResponseError::ElectionNotNeeded, "b-1 leads")),
                },
            ]
        };
        match request {
            ForwardedRequest::Register { .. } => Executed::Value(8),
            ForwardedRequest::AllocateProducerIds { .. } => Executed::Value(5000),
            ForwardedRequest::Heartbeat { want_fence, .. } => Executed::Heartbeat {
                fenced: *want_fence,
                shutting_down: false,
            },
            ForwardedRequest::ControlledShutdown { .. } => Executed::Heartbeat {
                fenced: true,
                shutting_down: true,
            },
            ForwardedRequest::AlterPartitions { .. } => Executed::Epochs(vec![
                Ok(10),
                Err(Refusal {
                    error_code: code(ResponseError::InvalidUpdateVersion),
                    message: "InvalidUpdateVersion".into(),
                }),
            ]),
            ForwardedRequest::DescribeQuorum => Executed::Quorum(QuorumView {
                leader: 2,
                epoch: 5,
                high_watermark: 120,
                voters: vec![(1, 118), (2, 120), (3, -1)],
                directories: [(1, Uuid::from_u128(0x11)), (2, Uuid::from_u128(0x22))].into(),
            }),
            ForwardedRequest::ElectLeaders { .. } => Executed::Partitions(outcomes(true)),
            ForwardedRequest::AlterReassignments { .. } => Executed::Partitions(outcomes(false)),
            _ => Executed::Value(0),
        }
    }

    /// Sends `request` and answers it with `outcome` across the encodings.
    fn round_trip(
        request: &ForwardedRequest,
        outcome: Result<Executed, Refusal>,
    ) -> (Result<Executed, Refusal>, u64) {
        let frame = encode_call(request, 2, 17, Some(CLIENT));
        let call = decode_call(frame).expect("a request this node sent reads back");
        assert_eq!(&call.request, request);
        let expected = is_enveloped(request).then_some(CLIENT);
        assert_eq!(
            call.client, expected,
            "the client's address travels in the Envelope"
        );
        let answer = encode_answer(&call, outcome, 4242);
        decode_answer(request, 17, answer).expect("an answer reads back")
    }

    #[test]
    fn every_request_and_its_answer_survive_the_kafka_encoding() {
        for request in every_request() {
            let outcome = success(&request);
            let expected = success(&request);
            assert_eq!(
                round_trip(&request, Ok(outcome)),
                (Ok(expected), 4242),
                "{request:?}"
            );
        }
    }

    #[test]
    fn refusals_come_back_with_their_code_and_message_where_kafka_has_a_field() {
        let with_message = refusal_of(ResponseError::InvalidPartitions, "Topic has 8 already.");
        for request in every_request() {
            let (outcome, _) = round_trip(&request, Err(with_message.clone()));
            let refused = outcome.expect_err("a refusal stays one");
            assert_eq!(refused.error_code, with_message.error_code, "{request:?}");
            let carries_message = !matches!(
                request,
                ForwardedRequest::Register { .. }
                    | ForwardedRequest::Heartbeat { .. }
                    | ForwardedRequest::ControlledShutdown { .. }
                    | ForwardedRequest::AllocateProducerIds { .. }
                    | ForwardedRequest::AlterPartitions { .. }
                    | ForwardedRequest::ElectLeaders { .. }
            );
            if carries_message {
                assert_eq!(refused.message, with_message.message, "{request:?}");
            } else {
                assert_eq!(refused.message, "InvalidPartitions", "{request:?}");
            }
        }
    }

    /// A node that is no longer the active controller says so: on the Envelope for a
    /// forwarded client request (as Kafka does), in the answer itself otherwise. Either way
    /// the requester sees NOT_CONTROLLER and tries the next controller.
    #[test]
    fn not_controller_is_said_where_kafka_says_it() {
        let refused = refusal_of(ResponseError::NotController, "node 3 is");
        for request in every_request() {
            let call = decode_call(encode_call(&request, 1, 5, None)).unwrap();
            let mut answer = encode_answer(&call, Err(refused.clone()), 0);
            if is_enveloped(&request) {
                ResponseHeader::decode(&mut answer, ApiKey::Envelope.response_header_version(0))
                    .unwrap();
                let envelope = EnvelopeResponse::decode(&mut answer, 0).unwrap();
                assert_eq!(envelope.error_code, refused.error_code);
                assert!(envelope.response_data.is_none());
            }
            let answer = encode_answer(&call, Err(refused.clone()), 0);
            let (outcome, _) = decode_answer(&request, 5, answer).unwrap();
            assert_eq!(outcome.unwrap_err().error_code, refused.error_code);
        }
    }

    /// What a node sends is a Kafka request any Kafka decoder reads: the header names the
    /// API Kafka uses for the exchange, and an Envelope holds the client's request.
    #[test]
    fn requests_are_kafka_frames() {
        for request in every_request() {
            let mut frame = encode_call(&request, 1, 9, Some(CLIENT));
            let key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let header =
                RequestHeader::decode(&mut frame, key.request_header_version(version)).unwrap();
            assert_eq!(header.correlation_id, 9);
            assert_eq!(header.client_id.as_deref(), Some("ringlog-1-to-controller"));
            let body = RequestKind::decode(key, &mut frame, version).unwrap();
            match body {
                RequestKind::Envelope(envelope) => {
                    assert!(is_enveloped(&request), "{request:?}");
                    let mut inner = envelope.request_data;
                    let inner_key =
                        ApiKey::try_from(i16::from_be_bytes([inner[0], inner[1]])).unwrap();
                    assert_eq!(inner_key, request_key(&request));
                    let inner_version = i16::from_be_bytes([inner[2], inner[3]]);
                    RequestHeader::decode(
                        &mut inner,
                        inner_key.request_header_version(inner_version),
                    )
                    .unwrap();
                    RequestKind::decode(inner_key, &mut inner, inner_version).unwrap();
                    let principal = envelope.request_principal.unwrap();
                    assert_eq!(&principal[..2], &[0, 0], "the principal's version");
                    let IpAddr::V6(client) = CLIENT else {
                        unreachable!()
                    };
                    assert_eq!(&envelope.client_host_address[..], &client.octets()[..]);
                }
                _ => {
                    assert!(!is_enveloped(&request), "{request:?}");
                    assert_eq!(key, request_key(&request));
                }
            }
        }
    }

    #[test]
    fn requests_the_controller_does_not_serve_are_refused() {
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(12)
            .encode(&mut out, ApiKey::Metadata.request_header_version(12))
            .unwrap();
        kafka_protocol::messages::MetadataRequest::default()
            .encode(&mut out, 12)
            .unwrap();
        let refused = decode_call(out.freeze()).unwrap_err();
        assert!(refused.contains("Metadata"), "{refused}");
        // A client request with two topics: the forwarding node always sends one.
        let two = DeleteTopicsRequest::default().with_topics(vec![
            DeleteTopicState::default().with_topic_id(Uuid::new_v4()),
            DeleteTopicState::default().with_topic_id(Uuid::new_v4()),
        ]);
        let mut inner = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::DeleteTopics as i16)
            .with_request_api_version(6)
            .encode(&mut inner, ApiKey::DeleteTopics.request_header_version(6))
            .unwrap();
        two.encode(&mut inner, 6).unwrap();
        let mut frame = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Envelope as i16)
            .encode(&mut frame, ApiKey::Envelope.request_header_version(0))
            .unwrap();
        envelope(inner.freeze(), None)
            .encode(&mut frame, 0)
            .unwrap();
        assert!(decode_call(frame.freeze()).is_err());
    }

    /// Whatever bytes arrive, reading them ends in a request or an error, never a panic;
    /// and a request cut short anywhere is an error.
    #[test]
    fn truncated_and_garbled_requests_are_errors_not_panics() {
        for request in every_request() {
            let frame = encode_call(&request, 1, 3, None);
            for cut in 0..frame.len() {
                let _ = decode_call(frame.slice(..cut));
            }
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..200 {
                let mut garbled = frame.to_vec();
                for _ in 0..3 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let at = (state as usize) % garbled.len();
                    garbled[at] = (state >> 32) as u8;
                }
                let _ = decode_call(Bytes::from(garbled));
            }
        }
        for cut in 0..4 {
            assert!(decode_call(Bytes::from(vec![0u8; cut])).is_err());
        }
    }

    #[test]
    fn an_answer_to_another_request_is_not_taken() {
        let request = ForwardedRequest::DescribeQuorum;
        let call = decode_call(encode_call(&request, 1, 5, None)).unwrap();
        let answer = encode_answer(&call, Ok(success(&request)), 0);
        assert!(decode_answer(&request, 6, answer).is_err());
    }
}
