//! Moving a partition's replicas to other brokers (Kafka's AlterPartitionReassignments), as
//! pure functions from a partition's state to the state it should have next.
//!
//! A reassignment from replicas `current` to `target` goes in two steps, as in KRaft:
//!
//! ```text
//!   start:     replicas = target ++ (current − target)   adding = target − current
//!              (the ISR is unchanged)                    removing = current − target
//!   followers in `adding` fetch from the leader and join the ISR (AlterPartition) ...
//!   complete:  replicas = target, ISR = ISR − removing, adding = removing = []
//!              once every adding replica is in the ISR (at once when none is added)
//! ```
//!
//! Invariants: a replica leaves the replica set only when the reassignment completes, and it
//! completes only when every added replica is in sync and the ISR left is not empty, so the
//! ISR never loses the last copies of acknowledged records to a move; a leader that is
//! removed, or not in the ISR left, is replaced by an in-sync replica that may lead;
//! cancelling goes back to the replicas before the reassignment (`current`).

use super::elect::{elect, Election};
use crate::metadata::PartitionState;

/// The replicas before the reassignment in progress (all of them when none is).
pub fn original_replicas(state: &PartitionState) -> Vec<i32> {
    state
        .replicas
        .iter()
        .copied()
        .filter(|id| !state.adding_replicas.contains(id))
        .collect()
}

/// The state that starts moving `state`'s replicas to `target`, replacing a reassignment in
/// progress (computed from the replicas before it), and completes it at once when `target`
/// adds no replica.
pub fn start(
    state: &PartitionState,
    target: &[i32],
    may_lead: impl Fn(i32) -> bool,
) -> PartitionState {
    let current = original_replicas(state);
    let mut next = state.clone();
    next.replicas = target.to_vec();
    next.replicas
        .extend(current.iter().copied().filter(|id| !target.contains(id)));
    next.adding_replicas = target
        .iter()
        .copied()
        .filter(|id| !current.contains(id))
        .collect();
    next.removing_replicas = current
        .iter()
        .copied()
        .filter(|id| !target.contains(id))
        .collect();
    // Replicas added by the reassignment this one replaces are not in sync for this one.
    next.isr.retain(|id| next.replicas.contains(id));
    complete_if_caught_up(next, may_lead)
}

/// The state that cancels the reassignment in progress: the replicas before it, the ISR
/// without the replicas it added.
pub fn cancel(state: &PartitionState, may_lead: impl Fn(i32) -> bool) -> PartitionState {
    let mut next = state.clone();
    next.replicas = original_replicas(state);
    next.isr.retain(|id| !state.adding_replicas.contains(id));
    next.adding_replicas.clear();
    next.removing_replicas.clear();
    settle_leader(next, may_lead)
}

/// `next` with its reassignment completed if every added replica is in the ISR and the ISR
/// keeps a member once the removed replicas leave it; else `next` as it is.
pub fn complete_if_caught_up(
    mut next: PartitionState,
    may_lead: impl Fn(i32) -> bool,
) -> PartitionState {
    if !next.is_reassigning() {
        return next;
    }
    let caught_up = next.adding_replicas.iter().all(|id| next.isr.contains(id));
    let removing = std::mem::take(&mut next.removing_replicas);
    let isr_left: Vec<i32> = next
        .isr
        .iter()
        .copied()
        .filter(|id| !removing.contains(id))
        .collect();
    if !caught_up || isr_left.is_empty() {
        next.removing_replicas = removing;
        return next;
    }
    next.replicas.retain(|id| !removing.contains(id));
    next.isr = isr_left;
    next.adding_replicas.clear();
    settle_leader(next, may_lead)
}

