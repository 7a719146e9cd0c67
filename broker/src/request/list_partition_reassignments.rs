//! ListPartitionReassignments (KIP-455): the moves in progress, of the partitions named or
//! of all, from this node's image (which an AlterPartitionReassignments answered here has
//! reached): each partition's replicas (targets first) and those being added and removed.
//! A partition named that does not exist is left out, as Kafka's controller leaves it.

use std::rc::Rc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::metadata::TopicMeta;
use crate::shard_state::Shard;

pub fn handle(shard: &Rc<Shard>, request: ListPartitionReassignmentsRequest) -> ResponseKind {
    let image = shard.image();
    let wanted: Vec<(&TopicMeta, Vec<i32>)> = match request.topics {
        Some(topics) => topics
            .iter()
            .filter_map(|t| Some((image.topic(t.name.as_str())?, t.partition_indexes.clone())))
            .collect(),
        None => image
            .topics
            .values()
            .map(|topic| (topic, (0..topic.partition_count()).collect()))
            .collect(),
    };
    let mut response = ListPartitionReassignmentsResponse::default();
    for (topic, indexes) in wanted {
        let partitions: Vec<OngoingPartitionReassignment> = indexes
            .into_iter()
            .filter_map(|index| Some((index, topic.partition(index)?)))
            .filter(|(_, state)| state.is_reassigning())
            .map(|(index, state)| {
                let ids = |ids: &[i32]| ids.iter().copied().map(BrokerId).collect();
                OngoingPartitionReassignment::default()
                    .with_partition_index(index)
                    .with_replicas(ids(&state.replicas))
                    .with_adding_replicas(ids(&state.adding_replicas))
                    .with_removing_replicas(ids(&state.removing_replicas))
            })
            .collect();
        if !partitions.is_empty() {
            response.topics.push(
                OngoingTopicReassignment::default()
                    .with_name(StrBytes::from_string(topic.name.clone()).into())
                    .with_partitions(partitions),
            );
        }
    }
    ResponseKind::ListPartitionReassignments(response)
}
