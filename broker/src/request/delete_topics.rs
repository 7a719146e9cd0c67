//! DeleteTopics: by name (all versions) or by topic id (v6+); the controller removes the
//! topic from the metadata and every shard deletes its partitions' files before the answer.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::controller::{Controller, ForwardedRequest};
use crate::errors::{code, NONE};
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: DeleteTopicsRequest,
    version: i16,
    client: Option<IpAddr>,
) -> ResponseKind {
    let wanted: Vec<(Option<TopicName>, Uuid)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|name| (Some(name), Uuid::nil()))
            .collect()
    };
    let mut response = DeleteTopicsResponse::default();
    for (name, id) in wanted {
        let image = shard.image();
        let found = match &name {
            Some(name) => image.topic(name.as_str()),
            None => image.topic_by_id(&id),
        };
        let mut result = DeletableTopicResult::default()
            .with_name(name.clone())
            .with_topic_id(id);
        match found {
            None => {
                result.error_code = code(if name.is_some() {
                    ResponseError::UnknownTopicOrPartition
                } else {
                    ResponseError::UnknownTopicId
                });
            }
            Some(topic) => {
                let topic_id = topic.id;
                result.name = Some(TopicName(StrBytes::from_string(topic.name.clone())));
                result.topic_id = topic_id;
                let deleted = shard
                    .router
                    .call(shard, 0, move |controller: Rc<Shard>| async move {
                        let request = ForwardedRequest::DeleteTopic {
                            topic_id: topic_id.as_u128(),
                        };
                        Controller::change_topics(&controller, request, client).await
                    })
                    .await;
                result.error_code = match deleted {
                    Ok(Ok(())) => NONE,
                    Ok(Err(refusal)) => {
                        result.error_message = Some(StrBytes::from_string(refusal.message));
                        refusal.error_code
                    }
                    Err(_) => code(ResponseError::BrokerNotAvailable),
                };
            }
        }
        if version < 6 {
            result.topic_id = Uuid::nil();
        }
        if version < 5 {
            result.error_message = None;
        }
        response.responses.push(result);
    }
    ResponseKind::DeleteTopics(response)
}
