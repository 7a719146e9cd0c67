//! DescribeCluster: this node is the whole cluster and its controller, never fenced (v2
//! lists fenced brokers only when asked, and there are none).

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::authorized;
use crate::shard_state::Shard;

pub fn handle(shard: &Shard, request: DescribeClusterRequest) -> ResponseKind {
    let config = &shard.config;
    let broker = DescribeClusterBroker::default()
        .with_broker_id(BrokerId(config.node_id))
        .with_host(StrBytes::from_string(config.advertised.host.clone()))
        .with_port(config.advertised.port.into());
    ResponseKind::DescribeCluster(
        DescribeClusterResponse::default()
            .with_endpoint_type(1)
            .with_cluster_id(StrBytes::from_string(config.cluster_id.clone()))
            .with_controller_id(BrokerId(config.node_id))
            .with_brokers(vec![broker])
            .with_cluster_authorized_operations(authorized::if_asked(
                request.include_cluster_authorized_operations,
                authorized::CLUSTER,
            )),
    )
}
