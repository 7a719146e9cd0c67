//! The controller: the one place metadata changes, on shard 0.
//!
//! Each change is validated against the image of everything proposed so far, proposed to
//! the metadata store as one batch of records, and applied to that image at once, so the
//! next change is validated against it even while this one awaits its commit. Once
//! committed, the records are taken from the store's committed stream, applied to the
//! committed image, and that image is published to every shard; the answer goes back only
//! after every shard has installed it (opened or removed its logs).
//!
//! Invariants: validation, proposal and the apply to the proposed image happen with no
//! `.await` in between, so two changes never interleave; a proposal that fails puts the
//! proposed image back to the committed one; images are published in epoch order per shard,
//! and a shard ignores an image older than the one it has.
//!
//! In a quorum of several voters (`cluster.rs`) only the active controller (the Raft
//! leader, once it applied everything committed before its term) changes metadata; every
//! other node applies what the log commits, and forwards its own broker registration.

mod alter_partitions;
mod cluster;
mod configs;
mod elect;
mod partitions;
mod placement;
mod quorum_view;
mod reassign;
mod rpc;
mod validate;

pub use cluster::ForwardedRequest;
pub use elect::Election;
pub use partitions::{PartitionOutcome, Reassignment, TopicPartition};
pub use quorum_view::QuorumView;
pub use validate::{validate_topic_config, validate_topic_config_name, validate_topic_name};

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use shard::ShardStopped;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::errors::code;
use crate::metadata::image::{partition_record, topic_records};
use crate::metadata::records::{
    BrokerEndpoint, BrokerRegistrationChangeRecord, ProducerIdsRecord, RegisterBrokerRecord,
    RemoveTopicRecord, SECURITY_PROTOCOL_PLAINTEXT,
};
use crate::metadata::{
    MetadataImage, MetadataRecord, MetadataStore, PartitionState, StoreError, TopicMeta, NO_LEADER,
};
use crate::quorum::Quorum;
use crate::shard_state::Shard;
use std::sync::atomic::{AtomicI32, Ordering};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partition_count: i32,
    pub replication_factor: i16,
    /// The brokers of each partition, when the request names them; they then decide the
    /// partition count and the replication factor.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: BTreeMap<String, String>,
}

pub struct Controller {
    store: RefCell<Box<dyn MetadataStore + Send>>,
    /// Everything proposed: what the next change is validated against.
    proposed: RefCell<MetadataImage>,
    /// Everything committed: what shards are given.
    committed: RefCell<MetadataImage>,
    /// The quorum of several voters this node is one of; `None` for a one-voter node.
    quorum: Option<Arc<Quorum>>,
    /// In a quorum: the Raft term in which this node is the active controller, if it is.
    active_term: Cell<Option<u64>>,
    /// The active controller as this node knows it, for every shard's answers.
    active_controller: Arc<AtomicI32>,
    /// While active: when each broker was last heard from (kept in memory, as Kafka does).
    heartbeats: RefCell<HashMap<i32, Instant>>,
    /// While active: since when, the grace every broker has before its first heartbeat.
    active_since: Cell<Instant>,
    /// `broker.session.timeout.ms`.
    session_timeout: Duration,
    /// `broker.heartbeat.interval.ms`: how long a broker whose connection to this voter
    /// ended has to connect again before it is fenced (see `fence_silent_brokers`).
    reconnect_grace: Duration,
    /// The voters whose connections to this one were all closed by their end, and since
    /// when (the quorum's latest status).
    disconnected: RefCell<Vec<(u64, Instant)>>,
    /// `metadata.log.max.record.bytes.between.snapshots`.
    snapshot_bytes: u64,
    /// The broker default of `unclean.leader.election.enable`.
    unclean_default: Cell<bool>,
    /// `auto.leader.rebalance.enable` and `leader.imbalance.check.interval.seconds`: how
    /// often the active controller gives leadership back to preferred replicas, if at all.
    leader_balance_interval: Option<Duration>,
    /// The epoch of the newest image sent to the shards: a committed image past it is
    /// still to be published, whichever task applied it.
    published: Cell<u64>,
    /// This node's `node.id` and cluster id, and this process's incarnation of its broker.
    node_id: i32,
    cluster_id: String,
    incarnation_id: Uuid,
    /// The correlation id of the last request this node sent the active controller.
    correlation: Cell<i32>,
}

