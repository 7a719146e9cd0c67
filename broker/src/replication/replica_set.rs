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

use crate::metadata::PartitionState;

/// What the leader knows of one follower, from its fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerPosition {
    pub replica: i32,
    /// The offset of its last fetch (its log end offset), or -1 before its first fetch.
    pub log_end_offset: i64,
    /// When it last fetched up to the leader's log end, in ms (Kafka's `lastCaughtUpTimeMs`).
    pub last_caught_up_ms: i64,
}

#[derive(Debug)]
pub struct ReplicaSet {
    node_id: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    leader: i32,
    leader_epoch: i32,
    /// One per replica other than this node (meaningful while this node leads).
    followers: Vec<FollowerPosition>,
    /// The leader's high watermark from its last fetch answer (meaningful while following).
    leader_high_watermark: i64,
}

impl ReplicaSet {
    pub fn new(state: &PartitionState, node_id: i32) -> ReplicaSet {
        let mut set = ReplicaSet {
            node_id,
            replicas: Vec::new(),
            isr: Vec::new(),
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            followers: Vec::new(),
            leader_high_watermark: -1,
        };
        set.update(state);
        set.reset_positions();
        set
    }

    /// Takes the replicas and ISR of a newer image; a change of leader or leader epoch
    /// forgets every follower's position.
    pub fn update(&mut self, state: &PartitionState) {
        let new_leadership = (state.leader, state.leader_epoch) != (self.leader, self.leader_epoch);
        self.replicas.clone_from(&state.replicas);
        self.isr.clone_from(&state.isr);
        self.leader = state.leader;
        self.leader_epoch = state.leader_epoch;
        if new_leadership {
            self.reset_positions();
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
                        .unwrap_or_else(|| FollowerPosition::unknown(id))
                })
                .collect();
        }
    }

    fn reset_positions(&mut self) {
        let node_id = self.node_id;
        self.followers = self
            .replicas
            .iter()
            .filter(|&&id| id != node_id)
            .map(|&id| FollowerPosition::unknown(id))
            .collect();
        self.leader_high_watermark = -1;
    }

    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    /// Records a fetch by follower `replica` at `offset` while the leader's log ends at
    /// `leader_end_offset`. False if `replica` holds no replica of the partition.
    pub fn record_fetch(
        &mut self,
        replica: i32,
        offset: i64,
        leader_end_offset: i64,
        now_ms: i64,
    ) -> bool {
        let Some(follower) = self.followers.iter_mut().find(|f| f.replica == replica) else {
            return false;
        };
        follower.log_end_offset = offset;
        if offset >= leader_end_offset {
            follower.last_caught_up_ms = now_ms;
        }
        true
    }

    /// What the leader knows of its followers.
    pub fn followers(&self) -> &[FollowerPosition] {
        &self.followers
    }

    /// A follower's record of the leader's high watermark.
    pub fn learn_leader_high_watermark(&mut self, offset: i64) {
        self.leader_high_watermark = offset;
    }

    /// The high watermark, given this node's completed writes `own_end_offset`: on a leader
    /// the ISR's minimum (`None` while a member's position is unknown), on a follower the
    /// leader's capped by its own writes.
    pub fn high_watermark(&self, is_leader: bool, own_end_offset: i64) -> Option<i64> {
        if !is_leader {
            return (self.leader_high_watermark >= 0)
                .then(|| self.leader_high_watermark.min(own_end_offset));
        }
        let mut high_watermark = own_end_offset;
        for member in self.isr.iter().filter(|&&id| id != self.node_id) {
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
    fn unknown(replica: i32) -> FollowerPosition {
        FollowerPosition {
            replica,
            log_end_offset: -1,
            last_caught_up_ms: -1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(replicas: &[i32], isr: &[i32], leader: i32, leader_epoch: i32) -> PartitionState {
        PartitionState {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader,
            leader_epoch,
            partition_epoch: 0,
        }
    }

    #[test]
    fn a_lone_replica_is_its_own_high_watermark() {
        let set = ReplicaSet::new(&state(&[1], &[1], 1, 0), 1);
        assert_eq!(set.high_watermark(true, 42), Some(42));
    }

    #[test]
    fn the_leader_waits_for_every_isr_member_and_takes_their_minimum() {
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2, 3], 1, 0), 1);
        assert_eq!(
            set.high_watermark(true, 10),
            None,
            "no follower fetched yet"
        );
        assert!(set.record_fetch(2, 7, 10, 100));
        assert_eq!(set.high_watermark(true, 10), None, "3 is still unknown");
        assert!(set.record_fetch(3, 10, 10, 100));
        assert_eq!(set.high_watermark(true, 10), Some(7));
        assert!(set.record_fetch(2, 12, 12, 200));
        assert_eq!(set.high_watermark(true, 11), Some(10), "own writes cap it");
        assert!(!set.record_fetch(4, 5, 12, 200), "4 holds no replica");
    }

    #[test]
    fn a_replica_outside_the_isr_does_not_hold_the_high_watermark() {
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2], 1, 0), 1);
        set.record_fetch(2, 9, 9, 0);
        assert_eq!(set.high_watermark(true, 9), Some(9));
    }

    #[test]
    fn caught_up_time_moves_only_when_the_fetch_reaches_the_log_end() {
        let mut set = ReplicaSet::new(&state(&[1, 2], &[1, 2], 1, 0), 1);
        set.record_fetch(2, 5, 10, 100);
        assert_eq!(set.followers()[0].last_caught_up_ms, -1);
        set.record_fetch(2, 10, 10, 200);
        assert_eq!(set.followers()[0].last_caught_up_ms, 200);
    }

    #[test]
    fn a_new_leader_epoch_forgets_positions_and_an_isr_change_keeps_them() {
        let mut set = ReplicaSet::new(&state(&[1, 2, 3], &[1, 2, 3], 1, 0), 1);
        set.record_fetch(2, 5, 5, 0);
        set.record_fetch(3, 5, 5, 0);
        set.update(&state(&[1, 2, 3], &[1, 2], 1, 0));
        assert_eq!(set.high_watermark(true, 5), Some(5));
        set.update(&state(&[1, 2, 3], &[1, 2], 1, 1));
        assert_eq!(set.high_watermark(true, 5), None);
    }

    #[test]
    fn a_follower_takes_the_leaders_high_watermark_capped_by_its_own_writes() {
        let mut set = ReplicaSet::new(&state(&[1, 2], &[1, 2], 1, 0), 2);
        assert_eq!(set.high_watermark(false, 3), None);
        set.learn_leader_high_watermark(8);
        assert_eq!(set.high_watermark(false, 3), Some(3));
        assert_eq!(set.high_watermark(false, 9), Some(8));
    }
}
