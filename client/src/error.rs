//! Kafka error codes as the client reports them: Kafka's own name (`TOPIC_ALREADY_EXISTS`)
//! and a message, the broker's when it sent one, else Kafka's default text for the code.
//!
//! Invariants:
//! - A response error becomes a [`KafkaError`] carrying its code, so callers can match on the
//!   code (e.g. retry `COORDINATOR_LOAD_IN_PROGRESS`) after it passed through `anyhow`.
//! - Code 0 is never an error.

use std::fmt;

use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;

/// Kafka error codes the client itself reacts to.
pub mod codes {
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
}

/// Kafka's spelling of an error code, e.g. 3 → `UNKNOWN_TOPIC_OR_PARTITION`.
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(code)) => format!("UNKNOWN_ERROR_CODE_{code}"),
        Some(error) => {
            let camel = format!("{error:?}");
            let mut name = String::with_capacity(camel.len() + 8);
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(ch.to_ascii_uppercase());
            }
            name
        }
    }
}

/// Kafka's default message (Errors.java) for the codes the tools meet; others get "".
pub fn default_message(code: i16) -> &'static str {
    match code {
        -1 => "The server experienced an unexpected error when processing the request.",
        1 => "The requested offset is not within the range of offsets maintained by the server.",
        2 => "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt.",
        3 => "This server does not host this topic-partition.",
        5 => "There is no leader for this topic-partition as we are in the middle of a leadership election.",
        6 => "For requests intended only for the leader, this error indicates that the broker is not the current leader.",
        7 => "The request timed out.",
        10 => "The request included a message larger than the max message size the server will accept.",
        14 => "The coordinator is loading and hence can't process requests.",
        15 => "The coordinator is not available.",
        16 => "This is not the correct coordinator.",
        17 => "The request attempted to perform an operation on an invalid topic.",
        19 => "Messages are rejected since there are fewer in-sync replicas than required.",
        22 => "The generation id provided in the request is not the current generation.",
        25 => "The coordinator is not aware of this member.",
        27 => "The group is rebalancing, so a rejoin is needed.",
        35 => "The version of API is not supported.",
        36 => "Topic with this name already exists.",
        37 => "Number of partitions is below 1.",
        38 => "Replication factor is below 1 or larger than the number of available brokers.",
        40 => "Configuration is invalid.",
        42 => "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker.",
        68 => "The group is not empty.",
        69 => "The group id does not exist.",
        79 => "The group member needs to have a valid member id before actually entering a consumer group.",
        86 => "The subscribed topics of this group do not match the offsets being deleted.",
        _ => "",
    }
}

/// A Kafka error code from a response, with what was being done and the broker's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaError {
    pub code: i16,
    pub what: String,
    pub message: Option<String>,
}

impl fmt::Display for KafkaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = match &self.message {
            Some(message) if !message.is_empty() => message.as_str(),
            _ => default_message(self.code),
        };
        write!(f, "{}: {}", self.what, error_name(self.code))?;
        if !message.is_empty() {
            write!(f, ": {message}")?;
        }
        Ok(())
    }
}

impl std::error::Error for KafkaError {}

/// `Ok` for code 0, else a [`KafkaError`] describing `what` failed.
pub fn check(
    code: i16,
    message: Option<&StrBytes>,
    what: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if code == 0 {
        return Ok(());
    }
    Err(KafkaError {
        code,
        what: what(),
        message: message.map(|m| m.to_string()),
    }
    .into())
}

/// The Kafka error code inside `error`, if it is (or wraps) a [`KafkaError`].
pub fn code_of(error: &anyhow::Error) -> Option<i16> {
    error.downcast_ref::<KafkaError>().map(|e| e.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafka_spelling() {
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(36), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(9999), "UNKNOWN_ERROR_CODE_9999");
    }

    #[test]
    fn message_prefers_the_brokers_text() {
        let error = KafkaError {
            code: 36,
            what: "create topic orders".into(),
            message: Some("Topic 'orders' already exists.".into()),
        };
        assert_eq!(
            error.to_string(),
            "create topic orders: TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."
        );
        let error = KafkaError {
            message: None,
            ..error
        };
        assert_eq!(
            error.to_string(),
            "create topic orders: TOPIC_ALREADY_EXISTS: Topic with this name already exists."
        );
    }

    #[test]
    fn check_keeps_the_code_through_anyhow() {
        assert!(check(0, None, || unreachable!()).is_ok());
        let error = check(27, None, || "heartbeat".into()).unwrap_err();
        assert_eq!(code_of(&error), Some(27));
    }
}
