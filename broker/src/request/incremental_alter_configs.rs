//! IncrementalAlterConfigs (KIP-339): change topic settings, and the dynamic broker
//! settings of a broker or of the whole cluster (broker resource ""), at run time, by the
//! active controller, which commits them as ConfigRecords; every node takes them when it
//! installs the image, and DescribeConfigs shows them. Per setting: SET a value, DELETE it
//! (back to what it inherits), APPEND to or SUBTRACT from a list setting (`cleanup.policy`),
//! starting from its current value. A resource's changes apply all or none;
//! `validate_only` checks and changes nothing.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::config_change::{Changes, Target};
use crate::controller::Refusal;
use crate::errors::code;
use crate::shard_state::Shard;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;
/// Settings whose value is a comma-separated list (Kafka's `ConfigDef.Type.LIST`).
const LIST_SETTINGS: &[&str] = &[
    "cleanup.policy",
    "log.cleanup.policy",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
];

pub async fn handle(
    shard: &Rc<Shard>,
    request: IncrementalAlterConfigsRequest,
    client: Option<IpAddr>,
) -> ResponseKind {
    let validate_only = request.validate_only;
    let mut response = IncrementalAlterConfigsResponse::default();
    for resource in request.resources {
        let mut answer = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let done = match Target::of(resource.resource_type, resource.resource_name.as_str()) {
            Ok(target) => match changes(shard, &target, &resource) {
                Ok(changes) => target.apply(shard, changes, validate_only, client).await,
                Err(refusal) => Err(refusal),
            },
            Err(refusal) => Err(refusal),
        };
        if let Err(refusal) = done {
            answer.error_code = refusal.error_code;
            answer.error_message = Some(StrBytes::from_string(refusal.message));
        }
        response.responses.push(answer);
    }
    ResponseKind::IncrementalAlterConfigs(response)
}

/// Each setting's new value (`None`: removed), from the operations asked.
fn changes(
    shard: &Shard,
    target: &Target,
    resource: &AlterConfigsResource,
) -> Result<Changes, Refusal> {
    let invalid = |error: ResponseError, message: String| Refusal {
        error_code: code(error),
        message,
    };
    // A topic that is not there is refused before its settings are looked at.
    target.own_settings(shard)?;
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
            target
                .current(shard, &key)
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
