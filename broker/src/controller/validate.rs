//! What a topic may be called and configured with: Kafka's rules for names, and the topic
//! settings Kafka defines, each with a value of its kind. Pure checks, no state.

use kafka_protocol::error::ResponseError;

use super::{Refusal, TOPIC_NAME_BYTES_MAX};
use crate::config::{TOPIC_CONFIGS, TOPIC_ONLY_CONFIGS};

/// Kafka's rules: 1 to 249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), Refusal> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let problem = if name.is_empty() {
        Some("Topic name is illegal, it can't be empty".to_string())
    } else if name == "." || name == ".." {
        Some("Topic name cannot be \".\" or \"..\"".to_string())
    } else if name.len() > TOPIC_NAME_BYTES_MAX {
        Some(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_BYTES_MAX} characters"
        ))
    } else if !name.chars().all(legal) {
        Some(format!("Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"))
    } else {
        None
    };
    match problem {
        Some(message) => Err(Refusal::new(ResponseError::InvalidTopicException, message)),
        None => Ok(()),
    }
}

/// A topic config name must be one Kafka defines for topics; returns its default.
pub fn validate_topic_config_name(key: &str) -> Result<&'static str, Refusal> {
    TOPIC_CONFIGS
        .iter()
        .map(|(name, _, default)| (name, default))
        .chain(
            TOPIC_ONLY_CONFIGS
                .iter()
                .map(|(name, default)| (name, default)),
        )
        .find(|(name, _)| **name == key)
        .map(|(_, default)| *default)
        .ok_or_else(|| {
            Refusal::new(
                ResponseError::InvalidConfig,
                format!("Unknown topic config name: {key}"),
            )
        })
}

/// A topic config must be one Kafka defines for topics, with a value of the right kind.
pub fn validate_topic_config(key: &str, value: &str) -> Result<(), Refusal> {
    let default = validate_topic_config_name(key)?;
    let valid = match key {
        "cleanup.policy" => value
            .split(',')
            .all(|p| matches!(p.trim(), "delete" | "compact")),
        "message.timestamp.type" => matches!(value, "CreateTime" | "LogAppendTime"),
        "unclean.leader.election.enable" => matches!(value, "true" | "false"),
        "leader.replication.throttled.replicas" | "follower.replication.throttled.replicas" => {
            crate::replication::throttle::parse_replicas(value).is_some()
        }
        "min.cleanable.dirty.ratio" => value
            .parse::<f64>()
            .is_ok_and(|ratio| (0.0..=1.0).contains(&ratio)),
        "min.compaction.lag.ms" | "max.compaction.lag.ms" | "delete.retention.ms" => {
            value.parse::<i64>().is_ok_and(|ms| ms >= 0)
        }
        "compression.type" => {
            matches!(
                value,
                "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd"
            )
        }
        _ if default.parse::<i64>().is_ok() => value.parse::<i64>().is_ok(),
        _ => true,
    };
    if valid {
        Ok(())
    } else {
        Err(Refusal::new(
            ResponseError::InvalidConfig,
            format!("Invalid value {value} for configuration {key}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for good in ["orders", "a.b_c-D9", &"x".repeat(249)] {
            assert!(validate_topic_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "has space", "ümlaut", &"x".repeat(250)] {
            let refusal = validate_topic_name(bad).expect_err(bad);
            assert_eq!(
                refusal.error_code, 17,
                "INVALID_TOPIC_EXCEPTION for {bad:?}"
            );
        }
    }

    #[test]
    fn topic_configs_are_checked_by_name_and_kind() {
        assert!(validate_topic_config("retention.ms", "1000").is_ok());
        assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
        assert!(validate_topic_config("min.cleanable.dirty.ratio", "0.01").is_ok());
        assert!(validate_topic_config("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate_topic_config("min.compaction.lag.ms", "0").is_ok());
        assert!(validate_topic_config("max.compaction.lag.ms", "-1").is_err());
        assert!(validate_topic_config("delete.retention.ms", "86400000").is_ok());
        assert!(validate_topic_config("unclean.leader.election.enable", "true").is_ok());
        assert!(validate_topic_config("unclean.leader.election.enable", "yes").is_err());
        assert!(validate_topic_config("leader.replication.throttled.replicas", "0:1,1:2").is_ok());
        assert!(validate_topic_config("leader.replication.throttled.replicas", "*").is_ok());
        assert!(validate_topic_config("follower.replication.throttled.replicas", "0-1").is_err());
        assert_eq!(
            validate_topic_config("retention.ms", "soon").map_err(|r| r.error_code),
            Err(40)
        );
        assert_eq!(
            validate_topic_config("no.such", "1").map_err(|r| r.error_code),
            Err(40)
        );
    }
}
