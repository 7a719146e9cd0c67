//! Static membership (KIP-345): a restarted member that joins again with its
//! `group.instance.id` and no member id takes over its place under a fresh member id, and
//! the old id is fenced (FENCED_INSTANCE_ID). A Stable group keeps its assignment unless the
//! member's protocols change the selected one; the takeover is answered only once the
//! caller persisted it, and undone if that failed.

use std::time::Instant;

use kafka_protocol::error::ResponseError;

use super::member::{new_member_id, JoinSettings};
use super::{
    Group, GroupLimits, GroupState, JoinOutcome, JoinRequest, JoinWaiter, Joined, SyncOutcome,
};
use crate::errors::{code, NONE};

/// A static member's takeover of its instance id, kept until the group is persisted so
/// that it can be undone if the write fails.
pub struct StaticRejoin {
    pub(super) instance_id: String,
    member_id_old: String,
    member_id_new: String,
    /// What the member had stated in its previous join, restored if the write fails.
    settings_old: JoinSettings,
    /// The leader before the takeover, which JoinGroup v0–v8 are told.
    leader_old: Option<String>,
    supports_skip_assignment: bool,
}

impl Group {
    /// A known static member joins with an empty member id: a restarted consumer. It takes
    /// over its place (assignment, leadership, order of arrival) under a fresh member id,
    /// and the old one is fenced. As Kafka's `updateStaticMemberAndRebalance`, by state:
    /// - Stable: no rebalance, unless the member's protocols change the protocol the group
    ///   would select; the caller persists the fresh id before the member is answered.
    /// - CompletingRebalance: a rebalance, because the leader is assigning partitions to the
    ///   old member id, which nobody would receive.
    /// - PreparingRebalance: the member waits for the rebalance with everyone else.
    pub(super) fn rejoin_static(
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
}
