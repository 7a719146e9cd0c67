//! The controller's changes to partitions that are not a topic's: leader elections
//! (ElectLeaders, unclean elections the topics allow, the periodic return of leadership to
//! preferred replicas) and replica moves (AlterPartitionReassignments).
//!
//! Invariants: every change is computed as the partition's next state from the proposed
//! image ([`super::elect`], [`super::reassign`]) and committed as the PartitionChange record
//! of what differs, all partitions of one request in one batch; a partition whose change
//! is refused changes nothing, and does not stop the others.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::elect::{elect, has_preferred_leader, Election};
use super::{reassign, Controller, Refusal};
use crate::config::dynamic::CLUSTER_DEFAULT;
use crate::metadata::records::PartitionChangeRecord;
use crate::metadata::{MetadataImage, MetadataRecord, PartitionState, TopicMeta, NO_LEADER};
use crate::shard_state::Shard;

/// Elections of preferred leaders at most in one batch (Kafka's
/// `maxElectionsPerImbalance`), so that one balancing pass is one bounded commit.
const BALANCING_ELECTIONS_MAX: usize = 1000;

/// The outcome for one partition of a request that names many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOutcome {
    pub topic: String,
    pub partition: i32,
    /// `None`: done.
    pub refusal: Option<Refusal>,
}

/// A topic partition by name, as clients name it.
pub type TopicPartition = (String, i32);

/// One partition's requested replicas in AlterPartitionReassignments: `None` cancels the
/// reassignment in progress.
pub type Reassignment = (TopicPartition, Option<Vec<i32>>);

/// The record that takes a partition of `topic_id` from `old` to `new`, naming only what
/// changes; `None` when nothing does.
pub(super) fn change_record(
    topic_id: Uuid,
    partition: i32,
    old: &PartitionState,
    new: &PartitionState,
) -> Option<MetadataRecord> {
    let changed = |old: &Vec<i32>, new: &Vec<i32>| (old != new).then(|| new.clone());
    let record = PartitionChangeRecord {
        partition_id: partition,
        topic_id,
        isr: changed(&old.isr, &new.isr),
        leader: (old.leader != new.leader).then_some(new.leader),
        replicas: changed(&old.replicas, &new.replicas),
        removing_replicas: changed(&old.removing_replicas, &new.removing_replicas),
        adding_replicas: changed(&old.adding_replicas, &new.adding_replicas),
    };
    let unchanged = PartitionChangeRecord {
        partition_id: partition,
        topic_id,
        ..PartitionChangeRecord::default()
    };
    (record != unchanged).then_some(MetadataRecord::PartitionChange(record))
}

/// `state` led by the leader `election` chooses among the brokers `may_lead` accepts (and,
/// after an unclean election, with that leader as its only in-sync replica).
pub(super) fn elected(
    state: &PartitionState,
    election: Election,
    may_lead: impl Fn(i32) -> bool,
) -> PartitionState {
    let chosen = elect(state, election, may_lead);
    let mut next = state.clone();
    next.leader = chosen.leader;
    if let Some(isr) = chosen.isr {
        next.isr = isr;
    }
    next
}

impl Controller {
    /// Whether `topic` allows an out-of-sync replica to lead when no in-sync one can
    /// (`unclean.leader.election.enable`: the topic's, else the cluster-wide dynamic
    /// default, else the static one, as KRaft's controller resolves it).
    pub(super) fn allows_unclean(&self, topic: &TopicMeta) -> bool {
        const KEY: &str = "unclean.leader.election.enable";
        let cluster_default = self
            .proposed
            .borrow()
            .broker_configs
            .get(CLUSTER_DEFAULT)
            .and_then(|configs| configs.get(KEY))
            .map(|value| value == "true");
        match topic.configs.get(KEY) {
            Some(value) => value == "true",
            None => cluster_default.unwrap_or(self.unclean_default.get()),
        }
    }

    /// The election a partition of `topic` gets when its leader is lost.
    pub(super) fn election_on_failure(&self, topic: &TopicMeta) -> Election {
        if self.allows_unclean(topic) {
            Election::Unclean
        } else {
            Election::Online
        }
    }

    /// PartitionChange records giving each partition of the proposed image the state
    /// `change` picks for it (`None` or an equal state: unchanged).
    pub(super) fn partition_changes(
        &self,
        mut change: impl FnMut(&TopicMeta, &PartitionState) -> Option<PartitionState>,
    ) -> Vec<MetadataRecord> {
        let image = self.proposed.borrow();
        let mut records = Vec::new();
        for topic in image.topics.values() {
            for (index, state) in (0..).zip(&topic.partitions) {
                let next = change(topic, state);
                records.extend(next.and_then(|next| change_record(topic.id, index, state, &next)));
            }
        }
        records
    }