impl Controller {
    /// Loads the committed metadata.
    pub fn load(
        mut store: Box<dyn MetadataStore + Send>,
    ) -> Result<Controller, crate::metadata::StoreError> {
        let image = store.load()?;
        Ok(Controller {
            store: RefCell::new(store),
            proposed: RefCell::new(image.clone()),
            committed: RefCell::new(image),
            quorum: None,
            active_term: Cell::new(None),
            active_controller: Arc::new(AtomicI32::new(-1)),
            heartbeats: RefCell::new(HashMap::new()),
            active_since: Cell::new(Instant::now()),
            session_timeout: Duration::from_secs(9),
            reconnect_grace: Duration::from_secs(2),
            disconnected: RefCell::new(Vec::new()),
            snapshot_bytes: u64::MAX,
            unclean_default: Cell::new(false),
            leader_balance_interval: None,
            published: Cell::new(0),
            node_id: -1,
            cluster_id: String::new(),
            incarnation_id: Uuid::new_v4(),
            correlation: Cell::new(0),
        })
    }

    /// The controller of the node `config` describes: its own active controller while it is
    /// a one-voter quorum, else whoever `quorum` elects; `config.active_controller` is told
    /// which node that is.
    pub fn serving(mut self, config: &BrokerConfig, quorum: Option<Arc<Quorum>>) -> Controller {
        if quorum.is_none() {
            config
                .active_controller
                .store(config.node_id, Ordering::Relaxed);
        }
        self.quorum = quorum;
        self.node_id = config.node_id;
        self.cluster_id = config.cluster_id.clone().unwrap_or_default();
        self.active_controller = config.active_controller.clone();
        self.session_timeout = config.session_timeout;
        self.reconnect_grace = config.heartbeat_interval;
        self.snapshot_bytes = config.metadata_snapshot_bytes;
        self.unclean_default
            .set(config.topic_defaults["unclean.leader.election.enable"] == "true");
        self.leader_balance_interval = config.leader_balance_interval;
        if let Some(status) = self.quorum.as_ref().and_then(|q| q.status()) {
            self.refresh_role(&status);
        }
        self
    }

    /// The committed image.
    pub fn image(&self) -> Arc<MetadataImage> {
        Arc::new(self.committed.borrow().clone())
    }

