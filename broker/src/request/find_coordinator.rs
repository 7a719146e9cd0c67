//! FindCoordinator: a group's coordinator is the leader of the group's `__consumer_offsets`
//! partition, as the metadata image names it. The first request creates
//! `__consumer_offsets`. Transaction coordinators are not offered.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::group_route::ensure_offsets_topic;
use crate::errors::{code, NONE};
use crate::groups::{partition_for, OFFSETS_TOPIC};
use crate::metadata::MetadataImage;
use crate::shard_state::Shard;

const KEY_TYPE_GROUP: i8 = 0;

pub async fn handle(
    shard: &Rc<Shard>,
    request: FindCoordinatorRequest,
    version: i16,
) -> ResponseKind {
    let keys: Vec<StrBytes> = if version >= 4 {
        request.coordinator_keys
    } else {
        vec![request.key]
    };
    let available = if request.key_type != KEY_TYPE_GROUP {
        Err(code(ResponseError::CoordinatorNotAvailable))
    } else {
        ensure_offsets_topic(shard).await
    };
    let image = shard.image();
    let mut found = keys.into_iter().map(|key| {
        let coordinator = available.and_then(|()| coordinator_of(&image, key.as_str()));
        let (node, host, port, error_code) = match coordinator {
            Ok((node, host, port)) => (node, host, port, NONE),
            Err(error_code) => (-1, String::new(), -1, error_code),
        };
        let message = (error_code != NONE)
            .then(|| StrBytes::from_static_str("The coordinator is not available."));
        Coordinator::default()
            .with_key(key)
            .with_node_id(BrokerId(node))
            .with_host(StrBytes::from_string(host))
            .with_port(port)
            .with_error_code(error_code)
            .with_error_message(message)
    });
    let mut response = FindCoordinatorResponse::default();
    if version >= 4 {
        response.coordinators = found.collect();
    } else if let Some(coordinator) = found.next() {
        response.error_code = coordinator.error_code;
        if version >= 1 {
            response.error_message = coordinator.error_message;
        }
        response.node_id = coordinator.node_id;
        response.host = coordinator.host;
        response.port = coordinator.port;
    }
    ResponseKind::FindCoordinator(response)
}

/// The live leader of the group's offsets partition: (node id, host, port).
fn coordinator_of(image: &MetadataImage, group_id: &str) -> Result<(i32, String, i32), i16> {
    let unavailable = code(ResponseError::CoordinatorNotAvailable);
    let topic = image.topic(OFFSETS_TOPIC).ok_or(unavailable)?;
    let partition = topic
        .partition(partition_for(group_id, topic.partition_count()))
        .ok_or(unavailable)?;
    let broker = image.live_broker(partition.leader).ok_or(unavailable)?;
    let endpoint = broker.endpoint().ok_or(unavailable)?;
    Ok((broker.id, endpoint.host.clone(), i32::from(endpoint.port)))
}
