//! Settings that change at run time: the dynamic broker configs the metadata image holds (per
//! broker, by id, and the cluster-wide default, the broker resource ""), layered over the
//! static configuration, and the effective value of a topic's or a broker's setting with
//! where it came from.
//!
//! Invariants: Kafka's precedence, highest first: a topic's own setting, the broker's dynamic
//! setting, the cluster-wide dynamic default, the static configuration (properties file and
//! `--set`), Kafka's default. Only [`is_dynamic`] keys ever come from the image: every other
//! broker setting is read-only at run time.

use super::{cleaner, BrokerConfig, DYNAMIC_ONLY_BROKER_CONFIGS, TOPIC_CONFIGS};
use crate::metadata::{MetadataImage, TopicMeta};

/// Kafka's `ConfigSource` codes, as DescribeConfigs reports them.
pub mod source {
    pub const TOPIC: i8 = 1;
    pub const DYNAMIC_BROKER: i8 = 2;
    pub const DYNAMIC_DEFAULT_BROKER: i8 = 3;
    pub const STATIC_BROKER: i8 = 4;
    pub const DEFAULT: i8 = 5;
}

/// The broker resource name of the cluster-wide dynamic defaults.
pub const CLUSTER_DEFAULT: &str = "";

/// A setting's value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced {
    /// The setting's name at that level (`retention.ms` for a topic's own, its broker key
    /// `log.retention.ms` for the levels below).
    pub name: String,
    pub value: String,
    pub source: i8,
}

/// Whether broker setting `broker_key` may change at run time: the broker defaults of topic
/// settings, all of them in Kafka's dynamic list (`DynamicLogConfig`), the cleaner's
/// settings but `log.cleaner.enable` (`config::cleaner`), and the settings that exist only
/// at run time (the replication throttles' rates).
pub fn is_dynamic(broker_key: &str) -> bool {
    TOPIC_CONFIGS.iter().any(|(_, key, _)| *key == broker_key)
        || is_cleaner_setting(broker_key)
        || dynamic_only_default(broker_key).is_some()
}

/// Whether `broker_key` is one of the cleaner's dynamic settings.
pub fn is_cleaner_setting(broker_key: &str) -> bool {
    cleaner::DYNAMIC.iter().any(|(key, _)| *key == broker_key)
}

/// The default of a broker setting that exists only at run time.
pub fn dynamic_only_default(broker_key: &str) -> Option<&'static str> {
    DYNAMIC_ONLY_BROKER_CONFIGS
        .iter()
        .find(|(key, _)| *key == broker_key)
        .map(|(_, default)| *default)
}

/// The effective value of dynamic broker setting `broker_key` on broker `node_id`: its own,
/// else the cluster-wide default, else the static or default value.
pub fn broker_setting(
    config: &BrokerConfig,
    image: &MetadataImage,
    node_id: i32,
    broker_key: &str,
) -> Option<String> {
    broker_levels(config, image, node_id, broker_key)
        .into_iter()
        .next()
        .map(|level| level.value)
}

/// The topic setting that broker setting `broker_key` gives the default of.
pub fn topic_key_of(broker_key: &str) -> Option<&'static str> {
    TOPIC_CONFIGS
        .iter()
        .find(|(_, key, _)| *key == broker_key)
        .map(|(name, _, _)| *name)
}

/// The broker key giving the default of topic setting `topic_key`.
pub fn broker_key_of(topic_key: &str) -> Option<&'static str> {
    TOPIC_CONFIGS
        .iter()
        .find(|(name, _, _)| *name == topic_key)
        .map(|(_, key, _)| *key)
}

