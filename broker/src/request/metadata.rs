//! Metadata: the live brokers, and for each topic asked (all when the list is null) its id
//! and partitions with their leaders, leader epochs, replicas, in-sync and offline replicas,
//! all read from the metadata image. Unknown topics are created with `num.partitions`
//! when the client allows it and `auto.create.topics.enable` is on, as Kafka does; the
//! answer then already shows the new topic, since creation waits for every shard.

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, MetadataRequest, MetadataResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::authorized;
use crate::controller::{validate_topic_name, Controller, TopicSpec};
use crate::errors::{code, NONE};
use crate::metadata::{MetadataImage, TopicMeta, NO_LEADER};
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: MetadataRequest, version: i16) -> ResponseKind {
    let config = &shard.config;
    let image = shard.image();
    // Before v4 there is no flag: auto-creation follows the broker setting alone.
    let allow_create =
        (version < 4 || request.allow_auto_topic_creation) && config.auto_create_topics;
    let mut topics = Vec::new();
    match request.topics {
        None => topics.extend(image.topics.values().map(|topic| describe(topic, &image))),
        Some(wanted) => {
            for wanted in wanted {
                let by_name = wanted.name.as_ref().map(|n| n.to_string());
                let found = match &by_name {
                    Some(name) => image.topic(name).cloned(),
                    None => image.topic_by_id(&wanted.topic_id).cloned(),
                };
                let answer = match (found, by_name) {
                    (Some(topic), _) => describe(&topic, &image),
                    (None, Some(name)) if allow_create => auto_create(shard, name).await,
                    (None, name) => MetadataResponseTopic::default()
                        .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
                        .with_topic_id(wanted.topic_id)
                        .with_error_code(code(if wanted.name.is_some() {
                            ResponseError::UnknownTopicOrPartition
                        } else {
                            ResponseError::UnknownTopicId
                        })),
                };
                topics.push(answer);
            }
        }
    }
    if request.include_topic_authorized_operations {
        for topic in topics.iter_mut().filter(|topic| topic.error_code == 0) {
            topic.topic_authorized_operations = authorized::TOPIC;
        }
    }
    fit_to_version(&mut topics, version);
    // The image may be newer after an auto-creation: list the brokers it names.
    let image = shard.image();
    let brokers = image
        .live_brokers()
        .filter_map(|broker| {
            let endpoint = broker.endpoint()?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(broker.id))
                    .with_host(StrBytes::from_string(endpoint.host.clone()))
                    .with_port(endpoint.port.into())
                    .with_rack(
                        broker
                            .rack
                            .clone()
                            .filter(|_| version >= 1)
                            .map(StrBytes::from_string),
                    ),
            )
        })
        .collect();
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(
                (version >= 2)
                    .then(|| StrBytes::from_string(config.cluster_id.clone().unwrap_or_default())),
            )
            .with_controller_id(if version >= 1 {
                BrokerId(
                    config
                        .active_controller
                        .load(std::sync::atomic::Ordering::Relaxed),
                )
            } else {
                BrokerId(-1)
            })
            .with_topics(topics)
            // Asked only in v8-v10; later versions ask DescribeCluster.
            .with_cluster_authorized_operations(authorized::if_asked(
                request.include_cluster_authorized_operations,
                authorized::CLUSTER,
            )),
    )
}

async fn auto_create(shard: &Rc<Shard>, name: String) -> MetadataResponseTopic {
    let refused = |error_code: i16, name: String| {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name))))
            .with_error_code(error_code)
    };
    if let Err(refusal) = validate_topic_name(&name) {
        return refused(refusal.error_code, name);
    }
    let spec = TopicSpec {
        name: name.clone(),
        partition_count: shard.config.num_partitions,
        replication_factor: shard.config.default_replication_factor,
        assignments: None,
        configs: Default::default(),
    };
    let created = Controller::create_internal_topic_from(shard, spec).await;
    match created {
        Ok(Ok(topic)) => describe(&topic, &shard.image()),
        // Another request created it first: describe what exists.
        Ok(Err(refusal)) if refusal.error_code == code(ResponseError::TopicAlreadyExists) => {
            let image = shard.image();
            match image.topic(&name) {
                Some(topic) => describe(topic, &image),
                None => refused(code(ResponseError::LeaderNotAvailable), name),
            }
        }
        Ok(Err(refusal)) => refused(refusal.error_code, name),
        Err(_) => refused(code(ResponseError::LeaderNotAvailable), name),
    }
}

fn describe(topic: &TopicMeta, image: &MetadataImage) -> MetadataResponseTopic {
    let ids = |ids: &[i32]| ids.iter().copied().map(BrokerId).collect::<Vec<_>>();
    let partitions = (0..)
        .zip(&topic.partitions)
        .map(|(index, state)| {
            let offline: Vec<i32> = state
                .replicas
                .iter()
                .copied()
                .filter(|id| image.live_broker(*id).is_none())
                .collect();
            let led = state.leader != NO_LEADER && image.live_broker(state.leader).is_some();
            MetadataResponsePartition::default()
                .with_error_code(if led {
                    NONE
                } else {
                    code(ResponseError::LeaderNotAvailable)
                })
                .with_partition_index(index)
                .with_leader_id(BrokerId(if led { state.leader } else { NO_LEADER }))
                .with_leader_epoch(state.leader_epoch)
                .with_replica_nodes(ids(&state.replicas))
                .with_isr_nodes(ids(&state.isr))
                .with_offline_replicas(ids(&offline))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_is_internal(topic.name.starts_with("__"))
        .with_partitions(partitions)
        .with_topic_authorized_operations(authorized::NOT_ASKED)
}

/// Clears fields the requested version does not have: the codec refuses to encode a field
/// outside its versions unless it holds the default.
fn fit_to_version(topics: &mut [MetadataResponseTopic], version: i16) {
    for topic in topics {
        if version < 10 {
            topic.topic_id = Default::default();
        }
        if version < 1 {
            topic.is_internal = false;
        }
        for partition in &mut topic.partitions {
            if version < 7 {
                partition.leader_epoch = -1;
            }
            if version < 5 {
                partition.offline_replicas.clear();
            }
        }
    }
}
