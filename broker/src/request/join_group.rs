//! JoinGroup: runs on the group's coordinator shard and waits there until the rebalance
//! completes (or answers at once: MEMBER_ID_REQUIRED, errors, an unchanged member; or
//! once persisted: a restarted static member of a Stable group).

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::group_route::{on_coordinator, owned, string};
use crate::groups::coordinator::JoinStep;
use crate::groups::group::{JoinOutcome, JoinRequest};
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: JoinGroupRequest,
    version: i16,
    client_id: String,
    client_host: String,
) -> ResponseKind {
    let group_id = string(&request.group_id.0);
    let join = join_request(&request, version, client_id, client_host);
    let member_id = join.member_id.clone();
    let group = group_id.clone();
    let outcome = on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
        match owner.groups.join(&owner, &group, join).await {
            JoinStep::Answer(immediate) => immediate,
            JoinStep::Wait(answer) => answer.recv_async().await.unwrap_or_else(|_| {
                JoinOutcome::error(kafka_protocol::error::ResponseError::UnknownMemberId, "")
            }),
        }
    })
    .await
    .unwrap_or_else(|error_code| JoinOutcome {
        error_code,
        generation: -1,
        member_id,
        ..JoinOutcome::default()
    });
    ResponseKind::JoinGroup(response(outcome, version))
}

/// What the group keeps of a JoinGroup: strings and protocol metadata copied out of the
/// request (see [`owned`]).
pub(super) fn join_request(
    request: &JoinGroupRequest,
    version: i16,
    client_id: String,
    client_host: String,
) -> JoinRequest {
    let session_timeout = Duration::from_millis(request.session_timeout_ms.max(0) as u64);
    JoinRequest {
        member_id: string(&request.member_id),
        instance_id: request.group_instance_id.as_ref().map(string),
        client_id,
        client_host,
        session_timeout,
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout: if version >= 1 {
            Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64)
        } else {
            session_timeout
        },
        protocol_type: string(&request.protocol_type),
        protocols: request
            .protocols
            .iter()
            .map(|p| (string(&p.name), owned(&p.metadata)))
            .collect(),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
    }
}

fn response(outcome: JoinOutcome, version: i16) -> JoinGroupResponse {
    let text = |s: String| StrBytes::from_string(s);
    let members = outcome
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(text(id))
                .with_group_instance_id(if version >= 5 {
                    instance.map(text)
                } else {
                    None
                })
                .with_metadata(metadata)
        })
        .collect();
    let mut response = JoinGroupResponse::default()
        .with_error_code(outcome.error_code)
        .with_generation_id(outcome.generation)
        .with_leader(text(outcome.leader))
        .with_member_id(text(outcome.member_id))
        .with_members(members);
    // Only v9+ has the field; the group sets it only for v9+ requests, so older ones lose
    // nothing here.
    if version >= 9 {
        response.skip_assignment = outcome.skip_assignment;
    }
    // Before v7 the protocol name is a non-null string and there is no protocol type.
    if version >= 7 {
        response.protocol_type = outcome.protocol_type.map(text);
        response.protocol_name = outcome.protocol.map(text);
    } else {
        response.protocol_name = Some(text(outcome.protocol.unwrap_or_default()));
    }
    response
}
