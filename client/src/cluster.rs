//! The cluster as a client sees it: bootstrap through Metadata, the brokers by node id, one
//! connection per broker opened on first use, and group coordinator lookup.
//!
//! Invariants:
//! - At most one connection per broker; a connection that failed mid-request is dropped
//!   ([`Cluster::forget`]) so the next use reconnects.
//! - Broker addresses come from Metadata (or FindCoordinator); a coordinator whose address
//!   changed gets a fresh connection.
//! - Topics and partitions are answered sorted (by name, by partition index).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{resolve, Connection};
use crate::error::{check, code_of, codes};

pub fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
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

impl TopicInfo {
    /// The leader of `partition`, -1 when it has none or does not exist.
    pub fn leader(&self, partition: i32) -> i32 {
        self.partitions
            .iter()
            .find(|p| p.partition == partition)
            .map_or(-1, |p| p.leader)
    }
}

/// One partition's leader, resolved.
#[derive(Clone, Debug)]
pub struct PartitionLeader {
    pub partition: i32,
    pub leader: SocketAddr,
}

pub struct Cluster {
    client_id: &'static str,
    brokers: HashMap<i32, String>,
    connections: HashMap<i32, Connection>,
    /// The connection bootstrap opened, for requests any broker answers.
    bootstrap: Connection,
    /// The controller the last Metadata answer named (-1: none known).
    controller_id: i32,
}

