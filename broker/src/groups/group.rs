//! One consumer group's membership state machine (Kafka's classic group protocol).
//!
//! ```text
//!            join                    all members rejoined            leader's SyncGroup
//!  Empty ───────────▶ PreparingRebalance ───────────────▶ CompletingRebalance ───────────▶ Stable
//!    ▲                  ▲  (or rebalance timeout: laggards removed)       │                   │
//!    └── last member ───┴────────────── join / leave / member expiry ─────┴───────────────────┘
//! ```
//!
//! Invariants:
//! - `generation` only grows; every completed join bumps it, so a member of an older
//!   generation is refused with ILLEGAL_GENERATION.
//! - A member id is issued by the coordinator: dynamic members get one through
//!   MEMBER_ID_REQUIRED (JoinGroup v4+) and must rejoin with it; static members
//!   (`group.instance.id`) get a fresh one on every join, and the previous holder of that
//!   instance id is fenced (FENCED_INSTANCE_ID).
//! - A static member that joins again with an empty member id (a restarted consumer) keeps
//!   its place: assignment, leadership and order of arrival move to the fresh member id.
//!   A Stable group does not rebalance for it unless its protocols change the group's
//!   selected protocol, and answers it only once the caller has persisted the fresh id
//!   ([`Joined::Persist`]); if that fails, the old member id is restored.
//! - A member waiting for its JoinGroup or SyncGroup answer does not expire; any other
//!   member expires `session_timeout` after its last join, sync or heartbeat.
//! - This type does no I/O and keeps no clock: callers pass `now`, and send the answers it
//!   hands back through the waiters it holds.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use crate::errors::{code, NONE};

mod member;
mod static_rejoin;
#[cfg(test)]
mod tests;

use member::new_member_id;
pub use member::Member;
pub use static_rejoin::StaticRejoin;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    /// The name Kafka's DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// The JoinGroup answer for one member.
#[derive(Clone, Debug, Default)]
pub struct JoinOutcome {
    pub error_code: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only: every member's id, instance id and subscription.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// JoinGroup v9+ (KIP-814): the leader of a Stable group that rejoined must not run
    /// its assignor; the group keeps the assignment it has.
    pub skip_assignment: bool,
}

impl JoinOutcome {
    pub fn error(error: ResponseError, member_id: &str) -> JoinOutcome {
        JoinOutcome {
            error_code: code(error),
            generation: -1,
            member_id: member_id.to_string(),
            ..JoinOutcome::default()
        }
    }
}

/// The SyncGroup answer: the member's assignment, or an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    pub error_code: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

pub type JoinWaiter = flume::Sender<JoinOutcome>;
pub type SyncWaiter = flume::Sender<SyncOutcome>;

/// What a member asks in JoinGroup.
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new dynamic member must first ask for its id.
    pub require_known_member_id: bool,
    /// JoinGroup v9+: the answer can carry `skip_assignment` (KIP-814).
    pub supports_skip_assignment: bool,
}

/// What [`Group::join`] did with a JoinGroup.
pub enum Joined {
    /// Answered at once: errors, MEMBER_ID_REQUIRED, a member with nothing new.
    Now(JoinOutcome),
    /// The answer arrives on the waiter when the rebalance completes.
    Waiting,
    /// A static member took over its instance id in a Stable group without a rebalance.
    /// The caller persists the group, so that the fresh member id survives a restart, then
    /// calls [`Group::complete_static_rejoin`], which answers on the waiter.
    Persist(StaticRejoin),
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out by MEMBER_ID_REQUIRED, valid until they expire.
    pending: HashMap<String, Instant>,
    /// group.instance.id → the member id that currently holds it.
    static_members: HashMap<String, String>,
    rebalance_deadline: Option<Instant>,
    /// `group.initial.rebalance.delay.ms`: the first rebalance of an empty group waits this
    /// long for more members.
    initial_delay_until: Option<Instant>,
    next_seq: u64,
}

/// Limits from the broker configuration.
#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    pub members_max: usize,
    pub initial_rebalance_delay: Duration,
}

