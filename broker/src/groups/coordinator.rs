//! The group coordinator of one shard: the groups whose `__consumer_offsets` partition the
//! shard owns, their committed offsets, and the records that make both durable.
//!
//! Invariants:
//! - A group is served only after its offsets partition was replayed ("loaded"); until
//!   then its requests get COORDINATOR_LOAD_IN_PROGRESS.
//! - A commit is answered after its records are appended to the offsets partition and
//!   fdatasync'ed, and only then is it visible to OffsetFetch; group metadata is written
//!   when a rebalance completes (with the assignments), when a group becomes empty, and
//!   when a static member rejoins a Stable group under a new member id (before it is
//!   answered, so that after a broker restart the new id still holds the instance id).
//! - Borrows of the maps never span an `.await`: state is read or changed, the borrow is
//!   dropped, then any I/O is awaited.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::group::{Group, GroupLimits, GroupState, JoinOutcome, JoinRequest, Joined, SyncOutcome};
use super::records::{
    decode_key, decode_value, encode_key, encode_value, GroupValue, MemberValue, OffsetValue,
    RecordKey, RecordValue,
};
use super::{partition_for, OFFSETS_TOPIC};
use crate::config::GroupConfig;
use crate::errors::{code, NONE};
use crate::partition::Partition;
use crate::request::now_ms;
use crate::shard_state::Shard;
use shard::Turns;

mod load;
mod offsets;

/// Bytes read per step when replaying an offsets partition.
const LOAD_READ_BYTES: usize = 1 << 20;
/// How often member sessions, rebalance deadlines and offset retention are checked.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// A committed offset as OffsetFetch reports it.
pub type Committed = OffsetValue;
/// One group's committed offsets by (topic, partition).
type GroupOffsets = BTreeMap<(String, i32), Committed>;
/// OffsetFetch's answer: per topic, per partition, the commit if any.
pub type CommittedByTopic = Vec<(String, Vec<(i32, Option<Committed>)>)>;

/// Where a JoinGroup stands: answered now, or waiting for its answer (the end of the
/// rebalance, or of a static member's rejoin once the group is persisted).
pub enum JoinStep {
    Answer(JoinOutcome),
    Wait(flume::Receiver<JoinOutcome>),
}

/// One partition's commit request.
pub struct CommitPart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// A group as DescribeGroups reports it.
pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment)
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

pub struct GroupCoordinator {
    config: GroupConfig,
    groups: RefCell<HashMap<String, Group>>,
    offsets: RefCell<HashMap<String, GroupOffsets>>,
    /// Offsets partitions of this shard whose records were replayed.
    loaded: RefCell<HashSet<i32>>,
    /// Per offsets partition: commits become visible in the order they were queued.
    commit_turns: RefCell<HashMap<i32, Rc<Turns>>>,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> GroupCoordinator {
        GroupCoordinator {
            config,
            groups: RefCell::new(HashMap::new()),
            offsets: RefCell::new(HashMap::new()),
            loaded: RefCell::new(HashSet::new()),
            commit_turns: RefCell::new(HashMap::new()),
        }
    }

    fn limits(&self) -> GroupLimits {
        GroupLimits {
            members_max: self.config.members_max,
            initial_rebalance_delay: self.config.initial_rebalance_delay,
        }
    }

    /// The offsets partition of `group_id` and its owner shard, if the topic exists.
    pub fn locate(shard: &Shard, group_id: &str) -> Option<(i32, usize)> {
        let image = shard.image();
        let topic = image.topic(OFFSETS_TOPIC)?;
        let partition = partition_for(group_id, topic.partition_count());
        Some((partition, shard.owner(OFFSETS_TOPIC, partition)))
    }

    /// COORDINATOR_LOAD_IN_PROGRESS until the group's partition is replayed here, and
    /// NOT_COORDINATOR if this node does not lead it (or this shard does not own it, a
    /// programmer error in routing).
    fn check_serving(&self, shard: &Shard, group_id: &str) -> Result<Rc<Partition>, i16> {
        let Some((partition, owner)) = Self::locate(shard, group_id) else {
            return Err(code(ResponseError::CoordinatorNotAvailable));
        };
        if owner != shard.id() {
            return Err(code(ResponseError::NotCoordinator));
        }
        let loaded = self.loaded.borrow().contains(&partition);
        let partition = shard
            .partition(OFFSETS_TOPIC, partition)
            .ok_or(code(ResponseError::NotCoordinator))?;
        // The coordinator is the leader of the group's partition; a follower holds it only.
        if !partition.leadership().is_local {
            return Err(code(ResponseError::NotCoordinator));
        }
        if !loaded {
            return Err(code(ResponseError::CoordinatorLoadInProgress));
        }
        Ok(partition)
    }

