//! DescribeGroups: state, protocol and members (with subscriptions and assignments) of each
//! group, asked of its coordinator shard. An unknown group is reported Dead, as Kafka does.

use std::rc::Rc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::authorized;
use super::group_route::{on_coordinator, string};
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeGroupsRequest,
    version: i16,
) -> ResponseKind {
    let text = StrBytes::from_string;
    let mut described = Vec::with_capacity(request.groups.len());
    for group_id in request.groups {
        let name = string(&group_id.0);
        let group = name.clone();
        let found = on_coordinator(shard, &name, move |owner: Rc<Shard>| async move {
            owner.groups.describe(&owner, &group)
        })
        .await
        .and_then(|result| result);
        let answer = DescribedGroup::default().with_group_id(group_id);
        described.push(match found {
            Err(error_code) => answer.with_error_code(error_code),
            Ok(description) => answer
                .with_authorized_operations(authorized::if_asked(
                    request.include_authorized_operations,
                    authorized::GROUP,
                ))
                .with_group_state(StrBytes::from_static_str(description.state))
                .with_protocol_type(text(description.protocol_type))
                .with_protocol_data(text(description.protocol))
                .with_members(
                    description
                        .members
                        .into_iter()
                        .map(|(id, instance, client_id, host, metadata, assignment)| {
                            DescribedGroupMember::default()
                                .with_member_id(text(id))
                                .with_group_instance_id(if version >= 4 {
                                    instance.map(text)
                                } else {
                                    None
                                })
                                .with_client_id(text(client_id))
                                .with_client_host(text(host))
                                .with_member_metadata(metadata)
                                .with_member_assignment(assignment)
                        })
                        .collect(),
                ),
        });
    }
    ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(described))
}
