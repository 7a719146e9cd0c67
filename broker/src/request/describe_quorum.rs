//! DescribeQuorum (KIP-595, KIP-853): the metadata quorum as `kafka-metadata-quorum
//! describe` shows it, read from the controller on shard 0. While a node is a one-voter
//! quorum of itself, it is the leader and the only voter, and its log end offset is the high
//! watermark (it commits what it writes, fdatasynced). In a quorum of several voters the
//! epoch is the Raft term, the high watermark follows the committed index, and each voter's
//! log end offset is what the leader knows of it: a voter that does not lead asks the active
//! controller, so every node answers alike (`controller/quorum_view.rs`). There are no
//! observers.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::now_ms;
use crate::controller::{Controller, QuorumView};
use crate::errors::code;
use crate::metadata::METADATA_TOPIC;
use crate::shard_state::Shard;

/// The quorum as its leader sees it, asked through shard 0.
async fn view(shard: &Rc<Shard>) -> Option<QuorumView> {
    shard
        .router
        .call(shard, 0, move |owner: Rc<Shard>| async move {
            owner.controller.as_ref()?;
            Some(Controller::quorum_view(&owner).await)
        })
        .await
        .ok()
        .flatten()
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeQuorumRequest,
    version: i16,
) -> ResponseKind {
    let view = view(shard).await;
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
                match view.as_ref().filter(|_| known) {
                    Some(view) => {
                        let voters = view
                            .voters
                            .iter()
                            .map(|&(id, end_offset)| {
                                let known_now = end_offset >= 0;
                                let stamp = if version >= 1 && known_now { now } else { -1 };
                                ReplicaState::default()
                                    .with_replica_id(BrokerId(id))
                                    .with_replica_directory_id(match version {
                                        0 | 1 => Uuid::nil(),
                                        _ if id == node => directory_id,
                                        _ => view.directories.get(&id).copied().unwrap_or_default(),
                                    })
                                    .with_log_end_offset(end_offset)
                                    .with_last_fetch_timestamp(stamp)
                                    .with_last_caught_up_timestamp(stamp)
                            })
                            .collect();
                        answer = answer
                            .with_leader_id(BrokerId(view.leader))
                            .with_leader_epoch(view.epoch)
                            .with_high_watermark(view.high_watermark)
                            .with_current_voters(voters);
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
        response.nodes = if config.quorum_voters.is_empty() {
            vec![node_entry(
                node,
                "PLAINTEXT",
                &config.advertised.host,
                config.advertised.port,
            )]
        } else {
            config
                .quorum_voters
                .iter()
                .map(|(&id, address)| {
                    node_entry(id, "CONTROLLER", &address.ip().to_string(), address.port())
                })
                .collect()
        };
    }
    ResponseKind::DescribeQuorum(response)
}

fn node_entry(id: i32, listener: &'static str, host: &str, port: u16) -> Node {
    Node::default()
        .with_node_id(BrokerId(id))
        .with_listeners(vec![Listener::default()
            .with_name(StrBytes::from_static_str(listener))
            .with_host(StrBytes::from_string(host.to_string()))
            .with_port(port)])
}
