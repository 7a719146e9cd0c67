//! One shard's state: its partitions, its copy of the metadata image, its budgets.
//!
//! Invariants: a `Shard` lives on one executor thread and is reached from elsewhere only
//! through its router. Borrows of its `RefCell`s are taken, used and dropped without an
//! `.await` in between; partitions are handed out as `Rc` clones so a job can await on a
//! partition without holding the map.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use net::{Budget, SupportedApis};
use shard::{Notify, Router};
use storage::{BatchCache, Log, LogConfig};
use uuid::Uuid;

use crate::config::{BrokerConfig, CleanerSettings};
use crate::controller::Controller;
use crate::groups::{GroupCoordinator, OFFSETS_TOPIC};
use crate::listener::ConnectionCounts;
use crate::metadata::{MetadataImage, PartitionState, TopicMeta};
use crate::partition::{Partition, TopicSettings};
use crate::producers::ProducerIds;
use crate::replication::checkpoint::{initial_high_watermark, CheckpointedHighWatermarks};
use crate::replication::throttle::{self, Bucket, Throttled};
use crate::replication::Fetchers;

pub struct Shard {
    pub router: Router<Shard>,
    pub config: Arc<BrokerConfig>,
    pub apis: Rc<SupportedApis>,
    /// `queued.max.request.bytes`: request bytes held over all connections of the shard.
    pub request_budget: Budget,
    /// `queued.max.response.bytes`: bytes of answers built and not yet written, over all
    /// connections of the shard.
    pub response_budget: Budget,
    /// A small reserve of answer bytes that only connections keeping up with their answers
    /// may draw on when `response_budget` is spent, so that clients that stopped reading
    /// cannot starve the ones that did not.
    pub response_reserve: Budget,
    pub cache: Rc<BatchCache>,
    image: RefCell<Arc<MetadataImage>>,
    /// Topic name → partitions this shard owns (index = partition index).
    partitions: RefCell<HashMap<String, Vec<Option<Rc<Partition>>>>>,
    /// The controller runs on shard 0 only.
    pub controller: Option<Controller>,
    /// Groups whose `__consumer_offsets` partition this shard owns.
    pub groups: GroupCoordinator,
    /// The producer ids this shard hands out (InitProducerId).
    pub producer_ids: ProducerIds,
    /// The fetchers replicating the partitions this shard follows, one per leader.
    pub fetchers: Fetchers,
    /// Fired when a follower outside a partition's ISR this shard leads may join it.
    pub isr_wanted: Notify,
    /// This shard's share of `leader.replication.throttled.rate` and
    /// `follower.replication.throttled.rate` (`replication::throttle`).
    pub leader_throttle: Bucket,
    pub follower_throttle: Bucket,
    /// The high watermarks of `replication-offset-checkpoint`, read at start, for the
    /// partitions not opened yet.
    pub checkpointed_high_watermarks: RefCell<CheckpointedHighWatermarks>,
    /// Connections of the whole node, counted on shard 0 (where the acceptor runs).
    pub connections: Option<Rc<ConnectionCounts>>,
    pub stopping: Notify,
    stopped: Cell<bool>,
    /// One image install at a time: two installs at once would both open (or delete) the
    /// same partition's log.
    installing: glommio::sync::Semaphore,
}

impl Shard {
    pub fn new(
        router: Router<Shard>,
        config: Arc<BrokerConfig>,
        apis: Rc<SupportedApis>,
        controller: Option<Controller>,
    ) -> Shard {
        let groups = GroupCoordinator::new(config.groups.clone());
        let connections = (router.shard_id() == 0).then(|| Rc::new(ConnectionCounts::new()));
        Shard {
            request_budget: Budget::new(config.queued_request_bytes_max),
            response_budget: Budget::new(config.queued_response_bytes_max),
            response_reserve: Budget::new(config.response_reserve_bytes()),
            cache: Rc::new(BatchCache::new(config.cache_bytes_max)),
            router,
            config,
            apis,
            image: RefCell::new(Arc::new(MetadataImage::default())),
            partitions: RefCell::new(HashMap::new()),
            controller,
            groups,
            producer_ids: ProducerIds::default(),
            fetchers: Fetchers::default(),
            isr_wanted: Notify::new(),
            leader_throttle: Bucket::default(),
            follower_throttle: Bucket::default(),
            checkpointed_high_watermarks: RefCell::new(HashMap::new()),
            connections,
            stopping: Notify::new(),
            stopped: Cell::new(false),
            installing: glommio::sync::Semaphore::new(1),
        }
    }

