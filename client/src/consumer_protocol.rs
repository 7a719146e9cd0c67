//! Kafka's ConsumerProtocol, the bytes consumer-group members exchange through the group
//! coordinator (JoinGroup metadata and SyncGroup assignments), and the range assignor that
//! turns subscriptions into assignments. The coordinator never reads these bytes; members
//! ([`crate::member`]) and admin tools that describe a group do.
//!
//! Invariants:
//! - Both structs are written as a big-endian i16 version followed by the struct at that
//!   version; this module writes v0, which every consumer understands, and reads any
//!   version, decoding a newer one as the highest the codec knows (fields are appended).
//! - The range assignor is Java's: per topic, subscribers sorted by member id, each gets
//!   `partitions / members` consecutive partitions and the first `partitions % members`
//!   one more; members beyond the partition count get none.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};

/// JoinGroup's protocol type for consumers.
pub const PROTOCOL_TYPE: &str = "consumer";
/// The assignor name Java, librdkafka and every other client know as Kafka's default.
pub const RANGE: &str = "range";
/// ConsumerProtocol version written: v0 is understood by every consumer.
const VERSION_WRITTEN: i16 = 0;

/// Member id → subscribed topics, decoded from JoinGroup's member list.
pub fn subscriptions(members: &[JoinGroupResponseMember]) -> Result<BTreeMap<String, Vec<String>>> {
    let mut subscriptions = BTreeMap::new();
    for member in members {
        let topics = decode_subscription(member.metadata.clone())
            .with_context(|| format!("subscription of member {}", member.member_id))?;
        subscriptions.insert(member.member_id.to_string(), topics);
    }
    Ok(subscriptions)
}

/// The group leader's work between JoinGroup and SyncGroup: assign `subscriptions` (from
/// [`subscriptions`]) with [`range_assign`], and encode one assignment per member.
/// `partition_count(topic)` is the topic's partition count (0 when it does not exist: a
/// topic that does not exist yet simply has nothing to assign).
pub fn leader_assignments(
    subscriptions: &BTreeMap<String, Vec<String>>,
    mut partition_count: impl FnMut(&str) -> i32,
) -> Result<Vec<SyncGroupRequestAssignment>> {
    let mut counts = BTreeMap::new();
    for topic in subscriptions.values().flatten() {
        if !counts.contains_key(topic) {
            counts.insert(topic.clone(), partition_count(topic));
        }
    }
    range_assign(subscriptions, &counts)
        .iter()
        .map(|(member_id, assignment)| {
            Ok(SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_string(member_id.clone()))
                .with_assignment(encode_assignment(assignment)?))
        })
        .collect()
}

/// Java's RangeAssignor: member id → topic → partitions. Every member gets an entry.
pub fn range_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
    let mut plan: BTreeMap<String, BTreeMap<String, Vec<i32>>> = subscriptions
        .keys()
        .map(|member| (member.clone(), BTreeMap::new()))
        .collect();
    for (topic, count) in partition_counts {
        // BTreeMap keys are sorted, so subscribers come in member-id order.
        let subscribers: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(member, _)| member)
            .collect();
        if subscribers.is_empty() || *count <= 0 {
            continue;
        }
        let members = subscribers.len() as i32;
        let (per_member, extra) = (count / members, count % members);
        for (i, member) in subscribers.into_iter().enumerate() {
            let i = i as i32;
            let start = per_member * i + i.min(extra);
            let length = per_member + i32::from(i < extra);
            // Every subscriber got an entry when the plan was created.
            if let Some(assigned) = plan.get_mut(member).filter(|_| length > 0) {
                assigned.insert(topic.clone(), (start..start + length).collect());
            }
        }
    }
    plan
}

pub fn encode_subscription(topics: &[String]) -> Result<Bytes> {
    let subscription = ConsumerProtocolSubscription::default().with_topics(
        topics
            .iter()
            .map(|t| StrBytes::from_string(t.clone()))
            .collect(),
    );
    let mut out = BytesMut::new();
    out.put_i16(VERSION_WRITTEN);
    subscription.encode(&mut out, VERSION_WRITTEN)?;
    Ok(out.freeze())
}

pub fn decode_subscription(mut bytes: Bytes) -> Result<Vec<String>> {
    let version = consumer_protocol_version::<ConsumerProtocolSubscription>(&mut bytes)?;
    let subscription = ConsumerProtocolSubscription::decode(&mut bytes, version)?;
    Ok(subscription.topics.iter().map(|t| t.to_string()).collect())
}

