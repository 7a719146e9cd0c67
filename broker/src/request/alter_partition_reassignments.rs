//! AlterPartitionReassignments (KIP-455): move partitions' replicas to the brokers named,
//! or cancel a move in progress (null replicas), by the active controller. A move adds the
//! new replicas first; they fetch from the leader, and once all are in sync the old ones
//! leave and delete their copies (see `controller::reassign`). Answered once the move has
//! started (or ended) on this node. v1 (KIP-860): with `allow_replication_factor_change`
//! false, a move that changes a partition's replica count is refused.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::partition_outcomes::{by_topic, change, error, refused};
use crate::controller::{ForwardedRequest, Reassignment};
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: AlterPartitionReassignmentsRequest,
    version: i16,
    client: Option<IpAddr>,
) -> ResponseKind {
    let allow_replication_factor_change = version == 0 || request.allow_replication_factor_change;
    let reassignments: Vec<Reassignment> = request
        .topics
        .into_iter()
        .flat_map(|topic| {
            let name = topic.name.to_string();
            topic.partitions.into_iter().map(move |p| {
                let target = p.replicas.map(|ids| ids.iter().map(|id| id.0).collect());
                ((name.clone(), p.partition_index), target)
            })
        })
        .collect();
    let named = reassignments.iter().map(|(tp, _)| tp.clone()).collect();
    let request = ForwardedRequest::AlterReassignments {
        reassignments,
        allow_replication_factor_change,
    };
    let mut response = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_replication_factor_change);
    let outcomes = match change(shard, request, client).await {
        Ok(outcomes) => outcomes,
        Err(refusal) => {
            response.error_code = refusal.error_code;
            response.error_message = Some(StrBytes::from_string(refusal.message.clone()));
            refused(named, &refusal)
        }
    };
    for (topic, outcomes) in by_topic(outcomes) {
        let partitions = outcomes
            .iter()
            .map(|outcome| {
                let (error_code, message) = error(outcome);
                ReassignablePartitionResponse::default()
                    .with_partition_index(outcome.partition)
                    .with_error_code(error_code)
                    .with_error_message(message.map(StrBytes::from_string))
            })
            .collect();
        response.responses.push(
            ReassignableTopicResponse::default()
                .with_name(StrBytes::from_string(topic).into())
                .with_partitions(partitions),
        );
    }
    ResponseKind::AlterPartitionReassignments(response)
}
