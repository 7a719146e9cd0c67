//! The metadata image: the state every shard reads, rebuilt by applying records.
//!
//! Invariants: an image is immutable once published (shards hold it through `Arc`);
//! `epoch` counts applied records, so a shard can ignore an image older than the one it has;
//! a topic id is a random v4 UUID minted at creation and never reused; the next producer id
//! block only moves forward, so no producer id is handed out twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partition_count: i32,
    /// Topic-level overrides only; defaults come from the broker configuration.
    pub configs: BTreeMap<String, String>,
}

/// One change to the metadata, as committed to the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    CreateTopic(TopicMeta),
    DeleteTopic {
        id: Uuid,
    },
    CreatePartitions {
        id: Uuid,
        partition_count: i32,
    },
    /// A block of producer ids was handed to broker `broker_id`: the ids below
    /// `next_producer_id_block_start` are taken (Kafka's ProducerIdsRecord). `broker_epoch`
    /// is the broker's registration epoch, -1 while brokers do not register with a quorum.
    ProducerIds {
        broker_id: i32,
        broker_epoch: i64,
        next_producer_id_block_start: i64,
    },
}

#[derive(Clone, Debug, Default)]
pub struct MetadataImage {
    pub epoch: u64,
    pub topics: BTreeMap<String, TopicMeta>,
    /// The first producer id of the next block to hand out; every id below it was handed out.
    pub next_producer_id_block_start: i64,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicMeta> {
        self.topics.values().find(|topic| &topic.id == id)
    }

    /// Applies a committed record. Records were validated before commit, so a record
    /// that does not fit the image is a programmer error or a corrupt store.
    pub fn apply(&mut self, record: &MetadataRecord) -> Result<(), String> {
        match record {
            MetadataRecord::CreateTopic(topic) => {
                if self.topics.contains_key(&topic.name) {
                    return Err(format!("topic {} exists", topic.name));
                }
                self.topics.insert(topic.name.clone(), topic.clone());
            }
            MetadataRecord::DeleteTopic { id } => {
                let name = self
                    .topic_by_id(id)
                    .ok_or(format!("no topic {id}"))?
                    .name
                    .clone();
                self.topics.remove(&name);
            }
            MetadataRecord::CreatePartitions {
                id,
                partition_count,
            } => {
                let name = self
                    .topic_by_id(id)
                    .ok_or(format!("no topic {id}"))?
                    .name
                    .clone();
                let topic = self.topics.get_mut(&name).ok_or("vanished")?;
                if *partition_count <= topic.partition_count {
                    return Err(format!("{name}: partitions only grow"));
                }
                topic.partition_count = *partition_count;
            }
            MetadataRecord::ProducerIds {
                next_producer_id_block_start,
                ..
            } => {
                if *next_producer_id_block_start <= self.next_producer_id_block_start {
                    return Err(format!(
                        "producer id blocks only move forward: {next_producer_id_block_start} \
                         after {}",
                        self.next_producer_id_block_start
                    ));
                }
                self.next_producer_id_block_start = *next_producer_id_block_start;
            }
        }
        self.epoch += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str) -> TopicMeta {
        TopicMeta {
            name: name.into(),
            id: Uuid::new_v4(),
            partition_count: 1,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn records_apply_in_order_and_count_epochs() {
        let mut image = MetadataImage::default();
        let orders = topic("orders");
        image
            .apply(&MetadataRecord::CreateTopic(orders.clone()))
            .expect("create");
        assert!(image
            .apply(&MetadataRecord::CreateTopic(topic("orders")))
            .is_err());
        image
            .apply(&MetadataRecord::CreatePartitions {
                id: orders.id,
                partition_count: 3,
            })
            .expect("grow");
        assert!(image
            .apply(&MetadataRecord::CreatePartitions {
                id: orders.id,
                partition_count: 2
            })
            .is_err());
        assert_eq!(image.topic("orders").map(|t| t.partition_count), Some(3));
        image
            .apply(&MetadataRecord::DeleteTopic { id: orders.id })
            .expect("delete");
        assert!(image.topic("orders").is_none());
        assert_eq!(image.epoch, 3);
    }

    #[test]
    fn producer_id_blocks_only_move_forward() {
        let mut image = MetadataImage::default();
        let handed = |next| MetadataRecord::ProducerIds {
            broker_id: 1,
            broker_epoch: -1,
            next_producer_id_block_start: next,
        };
        image.apply(&handed(1000)).expect("first block");
        image.apply(&handed(2000)).expect("second block");
        assert!(image.apply(&handed(2000)).is_err());
        assert!(image.apply(&handed(1000)).is_err());
        assert_eq!(image.next_producer_id_block_start, 2000);
    }
}
