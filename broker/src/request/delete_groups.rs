//! DeleteGroups: an empty group and its committed offsets are removed (tombstones in
//! `__consumer_offsets`); a group with members gets NON_EMPTY_GROUP.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, ResponseKind};

use super::group_route::{on_coordinator, string};
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: DeleteGroupsRequest) -> ResponseKind {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let name = string(&group_id.0);
        let group = name.clone();
        let error_code = on_coordinator(shard, &name, move |owner: Rc<Shard>| async move {
            owner.groups.delete(&owner, &group).await
        })
        .await
        .unwrap_or_else(|error_code| error_code);
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(error_code),
        );
    }
    ResponseKind::DeleteGroups(DeleteGroupsResponse::default().with_results(results))
}
