//! A partition's replicas as its owning shard tracks them: who holds a copy, who is in
//! sync, how far each follower has fetched (on the leader), and the leader's high watermark
//! as the last fetch answer gave it (on a follower). Pure bookkeeping: no I/O, no clock.
//!
//! Invariants:
//! - The high watermark a leader computes is the minimum, over the ISR, of each member's log
//!   end: its own completed writes for itself, the last fetch offset for a follower. A member
//!   whose position is unknown (it has not fetched from this leader yet) holds it where it
//!   is: the answer is `None`, and the caller leaves the watermark unmoved.
//! - A follower's position is reset when the leadership or its epoch changes: what a follower
//!   fetched from an earlier leader says nothing about this one's log.
//! - A follower's high watermark is the leader's, capped by its own completed writes.
//! - While an ISR change is in flight, the high watermark is computed over the old ISR and
//!   the proposed one together (KIP-497's maximal ISR), and `min.insync.replicas` is checked
//!   against the committed ISR only: a member being removed still holds the watermark back,
//!   a member being added counts for acks only once the change is committed.
//! - A follower is out of sync once it has not caught up with the leader's log end for the
//!   lag limit (Kafka's `lastCaughtUpTimeMs` rules); every follower counts as caught up when
//!   this node becomes leader. One that reaches the high watermark and the offset where this
//!   leadership began may join.

use crate::metadata::PartitionState;

/// What the leader knows of one follower, from its fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerPosition {
    pub replica: i32,
    /// The offset of its last fetch (its log end offset), or -1 before its first fetch.
    pub log_end_offset: i64,
    /// When it last fetched up to the leader's log end, in ms (Kafka's `lastCaughtUpTimeMs`).
    pub last_caught_up_ms: i64,
    /// The broker epoch (incarnation) its last fetch named (Fetch v15+, KIP-903), -1 when
    /// not named: a replica may join the ISR only as the incarnation the metadata registers.
    pub broker_epoch: i64,
    /// The leader's log end and the time at its previous fetch.
    last_fetch_leader_end: i64,
    last_fetch_ms: i64,
}

#[derive(Debug)]
pub struct ReplicaSet {
    node_id: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    /// The ISR proposed to the controller and not yet in an image.
    pending_isr: Option<Vec<i32>>,
    /// This node's log end when it became leader at this epoch.
    leader_epoch_start_offset: i64,
    /// One per replica other than this node (meaningful while this node leads).
    followers: Vec<FollowerPosition>,
    /// The leader's high watermark from its last fetch answer (meaningful while following).
    leader_high_watermark: i64,
}

impl ReplicaSet {
    /// The set as `state` gives it, at `now_ms`, this node's log ending at `own_end_offset`.
    pub fn new(
        state: &PartitionState,
        node_id: i32,
        now_ms: i64,
        own_end_offset: i64,
    ) -> ReplicaSet {
        let mut set = ReplicaSet {
            node_id,
            replicas: Vec::new(),
            isr: Vec::new(),
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            pending_isr: None,
            leader_epoch_start_offset: own_end_offset,
            followers: Vec::new(),
            leader_high_watermark: -1,
        };
        set.update(state, now_ms, own_end_offset);
        set.reset_positions(now_ms, own_end_offset);
        set
    }

    /// Takes the replicas and ISR of a newer image; a change of leader or leader epoch
    /// forgets every follower's position, and any change ends a pending ISR proposal (it
    /// was committed, or the partition moved on without it).
    pub fn update(&mut self, state: &PartitionState, now_ms: i64, own_end_offset: i64) {
        let new_leadership = (state.leader, state.leader_epoch) != (self.leader, self.leader_epoch);
        if state.partition_epoch != self.partition_epoch || new_leadership {
            self.pending_isr = None;
        }
        self.replicas.clone_from(&state.replicas);
        self.isr.clone_from(&state.isr);
        self.leader = state.leader;
        self.leader_epoch = state.leader_epoch;
        self.partition_epoch = state.partition_epoch;
        if new_leadership {
            self.reset_positions(now_ms, own_end_offset);
        } else {
            // Keep what is known of replicas that stay; new replicas start unknown.
            let node_id = self.node_id;
            let known = std::mem::take(&mut self.followers);
            self.followers = self
                .replicas
                .iter()
                .filter(|&&id| id != node_id)
                .map(|&id| {
                    known
                        .iter()
                        .find(|f| f.replica == id)
                        .copied()
                        .unwrap_or_else(|| FollowerPosition::unknown(id, now_ms))
                })
                .collect();
        }
    }

