//! SyncGroup: the leader hands in every member's assignment; each member waits on the
//! coordinator shard for its own.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ResponseKind, SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;

use super::group_route::{on_coordinator, owned, string};
use crate::errors::code;
use crate::groups::group::SyncOutcome;
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: SyncGroupRequest, version: i16) -> ResponseKind {
    let group_id = string(&request.group_id.0);
    let member_id = string(&request.member_id);
    let instance_id = request.group_instance_id.as_ref().map(string);
    let generation = request.generation_id;
    let assignments = assignments(&request);
    let group = group_id.clone();
    let outcome = on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
        let waiting = owner
            .groups
            .sync(
                &owner,
                &group,
                &member_id,
                instance_id.as_deref(),
                generation,
                assignments,
            )
            .await;
        match waiting {
            Err(immediate) => immediate,
            Ok(answer) => answer.recv_async().await.unwrap_or_else(|_| SyncOutcome {
                error_code: code(ResponseError::RebalanceInProgress),
                ..SyncOutcome::default()
            }),
        }
    })
    .await
    .unwrap_or_else(|error_code| SyncOutcome {
        error_code,
        ..SyncOutcome::default()
    });
    let mut response = SyncGroupResponse::default()
        .with_error_code(outcome.error_code)
        .with_assignment(outcome.assignment);
    if version >= 5 {
        response.protocol_type = outcome.protocol_type.map(StrBytes::from_string);
        response.protocol_name = outcome.protocol.map(StrBytes::from_string);
    }
    ResponseKind::SyncGroup(response)
}

/// The leader's assignments by member, copied out of the request (see [`owned`]).
pub(super) fn assignments(request: &SyncGroupRequest) -> Vec<(String, bytes::Bytes)> {
    request
        .assignments
        .iter()
        .map(|a| (string(&a.member_id), owned(&a.assignment)))
        .collect()
}
