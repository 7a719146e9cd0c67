//! Choosing a partition's leader, as Kafka's controller does (its `PartitionChangeBuilder`
//! elections): pure functions over the partition's state and the brokers that may lead.
//!
//! Invariants:
//! - A clean election (preferred or online) picks only an ISR member that may lead (a
//!   registered, unfenced broker not shutting down), so the new leader holds every record
//!   the high watermark covers: no acknowledged acks=all record is lost.
//! - An unclean election happens only when asked for (ElectLeaders with the unclean type,
//!   or `unclean.leader.election.enable` on the topic) and only when no ISR member may
//!   lead; it picks a replica that may lead and makes it the ISR's only member. What the
//!   other replicas hold past its log is then lost, as Kafka warns.
//! - A current leader that may still lead is kept by every election but the preferred one.

use crate::metadata::{PartitionState, NO_LEADER};

/// How a leader is chosen (Kafka's `ElectionType` and the controller's own elections).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Election {
    /// The preferred replica (the first), if it may lead and is in sync; else as `Online`.
    Preferred,
    /// The current leader if it may still lead, else the first ISR member that may.
    Online,
    /// As `Online`, and when no ISR member may lead, the first replica that may.
    Unclean,
}

impl Election {
    /// Kafka's `ElectionType` of ElectLeaders v1+: 0 preferred, 1 unclean.
    pub fn from_election_type(election_type: i8) -> Option<Election> {
        match election_type {
            0 => Some(Election::Preferred),
            1 => Some(Election::Unclean),
            _ => None,
        }
    }
}

/// The leader an election chose, and the ISR it leaves when it changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elected {
    /// The new leader, or [`NO_LEADER`] when no replica may lead.
    pub leader: i32,
    /// `Some([leader])` after an unclean election: the only replica known to hold its log.
    pub isr: Option<Vec<i32>>,
}

/// The leader `election` chooses for `state` among the replicas `may_lead` accepts.
pub fn elect(
    state: &PartitionState,
    election: Election,
    may_lead: impl Fn(i32) -> bool,
) -> Elected {
    let in_sync = |id: i32| state.isr.contains(&id) && may_lead(id);
    let clean = |leader| Elected { leader, isr: None };
    if election == Election::Preferred {
        if let Some(&preferred) = state.replicas.first().filter(|&&id| in_sync(id)) {
            return clean(preferred);
        }
    }
    if state.leader != NO_LEADER && in_sync(state.leader) {
        return clean(state.leader);
    }
    if let Some(&leader) = state.replicas.iter().find(|&&id| in_sync(id)) {
        return clean(leader);
    }
    if election == Election::Unclean {
        if let Some(&leader) = state.replicas.iter().find(|&&id| may_lead(id)) {
            return Elected {
                leader,
                isr: Some(vec![leader]),
            };
        }
    }
    clean(NO_LEADER)
}

/// Whether the preferred replica leads (Kafka's `hasPreferredLeader`).
pub fn has_preferred_leader(state: &PartitionState) -> bool {
    state.replicas.first() == Some(&state.leader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(elected: Elected) -> i32 {
        assert_eq!(elected.isr, None, "a clean election keeps the ISR");
        elected.leader
    }

    #[test]
    fn preferred_election_picks_the_first_replica_when_it_is_in_sync_and_may_lead() {
        let moved = PartitionState::led(&[1, 2, 3], &[1, 2, 3], 2);
        assert_eq!(leader(elect(&moved, Election::Preferred, |_| true)), 1);
        // Out of sync, or fenced: the current leader stays.
        let lagging = PartitionState::led(&[1, 2, 3], &[2, 3], 2);
        assert_eq!(leader(elect(&lagging, Election::Preferred, |_| true)), 2);
        assert_eq!(leader(elect(&moved, Election::Preferred, |id| id != 1)), 2);
        // Neither may lead: the next in-sync replica in replica order.
        assert_eq!(leader(elect(&moved, Election::Preferred, |id| id == 3)), 3);
    }

    #[test]
    fn online_election_keeps_a_leader_that_may_lead_and_else_takes_the_first_isr_member() {
        let led = PartitionState::led(&[1, 2, 3], &[1, 2, 3], 2);
        assert_eq!(leader(elect(&led, Election::Online, |_| true)), 2);
        assert_eq!(leader(elect(&led, Election::Online, |id| id != 2)), 1);
        let leaderless = PartitionState::led(&[1, 2, 3], &[3], NO_LEADER);
        assert_eq!(leader(elect(&leaderless, Election::Online, |_| true)), 3);
    }

    #[test]
    fn no_clean_election_picks_a_replica_outside_the_isr() {
        // Broker 3 holds everything acknowledged; 1 and 2 may be behind it.
        let offline = PartitionState::led(&[1, 2, 3], &[3], NO_LEADER);
        for election in [Election::Preferred, Election::Online] {
            assert_eq!(leader(elect(&offline, election, |id| id != 3)), NO_LEADER);
        }
    }

    #[test]
    fn unclean_election_takes_a_live_replica_only_when_no_isr_member_may_lead() {
        let offline = PartitionState::led(&[1, 2, 3], &[3], NO_LEADER);
        assert_eq!(
            elect(&offline, Election::Unclean, |id| id != 3),
            Elected {
                leader: 1,
                isr: Some(vec![1])
            }
        );
        // An ISR member that may lead is always preferred to an unclean choice.
        assert_eq!(leader(elect(&offline, Election::Unclean, |_| true)), 3);
        assert_eq!(
            leader(elect(&offline, Election::Unclean, |_| false)),
            NO_LEADER
        );
    }

    #[test]
    fn election_types_are_kafkas() {
        assert_eq!(Election::from_election_type(0), Some(Election::Preferred));
        assert_eq!(Election::from_election_type(1), Some(Election::Unclean));
        assert_eq!(Election::from_election_type(2), None);
        assert!(has_preferred_leader(&PartitionState::led(
            &[1, 2],
            &[1, 2],
            1
        )));
        assert!(!has_preferred_leader(&PartitionState::led(
            &[1, 2],
            &[1, 2],
            2
        )));
    }
}
