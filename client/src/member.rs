//! A consumer-group member: Kafka's classic protocol (eager rebalancing, range assignor).
//! Find the coordinator, join (and, as leader, assign), sync, heartbeat, fetch and commit
//! offsets, leave. `ringlog consume --group` and `ringlog-bench consume --group` both run it.
//!
//! Invariants:
//! - The member owns partitions only between a successful SyncGroup and the next
//!   rebalance; [`Member::heartbeat`] reports a rebalance so the caller commits what it
//!   consumed (eager protocol) before [`Member::rejoin`].
//! - Subscriptions and assignments are Kafka's ConsumerProtocol bytes, and the leader
//!   assigns with Java's range assignor ([`crate::consumer_protocol`]), so the member can
//!   share a group with any Kafka consumer.
//! - Every request is built at the version negotiated with the coordinator; fields a version
//!   lacks are left at their defaults, which the codec then omits.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::Cluster;
use crate::consumer_protocol::{
    decode_assignment, encode_subscription, leader_assignments, subscriptions, PROTOCOL_TYPE,
    RANGE as ASSIGNOR,
};
use crate::error::{check, code_of, codes};
use crate::offsets::{self, Committer, TopicPartition};

/// Attempts of one join (coordinator moves, loading, rebalances) before giving up.
const JOIN_ATTEMPTS_MAX: u32 = 30;
/// How long to wait before asking again while the coordinator loads or moves.
const COORDINATOR_RETRY: Duration = Duration::from_millis(200);

#[derive(Clone, Debug)]
pub struct MemberConfig {
    pub group: String,
    pub topics: Vec<String>,
    pub session_timeout_ms: i32,
    /// How long the coordinator waits for every member to rejoin (`max.poll.interval.ms`).
    pub rebalance_timeout_ms: i32,
    pub heartbeat_interval: Duration,
}

impl MemberConfig {
    pub fn new(group: &str, topics: Vec<String>) -> MemberConfig {
        MemberConfig {
            group: group.to_string(),
            topics,
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            heartbeat_interval: Duration::from_secs(3),
        }
    }
}

/// Whether the member still owns its assignment.
#[derive(Debug, PartialEq, Eq)]
pub enum Heartbeat {
    Fine,
    Rebalance,
}

/// Whether a failed call means the member lost its generation and must join again.
pub fn must_rejoin(error: &anyhow::Error) -> bool {
    matches!(
        code_of(error),
        Some(codes::ILLEGAL_GENERATION | codes::UNKNOWN_MEMBER_ID | codes::REBALANCE_IN_PROGRESS)
    )
}

/// A joined member and the partitions it was assigned.
pub struct Member {
    pub config: MemberConfig,
    pub coordinator: i32,
    pub member_id: String,
    pub generation_id: i32,
    /// Topic → partitions, sorted; empty when the group has more members than partitions.
    pub assignment: BTreeMap<String, Vec<i32>>,
    last_heartbeat: Instant,
}

impl Member {
    /// Finds the coordinator and joins the group until this member has an assignment.
    pub async fn join(cluster: &mut Cluster, config: MemberConfig) -> Result<Member> {
        let coordinator = cluster.coordinator(&config.group).await?;
        let mut member = Member {
            config,
            coordinator,
            member_id: String::new(),
            generation_id: -1,
            assignment: BTreeMap::new(),
            last_heartbeat: Instant::now(),
        };
        member.rejoin(cluster).await?;
        Ok(member)
    }

