//! LeaveGroup: one member (v0–v2) or a batch of members (v3+) leave; the rest rebalance.

use std::rc::Rc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::group_route::{on_coordinator, string};
use crate::errors::NONE;
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: LeaveGroupRequest, version: i16) -> ResponseKind {
    let group_id = string(&request.group_id.0);
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| {
                (
                    string(&m.member_id),
                    m.group_instance_id.as_ref().map(string),
                )
            })
            .collect()
    } else {
        vec![(string(&request.member_id), None)]
    };
    let asked = members.clone();
    let group = group_id.clone();
    let (error_code, codes) =
        on_coordinator(shard, &group_id, move |owner: Rc<Shard>| async move {
            owner.groups.leave(&owner, &group, &members).await
        })
        .await
        .unwrap_or_else(|error_code| (error_code, vec![error_code; asked.len()]));
    let mut response = LeaveGroupResponse::default();
    if version >= 3 {
        response.error_code = error_code;
        response.members = asked
            .into_iter()
            .zip(codes)
            .map(|((member_id, instance_id), member_code)| {
                MemberResponse::default()
                    .with_member_id(StrBytes::from_string(member_id))
                    .with_group_instance_id(instance_id.map(StrBytes::from_string))
                    .with_error_code(member_code)
            })
            .collect();
    } else {
        // One member: its error is the answer's error.
        response.error_code = if error_code != NONE {
            error_code
        } else {
            codes[0]
        };
    }
    ResponseKind::LeaveGroup(response)
}