    pub fn id(&self) -> usize {
        self.router.shard_id()
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// The shard that owns `partition` of `topic`.
    pub fn owner(&self, topic: &str, partition: i32) -> usize {
        shard::shard_for(topic, partition, self.router.shard_count())
    }

    /// The partition if this shard owns it and it exists.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>> {
        let partitions = self.partitions.borrow();
        let slots = partitions.get(topic)?;
        slots.get(usize::try_from(index).ok()?)?.clone()
    }

    /// Every partition this shard owns.
    pub fn owned_partitions(&self) -> Vec<Rc<Partition>> {
        let partitions = self.partitions.borrow();
        partitions.values().flatten().flatten().cloned().collect()
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Installs `image` if it is newer than the current one: opens the logs of partitions
    /// this shard owns of which this node holds a replica, updates the leaders and leader
    /// epochs of those it has, and closes and deletes those this node no longer holds. Fails with
    /// the first log it could not open or delete (see `install_image`).
    pub async fn apply_image(
        &self,
        image: Arc<MetadataImage>,
    ) -> Result<(), storage::StorageError> {
        match self.install_image(image).await?.into_iter().next() {
            Some((_, error)) => Err(error),
            None => Ok(()),
        }
    }

    /// As `apply_image`, with every log that could not be opened or deleted (a full or
    /// failed disk), by topic id. Those fail only their own topic: the rest of the image is
    /// still installed, and a partition left unopened is tried again by the next image.
    pub async fn install_image(
        &self,
        image: Arc<MetadataImage>,
    ) -> Result<Vec<(Uuid, storage::StorageError)>, storage::StorageError> {
        let Ok(_installing) = self.installing.acquire_permit(1).await else {
            return Ok(Vec::new());
        };
        // Checked once it is this install's turn: a newer image may have gone first.
        if image.epoch < self.image.borrow().epoch || self.stopped.get() {
            return Ok(Vec::new());
        }
        let previous = std::mem::replace(&mut *self.image.borrow_mut(), image.clone());
        let node = self.config.node_id;
        // Logs this node no longer holds: topics that vanished or were re-created under a
        // new id, and replicas moved to other brokers. Logs it keeps take their partition's
        // leadership, and their topic's settings if they or the dynamic broker defaults
        // changed (IncrementalAlterConfigs).
        // Offsets partitions whose leadership came here (true) or went away (false).
        let mut coordination: Vec<(Rc<Partition>, bool)> = Vec::new();
        // Dynamic broker configs are the defaults of every topic's settings.
        let defaults_changed = image.broker_configs != previous.broker_configs;
        let gone: Vec<Rc<Partition>> = {
            let mut partitions = self.partitions.borrow_mut();
            let mut gone = Vec::new();
            partitions.retain(|name, slots| {
                let topic = image.topic(name);
                let settings_changed = defaults_changed
                    || topic.map(|t| &t.configs) != previous.topic(name).map(|t| &t.configs);
                let wanted = topic
                    .filter(|_| settings_changed)
                    .map(|t| (self.log_config(t), self.partition_settings(t)));
                for slot in slots.iter_mut() {
                    let Some(partition) = slot else { continue };
                    let held = topic
                        .filter(|topic| topic.id == partition.topic_id)
                        .and_then(|topic| topic.partition(partition.index))
                        .filter(|state| state.replicas.contains(&node));
                    let Some(state) = held else {
                        gone.extend(slot.take());
                        continue;
                    };
                    let was_leader = partition.leadership().is_local;
                    partition.update(state);
                    let is_leader = partition.leadership().is_local;
                    if name == OFFSETS_TOPIC && was_leader != is_leader {
                        coordination.push((partition.clone(), is_leader));
                    }
                    if let Some((wanted, settings)) = &wanted {
                        partition.apply_settings(settings.clone());
                        if let Err(error) = partition.log.reconfigure(*wanted) {
                            tracing::warn!(topic = %name, partition = partition.index, %error,
                                "topic settings not applied");
                        }
                    }
                }
                slots.iter().any(Option::is_some)
            });
            gone
        };
        let offsets_partitions = image
            .topic(OFFSETS_TOPIC)
            .map_or(0, |t| t.partition_count());
        for (partition, leads) in coordination {
            if leads {
                self.groups.load(&partition).await?;
            } else {
                self.groups.unload(partition.index, offsets_partitions);
            }
        }
        let mut failures = Vec::new();
        for partition in gone {
            partition.retire();
            let topic_id = partition.topic_id;
            if let Err(error) = partition.log.clone().delete().await {
                tracing::error!(%error, "deleting a partition's log failed");
                failures.push((topic_id, error));
            }
        }
        for topic in image.topics.values() {
            for (index, state) in (0..).zip(&topic.partitions) {
                if self.owner(&topic.name, index) != self.id()
                    || !state.replicas.contains(&node)
                    || self.partition(&topic.name, index).is_some()
                {
                    continue;
                }
                let partition = match self.open_partition(topic, index, state).await {
                    Ok(partition) => partition,
                    Err(error) => {
                        tracing::error!(topic = %topic.name, partition = index, %error,
                            "opening a partition's log failed");
                        failures.push((topic.id, error));
                        continue;
                    }
                };
                // A group coordinator is the leader of the group's offsets partition.
                if topic.name == OFFSETS_TOPIC && partition.leadership().is_local {
                    self.groups.load(&partition).await?;
                }
                let mut partitions = self.partitions.borrow_mut();
                let slots = partitions.entry(topic.name.clone()).or_default();
                if slots.len() <= index as usize {
                    slots.resize(index as usize + 1, None);
                }
                slots[index as usize] = Some(partition);
            }
        }
        // Fetchers pick up the partitions to follow (and drop those they no longer follow).
        self.fetchers.followed_changed.notify_all();
        Ok(failures)
    }

    /// This shard's share of the broker's replication throttle rate `key` (bytes a second;
    /// `throttle::UNLIMITED` when unset), as the image gives it now.
    pub fn throttle_rate(&self, key: &str) -> u64 {
        let image = self.image.borrow();
        let rate =
            crate::config::dynamic::broker_setting(&self.config, &image, self.config.node_id, key)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(throttle::UNLIMITED);
        throttle::shard_rate(rate, self.router.shard_count())
    }

    /// The cleaner's settings as the image gives them now (a value that no longer reads, which
    /// the controller's checks keep out, falls back to the static configuration).
    pub fn cleaner_settings(&self) -> CleanerSettings {
        let image = self.image.borrow();
        let node = self.config.node_id;
        CleanerSettings::resolve(|key| {
            crate::config::dynamic::broker_setting(&self.config, &image, node, key)
        })
        .unwrap_or(self.config.cleaner)
    }

    /// The settings of `topic` its partitions apply themselves.
    fn partition_settings(&self, topic: &TopicMeta) -> TopicSettings {
        let throttled = |key| {
            self.topic_setting(topic, key)
                .and_then(|value| throttle::parse_replicas(&value))
                .filter(|t| *t != Throttled::Replicas(Vec::new()))
        };
        TopicSettings {
            compacted: self.cleans_by(topic, "compact"),
            min_insync_replicas: self.min_insync_replicas(topic),
            leader_throttled: throttled("leader.replication.throttled.replicas"),
            follower_throttled: throttled("follower.replication.throttled.replicas"),
        }
    }

    /// The topic's `min.insync.replicas` (its own, else the broker's default).
    fn min_insync_replicas(&self, topic: &TopicMeta) -> usize {
        self.topic_setting(topic, "min.insync.replicas")
            .and_then(|value| value.parse().ok())
            .unwrap_or(1)
    }

    /// The partitions this shard holds a follower's replica of whose leader is `leader`,
    /// with their topics' names.
    pub fn followed_from(&self, leader: i32) -> Vec<(String, Rc<Partition>)> {
        let partitions = self.partitions.borrow();
        partitions
            .iter()
            .flat_map(|(name, slots)| slots.iter().flatten().map(move |p| (name, p)))
            .filter(|(_, p)| {
                let leadership = p.leadership();
                !leadership.is_local && leadership.leader == leader
            })
            .map(|(name, p)| (name.clone(), p.clone()))
            .collect()
    }

    /// The leaders of the partitions this shard follows.
    pub fn followed_leaders(&self) -> Vec<i32> {
        let partitions = self.partitions.borrow();
        let mut leaders: Vec<i32> = partitions
            .values()
            .flatten()
            .flatten()
            .map(|p| p.leadership())
            .filter(|l| !l.is_local && l.leader != crate::metadata::NO_LEADER)
            .map(|l| l.leader)
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        leaders
    }

    /// A topic-level setting as it applies on this node: the topic's own value, else this
    /// broker's or the cluster's dynamic default, else the static one
    /// (`config::dynamic::topic_setting`).
    pub fn topic_setting(&self, topic: &TopicMeta, key: &str) -> Option<String> {
        let image = self.image.borrow();
        crate::config::dynamic::topic_setting(&self.config, &image, self.config.node_id, topic, key)
    }

    /// Whether `topic`'s `cleanup.policy` (its own, else the broker's default) includes
    /// `policy` (`delete` or `compact`).
    pub fn cleans_by(&self, topic: &TopicMeta, policy: &str) -> bool {
        self.topic_setting(topic, "cleanup.policy")
            .unwrap_or_else(|| "delete".into())
            .split(',')
            .any(|p| p.trim() == policy)
    }

    /// Every partition this shard owns, with its topic's name.
    pub fn owned_partitions_by_topic(&self) -> Vec<(String, Rc<Partition>)> {
        let partitions = self.partitions.borrow();
        partitions
            .iter()
            .flat_map(|(name, slots)| slots.iter().flatten().map(|p| (name.clone(), p.clone())))
            .collect()
    }

    /// The log settings of `topic`: its overrides, else the broker's defaults.
    fn log_config(&self, topic: &TopicMeta) -> LogConfig {
        let number = |key: &str, fallback: u64| {
            self.topic_setting(topic, key)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(fallback)
        };
        LogConfig {
            segment_bytes_max: number("segment.bytes", self.config.segment_bytes_max),
            segment_ms_max: number("segment.ms", self.config.segment_ms_max),
            index_interval_bytes: number(
                "index.interval.bytes",
                self.config.index_interval_bytes.into(),
            ) as u32,
            io_mode: self.config.io_mode,
            write_buffer_bytes_max: self.config.write_buffer_bytes_max,
            batch_bytes_max: number("max.message.bytes", self.config.message_bytes_max as u64)
                as usize,
            producer_id_expiration_ms: self.config.producer_id_expiration.as_millis() as i64,
        }
    }

    async fn open_partition(
        &self,
        topic: &TopicMeta,
        index: i32,
        state: &PartitionState,
    ) -> Result<Rc<Partition>, storage::StorageError> {
        let log_config = self.log_config(topic);
        let dir = self
            .config
            .log_dir
            .join(format!("{}-{}", topic.name, index));
        let log = Log::open(dir, log_config, self.cache.clone()).await?;
        let checkpointed = self
            .checkpointed_high_watermarks
            .borrow_mut()
            .remove(&(topic.name.clone(), index));
        let high_watermark =
            initial_high_watermark(state.replicas.len(), checkpointed, log.written_end_offset());
        let partition = Partition::new(
            topic.id,
            index,
            log,
            state,
            self.config.node_id,
            high_watermark,
        );
        partition.apply_settings(self.partition_settings(topic));
        let replicated = state.replicas.len() > 1;
        partition.count_synced(replicated && self.config.replica_fetch.fsync_before_fetch);
        Ok(partition)
    }

    /// Flushes and closes every log; the shard serves nothing afterwards.
    pub async fn close(&self) {
        self.stopped.set(true);
        self.stopping.notify_all();
        self.fetchers.followed_changed.notify_all();
        let partitions: Vec<Rc<Partition>> = {
            let mut map = self.partitions.borrow_mut();
            map.drain()
                .flat_map(|(_, slots)| slots.into_iter().flatten())
                .collect()
        };
        for partition in partitions {
            partition.retire();
            if let Err(error) = partition.log.close().await {
                tracing::error!(partition = partition.index, %error, "closing log failed");
            }
        }
    }
}