    /// Joins again after a rebalance, a fenced generation or a coordinator move.
    pub async fn rejoin(&mut self, cluster: &mut Cluster) -> Result<()> {
        self.assignment.clear();
        for _ in 0..JOIN_ATTEMPTS_MAX {
            match self.join_and_sync(cluster).await {
                Ok(()) => {
                    self.last_heartbeat = Instant::now();
                    return Ok(());
                }
                Err(error) => match code_of(&error) {
                    Some(codes::UNKNOWN_MEMBER_ID) => self.member_id.clear(),
                    Some(codes::ILLEGAL_GENERATION) | Some(codes::REBALANCE_IN_PROGRESS) => {}
                    Some(codes::COORDINATOR_LOAD_IN_PROGRESS) => {
                        glommio::timer::sleep(COORDINATOR_RETRY).await
                    }
                    Some(codes::COORDINATOR_NOT_AVAILABLE) | Some(codes::NOT_COORDINATOR) => {
                        glommio::timer::sleep(COORDINATOR_RETRY).await;
                        self.coordinator = cluster.coordinator(&self.config.group).await?;
                    }
                    _ => return Err(error),
                },
            }
        }
        bail!(
            "could not join group {} after {JOIN_ATTEMPTS_MAX} attempts",
            self.config.group
        )
    }

    fn group_id(&self) -> GroupId {
        GroupId(StrBytes::from_string(self.config.group.clone()))
    }

