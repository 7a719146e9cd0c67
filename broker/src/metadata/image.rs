//! The metadata image: the state every shard reads, rebuilt by applying committed records.
//!
//! Invariants: an image is immutable once published (shards hold it through `Arc`);
//! `epoch` counts applied records, so a shard can ignore an image older than the one it has;
//! a topic id is a random v4 UUID minted at creation and never reused; a topic's partitions
//! are numbered densely from 0; a partition's leader is one of its replicas or
//! [`NO_LEADER`], and its ISR a subset of its replicas; leader and partition epochs only grow;
//! the next producer id block only moves forward, so no producer id is handed out twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::*;

/// A broker as the cluster knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: i32,
    pub epoch: i64,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<BrokerEndpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

impl BrokerRegistration {
    /// The endpoint clients reach it on: the first listener (ringlog announces one).
    pub fn endpoint(&self) -> Option<&BrokerEndpoint> {
        self.endpoints.first()
    }
}

/// Who holds a partition and who leads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionState {
    /// Brokers holding a replica, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas: those that have everything the high watermark covers.
    pub isr: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    /// The broker that serves produce and fetch, or [`NO_LEADER`].
    pub leader: i32,
    /// Grows with every new leader; stamped into batches the leader appends.
    pub leader_epoch: i32,
    /// Grows with every change of the partition.
    pub partition_epoch: i32,
}

impl PartitionState {
    /// Whether its replicas are being moved (AlterPartitionReassignments).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// A partition on `replicas`, `isr` in sync, led by `leader`, at epochs 0 (for tests).
    #[cfg(test)]
    pub fn led(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionState {
        PartitionState {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    /// Index = partition id.
    pub partitions: Vec<PartitionState>,
    /// Topic-level overrides only; defaults come from the broker configuration.
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    pub fn partition_count(&self) -> i32 {
        self.partitions.len() as i32
    }

    pub fn partition(&self, index: i32) -> Option<&PartitionState> {
        self.partitions.get(usize::try_from(index).ok()?)
    }
}

#[derive(Clone, Debug, Default)]
pub struct MetadataImage {
    pub epoch: u64,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Broker configs by broker id as text; the empty name holds the cluster-wide defaults.
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    pub features: BTreeMap<String, i16>,
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

    pub fn partition(&self, topic: &str, index: i32) -> Option<&PartitionState> {
        self.topic(topic)?.partition(index)
    }

    /// A registered broker that is not fenced: one clients may be sent to.
    pub fn live_broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id).filter(|broker| !broker.fenced)
    }

    /// Brokers that may hold new replicas, by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|broker| !broker.fenced)
    }