    fn reset_positions(&mut self, now_ms: i64, own_end_offset: i64) {
        let node_id = self.node_id;
        self.followers = self
            .replicas
            .iter()
            .filter(|&&id| id != node_id)
            .map(|&id| FollowerPosition::unknown(id, now_ms))
            .collect();
        self.leader_high_watermark = -1;
        self.leader_epoch_start_offset = own_end_offset;
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    /// Records a fetch by incarnation `broker_epoch` of follower `replica` at `offset` while
    /// the leader's log ends at `leader_end_offset`. False if `replica` holds no replica of
    /// the partition.
    pub fn record_fetch(
        &mut self,
        replica: i32,
        broker_epoch: i64,
        offset: i64,
        leader_end_offset: i64,
        now_ms: i64,
    ) -> bool {
        let Some(follower) = self.followers.iter_mut().find(|f| f.replica == replica) else {
            return false;
        };
        follower.broker_epoch = broker_epoch;
        follower.log_end_offset = offset;
        // Kafka's rules: caught up now if it reached the log end; else as of its previous
        // fetch if it reached what the log end was then.
        if offset >= leader_end_offset {
            follower.last_caught_up_ms = now_ms;
        } else if offset >= follower.last_fetch_leader_end && follower.last_fetch_ms >= 0 {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(follower.last_fetch_ms);
        }
        follower.last_fetch_leader_end = leader_end_offset;
        follower.last_fetch_ms = now_ms;
        true
    }

    /// The ISR the leader should propose, if it differs from the committed one and nothing
    /// is pending: without the followers that have not caught up for `lag_max_ms`, with the
    /// replicas outside it that reached `high_watermark` and this leadership's start and
    /// that are `eligible` (a live broker, as the incarnation their fetches named: KIP-903).
    /// The leader stays; replicas keep their order.
    pub fn wanted_isr(
        &self,
        now_ms: i64,
        lag_max_ms: i64,
        high_watermark: i64,
        eligible: impl Fn(i32, i64) -> bool,
    ) -> Option<Vec<i32>> {
        if self.pending_isr.is_some() || self.leader != self.node_id {
            return None;
        }
        let in_sync = |follower: &FollowerPosition| {
            if self.isr.contains(&follower.replica) {
                now_ms - follower.last_caught_up_ms <= lag_max_ms
            } else {
                follower.log_end_offset >= high_watermark.max(self.leader_epoch_start_offset)
                    && eligible(follower.replica, follower.broker_epoch)
            }
        };
        let wanted: Vec<i32> = self
            .replicas
            .iter()
            .copied()
            .filter(|&id| {
                id == self.node_id
                    || self
                        .followers
                        .iter()
                        .find(|f| f.replica == id)
                        .is_some_and(in_sync)
            })
            .collect();
        let mut current = self.isr.clone();
        current.sort_unstable();
        let mut sorted = wanted.clone();
        sorted.sort_unstable();
        (sorted != current).then_some(wanted)
    }

    /// Counts every follower as caught up at `now_ms`: the leader could not serve fetches
    /// for a while, so their lag is its own.
    pub fn forgive_lag(&mut self, now_ms: i64) {
        for follower in &mut self.followers {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(now_ms);
        }
    }

    /// An ISR change was sent to the controller.
    pub fn propose_isr(&mut self, isr: Vec<i32>) {
        self.pending_isr = Some(isr);
    }

    /// The controller refused it (or never answered): it may be proposed again.
    pub fn abandon_isr(&mut self) {
        self.pending_isr = None;
    }

    /// What the leader knows of its followers.
    pub fn followers(&self) -> &[FollowerPosition] {
        &self.followers
    }

    /// The broker epoch each member of `isr` last fetched as (-1: unknown, or the leader
    /// itself, whose own registration the controller knows), for AlterPartition.
    pub fn broker_epochs(&self, isr: &[i32]) -> Vec<i64> {
        isr.iter()
            .map(|id| {
                self.followers
                    .iter()
                    .find(|f| f.replica == *id)
                    .map_or(-1, |f| f.broker_epoch)
            })
            .collect()
    }

    /// A follower's record of the leader's high watermark.
    pub fn learn_leader_high_watermark(&mut self, offset: i64) {
        self.leader_high_watermark = offset;
    }

    /// The high watermark, given this node's completed writes `own_end_offset`: on a leader
    /// the ISR's minimum (`None` while a member's position is unknown), on a follower the
    /// leader's capped by its own writes.
    pub fn high_watermark(&self, own_end_offset: i64) -> Option<i64> {
        if self.leader != self.node_id {
            return (self.leader_high_watermark >= 0)
                .then(|| self.leader_high_watermark.min(own_end_offset));
        }
        let mut high_watermark = own_end_offset;
        let pending = self.pending_isr.iter().flatten();
        for member in self
            .isr
            .iter()
            .chain(pending)
            .filter(|&&id| id != self.node_id)
        {
            let position = self
                .followers
                .iter()
                .find(|f| f.replica == *member)
                .map_or(-1, |f| f.log_end_offset);
            if position < 0 {
                return None;
            }
            high_watermark = high_watermark.min(position);
        }
        Some(high_watermark)
    }
}

impl FollowerPosition {
    /// A follower not heard from yet, counted as caught up at `now_ms`.
    fn unknown(replica: i32, now_ms: i64) -> FollowerPosition {
        FollowerPosition {
            replica,
            log_end_offset: -1,
            last_caught_up_ms: now_ms,
            broker_epoch: -1,
            last_fetch_leader_end: -1,
            last_fetch_ms: -1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(replicas: &[i32], isr: &[i32], leader: i32, leader_epoch: i32) -> PartitionState {
        PartitionState {
            leader_epoch,
            ..PartitionState::led(replicas, isr, leader)
        }
    }

    #[test]
    fn a_lone_replica_is_its_own_high_watermark() {
        let set = ReplicaSet::new(&state(&[1], &[1], 1, 0), 1, 0, 0);
        assert_eq!(set.high_watermark(42), Some(42));
    }

    #[test]
    fn the_leader_waits_for_every_isr_member_and_takes_their_minimum() {
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2, 3], 1, 0), 1, 0, 0);
        assert_eq!(set.high_watermark(10), None, "no follower fetched yet");
        assert!(set.record_fetch(2, -1, 7, 10, 100));
        assert_eq!(set.high_watermark(10), None, "3 is still unknown");
        assert!(set.record_fetch(3, -1, 10, 10, 100));
        assert_eq!(set.high_watermark(10), Some(7));
        assert!(set.record_fetch(2, -1, 12, 12, 200));
        assert_eq!(set.high_watermark(11), Some(10), "own writes cap it");
        assert!(!set.record_fetch(4, -1, 5, 12, 200), "4 holds no replica");
    }

