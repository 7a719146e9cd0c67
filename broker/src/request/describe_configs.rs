//! DescribeConfigs for topics (resource type 2) and brokers (type 4): each setting with its
//! effective value, where it came from (the topic, this broker's or the cluster's dynamic
//! settings, the static configuration, Kafka's default), whether it may change at run time,
//! and, when asked, its synonyms: every level that gives it, highest first, as Kafka
//! reports them. The broker resource "" is the cluster-wide dynamic defaults: only those
//! that are set.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::config::dynamic::{self, is_dynamic, Sourced, CLUSTER_DEFAULT};
use crate::errors::code;
use crate::metadata::records::{
    CONFIG_RESOURCE_BROKER as RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC as RESOURCE_TOPIC,
};
use crate::metadata::TopicMeta;
use crate::shard_state::Shard;

/// One setting as described: its name, whether it is read-only, and every level that gives
/// it, the effective one first.
pub struct Described {
    pub name: String,
    pub read_only: bool,
    pub levels: Vec<Sourced>,
}

impl Described {
    /// The effective value and its source.
    pub fn effective(&self) -> &Sourced {
        &self.levels[0]
    }
}

/// Every setting of `topic` as it applies on this node.
pub fn topic_settings(shard: &Shard, topic: &TopicMeta) -> Vec<Described> {
    let image = shard.image();
    shard
        .config
        .topic_defaults
        .keys()
        .map(|key| Described {
            name: key.clone(),
            read_only: false,
            levels: dynamic::topic_setting_levels(
                &shard.config,
                &image,
                shard.config.node_id,
                topic,
                key,
            ),
        })
        .filter(|described| !described.levels.is_empty())
        .collect()
}

/// Every setting of broker resource `name`: this broker's (its id, or "" read as this
/// broker by clients that send it), or the cluster-wide dynamic defaults.
fn broker_settings(shard: &Shard, name: &str, cluster_wide: bool) -> Vec<Described> {
    let image = shard.image();
    let node = shard.config.node_id;
    if cluster_wide {
        return image
            .broker_configs
            .get(name)
            .into_iter()
            .flatten()
            .map(|(key, value)| Described {
                name: key.clone(),
                read_only: false,
                levels: vec![Sourced {
                    name: key.clone(),
                    value: value.clone(),
                    source: dynamic::source::DYNAMIC_DEFAULT_BROKER,
                }],
            })
            .collect();
    }
    shard
        .config
        .described()
        .into_iter()
        .map(|(key, value)| Described {
            read_only: !is_dynamic(&key),
            levels: dynamic::broker_setting_levels(&shard.config, &image, node, &key, &value),
            name: key,
        })
        .filter(|described| !described.levels.is_empty())
        .collect()
}

pub fn handle(shard: &Shard, request: DescribeConfigsRequest) -> ResponseKind {
    let image = shard.image();
    let synonyms = request.include_synonyms;
    let mut response = DescribeConfigsResponse::default();
    for resource in request.resources {
        let mut result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let name = resource.resource_name.as_str();
        let settings = match resource.resource_type {
            RESOURCE_TOPIC => match image.topic(name) {
                Some(topic) => Ok(topic_settings(shard, topic)),
                None => Err((
                    ResponseError::UnknownTopicOrPartition,
                    "Topic does not exist",
                )),
            },
            // Kafka answers a broker's own settings only on that broker.
            RESOURCE_BROKER if name == shard.config.node_id.to_string() => {
                Ok(broker_settings(shard, name, false))
            }
            RESOURCE_BROKER if name == CLUSTER_DEFAULT => Ok(broker_settings(shard, name, true)),
            RESOURCE_BROKER => Err((ResponseError::InvalidRequest, "Unexpected broker id")),
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
                        let effective = s.effective();
                        let mut described = DescribeConfigsResourceResult::default()
                            .with_name(StrBytes::from_string(s.name.clone()))
                            .with_value(Some(StrBytes::from_string(effective.value.clone())))
                            .with_read_only(s.read_only)
                            .with_config_source(effective.source);
                        if synonyms {
                            described.synonyms = s
                                .levels
                                .iter()
                                .map(|level| {
                                    DescribeConfigsSynonym::default()
                                        .with_name(StrBytes::from_string(level.name.clone()))
                                        .with_value(Some(StrBytes::from_string(
                                            level.value.clone(),
                                        )))
                                        .with_source(level.source)
                                })
                                .collect();
                        }
                        described
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
