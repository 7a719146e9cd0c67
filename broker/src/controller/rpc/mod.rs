//! What a node asks the active controller, in Kafka's own messages, as KRaft's brokers send
//! them: BrokerRegistration; BrokerHeartbeat, which also asks to be unfenced and carries a
//! controlled shutdown; AllocateProducerIds; AlterPartition; CreateTopics for the topics a
//! broker creates; DescribeQuorum; and an Envelope around each client request a node
//! forwards (DeleteTopics, CreatePartitions, IncrementalAlterConfigs, ElectLeaders,
//! AlterPartitionReassignments). A frame here is a Kafka request or response without its
//! length prefix (header, then body); the quorum's transport carries it between voters.
//!
//! One addition rides in the response header's tagged fields, where a Kafka peer skips it:
//! [`LOG_END_TAG`], the end of the controller's applied metadata log once it had executed
//! the request, which the requester reaches before it answers its own client.
//!
//! Invariants: requests are encoded at the newest version kafka-protocol knows and decoded
//! at the version their header names (a version outside the message's range is refused); a
//! forwarded client request names exactly one topic or resource, because the forwarding
//! node validates and forwards a client's request topic by topic; decoding never panics,
//! and an answer is read against the request it answers, item by item in request order.

//!
//! `requests.rs` writes and reads what a node sends, `answers.rs` what the controller
//! answers; both name messages and fields as Kafka's JSON descriptors do.

mod answers;
mod requests;
#[cfg(test)]
mod tests;

pub(super) use answers::{decode_answer, encode_answer};
pub(super) use requests::{decode_call, encode_call};

use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AlterPartitionReassignmentsRequest, AlterPartitionRequest, ApiKey,
    BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest, CreatePartitionsRequest,
    CreateTopicsRequest, DeleteTopicsRequest, DescribeQuorumRequest, ElectLeadersRequest,
    EnvelopeRequest, IncrementalAlterConfigsRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Message, Request, StrBytes};

use super::cluster::ForwardedRequest;

/// The response header's tagged field that carries the controller's applied log end.
pub(super) const LOG_END_TAG: i32 = 0x524c_0001;
/// IncrementalAlterConfigs resource types and operations.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const CONFIG_SET: i8 = 0;
const CONFIG_DELETE: i8 = 1;
/// How long a forwarded request may take, as its `timeout_ms` says (the forwarding node
/// bounds its own wait the same way).
const TIMEOUT_MS: i32 = 30_000;

/// A request as its header names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
}

/// A request received from another node: what to execute, and how to answer it.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) request: ForwardedRequest,
    header: Header,
    /// The Envelope the request came in, if forwarded for a client.
    envelope: Option<Header>,
    /// The address of the client a forwarded request is for, as its Envelope names it.
    pub(super) client: Option<IpAddr>,
}

/// A request of any kind, to encode without naming its type.
trait AnyRequest {
    fn key(&self) -> ApiKey;
    fn newest(&self) -> i16;
    fn encode_at(&self, out: &mut BytesMut, version: i16);
}

impl<R: Request> AnyRequest for R {
    fn key(&self) -> ApiKey {
        ApiKey::try_from(R::KEY).expect("kafka-protocol's requests have known keys")
    }

    fn newest(&self) -> i16 {
        R::VERSIONS.max
    }

    fn encode_at(&self, out: &mut BytesMut, version: i16) {
        self.encode(out, version)
            .expect("requests built here always encode");
    }
}

/// The newest version of `key`'s messages this node speaks.
fn newest(key: ApiKey) -> i16 {
    match key {
        ApiKey::BrokerRegistration => BrokerRegistrationRequest::VERSIONS.max,
        ApiKey::BrokerHeartbeat => BrokerHeartbeatRequest::VERSIONS.max,
        ApiKey::AllocateProducerIds => AllocateProducerIdsRequest::VERSIONS.max,
        ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS.max,
        ApiKey::AlterPartition => AlterPartitionRequest::VERSIONS.max,
        ApiKey::DescribeQuorum => DescribeQuorumRequest::VERSIONS.max,
        ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS.max,
        ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS.max,
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS.max,
        ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS.max,
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::VERSIONS.max,
        ApiKey::Envelope => EnvelopeRequest::VERSIONS.max,
        other => unreachable!("{other:?} is not a request for the controller"),
    }
}

fn request_key(request: &ForwardedRequest) -> ApiKey {
    match request {
        ForwardedRequest::Register { .. } => ApiKey::BrokerRegistration,
        ForwardedRequest::Heartbeat { .. } | ForwardedRequest::ControlledShutdown { .. } => {
            ApiKey::BrokerHeartbeat
        }
        ForwardedRequest::AllocateProducerIds { .. } => ApiKey::AllocateProducerIds,
        ForwardedRequest::CreateTopic(_) => ApiKey::CreateTopics,
        ForwardedRequest::AlterPartitions { .. } => ApiKey::AlterPartition,
        ForwardedRequest::DescribeQuorum => ApiKey::DescribeQuorum,
        ForwardedRequest::DeleteTopic { .. } => ApiKey::DeleteTopics,
        ForwardedRequest::CreatePartitions { .. } => ApiKey::CreatePartitions,
        ForwardedRequest::AlterTopicConfigs { .. }
        | ForwardedRequest::AlterBrokerConfigs { .. } => ApiKey::IncrementalAlterConfigs,
        ForwardedRequest::ElectLeaders { .. } => ApiKey::ElectLeaders,
        ForwardedRequest::AlterReassignments { .. } => ApiKey::AlterPartitionReassignments,
    }
}

/// Client requests travel in an Envelope; a broker's own requests go as they are.
fn is_enveloped(request: &ForwardedRequest) -> bool {
    matches!(
        request_key(request),
        ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::ElectLeaders
            | ApiKey::AlterPartitionReassignments
    )
}

fn decode_header(mut frame: Bytes) -> Result<(Header, Bytes), String> {
    if frame.len() < 4 {
        return Err(format!("a request of {} bytes", frame.len()));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api_key = ApiKey::try_from(key).map_err(|()| format!("unknown api key {key}"))?;
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|error| format!("{api_key:?} v{version} header: {error}"))?;
    let header = Header {
        api_key,
        version,
        correlation_id: header.correlation_id,
    };
    Ok((header, frame))
}

fn decode_body<M: Decodable + Message>(body: &mut Bytes, version: i16) -> Result<M, String> {
    if version < M::VERSIONS.min || version > M::VERSIONS.max {
        return Err(format!("version {version} is not one of {:?}", M::VERSIONS));
    }
    M::decode(body, version).map_err(|error| error.to_string())
}

fn only<T>(items: Vec<T>) -> Result<T, String> {
    let count = items.len();
    let mut items = items.into_iter();
    match (items.next(), items.next()) {
        (Some(item), None) => Ok(item),
        _ => Err(format!("{count} items where one was expected")),
    }
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().map(|&id| BrokerId(id)).collect()
}
