//! DescribeCluster: the brokers the metadata image holds (fenced ones only when v2 asks for
//! them), and the controller, which is this node while it is a one-voter quorum.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::authorized;
use crate::shard_state::Shard;

pub fn handle(shard: &Shard, request: DescribeClusterRequest, version: i16) -> ResponseKind {
    let config = &shard.config;
    let image = shard.image();
    let brokers = image
        .brokers
        .values()
        .filter(|broker| !broker.fenced || request.include_fenced_brokers)
        .filter_map(|broker| {
            let endpoint = broker.endpoint()?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(broker.id))
                    .with_host(StrBytes::from_string(endpoint.host.clone()))
                    .with_port(endpoint.port.into())
                    .with_rack(broker.rack.clone().map(StrBytes::from_string))
                    .with_is_fenced(broker.fenced && version >= 2),
            )
        })
        .collect();
    ResponseKind::DescribeCluster(
        DescribeClusterResponse::default()
            .with_endpoint_type(1)
            .with_cluster_id(StrBytes::from_string(
                config.cluster_id.clone().unwrap_or_default(),
            ))
            .with_controller_id(BrokerId(
                config
                    .active_controller
                    .load(std::sync::atomic::Ordering::Relaxed),
            ))
            .with_brokers(brokers)
            .with_cluster_authorized_operations(authorized::if_asked(
                request.include_cluster_authorized_operations,
                authorized::CLUSTER,
            )),
    )
}
