//! DescribeQuorum (KIP-595, KIP-853): the metadata quorum as `kafka-metadata-quorum
//! describe` shows it. While a node is a one-voter quorum of itself, it is the leader and
//! the only voter, its log end offset is the high watermark (it commits what it writes,
//! fdatasynced), and there are no observers; the answer is read from the controller on
//! shard 0.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::now_ms;
use crate::errors::code;
use crate::metadata::METADATA_TOPIC;
use crate::shard_state::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeQuorumRequest,
    version: i16,
) -> ResponseKind {
    let end_offset = shard
        .router
        .call(shard, 0, |controller: Rc<Shard>| async move {
            controller
                .controller
                .as_ref()
                .map(|controller| controller.metadata_end_offset() as i64)
        })
        .await
        .ok()
        .flatten();
    let config = &shard.config;
    let node = config.node_id;
    let directory_id = config
        .directory_id
        .as_deref()
        .and_then(client::parse_kafka_uuid)
        .unwrap_or_default();
    let now = now_ms();
    let mut response = DescribeQuorumResponse::default();
    for topic in request.topics {
        let partitions = topic
            .partitions
            .iter()
            .map(|wanted| {
                let known =
                    topic.topic_name.as_str() == METADATA_TOPIC && wanted.partition_index == 0;
                let mut answer =
                    PartitionData::default().with_partition_index(wanted.partition_index);
                match end_offset.filter(|_| known) {
                    Some(end_offset) => {
                        let voter = ReplicaState::default()
                            .with_replica_id(BrokerId(node))
                            .with_replica_directory_id(if version >= 2 {
                                directory_id
                            } else {
                                Default::default()
                            })
                            .with_log_end_offset(end_offset)
                            .with_last_fetch_timestamp(if version >= 1 { now } else { -1 })
                            .with_last_caught_up_timestamp(if version >= 1 { now } else { -1 });
                        answer = answer
                            .with_leader_id(BrokerId(node))
                            .with_leader_epoch(0)
                            .with_high_watermark(end_offset)
                            .with_current_voters(vec![voter]);
                    }
                    None => {
                        answer = answer
                            .with_error_code(code(ResponseError::UnknownTopicOrPartition))
                            .with_leader_id(BrokerId(-1))
                            .with_leader_epoch(-1)
                            .with_high_watermark(-1);
                    }
                }
                answer
            })
            .collect();
        response.topics.push(
            TopicData::default()
                .with_topic_name(topic.topic_name)
                .with_partitions(partitions),
        );
    }
    if version >= 2 {
        response.nodes = vec![Node::default()
            .with_node_id(BrokerId(node))
            .with_listeners(vec![Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_string(config.advertised.host.clone()))
                .with_port(config.advertised.port)])];
    }
    ResponseKind::DescribeQuorum(response)
}
