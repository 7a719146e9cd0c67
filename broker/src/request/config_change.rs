//! What IncrementalAlterConfigs and AlterConfigs share: the resource a change is for (a
//! topic, or the dynamic settings of a broker or of the whole cluster), its settings as
//! they stand, and running the change on the active controller through shard 0.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;

use crate::config::dynamic::{topic_key_of, CLUSTER_DEFAULT};
use crate::controller::{Controller, ForwardedRequest, Refusal};
use crate::errors::code;
use crate::metadata::records::{CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC};
use crate::shard_state::Shard;

/// Settings to set (`Some`) or remove (`None`), by name.
pub type Changes = Vec<(String, Option<String>)>;

/// The resource a config change is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Topic(String),
    /// A broker id, or "" for the cluster-wide defaults.
    Broker(String),
}

fn refusal(error: ResponseError, message: String) -> Refusal {
    Refusal {
        error_code: code(error),
        message,
    }
}

impl Target {
    /// The resource of `resource_type` (2 topic, 4 broker) named `name`.
    pub fn of(resource_type: i8, name: &str) -> Result<Target, Refusal> {
        match resource_type {
            CONFIG_RESOURCE_TOPIC => Ok(Target::Topic(name.to_string())),
            CONFIG_RESOURCE_BROKER => Ok(Target::Broker(name.to_string())),
            other => Err(refusal(
                ResponseError::InvalidRequest,
                format!("Unsupported resource type {other}"),
            )),
        }
    }

    /// The settings the resource sets itself (a topic's overrides, a broker's or the
    /// cluster's dynamic settings); UNKNOWN_TOPIC_OR_PARTITION for a topic that is not there.
    pub fn own_settings(&self, shard: &Shard) -> Result<BTreeMap<String, String>, Refusal> {
        let image = shard.image();
        match self {
            Target::Topic(name) => image.topic(name).map(|t| t.configs.clone()).ok_or_else(|| {
                refusal(
                    ResponseError::UnknownTopicOrPartition,
                    format!("The topic '{name}' does not exist."),
                )
            }),
            Target::Broker(resource) => Ok(image
                .broker_configs
                .get(resource)
                .cloned()
                .unwrap_or_default()),
        }
    }

    /// The value setting `key` has for the resource now: its own, else what it inherits
    /// (for a topic, as its logs apply it on this node; for a broker, the cluster-wide
    /// dynamic default, else the static one).
    pub fn current(&self, shard: &Shard, key: &str) -> Option<String> {
        let image = shard.image();
        match self {
            Target::Topic(name) => shard.topic_setting(image.topic(name)?, key),
            Target::Broker(resource) => [resource.as_str(), CLUSTER_DEFAULT]
                .iter()
                .find_map(|r| image.broker_configs.get(*r)?.get(key).cloned())
                .or_else(|| shard.config.topic_defaults.get(topic_key_of(key)?).cloned()),
        }
    }

    /// Applies `changes` on the active controller, for a client at `client`; with
    /// `validate_only` only checks them.
    pub async fn apply(
        self,
        shard: &Rc<Shard>,
        changes: Changes,
        validate_only: bool,
        client: Option<IpAddr>,
    ) -> Result<(), Refusal> {
        let request = match self {
            Target::Topic(name) => ForwardedRequest::AlterTopicConfigs {
                name,
                changes,
                validate_only,
            },
            Target::Broker(resource) => ForwardedRequest::AlterBrokerConfigs {
                resource,
                changes,
                validate_only,
            },
        };
        let job = move |controller: Rc<Shard>| async move {
            Controller::change_topics(&controller, request, client).await
        };
        shard
            .router
            .call(shard, 0, job)
            .await
            .unwrap_or_else(|stopped| {
                Err(refusal(
                    ResponseError::BrokerNotAvailable,
                    stopped.to_string(),
                ))
            })
    }
}