/// The levels that may give broker setting `broker_key`, highest first: the dynamic value
/// of broker `node_id`, the cluster-wide dynamic default, the static value, Kafka's default
/// (the last two for topic defaults and the cleaner's settings only: other settings are
/// described from the static configuration as a whole).
fn broker_levels(
    config: &BrokerConfig,
    image: &MetadataImage,
    node_id: i32,
    broker_key: &str,
) -> Vec<Sourced> {
    let dynamic = |resource: &str, source| {
        image
            .broker_configs
            .get(resource)
            .and_then(|configs| configs.get(broker_key))
            .map(|value| Sourced {
                name: broker_key.to_string(),
                value: value.clone(),
                source,
            })
    };
    let mut levels: Vec<Sourced> = [
        dynamic(&node_id.to_string(), source::DYNAMIC_BROKER),
        dynamic(CLUSTER_DEFAULT, source::DYNAMIC_DEFAULT_BROKER),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(value) = topic_key_of(broker_key).and_then(|key| config.topic_defaults.get(key)) {
        levels.push(static_level(config, broker_key, value));
    } else if let Some(value) = config.cleaner_static.get(broker_key) {
        levels.push(static_level(config, broker_key, value));
    } else if let Some(default) = dynamic_only_default(broker_key) {
        levels.push(Sourced {
            name: broker_key.to_string(),
            value: default.to_string(),
            source: source::DEFAULT,
        });
    }
    levels
}

/// `value` of `broker_key` in the static configuration: given, or Kafka's default.
fn static_level(config: &BrokerConfig, broker_key: &str, value: &str) -> Sourced {
    let source = if config.given(broker_key) {
        source::STATIC_BROKER
    } else {
        source::DEFAULT
    };
    Sourced {
        name: broker_key.to_string(),
        value: value.to_string(),
        source,
    }
}

/// Topic setting `topic_key` of `topic` on broker `node_id`, with every level that gives it,
/// highest (the effective one) first: Kafka's synonyms.
pub fn topic_setting_levels(
    config: &BrokerConfig,
    image: &MetadataImage,
    node_id: i32,
    topic: &TopicMeta,
    topic_key: &str,
) -> Vec<Sourced> {
    let own = topic.configs.get(topic_key).map(|value| Sourced {
        name: topic_key.to_string(),
        value: value.clone(),
        source: source::TOPIC,
    });
    let below = match broker_key_of(topic_key) {
        Some(key) => broker_levels(config, image, node_id, key),
        None => config
            .topic_defaults
            .get(topic_key)
            .map(|value| Sourced {
                name: topic_key.to_string(),
                value: value.clone(),
                source: source::DEFAULT,
            })
            .into_iter()
            .collect(),
    };
    own.into_iter().chain(below).collect()
}

/// The effective value of topic setting `topic_key` of `topic` on broker `node_id`.
pub fn topic_setting(
    config: &BrokerConfig,
    image: &MetadataImage,
    node_id: i32,
    topic: &TopicMeta,
    topic_key: &str,
) -> Option<String> {
    if let Some(value) = topic.configs.get(topic_key) {
        return Some(value.clone());
    }
    let Some(broker_key) = broker_key_of(topic_key) else {
        // A setting of topics only (the replication throttles): its default.
        return config.topic_defaults.get(topic_key).cloned();
    };
    image
        .broker_configs
        .get(&node_id.to_string())
        .and_then(|configs| configs.get(broker_key))
        .or_else(|| {
            image
                .broker_configs
                .get(CLUSTER_DEFAULT)
                .and_then(|configs| configs.get(broker_key))
        })
        .or_else(|| config.topic_defaults.get(topic_key))
        .cloned()
}

/// Broker setting `broker_key` of broker `node_id` with every level that gives it, highest
/// first; `static_value` is its value in the static configuration, for keys that are not
/// topic defaults.
pub fn broker_setting_levels(
    config: &BrokerConfig,
    image: &MetadataImage,
    node_id: i32,
    broker_key: &str,
    static_value: &str,
) -> Vec<Sourced> {
    let mut levels = broker_levels(config, image, node_id, broker_key);
    if !is_dynamic(broker_key) {
        levels.push(static_level(config, broker_key, static_value));
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::{ConfigRecord, CONFIG_RESOURCE_BROKER};
    use crate::metadata::MetadataRecord;

    fn set(image: &mut MetadataImage, resource: &str, key: &str, value: &str) {
        image
            .apply(&MetadataRecord::Config(ConfigRecord {
                resource_type: CONFIG_RESOURCE_BROKER,
                resource_name: resource.to_string(),
                name: key.to_string(),
                value: Some(value.to_string()),
            }))
            .expect("applies");
    }

    fn topic(configs: &[(&str, &str)]) -> TopicMeta {
        TopicMeta {
            name: "t".into(),
            id: uuid::Uuid::nil(),
            partitions: Vec::new(),
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_topic_setting_takes_kafkas_precedence() {
        let flags = ["log.retention.bytes=100".to_string()];
        let config = BrokerConfig::load(None, &flags).expect("valid");
        let mut image = MetadataImage::default();
        let plain = topic(&[]);
        let value = |image: &MetadataImage, topic: &TopicMeta, node| {
            topic_setting(&config, image, node, topic, "retention.bytes")
        };
        assert_eq!(value(&image, &plain, 1).as_deref(), Some("100"), "static");
        set(&mut image, CLUSTER_DEFAULT, "log.retention.bytes", "200");
        assert_eq!(
            value(&image, &plain, 1).as_deref(),
            Some("200"),
            "cluster default"
        );
        set(&mut image, "1", "log.retention.bytes", "300");
        assert_eq!(
            value(&image, &plain, 1).as_deref(),
            Some("300"),
            "this broker's"
        );
        assert_eq!(
            value(&image, &plain, 2).as_deref(),
            Some("200"),
            "another broker's"
        );
        let own = topic(&[("retention.bytes", "400")]);
        assert_eq!(
            value(&image, &own, 1).as_deref(),
            Some("400"),
            "the topic's own"
        );

        let levels = topic_setting_levels(&config, &image, 1, &own, "retention.bytes");
        let described: Vec<(&str, &str, i8)> = levels
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str(), s.source))
            .collect();
        assert_eq!(
            described,
            vec![
                ("retention.bytes", "400", source::TOPIC),
                ("log.retention.bytes", "300", source::DYNAMIC_BROKER),
                ("log.retention.bytes", "200", source::DYNAMIC_DEFAULT_BROKER),
                ("log.retention.bytes", "100", source::STATIC_BROKER),
            ]
        );
        let levels = topic_setting_levels(&config, &image, 1, &own, "segment.bytes");
        assert_eq!(levels.len(), 1);
        assert_eq!(levels[0].source, source::DEFAULT);
    }

    #[test]
    fn only_topic_defaults_are_dynamic() {
        assert!(is_dynamic("log.retention.ms"));
        assert!(is_dynamic("unclean.leader.election.enable"));
        assert!(!is_dynamic("log.retention.hours"));
        assert!(!is_dynamic("log.retention.check.interval.ms"));
        assert!(!is_dynamic("retention.ms"), "a topic key, not a broker key");
        assert!(is_dynamic("leader.replication.throttled.rate"));
    }
}