/// `next` led by its leader if that is an in-sync replica that may lead, else by the first
/// that may (or none).
fn settle_leader(mut next: PartitionState, may_lead: impl Fn(i32) -> bool) -> PartitionState {
    next.leader = elect(&next, Election::Online, may_lead).leader;
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::NO_LEADER;

    fn all(_: i32) -> bool {
        true
    }

    #[test]
    fn a_move_adds_first_and_removes_once_the_added_replicas_are_in_sync() {
        let before = PartitionState::led(&[1, 2], &[1, 2], 1);
        let moving = start(&before, &[3, 2], all);
        assert_eq!(moving.replicas, vec![3, 2, 1]);
        assert_eq!(moving.adding_replicas, vec![3]);
        assert_eq!(moving.removing_replicas, vec![1]);
        assert_eq!(moving.isr, vec![1, 2], "nothing leaves before 3 caught up");
        assert_eq!(moving.leader, 1);
        assert!(moving.is_reassigning());
        assert_eq!(original_replicas(&moving), vec![2, 1]);

        let mut caught_up = moving.clone();
        caught_up.isr.push(3);
        let done = complete_if_caught_up(caught_up, all);
        assert_eq!(done.replicas, vec![3, 2]);
        assert_eq!(done.isr, vec![2, 3]);
        assert!(!done.is_reassigning());
        assert_eq!(
            done.leader, 3,
            "the removed leader hands over to an in-sync replica"
        );
    }

    #[test]
    fn a_move_that_adds_nothing_completes_at_once() {
        let before = PartitionState::led(&[1, 2, 3], &[1, 2, 3], 2);
        let shrunk = start(&before, &[3, 1], all);
        assert_eq!(shrunk.replicas, vec![3, 1]);
        assert_eq!(shrunk.isr, vec![1, 3]);
        assert_eq!(
            shrunk.leader, 3,
            "the removed leader's successor in replica order"
        );
        assert!(!shrunk.is_reassigning());
        let reordered = start(&before, &[3, 2, 1], all);
        assert_eq!(reordered.replicas, vec![3, 2, 1]);
        assert_eq!(reordered.leader, 2, "a leader that stays keeps leading");
    }

    #[test]
    fn a_move_never_leaves_an_empty_isr() {
        // Only 1 is in sync, and 1 is the replica being removed: it stays until 2 syncs.
        let before = PartitionState::led(&[1, 2], &[1], 1);
        let moving = start(&before, &[2], all);
        assert_eq!(moving.replicas, vec![2, 1]);
        assert_eq!(moving.removing_replicas, vec![1]);
        assert!(moving.is_reassigning());
        assert_eq!(moving.leader, 1);
    }

    #[test]
    fn cancelling_goes_back_to_the_replicas_before_the_move() {
        let before = PartitionState::led(&[1, 2], &[1, 2], 1);
        let mut moving = start(&before, &[3, 4], all);
        moving.isr.push(3);
        let back = cancel(&moving, all);
        assert_eq!(back.replicas, vec![1, 2]);
        assert_eq!(back.isr, vec![1, 2]);
        assert!(!back.is_reassigning());
        assert_eq!(back.leader, 1);
    }

    #[test]
    fn a_new_move_replaces_the_one_in_progress() {
        // [1, 2] moving to [3, 4]; 3 caught up, 4 not yet.
        let mut in_flight = start(&PartitionState::led(&[1, 2], &[1, 2], 1), &[3, 4], all);
        in_flight.isr.push(3);
        let second = start(&in_flight, &[5, 2], all);
        assert_eq!(second.replicas, vec![5, 2, 1]);
        assert_eq!(second.adding_replicas, vec![5]);
        assert_eq!(second.removing_replicas, vec![1]);
        assert_eq!(second.isr, vec![1, 2], "3 is no replica of the new move");
    }

    #[test]
    fn a_removed_leader_without_a_successor_that_may_lead_leaves_the_partition_offline() {
        let before = PartitionState::led(&[1, 2], &[1, 2], 1);
        let done = start(&before, &[2], |id| id != 2);
        assert_eq!(done.replicas, vec![2]);
        assert_eq!(done.leader, NO_LEADER);
    }
}