impl Cluster {
    /// Connects to the first reachable of `servers` (comma-separated host:port) and learns
    /// the brokers from Metadata.
    pub async fn connect(servers: &str, client_id: &'static str) -> Result<Cluster> {
        let mut last_error = None;
        for server in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match Connection::connect(server, client_id).await {
                Ok(bootstrap) => {
                    let mut cluster = Cluster {
                        client_id,
                        brokers: HashMap::new(),
                        connections: HashMap::new(),
                        bootstrap,
                        controller_id: -1,
                    };
                    cluster.metadata(Some(&[])).await?;
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
    pub async fn broker(&mut self, node_id: i32) -> Result<&mut Connection> {
        if !self.connections.contains_key(&node_id) {
            let address = self
                .brokers
                .get(&node_id)
                .ok_or_else(|| anyhow!("broker {node_id} is not in the cluster metadata"))?;
            let connection = Connection::connect(address, self.client_id).await?;
            self.connections.insert(node_id, connection);
        }
        self.connections
            .get_mut(&node_id)
            .ok_or_else(|| anyhow!("no connection to broker {node_id}"))
    }

    /// A connection to the controller, for the requests that change metadata (CreateTopics,
    /// DeleteTopics, CreatePartitions), as Kafka's admin client sends them: the broker that
    /// a fresh Metadata answer names, or the bootstrap broker if it names none.
    pub async fn controller(&mut self) -> Result<&mut Connection> {
        self.metadata(Some(&[])).await?;
        if self.controller_id < 0 || !self.brokers.contains_key(&self.controller_id) {
            return Ok(&mut self.bootstrap);
        }
        self.broker(self.controller_id).await
    }

    /// host:port of broker `node_id`, as Metadata named it.
    pub fn address(&self, node_id: i32) -> Option<&str> {
        self.brokers.get(&node_id).map(String::as_str)
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
    pub async fn metadata(&mut self, topics: Option<&[&str]>) -> Result<MetadataResponse> {
        let version = self.bootstrap.version::<MetadataRequest>()?;
        let request = metadata_request(version, topics);
        let response = self.bootstrap.call_at(version, &request).await?;
        self.controller_id = response.controller_id.0;
        for broker in &response.brokers {
            self.brokers.insert(
                broker.node_id.0,
                format!("{}:{}", broker.host.as_str(), broker.port),
            );
        }
        Ok(response)
    }

    /// Whether broker `node_id` itself knows every partition of `topic` and its leader. A
    /// broker learns a new topic from the metadata log a moment after the controller
    /// committed it, and answers UNKNOWN_TOPIC_OR_PARTITION until then.
    pub async fn broker_knows_topic(&mut self, node_id: i32, topic: &str) -> Result<bool> {
        let connection = self.broker(node_id).await?;
        let version = connection.version::<MetadataRequest>()?;
        let request = metadata_request(version, Some(&[topic]));
        let response = connection.call_at(version, &request).await?;
        Ok(response.topics.first().is_some_and(|t| {
            t.error_code == 0
                && !t.partitions.is_empty()
                && t.partitions
                    .iter()
                    .all(|p| p.error_code == 0 && p.leader_id.0 >= 0)
        }))
    }

    /// One topic's layout, or the topic's error (UNKNOWN_TOPIC_OR_PARTITION when missing).
    pub async fn topic(&mut self, name: &str) -> Result<TopicInfo> {
        let response = self.metadata(Some(&[name])).await?;
        let topic = response
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("Metadata did not answer for topic {name}"))?;
        check(topic.error_code, None, || format!("topic {name}"))?;
        Ok(topic_info(name.to_string(), topic))
    }

    /// Every topic's layout, sorted by name.
    pub async fn topics(&mut self) -> Result<Vec<TopicInfo>> {
        let response = self.metadata(None).await?;
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

    /// The resolved leader of each partition of `topic`; `None` when the topic does not
    /// exist or has no partitions yet.
    pub async fn leaders(&mut self, topic: &str) -> Result<Option<Vec<PartitionLeader>>> {
        let response = self.metadata(Some(&[topic])).await?;
        self.leaders_in(&response, topic)
    }

    /// [`Cluster::leaders`] as `response`, a Metadata answer for `topic`, gives them.
    pub fn leaders_in(
        &self,
        response: &MetadataResponse,
        topic: &str,
    ) -> Result<Option<Vec<PartitionLeader>>> {
        let Some(t) = response.topics.first() else {
            bail!("Metadata did not answer for topic {topic}");
        };
        if t.error_code == codes::UNKNOWN_TOPIC_OR_PARTITION {
            return Ok(None);
        }
        check(t.error_code, None, || format!("topic {topic}"))?;
        let mut leaders = Vec::new();
        for p in &t.partitions {
            check(p.error_code, None, || {
                format!("topic {topic} partition {}", p.partition_index)
            })?;
            let address = self.address(p.leader_id.0).ok_or_else(|| {
                anyhow!("leader {} of {topic} is not in the brokers", p.leader_id.0)
            })?;
            leaders.push(PartitionLeader {
                partition: p.partition_index,
                leader: resolve(address)?,
            });
        }
        leaders.sort_by_key(|l| l.partition);
        Ok((!leaders.is_empty()).then_some(leaders))
    }

    /// The node coordinating `group`, after retrying while the coordinator loads.
    pub async fn coordinator(&mut self, group: &str) -> Result<i32> {
        let mut attempts = 0;
        loop {
            match self.find_coordinator(group).await {
                Err(error)
                    if attempts < 20
                        && matches!(
                            code_of(&error),
                            Some(codes::COORDINATOR_LOAD_IN_PROGRESS)
                                | Some(codes::COORDINATOR_NOT_AVAILABLE)
                        ) =>
                {
                    attempts += 1;
                    glommio::timer::sleep(Duration::from_millis(250)).await;
                }
                other => return other,
            }
        }
    }

    async fn find_coordinator(&mut self, group: &str) -> Result<i32> {
        let version = self.bootstrap.version::<FindCoordinatorRequest>()?;
        let mut request = FindCoordinatorRequest::default();
        if version >= 4 {
            request.coordinator_keys = vec![StrBytes::from_string(group.to_string())];
        } else {
            request.key = StrBytes::from_string(group.to_string());
        }
        let response = self.bootstrap.call_at(version, &request).await?;
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

fn topic_info(name: String, topic: MetadataResponseTopic) -> TopicInfo {
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

/// A Metadata request for `topics` (`None`: all topics) that never creates one.
fn metadata_request(version: i16, topics: Option<&[&str]>) -> MetadataRequest {
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
    request
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::metadata_response::MetadataResponsePartition;
    use kafka_protocol::messages::{
        ApiKey, BrokerId, FindCoordinatorResponse, RequestKind, ResponseKind,
    };

    use super::*;
    use crate::fake_broker::{api_versions, broker_entry, FakeBroker};

    /// Two topics (listed out of order, partitions too), and a coordinator that loads for
    /// the first `loading` lookups.
    fn fake(loading: u32) -> FakeBroker {
        let lookups = Arc::new(AtomicU32::new(0));
        FakeBroker::start(Box::new(move |request, _, port| match request {
            RequestKind::ApiVersions(_) => api_versions(&[
                (ApiKey::ApiVersions, 0, 3),
                (ApiKey::Metadata, 0, 12),
                (ApiKey::FindCoordinator, 0, 4),
            ]),
            RequestKind::Metadata(request) => {
                let topic = |name: &str, error_code: i16| {
                    MetadataResponseTopic::default()
                        .with_name(Some(topic_name(name)))
                        .with_error_code(error_code)
                        .with_partitions(
                            [1, 0]
                                .into_iter()
                                .map(|p| {
                                    MetadataResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_leader_id(BrokerId(1))
                                })
                                .collect(),
                        )
                };
                let topics = match request.topics {
                    None => vec![topic("b", 0), topic("a", 0)],
                    Some(asked) => asked
                        .iter()
                        .map(|t| {
                            let name = t.name.as_ref().map_or("", |n| n.0.as_str());
                            let known = name == "a" || name == "b";
                            topic(name, if known { 0 } else { 3 })
                        })
                        .collect(),
                };
                ResponseKind::Metadata(
                    MetadataResponse::default()
                        .with_brokers(vec![broker_entry(port)])
                        .with_topics(topics),
                )
            }
            RequestKind::FindCoordinator(_) => {
                let error_code = if lookups.fetch_add(1, Ordering::SeqCst) < loading {
                    codes::COORDINATOR_LOAD_IN_PROGRESS
                } else {
                    0
                };
                ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(
                    vec![Coordinator::default()
                        .with_error_code(error_code)
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(port as i32)],
                ))
            }
            other => panic!("not scripted: {other:?}"),
        }))
    }

    #[test]
    fn bootstrap_learns_brokers_and_answers_sorted() {
        let fake = fake(0);
        crate::blocking::run(async {
            let servers = format!("127.0.0.1:1, {}", fake.address());
            let mut cluster = Cluster::connect(&servers, "test").await.unwrap();
            assert_eq!(cluster.broker_ids(), [1]);
            let names: Vec<String> = cluster
                .topics()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.name)
                .collect();
            assert_eq!(names, ["a", "b"]);
            let a = cluster.topic("a").await.unwrap();
            assert_eq!(a.partitions[0].partition, 0);
            assert_eq!(a.leader(1), 1);
            assert_eq!(a.leader(7), -1);
            let error = cluster.topic("missing").await.unwrap_err();
            assert_eq!(code_of(&error), Some(codes::UNKNOWN_TOPIC_OR_PARTITION));
            assert!(cluster.leaders("missing").await.unwrap().is_none());
            let leaders = cluster.leaders("b").await.unwrap().unwrap();
            assert_eq!(leaders.len(), 2);
            assert_eq!(leaders[1].leader.port(), fake.port);
            // One connection per broker: asking twice reuses it.
            cluster.broker(1).await.unwrap();
            cluster.broker(1).await.unwrap();
        })
        .unwrap();
        assert_eq!(
            fake.seen(ApiKey::ApiVersions).len(),
            2,
            "bootstrap and broker 1"
        );
    }

    #[test]
    fn coordinator_lookup_waits_while_it_loads() {
        let fake = fake(2);
        let node = crate::blocking::run(async {
            let mut cluster = Cluster::connect(&fake.address(), "test").await.unwrap();
            cluster.coordinator("g").await.unwrap()
        })
        .unwrap();
        assert_eq!(node, 1);
        assert_eq!(fake.seen(ApiKey::FindCoordinator), [4, 4, 4]);
    }

    #[test]
    fn the_blocking_cluster_drives_the_same_calls() {
        let fake = fake(0);
        let mut cluster = crate::blocking::Cluster::connect(&fake.address(), "test").unwrap();
        assert_eq!(cluster.topic("a").unwrap().partitions.len(), 2);
        assert_eq!(cluster.coordinator("g").unwrap(), 1);
        let mut connection = cluster.broker(1).unwrap();
        assert!(connection.supports::<MetadataRequest>());
        let version = connection.version::<MetadataRequest>().unwrap();
        let answer = connection
            .call_at(version, &MetadataRequest::default())
            .unwrap();
        assert_eq!(answer.brokers.len(), 1);
        drop(cluster);
    }
}
