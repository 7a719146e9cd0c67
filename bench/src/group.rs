//! A consumer-group member for `consume --group`: Kafka's classic protocol (eager
//! rebalancing, range assignor) on the bench's glommio client. Find the coordinator, join
//! (and, as leader, assign), sync, heartbeat, fetch and commit offsets, leave.
//!
//! Invariants:
//! - The member owns its partitions only between a successful SyncGroup and the next
//!   rebalance: [`Member::heartbeat`] answers `false` once the coordinator says the group is
//!   rebalancing, and the caller commits what it consumed before calling [`Member::join`]
//!   again.
//! - Subscriptions and assignments are Kafka's ConsumerProtocol bytes
//!   ([`net::consumer_protocol`]), so the bench can share a group with any Kafka consumer.
//! - Every request is built at the version negotiated with the coordinator; fields a version
//!   lacks are left at their defaults, which the codec then omits.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use net::consumer_protocol::{
    decode_assignment, encode_subscription, leader_assignments, PROTOCOL_TYPE, RANGE,
};

use crate::client::{error_name, resolve, topic_name, Connection};

/// Kafka's consumer defaults: `session.timeout.ms` 45 s, `max.poll.interval.ms` (the
/// rebalance timeout) 5 min, `heartbeat.interval.ms` 3 s.
const SESSION_TIMEOUT_MS: i32 = 45_000;
const REBALANCE_TIMEOUT_MS: i32 = 300_000;
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);
/// Attempts of one join (coordinator loading or moving, rebalances) before giving up.
const JOIN_ATTEMPTS_MAX: u32 = 30;

/// A failed group call: the Kafka error code when the coordinator answered one.
#[derive(Debug)]
struct GroupError {
    code: i16,
    what: String,
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, error_name(self.code))
    }
}

impl std::error::Error for GroupError {}

fn check(code: i16, what: impl FnOnce() -> String) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    Err(GroupError { code, what: what() }.into())
}

/// The Kafka error code a group call failed with, if the coordinator answered one.
pub fn code_of(error: &anyhow::Error) -> Option<i16> {
    error.downcast_ref::<GroupError>().map(|e| e.code)
}

/// The Kafka error a code names; None for 0 (no error).
fn error(code: i16) -> Option<E> {
    E::try_from_code(code)
}

/// Whether a failed call means the member lost its generation and must join again.
pub fn must_rejoin(error: &anyhow::Error) -> bool {
    matches!(
        code_of(error).and_then(self::error),
        Some(E::IllegalGeneration | E::UnknownMemberId | E::RebalanceInProgress)
    )
}

/// One member of `group`, subscribed to one topic.
pub struct Member {
    bootstrap: SocketAddr,
    group: String,
    topic: String,
    coordinator: Connection,
    member_id: String,
    generation_id: i32,
}

impl Member {
    /// Connects to the group's coordinator; [`Member::join`] then joins.
    pub async fn connect(bootstrap: SocketAddr, group: &str, topic: &str) -> Result<Member> {
        let coordinator = find_coordinator(bootstrap, group).await?;
        Ok(Member {
            bootstrap,
            group: group.to_string(),
            topic: topic.to_string(),
            coordinator,
            member_id: String::new(),
            generation_id: -1,
        })
    }

    fn group_id(&self) -> GroupId {
        GroupId(StrBytes::from_string(self.group.clone()))
    }

    fn member_id(&self) -> StrBytes {
        StrBytes::from_string(self.member_id.clone())
    }

    /// Joins (or rejoins after a rebalance) until the group settles; returns this member's
    /// partitions of the topic, sorted (none when the group has more members than partitions).
    pub async fn join(&mut self, partition_count: i32) -> Result<Vec<i32>> {
        for _ in 0..JOIN_ATTEMPTS_MAX {
            match self.join_and_sync(partition_count).await {
                Ok(partitions) => return Ok(partitions),
                Err(error) => match code_of(&error).and_then(self::error) {
                    Some(E::UnknownMemberId) => self.member_id.clear(),
                    Some(E::IllegalGeneration) | Some(E::RebalanceInProgress) => {}
                    Some(E::CoordinatorLoadInProgress) => {
                        glommio::timer::sleep(Duration::from_millis(200)).await
                    }
                    Some(E::CoordinatorNotAvailable) | Some(E::NotCoordinator) => {
                        glommio::timer::sleep(Duration::from_millis(200)).await;
                        self.coordinator = find_coordinator(self.bootstrap, &self.group).await?;
                    }
                    _ => return Err(error),
                },
            }
        }
        bail!(
            "could not join group {} after {JOIN_ATTEMPTS_MAX} attempts",
            self.group
        )
    }

