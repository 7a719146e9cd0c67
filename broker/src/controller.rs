//! The controller: the one place metadata changes, on shard 0.
//!
//! Each change is validated against the current image, committed to the metadata store as
//! a record, applied to the image, and published to every shard; the answer goes back only
//! after every shard has installed the new image (opened or removed its logs).
//!
//! Invariants: validation, commit and apply happen with no `.await` in between, so two
//! changes never interleave; images are published in epoch order per shard, and a shard
//! ignores an image older than the one it has.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use shard::ShardStopped;
use uuid::Uuid;

use crate::config::TOPIC_CONFIGS;
use crate::errors::code;
use crate::metadata::{MetadataImage, MetadataRecord, MetadataStore, TopicMeta};
use crate::shard_state::Shard;

/// Kafka's limit on topic name length.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Partitions one topic may have; far above what a node serves, well below overflow.
pub const PARTITIONS_MAX: i32 = 100_000;
/// Producer ids in one block handed to a broker (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Producer ids `[first, first + size)`, handed to one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlock {
    pub first: i64,
    pub size: i64,
}

/// A refusal, in Kafka's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error_code: i16,
    pub message: String,
}

impl Refusal {
    fn new(error: ResponseError, message: impl Into<String>) -> Refusal {
        Refusal {
            error_code: code(error),
            message: message.into(),
        }
    }
}

/// What CreateTopics asks for one topic, already defaulted.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partition_count: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

pub struct Controller {
    store: RefCell<Box<dyn MetadataStore + Send>>,
    image: RefCell<MetadataImage>,
}

impl Controller {
    /// Loads the committed metadata.
    pub fn load(
        mut store: Box<dyn MetadataStore + Send>,
    ) -> Result<Controller, crate::metadata::StoreError> {
        let image = store.load()?;
        Ok(Controller {
            store: RefCell::new(store),
            image: RefCell::new(image),
        })
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        Arc::new(self.image.borrow().clone())
    }

