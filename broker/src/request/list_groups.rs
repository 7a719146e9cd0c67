//! ListGroups: every shard's groups, optionally filtered by state (v4+) and by type (v5+).
//! Every group is a classic one (JoinGroup/SyncGroup; KIP-848's consumer groups do not
//! exist yet), including groups that only hold committed offsets, as in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::shard_state::Shard;

/// Kafka's name of the group type.
const CLASSIC: &str = "classic";

pub async fn handle(shard: &Rc<Shard>, request: ListGroupsRequest, version: i16) -> ResponseKind {
    let mut listed = Vec::new();
    for target in 0..shard.router.shard_count() {
        let job = |owner: Rc<Shard>| async move { owner.groups.list() };
        if let Ok(mut groups) = shard.router.call(shard, target, job).await {
            listed.append(&mut groups);
        }
    }
    listed.sort();
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let types: Vec<String> = request
        .types_filter
        .iter()
        .map(|t| t.to_lowercase())
        .collect();
    let typed = types.is_empty() || types.iter().any(|t| t == CLASSIC);
    let groups = listed
        .into_iter()
        .filter(|_| typed)
        .filter(|(_, state, _)| states.is_empty() || states.contains(&state.to_lowercase()))
        .map(|(group_id, state, protocol_type)| {
            let group = ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group_id)))
                .with_protocol_type(StrBytes::from_string(protocol_type));
            let group = if version >= 4 {
                group.with_group_state(StrBytes::from_static_str(state))
            } else {
                group
            };
            if version >= 5 {
                group.with_group_type(StrBytes::from_static_str(CLASSIC))
            } else {
                group
            }
        })
        .collect();
    ResponseKind::ListGroups(ListGroupsResponse::default().with_groups(groups))
}
