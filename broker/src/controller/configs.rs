//! The controller's changes to settings at run time: a topic's own settings, and the dynamic
//! broker configs, per broker (resource "N") or cluster-wide (resource ""), each committed as
//! Config records and taken by every node when it installs the image.
//!
//! Invariants: a change to one resource applies whole or not at all, every value checked as
//! at creation; a change that sets what is already set, or removes what is not, is no
//! record; only dynamic broker settings (`config::dynamic::is_dynamic`) may change, every
//! other known one is refused as read-only, as Kafka refuses it.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;

use super::{validate_topic_config, validate_topic_config_name, Controller, Refusal};
use crate::config::dynamic::{
    dynamic_only_default, is_cleaner_setting, is_dynamic, topic_key_of, CLUSTER_DEFAULT,
};
use crate::config::{is_broker_key, CleanerSettings};
use crate::metadata::records::{ConfigRecord, CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_TOPIC};
use crate::metadata::MetadataRecord;
use crate::shard_state::Shard;

/// Settings to set (`Some`) or remove (`None`), by name.
pub type Changes = Vec<(String, Option<String>)>;

/// The Config records that take `resource` from its settings `current` by `changes`, each
/// checked by `check` first.
fn config_records(
    resource: (i8, &str),
    current: &BTreeMap<String, String>,
    changes: Changes,
    check: impl Fn(&str, Option<&str>) -> Result<(), Refusal>,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let mut records = Vec::new();
    for (key, value) in changes {
        check(&key, value.as_deref())?;
        if current.get(&key) == value.as_ref() {
            continue;
        }
        records.push(MetadataRecord::Config(ConfigRecord {
            resource_type: resource.0,
            resource_name: resource.1.to_string(),
            name: key,
            value,
        }));
    }
    Ok(records)
}

impl Controller {
    /// Sets (`Some`) or removes (`None`) topic-level settings of `name`, all or none, each
    /// checked as at creation; with `validate_only` nothing changes. Open logs take them
    /// when the new image is installed.
    pub(super) async fn alter_topic_configs(
        shard: &Rc<Shard>,
        name: &str,
        changes: Changes,
        validate_only: bool,
    ) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        let Some((id, current)) = controller
            .proposed
            .borrow()
            .topic(name)
            .map(|topic| (topic.id, topic.configs.clone()))
        else {
            return Err(Refusal::new(
                ResponseError::UnknownTopicOrPartition,
                format!("The topic '{name}' does not exist."),
            ));
        };
        let records = config_records(
            (CONFIG_RESOURCE_TOPIC, name),
            &current,
            changes,
            |key, value| match value {
                Some(value) => validate_topic_config(key, value),
                None => validate_topic_config_name(key).map(drop),
            },
        )?;
        if validate_only || records.is_empty() {
            return Ok(());
        }
        controller.commit(records).await?;
        Controller::publish(shard, Some(id)).await?;
        // `unclean.leader.election.enable` turned on elects leaders for offline partitions
        // at once, as Kafka's controller does (KIP-704).
        Controller::elect_leaderless(shard, id).await
    }

    /// Sets or removes dynamic broker settings of `resource` (a broker id, or "" for the
    /// cluster-wide defaults), all or none; with `validate_only` nothing changes. Every node
    /// takes them when it installs the new image.
    pub(super) async fn alter_broker_configs(
        shard: &Rc<Shard>,
        resource: &str,
        changes: Changes,
        validate_only: bool,
    ) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        if resource != CLUSTER_DEFAULT && resource.parse::<u32>().is_err() {
            return Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("Invalid broker name {resource:?}: a broker id, or empty for the cluster-wide defaults"),
            ));
        }
        let current = controller
            .proposed
            .borrow()
            .broker_configs
            .get(resource)
            .cloned()
            .unwrap_or_default();
        let unclean_touched = changes
            .iter()
            .any(|(key, _)| key == "unclean.leader.election.enable");
        let records = config_records(
            (CONFIG_RESOURCE_BROKER, resource),
            &current,
            changes,
            check_broker_setting,
        )?;
        if validate_only || records.is_empty() {
            return Ok(());
        }
        controller.commit(records).await?;
        Controller::publish(shard, None).await?;
        if unclean_touched {
            let topics: Vec<uuid::Uuid> = controller
                .proposed
                .borrow()
                .topics
                .values()
                .map(|t| t.id)
                .collect();
            for id in topics {
                Controller::elect_leaderless(shard, id).await?;
            }
        }
        Ok(())
    }
}