    /// Validates `spec`; with `validate_only` nothing else happens. Otherwise commits the
    /// topic and publishes it to every shard before returning.
    pub async fn create_topic(
        shard: &Rc<Shard>,
        spec: TopicSpec,
        validate_only: bool,
    ) -> Result<TopicMeta, Refusal> {
        let controller = shard
            .controller
            .as_ref()
            .expect("controller calls run on shard 0");
        validate_topic_name(&spec.name)?;
        if controller.image.borrow().topic(&spec.name).is_some() {
            return Err(Refusal::new(
                ResponseError::TopicAlreadyExists,
                format!("Topic '{}' already exists.", spec.name),
            ));
        }
        if !(1..=PARTITIONS_MAX).contains(&spec.partition_count) {
            return Err(Refusal::new(
                ResponseError::InvalidPartitions,
                format!("Number of partitions must be between 1 and {PARTITIONS_MAX}."),
            ));
        }
        if spec.replication_factor != 1 {
            return Err(Refusal::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "Replication factor: {} larger than available brokers: 1.",
                    spec.replication_factor
                ),
            ));
        }
        for (key, value) in &spec.configs {
            validate_topic_config(key, value)?;
        }
        let topic = TopicMeta {
            name: spec.name,
            id: Uuid::new_v4(),
            partition_count: spec.partition_count,
            configs: spec.configs,
        };
        if validate_only {
            return Ok(topic);
        }
        controller.commit(MetadataRecord::CreateTopic(topic.clone()))?;
        Controller::publish(shard, topic.id).await?;
        Ok(topic)
    }

    /// [`Controller::create_topic`] asked from any shard: the controller runs on shard 0.
    pub async fn create_topic_from(
        shard: &Rc<Shard>,
        spec: TopicSpec,
        validate_only: bool,
    ) -> Result<Result<TopicMeta, Refusal>, ShardStopped> {
        shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                Controller::create_topic(&controller, spec, validate_only).await
            })
            .await
    }

    /// Deletes the topic and its data on every shard before returning.
    pub async fn delete_topic(shard: &Rc<Shard>, id: Uuid) -> Result<(), Refusal> {
        let controller = shard
            .controller
            .as_ref()
            .expect("controller calls run on shard 0");
        if controller.image.borrow().topic_by_id(&id).is_none() {
            return Err(Refusal::new(
                ResponseError::UnknownTopicId,
                "unknown topic id",
            ));
        }
        controller.commit(MetadataRecord::DeleteTopic { id })?;
        Controller::publish(shard, id).await
    }

    /// Grows the topic to `partition_count` partitions.
    pub async fn create_partitions(
        shard: &Rc<Shard>,
        name: &str,
        partition_count: i32,
        validate_only: bool,
    ) -> Result<(), Refusal> {
        let controller = shard
            .controller
            .as_ref()
            .expect("controller calls run on shard 0");
        let Some(id) = controller
            .image
            .borrow()
            .topic(name)
            .map(|t| (t.id, t.partition_count))
        else {
            return Err(Refusal::new(
                ResponseError::UnknownTopicOrPartition,
                format!("The topic '{name}' does not exist."),
            ));
        };
        let (id, current) = id;
        if partition_count <= current {
            return Err(Refusal::new(
                ResponseError::InvalidPartitions,
                format!("Topic currently has {current} partitions, which is higher than or equal to the requested {partition_count}."),
            ));
        }
        if partition_count > PARTITIONS_MAX {
            return Err(Refusal::new(
                ResponseError::InvalidPartitions,
                format!("At most {PARTITIONS_MAX} partitions."),
            ));
        }
        if validate_only {
            return Ok(());
        }
        controller.commit(MetadataRecord::CreatePartitions {
            id,
            partition_count,
        })?;
        Controller::publish(shard, id).await
    }

    /// Hands broker `broker_id` the next block of producer ids (Kafka's AllocateProducerIds):
    /// the block is committed as taken before it is returned, so after any crash the next
    /// block starts past every id this one may have given out.
    pub fn allocate_producer_ids(
        shard: &Rc<Shard>,
        broker_id: i32,
    ) -> Result<ProducerIdBlock, Refusal> {
        let controller = shard
            .controller
            .as_ref()
            .expect("controller calls run on shard 0");
        let first = controller.image.borrow().next_producer_id_block_start;
        let Some(next) = first.checked_add(PRODUCER_ID_BLOCK_SIZE) else {
            return Err(Refusal::new(
                ResponseError::UnknownServerError,
                "Exhausted all producer ids: the next block would pass i64::MAX.",
            ));
        };
        controller.commit(MetadataRecord::ProducerIds {
            broker_id,
            broker_epoch: -1,
            next_producer_id_block_start: next,
        })?;
        Ok(ProducerIdBlock {
            first,
            size: PRODUCER_ID_BLOCK_SIZE,
        })
    }

    /// [`Controller::allocate_producer_ids`] asked from any shard.
    pub async fn allocate_producer_ids_from(
        shard: &Rc<Shard>,
        broker_id: i32,
    ) -> Result<Result<ProducerIdBlock, Refusal>, ShardStopped> {
        shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                Controller::allocate_producer_ids(&controller, broker_id)
            })
            .await
    }

    fn commit(&self, record: MetadataRecord) -> Result<(), Refusal> {
        self.store.borrow_mut().commit(&record).map_err(|error| {
            tracing::error!(%error, "metadata commit failed");
            Refusal::new(ResponseError::KafkaStorageError, error.to_string())
        })?;
        self.image
            .borrow_mut()
            .apply(&record)
            .map_err(|reason| Refusal::new(ResponseError::UnknownServerError, reason))
    }

    /// Sends the current image to every shard and waits until each has installed it. Fails
    /// if a shard could not open or delete a log of topic `concerning` (the one the request
    /// changed); another topic's failed logs are that topic's trouble, and were logged.
    async fn publish(shard: &Rc<Shard>, concerning: Uuid) -> Result<(), Refusal> {
        let controller = shard
            .controller
            .as_ref()
            .expect("controller calls run on shard 0");
        let image = controller.image();
        let mut installs = Vec::new();
        for target in 0..shard.router.shard_count() {
            let image = image.clone();
            let shard = shard.clone();
            installs.push(glommio::spawn_local(async move {
                shard
                    .router
                    .call(&shard, target, move |owner: Rc<Shard>| async move {
                        match owner.install_image(image).await {
                            Ok(failures) => failures
                                .into_iter()
                                .find(|(topic_id, _)| *topic_id == concerning)
                                .map_or(Ok(()), |(_, error)| Err(error.to_string())),
                            Err(error) => Err(error.to_string()),
                        }
                    })
                    .await
            }));
        }
        for install in installs {
            match install.await {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => {
                    return Err(Refusal::new(ResponseError::KafkaStorageError, reason))
                }
                Err(stopped) => {
                    return Err(Refusal::new(
                        ResponseError::BrokerNotAvailable,
                        stopped.to_string(),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Kafka's rules: 1 to 249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), Refusal> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let problem = if name.is_empty() {
        Some("Topic name is illegal, it can't be empty".to_string())
    } else if name == "." || name == ".." {
        Some("Topic name cannot be \".\" or \"..\"".to_string())
    } else if name.len() > TOPIC_NAME_BYTES_MAX {
        Some(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_BYTES_MAX} characters"
        ))
    } else if !name.chars().all(legal) {
        Some(format!("Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"))
    } else {
        None
    };
    match problem {
        Some(message) => Err(Refusal::new(ResponseError::InvalidTopicException, message)),
        None => Ok(()),
    }
}

/// A topic config must be one Kafka defines for topics, with a value of the right kind.
pub fn validate_topic_config(key: &str, value: &str) -> Result<(), Refusal> {
    let Some((_, _, default)) = TOPIC_CONFIGS.iter().find(|(name, _, _)| *name == key) else {
        return Err(Refusal::new(
            ResponseError::InvalidConfig,
            format!("Unknown topic config name: {key}"),
        ));
    };
    let valid = match key {
        "cleanup.policy" => value
            .split(',')
            .all(|p| matches!(p.trim(), "delete" | "compact")),
        "message.timestamp.type" => matches!(value, "CreateTime" | "LogAppendTime"),
        "compression.type" => {
            matches!(
                value,
                "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd"
            )
        }
        _ if default.parse::<i64>().is_ok() => value.parse::<i64>().is_ok(),
        _ => true,
    };
    if valid {
        Ok(())
    } else {
        Err(Refusal::new(
            ResponseError::InvalidConfig,
            format!("Invalid value {value} for configuration {key}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for good in ["orders", "a.b_c-D9", &"x".repeat(249)] {
            assert!(validate_topic_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "has space", "ümlaut", &"x".repeat(250)] {
            let refusal = validate_topic_name(bad).expect_err(bad);
            assert_eq!(
                refusal.error_code, 17,
                "INVALID_TOPIC_EXCEPTION for {bad:?}"
            );
        }
    }

    #[test]
    fn topic_configs_are_checked_by_name_and_kind() {
        assert!(validate_topic_config("retention.ms", "1000").is_ok());
        assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
        assert_eq!(
            validate_topic_config("retention.ms", "soon").map_err(|r| r.error_code),
            Err(40)
        );
        assert_eq!(
            validate_topic_config("no.such", "1").map_err(|r| r.error_code),
            Err(40)
        );
    }
}