    async fn join_and_sync(&mut self, partition_count: i32) -> Result<Vec<i32>> {
        let version = needs(self.coordinator.versions.join_group, "JoinGroup")?;
        let mut request = JoinGroupRequest::default()
            .with_group_id(self.group_id())
            .with_session_timeout_ms(SESSION_TIMEOUT_MS)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_member_id(self.member_id())
            .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str(RANGE))
                .with_metadata(encode_subscription(std::slice::from_ref(&self.topic))?)]);
        let mut joined = self.coordinator.call(version, &request).await?;
        if error(joined.error_code) == Some(E::MemberIdRequired) {
            // KIP-394: the coordinator names the member; join again under that id.
            self.member_id = joined.member_id.to_string();
            request.member_id = joined.member_id.clone();
            joined = self.coordinator.call(version, &request).await?;
        }
        let group = self.group.clone();
        check(joined.error_code, || format!("join group {group}"))?;
        self.member_id = joined.member_id.to_string();
        self.generation_id = joined.generation_id;
        if let Some(chosen) = joined.protocol_name.as_deref().filter(|p| *p != RANGE) {
            bail!("group {group} chose assignor {chosen}; this member only knows {RANGE}");
        }

        let assignments = if joined.leader == joined.member_id {
            // The bench consumes one topic; others the members subscribe to get nothing here.
            let topic = &self.topic;
            leader_assignments(&joined.members, |t| {
                if t == topic {
                    partition_count
                } else {
                    0
                }
            })?
        } else {
            Vec::new()
        };

        let version = needs(self.coordinator.versions.sync_group, "SyncGroup")?;
        let mut request = SyncGroupRequest::default()
            .with_group_id(self.group_id())
            .with_generation_id(self.generation_id)
            .with_member_id(self.member_id())
            .with_assignments(assignments);
        if version >= 5 {
            request.protocol_type = Some(StrBytes::from_static_str(PROTOCOL_TYPE));
            request.protocol_name = Some(StrBytes::from_static_str(RANGE));
        }
        let synced = self.coordinator.call(version, &request).await?;
        check(synced.error_code, || format!("sync group {group}"))?;
        let mut assignment = decode_assignment(synced.assignment)?;
        Ok(assignment.remove(&self.topic).unwrap_or_default())
    }

    /// Tells the coordinator this member is alive; `false` when it must rejoin.
    pub async fn heartbeat(&mut self) -> Result<bool> {
        let version = needs(self.coordinator.versions.heartbeat, "Heartbeat")?;
        let request = HeartbeatRequest::default()
            .with_group_id(self.group_id())
            .with_generation_id(self.generation_id)
            .with_member_id(self.member_id());
        let response = self.coordinator.call(version, &request).await?;
        match error(response.error_code) {
            None => Ok(true),
            Some(E::RebalanceInProgress | E::IllegalGeneration) => Ok(false),
            Some(E::UnknownMemberId) => {
                self.member_id.clear();
                Ok(false)
            }
            Some(E::CoordinatorNotAvailable | E::NotCoordinator) => {
                self.coordinator = find_coordinator(self.bootstrap, &self.group).await?;
                Ok(false)
            }
            Some(_) => {
                let group = &self.group;
                check(response.error_code, || {
                    format!("heartbeat to group {group}")
                })
                .map(|()| true)
            }
        }
    }

    /// The group's committed offsets of `partitions`; partitions without one are left out.
    pub async fn committed(&mut self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let version = needs(self.coordinator.versions.offset_fetch, "OffsetFetch")?;
        let request = OffsetFetchRequest::default()
            .with_group_id(self.group_id())
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(topic_name(&self.topic))
                .with_partition_indexes(partitions.to_vec())]));
        let response = self.coordinator.call(version, &request).await?;
        let group = &self.group;
        let what = || format!("committed offsets of group {group}");
        if version >= 2 {
            check(response.error_code, what)?;
        }
        let mut offsets = BTreeMap::new();
        for partition in response.topics.iter().flat_map(|t| &t.partitions) {
            check(partition.error_code, what)?;
            if partition.committed_offset >= 0 {
                offsets.insert(partition.partition_index, partition.committed_offset);
            }
        }
        Ok(offsets)
    }

    /// Commits `positions` (partition, next offset to read) for this generation.
    pub async fn commit(&mut self, positions: &[(i32, i64)]) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        let version = needs(self.coordinator.versions.offset_commit, "OffsetCommit")?;
        let request = OffsetCommitRequest::default()
            .with_group_id(self.group_id())
            .with_generation_id_or_member_epoch(self.generation_id)
            .with_member_id(self.member_id())
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name(&self.topic))
                .with_partitions(
                    positions
                        .iter()
                        .map(|&(partition, offset)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(partition)
                                .with_committed_offset(offset)
                        })
                        .collect(),
                )]);
        let response = self.coordinator.call(version, &request).await?;
        for partition in response.topics.iter().flat_map(|t| &t.partitions) {
            let group = &self.group;
            check(partition.error_code, || {
                format!(
                    "commit of group {group}, partition {}",
                    partition.partition_index
                )
            })?;
        }
        Ok(())
    }

    /// Leaves the group, so that its partitions move to the other members at once.
    pub async fn leave(&mut self) -> Result<()> {
        if self.member_id.is_empty() {
            return Ok(());
        }
        let version = needs(self.coordinator.versions.leave_group, "LeaveGroup")?;
        let mut request = LeaveGroupRequest::default().with_group_id(self.group_id());
        if version >= 3 {
            request.members = vec![MemberIdentity::default().with_member_id(self.member_id())];
        } else {
            request.member_id = self.member_id();
        }
        let response = self.coordinator.call(version, &request).await?;
        let group = &self.group;
        check(response.error_code, || format!("leave group {group}"))?;
        for member in &response.members {
            check(member.error_code, || format!("leave group {group}"))?;
        }
        self.member_id.clear();
        Ok(())
    }
}

