//! Settings of topics and brokers at run time: DescribeConfigs (with their sources and
//! synonyms) and IncrementalAlterConfigs, for a topic, a broker, or the cluster-wide broker
//! defaults (the broker resource ""), as Kafka's admin client sends them: a broker's own
//! settings to that broker, the rest to any broker (which forwards changes to the active
//! controller).
//!
//! Invariants: a resource's error is an error of the call, with Kafka's name for it; the
//! entries come back sorted by name.

use anyhow::{anyhow, Result};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::check;

/// DescribeConfigs resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// What a setting is described or changed for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    Topic(String),
    Broker(i32),
    /// The cluster-wide dynamic broker defaults.
    BrokerDefaults,
}

impl Resource {
    fn kind_and_name(&self) -> (i8, String) {
        match self {
            Resource::Topic(name) => (RESOURCE_TOPIC, name.clone()),
            Resource::Broker(id) => (RESOURCE_BROKER, id.to_string()),
            Resource::BrokerDefaults => (RESOURCE_BROKER, String::new()),
        }
    }

    /// How kafka-configs names it: `topic orders`, `broker 1`, `default broker`.
    pub fn describe(&self) -> String {
        match self {
            Resource::Topic(name) => format!("topic {name}"),
            Resource::Broker(id) => format!("broker {id}"),
            Resource::BrokerDefaults => "default broker".into(),
        }
    }

    /// The connection its requests go to.
    async fn connection<'a>(&self, cluster: &'a mut Cluster) -> Result<&'a mut Connection> {
        match self {
            Resource::Broker(id) => cluster.broker(*id).await,
            _ => Ok(cluster.any()),
        }
    }
}

/// Kafka's `ConfigSource` names, as kafka-configs prints them.
pub fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

/// One setting as DescribeConfigs gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for a sensitive or unset value.
    pub value: Option<String>,
    pub source: i8,
    pub read_only: bool,
    /// Every level that gives it, highest first: (name, value, source).
    pub synonyms: Vec<(String, Option<String>, i8)>,
}

/// Every setting of `resource`, with synonyms.
pub async fn describe(cluster: &mut Cluster, resource: &Resource) -> Result<Vec<ConfigEntry>> {
    let (kind, name) = resource.kind_and_name();
    let connection = resource.connection(cluster).await?;
    let version = connection.version::<DescribeConfigsRequest>()?;
    let request = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name))]);
    let response = connection.call_at(version, &request).await?;
    let result = response
        .results
        .first()
        .ok_or_else(|| anyhow!("DescribeConfigs answered for no resource"))?;
    check(result.error_code, result.error_message.as_ref(), || {
        format!("describe configs of {}", resource.describe())
    })?;
    let text = |value: &Option<StrBytes>| value.as_ref().map(|v| v.to_string());
    let mut entries: Vec<ConfigEntry> = result
        .configs
        .iter()
        .map(|c| ConfigEntry {
            name: c.name.to_string(),
            value: if c.is_sensitive { None } else { text(&c.value) },
            source: c.config_source,
            read_only: c.read_only,
            synonyms: c
                .synonyms
                .iter()
                .map(|s| (s.name.to_string(), text(&s.value), s.source))
                .collect(),
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// Sets (`Some`) or deletes (`None`) settings of `resource`, all or none.
pub async fn alter(
    cluster: &mut Cluster,
    resource: &Resource,
    changes: &[(String, Option<String>)],
) -> Result<()> {
    /// IncrementalAlterConfigs operations.
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    let (kind, name) = resource.kind_and_name();
    let configs = changes
        .iter()
        .map(|(key, value)| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key.clone()))
                .with_config_operation(if value.is_some() { SET } else { DELETE })
                .with_value(value.clone().map(StrBytes::from_string))
        })
        .collect();
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name))
            .with_configs(configs),
    ]);
    let connection = resource.connection(cluster).await?;
    let version = connection.version::<IncrementalAlterConfigsRequest>()?;
    let response = connection.call_at(version, &request).await?;
    let result = response
        .responses
        .first()
        .ok_or_else(|| anyhow!("IncrementalAlterConfigs answered for no resource"))?;
    check(result.error_code, result.error_message.as_ref(), || {
        format!("alter configs of {}", resource.describe())
    })
}