    #[test]
    fn a_replica_outside_the_isr_does_not_hold_the_high_watermark() {
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2], 1, 0), 1, 0, 0);
        set.record_fetch(2, -1, 9, 9, 0);
        assert_eq!(set.high_watermark(9), Some(9));
    }

    #[test]
    fn caught_up_time_moves_only_when_the_fetch_reaches_the_log_end() {
        let mut set = ReplicaSet::new(&state(&[1, 2], &[1, 2], 1, 0), 1, 0, 0);
        set.record_fetch(2, -1, 5, 10, 100);
        assert_eq!(
            set.followers()[0].last_caught_up_ms,
            0,
            "since the leadership began"
        );
        set.record_fetch(2, -1, 10, 12, 200);
        assert_eq!(
            set.followers()[0].last_caught_up_ms,
            100,
            "it reached the end the leader had at its previous fetch"
        );
        set.record_fetch(2, -1, 12, 12, 300);
        assert_eq!(set.followers()[0].last_caught_up_ms, 300);
    }

    #[test]
    fn a_new_leader_epoch_forgets_positions_and_an_isr_change_keeps_them() {
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2, 3], 1, 0), 1, 0, 0);
        set.record_fetch(2, -1, 5, 5, 0);
        set.record_fetch(3, -1, 5, 5, 0);
        set.update(&state(&[1, 2, 3], &[1, 2], 1, 0), 0, 5);
        assert_eq!(set.high_watermark(5), Some(5));
        set.update(&state(&[1, 2, 3], &[1, 2], 1, 1), 0, 5);
        assert_eq!(set.high_watermark(5), None);
    }

    #[test]
    fn a_lagging_follower_leaves_and_one_that_caught_up_joins() {
        let live = |_, _| true;
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2, 3], 1, 0), 1, 0, 0);
        set.record_fetch(2, -1, 10, 10, 1_000);
        set.record_fetch(3, -1, 4, 10, 1_000);
        assert_eq!(
            set.wanted_isr(1_500, 2_000, 4, live),
            None,
            "within the lag"
        );
        assert_eq!(set.wanted_isr(2_500, 2_000, 4, live), Some(vec![1, 2]));
        let mut paused = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2, 3], 1, 0), 1, 0, 0);
        paused.forgive_lag(2_500);
        assert_eq!(
            paused.wanted_isr(2_500, 2_000, 4, live),
            None,
            "a paused leader forgives"
        );
        set.propose_isr(vec![1, 2]);
        assert_eq!(
            set.wanted_isr(2_500, 2_000, 4, live),
            None,
            "one change at a time"
        );
        // While the shrink is pending, 3 still holds the high watermark back.
        assert_eq!(set.high_watermark(10), Some(4));
        let mut shrunk = state(&[1, 2, 3], &[1, 2], 1, 0);
        shrunk.partition_epoch = 1;
        set.update(&shrunk, 2_500, 10);
        assert_eq!(set.high_watermark(10), Some(10));
        // 3 catches up with the high watermark: it may join, if its broker is live.
        set.record_fetch(3, -1, 10, 10, 3_000);
        assert_eq!(set.wanted_isr(3_000, 2_000, 10, |id, _| id != 3), None);
        assert_eq!(set.wanted_isr(3_000, 2_000, 10, live), Some(vec![1, 2, 3]));
    }

    #[test]
    fn a_follower_joins_only_past_the_start_of_this_leadership() {
        let mut set = ReplicaSet::new(&state(&[1, 2], &[1], 1, 3), 1, 0, 20);
        set.record_fetch(2, -1, 15, 20, 100);
        assert_eq!(set.wanted_isr(100, 1_000, 15, |_, _| true), None);
        set.record_fetch(2, -1, 20, 20, 200);
        assert_eq!(
            set.wanted_isr(200, 1_000, 20, |_, _| true),
            Some(vec![1, 2])
        );
    }

    #[test]
    fn a_follower_takes_the_leaders_high_watermark_capped_by_its_own_writes() {
        let mut set = ReplicaSet::new(&state(&[1, 2], &[1, 2], 1, 0), 2, 0, 0);
        assert_eq!(set.high_watermark(3), None);
        set.learn_leader_high_watermark(8);
        assert_eq!(set.high_watermark(3), Some(3));
        assert_eq!(set.high_watermark(9), Some(8));
    }

    #[test]
    fn only_the_registered_incarnation_of_a_replica_may_join() {
        let mut set = ReplicaSet::new(&state(&[1, 2], &[1], 1, 0), 1, 0, 0);
        // Broker 2 is registered at epoch 7; a fetch of its epoch-6 incarnation is stale.
        let registered = |id: i32, epoch: i64| id == 2 && (epoch == -1 || epoch == 7);
        set.record_fetch(2, 6, 10, 10, 100);
        assert_eq!(set.wanted_isr(100, 1_000, 10, registered), None);
        set.record_fetch(2, 7, 10, 10, 200);
        assert_eq!(set.wanted_isr(200, 1_000, 10, registered), Some(vec![1, 2]));
        assert_eq!(set.broker_epochs(&[1, 2]), vec![-1, 7]);
    }
}
