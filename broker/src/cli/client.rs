//! A small blocking Kafka client for the command-line tools: framing over
//! `std::net::TcpStream`, ApiVersions negotiation, bootstrap through Metadata, and one
//! connection per broker so requests reach partition leaders and group coordinators.
//!
//! Invariants:
//! - One request in flight per connection; the answer's correlation id must be the one sent,
//!   else the connection is unusable and the call fails.
//! - Every API is spoken at the highest version both this client ([`CLIENT_APIS`]) and the
//!   broker support; callers build requests for that version, setting only fields it has.
//! - A frame longer than [`FRAME_BYTES_MAX`] is refused before anything is allocated for it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::error::{check, code_of};

/// Largest response frame accepted; a Fetch is capped well below it by its `max_bytes`.
pub const FRAME_BYTES_MAX: usize = 128 * 1024 * 1024;
pub const CLIENT_ID: &str = "ringlog-cli";
/// How long one request may wait for its answer unless the caller says otherwise.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// (api, lowest, highest) versions this client can build. Produce and Fetch stop at 12 and
/// Metadata at 12 because later versions name topics by id only; OffsetCommit and
/// OffsetFetch stop at 8 because 9 belongs to the KIP-848 group protocol.
pub const CLIENT_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 5),
];

/// The version of `api` to speak: the highest in both ranges, or an error naming the API.
pub fn negotiate(api: ApiKey, offered: Option<(i16, i16)>) -> Result<i16> {
    let (ours_min, ours_max) = CLIENT_APIS
        .iter()
        .find(|(key, _, _)| *key == api)
        .map(|(_, min, max)| (*min, *max))
        .ok_or_else(|| anyhow!("this client does not speak {api:?}"))?;
    let (theirs_min, theirs_max) =
        offered.ok_or_else(|| anyhow!("the broker does not support {api:?}"))?;
    let version = ours_max.min(theirs_max);
    if version < ours_min.max(theirs_min) {
        bail!(
            "no common {api:?} version: broker {theirs_min}..={theirs_max}, \
             client {ours_min}..={ours_max}"
        );
    }
    Ok(version)
}

fn api_key<R: Request>() -> ApiKey {
    // Every `Request` implementor's KEY is a valid ApiKey (both come from the same spec).
    ApiKey::try_from(R::KEY).expect("request types carry valid api keys")
}

/// One connection to one broker, with the versions it offers.
pub struct Connection {
    stream: TcpStream,
    pub address: String,
    correlation_id: i32,
    offered: HashMap<i16, (i16, i16)>,
    out: Vec<u8>,
}

impl Connection {
    /// Connects to `address` (host:port) and learns its API versions.
    pub fn connect(address: &str) -> Result<Connection> {
        let socket = address
            .to_socket_addrs()
            .with_context(|| format!("resolving {address}"))?
            .next()
            .ok_or_else(|| anyhow!("{address} resolves to nothing"))?;
        let stream = TcpStream::connect_timeout(&socket, Duration::from_secs(10))
            .with_context(|| format!("connecting to {address}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        let mut connection = Connection {
            stream,
            address: address.to_string(),
            correlation_id: 0,
            offered: HashMap::new(),
            out: Vec::with_capacity(4096),
        };
        connection.api_versions()?;
        Ok(connection)
    }

    fn api_versions(&mut self) -> Result<()> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = self.call_at(3, &request)?;
        if response.error_code == 35 {
            // UNSUPPORTED_VERSION: the broker answered in v0 with its ranges; ask in v0.
            response = self.call_at(0, &ApiVersionsRequest::default())?;
        }
        check(response.error_code, None, || {
            format!("ApiVersions to {}", self.address)
        })?;
        self.offered = response
            .api_keys
            .iter()
            .map(|api| (api.api_key, (api.min_version, api.max_version)))
            .collect();
        Ok(())
    }

    /// The version of `R` to build and send on this connection.
    pub fn version<R: Request>(&self) -> Result<i16> {
        negotiate(api_key::<R>(), self.offered.get(&R::KEY).copied())
    }

    /// True when the broker offers `R` at any version this client speaks.
    pub fn supports<R: Request>(&self) -> bool {
        self.version::<R>().is_ok()
    }

    /// Sends `request` at `version` and waits for its answer.
    pub fn call_at<R: Request>(&mut self, version: i16, request: &R) -> Result<R::Response> {
        let correlation_id = self.send_at(version, request)?;
        let mut frame = self.read_frame()?;
        let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .with_context(|| format!("{:?} v{version} response header", api_key::<R>()))?;
        if header.correlation_id != correlation_id {
            bail!(
                "{} answered correlation id {} to request {correlation_id}",
                self.address,
                header.correlation_id
            );
        }
        R::Response::decode(&mut frame, version)
            .with_context(|| format!("decoding {:?} v{version} response", api_key::<R>()))
    }

