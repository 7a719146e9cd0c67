//! FindCoordinator: this node coordinates every group (it is the whole cluster). The first
//! request creates `__consumer_offsets`. Transaction coordinators are not offered.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::group_route::ensure_offsets_topic;
use crate::errors::{code, NONE};
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
    let error_code = if request.key_type != KEY_TYPE_GROUP {
        code(ResponseError::CoordinatorNotAvailable)
    } else {
        ensure_offsets_topic(shard).await.err().unwrap_or(NONE)
    };
    let config = &shard.config;
    let (node, host, port) = if error_code == NONE {
        (
            config.node_id,
            config.advertised.host.clone(),
            i32::from(config.advertised.port),
        )
    } else {
        (-1, String::new(), -1)
    };
    let message = (error_code != NONE)
        .then(|| StrBytes::from_static_str("The coordinator is not available."));
    let mut response = FindCoordinatorResponse::default();
    if version >= 4 {
        response.coordinators = keys
            .into_iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(node))
                    .with_host(StrBytes::from_string(host.clone()))
                    .with_port(port)
                    .with_error_code(error_code)
                    .with_error_message(message.clone())
            })
            .collect();
    } else {
        response.error_code = error_code;
        if version >= 1 {
            response.error_message = message;
        }
        response.node_id = BrokerId(node);
        response.host = StrBytes::from_string(host);
        response.port = port;
    }
    ResponseKind::FindCoordinator(response)
}
