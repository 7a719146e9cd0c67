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

/// A static member's takeover of its instance id, kept until the group is persisted so
/// that it can be undone if the write fails.
pub struct StaticRejoin {
    instance_id: String,
    member_id_old: String,
    member_id_new: String,
    /// What the member had stated in its previous join, restored if the write fails.
    settings_old: JoinSettings,
    /// The leader before the takeover, which JoinGroup v0–v8 are told.
    leader_old: Option<String>,
    supports_skip_assignment: bool,
}

/// What a member states about itself in every JoinGroup.
struct JoinSettings {
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
}

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// Supported protocols in the member's order of preference, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// Order of arrival; the longest-standing member becomes leader.
    pub joined_seq: u64,
    pub expires_at: Instant,
    join_waiter: Option<JoinWaiter>,
    sync_waiter: Option<SyncWaiter>,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    fn is_waiting(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }

    /// Takes what a JoinGroup states about the member; its session restarts `now`.
    fn update(&mut self, request: JoinRequest, now: Instant) {
        self.apply(JoinSettings {
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout: request.session_timeout,
            rebalance_timeout: request.rebalance_timeout,
            protocols: request.protocols,
        });
        self.expires_at = now + self.session_timeout;
    }

    fn settings(&self) -> JoinSettings {
        JoinSettings {
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            session_timeout: self.session_timeout,
            rebalance_timeout: self.rebalance_timeout,
            protocols: self.protocols.clone(),
        }
    }

    fn apply(&mut self, settings: JoinSettings) {
        self.client_id = settings.client_id;
        self.client_host = settings.client_host;
        self.session_timeout = settings.session_timeout;
        self.rebalance_timeout = settings.rebalance_timeout;
        self.protocols = settings.protocols;
    }
}

