//! CreateTopics: each topic is validated, placed on brokers and created by the controller
//! (shard 0); `validate_only` checks everything and creates nothing. Replica assignments,
//! when given, must name registered brokers (checked by the controller).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::describe_configs::topic_settings;
use crate::controller::{Controller, Refusal, TopicSpec};
use crate::errors::code;
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: CreateTopicsRequest, version: i16) -> ResponseKind {
    let mut response = CreateTopicsResponse::default();
    let validate_only = request.validate_only;
    let mut seen = std::collections::HashSet::new();
    for topic in request.topics {
        let name = topic.name.to_string();
        let mut result = CreatableTopicResult::default()
            .with_name(topic.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        if !seen.insert(name.clone()) {
            // Kafka refuses a name given twice in one request.
            result.error_code = code(ResponseError::InvalidRequest);
            result.error_message = Some(StrBytes::from_static_str("Duplicate topic name."));
            response.topics.push(result);
            continue;
        }
        let created = match spec(shard, &topic) {
            Err(refusal) => Err(refusal),
            Ok(spec) => Controller::create_topic_from(shard, spec, validate_only)
                .await
                .unwrap_or_else(|stopped| {
                    Err(Refusal {
                        error_code: code(ResponseError::BrokerNotAvailable),
                        message: stopped.to_string(),
                    })
                }),
        };
        match created {
            Ok(meta) => {
                if version >= 5 {
                    result.num_partitions = meta.partition_count();
                    result.replication_factor = meta.partitions[0].replicas.len() as i16;
                }
                if version >= 7 && !validate_only {
                    result.topic_id = meta.id;
                }
                if version >= 5 {
                    let configs = topic_settings(shard, &meta)
                        .iter()
                        .map(|setting| {
                            let effective = setting.effective();
                            CreatableTopicConfigs::default()
                                .with_name(StrBytes::from_string(setting.name.clone()))
                                .with_value(Some(StrBytes::from_string(effective.value.clone())))
                                .with_config_source(effective.source)
                        })
                        .collect();
                    result.configs = Some(configs);
                }
            }
            Err(refusal) => {
                result.error_code = refusal.error_code;
                result.error_message = Some(StrBytes::from_string(refusal.message));
            }
        }
        response.topics.push(result);
    }
    ResponseKind::CreateTopics(response)
}

/// The request for one topic, with Kafka's defaults (-1) resolved.
fn spec(shard: &Shard, topic: &CreatableTopic) -> Result<TopicSpec, Refusal> {
    let mut configs = BTreeMap::new();
    for config in &topic.configs {
        let Some(value) = &config.value else {
            return Err(Refusal {
                error_code: code(ResponseError::InvalidConfig),
                message: format!(
                    "Null value not supported for topic config {}",
                    config.name.as_str()
                ),
            });
        };
        configs.insert(config.name.to_string(), value.to_string());
    }
    let (assignments, partition_count, replication_factor) = if topic.assignments.is_empty() {
        let partitions = match topic.num_partitions {
            -1 => shard.config.num_partitions,
            n => n,
        };
        let replication = match topic.replication_factor {
            -1 => shard.config.default_replication_factor,
            n => n,
        };
        (None, partitions, replication)
    } else {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(Refusal {
                error_code: code(ResponseError::InvalidRequest),
                message:
                    "Both numPartitions or replicationFactor and replicasAssignments were set."
                        .into(),
            });
        }
        let mut assignments = Vec::with_capacity(topic.assignments.len());
        for (expected, assignment) in topic.assignments.iter().enumerate() {
            if assignment.partition_index != expected as i32 {
                return Err(Refusal {
                    error_code: code(ResponseError::InvalidReplicaAssignment),
                    message: "Partitions should be 0-based and consecutive.".into(),
                });
            }
            assignments.push(assignment.broker_ids.iter().map(|id| id.0).collect());
        }
        (Some(assignments), -1, -1)
    };
    Ok(TopicSpec {
        name: topic.name.to_string(),
        partition_count,
        replication_factor,
        assignments,
        configs,
    })
}