    /// Appends `records` to the group's offsets partition and waits until they are durable.
    async fn write(
        partition: &Rc<Partition>,
        records: Vec<(RecordKey, Option<RecordValue>)>,
    ) -> Result<(), i16> {
        Self::queue_write(partition, records).await
    }

    /// Queues the append of `records` on the offsets partition now (appends are applied in
    /// the order this is called) and returns the future that waits until they are durable.
    fn queue_write(
        partition: &Rc<Partition>,
        records: Vec<(RecordKey, Option<RecordValue>)>,
    ) -> impl Future<Output = Result<(), i16>> + 'static {
        let queued = if records.is_empty() {
            None
        } else {
            let timestamp = now_ms();
            Some(encode_batch(records, timestamp).map(|batch| {
                let append = partition.queue_append(batch, timestamp);
                (partition.clone(), append)
            }))
        };
        async move {
            let Some(queued) = queued else {
                return Ok(());
            };
            let (partition, append) = queued?;
            let outcome = append.await;
            if outcome.error_code != NONE {
                return Err(outcome.error_code);
            }
            // As Kafka's coordinator writes: acks=all, on the leader's disk and every ISR
            // member's.
            match partition.sync().await {
                NONE => match partition.wait_replicated(outcome.end_offset).await {
                    NONE => Ok(()),
                    error_code => Err(error_code),
                },
                error_code => Err(error_code),
            }
        }
    }

    /// JoinGroup: an immediate answer, or a receiver for the answer when the rebalance
    /// completes. A static member's rejoin of a Stable group is persisted first.
    pub async fn join(&self, shard: &Shard, group_id: &str, request: JoinRequest) -> JoinStep {
        let partition = match self.check_serving(shard, group_id) {
            Ok(partition) => partition,
            Err(error_code) => {
                return JoinStep::Answer(JoinOutcome {
                    error_code,
                    generation: -1,
                    ..JoinOutcome::default()
                })
            }
        };
        if group_id.is_empty() {
            return JoinStep::Answer(JoinOutcome::error(
                ResponseError::InvalidGroupId,
                &request.member_id,
            ));
        }
        let timeout = request.session_timeout;
        if timeout < self.config.session_timeout_min || timeout > self.config.session_timeout_max {
            let refusal =
                JoinOutcome::error(ResponseError::InvalidSessionTimeout, &request.member_id);
            return JoinStep::Answer(refusal);
        }
        let (waiter, answer) = flume::bounded(1);
        let (rejoin, (key, value)) = {
            let mut groups = self.groups.borrow_mut();
            let new = !groups.contains_key(group_id);
            let group = groups
                .entry(group_id.to_string())
                .or_insert_with(|| Group::new(group_id));
            match group.join(request, waiter, self.limits(), Instant::now()) {
                Joined::Now(immediate) => {
                    // A refused join of a group nobody had used leaves nothing behind: a
                    // client naming new group ids could otherwise grow the map forever.
                    if new && group.is_unused() {
                        groups.remove(group_id);
                    }
                    return JoinStep::Answer(immediate);
                }
                Joined::Waiting => return JoinStep::Wait(answer),
                Joined::Persist(rejoin) => (rejoin, snapshot(group)),
            }
        };
        let written = Self::write(&partition, vec![(key, Some(value))]).await;
        if let Some(group) = self.groups.borrow_mut().get_mut(group_id) {
            group.complete_static_rejoin(rejoin, write_refusal(group_id, written));
        }
        JoinStep::Wait(answer)
    }

    /// SyncGroup: an immediate answer, or a receiver for the leader's assignment. When the
    /// leader's assignment completes the rebalance, the group is persisted first.
    pub async fn sync(
        &self,
        shard: &Shard,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<flume::Receiver<SyncOutcome>, SyncOutcome> {
        let refuse = |error_code| SyncOutcome {
            error_code,
            ..SyncOutcome::default()
        };
        let partition = self.check_serving(shard, group_id).map_err(refuse)?;
        let (waiter, answer) = flume::bounded(1);
        let snapshot = {
            let mut groups = self.groups.borrow_mut();
            let Some(group) = groups.get_mut(group_id) else {
                return Err(refuse(code(ResponseError::UnknownMemberId)));
            };
            let completed = group.sync(
                member_id,
                instance_id,
                generation,
                assignments,
                waiter,
                Instant::now(),
            )?;
            completed.then(|| snapshot(group))
        };
        if let Some((key, value)) = snapshot {
            let written = Self::write(&partition, vec![(key, Some(value))]).await;
            let mut groups = self.groups.borrow_mut();
            if let Some(group) = groups.get_mut(group_id) {
                group.complete_sync(write_refusal(group_id, written));
            }
        }
        Ok(answer)
    }

    pub fn heartbeat(
        &self,
        shard: &Shard,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> i16 {
        if let Err(error_code) = self.check_serving(shard, group_id) {
            return error_code;
        }
        let mut groups = self.groups.borrow_mut();
        match groups.get_mut(group_id) {
            Some(group) => group.heartbeat(member_id, instance_id, generation, Instant::now()),
            None => code(ResponseError::UnknownMemberId),
        }
    }

    /// LeaveGroup for several members; one error code per member, plus a group-level one.
    pub async fn leave(
        &self,
        shard: &Shard,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> (i16, Vec<i16>) {
        let partition = match self.check_serving(shard, group_id) {
            Ok(partition) => partition,
            Err(error_code) => return (error_code, vec![error_code; members.len()]),
        };
        let (codes, emptied) = {
            let mut groups = self.groups.borrow_mut();
            let Some(group) = groups.get_mut(group_id) else {
                let unknown = code(ResponseError::UnknownMemberId);
                return (NONE, vec![unknown; members.len()]);
            };
            let was_empty = group.is_empty();
            let codes: Vec<i16> = members
                .iter()
                .map(|(id, instance)| {
                    group.leave(id, instance.as_deref(), self.limits(), Instant::now())
                })
                .collect();
            let emptied = (!was_empty && group.state == GroupState::Empty).then(|| snapshot(group));
            (codes, emptied)
        };
        if let Some((key, value)) = emptied {
            let _ = Self::write(&partition, vec![(key, Some(value))]).await;
        }
        (NONE, codes)
    }

    /// Every group of this shard with its state and protocol type.
    pub fn list(&self) -> Vec<(String, &'static str, String)> {
        let groups = self.groups.borrow();
        let mut listed: Vec<_> = groups
            .values()
            .map(|g| {
                (
                    g.id.clone(),
                    g.state.name(),
                    g.protocol_type.clone().unwrap_or_default(),
                )
            })
            .collect();
        // Groups that only have committed offsets (assign()-based consumers) exist too.
        for group_id in self.offsets.borrow().keys() {
            if !groups.contains_key(group_id) {
                listed.push((group_id.clone(), GroupState::Empty.name(), String::new()));
            }
        }
        listed
    }

    pub fn describe(&self, shard: &Shard, group_id: &str) -> Result<GroupDescription, i16> {
        self.check_serving(shard, group_id)?;
        let groups = self.groups.borrow();
        let Some(group) = groups.get(group_id) else {
            let state = if self.offsets.borrow().contains_key(group_id) {
                "Empty"
            } else {
                "Dead"
            };
            return Ok(GroupDescription {
                state,
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            });
        };
        let protocol = group.protocol.clone().unwrap_or_default();
        let members = group
            .members
            .values()
            .map(|m| {
                let metadata = m
                    .protocols
                    .iter()
                    .find(|(name, _)| *name == protocol)
                    .map(|(_, metadata)| metadata.clone())
                    .unwrap_or_default();
                (
                    m.id.clone(),
                    m.instance_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    metadata,
                    m.assignment.clone(),
                )
            })
            .collect();
        Ok(GroupDescription {
            state: group.state.name(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol,
            members,
        })
    }

    /// DeleteGroups for one group: only an empty group, and its offsets go with it.
    pub async fn delete(&self, shard: &Shard, group_id: &str) -> i16 {
        let partition = match self.check_serving(shard, group_id) {
            Ok(partition) => partition,
            Err(error_code) => return error_code,
        };
        let tombstones = {
            let groups = self.groups.borrow();
            let has_offsets = self.offsets.borrow().contains_key(group_id);
            match groups.get(group_id) {
                None if !has_offsets => return code(ResponseError::GroupIdNotFound),
                Some(group) if !group.is_empty() => return code(ResponseError::NonEmptyGroup),
                _ => {}
            }
            let mut tombstones: Vec<(RecordKey, Option<RecordValue>)> = vec![(
                RecordKey::Group {
                    group: group_id.to_string(),
                },
                None,
            )];
            if let Some(committed) = self.offsets.borrow().get(group_id) {
                tombstones.extend(committed.keys().map(|(topic, partition)| {
                    let key = RecordKey::Offset {
                        group: group_id.to_string(),
                        topic: topic.clone(),
                        partition: *partition,
                    };
                    (key, None)
                }));
            }
            tombstones
        };
        if let Err(error_code) = Self::write(&partition, tombstones).await {
            return error_code;
        }
        self.groups.borrow_mut().remove(group_id);
        self.offsets.borrow_mut().remove(group_id);
        NONE
    }

    /// Runs on every shard for its whole life: expires members, advances rebalances past
    /// their deadlines, and drops offsets of empty groups older than the retention.
    pub async fn sweep_forever(shard: Rc<Shard>) {
        let mut last_retention_check = Instant::now();
        let mut last_cleanup = Instant::now();
        loop {
            glommio::timer::sleep(SWEEP_INTERVAL).await;
            if shard.is_stopped() {
                return;
            }
            let coordinator = &shard.groups;
            let now = Instant::now();
            let emptied: Vec<(String, RecordKey, RecordValue)> = {
                let mut groups = coordinator.groups.borrow_mut();
                groups
                    .values_mut()
                    .filter_map(|group| {
                        group.expire(coordinator.limits(), now).then(|| {
                            let (key, value) = snapshot(group);
                            (group.id.clone(), key, value)
                        })
                    })
                    .collect()
            };
            for (group_id, key, value) in emptied {
                if let Ok(partition) = coordinator.check_serving(&shard, &group_id) {
                    let _ = Self::write(&partition, vec![(key, Some(value))]).await;
                }
            }
            if now.duration_since(last_retention_check) >= Duration::from_secs(1) {
                last_retention_check = now;
                coordinator.expire_offsets(&shard).await;
            }
            if now.duration_since(last_cleanup)
                >= coordinator.config.offsets_retention_check_interval
            {
                last_cleanup = now;
                coordinator.drop_unused_groups(&shard).await;
            }
        }
    }
}

/// One uncompressed v2 batch of offsets records, stamped `timestamp`.
fn encode_batch(
    records: Vec<(RecordKey, Option<RecordValue>)>,
    timestamp: i64,
) -> Result<Bytes, i16> {
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(index, (key, value))| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: index as i64,
            sequence: -1,
            timestamp,
            key: Some(encode_key(&key)),
            value: value.as_ref().map(encode_value),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut batch, &records, &options)
        .map_err(|_| code(ResponseError::UnknownServerError))?;
    Ok(batch.freeze())
}

/// What members waiting on a group write are told if it failed: COORDINATOR_NOT_AVAILABLE,
/// which clients answer by finding the coordinator again and retrying, where a storage
/// error code is not an answer JoinGroup or SyncGroup can give.
fn write_refusal(group_id: &str, written: Result<(), i16>) -> Option<ResponseError> {
    let error_code = written.err()?;
    tracing::warn!(group = %group_id, error_code, "group metadata not persisted");
    Some(ResponseError::CoordinatorNotAvailable)
}

/// The group metadata record for `group` as it stands.
fn snapshot(group: &Group) -> (RecordKey, RecordValue) {
    let protocol = group.protocol.clone().unwrap_or_default();
    let members = group
        .members
        .values()
        .map(|m| MemberValue {
            member_id: m.id.clone(),
            group_instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
            session_timeout_ms: m.session_timeout.as_millis() as i32,
            subscription: m
                .protocols
                .iter()
                .find(|(name, _)| *name == protocol)
                .map(|(_, metadata)| metadata.clone())
                .unwrap_or_default(),
            assignment: m.assignment.clone(),
        })
        .collect();
    let value = GroupValue {
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        generation: group.generation,
        protocol: group.protocol.clone(),
        leader: group.leader.clone(),
        state_timestamp_ms: now_ms(),
        members,
    };
    (
        RecordKey::Group {
            group: group.id.clone(),
        },
        RecordValue::Group(value),
    )
}