fn needs(version: i16, api: &str) -> Result<i16> {
    if version < 0 {
        bail!("the coordinator offers no {api} version this bench speaks");
    }
    Ok(version)
}

/// Asks `bootstrap` for `group`'s coordinator (waiting while it loads) and connects to it.
async fn find_coordinator(bootstrap: SocketAddr, group: &str) -> Result<Connection> {
    let mut conn = Connection::connect(bootstrap).await?;
    let version = needs(conn.versions.find_coordinator, "FindCoordinator")?;
    let mut request = FindCoordinatorRequest::default();
    if version >= 4 {
        request.coordinator_keys = vec![StrBytes::from_string(group.to_string())];
    } else {
        request.key = StrBytes::from_string(group.to_string());
    }
    let what = || format!("FindCoordinator for group {group}");
    for _ in 0..JOIN_ATTEMPTS_MAX {
        let response = conn.call(version, &request).await?;
        let (code, host, port) = if version >= 4 {
            let c = response
                .coordinators
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("FindCoordinator answered no coordinator"))?;
            (c.error_code, c.host, c.port)
        } else {
            (response.error_code, response.host, response.port)
        };
        match error(code) {
            None => {
                let addr = resolve(&format!("{}:{port}", host.as_str())).await?;
                return if addr == bootstrap {
                    Ok(conn)
                } else {
                    Connection::connect(addr).await
                };
            }
            Some(E::CoordinatorLoadInProgress | E::CoordinatorNotAvailable) => {
                glommio::timer::sleep(Duration::from_millis(200)).await
            }
            Some(_) => check(code, what)?,
        }
    }
    bail!(
        "{}: no coordinator after {JOIN_ATTEMPTS_MAX} attempts",
        what()
    )
}