    /// Applies a committed record. Records were validated before commit, so a record
    /// that does not fit the image is a programmer error or a corrupt store.
    pub fn apply(&mut self, record: &MetadataRecord) -> Result<(), String> {
        match record {
            MetadataRecord::RegisterBroker(r) => {
                self.brokers.insert(
                    r.broker_id,
                    BrokerRegistration {
                        id: r.broker_id,
                        epoch: r.broker_epoch,
                        incarnation_id: r.incarnation_id,
                        endpoints: r.endpoints.clone(),
                        rack: r.rack.clone(),
                        fenced: r.fenced,
                        in_controlled_shutdown: r.in_controlled_shutdown,
                    },
                );
            }
            MetadataRecord::BrokerRegistrationChange(r) => {
                let broker = self
                    .brokers
                    .get_mut(&r.broker_id)
                    .ok_or(format!("no broker {}", r.broker_id))?;
                if broker.epoch != r.broker_epoch {
                    return Err(format!(
                        "broker {} is at epoch {}, not {}",
                        r.broker_id, broker.epoch, r.broker_epoch
                    ));
                }
                if let Some(fenced) = r.fenced {
                    broker.fenced = fenced;
                }
                if let Some(shutting_down) = r.in_controlled_shutdown {
                    broker.in_controlled_shutdown = shutting_down;
                }
            }
            MetadataRecord::Topic(r) => {
                if self.topics.contains_key(&r.name) {
                    return Err(format!("topic {} exists", r.name));
                }
                if self.topic_by_id(&r.topic_id).is_some() {
                    return Err(format!("topic id {} is taken", r.topic_id));
                }
                self.topics.insert(
                    r.name.clone(),
                    TopicMeta {
                        name: r.name.clone(),
                        id: r.topic_id,
                        partitions: Vec::new(),
                        configs: BTreeMap::new(),
                    },
                );
            }
            MetadataRecord::Partition(r) => {
                let state = r.state.clone();
                check_partition(&state)?;
                let topic = self.topic_by_id_mut(&r.topic_id)?;
                let index = usize::try_from(r.partition_id).map_err(|_| "negative partition")?;
                match index.cmp(&topic.partitions.len()) {
                    std::cmp::Ordering::Less => topic.partitions[index] = state,
                    std::cmp::Ordering::Equal => topic.partitions.push(state),
                    std::cmp::Ordering::Greater => {
                        return Err(format!(
                            "{}: partition {index} after {} partitions",
                            topic.name,
                            topic.partitions.len()
                        ))
                    }
                }
            }
            MetadataRecord::PartitionChange(r) => {
                let topic = self.topic_by_id_mut(&r.topic_id)?;
                let name = topic.name.clone();
                let state = usize::try_from(r.partition_id)
                    .ok()
                    .and_then(|index| topic.partitions.get_mut(index))
                    .ok_or(format!("{name}: no partition {}", r.partition_id))?;
                let mut changed = state.clone();
                if let Some(replicas) = &r.replicas {
                    changed.replicas = replicas.clone();
                }
                if let Some(isr) = &r.isr {
                    changed.isr = isr.clone();
                }
                if let Some(removing) = &r.removing_replicas {
                    changed.removing_replicas = removing.clone();
                }
                if let Some(adding) = &r.adding_replicas {
                    changed.adding_replicas = adding.clone();
                }
                if let Some(leader) = r.leader {
                    if leader != state.leader {
                        changed.leader = leader;
                        changed.leader_epoch += 1;
                    }
                }
                changed.partition_epoch += 1;
                check_partition(&changed)?;
                *state = changed;
            }
            MetadataRecord::Config(r) => {
                let value = r.value.clone();
                let configs = match r.resource_type {
                    CONFIG_RESOURCE_TOPIC => {
                        &mut self
                            .topics
                            .get_mut(&r.resource_name)
                            .ok_or(format!("config for unknown topic {}", r.resource_name))?
                            .configs
                    }
                    CONFIG_RESOURCE_BROKER => self
                        .broker_configs
                        .entry(r.resource_name.clone())
                        .or_default(),
                    other => return Err(format!("config resource type {other}")),
                };
                match value {
                    Some(value) => configs.insert(r.name.clone(), value),
                    None => configs.remove(&r.name),
                };
            }
            MetadataRecord::ProducerIds(r) => {
                if r.next_producer_id <= self.next_producer_id_block_start {
                    return Err(format!(
                        "producer id blocks only move forward: {} after {}",
                        r.next_producer_id, self.next_producer_id_block_start
                    ));
                }
                self.next_producer_id_block_start = r.next_producer_id;
            }
            MetadataRecord::RemoveTopic(r) => {
                let name = self
                    .topic_by_id(&r.topic_id)
                    .ok_or(format!("no topic {}", r.topic_id))?
                    .name
                    .clone();
                self.topics.remove(&name);
            }
            MetadataRecord::FeatureLevel(r) => {
                self.features.insert(r.name.clone(), r.feature_level);
            }
            MetadataRecord::NoOp => {}
        }
        self.epoch += 1;
        Ok(())
    }