    /// Like [`Connection::call_at`], with the read timeout raised to `timeout` for this call
    /// (JoinGroup may wait a whole rebalance).
    pub fn call_with_timeout<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response> {
        self.stream.set_read_timeout(Some(timeout))?;
        let answer = self.call_at(version, request);
        self.stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        answer
    }

    /// Sends `request` without waiting (Produce with acks=0 gets no answer).
    pub fn send_at<R: Request>(&mut self, version: i16, request: &R) -> Result<i32> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let correlation_id = self.correlation_id;
        self.out.clear();
        self.out.extend_from_slice(&[0; 4]);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        header.encode(&mut self.out, R::header_version(version))?;
        request
            .encode(&mut self.out, version)
            .with_context(|| format!("encoding {:?} v{version}", api_key::<R>()))?;
        let size = (self.out.len() - 4) as i32;
        self.out[..4].copy_from_slice(&size.to_be_bytes());
        self.stream
            .write_all(&self.out)
            .with_context(|| format!("sending to {}", self.address))?;
        Ok(correlation_id)
    }

    fn read_frame(&mut self) -> Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .with_context(|| format!("reading an answer from {}", self.address))?;
        let size = i32::from_be_bytes(size);
        if size < 4 || size as usize > FRAME_BYTES_MAX {
            bail!("{} sent a frame of {size} bytes", self.address);
        }
        let mut body = vec![0u8; size as usize];
        self.stream
            .read_exact(&mut body)
            .with_context(|| format!("reading an answer from {}", self.address))?;
        Ok(Bytes::from(body))
    }
}

/// One partition as Metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A topic's partitions, sorted by partition index.
#[derive(Clone, Debug)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: uuid::Uuid,
    pub internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

/// The cluster as the tools see it: brokers by node id and a connection to each in use.
pub struct Cluster {
    brokers: HashMap<i32, String>,
    connections: HashMap<i32, Connection>,
    /// The connection bootstrap opened, for requests any broker answers.
    bootstrap: Connection,
}

pub fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

impl Cluster {
    /// Connects to the first reachable of `servers` (comma-separated host:port) and learns
    /// the brokers from Metadata.
    pub fn connect(servers: &str) -> Result<Cluster> {
        let mut last_error = None;
        for server in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match Connection::connect(server) {
                Ok(bootstrap) => {
                    let mut cluster = Cluster {
                        brokers: HashMap::new(),
                        connections: HashMap::new(),
                        bootstrap,
                    };
                    cluster.metadata(Some(&[]))?;
                    return Ok(cluster);
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("--bootstrap-server names no server")))
    }

    /// The bootstrap connection, for requests any broker answers.
    pub fn any(&mut self) -> &mut Connection {
        &mut self.bootstrap
    }

    /// A connection to broker `node_id`, opened on first use.
    pub fn broker(&mut self, node_id: i32) -> Result<&mut Connection> {
        if !self.connections.contains_key(&node_id) {
            let address = self
                .brokers
                .get(&node_id)
                .ok_or_else(|| anyhow!("broker {node_id} is not in the cluster metadata"))?;
            let connection = Connection::connect(address)?;
            self.connections.insert(node_id, connection);
        }
        // Inserted just above when it was missing.
        Ok(self
            .connections
            .get_mut(&node_id)
            .expect("connection present"))
    }

    /// Node ids of every known broker, sorted.
    pub fn broker_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.brokers.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Drops the connection to `node_id` (after an I/O error) so the next use reconnects.
    pub fn forget(&mut self, node_id: i32) {
        self.connections.remove(&node_id);
    }

    /// Metadata for `topics` (`None`: all topics; `Some(&[])`: none, brokers only).
    pub fn metadata(&mut self, topics: Option<&[&str]>) -> Result<MetadataResponse> {
        let version = self.bootstrap.version::<MetadataRequest>()?;
        let mut request = MetadataRequest::default();
        // `None` asks for every topic (null topics, v1+; this client starts at v1).
        request.topics = topics.map(|names| {
            names
                .iter()
                .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
                .collect()
        });
        if version >= 4 {
            request.allow_auto_topic_creation = false;
        }
        let response = self.bootstrap.call_at(version, &request)?;
        for broker in &response.brokers {
            self.brokers.insert(
                broker.node_id.0,
                format!("{}:{}", broker.host.as_str(), broker.port),
            );
        }
        Ok(response)
    }

