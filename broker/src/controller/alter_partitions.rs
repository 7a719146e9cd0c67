//! Kafka's AlterPartition: a leader asks the controller to change the ISRs of partitions it
//! leads, one item a partition, all of one shard's due changes in one request and one
//! commit (so a broker's death costs each leader one controller round trip, not one a
//! partition).
//!
//! Invariants: an item is committed only if its leader still leads at the leader and
//! partition epochs it computed the change at (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION
//! otherwise), its ISR holds the leader and only replicas (INVALID_REQUEST), and every
//! member it adds is a live broker as the incarnation its fetches named (INELIGIBLE_REPLICA,
//! KIP-903); a refused item changes nothing and does not stop the others. An ISR change that
//! brings a reassignment's last added replica in completes the reassignment in the same
//! record.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::cluster::{Executed, ForwardedRequest};
use super::partitions::change_record;
use super::{reassign, Controller, Refusal};
use crate::metadata::records::PartitionChangeRecord;
use crate::metadata::{MetadataImage, MetadataRecord};
use crate::partition::IsrChange;
use crate::shard_state::Shard;

/// One partition's ISR change in an AlterPartitions request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionItem {
    pub topic_id: u128,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    /// The broker epoch each ISR member fetched as (-1 unknown): KIP-903.
    pub broker_epochs: Vec<i64>,
}

impl Controller {
    /// Shard 0: this broker changes the ISRs of partitions it leads, `changes` given as
    /// (topic id, partition, change), on the active controller or forwarded to it. Answers
    /// each change's new partition epoch, or why it was refused; the image that carries
    /// the changes follows.
    pub async fn change_isrs(
        shard: &Rc<Shard>,
        changes: Vec<(Uuid, i32, IsrChange)>,
    ) -> Result<Vec<Result<i64, Refusal>>, Refusal> {
        let controller = Self::of(shard);
        let node = shard.config.node_id;
        let items = changes
            .into_iter()
            .map(|(topic_id, partition, change)| AlterPartitionItem {
                topic_id: topic_id.as_u128(),
                partition,
                leader_epoch: change.leader_epoch,
                partition_epoch: change.partition_epoch,
                isr: change.isr,
                broker_epochs: change.broker_epochs,
            })
            .collect();
        let request = ForwardedRequest::AlterPartitions {
            broker_id: node,
            broker_epoch: controller.broker_epoch(node),
            items,
        };
        controller
            .execute_or_forward(Some(shard), request)
            .await
            .map(Executed::epochs)
    }

    /// Kafka's AlterPartition from the leader `broker_id` (incarnation `broker_epoch`): the
    /// items that pass the checks are committed together; each answers its new partition
    /// epoch or its refusal.
    pub(super) async fn alter_partitions(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        items: Vec<AlterPartitionItem>,
    ) -> Vec<Result<i64, Refusal>> {
        let checked: Vec<Result<(MetadataRecord, i64), Refusal>> = {
            let image = self.proposed.borrow();
            let current = image.brokers.get(&broker_id).map(|b| b.epoch);
            if current != Some(broker_epoch) {
                let stale = Refusal::new(
                    ResponseError::StaleBrokerEpoch,
                    format!("broker {broker_id} is at epoch {current:?}, not {broker_epoch}"),
                );
                return items.iter().map(|_| Err(stale.clone())).collect();
            }
            items
                .into_iter()
                .map(|item| {
                    let next_epoch = i64::from(item.partition_epoch) + 1;
                    isr_record(&image, broker_id, item).map(|record| (record, next_epoch))
                })
                .collect()
        };
        let records: Vec<MetadataRecord> = checked
            .iter()
            .filter_map(|c| c.as_ref().ok().map(|(record, _)| record.clone()))
            .collect();
        let committed = if records.is_empty() {
            Ok(())
        } else {
            self.commit(records).await
        };
        checked
            .into_iter()
            .map(|c| match (&committed, c) {
                (Ok(()), c) => c.map(|(_, epoch)| epoch),
                (Err(refusal), Ok(_)) => Err(refusal.clone()),
                (Err(_), Err(refusal)) => Err(refusal),
            })
            .collect()
    }
}

