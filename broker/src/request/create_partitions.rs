//! CreatePartitions: grow a topic's partition count (never shrink); new partitions are
//! opened on their owning shards before the answer. Assignments may only name this node.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::controller::Controller;
use crate::errors::{code, NONE};
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: CreatePartitionsRequest) -> ResponseKind {
    let validate_only = request.validate_only;
    let node = shard.config.node_id;
    let mut response = CreatePartitionsResponse::default();
    for topic in request.topics {
        let mut result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        let foreign = topic
            .assignments
            .iter()
            .flatten()
            .any(|assignment| assignment.broker_ids.iter().any(|id| id.0 != node));
        if foreign {
            result.error_code = code(ResponseError::InvalidReplicaAssignment);
            result.error_message = Some(StrBytes::from_string(format!(
                "Assignments may only name broker {node}."
            )));
            response.results.push(result);
            continue;
        }
        let (name, count) = (topic.name.to_string(), topic.count);
        let grown = shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                Controller::create_partitions(&controller, &name, count, validate_only).await
            })
            .await;
        result.error_code = match grown {
            Ok(Ok(())) => NONE,
            Ok(Err(refusal)) => {
                result.error_message = Some(StrBytes::from_string(refusal.message));
                refusal.error_code
            }
            Err(_) => code(ResponseError::BrokerNotAvailable),
        };
        response.results.push(result);
    }
    ResponseKind::CreatePartitions(response)
}