    /// Leaders for the partitions of `topic_id` that have none, if an in-sync replica may
    /// lead again or the topic allows an unclean election; published before returning.
    pub(super) async fn elect_leaderless(shard: &Rc<Shard>, topic_id: Uuid) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        let records = {
            let image = controller.proposed.borrow();
            let Some(topic) = image.topic_by_id(&topic_id) else {
                return Ok(());
            };
            let election = controller.election_on_failure(topic);
            let may_lead = |id| image.live_broker(id).is_some();
            (0..)
                .zip(&topic.partitions)
                .filter(|(_, state)| state.leader == NO_LEADER)
                .filter_map(|(index, state)| {
                    change_record(topic.id, index, state, &elected(state, election, may_lead))
                })
                .collect::<Vec<_>>()
        };
        if records.is_empty() {
            return Ok(());
        }
        controller.commit(records).await?;
        Controller::publish(shard, Some(topic_id)).await
    }

    /// Kafka's ElectLeaders: a new leader for each of `partitions` (every partition when
    /// `None`, answering only for those whose election was needed) by `election`, all in
    /// one commit, published before returning.
    pub(super) async fn elect_leaders(
        shard: &Rc<Shard>,
        election: Election,
        partitions: Option<Vec<TopicPartition>>,
    ) -> Result<Vec<PartitionOutcome>, Refusal> {
        let controller = Self::of(shard);
        let every = partitions.is_none();
        let (records, outcomes) = {
            let image = controller.proposed.borrow();
            let wanted = partitions.unwrap_or_else(|| every_partition(&image));
            let mut records = Vec::new();
            let mut outcomes = Vec::new();
            for (topic, partition) in wanted {
                let outcome = controller.elect_one(&image, &topic, partition, election);
                let refusal = match outcome {
                    Ok(record) => {
                        records.push(record);
                        None
                    }
                    Err(refusal) => Some(refusal),
                };
                let not_needed = refusal.as_ref().is_some_and(|r| {
                    r.error_code == crate::errors::code(ResponseError::ElectionNotNeeded)
                });
                if !(every && not_needed) {
                    outcomes.push(PartitionOutcome {
                        topic,
                        partition,
                        refusal,
                    });
                }
            }
            (records, outcomes)
        };
        if !records.is_empty() {
            controller.commit(records).await?;
            Controller::publish(shard, None).await?;
        }
        Ok(outcomes)
    }

    /// The record of one partition's election, or Kafka's reason for none
    /// (`ReplicationControlManager.electLeader`).
    fn elect_one(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
        election: Election,
    ) -> Result<MetadataRecord, Refusal> {
        let (topic_id, state) = find(image, topic, partition)
            .ok_or_else(|| unknown(format!("No such partition as {topic}-{partition}")))?;
        let needed = match election {
            Election::Preferred => !has_preferred_leader(state),
            Election::Online | Election::Unclean => state.leader == NO_LEADER,
        };
        if !needed {
            return Err(Refusal::new(
                ResponseError::ElectionNotNeeded,
                "Leader election not needed for topic partition.",
            ));
        }
        let next = elected(state, election, |id| image.live_broker(id).is_some());
        match change_record(topic_id, partition, state, &next) {
            Some(record) => Ok(record),
            None if election == Election::Preferred => Err(Refusal::new(
                ResponseError::PreferredLeaderNotAvailable,
                format!(
                    "The preferred leader {} of {topic}-{partition} is not in sync or not live.",
                    state.replicas[0]
                ),
            )),
            None => Err(Refusal::new(
                ResponseError::EligibleLeadersNotAvailable,
                format!("No live replica of {topic}-{partition} may lead it."),
            )),
        }
    }

    /// While active: one pass of [`Controller::balance_leaders`], logged.
    pub(super) async fn balance_leaders_if_active(shard: &Rc<Shard>) {
        if Self::of(shard).active_term.get().is_none() {
            return;
        }
        match Controller::balance_leaders(shard).await {
            Ok(0) => {}
            Ok(moved) => tracing::info!(moved, "leadership given back to preferred replicas"),
            Err(refusal) => tracing::warn!(message = refusal.message, "balancing leaders"),
        }
    }

    /// Auto leader rebalance (`auto.leader.rebalance.enable`): gives every partition whose
    /// preferred replica is in sync and live, and not leading, back to it. Published before
    /// returning; at most `BALANCING_ELECTIONS_MAX` partitions a pass.
    pub(super) async fn balance_leaders(shard: &Rc<Shard>) -> Result<usize, Refusal> {
        let controller = Self::of(shard);
        let records: Vec<MetadataRecord> = {
            let image = controller.proposed.borrow();
            let may_lead = |id| image.live_broker(id).is_some();
            image
                .topics
                .values()
                .flat_map(|topic| {
                    (0..)
                        .zip(&topic.partitions)
                        .map(move |(i, s)| (topic, i, s))
                })
                .filter(|(_, _, state)| !has_preferred_leader(state))
                .filter_map(|(topic, index, state)| {
                    let next = elected(state, Election::Preferred, may_lead);
                    has_preferred_leader(&next)
                        .then(|| change_record(topic.id, index, state, &next))
                        .flatten()
                })
                .take(BALANCING_ELECTIONS_MAX)
                .collect()
        };
        let count = records.len();
        if count > 0 {
            controller.commit(records).await?;
            Controller::publish(shard, None).await?;
        }
        Ok(count)
    }

    /// Kafka's AlterPartitionReassignments: starts (or cancels, for `None`) moving each
    /// partition's replicas, all in one commit, published before returning. With
    /// `allow_replication_factor_change` false (v1+), a move that changes a partition's
    /// replica count is refused.
    pub(super) async fn alter_reassignments(
        shard: &Rc<Shard>,
        reassignments: Vec<Reassignment>,
        allow_replication_factor_change: bool,
    ) -> Result<Vec<PartitionOutcome>, Refusal> {
        let controller = Self::of(shard);
        let mut records = Vec::new();
        let mut outcomes = Vec::new();
        {
            let image = controller.proposed.borrow();
            for ((topic, partition), target) in reassignments {
                let outcome = controller.reassign_one(
                    &image,
                    (&topic, partition),
                    target.as_deref(),
                    allow_replication_factor_change,
                );
                let refusal = match outcome {
                    Ok(record) => {
                        records.extend(record);
                        None
                    }
                    Err(refusal) => Some(refusal),
                };
                outcomes.push(PartitionOutcome {
                    topic,
                    partition,
                    refusal,
                });
            }
        }
        if !records.is_empty() {
            controller.commit(records).await?;
            Controller::publish(shard, None).await?;
        }
        Ok(outcomes)
    }

    /// The record that starts or cancels one partition's move (none for a move to where it
    /// is), or Kafka's reason to refuse it.
    fn reassign_one(
        &self,
        image: &MetadataImage,
        (topic, partition): (&str, i32),
        target: Option<&[i32]>,
        allow_replication_factor_change: bool,
    ) -> Result<Option<MetadataRecord>, Refusal> {
        let (topic_id, state) = find(image, topic, partition)
            .ok_or_else(|| unknown(format!("Unable to find partition {topic}-{partition}.")))?;
        let may_lead = |id| image.live_broker(id).is_some();
        let next = match target {
            None if !state.is_reassigning() => {
                return Err(Refusal::new(
                    ResponseError::NoReassignmentInProgress,
                    format!(
                    "Unable to cancel reassignment for {topic}-{partition}: none is in progress."
                ),
                ))
            }
            None => reassign::cancel(state, may_lead),
            Some(target) => {
                self.check_assignments(&[target.to_vec()], None)?;
                let original = reassign::original_replicas(state).len();
                if !allow_replication_factor_change && target.len() != original {
                    return Err(Refusal::new(
                        ResponseError::InvalidReplicationFactor,
                        format!(
                            "The replication factor is changed from {original} to {} but \
                             allowReplicationFactorChange is false.",
                            target.len()
                        ),
                    ));
                }
                reassign::start(state, target, may_lead)
            }
        };
        Ok(change_record(topic_id, partition, state, &next))
    }
}

