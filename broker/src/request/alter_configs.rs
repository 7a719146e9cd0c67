//! AlterConfigs, the request before KIP-339 (kafka-python and older tools send it): the
//! settings given replace the resource's whole set of its own settings, for a topic or for
//! the dynamic settings of a broker or of the cluster (broker resource ""); a setting the
//! resource had and the request does not name goes back to what it inherits. Applied by the
//! active controller as IncrementalAlterConfigs is, all or none per resource.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::config_change::{Changes, Target};
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: AlterConfigsRequest,
    client: Option<IpAddr>,
) -> ResponseKind {
    let validate_only = request.validate_only;
    let mut response = AlterConfigsResponse::default();
    for resource in request.resources {
        let mut answer = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let given: Vec<(String, Option<String>)> = resource
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let done = match Target::of(resource.resource_type, resource.resource_name.as_str()) {
            Ok(target) => match target.own_settings(shard) {
                Ok(own) => {
                    // Every setting the request leaves out is removed.
                    let removed: Changes = own
                        .into_keys()
                        .filter(|key| !given.iter().any(|(name, _)| name == key))
                        .map(|key| (key, None))
                        .collect();
                    let changes: Changes = given.into_iter().chain(removed).collect();
                    target.apply(shard, changes, validate_only, client).await
                }
                Err(refusal) => Err(refusal),
            },
            Err(refusal) => Err(refusal),
        };
        if let Err(refusal) = done {
            answer.error_code = refusal.error_code;
            answer.error_message = Some(StrBytes::from_string(refusal.message));
        }
        response.responses.push(answer);
    }
    ResponseKind::AlterConfigs(response)
}
