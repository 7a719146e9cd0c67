//! IncrementalAlterConfigs (KIP-339): change topic settings at run time, by the controller
//! (shard 0), which commits them as ConfigRecords; every open log of the topic takes them
//! when the new image is installed, and DescribeConfigs shows them. Per setting: SET a
//! value, DELETE the override (back to the broker's default), APPEND to or SUBTRACT from a
//! list setting (`cleanup.policy`), starting from its current value. A resource's changes
//! apply all or none; `validate_only` checks and changes nothing. Broker settings are
//! static on ringlog: a broker resource is refused.

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::controller::{Controller, ForwardedRequest, Refusal};
use crate::errors::code;
use crate::metadata::records::{
    CONFIG_RESOURCE_BROKER as RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC as RESOURCE_TOPIC,
};
use crate::shard_state::Shard;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;
/// Topic settings whose value is a comma-separated list (Kafka's `ConfigDef.Type.LIST`).
const LIST_SETTINGS: &[&str] = &[
    "cleanup.policy",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
];

pub async fn handle(shard: &Rc<Shard>, request: IncrementalAlterConfigsRequest) -> ResponseKind {
    let validate_only = request.validate_only;
    let mut response = IncrementalAlterConfigsResponse::default();
    for resource in request.resources {
        let mut answer = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let done = match resource.resource_type {
            RESOURCE_TOPIC => alter_topic(shard, resource, validate_only).await,
            RESOURCE_BROKER => Err(Refusal {
                error_code: code(ResponseError::InvalidRequest),
                message: "Broker settings are static on this broker; set them in its \
                          configuration and restart it."
                    .into(),
            }),
            other => Err(Refusal {
                error_code: code(ResponseError::InvalidRequest),
                message: format!("Unsupported resource type {other}"),
            }),
        };
        if let Err(refusal) = done {
            answer.error_code = refusal.error_code;
            answer.error_message = Some(StrBytes::from_string(refusal.message));
        }
        response.responses.push(answer);
    }
    ResponseKind::IncrementalAlterConfigs(response)
}

async fn alter_topic(
    shard: &Rc<Shard>,
    resource: AlterConfigsResource,
    validate_only: bool,
) -> Result<(), Refusal> {
    let name = resource.resource_name.to_string();
    let changes = changes(shard, &name, &resource)?;
    let job = move |controller: Rc<Shard>| async move {
        let request = ForwardedRequest::AlterTopicConfigs {
            name,
            changes,
            validate_only,
        };
        Controller::change_topics(&controller, request).await
    };
    shard
        .router
        .call(shard, 0, job)
        .await
        .unwrap_or_else(|stopped| {
            Err(Refusal {
                error_code: code(ResponseError::BrokerNotAvailable),
                message: stopped.to_string(),
            })
        })
}

/// Each setting's new override (`None`: removed), from the operations asked.
fn changes(
    shard: &Shard,
    topic: &str,
    resource: &AlterConfigsResource,
) -> Result<Vec<(String, Option<String>)>, Refusal> {
    let invalid = |error: ResponseError, message: String| Refusal {
        error_code: code(error),
        message,
    };
    let image = shard.image();
    let Some(meta) = image.topic(topic) else {
        return Err(invalid(
            ResponseError::UnknownTopicOrPartition,
            format!("The topic '{topic}' does not exist."),
        ));
    };
    let mut seen = BTreeSet::new();
    let mut changes = Vec::with_capacity(resource.configs.len());
    for config in &resource.configs {
        let key = config.name.to_string();
        if !seen.insert(key.clone()) {
            return Err(invalid(
                ResponseError::InvalidRequest,
                format!("Error due to duplicate config keys: {key}"),
            ));
        }
        let value = config.value.as_ref().map(|v| v.to_string());
        let list = LIST_SETTINGS.contains(&key.as_str());
        let current = || -> Vec<String> {
            shard
                .topic_setting(meta, &key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let new = match config.config_operation {
            OP_SET => Some(value.ok_or_else(|| {
                invalid(
                    ResponseError::InvalidRequest,
                    format!("Null value not supported for: {key}"),
                )
            })?),
            OP_DELETE => None,
            OP_APPEND | OP_SUBTRACT if !list => {
                return Err(invalid(
                    ResponseError::InvalidConfig,
                    format!("Config value append is not allowed for config key: {key}"),
                ))
            }
            OP_APPEND => {
                let mut items = current();
                for item in value.unwrap_or_default().split(',').map(str::trim) {
                    if !item.is_empty() && !items.iter().any(|i| i == item) {
                        items.push(item.to_string());
                    }
                }
                Some(items.join(","))
            }
            OP_SUBTRACT => {
                let gone: Vec<String> = value
                    .unwrap_or_default()
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect();
                let items: Vec<String> = current()
                    .into_iter()
                    .filter(|item| !gone.contains(item))
                    .collect();
                Some(items.join(","))
            }
            other => {
                return Err(invalid(
                    ResponseError::InvalidRequest,
                    format!("Unknown config operation {other} for {key}"),
                ))
            }
        };
        changes.push((key, new));
    }
    Ok(changes)
}