    /// Records that rebuild this image from nothing, in an order [`MetadataImage::apply`]
    /// accepts: what a snapshot holds.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        for (name, level) in &self.features {
            records.push(MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: name.clone(),
                feature_level: *level,
            }));
        }
        for broker in self.brokers.values() {
            records.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: broker.id,
                incarnation_id: broker.incarnation_id,
                broker_epoch: broker.epoch,
                endpoints: broker.endpoints.clone(),
                rack: broker.rack.clone(),
                fenced: broker.fenced,
                in_controlled_shutdown: broker.in_controlled_shutdown,
            }));
        }
        for (resource, configs) in &self.broker_configs {
            records.extend(config_records(CONFIG_RESOURCE_BROKER, resource, configs));
        }
        for topic in self.topics.values() {
            records.extend(topic_records(topic));
        }
        if self.next_producer_id_block_start > 0 {
            records.push(MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: self.next_producer_id_block_start,
            }));
        }
        records
    }

    fn topic_by_id_mut(&mut self, id: &Uuid) -> Result<&mut TopicMeta, String> {
        self.topics
            .values_mut()
            .find(|topic| &topic.id == id)
            .ok_or(format!("no topic {id}"))
    }
}

/// The records that create `topic` as it is: its name and id, its configs, its partitions.
pub fn topic_records(topic: &TopicMeta) -> Vec<MetadataRecord> {
    let mut records = vec![MetadataRecord::Topic(TopicRecord {
        name: topic.name.clone(),
        topic_id: topic.id,
    })];
    records.extend(config_records(
        CONFIG_RESOURCE_TOPIC,
        &topic.name,
        &topic.configs,
    ));
    for (index, state) in topic.partitions.iter().enumerate() {
        records.push(partition_record(topic.id, index as i32, state));
    }
    records
}

pub fn partition_record(topic_id: Uuid, index: i32, state: &PartitionState) -> MetadataRecord {
    MetadataRecord::Partition(PartitionRecord {
        partition_id: index,
        topic_id,
        state: state.clone(),
    })
}

fn config_records<'a>(
    resource_type: i8,
    resource_name: &'a str,
    configs: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = MetadataRecord> + 'a {
    configs.iter().map(move |(name, value)| {
        MetadataRecord::Config(ConfigRecord {
            resource_type,
            resource_name: resource_name.to_string(),
            name: name.clone(),
            value: Some(value.clone()),
        })
    })
}

