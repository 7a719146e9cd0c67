//! CreatePartitions: grow a topic's partition count (never shrink); new partitions are
//! placed by the controller, or on the registered brokers the assignments name, and opened
//! on their owning shards before the answer.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::controller::{Controller, ForwardedRequest};
use crate::errors::{code, NONE};
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: CreatePartitionsRequest,
    client: Option<IpAddr>,
) -> ResponseKind {
    let validate_only = request.validate_only;
    let mut response = CreatePartitionsResponse::default();
    for topic in request.topics {
        let mut result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        let (name, count) = (topic.name.to_string(), topic.count);
        // An empty list asks for no particular placement, as null does.
        let assignments = topic
            .assignments
            .filter(|a| !a.is_empty())
            .map(|assignments| {
                assignments
                    .into_iter()
                    .map(|assignment| assignment.broker_ids.iter().map(|id| id.0).collect())
                    .collect()
            });
        let grown = shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                let request = ForwardedRequest::CreatePartitions {
                    name,
                    partition_count: count,
                    assignments,
                    validate_only,
                };
                Controller::change_topics(&controller, request, client).await
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
