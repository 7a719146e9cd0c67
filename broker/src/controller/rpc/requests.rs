//! What a node sends the active controller: each [`ForwardedRequest`] as the Kafka request
//! that asks it (a client's inside an Envelope), and the same read back on the controller.

use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    describe_quorum_request, AllocateProducerIdsRequest, AlterPartitionReassignmentsRequest,
    AlterPartitionRequest, ApiKey, BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest,
    CreatePartitionsRequest, CreateTopicsRequest, DefaultPrincipalData, DeleteTopicsRequest,
    DescribeQuorumRequest, ElectLeadersRequest, EnvelopeRequest, IncrementalAlterConfigsRequest,
    RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

use super::{
    broker_ids, decode_body, decode_header, only, topic_name, AnyRequest, Call, Header,
    CONFIG_DELETE, CONFIG_SET, RESOURCE_BROKER, RESOURCE_TOPIC, TIMEOUT_MS,
};
use crate::controller::alter_partitions::AlterPartitionItem;
use crate::controller::cluster::ForwardedRequest;
use crate::controller::{Election, TopicSpec};
use crate::metadata::records::BrokerEndpoint;
use crate::metadata::METADATA_TOPIC;

/// Encodes `request` as the Kafka request that asks it, from node `node_id`, for a client at
/// `client` if it is a client's.
pub(in crate::controller) fn encode_call(
    request: &ForwardedRequest,
    node_id: i32,
    correlation_id: i32,
    client: Option<IpAddr>,
) -> Bytes {
    let client_id = StrBytes::from_string(format!("ringlog-{node_id}-to-controller"));
    let direct = |request: &dyn AnyRequest| {
        let (key, version) = (request.key(), request.newest());
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(client_id.clone()))
            .encode(&mut out, key.request_header_version(version))
            .expect("request headers always encode");
        request.encode_at(&mut out, version);
        out.freeze()
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
pub(in crate::controller) fn decode_call(frame: Bytes) -> Result<Call, String> {
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

/// An Envelope around `inner`, a request frame of a client at `client`, from the anonymous
/// principal (ringlog has no authorizer). An unknown address is sent as no bytes.
pub(super) fn envelope(inner: Bytes, client: Option<IpAddr>) -> EnvelopeRequest {
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
