//! The records that change cluster metadata, in the shape of Kafka's KRaft records
//! (KIP-631; `metadata/src/main/resources/common/metadata/*.json` in Kafka's tree), so that a
//! Raft log can carry them unchanged. Field names follow Kafka's JSON form (camelCase); the
//! `type` tag names the record as Kafka names it.
//!
//! Invariants: records are facts, validated by the controller before they are proposed, and
//! applied by every node in commit order ([`super::MetadataImage::apply`]); a change that
//! takes several records (a topic and its partitions) is proposed as one batch, committed
//! whole or not at all.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::image::PartitionState;

/// `ConfigRecord.resourceType` for a topic (Kafka's `ConfigResource.Type.TOPIC`).
pub const CONFIG_RESOURCE_TOPIC: i8 = 2;
/// `ConfigRecord.resourceType` for a broker, or the cluster default when the name is empty.
pub const CONFIG_RESOURCE_BROKER: i8 = 4;
/// `leader` of a partition that has none (Kafka's `LeaderConstants.NO_LEADER`).
pub const NO_LEADER: i32 = -1;
/// Kafka's `SecurityProtocol.PLAINTEXT`, the only protocol ringlog listens with.
pub const SECURITY_PROTOCOL_PLAINTEXT: i16 = 0;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    #[serde(rename = "RegisterBrokerRecord")]
    RegisterBroker(RegisterBrokerRecord),
    #[serde(rename = "BrokerRegistrationChangeRecord")]
    BrokerRegistrationChange(BrokerRegistrationChangeRecord),
    #[serde(rename = "TopicRecord")]
    Topic(TopicRecord),
    #[serde(rename = "PartitionRecord")]
    Partition(PartitionRecord),
    #[serde(rename = "PartitionChangeRecord")]
    PartitionChange(PartitionChangeRecord),
    #[serde(rename = "ConfigRecord")]
    Config(ConfigRecord),
    #[serde(rename = "ProducerIdsRecord")]
    ProducerIds(ProducerIdsRecord),
    #[serde(rename = "RemoveTopicRecord")]
    RemoveTopic(RemoveTopicRecord),
    #[serde(rename = "FeatureLevelRecord")]
    FeatureLevel(FeatureLevelRecord),
    #[serde(rename = "NoOpRecord")]
    NoOp,
}

/// A listener a broker serves clients on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerEndpoint {
    /// The listener's name, e.g. `PLAINTEXT`.
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: i16,
}

/// A broker (re)joins the cluster. Its epoch is new with every registration, so that
/// requests from an older incarnation can be told apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterBrokerRecord {
    pub broker_id: i32,
    /// Random per process start: a restarted broker is a new incarnation.
    pub incarnation_id: Uuid,
    pub broker_epoch: i64,
    pub endpoints: Vec<BrokerEndpoint>,
    pub rack: Option<String>,
    /// A fenced broker leads nothing and is not listed to clients.
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

/// A registered broker's state changes (unfenced once caught up, fenced when it stops
/// heartbeating, shutting down).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerRegistrationChangeRecord {
    pub broker_id: i32,
    /// Must be the registration's epoch: a change for an older incarnation does not apply.
    pub broker_epoch: i64,
    pub fenced: Option<bool>,
    pub in_controlled_shutdown: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRecord {
    pub name: String,
    pub topic_id: Uuid,
}

/// A partition is created (or, for an existing one, replaced whole).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionRecord {
    pub partition_id: i32,
    pub topic_id: Uuid,
    /// Replicas, ISR, leader and epochs, under Kafka's field names.
    #[serde(flatten)]
    pub state: PartitionState,
}

/// What changes of a partition; a field left `None` keeps its value. A new leader bumps the
/// leader epoch; every change bumps the partition epoch (as Kafka's `PartitionRegistration.merge`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionChangeRecord {
    pub partition_id: i32,
    pub topic_id: Uuid,
    pub isr: Option<Vec<i32>>,
    pub leader: Option<i32>,
    pub replicas: Option<Vec<i32>>,
    pub removing_replicas: Option<Vec<i32>>,
    pub adding_replicas: Option<Vec<i32>>,
}

/// A config set (`value` Some) or removed (None) on a topic or a broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRecord {
    pub resource_type: i8,
    pub resource_name: String,
    pub name: String,
    pub value: Option<String>,
}

/// A block of producer ids was handed to `broker_id`: every id below `next_producer_id` is
/// taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerIdsRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub next_producer_id: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveTopicRecord {
    pub topic_id: Uuid,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeatureLevelRecord {
    pub name: String,
    pub feature_level: i16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_kafkas_names() {
        let record = MetadataRecord::Topic(TopicRecord {
            name: "orders".into(),
            topic_id: Uuid::nil(),
        });
        let json = serde_json::to_string(&record).expect("serializes");
        assert_eq!(
            json,
            r#"{"type":"TopicRecord","name":"orders","topicId":"00000000-0000-0000-0000-000000000000"}"#
        );
        let change = MetadataRecord::PartitionChange(PartitionChangeRecord {
            leader: Some(2),
            ..Default::default()
        });
        let json = serde_json::to_string(&change).expect("serializes");
        assert!(json.contains(r#""type":"PartitionChangeRecord""#), "{json}");
        assert!(json.contains(r#""partitionId":0"#), "{json}");
        assert_eq!(
            serde_json::to_string(&MetadataRecord::NoOp).expect("serializes"),
            r#"{"type":"NoOpRecord"}"#
        );
        for record in [record, change, MetadataRecord::NoOp] {
            let json = serde_json::to_vec(&record).expect("serializes");
            assert_eq!(
                serde_json::from_slice::<MetadataRecord>(&json).expect("parses"),
                record
            );
        }
    }
}
