//! DescribeConfigs for topics (resource type 2) and this broker (type 4): each setting
//! with its value and where it came from, as Kafka reports it.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::config::BrokerConfig;
use crate::errors::code;
use crate::metadata::records::{
    CONFIG_RESOURCE_BROKER as RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC as RESOURCE_TOPIC,
};
use crate::shard_state::Shard;

/// Kafka's config sources.
pub const SOURCE_TOPIC: i8 = 1;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

pub struct Setting {
    pub name: String,
    pub value: String,
    pub source: i8,
}

/// A topic's effective settings: its overrides, else the broker's defaults.
pub fn topic_settings(config: &BrokerConfig, overrides: &BTreeMap<String, String>) -> Vec<Setting> {
    config
        .topic_defaults
        .iter()
        .map(|(name, default)| match overrides.get(name) {
            Some(value) => Setting {
                name: name.clone(),
                value: value.clone(),
                source: SOURCE_TOPIC,
            },
            None => Setting {
                name: name.clone(),
                value: default.clone(),
                source: SOURCE_DEFAULT,
            },
        })
        .collect()
}

pub fn handle(shard: &Shard, request: DescribeConfigsRequest) -> ResponseKind {
    let image = shard.image();
    let mut response = DescribeConfigsResponse::default();
    for resource in request.resources {
        let mut result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let settings = match resource.resource_type {
            RESOURCE_TOPIC => match image.topic(resource.resource_name.as_str()) {
                Some(topic) => Ok(topic_settings(&shard.config, &topic.configs)),
                None => Err((
                    ResponseError::UnknownTopicOrPartition,
                    "Topic does not exist",
                )),
            },
            RESOURCE_BROKER => {
                let name = resource.resource_name.as_str();
                if name.is_empty() || name == shard.config.node_id.to_string() {
                    Ok(shard
                        .config
                        .described()
                        .into_iter()
                        .map(|(name, value)| Setting {
                            name,
                            value,
                            source: SOURCE_STATIC_BROKER,
                        })
                        .collect())
                } else {
                    Err((ResponseError::InvalidRequest, "Unexpected broker id"))
                }
            }
            _ => Err((ResponseError::InvalidRequest, "Unsupported resource type")),
        };
        match settings {
            Ok(settings) => {
                // Null lists every setting; so does an empty list, which some clients send.
                let keys = resource
                    .configuration_keys
                    .as_ref()
                    .filter(|keys| !keys.is_empty());
                result.configs = settings
                    .into_iter()
                    .filter(|s| keys.is_none_or(|keys| keys.iter().any(|k| k.as_str() == s.name)))
                    .map(|s| {
                        DescribeConfigsResourceResult::default()
                            .with_name(StrBytes::from_string(s.name))
                            .with_value(Some(StrBytes::from_string(s.value)))
                            .with_read_only(resource.resource_type == RESOURCE_BROKER)
                            .with_config_source(s.source)
                    })
                    .collect();
            }
            Err((error, message)) => {
                result.error_code = code(error);
                result.error_message = Some(StrBytes::from_static_str(message));
            }
        }
        response.results.push(result);
    }
    ResponseKind::DescribeConfigs(response)
}