    /// Registers this node as a new incarnation of broker `node.id`, fenced until
    /// [`Controller::unfence_local`]: a broker leads nothing before its partitions are open.
    /// In a quorum, a node that is not the active controller asks the one that is.
    pub async fn register_local(&self, config: &BrokerConfig) -> Result<(), Refusal> {
        let request = ForwardedRequest::Register {
            broker_id: config.node_id,
            cluster_id: self.cluster_id.clone(),
            incarnation_id: self.incarnation_id,
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: config.advertised.host.clone(),
                port: config.advertised.port,
                security_protocol: SECURITY_PROTOCOL_PLAINTEXT,
            }],
            rack: config.rack.clone(),
        };
        let epoch = self.execute_or_forward(None, request).await?.value();
        self.wait_for_epoch(config.node_id, epoch, false).await
    }

    /// A new incarnation of broker `broker_id`, fenced, at the epoch after its last one;
    /// the incarnation registered already (a registration sent again) keeps its epoch.
    async fn register(
        &self,
        broker_id: i32,
        cluster_id: &str,
        incarnation_id: Uuid,
        endpoints: Vec<BrokerEndpoint>,
        rack: Option<String>,
    ) -> Result<i64, Refusal> {
        if cluster_id != self.cluster_id {
            return Err(Refusal::new(
                ResponseError::InconsistentClusterId,
                format!(
                    "broker {broker_id} is of cluster {cluster_id}, this is cluster {}",
                    self.cluster_id
                ),
            ));
        }
        let known = self
            .proposed
            .borrow()
            .brokers
            .get(&broker_id)
            .map(|broker| (broker.epoch, broker.incarnation_id));
        let epoch = match known {
            Some((epoch, known)) if known == incarnation_id => return Ok(epoch),
            Some((epoch, _)) => epoch + 1,
            None => 1,
        };
        let registration = RegisterBrokerRecord {
            broker_id,
            incarnation_id,
            broker_epoch: epoch,
            endpoints,
            rack,
            fenced: true,
            in_controlled_shutdown: false,
        };
        self.commit(vec![MetadataRecord::RegisterBroker(registration)])
            .await?;
        Ok(epoch)
    }

    /// Unfences this node once every shard serves its partitions, and publishes it.
    pub async fn unfence_local(shard: &Rc<Shard>) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        let node = shard.config.node_id;
        let Some(epoch) = controller
            .committed
            .borrow()
            .brokers
            .get(&node)
            .map(|b| b.epoch)
        else {
            return Err(Refusal::new(
                ResponseError::BrokerIdNotRegistered,
                format!("broker {node} is not registered"),
            ));
        };
        let request = ForwardedRequest::Heartbeat {
            broker_id: node,
            broker_epoch: epoch,
            metadata_offset: controller.metadata_end_offset() as i64,
            want_fence: false,
        };
        controller.execute_or_forward(Some(shard), request).await?;
        controller.wait_for_epoch(node, epoch, true).await?;
        Controller::publish(shard, None).await
    }

    /// STALE_BROKER_EPOCH unless `broker_epoch` is the current incarnation of `broker_id`.
    fn check_broker_epoch(&self, broker_id: i32, broker_epoch: i64) -> Result<(), Refusal> {
        let current = self
            .proposed
            .borrow()
            .brokers
            .get(&broker_id)
            .map(|b| b.epoch);
        if current != Some(broker_epoch) {
            return Err(Refusal::new(
                ResponseError::StaleBrokerEpoch,
                format!("broker {broker_id} is at epoch {current:?}, not {broker_epoch}"),
            ));
        }
        Ok(())
    }

    /// The record that fences (or unfences) incarnation `broker_epoch` of broker
    /// `broker_id`, if that is its current incarnation.
    fn registration_change(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        fenced: bool,
        in_controlled_shutdown: Option<bool>,
    ) -> Result<MetadataRecord, Refusal> {
        self.check_broker_epoch(broker_id, broker_epoch)?;
        Ok(MetadataRecord::BrokerRegistrationChange(
            BrokerRegistrationChangeRecord {
                broker_id,
                broker_epoch,
                fenced: Some(fenced),
                in_controlled_shutdown,
            },
        ))
    }

    /// Unfences incarnation `broker_epoch` of broker `broker_id`.
    async fn unfence(&self, broker_id: i32, broker_epoch: i64) -> Result<i64, Refusal> {
        let mut records = vec![self.registration_change(broker_id, broker_epoch, false, None)?];
        // Partitions left without a leader while it was gone take it back, if it is in their
        // ISR (or, where the topic allows an unclean election, a replica).
        let live: Vec<i32> = self
            .proposed
            .borrow()
            .live_brokers()
            .map(|b| b.id)
            .collect();
        let may_lead = |id| id == broker_id || live.contains(&id);
        records.extend(self.partition_changes(|topic, state| {
            (state.leader == NO_LEADER && state.replicas.contains(&broker_id))
                .then(|| partitions::elected(state, self.election_on_failure(topic), may_lead))
        }));
        self.commit(records).await?;
        // Its session starts now: whatever was heard from an earlier incarnation is past.
        self.heartbeats
            .borrow_mut()
            .insert(broker_id, Instant::now());
        Ok(broker_epoch)
    }

    /// The metadata log's end offset: records committed so far (its high watermark, a
    /// one-voter quorum committing what it writes).
    pub fn metadata_end_offset(&self) -> u64 {
        self.store.borrow().end_offset()
    }

    /// This node's registration epoch, -1 before it registered.
    pub fn broker_epoch(&self, broker_id: i32) -> i64 {
        self.committed
            .borrow()
            .brokers
            .get(&broker_id)
            .map_or(-1, |broker| broker.epoch)
    }

    /// Validates `spec`; with `validate_only` nothing else happens. Otherwise commits the
    /// topic and publishes it to every shard before returning.
    pub async fn create_topic(
        shard: &Rc<Shard>,
        spec: TopicSpec,
        validate_only: bool,
    ) -> Result<TopicMeta, Refusal> {
        let controller = Self::of(shard);
        validate_topic_name(&spec.name)?;
        if controller.proposed.borrow().topic(&spec.name).is_some() {
            return Err(Refusal::new(
                ResponseError::TopicAlreadyExists,
                format!("Topic '{}' already exists.", spec.name),
            ));
        }
        for (key, value) in &spec.configs {
            validate_topic_config(key, value)?;
        }
        let id = client::random_kafka_uuid();
        let assignments = match spec.assignments {
            Some(assignments) => {
                controller.check_assignments(&assignments, None)?;
                assignments
            }
            None => {
                if !(1..=PARTITIONS_MAX).contains(&spec.partition_count) {
                    return Err(Refusal::new(
                        ResponseError::InvalidPartitions,
                        format!("Number of partitions must be between 1 and {PARTITIONS_MAX}."),
                    ));
                }
                controller.place(0..spec.partition_count, spec.replication_factor, &id)?
            }
        };
        let topic = TopicMeta {
            name: spec.name,
            id,
            partitions: assignments.into_iter().map(new_partition).collect(),
            configs: spec.configs,
        };
        if validate_only {
            return Ok(topic);
        }
        controller.commit(topic_records(&topic)).await?;
        Controller::publish(shard, Some(topic.id)).await?;
        Ok(topic)
    }

    /// A topic this node creates for itself (`__consumer_offsets`, or auto-creation by
    /// Metadata), asked from any shard; a node that is not the active controller forwards
    /// it there, as Kafka's brokers do.
    pub async fn create_internal_topic_from(
        shard: &Rc<Shard>,
        spec: TopicSpec,
    ) -> Result<Result<TopicMeta, Refusal>, ShardStopped> {
        shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                Controller::create_topic_anywhere(&controller, spec).await
            })
            .await
    }

    /// A client's CreateTopics, asked from any shard: the controller runs on shard 0, and a
    /// node that is not the active controller forwards the creation there (it validates
    /// `validate_only` requests itself, against its committed image).
    pub async fn create_topic_from(
        shard: &Rc<Shard>,
        spec: TopicSpec,
        validate_only: bool,
    ) -> Result<Result<TopicMeta, Refusal>, ShardStopped> {
        shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                if validate_only {
                    Controller::create_topic(&controller, spec, true).await
                } else {
                    Controller::create_topic_anywhere(&controller, spec).await
                }
            })
            .await
    }

    /// A client's change to topics (DeleteTopics, CreatePartitions, IncrementalAlterConfigs),
    /// on the active controller or forwarded to it; answered once this node's shards serve
    /// the outcome.
    pub async fn change_topics(
        shard: &Rc<Shard>,
        request: ForwardedRequest,
        client: Option<IpAddr>,
    ) -> Result<(), Refusal> {
        Self::of(shard)
            .execute_or_forward_for(Some(shard), request, client)
            .await
            .map(drop)
    }

    /// Deletes the topic and its data on every shard before returning.
    async fn delete_topic(shard: &Rc<Shard>, id: Uuid) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        if controller.proposed.borrow().topic_by_id(&id).is_none() {
            return Err(Refusal::new(
                ResponseError::UnknownTopicId,
                "unknown topic id",
            ));
        }
        controller
            .commit(vec![MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: id,
            })])
            .await?;
        Controller::publish(shard, Some(id)).await
    }

    /// Grows the topic to `partition_count` partitions, on the brokers `assignments` names
    /// for the new ones, or placed like a new topic's.
    async fn create_partitions(
        shard: &Rc<Shard>,
        name: &str,
        partition_count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        let Some((id, current, replication)) = controller
            .proposed
            .borrow()
            .topic(name)
            .map(|t| (t.id, t.partition_count(), t.partitions[0].replicas.len()))
        else {
            return Err(Refusal::new(
                ResponseError::UnknownTopicOrPartition,
                format!("The topic '{name}' does not exist."),
            ));
        };
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
        let added = match assignments {
            Some(assignments) => {
                if assignments.len() as i32 != partition_count - current {
                    return Err(Refusal::new(
                        ResponseError::InvalidReplicaAssignment,
                        format!(
                            "Attempted to add {} additional partition(s), but only {} assignment(s) were specified.",
                            partition_count - current,
                            assignments.len()
                        ),
                    ));
                }
                controller.check_assignments(&assignments, Some(replication))?;
                assignments
            }
            None => controller.place(current..partition_count, replication as i16, &id)?,
        };
        if validate_only {
            return Ok(());
        }
        let records = added
            .into_iter()
            .zip(current..)
            .map(|(replicas, index)| partition_record(id, index, &new_partition(replicas)))
            .collect();
        controller.commit(records).await?;
        Controller::publish(shard, Some(id)).await
    }

    /// Hands broker `broker_id` the next block of producer ids (Kafka's AllocateProducerIds):
    /// the block is committed as taken before it is returned, so after any crash the next
    /// block starts past every id this one may have given out.
    pub async fn allocate_producer_ids(
        shard: &Rc<Shard>,
        broker_id: i32,
    ) -> Result<ProducerIdBlock, Refusal> {
        let controller = Self::of(shard);
        let request = ForwardedRequest::AllocateProducerIds {
            broker_id,
            broker_epoch: controller.broker_epoch(broker_id),
        };
        let first = controller
            .execute_or_forward(Some(shard), request)
            .await?
            .value();
        Ok(ProducerIdBlock {
            first,
            size: PRODUCER_ID_BLOCK_SIZE,
        })
    }

    /// Commits the next block of producer ids to incarnation `broker_epoch` of `broker_id`,
    /// if that is its current one (as Kafka checks it); the block's first id.
    async fn allocate_block(&self, broker_id: i32, broker_epoch: i64) -> Result<i64, Refusal> {
        self.check_broker_epoch(broker_id, broker_epoch)?;
        let first = self.proposed.borrow().next_producer_id_block_start;
        let Some(next) = first.checked_add(PRODUCER_ID_BLOCK_SIZE) else {
            return Err(Refusal::new(
                ResponseError::UnknownServerError,
                "Exhausted all producer ids: the next block would pass i64::MAX.",
            ));
        };
        self.commit(vec![MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id,
            broker_epoch,
            next_producer_id: next,
        })])
        .await?;
        Ok(first)
    }

    /// [`Controller::allocate_producer_ids`] asked from any shard.
    pub async fn allocate_producer_ids_from(
        shard: &Rc<Shard>,
        broker_id: i32,
    ) -> Result<Result<ProducerIdBlock, Refusal>, ShardStopped> {
        shard
            .router
            .call(shard, 0, move |controller: Rc<Shard>| async move {
                Controller::allocate_producer_ids(&controller, broker_id).await
            })
            .await
    }

    fn of(shard: &Shard) -> &Controller {
        shard
            .controller
            .as_ref()
            .expect("controller calls run on shard 0")
    }

    /// Replicas for partitions `indexes`: `replication_factor` live brokers each, striped so
    /// that leaders (the first replica) spread over the brokers, across racks when brokers
    /// name theirs (`placement.rs`), from a start `seed` picks.
    fn place(
        &self,
        indexes: std::ops::Range<i32>,
        replication_factor: i16,
        seed: &Uuid,
    ) -> Result<Vec<Vec<i32>>, Refusal> {
        let brokers: Vec<placement::Candidate> = self
            .proposed
            .borrow()
            .live_brokers()
            .map(|b| placement::Candidate {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect();
        if replication_factor <= 0 {
            return Err(Refusal::new(
                ResponseError::InvalidReplicationFactor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ));
        }
        let factor = replication_factor as usize;
        if factor > brokers.len() {
            return Err(Refusal::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "Unable to replicate the partition {factor} time(s): The target replication \
                     factor of {factor} cannot be reached because only {} broker(s) are registered.",
                    brokers.len()
                ),
            ));
        }
        let start = (seed.as_u128() % brokers.len() as u128) as usize;
        Ok(placement::place(&brokers, indexes, factor, start))
    }

    /// Kafka's checks of a manual assignment: registered brokers, none twice in a
    /// partition, the same number of replicas in every partition (and as `replication`).
    fn check_assignments(
        &self,
        assignments: &[Vec<i32>],
        replication: Option<usize>,
    ) -> Result<(), Refusal> {
        let invalid = |message: String| {
            Err(Refusal::new(
                ResponseError::InvalidReplicaAssignment,
                message,
            ))
        };
        let image = self.proposed.borrow();
        let Some(first) = assignments.first() else {
            return invalid("The manual partition assignment is empty.".into());
        };
        let expected = replication.unwrap_or(first.len());
        for replicas in assignments {
            if replicas.is_empty() {
                return invalid(
                    "The manual partition assignment includes an empty replica list.".into(),
                );
            }
            if replicas.len() != expected {
                return invalid(format!(
                    "The manual partition assignment includes a partition with {} replica(s), \
                     but this is not consistent with previous partitions, which have {expected} replica(s).",
                    replicas.len()
                ));
            }
            for (i, id) in replicas.iter().enumerate() {
                if replicas[..i].contains(id) {
                    return invalid(format!(
                        "The manual partition assignment includes the broker {id} more than once."
                    ));
                }
                if !image.brokers.contains_key(id) {
                    return invalid(format!(
                        "The manual partition assignment includes broker {id}, but no such broker is registered."
                    ));
                }
            }
        }
        Ok(())
    }

    /// Proposes `records` as one batch after checking that they apply, and waits for their
    /// commit; then applies what the store committed to the committed image.
    async fn commit(&self, records: Vec<MetadataRecord>) -> Result<(), Refusal> {
        if self.quorum.is_some() && self.active_term.get().is_none() {
            return Err(self.not_controller());
        }
        let mut next = self.proposed.borrow().clone();
        for record in &records {
            next.apply(record)
                .map_err(|reason| Refusal::new(ResponseError::UnknownServerError, reason))?;
        }
        let proposed = self.store.borrow_mut().propose(records);
        let committed = match proposed {
            Ok(commit) => {
                *self.proposed.borrow_mut() = next;
                commit.await
            }
            Err(error) => Err(error),
        };
        if let Err(error) = committed {
            *self.proposed.borrow_mut() = self.committed.borrow().clone();
            if let StoreError::NotController { .. } = error {
                return Err(self.not_controller());
            }
            tracing::error!(%error, "metadata commit failed");
            return Err(Refusal::new(
                ResponseError::KafkaStorageError,
                error.to_string(),
            ));
        }
        self.apply_committed();
        Ok(())
    }

    /// Applies what the store committed since the last call to the committed image (and,
    /// on a node that is not the active controller, makes it the proposed one too); true
    /// if anything was.
    fn apply_committed(&self) -> bool {
        let batches = self.store.borrow_mut().take_committed();
        if batches.is_empty() {
            return false;
        }
        let mut image = self.committed.borrow_mut();
        for batch in &batches {
            batch.apply_to(&mut image);
        }
        if self.quorum.is_some() && self.active_term.get().is_none() {
            *self.proposed.borrow_mut() = image.clone();
        }
        true
    }

    /// [`Controller::publish`]es the committed image if the shards were not sent it yet.
    async fn publish_if_behind(shard: &Rc<Shard>) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        if controller.committed.borrow().epoch > controller.published.get() {
            Controller::publish(shard, None).await?;
        }
        Ok(())
    }

    /// Sends the committed image to every shard and waits until each has installed it. Fails
    /// if a shard could not open or delete a log of topic `concerning` (the one the request
    /// changed); another topic's failed logs are that topic's trouble, and were logged.
    async fn publish(shard: &Rc<Shard>, concerning: Option<Uuid>) -> Result<(), Refusal> {
        let controller = Self::of(shard);
        let image = controller.image();
        controller
            .published
            .set(controller.published.get().max(image.epoch));
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
                                .find(|(topic_id, _)| Some(*topic_id) == concerning)
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

/// A new partition on `replicas`: all in sync, led by the first, at epoch 0.
fn new_partition(replicas: Vec<i32>) -> PartitionState {
    PartitionState {
        isr: replicas.clone(),
        leader: replicas[0],
        replicas,
        removing_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        leader_epoch: 0,
        partition_epoch: 0,
    }
}

#[cfg(test)]
mod registration_tests {
    use futures_lite::future::block_on;

    use super::*;
    use crate::metadata::FileMetadataStore;

    fn controller(dir: &std::path::Path) -> Controller {
        let store = Box::new(FileMetadataStore::new(dir, 1));
        let mut controller = Controller::load(store).expect("loads");
        controller.cluster_id = "cluster-a".into();
        controller
    }

    fn register(controller: &Controller, cluster: &str, incarnation: Uuid) -> Result<i64, Refusal> {
        block_on(controller.register(2, cluster, incarnation, Vec::new(), None))
    }

    fn fenced(controller: &Controller) -> bool {
        controller.proposed.borrow().brokers[&2].fenced
    }

    #[test]
    fn an_incarnation_registering_again_keeps_its_epoch_and_a_new_one_gets_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let controller = controller(dir.path());
        let first = Uuid::new_v4();
        assert_eq!(register(&controller, "cluster-a", first), Ok(1));
        // The answer was lost and the broker asks again: nothing changes.
        assert_eq!(register(&controller, "cluster-a", first), Ok(1));
        assert_eq!(register(&controller, "cluster-a", Uuid::new_v4()), Ok(2));
        let refused = register(&controller, "cluster-b", Uuid::new_v4()).unwrap_err();
        assert_eq!(
            refused.error_code,
            code(ResponseError::InconsistentClusterId)
        );
        assert_eq!(controller.proposed.borrow().brokers[&2].epoch, 2);
    }

    #[test]
    fn a_heartbeat_unfences_unless_it_wants_to_stay_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let controller = controller(dir.path());
        let epoch = register(&controller, "cluster-a", Uuid::new_v4()).unwrap();
        assert_eq!(block_on(controller.heartbeat(2, epoch, true)), Ok(true));
        assert!(fenced(&controller));
        assert_eq!(block_on(controller.heartbeat(2, epoch, false)), Ok(false));
        assert!(!fenced(&controller));
        let stale = block_on(controller.heartbeat(2, epoch - 1, false)).unwrap_err();
        assert_eq!(stale.error_code, code(ResponseError::StaleBrokerEpoch));
    }

    #[test]
    fn producer_ids_go_only_to_the_registered_incarnation() {
        let dir = tempfile::tempdir().unwrap();
        let controller = controller(dir.path());
        let epoch = register(&controller, "cluster-a", Uuid::new_v4()).unwrap();
        let stale = block_on(controller.allocate_block(2, epoch + 1)).unwrap_err();
        assert_eq!(stale.error_code, code(ResponseError::StaleBrokerEpoch));
        let first = block_on(controller.allocate_block(2, epoch)).unwrap();
        let next = block_on(controller.allocate_block(2, epoch)).unwrap();
        assert_eq!(next, first + PRODUCER_ID_BLOCK_SIZE);
    }
}