/// Partition `partition` of `topic` in `image`, with its topic's id.
fn find<'a>(
    image: &'a MetadataImage,
    topic: &str,
    partition: i32,
) -> Option<(Uuid, &'a PartitionState)> {
    let topic = image.topic(topic)?;
    Some((topic.id, topic.partition(partition)?))
}

/// UNKNOWN_TOPIC_OR_PARTITION, in Kafka's words for the request.
fn unknown(message: String) -> Refusal {
    Refusal::new(ResponseError::UnknownTopicOrPartition, message)
}

/// Every partition of `image`, by topic name and index.
fn every_partition(image: &MetadataImage) -> Vec<TopicPartition> {
    image
        .topics
        .values()
        .flat_map(|topic| (0..topic.partition_count()).map(|index| (topic.name.clone(), index)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_record_names_only_what_differs() {
        let id = Uuid::new_v4();
        let old = PartitionState::led(&[1, 2, 3], &[1, 2, 3], 1);
        assert_eq!(change_record(id, 4, &old, &old), None);
        let mut new = old.clone();
        new.leader = 2;
        new.isr = vec![2, 3];
        let Some(MetadataRecord::PartitionChange(record)) = change_record(id, 4, &old, &new) else {
            panic!("a change");
        };
        assert_eq!(
            record,
            PartitionChangeRecord {
                partition_id: 4,
                topic_id: id,
                isr: Some(vec![2, 3]),
                leader: Some(2),
                ..PartitionChangeRecord::default()
            }
        );
    }

    #[test]
    fn an_unclean_election_leaves_its_leader_alone_in_sync() {
        let offline = PartitionState::led(&[1, 2, 3], &[3], NO_LEADER);
        let next = elected(&offline, Election::Unclean, |id| id == 2);
        assert_eq!((next.leader, next.isr), (2, vec![2]));
        let next = elected(&offline, Election::Online, |id| id == 2);
        assert_eq!((next.leader, next.isr), (NO_LEADER, vec![3]));
    }
}
