//! Answers of requests that change many partitions at once (ElectLeaders,
//! AlterPartitionReassignments): running the change on the controller's shard and shaping
//! its outcomes per topic, in the order the topics came.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;

use crate::controller::{Controller, ForwardedRequest, PartitionOutcome, Refusal, TopicPartition};
use crate::errors::code;
use crate::shard_state::Shard;

/// Runs `request` of a client at `client` on the active controller (through shard 0) and
/// returns its outcome per partition; a refusal of the whole request is returned as it is.
pub async fn change(
    shard: &Rc<Shard>,
    request: ForwardedRequest,
    client: Option<IpAddr>,
) -> Result<Vec<PartitionOutcome>, Refusal> {
    let changed = shard
        .router
        .call(shard, 0, move |controller: Rc<Shard>| async move {
            Controller::change_partitions(&controller, request, client).await
        })
        .await;
    changed.unwrap_or_else(|stopped| {
        Err(Refusal {
            error_code: code(ResponseError::BrokerNotAvailable),
            message: stopped.to_string(),
        })
    })
}

/// `refusal` for each of `partitions`.
pub fn refused(partitions: Vec<TopicPartition>, refusal: &Refusal) -> Vec<PartitionOutcome> {
    partitions
        .into_iter()
        .map(|(topic, partition)| PartitionOutcome {
            topic,
            partition,
            refusal: Some(refusal.clone()),
        })
        .collect()
}

/// Outcomes grouped by topic, topics in the order they first come.
pub fn by_topic(outcomes: Vec<PartitionOutcome>) -> Vec<(String, Vec<PartitionOutcome>)> {
    let mut topics: Vec<(String, Vec<PartitionOutcome>)> = Vec::new();
    for outcome in outcomes {
        match topics.iter_mut().find(|(name, _)| *name == outcome.topic) {
            Some((_, list)) => list.push(outcome),
            None => topics.push((outcome.topic.clone(), vec![outcome])),
        }
    }
    topics
}

/// Kafka's error code and message of one outcome.
pub fn error(outcome: &PartitionOutcome) -> (i16, Option<String>) {
    match &outcome.refusal {
        None => (crate::errors::NONE, None),
        Some(refusal) => (refusal.error_code, Some(refusal.message.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_grouped_by_topic_in_their_first_order() {
        let outcome = |topic: &str, partition| PartitionOutcome {
            topic: topic.into(),
            partition,
            refusal: None,
        };
        let grouped = by_topic(vec![outcome("b", 0), outcome("a", 1), outcome("b", 2)]);
        let shape: Vec<(String, Vec<i32>)> = grouped
            .into_iter()
            .map(|(topic, list)| (topic, list.iter().map(|o| o.partition).collect()))
            .collect();
        assert_eq!(shape, vec![("b".into(), vec![0, 2]), ("a".into(), vec![1])]);
    }
}