/// `<instance id or client id>-<uuid>`, as Kafka names members.
fn new_member_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
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

    /// A known static member joins with an empty member id: a restarted consumer. It takes
    /// over its place (assignment, leadership, order of arrival) under a fresh member id,
    /// and the old one is fenced. As Kafka's `updateStaticMemberAndRebalance`, by state:
    /// - Stable: no rebalance, unless the member's protocols change the protocol the group
    ///   would select; the caller persists the fresh id before the member is answered.
    /// - CompletingRebalance: a rebalance, because the leader is assigning partitions to the
    ///   old member id, which nobody would receive.
    /// - PreparingRebalance: the member waits for the rebalance with everyone else.
    fn rejoin_static(
        &mut self,
        member_id_old: String,
        request: JoinRequest,
        waiter: JoinWaiter,
        limits: GroupLimits,
        now: Instant,
    ) -> Joined {
        // An instance id is held only by a member, so the group has members.
        assert_ne!(self.state, GroupState::Empty);
        let instance_id = request.instance_id.clone();
        let instance_id = instance_id.expect("the caller found the holder by its instance id");
        let member_id_new = new_member_id(&instance_id);
        let leader_old = self.leader.clone();
        let supports_skip_assignment = request.supports_skip_assignment;
        self.replace_static_member(&instance_id, &member_id_old, &member_id_new);
        let member = self
            .members
            .get_mut(&member_id_new)
            .expect("replaced above");
        let settings_old = member.settings();
        member.update(request, now);
        member.join_waiter = Some(waiter);
        tracing::info!(
            group = %self.id,
            instance = %instance_id,
            member_old = %member_id_old,
            member_new = %member_id_new,
            state = self.state.name(),
            "static member rejoined"
        );
        match self.state {
            GroupState::Stable if self.choose_protocol() == self.protocol => {
                Joined::Persist(StaticRejoin {
                    instance_id,
                    member_id_old,
                    member_id_new,
                    settings_old,
                    leader_old,
                    supports_skip_assignment,
                })
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(limits, now);
                self.try_complete_join(now);
                Joined::Waiting
            }
            GroupState::PreparingRebalance => {
                self.try_complete_join(now);
                Joined::Waiting
            }
            GroupState::Empty => unreachable!("asserted above"),
        }
    }

    /// Answers a static rejoin of a Stable group once the caller tried to persist it. If
    /// that failed (`refusal`), the old member id is restored, so that memory agrees with
    /// the log, and the member is refused. If the group changed meanwhile (a rebalance
    /// began, a newer takeover or a LeaveGroup named the instance id), that change has
    /// answered the member or will, and nothing is undone.
    pub fn complete_static_rejoin(&mut self, rejoin: StaticRejoin, refusal: Option<ResponseError>) {
        let holder = self.static_members.get(&rejoin.instance_id);
        if self.state != GroupState::Stable || holder != Some(&rejoin.member_id_new) {
            return;
        }
        let member = self
            .members
            .get_mut(&rejoin.member_id_new)
            .expect("an instance id is held by a member");
        let Some(waiter) = member.join_waiter.take() else {
            return;
        };
        let answer = match refusal {
            None => self.static_rejoin_answer(&rejoin),
            Some(error) => {
                member.apply(rejoin.settings_old);
                self.replace_static_member(
                    &rejoin.instance_id,
                    &rejoin.member_id_new,
                    &rejoin.member_id_old,
                );
                JoinOutcome {
                    error_code: code(error),
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol: self.protocol.clone(),
                    leader: rejoin.leader_old.unwrap_or_default(),
                    ..JoinOutcome::default()
                }
            }
        };
        let _ = waiter.send(answer);
    }

    fn static_rejoin_answer(&self, rejoin: &StaticRejoin) -> JoinOutcome {
        let is_leader = self.leader.as_deref() == Some(rejoin.member_id_new.as_str());
        let current = JoinOutcome {
            error_code: NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: rejoin.member_id_new.clone(),
            members: Vec::new(),
            skip_assignment: false,
        };
        if rejoin.supports_skip_assignment {
            // v9+: a returning leader learns that it leads, so it keeps watching the
            // subscribed topics, but runs no assignor.
            return JoinOutcome {
                members: if is_leader { self.roster() } else { Vec::new() },
                skip_assignment: is_leader,
                ..current
            };
        }
        // Before v9, a member told that it leads runs its assignor, whose assignment a
        // Stable group would ignore. The leader id from before the takeover is never the
        // member's new id, so it syncs as a follower and gets its assignment back.
        JoinOutcome {
            leader: rejoin.leader_old.clone().unwrap_or_default(),
            ..current
        }
    }

    /// Renames the member `member_id_old` to `member_id_new` under `instance_id`; answers
    /// what the old id was waiting for with FENCED_INSTANCE_ID.
    fn replace_static_member(
        &mut self,
        instance_id: &str,
        member_id_old: &str,
        member_id_new: &str,
    ) {
        if let Some(mut member) = self.members.remove(member_id_old) {
            if let Some(waiter) = member.join_waiter.take() {
                let _ = waiter.send(JoinOutcome::error(
                    ResponseError::FencedInstanceId,
                    member_id_old,
                ));
            }
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(SyncOutcome {
                    error_code: code(ResponseError::FencedInstanceId),
                    ..SyncOutcome::default()
                });
            }
            member.id = member_id_new.to_string();
            self.members.insert(member_id_new.to_string(), member);
        }
        if self.leader.as_deref() == Some(member_id_old) {
            self.leader = Some(member_id_new.to_string());
        }
        self.static_members
            .insert(instance_id.to_string(), member_id_new.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: GroupLimits = GroupLimits {
        members_max: 10,
        initial_rebalance_delay: Duration::ZERO,
    };

    fn request(member_id: &str, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            member_id: member_id.to_string(),
            instance_id: None,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from_static(b"m")))
                .collect(),
            require_known_member_id: true,
            supports_skip_assignment: false,
        }
    }

    fn static_request(member_id: &str, instance: &str, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            instance_id: Some(instance.to_string()),
            ..request(member_id, protocols)
        }
    }

    fn answered(joined: Joined) -> JoinOutcome {
        match joined {
            Joined::Now(outcome) => outcome,
            Joined::Waiting | Joined::Persist(_) => panic!("expected an immediate answer"),
        }
    }

    const P0: Bytes = Bytes::from_static(b"p0");
    const P1: Bytes = Bytes::from_static(b"p1");

    /// Joins a new dynamic member the v4+ way: ask for an id, then join with it.
    fn join_new(group: &mut Group, now: Instant) -> (String, flume::Receiver<JoinOutcome>) {
        let (tx, _rx) = flume::bounded(1);
        let required = answered(group.join(request("", &["range"]), tx, LIMITS, now));
        assert_eq!(required.error_code, code(ResponseError::MemberIdRequired));
        let (tx, rx) = flume::bounded(1);
        assert!(matches!(
            group.join(request(&required.member_id, &["range"]), tx, LIMITS, now),
            Joined::Waiting
        ));
        (required.member_id, rx)
    }

    #[test]
    fn two_members_join_sync_and_become_stable() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (first, first_rx) = join_new(&mut group, now);
        let first_join = first_rx
            .try_recv()
            .expect("a lone member completes the join at once");
        assert_eq!(
            (first_join.generation, first_join.leader.as_str()),
            (1, first.as_str())
        );
        // A second member triggers a rebalance; it completes when the first rejoins.
        let (second, second_rx) = join_new(&mut group, now);
        assert!(second_rx.try_recv().is_err(), "waits for the first member");
        assert_eq!(group.state, GroupState::PreparingRebalance);
        assert_eq!(
            group.heartbeat(&first, None, 1, now),
            code(ResponseError::RebalanceInProgress)
        );
        let (tx, first_rx) = flume::bounded(1);
        assert!(matches!(
            group.join(request(&first, &["range"]), tx, LIMITS, now),
            Joined::Waiting
        ));
        let leader_view = first_rx.try_recv().expect("join completed");
        let follower_view = second_rx.try_recv().expect("join completed");
        assert_eq!(leader_view.generation, 2);
        assert_eq!(leader_view.members.len(), 2, "the leader sees every member");
        assert!(follower_view.members.is_empty());
        // The follower's SyncGroup waits for the leader's.
        let (tx, follower_sync) = flume::bounded(1);
        assert_eq!(group.sync(&second, None, 2, vec![], tx, now), Ok(false));
        let (tx, leader_sync) = flume::bounded(1);
        let assignments = vec![
            (first.clone(), Bytes::from_static(b"p0")),
            (second.clone(), Bytes::from_static(b"p1")),
        ];
        assert_eq!(group.sync(&first, None, 2, assignments, tx, now), Ok(true));
        group.complete_sync(None);
        assert_eq!(
            leader_sync.try_recv().expect("answered").assignment,
            Bytes::from_static(b"p0")
        );
        assert_eq!(
            follower_sync.try_recv().expect("answered").assignment,
            Bytes::from_static(b"p1")
        );
        assert_eq!(group.state, GroupState::Stable);
        assert_eq!(group.heartbeat(&second, None, 2, now), NONE);
        assert_eq!(
            group.heartbeat(&second, None, 1, now),
            code(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            group.heartbeat("stranger", None, 2, now),
            code(ResponseError::UnknownMemberId)
        );
    }

    #[test]
    fn an_expired_member_is_removed_and_the_rest_rebalance() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (first, _) = join_new(&mut group, now);
        let (second, second_rx) = join_new(&mut group, now);
        let (tx, _first_rx) = flume::bounded(1);
        assert!(matches!(
            group.join(request(&first, &["range"]), tx, LIMITS, now),
            Joined::Waiting
        ));
        second_rx.try_recv().expect("generation 2");
        // Only the second member keeps heartbeating; the first expires.
        let later = now + Duration::from_secs(8);
        assert_eq!(group.heartbeat(&second, None, 2, later), NONE);
        let after = now + Duration::from_secs(11);
        group.expire(LIMITS, after);
        assert!(!group.members.contains_key(&first));
        assert_eq!(group.state, GroupState::PreparingRebalance);
        let (tx, rx) = flume::bounded(1);
        assert!(matches!(
            group.join(request(&second, &["range"]), tx, LIMITS, after),
            Joined::Waiting
        ));
        let outcome = rx.try_recv().expect("completes with the survivor alone");
        assert_eq!((outcome.generation, outcome.leader), (3, second));
    }

    #[test]
    fn static_members_are_fenced_and_keep_their_place() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let mut join_static = || {
            let (tx, rx) = flume::bounded(1);
            let mut req = request("", &["range"]);
            req.instance_id = Some("instance-1".into());
            let _ = group.join(req, tx, LIMITS, now);
            rx.try_recv().expect("answered")
        };
        let first = join_static();
        assert_eq!(first.error_code, NONE);
        let second = join_static();
        assert_ne!(
            first.member_id, second.member_id,
            "a restart gets a new member id"
        );
        let fenced = group.heartbeat(&first.member_id, Some("instance-1"), group.generation, now);
        assert_eq!(fenced, code(ResponseError::FencedInstanceId));
        assert_eq!(group.members.len(), 1);
    }

    /// Two static members through the join of generation 2, before any SyncGroup:
    /// "instance-1" (returned first) leads, "instance-2" follows.
    fn completing_static_pair(protocols: &[&str], now: Instant) -> (Group, String, String) {
        let mut group = Group::new("g");
        let join = |group: &mut Group, request: JoinRequest| {
            let (tx, rx) = flume::bounded(1);
            assert!(matches!(
                group.join(request, tx, LIMITS, now),
                Joined::Waiting
            ));
            rx
        };
        let leader = join(&mut group, static_request("", "instance-1", protocols))
            .try_recv()
            .expect("a lone member completes the join at once")
            .member_id;
        let follower_rx = join(&mut group, static_request("", "instance-2", protocols));
        let leader_rx = join(&mut group, static_request(&leader, "instance-1", protocols));
        assert_eq!(leader_rx.try_recv().expect("generation 2").leader, leader);
        let follower = follower_rx.try_recv().expect("generation 2").member_id;
        assert_eq!(
            (group.state, group.generation),
            (GroupState::CompletingRebalance, 2)
        );
        (group, leader, follower)
    }

    /// [`completing_static_pair`] after the leader's SyncGroup: Stable, the leader owns
    /// P0 and the follower P1.
    fn stable_static_pair(protocols: &[&str], now: Instant) -> (Group, String, String) {
        let (mut group, leader, follower) = completing_static_pair(protocols, now);
        let (tx, _) = flume::bounded(1);
        let assignments = vec![(leader.clone(), P0), (follower.clone(), P1)];
        let synced = group.sync(&leader, Some("instance-1"), 2, assignments, tx, now);
        assert_eq!(synced, Ok(true));
        group.complete_sync(None);
        assert_eq!(group.state, GroupState::Stable);
        (group, leader, follower)
    }

    /// Rejoins `instance` with an empty member id, as a restarted consumer does, and
    /// expects the group to ask for the fresh member id to be persisted.
    fn restart_static(
        group: &mut Group,
        request: JoinRequest,
        now: Instant,
    ) -> (StaticRejoin, flume::Receiver<JoinOutcome>) {
        let (tx, rx) = flume::bounded(1);
        let Joined::Persist(rejoin) = group.join(request, tx, LIMITS, now) else {
            panic!("a Stable group persists a static rejoin before answering it");
        };
        assert!(
            rx.try_recv().is_err(),
            "no answer before the group is persisted"
        );
        (rejoin, rx)
    }

    #[test]
    fn a_restarted_static_member_takes_its_place_without_a_rebalance() {
        let now = Instant::now();
        let (mut group, leader, follower) = stable_static_pair(&["range"], now);
        // The restarted consumer owns nothing yet, so its subscription metadata differs.
        let mut restarted = static_request("", "instance-2", &["range"]);
        restarted.protocols[0].1 = Bytes::from_static(b"m, owning nothing");
        let (rejoin, rx) = restart_static(&mut group, restarted, now);
        assert_eq!(group.state, GroupState::Stable);
        assert_eq!(
            group.heartbeat(&leader, Some("instance-1"), 2, now),
            NONE,
            "the other member is not asked to rejoin"
        );
        group.complete_static_rejoin(rejoin, None);
        let answer = rx.try_recv().expect("answered once persisted");
        assert_eq!(answer.error_code, NONE);
        assert_eq!(
            (answer.generation, answer.leader.as_str()),
            (2, leader.as_str())
        );
        assert_eq!(answer.protocol.as_deref(), Some("range"));
        assert!(answer.member_id.starts_with("instance-2-") && answer.member_id != follower);
        assert!(answer.members.is_empty() && !answer.skip_assignment);
        assert_eq!((group.state, group.generation), (GroupState::Stable, 2));

        let (tx, _) = flume::bounded(1);
        let synced = group.sync(&answer.member_id, Some("instance-2"), 2, vec![], tx, now);
        assert_eq!(
            synced.map_err(|outcome| (outcome.error_code, outcome.assignment)),
            Err((NONE, P1)),
            "SyncGroup hands back the assignment at once"
        );
        let new_id = answer.member_id.as_str();
        assert_eq!(group.heartbeat(new_id, Some("instance-2"), 2, now), NONE);
        assert_eq!(group.heartbeat(&leader, Some("instance-1"), 2, now), NONE);

        // Whatever the old member id still sends is fenced.
        let fenced = code(ResponseError::FencedInstanceId);
        assert_eq!(
            group.heartbeat(&follower, Some("instance-2"), 2, now),
            fenced
        );
        let (tx, _) = flume::bounded(1);
        let synced = group.sync(&follower, Some("instance-2"), 2, vec![], tx, now);
        assert_eq!(synced.map_err(|outcome| outcome.error_code), Err(fenced));
        // OffsetCommit asks the same check.
        assert!(matches!(
            group.check_member(&follower, Some("instance-2")),
            Err(ResponseError::FencedInstanceId)
        ));
        assert_eq!(
            group.leave(&follower, Some("instance-2"), LIMITS, now),
            fenced
        );
        let (tx, _) = flume::bounded(1);
        let join = answered(group.join(
            static_request(&follower, "instance-2", &["range"]),
            tx,
            LIMITS,
            now,
        ));
        assert_eq!(join.error_code, fenced);
        assert_eq!((group.state, group.members.len()), (GroupState::Stable, 2));
    }

    #[test]
    fn a_restarted_static_leader_is_told_to_skip_its_assignment() {
        let now = Instant::now();
        let (mut group, leader, follower) = stable_static_pair(&["range"], now);
        let mut restarted = static_request("", "instance-1", &["range"]);
        restarted.supports_skip_assignment = true;
        let (rejoin, rx) = restart_static(&mut group, restarted, now);
        group.complete_static_rejoin(rejoin, None);
        let answer = rx.try_recv().expect("answered");
        assert_eq!(answer.error_code, NONE);
        assert_ne!(answer.member_id, leader);
        assert_eq!(answer.leader, answer.member_id, "it still leads");
        assert!(answer.skip_assignment);
        let mut ids: Vec<&str> = answer.members.iter().map(|(id, ..)| id.as_str()).collect();
        ids.sort_unstable();
        let mut expected = vec![answer.member_id.as_str(), follower.as_str()];
        expected.sort_unstable();
        assert_eq!(ids, expected, "the leader sees every member");
        assert_eq!((group.state, group.generation), (GroupState::Stable, 2));
        assert_eq!(group.leader.as_deref(), Some(answer.member_id.as_str()));
    }

    #[test]
    fn a_restarted_static_leader_before_v9_syncs_as_a_follower() {
        let now = Instant::now();
        let (mut group, leader, follower) = stable_static_pair(&["range"], now);
        let restarted = static_request("", "instance-1", &["range"]);
        let (rejoin, rx) = restart_static(&mut group, restarted, now);
        group.complete_static_rejoin(rejoin, None);
        let answer = rx.try_recv().expect("answered");
        assert_eq!(answer.error_code, NONE);
        assert_eq!(
            answer.leader, leader,
            "told the old leader id, which is not its own"
        );
        assert!(answer.members.is_empty() && !answer.skip_assignment);
        // Even a client that assigns anyway gets the group's assignment back.
        let (tx, _) = flume::bounded(1);
        let reassigned = vec![
            (answer.member_id.clone(), Bytes::from_static(b"everything")),
            (follower.clone(), Bytes::new()),
        ];
        let synced = group.sync(
            &answer.member_id,
            Some("instance-1"),
            2,
            reassigned,
            tx,
            now,
        );
        assert_eq!(
            synced.map_err(|outcome| (outcome.error_code, outcome.assignment)),
            Err((NONE, P0))
        );
        assert_eq!(group.members[&follower].assignment, P1);
        assert_eq!((group.state, group.generation), (GroupState::Stable, 2));
    }

    #[test]
    fn a_static_rejoin_that_changes_the_selected_protocol_rebalances() {
        let now = Instant::now();
        let (mut group, leader, _) = stable_static_pair(&["range", "roundrobin"], now);
        assert_eq!(group.protocol.as_deref(), Some("range"));
        // Only roundrobin is left that every member supports.
        let (tx, restarted_rx) = flume::bounded(1);
        let restarted = static_request("", "instance-2", &["roundrobin"]);
        assert!(matches!(
            group.join(restarted, tx, LIMITS, now),
            Joined::Waiting
        ));
        assert_eq!(group.state, GroupState::PreparingRebalance);
        assert_eq!(
            group.heartbeat(&leader, Some("instance-1"), 2, now),
            code(ResponseError::RebalanceInProgress)
        );
        let (tx, _) = flume::bounded(1);
        let rejoined = static_request(&leader, "instance-1", &["range", "roundrobin"]);
        assert!(matches!(
            group.join(rejoined, tx, LIMITS, now),
            Joined::Waiting
        ));
        let answer = restarted_rx.try_recv().expect("generation 3");
        assert_eq!(
            (answer.generation, answer.protocol.as_deref()),
            (3, Some("roundrobin"))
        );
    }

    #[test]
    fn a_static_rejoin_while_completing_a_rebalance_rebalances() {
        let now = Instant::now();
        let (mut group, leader, follower) = completing_static_pair(&["range"], now);
        let (tx, old_sync) = flume::bounded(1);
        let waiting = group.sync(&follower, Some("instance-2"), 2, vec![], tx, now);
        assert_eq!(
            waiting,
            Ok(false),
            "the follower waits for the leader's SyncGroup"
        );
        // The leader is assigning partitions to the old member id: the group rebalances so
        // that the new one gets some.
        let (tx, restarted_rx) = flume::bounded(1);
        let restarted = static_request("", "instance-2", &["range"]);
        assert!(matches!(
            group.join(restarted, tx, LIMITS, now),
            Joined::Waiting
        ));
        assert_eq!(
            old_sync.try_recv().expect("answered").error_code,
            code(ResponseError::FencedInstanceId)
        );
        assert_eq!(group.state, GroupState::PreparingRebalance);
        let (tx, leader_rx) = flume::bounded(1);
        let rejoined = static_request(&leader, "instance-1", &["range"]);
        assert!(matches!(
            group.join(rejoined, tx, LIMITS, now),
            Joined::Waiting
        ));
        let restarted = restarted_rx.try_recv().expect("generation 3");
        let roster = leader_rx.try_recv().expect("generation 3").members;
        assert_eq!(restarted.generation, 3);
        assert!(roster.iter().any(|(id, ..)| *id == restarted.member_id));
        assert!(!roster.iter().any(|(id, ..)| *id == follower));
    }

    #[test]
    fn a_static_rejoin_while_preparing_a_rebalance_waits_for_it() {
        let now = Instant::now();
        let (mut group, leader, follower) = stable_static_pair(&["range"], now);
        // The follower's new metadata starts a rebalance; the leader has not rejoined yet.
        let (tx, old_join) = flume::bounded(1);
        let mut changed = static_request(&follower, "instance-2", &["range"]);
        changed.protocols[0].1 = Bytes::from_static(b"other topics");
        assert!(matches!(
            group.join(changed, tx, LIMITS, now),
            Joined::Waiting
        ));
        assert_eq!(group.state, GroupState::PreparingRebalance);
        let (tx, restarted_rx) = flume::bounded(1);
        let restarted = static_request("", "instance-2", &["range"]);
        assert!(matches!(
            group.join(restarted, tx, LIMITS, now),
            Joined::Waiting
        ));
        assert_eq!(
            old_join.try_recv().expect("answered").error_code,
            code(ResponseError::FencedInstanceId)
        );
        assert!(restarted_rx.try_recv().is_err(), "waits for the leader");
        let (tx, _) = flume::bounded(1);
        let rejoined = static_request(&leader, "instance-1", &["range"]);
        assert!(matches!(
            group.join(rejoined, tx, LIMITS, now),
            Joined::Waiting
        ));
        let answer = restarted_rx.try_recv().expect("generation 3");
        assert_eq!((answer.error_code, answer.generation), (NONE, 3));
        assert_ne!(answer.member_id, follower);
    }

    #[test]
    fn a_static_rejoin_that_cannot_be_persisted_is_undone() {
        let now = Instant::now();
        let (mut group, _, follower) = stable_static_pair(&["range"], now);
        let mut restarted = static_request("", "instance-2", &["range"]);
        restarted.protocols[0].1 = Bytes::from_static(b"m, owning nothing");
        restarted.client_id = "restarted".into();
        let (rejoin, rx) = restart_static(&mut group, restarted, now);
        group.complete_static_rejoin(rejoin, Some(ResponseError::CoordinatorNotAvailable));
        let answer = rx.try_recv().expect("answered");
        assert_eq!(
            answer.error_code,
            code(ResponseError::CoordinatorNotAvailable)
        );
        assert_eq!(
            answer.member_id, "",
            "the client retries as a restarted member"
        );
        // The group is as the log has it: the old member id holds the instance again.
        assert_eq!(group.heartbeat(&follower, Some("instance-2"), 2, now), NONE);
        let member = &group.members[&follower];
        assert_eq!(
            (
                member.client_id.as_str(),
                &member.protocols[0].1,
                &member.assignment
            ),
            ("client", &Bytes::from_static(b"m"), &P1)
        );
        assert_eq!((group.state, group.members.len()), (GroupState::Stable, 2));
    }

    #[test]
    fn a_newer_takeover_during_the_write_answers_only_the_newer_member() {
        let now = Instant::now();
        let (mut group, _, _) = stable_static_pair(&["range"], now);
        let request = || static_request("", "instance-2", &["range"]);
        let (first, first_rx) = restart_static(&mut group, request(), now);
        let (second, second_rx) = restart_static(&mut group, request(), now);
        let fenced = first_rx
            .try_recv()
            .expect("the newer takeover fences the first");
        assert_eq!(fenced.error_code, code(ResponseError::FencedInstanceId));
        // The first write fails after the instance has moved on: nothing is undone.
        group.complete_static_rejoin(first, Some(ResponseError::CoordinatorNotAvailable));
        group.complete_static_rejoin(second, None);
        let answer = second_rx.try_recv().expect("answered");
        assert_eq!(answer.error_code, NONE);
        assert_eq!(
            group.heartbeat(&answer.member_id, Some("instance-2"), 2, now),
            NONE
        );
    }

    #[test]
    fn inconsistent_protocols_and_group_size_are_refused() {
        let now = Instant::now();
        let mut group = Group::new("g");
        join_new(&mut group, now);
        let (tx, _) = flume::bounded(1);
        let refused = answered(group.join(request("", &["roundrobin"]), tx, LIMITS, now));
        assert_eq!(
            refused.error_code,
            code(ResponseError::InconsistentGroupProtocol)
        );
        let small = GroupLimits {
            members_max: 1,
            ..LIMITS
        };
        let (tx, _) = flume::bounded(1);
        let refused = answered(group.join(request("", &["range"]), tx, small, now));
        assert_eq!(refused.error_code, code(ResponseError::GroupMaxSizeReached));
    }

    #[test]
    fn leaving_the_last_member_empties_the_group() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (member, _) = join_new(&mut group, now);
        assert_eq!(group.leave(&member, None, LIMITS, now), NONE);
        assert_eq!(group.state, GroupState::Empty);
        assert_eq!(
            group.leave(&member, None, LIMITS, now),
            code(ResponseError::UnknownMemberId)
        );
    }
}
