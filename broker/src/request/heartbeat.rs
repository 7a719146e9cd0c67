//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use std::rc::Rc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, ResponseKind};

use super::group_route::{on_coordinator, string};
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: HeartbeatRequest) -> ResponseKind {
    let group_id = string(&request.group_id.0);
    let member_id = string(&request.member_id);
    let instance_id = request.group_instance_id.as_ref().map(string);
    let generation = request.generation_id;
    let group = group_id.clone();
    let error_code = on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
        owner.groups.heartbeat(
            &owner,
            &group,
            &member_id,
            instance_id.as_deref(),
            generation,
        )
    })
    .await
    .unwrap_or_else(|error_code| error_code);
    ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(error_code))
}