/// Kafka's checks of a dynamic broker setting: a dynamic one with a valid value (removing
/// needs none), a known static one refused as read-only, any other unknown.
fn check_broker_setting(key: &str, value: Option<&str>) -> Result<(), Refusal> {
    if dynamic_only_default(key).is_some() {
        let valid = value.is_none_or(|v| v.parse::<i64>().is_ok_and(|rate| rate >= 0));
        return if valid {
            Ok(())
        } else {
            Err(Refusal::new(
                ResponseError::InvalidConfig,
                format!(
                    "Invalid value {} for configuration {key}",
                    value.unwrap_or_default()
                ),
            ))
        };
    }
    if is_cleaner_setting(key) {
        return match value.map(|value| CleanerSettings::check(key, value)) {
            Some(Err(error)) => Err(Refusal::new(
                ResponseError::InvalidConfig,
                error.to_string(),
            )),
            _ => Ok(()),
        };
    }
    if let Some(topic_key) = topic_key_of(key).filter(|_| is_dynamic(key)) {
        return match value {
            Some(value) => validate_topic_config(topic_key, value).map_err(|refusal| {
                Refusal::new(
                    ResponseError::InvalidConfig,
                    refusal.message.replace(topic_key, key),
                )
            }),
            None => Ok(()),
        };
    }
    if is_broker_key(key) {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("Cannot update these configs dynamically: Set({key})"),
        ));
    }
    Err(Refusal::new(
        ResponseError::InvalidConfig,
        format!("Unknown broker config name: {key}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_settings_are_checked_as_kafka_checks_them() {
        assert!(check_broker_setting("log.retention.ms", Some("1000")).is_ok());
        assert!(check_broker_setting("log.retention.ms", None).is_ok());
        let invalid = check_broker_setting("log.retention.ms", Some("soon")).unwrap_err();
        assert_eq!(invalid.error_code, ResponseError::InvalidConfig.code());
        assert!(
            invalid.message.contains("log.retention.ms"),
            "{}",
            invalid.message
        );
        let read_only = check_broker_setting("log.retention.hours", Some("1")).unwrap_err();
        assert_eq!(read_only.error_code, ResponseError::InvalidRequest.code());
        assert_eq!(
            read_only.message,
            "Cannot update these configs dynamically: Set(log.retention.hours)"
        );
        assert!(check_broker_setting("leader.replication.throttled.rate", Some("1000")).is_ok());
        assert!(check_broker_setting("follower.replication.throttled.rate", Some("-1")).is_err());
        assert!(check_broker_setting("log.cleaner.threads", Some("2")).is_ok());
        assert!(check_broker_setting("log.cleaner.io.max.bytes.per.second", Some("1e6")).is_ok());
        let threads = check_broker_setting("log.cleaner.threads", Some("0")).unwrap_err();
        assert_eq!(threads.error_code, ResponseError::InvalidConfig.code());
        let enable = check_broker_setting("log.cleaner.enable", Some("false")).unwrap_err();
        assert_eq!(enable.error_code, ResponseError::InvalidRequest.code());
        let unknown = check_broker_setting("no.such.setting", Some("1")).unwrap_err();
        assert_eq!(unknown.error_code, ResponseError::InvalidConfig.code());
    }
}
