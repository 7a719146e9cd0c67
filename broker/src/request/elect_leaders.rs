//! ElectLeaders (KIP-183, KIP-460): a new leader for the partitions named, or for every
//! partition when none is (then only partitions whose election was needed are answered),
//! by the active controller: the preferred replica if it is in sync and live, or, for an
//! unclean election of a partition without a leader, any live replica. Answered once this
//! node's shards serve the new leaders. Per partition: ELECTION_NOT_NEEDED,
//! PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
//! UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::partition_outcomes::{by_topic, change, error, refused};
use crate::controller::{Election, ForwardedRequest, TopicPartition};
use crate::errors::code;
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: ElectLeadersRequest,
    version: i16,
    client: Option<IpAddr>,
) -> ResponseKind {
    let mut response = ElectLeadersResponse::default();
    // v0 knows only preferred elections.
    let election_type = if version == 0 {
        0
    } else {
        request.election_type
    };
    let Some(election) = Election::from_election_type(election_type) else {
        response.error_code = code(ResponseError::InvalidRequest);
        return ResponseKind::ElectLeaders(response);
    };
    let partitions: Option<Vec<TopicPartition>> = request.topic_partitions.map(|topics| {
        topics
            .into_iter()
            .flat_map(|topic| {
                let name = topic.topic.to_string();
                topic.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .collect()
    });
    let request = ForwardedRequest::ElectLeaders {
        election,
        partitions: partitions.clone(),
    };
    let outcomes = match change(shard, request, client).await {
        Ok(outcomes) => outcomes,
        Err(refusal) => {
            if version >= 1 {
                response.error_code = refusal.error_code;
            }
            refused(partitions.unwrap_or_default(), &refusal)
        }
    };
    for (topic, outcomes) in by_topic(outcomes) {
        let results = outcomes
            .iter()
            .map(|outcome| {
                let (error_code, message) = error(outcome);
                PartitionResult::default()
                    .with_partition_id(outcome.partition)
                    .with_error_code(error_code)
                    .with_error_message(message.map(StrBytes::from_string))
            })
            .collect();
        response.replica_election_results.push(
            ReplicaElectionResult::default()
                .with_topic(StrBytes::from_string(topic).into())
                .with_partition_result(results),
        );
    }
    ResponseKind::ElectLeaders(response)
}