    async fn join_and_sync(&mut self, cluster: &mut Cluster) -> Result<()> {
        let subscription = encode_subscription(&self.config.topics)?;
        let rebalance_timeout = Duration::from_millis(self.config.rebalance_timeout_ms as u64);
        let timeout = rebalance_timeout + Duration::from_secs(5);
        let connection = cluster.broker(self.coordinator).await?;
        let version = connection.version::<JoinGroupRequest>()?;
        let mut request = JoinGroupRequest::default()
            .with_group_id(self.group_id())
            .with_session_timeout_ms(self.config.session_timeout_ms)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str(ASSIGNOR))
                .with_metadata(subscription)]);
        if version >= 1 {
            request.rebalance_timeout_ms = self.config.rebalance_timeout_ms;
        }
        let mut joined = connection
            .call_with_timeout(version, &request, timeout)
            .await?;
        if joined.error_code == codes::MEMBER_ID_REQUIRED {
            // KIP-394: the coordinator names the member; join again under that id.
            self.member_id = joined.member_id.to_string();
            request.member_id = joined.member_id.clone();
            joined = connection
                .call_with_timeout(version, &request, timeout)
                .await?;
        }
        let group = self.config.group.clone();
        check(joined.error_code, None, || format!("join group {group}"))?;
        self.member_id = joined.member_id.to_string();
        self.generation_id = joined.generation_id;
        let protocol = joined.protocol_name.as_ref().map(|p| p.to_string());
        if protocol.as_deref().is_some_and(|p| p != ASSIGNOR) {
            bail!("group {group} chose assignor {protocol:?}; this member only knows {ASSIGNOR}");
        }

        let assignments = if joined.leader == joined.member_id {
            let subscribed = subscriptions(&joined.members)?;
            let mut counts = BTreeMap::new();
            for topic in subscribed.values().flatten() {
                if !counts.contains_key(topic) {
                    // A topic that does not exist (yet) has nothing to assign.
                    let count = match cluster.topic(topic).await {
                        Ok(info) => info.partitions.len() as i32,
                        Err(_) => 0,
                    };
                    counts.insert(topic.clone(), count);
                }
            }
            leader_assignments(&subscribed, |topic| counts.get(topic).copied().unwrap_or(0))?
        } else {
            Vec::new()
        };

        let connection = cluster.broker(self.coordinator).await?;
        let version = connection.version::<SyncGroupRequest>()?;
        let mut request = SyncGroupRequest::default()
            .with_group_id(self.group_id())
            .with_generation_id(self.generation_id)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_assignments(assignments);
        if version >= 5 {
            request.protocol_type = Some(StrBytes::from_static_str(PROTOCOL_TYPE));
            request.protocol_name = Some(StrBytes::from_static_str(ASSIGNOR));
        }
        let synced = connection
            .call_with_timeout(version, &request, timeout)
            .await?;
        check(synced.error_code, None, || format!("sync group {group}"))?;
        self.assignment = decode_assignment(synced.assignment)?;
        Ok(())
    }

    /// This member's partitions of `topic`, sorted.
    pub fn partitions(&self, topic: &str) -> Vec<i32> {
        self.assignment.get(topic).cloned().unwrap_or_default()
    }

    pub fn heartbeat_due(&self) -> bool {
        self.last_heartbeat.elapsed() >= self.config.heartbeat_interval
    }

    /// Tells the coordinator this member is alive; `Rebalance` when it must rejoin.
    pub async fn heartbeat(&mut self, cluster: &mut Cluster) -> Result<Heartbeat> {
        let connection = cluster.broker(self.coordinator).await?;
        let version = connection.version::<HeartbeatRequest>()?;
        let request = HeartbeatRequest::default()
            .with_group_id(self.group_id())
            .with_generation_id(self.generation_id)
            .with_member_id(StrBytes::from_string(self.member_id.clone()));
        let response = connection.call_at(version, &request).await?;
        self.last_heartbeat = Instant::now();
        match response.error_code {
            0 => Ok(Heartbeat::Fine),
            codes::REBALANCE_IN_PROGRESS | codes::ILLEGAL_GENERATION => Ok(Heartbeat::Rebalance),
            codes::UNKNOWN_MEMBER_ID => {
                self.member_id.clear();
                Ok(Heartbeat::Rebalance)
            }
            codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR => {
                self.coordinator = cluster.coordinator(&self.config.group).await?;
                Ok(Heartbeat::Rebalance)
            }
            code => check(code, None, || {
                format!("heartbeat to group {}", self.config.group)
            })
            .map(|()| Heartbeat::Fine),
        }
    }

    /// The group's committed offsets for this member's assignment.
    pub async fn committed(
        &mut self,
        cluster: &mut Cluster,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let topics: Vec<(String, Vec<i32>)> = self
            .assignment
            .iter()
            .filter(|(_, partitions)| !partitions.is_empty())
            .map(|(topic, partitions)| (topic.clone(), partitions.clone()))
            .collect();
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        let connection = cluster.broker(self.coordinator).await?;
        offsets::committed(connection, &self.config.group, Some(&topics)).await
    }

    /// Commits `positions` (the next offset to read per partition) for this generation.
    pub async fn commit(
        &mut self,
        cluster: &mut Cluster,
        positions: &BTreeMap<TopicPartition, i64>,
    ) -> Result<()> {
        let committer = Committer {
            generation_id: self.generation_id,
            member_id: &self.member_id,
        };
        let connection = cluster.broker(self.coordinator).await?;
        offsets::commit(connection, &self.config.group, &committer, positions).await
    }

    /// Leaves the group so its partitions move to the others at once.
    pub async fn leave(&mut self, cluster: &mut Cluster) -> Result<()> {
        if self.member_id.is_empty() {
            return Ok(());
        }
        let connection = cluster.broker(self.coordinator).await?;
        let version = connection.version::<LeaveGroupRequest>()?;
        let mut request = LeaveGroupRequest::default().with_group_id(self.group_id());
        let member_id = StrBytes::from_string(self.member_id.clone());
        if version >= 3 {
            request.members = vec![MemberIdentity::default().with_member_id(member_id)];
        } else {
            request.member_id = member_id;
        }
        let response = connection.call_at(version, &request).await?;
        let group = &self.config.group;
        check(response.error_code, None, || format!("leave group {group}"))?;
        for member in &response.members {
            check(member.error_code, None, || format!("leave group {group}"))?;
        }
        self.member_id.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    mod scripted {
        //! The member against a scripted coordinator, at the newest and the oldest versions
        //! this client speaks, so every version branch of the group requests is exercised.

        use std::sync::{Arc, Mutex};

        use bytes::Bytes;
        use kafka_protocol::messages::find_coordinator_response::Coordinator;
        use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
        use kafka_protocol::messages::leave_group_response::MemberResponse;
        use kafka_protocol::messages::metadata_response::{
            MetadataResponsePartition, MetadataResponseTopic,
        };
        use kafka_protocol::messages::offset_commit_response::{
            OffsetCommitResponsePartition, OffsetCommitResponseTopic,
        };
        use kafka_protocol::messages::offset_fetch_response::{
            OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
            OffsetFetchResponseTopic, OffsetFetchResponseTopics,
        };
        use kafka_protocol::messages::*;
        use kafka_protocol::protocol::StrBytes;

        use super::super::*;
        use crate::consumer_protocol::decode_subscription;
        use crate::fake_broker::{api_versions, broker_entry, FakeBroker};

        /// One OffsetCommit: generation, member id, (topic, partition, offset)s.
        type Commit = (i32, String, Vec<(String, i32, i64)>);

        /// What the coordinator was asked, for the test to check.
        #[derive(Default)]
        struct Seen {
            joins: Vec<(String, i32, Vec<String>)>,
            assignments: BTreeMap<String, BTreeMap<String, Vec<i32>>>,
            commits: Vec<Commit>,
            left: Vec<String>,
        }

        fn s(text: &str) -> StrBytes {
            StrBytes::from_string(text.to_string())
        }

        fn answer(
            seen: &Mutex<Seen>,
            request: RequestKind,
            version: i16,
            port: u16,
            ranges: &[(ApiKey, i16, i16)],
        ) -> ResponseKind {
            let mut seen = seen.lock().unwrap(); // a poisoned lock means a failed test already
            match request {
                RequestKind::ApiVersions(_) => api_versions(ranges),
                RequestKind::Metadata(request) => {
                    let topics = request.topics.unwrap_or_default().into_iter().map(|t| {
                        MetadataResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                (0..3)
                                    .map(|p| {
                                        MetadataResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_leader_id(BrokerId(1))
                                            .with_replica_nodes(vec![BrokerId(1)])
                                            .with_isr_nodes(vec![BrokerId(1)])
                                    })
                                    .collect(),
                            )
                    });
                    ResponseKind::Metadata(
                        MetadataResponse::default()
                            .with_brokers(vec![broker_entry(port)])
                            .with_topics(topics.collect()),
                    )
                }
                RequestKind::FindCoordinator(request) => {
                    let mut response = FindCoordinatorResponse::default();
                    if version >= 4 {
                        response.coordinators = vec![Coordinator::default()
                            .with_key(request.coordinator_keys[0].clone())
                            .with_node_id(BrokerId(1))
                            .with_host(s("127.0.0.1"))
                            .with_port(port as i32)];
                    } else {
                        response.node_id = BrokerId(1);
                        response.host = s("127.0.0.1");
                        response.port = port as i32;
                    }
                    ResponseKind::FindCoordinator(response)
                }
                RequestKind::JoinGroup(request) => {
                    let topics =
                        decode_subscription(request.protocols[0].metadata.clone()).unwrap();
                    seen.joins.push((
                        request.member_id.to_string(),
                        request.rebalance_timeout_ms,
                        topics,
                    ));
                    let mut response = JoinGroupResponse::default().with_member_id(s("m-1"));
                    if version >= 4 && request.member_id.is_empty() {
                        return ResponseKind::JoinGroup(response.with_error_code(79));
                    }
                    response.generation_id = 1;
                    response.protocol_name = Some(s(&request.protocols[0].name));
                    if version >= 7 {
                        response.protocol_type = Some(s(PROTOCOL_TYPE));
                    }
                    response.leader = s("m-1");
                    response.members = vec![
                        JoinGroupResponseMember::default()
                            .with_member_id(s("m-1"))
                            .with_metadata(request.protocols[0].metadata.clone()),
                        JoinGroupResponseMember::default()
                            .with_member_id(s("m-2"))
                            .with_metadata(encode_subscription(&["orders".to_string()]).unwrap()),
                    ];
                    ResponseKind::JoinGroup(response)
                }
                RequestKind::SyncGroup(request) => {
                    let mut mine = Bytes::new();
                    for assignment in request.assignments {
                        if assignment.member_id.as_str() == request.member_id.as_str() {
                            mine = assignment.assignment.clone();
                        }
                        let decoded = decode_assignment(assignment.assignment).unwrap();
                        seen.assignments
                            .insert(assignment.member_id.to_string(), decoded);
                    }
                    ResponseKind::SyncGroup(SyncGroupResponse::default().with_assignment(mine))
                }
                RequestKind::Heartbeat(_) => {
                    ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(27))
                }
                RequestKind::OffsetFetch(request) => {
                    let offset = |p: i32| if p == 0 { 5 } else { -1 };
                    if version >= 8 {
                        let topics = request.groups[0].topics.clone().unwrap_or_default();
                        let topics = topics.into_iter().map(|t| {
                            OffsetFetchResponseTopics::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|p| {
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(*p)
                                                .with_committed_offset(offset(*p))
                                        })
                                        .collect(),
                                )
                        });
                        ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(vec![
                            OffsetFetchResponseGroup::default()
                                .with_group_id(request.groups[0].group_id.clone())
                                .with_topics(topics.collect()),
                        ]))
                    } else {
                        let topics = request.topics.unwrap_or_default().into_iter().map(|t| {
                            OffsetFetchResponseTopic::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|p| {
                                            OffsetFetchResponsePartition::default()
                                                .with_partition_index(*p)
                                                .with_committed_offset(offset(*p))
                                        })
                                        .collect(),
                                )
                        });
                        ResponseKind::OffsetFetch(
                            OffsetFetchResponse::default().with_topics(topics.collect()),
                        )
                    }
                }
                RequestKind::OffsetCommit(request) => {
                    let mut offsets = Vec::new();
                    let mut topics = Vec::new();
                    for topic in request.topics {
                        let mut partitions = Vec::new();
                        for p in topic.partitions {
                            offsets.push((
                                topic.name.0.to_string(),
                                p.partition_index,
                                p.committed_offset,
                            ));
                            partitions.push(
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index),
                            );
                        }
                        topics.push(
                            OffsetCommitResponseTopic::default()
                                .with_name(topic.name)
                                .with_partitions(partitions),
                        );
                    }
                    seen.commits.push((
                        request.generation_id_or_member_epoch,
                        request.member_id.to_string(),
                        offsets,
                    ));
                    ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics))
                }
                RequestKind::LeaveGroup(request) => {
                    let mut response = LeaveGroupResponse::default();
                    if version >= 3 {
                        for member in request.members {
                            seen.left.push(member.member_id.to_string());
                            response
                                .members
                                .push(MemberResponse::default().with_member_id(member.member_id));
                        }
                    } else {
                        seen.left.push(request.member_id.to_string());
                    }
                    ResponseKind::LeaveGroup(response)
                }
                other => panic!("the scripted coordinator does not answer {other:?}"),
            }
        }

        fn scenario(ranges: &'static [(ApiKey, i16, i16)]) -> (FakeBroker, Arc<Mutex<Seen>>) {
            let seen = Arc::new(Mutex::new(Seen::default()));
            let seen_by_fake = seen.clone();
            let fake = FakeBroker::start(Box::new(move |request, version, port| {
                answer(&seen_by_fake, request, version, port, ranges)
            }));
            crate::blocking::run(async {
                let mut cluster = Cluster::connect(&fake.address(), "test").await.unwrap();
                let config = MemberConfig::new("g1", vec!["orders".to_string()]);
                let mut member = Member::join(&mut cluster, config).await.unwrap();
                assert_eq!(member.member_id, "m-1");
                assert_eq!(member.generation_id, 1);
                let mine: BTreeMap<String, Vec<i32>> = [("orders".to_string(), vec![0, 1])].into();
                assert_eq!(member.assignment, mine);

                let committed = member.committed(&mut cluster).await.unwrap();
                assert_eq!(committed, [(("orders".to_string(), 0), 5)].into());
                let positions = [
                    (("orders".to_string(), 0), 7),
                    (("orders".to_string(), 1), 3),
                ]
                .into();
                member.commit(&mut cluster, &positions).await.unwrap();
                assert_eq!(
                    member.heartbeat(&mut cluster).await.unwrap(),
                    Heartbeat::Rebalance
                );
                member.leave(&mut cluster).await.unwrap();
                assert!(member.member_id.is_empty());
            })
            .unwrap();
            let mine: BTreeMap<String, Vec<i32>> = [("orders".to_string(), vec![0, 1])].into();
            {
                let seen = seen.lock().unwrap();
                assert_eq!(seen.assignments["m-1"], mine);
                assert_eq!(
                    seen.assignments["m-2"],
                    [("orders".to_string(), vec![2])].into()
                );
                assert_eq!(
                    seen.commits,
                    [(
                        1,
                        "m-1".to_string(),
                        vec![("orders".to_string(), 0, 7), ("orders".to_string(), 1, 3)]
                    )]
                );
                assert_eq!(seen.left, ["m-1"]);
                for (_, _, topics) in &seen.joins {
                    assert_eq!(topics, &["orders"]);
                }
            }
            (fake, seen)
        }

        #[test]
        fn newest_versions() {
            const RANGES: &[(ApiKey, i16, i16)] = &[
                (ApiKey::ApiVersions, 0, 4),
                (ApiKey::Metadata, 0, 13),
                (ApiKey::FindCoordinator, 0, 6),
                (ApiKey::JoinGroup, 0, 9),
                (ApiKey::SyncGroup, 0, 5),
                (ApiKey::Heartbeat, 0, 4),
                (ApiKey::LeaveGroup, 0, 5),
                (ApiKey::OffsetCommit, 0, 9),
                (ApiKey::OffsetFetch, 0, 9),
            ];
            let (fake, seen) = scenario(RANGES);
            assert_eq!(
                fake.seen(ApiKey::JoinGroup),
                [9, 9],
                "MEMBER_ID_REQUIRED, then again"
            );
            assert_eq!(fake.seen(ApiKey::FindCoordinator), [4]);
            assert_eq!(fake.seen(ApiKey::OffsetCommit), [8]);
            assert_eq!(fake.seen(ApiKey::OffsetFetch), [8]);
            let seen = seen.lock().unwrap();
            let member_ids: Vec<&str> = seen.joins.iter().map(|j| j.0.as_str()).collect();
            assert_eq!(member_ids, ["", "m-1"]);
            assert!(seen.joins.iter().all(|j| j.1 == 30_000));
        }

        #[test]
        fn oldest_versions() {
            const RANGES: &[(ApiKey, i16, i16)] = &[
                (ApiKey::ApiVersions, 0, 2),
                (ApiKey::Metadata, 1, 1),
                (ApiKey::FindCoordinator, 0, 0),
                (ApiKey::JoinGroup, 0, 0),
                (ApiKey::SyncGroup, 0, 0),
                (ApiKey::Heartbeat, 0, 0),
                (ApiKey::LeaveGroup, 0, 0),
                (ApiKey::OffsetCommit, 2, 2),
                (ApiKey::OffsetFetch, 1, 1),
            ];
            let (fake, seen) = scenario(RANGES);
            assert_eq!(
                fake.seen(ApiKey::JoinGroup),
                [0],
                "no member id round trip before v4"
            );
            assert_eq!(fake.seen(ApiKey::LeaveGroup), [0]);
            let seen = seen.lock().unwrap();
            // v0 has no rebalance timeout: the codec's default stays.
            assert_eq!(seen.joins[0].1, -1);
        }
    }
}