impl Group {
    pub fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            static_members: HashMap::new(),
            rebalance_deadline: None,
            initial_delay_until: None,
            next_seq: 0,
        }
    }

    /// Rebuilds a group from its persisted metadata: members are restored with a fresh
    /// session, so live consumers carry on heartbeating across a broker restart.
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        id: &str,
        protocol_type: String,
        generation: i32,
        protocol: Option<String>,
        leader: Option<String>,
        members: Vec<Member>,
    ) -> Group {
        let mut group = Group::new(id);
        group.protocol_type = Some(protocol_type);
        group.generation = generation;
        group.protocol = protocol;
        group.leader = leader;
        for member in members {
            if let Some(instance) = &member.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), member.id.clone());
            }
            group.next_seq = group.next_seq.max(member.joined_seq + 1);
            group.members.insert(member.id.clone(), member);
        }
        group.state = if group.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        if group.members.is_empty() {
            group.protocol = None;
            group.leader = None;
        }
        group
    }

    #[allow(clippy::too_many_arguments)]
    pub fn restored_member(
        id: String,
        instance_id: Option<String>,
        client_id: String,
        client_host: String,
        session_timeout: Duration,
        rebalance_timeout: Duration,
        protocol: Option<&str>,
        subscription: Bytes,
        assignment: Bytes,
        joined_seq: u64,
        now: Instant,
    ) -> Member {
        Member {
            id,
            instance_id,
            client_id,
            client_host,
            session_timeout,
            rebalance_timeout,
            protocols: protocol
                .map(|p| vec![(p.to_string(), subscription)])
                .unwrap_or_default(),
            assignment,
            joined_seq,
            expires_at: now + session_timeout,
            join_waiter: None,
            sync_waiter: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// No member, no member id handed out, no static member: nothing that a later request
    /// could refer to.
    pub fn is_unused(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty() && self.static_members.is_empty()
    }

    /// Handles JoinGroup: answered now, after the rebalance on `waiter`, or (a static
    /// member's rejoin) on `waiter` once the caller has persisted the group.
    pub fn join(
        &mut self,
        request: JoinRequest,
        waiter: JoinWaiter,
        limits: GroupLimits,
        now: Instant,
    ) -> Joined {
        if let Some(expected) = &self.protocol_type {
            let common = self.members.is_empty()
                || request.protocols.iter().any(|(name, _)| {
                    self.members
                        .values()
                        .all(|m| m.protocols.iter().any(|(n, _)| n == name))
                });
            if (expected != &request.protocol_type && !self.members.is_empty()) || !common {
                return Joined::Now(JoinOutcome::error(
                    ResponseError::InconsistentGroupProtocol,
                    &request.member_id,
                ));
            }
        }
        if request.protocols.is_empty() || request.protocol_type.is_empty() {
            return Joined::Now(JoinOutcome::error(
                ResponseError::InconsistentGroupProtocol,
                &request.member_id,
            ));
        }
        let member_id = if request.member_id.is_empty() {
            let holder = request
                .instance_id
                .as_ref()
                .and_then(|instance| self.static_members.get(instance))
                .cloned();
            if let Some(member_id_old) = holder {
                return self.rejoin_static(member_id_old, request, waiter, limits, now);
            }
            if self.members.len() + self.pending.len() >= limits.members_max {
                return Joined::Now(JoinOutcome::error(ResponseError::GroupMaxSizeReached, ""));
            }
            let fresh = new_member_id(request.instance_id.as_deref().unwrap_or(&request.client_id));
            if let Some(instance) = &request.instance_id {
                self.static_members.insert(instance.clone(), fresh.clone());
            } else if request.require_known_member_id {
                self.pending
                    .insert(fresh.clone(), now + request.session_timeout);
                return Joined::Now(JoinOutcome {
                    member_id: fresh,
                    ..JoinOutcome::error(ResponseError::MemberIdRequired, "")
                });
            }
            fresh
        } else {
            if let Some(instance) = &request.instance_id {
                match self.static_members.get(instance) {
                    Some(holder) if holder != &request.member_id => {
                        return Joined::Now(JoinOutcome::error(
                            ResponseError::FencedInstanceId,
                            &request.member_id,
                        ));
                    }
                    Some(_) => {}
                    None => {
                        return Joined::Now(JoinOutcome::error(
                            ResponseError::UnknownMemberId,
                            &request.member_id,
                        ))
                    }
                }
            }
            let known = self.members.contains_key(&request.member_id);
            if !known && self.pending.remove(&request.member_id).is_none() {
                return Joined::Now(JoinOutcome::error(
                    ResponseError::UnknownMemberId,
                    &request.member_id,
                ));
            }
            request.member_id.clone()
        };

        let protocols_changed = self
            .members
            .get(&member_id)
            .is_none_or(|member| member.protocols != request.protocols);
        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        let seq = self.next_seq;
        let member = self
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                id: member_id.clone(),
                instance_id: request.instance_id.clone(),
                client_id: String::new(),
                client_host: String::new(),
                session_timeout: request.session_timeout,
                rebalance_timeout: request.rebalance_timeout,
                protocols: Vec::new(),
                assignment: Bytes::new(),
                joined_seq: seq,
                expires_at: now,
                join_waiter: None,
                sync_waiter: None,
            });
        if member.joined_seq == seq {
            self.next_seq += 1;
        }
        self.protocol_type = Some(request.protocol_type.clone());
        member.update(request, now);

        let settled = matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        );
        if settled && !protocols_changed && !is_leader {
            // Nothing changed for this member: answer with the current generation.
            return Joined::Now(JoinOutcome {
                error_code: NONE,
                generation: self.generation,
                protocol_type: self.protocol_type.clone(),
                protocol: self.protocol.clone(),
                leader: self.leader.clone().unwrap_or_default(),
                member_id,
                members: Vec::new(),
                skip_assignment: false,
            });
        }
        member.join_waiter = Some(waiter);
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(limits, now);
        }
        self.try_complete_join(now);
        Joined::Waiting
    }

    fn prepare_rebalance(&mut self, limits: GroupLimits, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            self.fail_syncs(ResponseError::RebalanceInProgress);
        }
        let rebalance_timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.rebalance_deadline = Some(now + rebalance_timeout);
        self.initial_delay_until = (self.state == GroupState::Empty
            && !limits.initial_rebalance_delay.is_zero())
        .then(|| now + limits.initial_rebalance_delay.min(rebalance_timeout));
        self.state = GroupState::PreparingRebalance;
    }

    /// Completes the join phase when every member has rejoined (after the initial delay of
    /// a new group), or at the rebalance deadline, removing members that did not rejoin.
    /// Returns true if the group's persisted shape changed (it became empty).
    pub fn try_complete_join(&mut self, now: Instant) -> bool {
        if self.state != GroupState::PreparingRebalance {
            return false;
        }
        let all_rejoined = self.members.values().all(|m| m.join_waiter.is_some());
        let delay_over = self.initial_delay_until.is_none_or(|until| now >= until);
        let deadline_passed = self
            .rebalance_deadline
            .is_some_and(|deadline| now >= deadline);
        if !((all_rejoined && delay_over) || deadline_passed) {
            return false;
        }
        let laggards: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in laggards {
            self.remove_member(&id);
        }
        self.rebalance_deadline = None;
        self.initial_delay_until = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            return true;
        }
        self.protocol = self.choose_protocol();
        let leader_alive = self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l));
        if !leader_alive {
            self.leader = self
                .members
                .values()
                .min_by_key(|m| m.joined_seq)
                .map(|m| m.id.clone());
        }
        self.state = GroupState::CompletingRebalance;
        let leader = self.leader.clone().unwrap_or_default();
        let roster = self.roster();
        for member in self.members.values_mut() {
            member.assignment = Bytes::new();
            member.expires_at = now + member.session_timeout;
            if let Some(waiter) = member.join_waiter.take() {
                let _ = waiter.send(JoinOutcome {
                    error_code: NONE,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol: self.protocol.clone(),
                    leader: leader.clone(),
                    member_id: member.id.clone(),
                    members: if member.id == leader {
                        roster.clone()
                    } else {
                        Vec::new()
                    },
                    skip_assignment: false,
                });
            }
        }
        false
    }

    /// The leader's view: every member's id, instance id and metadata for the selected
    /// protocol.
    fn roster(&self) -> Vec<(String, Option<String>, Bytes)> {
        let protocol = self.protocol.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| {
                (
                    m.id.clone(),
                    m.instance_id.clone(),
                    m.metadata_for(protocol),
                )
            })
            .collect()
    }

    /// Kafka's vote: each member votes for its most preferred protocol among those every
    /// member supports; the most votes wins, ties broken by the leader's preference order.
    fn choose_protocol(&self) -> Option<String> {
        let supported_by_all = |name: &str| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        };
        let mut votes: Vec<(String, usize)> = Vec::new();
        for member in self.members.values() {
            let Some((choice, _)) = member.protocols.iter().find(|(n, _)| supported_by_all(n))
            else {
                continue;
            };
            match votes.iter_mut().find(|(name, _)| name == choice) {
                Some((_, count)) => *count += 1,
                None => votes.push((choice.clone(), 1)),
            }
        }
        let most = votes.iter().map(|(_, count)| *count).max()?;
        votes
            .into_iter()
            .find(|(_, count)| *count == most)
            .map(|(name, _)| name)
    }

    /// Handles SyncGroup. `Err` is an immediate answer. `Ok(true)` means the leader's
    /// assignments were taken and the group is Stable: the caller persists the group and
    /// then calls [`Group::complete_sync`].
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        waiter: SyncWaiter,
        now: Instant,
    ) -> Result<bool, SyncOutcome> {
        let refuse = |error: ResponseError| SyncOutcome {
            error_code: code(error),
            ..Default::default()
        };
        self.check_member(member_id, instance_id).map_err(refuse)?;
        if generation != self.generation {
            return Err(refuse(ResponseError::IllegalGeneration));
        }
        match self.state {
            GroupState::Empty => Err(refuse(ResponseError::UnknownMemberId)),
            GroupState::PreparingRebalance => Err(refuse(ResponseError::RebalanceInProgress)),
            GroupState::Stable => Err(self.sync_answer(member_id)),
            GroupState::CompletingRebalance => {
                let is_leader = self.leader.as_deref() == Some(member_id);
                let member = self.members.get_mut(member_id).expect("checked above");
                member.sync_waiter = Some(waiter);
                member.expires_at = now + member.session_timeout;
                if !is_leader {
                    return Ok(false);
                }
                for (id, assignment) in assignments {
                    if let Some(member) = self.members.get_mut(&id) {
                        member.assignment = assignment;
                    }
                }
                self.state = GroupState::Stable;
                Ok(true)
            }
        }
    }

    /// Sends every waiting member its assignment (after the group was persisted), or
    /// `error` to all of them if persisting failed.
    pub fn complete_sync(&mut self, error: Option<ResponseError>) {
        if let Some(error) = error {
            self.fail_syncs(error);
            return;
        }
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let answer = self.sync_answer(&id);
            if let Some(waiter) = self.members.get_mut(&id).and_then(|m| m.sync_waiter.take()) {
                let _ = waiter.send(answer);
            }
        }
    }

    fn sync_answer(&self, member_id: &str) -> SyncOutcome {
        SyncOutcome {
            error_code: NONE,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    fn fail_syncs(&mut self, error: ResponseError) {
        for member in self.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(SyncOutcome {
                    error_code: code(error),
                    ..SyncOutcome::default()
                });
            }
        }
    }

    /// Handles Heartbeat; returns Kafka's error code.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> i16 {
        if let Err(error) = self.check_member(member_id, instance_id) {
            return code(error);
        }
        let member = self.members.get_mut(member_id).expect("checked above");
        member.expires_at = now + member.session_timeout;
        match self.state {
            GroupState::Empty => code(ResponseError::UnknownMemberId),
            GroupState::PreparingRebalance => code(ResponseError::RebalanceInProgress),
            _ if generation != self.generation => code(ResponseError::IllegalGeneration),
            _ => NONE,
        }
    }

    /// Handles one member of a LeaveGroup; returns Kafka's error code.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        limits: GroupLimits,
        now: Instant,
    ) -> i16 {
        let member_id = match (member_id, instance_id) {
            // LeaveGroup v3+ may name a static member by instance id alone.
            ("", Some(instance)) => match self.static_members.get(instance) {
                Some(holder) => holder.clone(),
                None => return code(ResponseError::UnknownMemberId),
            },
            (id, _) => id.to_string(),
        };
        if let Err(error) = self.check_member(&member_id, instance_id) {
            return code(error);
        }
        self.remove_member(&member_id);
        self.after_departure(limits, now);
        NONE
    }

    /// Removes members whose session expired and pending ids nobody claimed; advances a
    /// rebalance past its deadline. Returns true if the group became empty.
    pub fn expire(&mut self, limits: GroupLimits, now: Instant) -> bool {
        self.pending.retain(|_, expires_at| *expires_at > now);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.is_waiting() && m.expires_at <= now)
            .map(|m| m.id.clone())
            .collect();
        for id in &expired {
            tracing::info!(group = %self.id, member = %id, "member session expired");
            self.remove_member(id);
        }
        let was_empty = self.state == GroupState::Empty;
        if !expired.is_empty() {
            self.after_departure(limits, now);
        }
        let became_empty = self.try_complete_join(now);
        became_empty || (!was_empty && self.state == GroupState::Empty)
    }

    fn after_departure(&mut self, limits: GroupLimits, now: Instant) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(limits, now)
            }
            GroupState::PreparingRebalance | GroupState::Empty => {}
        }
        self.try_complete_join(now);
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(member) = self.members.remove(member_id) {
            if let Some(instance) = &member.instance_id {
                if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(instance);
                }
            }
            if let Some(waiter) = member.join_waiter {
                let _ = waiter.send(JoinOutcome::error(
                    ResponseError::UnknownMemberId,
                    member_id,
                ));
            }
            if let Some(waiter) = member.sync_waiter {
                let _ = waiter.send(SyncOutcome {
                    error_code: code(ResponseError::UnknownMemberId),
                    ..SyncOutcome::default()
                });
            }
        }
    }

    /// UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID, as Kafka checks them.
    pub fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            if let Some(holder) = self.static_members.get(instance) {
                if holder != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(())
    }
}