fn check_partition(state: &PartitionState) -> Result<(), String> {
    if state.replicas.is_empty() {
        return Err("a partition without replicas".into());
    }
    if state.leader != NO_LEADER && !state.replicas.contains(&state.leader) {
        return Err(format!(
            "leader {} is not a replica of {:?}",
            state.leader, state.replicas
        ));
    }
    if let Some(outsider) = state.isr.iter().find(|id| !state.replicas.contains(id)) {
        return Err(format!("in-sync replica {outsider} is not a replica"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, partitions: i32, replicas: &[i32]) -> (Uuid, Vec<MetadataRecord>) {
        let topic = TopicMeta {
            name: name.into(),
            id: Uuid::new_v4(),
            partitions: (0..partitions)
                .map(|_| PartitionState {
                    replicas: replicas.to_vec(),
                    isr: replicas.to_vec(),
                    removing_replicas: vec![],
                    adding_replicas: vec![],
                    leader: replicas[0],
                    leader_epoch: 0,
                    partition_epoch: 0,
                })
                .collect(),
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        };
        (topic.id, topic_records(&topic))
    }

    fn apply_all(image: &mut MetadataImage, records: &[MetadataRecord]) -> Result<(), String> {
        records.iter().try_for_each(|record| image.apply(record))
    }

    #[test]
    fn topics_apply_in_order_and_count_epochs() {
        let mut image = MetadataImage::default();
        let (id, records) = create("orders", 1, &[1]);
        apply_all(&mut image, &records).expect("create");
        assert!(apply_all(&mut image, &create("orders", 1, &[1]).1).is_err());
        let orders = image.topic("orders").expect("created");
        assert_eq!(orders.partition_count(), 1);
        assert_eq!(orders.configs["retention.ms"], "1000");
        let grown = partition_record(id, 1, &orders.partitions[0]);
        image.apply(&grown).expect("grow");
        let gap = partition_record(id, 3, &image.topic("orders").unwrap().partitions[0]);
        assert!(image.apply(&gap).is_err(), "partitions are dense");
        assert_eq!(
            image.topic("orders").map(TopicMeta::partition_count),
            Some(2)
        );
        image
            .apply(&MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: id,
            }))
            .expect("delete");
        assert!(image.topic("orders").is_none());
        assert_eq!(image.epoch, records.len() as u64 + 2);
    }

    #[test]
    fn a_new_leader_bumps_the_leader_epoch_and_every_change_the_partition_epoch() {
        let mut image = MetadataImage::default();
        let (id, records) = create("t", 1, &[1, 2, 3]);
        apply_all(&mut image, &records).expect("create");
        let change = |leader, isr: Option<Vec<i32>>| {
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: id,
                leader,
                isr,
                ..Default::default()
            })
        };
        image
            .apply(&change(None, Some(vec![1, 2])))
            .expect("shrink");
        let state = image.partition("t", 0).expect("partition").clone();
        assert_eq!(
            (state.leader, state.leader_epoch, state.partition_epoch),
            (1, 0, 1)
        );
        image.apply(&change(Some(2), None)).expect("new leader");
        let state = image.partition("t", 0).expect("partition").clone();
        assert_eq!(
            (state.leader, state.leader_epoch, state.partition_epoch),
            (2, 1, 2)
        );
        assert_eq!(state.isr, vec![1, 2]);
        assert!(
            image.apply(&change(Some(7), None)).is_err(),
            "not a replica"
        );
        assert!(
            image.apply(&change(None, Some(vec![9]))).is_err(),
            "ISR outside replicas"
        );
        assert_eq!(
            image.partition("t", 0),
            Some(&state),
            "refused changes change nothing"
        );
    }

    #[test]
    fn broker_changes_apply_only_to_the_registered_incarnation() {
        let mut image = MetadataImage::default();
        let register = |epoch| {
            MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: 1,
                incarnation_id: Uuid::new_v4(),
                broker_epoch: epoch,
                endpoints: vec![],
                rack: None,
                fenced: true,
                in_controlled_shutdown: false,
            })
        };
        let unfence = |epoch| {
            MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
                broker_id: 1,
                broker_epoch: epoch,
                fenced: Some(false),
                in_controlled_shutdown: None,
            })
        };
        image.apply(&register(10)).expect("register");
        assert!(image.live_broker(1).is_none(), "registered fenced");
        assert!(image.apply(&unfence(9)).is_err(), "stale epoch");
        image.apply(&unfence(10)).expect("unfence");
        assert!(image.live_broker(1).is_some());
        image.apply(&register(12)).expect("re-register");
        assert!(
            image.live_broker(1).is_none(),
            "a new incarnation starts fenced"
        );
    }

    #[test]
    fn producer_id_blocks_only_move_forward() {
        let mut image = MetadataImage::default();
        let handed = |next| {
            MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: 1,
                broker_epoch: -1,
                next_producer_id: next,
            })
        };
        image.apply(&handed(1000)).expect("first block");
        image.apply(&handed(2000)).expect("second block");
        assert!(image.apply(&handed(2000)).is_err());
        assert!(image.apply(&handed(1000)).is_err());
        assert_eq!(image.next_producer_id_block_start, 2000);
    }

    #[test]
    fn an_image_rebuilds_from_its_own_records() {
        let mut image = MetadataImage::default();
        apply_all(&mut image, &create("a", 3, &[2, 1]).1).expect("a");
        apply_all(&mut image, &create("b", 1, &[1]).1).expect("b");
        image
            .apply(&MetadataRecord::Config(ConfigRecord {
                resource_type: CONFIG_RESOURCE_BROKER,
                resource_name: String::new(),
                name: "log.retention.ms".into(),
                value: Some("5".into()),
            }))
            .expect("cluster default");
        let mut rebuilt = MetadataImage::default();
        apply_all(&mut rebuilt, &image.to_records()).expect("rebuild");
        assert_eq!(rebuilt.topics, image.topics);
        assert_eq!(rebuilt.broker_configs, image.broker_configs);
    }
}
