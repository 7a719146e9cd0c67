//! The records of the first single-node format (before brokers and replicas were data),
//! read so that a node keeps its topics across the upgrade. Each is turned into the KRaft
//! records it meant, with this node as the only replica and leader at epoch 0; the store then
//! rewrites its file in the current format once (see `store.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;
use uuid::Uuid;

use super::image::partition_record;
use super::image::{topic_records, MetadataImage, PartitionState, TopicMeta};
use super::records::{MetadataRecord, ProducerIdsRecord, RemoveTopicRecord};

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum LegacyRecord {
    CreateTopic {
        name: String,
        id: Uuid,
        partition_count: i32,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        id: Uuid,
    },
    CreatePartitions {
        id: Uuid,
        partition_count: i32,
    },
    ProducerIds {
        broker_id: i32,
        broker_epoch: i64,
        next_producer_id_block_start: i64,
    },
}

impl LegacyRecord {
    /// The current records that make the same change to `image`, on a node `node_id`.
    pub fn upgrade(
        self,
        image: &MetadataImage,
        node_id: i32,
    ) -> Result<Vec<MetadataRecord>, String> {
        let local = || PartitionState {
            replicas: vec![node_id],
            isr: vec![node_id],
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader: node_id,
            leader_epoch: 0,
            partition_epoch: 0,
        };
        Ok(match self {
            LegacyRecord::CreateTopic {
                name,
                id,
                partition_count,
                configs,
            } => topic_records(&TopicMeta {
                name,
                id,
                partitions: (0..partition_count).map(|_| local()).collect(),
                configs,
            }),
            LegacyRecord::DeleteTopic { id } => {
                vec![MetadataRecord::RemoveTopic(RemoveTopicRecord {
                    topic_id: id,
                })]
            }
            LegacyRecord::CreatePartitions {
                id,
                partition_count,
            } => {
                let topic = image.topic_by_id(&id).ok_or(format!("no topic {id}"))?;
                (topic.partition_count()..partition_count)
                    .map(|index| partition_record(id, index, &local()))
                    .collect()
            }
            LegacyRecord::ProducerIds {
                broker_id,
                broker_epoch,
                next_producer_id_block_start,
            } => vec![MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id,
                broker_epoch,
                next_producer_id: next_producer_id_block_start,
            })],
        })
    }
}