    /// One topic's layout, or the topic's error (UNKNOWN_TOPIC_OR_PARTITION when missing).
    pub fn topic(&mut self, name: &str) -> Result<TopicInfo> {
        let response = self.metadata(Some(&[name]))?;
        let topic = response
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("Metadata did not answer for topic {name}"))?;
        check(topic.error_code, None, || format!("topic {name}"))?;
        Ok(topic_info(name.to_string(), topic))
    }

    /// Every topic's layout, sorted by name.
    pub fn topics(&mut self) -> Result<Vec<TopicInfo>> {
        let response = self.metadata(None)?;
        let mut topics: Vec<TopicInfo> = response
            .topics
            .into_iter()
            .filter(|topic| topic.error_code == 0)
            .filter_map(|topic| {
                let name = topic.name.as_ref()?.0.to_string();
                Some(topic_info(name, topic))
            })
            .collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(topics)
    }

    /// The node coordinating `group`, after retrying while the coordinator loads.
    pub fn coordinator(&mut self, group: &str) -> Result<i32> {
        let mut attempts = 0;
        loop {
            match self.find_coordinator(group) {
                Err(error) if attempts < 20 && matches!(code_of(&error), Some(14) | Some(15)) => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(250));
                }
                other => return other,
            }
        }
    }

    fn find_coordinator(&mut self, group: &str) -> Result<i32> {
        let version = self.bootstrap.version::<FindCoordinatorRequest>()?;
        let mut request = FindCoordinatorRequest::default();
        if version >= 4 {
            request.coordinator_keys = vec![StrBytes::from_string(group.to_string())];
        } else {
            request.key = StrBytes::from_string(group.to_string());
        }
        let response = self.bootstrap.call_at(version, &request)?;
        let what = || format!("FindCoordinator for group {group}");
        let (node_id, host, port) = if version >= 4 {
            let coordinator = response
                .coordinators
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("FindCoordinator answered no coordinator"))?;
            check(
                coordinator.error_code,
                coordinator.error_message.as_ref(),
                what,
            )?;
            (coordinator.node_id.0, coordinator.host, coordinator.port)
        } else {
            check(response.error_code, response.error_message.as_ref(), what)?;
            (response.node_id.0, response.host, response.port)
        };
        let address = format!("{}:{port}", host.as_str());
        if self.brokers.get(&node_id) != Some(&address) {
            self.connections.remove(&node_id);
            self.brokers.insert(node_id, address);
        }
        Ok(node_id)
    }
}

fn topic_info(
    name: String,
    topic: kafka_protocol::messages::metadata_response::MetadataResponseTopic,
) -> TopicInfo {
    let mut partitions: Vec<PartitionInfo> = topic
        .partitions
        .iter()
        .map(|p| PartitionInfo {
            partition: p.partition_index,
            leader: p.leader_id.0,
            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    TopicInfo {
        name,
        topic_id: topic.topic_id,
        internal: topic.is_internal,
        partitions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(negotiate(ApiKey::Fetch, Some((0, 17))).unwrap(), 12);
        assert_eq!(negotiate(ApiKey::Fetch, Some((4, 8))).unwrap(), 8);
        assert_eq!(negotiate(ApiKey::JoinGroup, Some((0, 9))).unwrap(), 9);
        let error = negotiate(ApiKey::Produce, Some((13, 13))).unwrap_err();
        assert!(error.to_string().contains("no common Produce version"));
        let error = negotiate(ApiKey::JoinGroup, None).unwrap_err();
        assert!(error.to_string().contains("does not support JoinGroup"));
    }

    #[test]
    fn every_client_range_is_inside_the_codec() {
        use kafka_protocol::messages::*;
        fn inside<R: Request>() {
            let api = api_key::<R>();
            let (_, min, max) = CLIENT_APIS.iter().find(|(k, _, _)| *k == api).unwrap();
            assert!(
                *min >= R::VERSIONS.min && *max <= R::VERSIONS.max,
                "{api:?}"
            );
        }
        inside::<ProduceRequest>();
        inside::<FetchRequest>();
        inside::<ListOffsetsRequest>();
        inside::<MetadataRequest>();
        inside::<OffsetCommitRequest>();
        inside::<OffsetFetchRequest>();
        inside::<FindCoordinatorRequest>();
        inside::<JoinGroupRequest>();
        inside::<HeartbeatRequest>();
        inside::<LeaveGroupRequest>();
        inside::<SyncGroupRequest>();
        inside::<DescribeGroupsRequest>();
        inside::<ListGroupsRequest>();
        inside::<ApiVersionsRequest>();
        inside::<CreateTopicsRequest>();
        inside::<DeleteTopicsRequest>();
        inside::<DescribeConfigsRequest>();
        inside::<CreatePartitionsRequest>();
        inside::<DeleteGroupsRequest>();
        inside::<OffsetDeleteRequest>();
    }
}