pub fn encode_assignment(assignment: &BTreeMap<String, Vec<i32>>) -> Result<Bytes> {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        assignment
            .iter()
            .map(|(topic, partitions)| {
                AssignedTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(partitions.clone())
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    out.put_i16(VERSION_WRITTEN);
    assignment.encode(&mut out, VERSION_WRITTEN)?;
    Ok(out.freeze())
}

/// Topic → partitions; empty bytes (a member left without partitions) mean none.
pub fn decode_assignment(mut bytes: Bytes) -> Result<BTreeMap<String, Vec<i32>>> {
    if bytes.is_empty() {
        return Ok(BTreeMap::new());
    }
    let version = consumer_protocol_version::<ConsumerProtocolAssignment>(&mut bytes)?;
    let assignment = ConsumerProtocolAssignment::decode(&mut bytes, version)?;
    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for topic in assignment.assigned_partitions {
        let partitions = topics.entry(topic.topic.0.to_string()).or_default();
        partitions.extend(topic.partitions);
        partitions.sort_unstable();
        partitions.dedup();
    }
    Ok(topics)
}

fn consumer_protocol_version<M: Message>(bytes: &mut Bytes) -> Result<i16> {
    if bytes.remaining() < 2 {
        return Err(anyhow!("consumer protocol bytes end before their version"));
    }
    let version = bytes.get_i16();
    if version < M::VERSIONS.min {
        bail!("consumer protocol version {version} is unknown");
    }
    Ok(version.min(M::VERSIONS.max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscriptions(members: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        members
            .iter()
            .map(|(m, topics)| {
                (
                    m.to_string(),
                    topics.iter().map(|t| t.to_string()).collect(),
                )
            })
            .collect()
    }

    fn counts(topics: &[(&str, i32)]) -> BTreeMap<String, i32> {
        topics.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    #[test]
    fn range_splits_consecutive_partitions_in_member_order() {
        let plan = range_assign(
            &subscriptions(&[("b", &["t"]), ("a", &["t"])]),
            &counts(&[("t", 5)]),
        );
        assert_eq!(plan["a"]["t"], [0, 1, 2]);
        assert_eq!(plan["b"]["t"], [3, 4]);
    }

    #[test]
    fn range_leaves_extra_members_idle() {
        let members: Vec<(String, Vec<String>)> = (0..5)
            .map(|i| (format!("m{i}"), vec!["t".to_string()]))
            .collect();
        let plan = range_assign(&members.into_iter().collect(), &counts(&[("t", 2)]));
        assert_eq!(plan.len(), 5);
        let busy: Vec<&String> = plan
            .iter()
            .filter(|(_, a)| !a.is_empty())
            .map(|(m, _)| m)
            .collect();
        assert_eq!(busy, ["m0", "m1"]);
        assert_eq!(plan["m0"]["t"], [0]);
        assert_eq!(plan["m1"]["t"], [1]);
    }

    #[test]
    fn range_assigns_each_topic_to_its_subscribers_only() {
        let plan = range_assign(
            &subscriptions(&[("a", &["x", "y"]), ("b", &["y"])]),
            &counts(&[("x", 2), ("y", 2), ("z", 3)]),
        );
        assert_eq!(plan["a"]["x"], [0, 1]);
        assert_eq!(plan["a"]["y"], [0]);
        assert_eq!(plan["b"]["y"], [1]);
        assert!(!plan["b"].contains_key("x"));
    }

    #[test]
    fn consumer_protocol_round_trips() {
        let topics = vec!["orders".to_string(), "payments".to_string()];
        let bytes = encode_subscription(&topics).unwrap();
        assert_eq!(&bytes[..2], &[0, 0], "version prefix");
        assert_eq!(decode_subscription(bytes).unwrap(), topics);

        let mut assignment = BTreeMap::new();
        assignment.insert("orders".to_string(), vec![0, 2]);
        let bytes = encode_assignment(&assignment).unwrap();
        assert_eq!(decode_assignment(bytes).unwrap(), assignment);
        assert!(decode_assignment(Bytes::new()).unwrap().is_empty());
    }

    #[test]
    fn the_leader_assigns_every_member_from_their_subscriptions() {
        let member = |id: &str, topics: &[&str]| {
            let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
            JoinGroupResponseMember::default()
                .with_member_id(StrBytes::from_string(id.to_string()))
                .with_metadata(encode_subscription(&topics).unwrap())
        };
        let members = [member("b", &["t"]), member("a", &["t", "missing"])];
        let subscribed = super::subscriptions(&members).unwrap();
        let sync = leader_assignments(&subscribed, |t| if t == "t" { 3 } else { 0 }).unwrap();
        let got: BTreeMap<String, BTreeMap<String, Vec<i32>>> = sync
            .into_iter()
            .map(|a| {
                (
                    a.member_id.to_string(),
                    decode_assignment(a.assignment).unwrap(),
                )
            })
            .collect();
        assert_eq!(got["a"], BTreeMap::from([("t".to_string(), vec![0, 1])]));
        assert_eq!(got["b"], BTreeMap::from([("t".to_string(), vec![2])]));
        let garbled = [JoinGroupResponseMember::default().with_metadata(Bytes::from_static(&[9]))];
        assert!(super::subscriptions(&garbled).is_err());
    }

    #[test]
    fn newer_consumer_protocol_versions_decode() {
        // A v1 subscription (as Java 2.4+ sends): topics, user data, owned partitions.
        let subscription = ConsumerProtocolSubscription::default()
            .with_topics(vec![StrBytes::from_static_str("orders")]);
        let mut bytes = BytesMut::new();
        bytes.put_i16(1);
        subscription.encode(&mut bytes, 1).unwrap();
        assert_eq!(decode_subscription(bytes.freeze()).unwrap(), ["orders"]);
        assert!(decode_subscription(Bytes::from_static(&[0])).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_protocol_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
            let _ = decode_subscription(Bytes::from(bytes.clone()));
            let _ = decode_assignment(Bytes::from(bytes));
        }
    }
}