/// The PartitionChange record of one AlterPartition item from leader `broker_id`, checked
/// against `image` (see the module's invariants).
fn isr_record(
    image: &MetadataImage,
    broker_id: i32,
    item: AlterPartitionItem,
) -> Result<MetadataRecord, Refusal> {
    let topic_id = Uuid::from_u128(item.topic_id);
    let partition = item.partition;
    let state = image
        .topic_by_id(&topic_id)
        .and_then(|topic| topic.partition(partition))
        .ok_or_else(|| Refusal::new(ResponseError::UnknownTopicOrPartition, "no such partition"))?;
    if state.leader != broker_id {
        return Err(Refusal::new(
            ResponseError::NotLeaderOrFollower,
            format!("broker {broker_id} does not lead the partition"),
        ));
    }
    if item.leader_epoch != state.leader_epoch {
        return Err(Refusal::new(
            ResponseError::FencedLeaderEpoch,
            format!("the leader epoch is {}", state.leader_epoch),
        ));
    }
    if item.partition_epoch != state.partition_epoch {
        return Err(Refusal::new(
            ResponseError::InvalidUpdateVersion,
            format!("the partition epoch is {}", state.partition_epoch),
        ));
    }
    let valid =
        item.isr.contains(&broker_id) && item.isr.iter().all(|id| state.replicas.contains(id));
    if !valid {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!(
                "ISR {:?} is not a set of replicas with the leader",
                item.isr
            ),
        ));
    }
    if let Some(ineligible) = item
        .isr
        .iter()
        .find(|id| !state.isr.contains(id) && image.live_broker(**id).is_none())
    {
        return Err(Refusal::new(
            ResponseError::IneligibleReplica,
            format!("broker {ineligible} is not live"),
        ));
    }
    // KIP-903: a member known by a fetch of another incarnation than the registered one (a
    // broker that restarted since, its log perhaps shorter) may not be in sync.
    let stale = item
        .isr
        .iter()
        .zip(&item.broker_epochs)
        .find(|(id, epoch)| {
            **epoch != -1 && image.brokers.get(id).is_none_or(|b| b.epoch != **epoch)
        });
    if let Some((id, epoch)) = stale {
        return Err(Refusal::new(
            ResponseError::IneligibleReplica,
            format!("broker {id} fetched as epoch {epoch}, which is not its registration"),
        ));
    }
    // The ISR change may complete a reassignment waiting for its added replicas.
    let mut next = state.clone();
    next.isr = item.isr;
    let next = reassign::complete_if_caught_up(next, |id| image.live_broker(id).is_some());
    // An ISR proposed as it is still moves the partition epoch: the leader waits for an
    // image past its proposal.
    Ok(
        change_record(topic_id, partition, state, &next).unwrap_or_else(|| {
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: partition,
                topic_id,
                isr: Some(next.isr),
                ..PartitionChangeRecord::default()
            })
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::image::topic_records;
    use crate::metadata::records::{BrokerRegistrationChangeRecord, RegisterBrokerRecord};
    use crate::metadata::{FileMetadataStore, PartitionState, TopicMeta};
    use futures_lite::future::block_on;

    /// A controller on a file store, brokers 1 to 3 live (epoch 1), and topic `t` of
    /// `partitions` partitions on all three, led by 1, with only 1 and 2 in sync.
    fn controller(dir: &std::path::Path, partitions: usize) -> (Controller, Uuid) {
        let store = Box::new(FileMetadataStore::new(dir, 1));
        let controller = Controller::load(store).expect("loads");
        let mut records = Vec::new();
        for broker_id in 1..=3 {
            records.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id,
                incarnation_id: Uuid::new_v4(),
                broker_epoch: 1,
                endpoints: Vec::new(),
                rack: None,
                fenced: true,
                in_controlled_shutdown: false,
            }));
            records.push(MetadataRecord::BrokerRegistrationChange(
                BrokerRegistrationChangeRecord {
                    broker_id,
                    broker_epoch: 1,
                    fenced: Some(false),
                    in_controlled_shutdown: None,
                },
            ));
        }
        let topic = TopicMeta {
            name: "t".into(),
            id: Uuid::new_v4(),
            partitions: vec![PartitionState::led(&[1, 2, 3], &[1, 2], 1); partitions],
            configs: Default::default(),
        };
        records.extend(topic_records(&topic));
        block_on(controller.commit(records)).expect("committed");
        (controller, topic.id)
    }

    fn item(topic_id: Uuid, partition: i32, isr: &[i32], epochs: &[i64]) -> AlterPartitionItem {
        AlterPartitionItem {
            topic_id: topic_id.as_u128(),
            partition,
            leader_epoch: 0,
            partition_epoch: 0,
            isr: isr.to_vec(),
            broker_epochs: epochs.to_vec(),
        }
    }

    #[test]
    fn a_leaders_changes_commit_together_and_a_refused_one_stops_no_other() {
        let dir = tempfile::tempdir().expect("tmp");
        let (controller, id) = controller(dir.path(), 4);
        let before = controller.metadata_end_offset();
        let items = vec![
            item(id, 0, &[1, 2, 3], &[-1, 1, 1]),
            item(id, 1, &[1, 2, 3], &[-1, 1, 0]), // 3 fetched as an incarnation before its own
            item(id, 2, &[2, 3], &[1, 1]),        // without its leader
            item(id, 3, &[1], &[-1]),
        ];
        let outcomes = block_on(controller.alter_partitions(1, 1, items));
        let codes: Vec<i16> = outcomes
            .iter()
            .map(|o| o.as_ref().map_or_else(|r| r.error_code, |_| 0))
            .collect();
        let ineligible = ResponseError::IneligibleReplica.code();
        let invalid = ResponseError::InvalidRequest.code();
        assert_eq!(codes, vec![0, ineligible, invalid, 0]);
        assert_eq!(outcomes[0], Ok(1), "the new partition epoch");
        assert_eq!(
            controller.metadata_end_offset(),
            before + 2,
            "the two accepted changes, and nothing of the refused ones"
        );
        let image = controller.committed.borrow();
        let isr = |p| image.partition("t", p).expect("partition").isr.clone();
        assert_eq!(
            (isr(0), isr(1), isr(3)),
            (vec![1, 2, 3], vec![1, 2], vec![1])
        );
        drop(image);
        // A stale incarnation of the leader itself is refused for every item.
        let outcomes = block_on(controller.alter_partitions(1, 0, vec![item(id, 1, &[1], &[-1])]));
        let stale = ResponseError::StaleBrokerEpoch.code();
        assert_eq!(outcomes[0].as_ref().map_err(|r| r.error_code), Err(stale));
    }
}
