//! The controller in a quorum of several voters: who is active, following the log, and the
//! requests a node forwards to the active controller (its own registration, unfencing and
//! heartbeats, blocks of producer ids, the topics it creates for itself, and its clients'
//! CreateTopics, DeleteTopics, CreatePartitions and IncrementalAlterConfigs, as Kafka's
//! brokers forward them), and fencing the brokers that stopped heartbeating.
//!
//! Invariants: a node is the active controller only in a term in which its voter leads and
//! has applied everything committed before that term (`QuorumStatus::active`); entering or
//! leaving that role starts validation again from the committed image, so nothing a former
//! leader proposed and lost is ever validated against; a forwarded request is executed only
//! by the active controller, against its own proposed image (the epoch a registration gets
//! is the controller's to choose, never the requester's).

use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::alter_partitions::AlterPartitionItem;
use super::partitions::{elected, PartitionOutcome, Reassignment, TopicPartition};
use super::quorum_view::QuorumView;
use super::rpc;
use super::{Controller, Election, Refusal, TopicSpec};
use crate::metadata::records::BrokerEndpoint;
use crate::metadata::NO_LEADER;
use crate::quorum::runner::ForwardRequest;
use crate::quorum::QuorumStatus;
use crate::shard_state::Shard;

/// How often a node looks at the quorum: what it committed, who leads, what was forwarded.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(20);
/// How long a forwarded request, or waiting to see its outcome in the log, may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping node waits for the controller to move its leaderships away.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a node asks of the active controller.
/// Each travels as the Kafka request that asks it (`rpc/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardedRequest {
    /// A new incarnation of a broker (Kafka's BrokerRegistration); answered with its epoch.
    /// A registration repeated by the same incarnation gets the same epoch.
    Register {
        broker_id: i32,
        cluster_id: String,
        incarnation_id: Uuid,
        endpoints: Vec<BrokerEndpoint>,
        rack: Option<String>,
    },
    /// A block of producer ids (Kafka's AllocateProducerIds); answered with its first id.
    AllocateProducerIds { broker_id: i32, broker_epoch: i64 },
    /// A topic a broker creates for itself: `__consumer_offsets`, or one a client's
    /// Metadata request auto-creates.
    CreateTopic(TopicSpec),
    /// Broker `broker_id`, incarnation `broker_epoch`, is alive (Kafka's BrokerHeartbeat),
    /// has applied the metadata log up to `metadata_offset`, and unless `want_fence` asks to
    /// be unfenced: a broker serves its partitions before it first sends one.
    Heartbeat {
        broker_id: i32,
        broker_epoch: i64,
        metadata_offset: i64,
        want_fence: bool,
    },
    /// Broker `broker_id`, incarnation `broker_epoch`, is stopping (Kafka's controlled
    /// shutdown, a BrokerHeartbeat that wants to shut down): its leaderships go to other ISR
    /// members, or none, and it is fenced now rather than a session later.
    ControlledShutdown { broker_id: i32, broker_epoch: i64 },
    /// A client's DeleteTopics, for one topic (its id as a number).
    DeleteTopic { topic_id: u128 },
    /// A client's CreatePartitions, for one topic.
    CreatePartitions {
        name: String,
        partition_count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    },
    /// A leader changes the ISRs of partitions it leads (Kafka's AlterPartition, one item a
    /// partition, all in one commit); answered with each item's new partition epoch.
    AlterPartitions {
        broker_id: i32,
        broker_epoch: i64,
        items: Vec<AlterPartitionItem>,
    },
    /// A client's IncrementalAlterConfigs or AlterConfigs, for one topic: `Some` sets,
    /// `None` removes.
    AlterTopicConfigs {
        name: String,
        changes: Vec<(String, Option<String>)>,
        validate_only: bool,
    },
    /// The same for dynamic broker settings: `resource` a broker id, or "" cluster-wide.
    AlterBrokerConfigs {
        resource: String,
        changes: Vec<(String, Option<String>)>,
        validate_only: bool,
    },
    /// A client's ElectLeaders: `None` names every partition.
    ElectLeaders {
        election: Election,
        partitions: Option<Vec<TopicPartition>>,
    },
    /// A client's AlterPartitionReassignments.
    AlterReassignments {
        reassignments: Vec<Reassignment>,
        allow_replication_factor_change: bool,
    },
    /// A client's DescribeQuorum, answered from the leader's account.
    DescribeQuorum,
}

impl ForwardedRequest {
    /// A client's change to topics: once its outcome is in this node's log, its shards
    /// must serve it before the client hears back.
    fn changes_topics(&self) -> bool {
        matches!(
            self,
            Self::CreateTopic(_)
                | Self::DeleteTopic { .. }
                | Self::CreatePartitions { .. }
                | Self::AlterTopicConfigs { .. }
                | Self::AlterBrokerConfigs { .. }
                | Self::ElectLeaders { .. }
                | Self::AlterReassignments { .. }
        )
    }
}

/// What the active controller answers a request with: a number (an epoch, a producer id,
/// or 0), or an outcome per partition.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Executed {
    Value(i64),
    /// A heartbeat's: whether the broker is fenced now, and whether it may shut down.
    Heartbeat {
        fenced: bool,
        shutting_down: bool,
    },
    Partitions(Vec<PartitionOutcome>),
    /// One outcome per item of a batch (AlterPartitions: each item's new partition epoch).
    Epochs(Vec<Result<i64, Refusal>>),
    Quorum(QuorumView),
}

impl Executed {
    pub(super) fn value(self) -> i64 {
        match self {
            Executed::Value(value) => value,
            Executed::Heartbeat { .. }
            | Executed::Partitions(_)
            | Executed::Epochs(_)
            | Executed::Quorum(_) => 0,
        }
    }

    pub(super) fn partitions(self) -> Vec<PartitionOutcome> {
        match self {
            Executed::Partitions(outcomes) => outcomes,
            _ => Vec::new(),
        }
    }

    pub(super) fn epochs(self) -> Vec<Result<i64, Refusal>> {
        match self {
            Executed::Epochs(outcomes) => outcomes,
            _ => Vec::new(),
        }
    }
}

impl Controller {
    pub(super) fn not_controller(&self) -> Refusal {
        let active = self.active_controller.load(Ordering::Relaxed);
        Refusal::new(
            ResponseError::NotController,
            format!("this node is not the active controller (node {active} is)"),
        )
    }

    /// Takes the quorum's view: becomes or stops being the active controller, and tells
    /// every shard who is.
    pub(super) fn refresh_role(&self, status: &QuorumStatus) {
        let active = status.active.then_some(status.term);
        if active != self.active_term.get() {
            if active.is_some() {
                // Everything committed before this term is in the channel by now.
                self.apply_committed();
                // Every broker gets a full session to be heard from by this controller.
                self.heartbeats.borrow_mut().clear();
                self.active_since.set(Instant::now());
            }
            *self.proposed.borrow_mut() = self.committed.borrow().clone();
            self.active_term.set(active);
            tracing::info!(
                active = active.is_some(),
                term = status.term,
                leader = ?status.leader,
                "metadata quorum role"
            );
        }
        let leader = status.leader.map_or(-1, |leader| leader as i32);
        self.active_controller.store(leader, Ordering::Relaxed);
        self.disconnected.replace(status.disconnected.clone());
    }

    /// Where the quorum stands, for DescribeQuorum; `None` for a one-voter node.
    pub async fn quorum_status(&self) -> Option<QuorumStatus> {
        self.quorum.as_ref()?.status_async().await
    }

    /// Runs `request` here if this node is the active controller (or a one-voter node),
    /// else forwards it to the leader, retrying across elections until `FORWARD_TIMEOUT`.
    /// `shard` is shard 0, once the node runs (creating a topic publishes it).
    pub(super) async fn execute_or_forward(
        &self,
        shard: Option<&Rc<Shard>>,
        request: ForwardedRequest,
    ) -> Result<Executed, Refusal> {
        self.execute_or_forward_for(shard, request, None).await
    }

    /// As [`Controller::execute_or_forward`], for a client at `client` (a forwarded client
    /// request's Envelope names it).
    pub(super) async fn execute_or_forward_for(
        &self,
        shard: Option<&Rc<Shard>>,
        request: ForwardedRequest,
        client: Option<IpAddr>,
    ) -> Result<Executed, Refusal> {
        let Some(quorum) = self.quorum.clone() else {
            return self.execute(shard, request).await;
        };
        let deadline = std::time::Instant::now() + FORWARD_TIMEOUT;
        loop {
            if let Some(status) = quorum.status_async().await {
                self.refresh_role(&status);
            }
            let outcome = if self.active_term.get().is_some() {
                self.execute(shard, request.clone()).await
            } else {
                let correlation_id = self.correlation.get().wrapping_add(1);
                self.correlation.set(correlation_id);
                let call = rpc::encode_call(&request, self.node_id, correlation_id, client);
                match quorum.proposer().forward(call.to_vec()).await {
                    Ok(answer) if answer.is_empty() => Err(Refusal::new(
                        ResponseError::UnknownServerError,
                        "the active controller could not read a request of this node (see its log)",
                    )),
                    Ok(answer) => {
                        match rpc::decode_answer(&request, correlation_id, answer.into()) {
                            Ok((Ok(value), log_end)) => {
                                let shard = shard.filter(|_| request.changes_topics());
                                self.catch_up(shard, log_end).await.map(|()| value)
                            }
                            Ok((outcome, _)) => outcome,
                            Err(error) => Err(Refusal::new(
                                ResponseError::UnknownServerError,
                                format!("an answer of the controller is unreadable: {error}"),
                            )),
                        }
                    }
                    Err(reason) => Err(Refusal::new(ResponseError::NotController, reason)),
                }
            };
            match outcome {
                Err(refusal)
                    if refusal.error_code == crate::errors::code(ResponseError::NotController)
                        && std::time::Instant::now() < deadline =>
                {
                    tracing::debug!(message = refusal.message, "no active controller yet");
                    pause(Duration::from_millis(50)).await;
                }
                outcome => return outcome,
            }
        }
    }

    async fn execute(
        &self,
        shard: Option<&Rc<Shard>>,
        request: ForwardedRequest,
    ) -> Result<Executed, Refusal> {
        // Topics change only on a node whose shards run.
        let running = || {
            shard.ok_or_else(|| {
                Refusal::new(
                    ResponseError::UnknownServerError,
                    "topics are changed once the node runs",
                )
            })
        };
        let value = match request {
            ForwardedRequest::Register {
                broker_id,
                cluster_id,
                incarnation_id,
                endpoints,
                rack,
            } => {
                self.register(broker_id, &cluster_id, incarnation_id, endpoints, rack)
                    .await
            }
            ForwardedRequest::AllocateProducerIds {
                broker_id,
                broker_epoch,
            } => self.allocate_block(broker_id, broker_epoch).await,
            ForwardedRequest::Heartbeat {
                broker_id,
                broker_epoch,
                want_fence,
                ..
            } => {
                return self
                    .heartbeat(broker_id, broker_epoch, want_fence)
                    .await
                    .map(|fenced| Executed::Heartbeat {
                        fenced,
                        shutting_down: false,
                    })
            }
            ForwardedRequest::ControlledShutdown {
                broker_id,
                broker_epoch,
            } => {
                self.fence(broker_id, broker_epoch, true).await?;
                return Ok(Executed::Heartbeat {
                    fenced: true,
                    shutting_down: true,
                });
            }
            ForwardedRequest::CreateTopic(spec) => {
                Controller::create_topic(running()?, spec, false)
                    .await
                    .map(|_| 0)
            }
            ForwardedRequest::DeleteTopic { topic_id } => {
                Controller::delete_topic(running()?, uuid::Uuid::from_u128(topic_id))
                    .await
                    .map(|()| 0)
            }
            ForwardedRequest::CreatePartitions {
                name,
                partition_count,
                assignments,
                validate_only,
            } => Controller::create_partitions(
                running()?,
                &name,
                partition_count,
                assignments,
                validate_only,
            )
            .await
            .map(|()| 0),
            ForwardedRequest::AlterPartitions {
                broker_id,
                broker_epoch,
                items,
            } => {
                return Ok(Executed::Epochs(
                    self.alter_partitions(broker_id, broker_epoch, items).await,
                ))
            }
            ForwardedRequest::AlterTopicConfigs {
                name,
                changes,
                validate_only,
            } => Controller::alter_topic_configs(running()?, &name, changes, validate_only)
                .await
                .map(|()| 0),
            ForwardedRequest::AlterBrokerConfigs {
                resource,
                changes,
                validate_only,
            } => Controller::alter_broker_configs(running()?, &resource, changes, validate_only)
                .await
                .map(|()| 0),
            ForwardedRequest::ElectLeaders {
                election,
                partitions,
            } => {
                return Controller::elect_leaders(running()?, election, partitions)
                    .await
                    .map(Executed::Partitions)
            }
            ForwardedRequest::DescribeQuorum => {
                let node_id = shard.map_or(-1, |shard| shard.config.node_id);
                return Ok(Executed::Quorum(self.own_quorum_view(node_id).await));
            }
            ForwardedRequest::AlterReassignments {
                reassignments,
                allow_replication_factor_change,
            } => {
                return Controller::alter_reassignments(
                    running()?,
                    reassignments,
                    allow_replication_factor_change,
                )
                .await
                .map(Executed::Partitions)
            }
        };
        value.map(Executed::Value)
    }

    /// A client's change to partitions (ElectLeaders, AlterPartitionReassignments), on the
    /// active controller or forwarded to it; answered, per partition, once this node's
    /// shards serve the outcome.
    pub async fn change_partitions(
        shard: &Rc<Shard>,
        request: ForwardedRequest,
        client: Option<IpAddr>,
    ) -> Result<Vec<PartitionOutcome>, Refusal> {
        Self::of(shard)
            .execute_or_forward_for(Some(shard), request, client)
            .await
            .map(Executed::partitions)
    }

    /// Waits until this node has applied its log up to `log_end` (what the active
    /// controller had applied when it answered a forwarded request), then has the shards
    /// install the image, given `shard`.
    async fn catch_up(&self, shard: Option<&Rc<Shard>>, log_end: u64) -> Result<(), Refusal> {
        let deadline = std::time::Instant::now() + FORWARD_TIMEOUT;
        loop {
            self.apply_committed();
            if self.store.borrow().end_offset() >= log_end {
                return match shard {
                    Some(shard) => Controller::publish(shard, None).await,
                    None => Ok(()),
                };
            }
            if std::time::Instant::now() >= deadline {
                return Err(Refusal::new(
                    ResponseError::RequestTimedOut,
                    format!("the metadata log never reached offset {log_end} on this node"),
                ));
            }
            pause(Duration::from_millis(10)).await;
        }
    }

    /// A heartbeat of incarnation `broker_epoch` of `broker_id`: noted, and unless it
    /// `want_fence`s, a fenced broker is unfenced (newly registered and serving, or fenced
    /// for silence and back), except one that said it stops. Whether it is fenced now.
    pub(super) async fn heartbeat(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        want_fence: bool,
    ) -> Result<bool, Refusal> {
        let known = self.proposed.borrow().brokers.get(&broker_id).cloned();
        let Some(broker) = known else {
            return Err(Refusal::new(
                ResponseError::BrokerIdNotRegistered,
                format!("broker {broker_id} is not registered"),
            ));
        };
        if broker.epoch != broker_epoch {
            return Err(Refusal::new(
                ResponseError::StaleBrokerEpoch,
                format!(
                    "broker {broker_id} is at epoch {}, not {broker_epoch}",
                    broker.epoch
                ),
            ));
        }
        self.heartbeats
            .borrow_mut()
            .insert(broker_id, Instant::now());
        // A broker that said it stops stays fenced: a heartbeat it sent before is late.
        if broker.fenced && !broker.in_controlled_shutdown && !want_fence {
            self.unfence(broker_id, broker_epoch).await?;
            return Ok(false);
        }
        Ok(broker.fenced)
    }

    /// While active: fences every unfenced broker not heard from for a session, and gives
    /// its partitions another leader from their ISR (none if it was the only one). A broker
    /// whose connections to this voter were all closed by its end (its process died: the
    /// kernel closed them), that has not connected again within `reconnect_grace` and not
    /// been heard from since, is fenced then rather than a whole session later. A broker
    /// behind a network partition or paused keeps its connections open (or they end by
    /// silence, not by its end), so it waits for the session.
    async fn fence_silent_brokers(shard: &Rc<Shard>) {
        let controller = Self::of(shard);
        if controller.active_term.get().is_none() {
            return;
        }
        let now = Instant::now();
        let silent: Vec<(i32, i64, &str)> = {
            let heartbeats = controller.heartbeats.borrow();
            let disconnected = controller.disconnected.borrow();
            let since = controller.active_since.get();
            controller
                .proposed
                .borrow()
                .brokers
                .values()
                .filter(|broker| !broker.fenced)
                .filter_map(|broker| {
                    let heard = heartbeats.get(&broker.id).copied();
                    // A new controller gives every broker the grace to connect to it.
                    let gone = now.duration_since(since) > controller.reconnect_grace
                        && disconnected.iter().any(|&(voter, lost)| {
                            u64::try_from(broker.id) == Ok(voter)
                                && now.duration_since(lost) > controller.reconnect_grace
                                && heard.is_none_or(|heard| heard < lost)
                        });
                    let silent =
                        now.duration_since(heard.unwrap_or(since)) > controller.session_timeout;
                    let why = if silent {
                        "not heard from for a session"
                    } else if gone {
                        "its connections closed and it did not come back"
                    } else {
                        return None;
                    };
                    Some((broker.id, broker.epoch, why))
                })
                .collect()
        };
        for (broker_id, broker_epoch, why) in silent {
            tracing::warn!(broker_id, why, "fencing a broker");
            match controller.fence(broker_id, broker_epoch, false).await {
                Ok(()) => {
                    if let Err(refusal) = Controller::publish(shard, None).await {
                        tracing::warn!(message = refusal.message, "publishing a fencing");
                    }
                }
                Err(refusal) => tracing::warn!(
                    broker_id,
                    message = refusal.message,
                    "fencing a silent broker"
                ),
            }
        }
    }

    /// Fences incarnation `broker_epoch` of broker `broker_id` (marked as shutting down if
    /// `controlled`), takes it out of the ISRs it is in but not alone, and gives each
    /// partition it led another live member of its ISR as leader, or none.
    async fn fence(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        controlled: bool,
    ) -> Result<(), Refusal> {
        let mut records = vec![self.registration_change(
            broker_id,
            broker_epoch,
            true,
            controlled.then_some(true),
        )?];
        let live: Vec<i32> = self
            .proposed
            .borrow()
            .live_brokers()
            .map(|b| b.id)
            .filter(|&id| id != broker_id)
            .collect();
        // As KRaft does, the fenced broker leaves every ISR it is in (unless it is the last
        // member: then the ISR still names who holds everything), and a partition it led
        // takes the first live ISR member as leader, or, where the topic allows an unclean
        // election, the first live replica; else none.
        records.extend(self.partition_changes(|topic, state| {
            let mut next = state.clone();
            if next.isr.len() > 1 {
                next.isr.retain(|&id| id != broker_id);
            }
            if state.leader == broker_id {
                next.leader = NO_LEADER;
                next = elected(&next, self.election_on_failure(topic), |id| {
                    live.contains(&id)
                });
            }
            Some(next)
        }));
        self.commit(records).await
    }

    /// Shard 0 of a node in a quorum that is stopping: asks the active controller to take
    /// this broker's leaderships away and fence it, so that clients move on now rather than
    /// a session later. Best effort within `CONTROLLED_SHUTDOWN_TIMEOUT`: a node that
    /// cannot reach a controller is fenced for its silence instead.
    pub async fn shut_down_controlled(shard: &Rc<Shard>) {
        let controller = Self::of(shard);
        if controller.quorum.is_none() {
            return;
        }
        let node = shard.config.node_id;
        let request = ForwardedRequest::ControlledShutdown {
            broker_id: node,
            broker_epoch: controller.broker_epoch(node),
        };
        let asked = controller.execute_or_forward(Some(shard), request);
        let timeout = glommio::timer::sleep(CONTROLLED_SHUTDOWN_TIMEOUT);
        match futures_lite::future::or(async { Some(asked.await) }, async {
            timeout.await;
            None
        })
        .await
        {
            Some(Ok(_)) => tracing::info!("leaderships moved away: a controlled shutdown"),
            Some(Err(refusal)) => {
                tracing::warn!(message = refusal.message, "no controlled shutdown")
            }
            None => tracing::warn!("no controlled shutdown: the controller did not answer"),
        }
    }

    /// Shard 0 of a node in a quorum: tells the active controller every heartbeat interval
    /// that this broker is alive, until stopped.
    pub async fn heartbeat_forever(shard: Rc<Shard>) {
        let controller = Self::of(&shard);
        if controller.quorum.is_none() {
            return;
        }
        let node = shard.config.node_id;
        loop {
            glommio::timer::sleep(shard.config.heartbeat_interval).await;
            let request = ForwardedRequest::Heartbeat {
                broker_id: node,
                broker_epoch: controller.broker_epoch(node),
                metadata_offset: controller.metadata_end_offset() as i64,
                want_fence: false,
            };
            // Bounded by the interval: a forward whose frame the transport dropped (a
            // connection lost, a full queue) is never answered, and a heartbeat that waited
            // for it would stop every later one until this node is fenced.
            let beat = controller.execute_or_forward(Some(&shard), request);
            let unanswered = async {
                glommio::timer::sleep(shard.config.heartbeat_interval).await;
                Err(Refusal::new(
                    ResponseError::RequestTimedOut,
                    "no answer within broker.heartbeat.interval.ms",
                ))
            };
            if let Err(refusal) = futures_lite::future::or(beat, unanswered).await {
                tracing::debug!(message = refusal.message, "a heartbeat was not taken");
            }
        }
    }

    /// Waits until this node's committed image holds broker `broker_id` at `epoch` (and
    /// unfenced, if `unfenced`): what the active controller committed has reached this
    /// node's log.
    pub(super) async fn wait_for_epoch(
        &self,
        broker_id: i32,
        epoch: i64,
        unfenced: bool,
    ) -> Result<(), Refusal> {
        let deadline = std::time::Instant::now() + FORWARD_TIMEOUT;
        loop {
            self.apply_committed();
            let reached = self
                .committed
                .borrow()
                .brokers
                .get(&broker_id)
                .is_some_and(|b| b.epoch == epoch && (!unfenced || !b.fenced));
            if reached {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(Refusal::new(
                    ResponseError::RequestTimedOut,
                    format!("broker {broker_id} epoch {epoch} never reached this node's log"),
                ));
            }
            pause(Duration::from_millis(10)).await;
        }
    }

    /// Creates a topic this node needs (`__consumer_offsets`, auto-creation), forwarding it
    /// to the active controller if this node is not it, and answers once this node's own
    /// shards serve the topic.
    pub(super) async fn create_topic_anywhere(
        shard: &Rc<Shard>,
        spec: TopicSpec,
    ) -> Result<super::TopicMeta, Refusal> {
        let controller = Self::of(shard);
        if controller.quorum.is_none() || controller.active_term.get().is_some() {
            return Controller::create_topic(shard, spec, false).await;
        }
        let name = spec.name.clone();
        controller
            .execute_or_forward(Some(shard), ForwardedRequest::CreateTopic(spec))
            .await?;
        let deadline = std::time::Instant::now() + FORWARD_TIMEOUT;
        loop {
            controller.apply_committed();
            let created = controller.committed.borrow().topic(&name).cloned();
            if let Some(topic) = created {
                Controller::publish(shard, Some(topic.id)).await?;
                return Ok(topic);
            }
            if std::time::Instant::now() >= deadline {
                return Err(Refusal::new(
                    ResponseError::RequestTimedOut,
                    format!("topic {name} never reached this node's log"),
                ));
            }
            pause(Duration::from_millis(10)).await;
        }
    }

    /// Shard 0 of a node in a quorum: applies what the log commits and publishes it, keeps
    /// the node's role current, and serves requests other nodes forward, until stopped.
    pub async fn follow_forever(shard: Rc<Shard>) {
        let controller = Self::of(&shard);
        let Some(quorum) = controller.quorum.clone() else {
            return;
        };
        let mut last_balance = Instant::now();
        loop {
            glommio::timer::sleep(FOLLOW_INTERVAL).await;
            let status = quorum.status_async().await;
            if let Some(status) = &status {
                controller.refresh_role(status);
            }
            controller.apply_committed();
            if status.is_some_and(|s| s.log_bytes >= controller.snapshot_bytes) {
                // The committed image is exactly what the entries taken so far build (no
                // `.await` since they were applied).
                let image = controller.committed.borrow().clone();
                if let Err(error) = controller.store.borrow_mut().snapshot(&image) {
                    tracing::warn!(%error, "snapshotting the metadata log");
                }
            }
            // Applied here, or by a task that waited for its own change to come back.
            if let Err(refusal) = Controller::publish_if_behind(&shard).await {
                tracing::warn!(message = refusal.message, "publishing a committed image");
            }
            Controller::fence_silent_brokers(&shard).await;
            let balance_due = controller
                .leader_balance_interval
                .is_some_and(|interval| last_balance.elapsed() >= interval);
            if balance_due {
                last_balance = Instant::now();
                Controller::balance_leaders_if_active(&shard).await;
            }
            for request in quorum.requests().try_iter() {
                glommio::spawn_local(serve_forwarded(shard.clone(), request)).detach();
            }
        }
    }
}

/// Answers a request for this node's controller: one another voter forwarded, or one a
/// Kafka client of the controller listener sent.
async fn serve_forwarded(shard: Rc<Shard>, request: ForwardRequest) {
    let answer = match request.from {
        Some(_) => Controller::answer_call(&shard, request.body.into()).await,
        None => crate::request::controller_listener::answer(&shard, request.body).await,
    };
    if let Some(quorum) = &Controller::of(&shard).quorum {
        quorum.reply(request.reply_to, answer);
    }
}

impl Controller {
    /// Executes a request `frame` for the active controller (`rpc/`), if this node is it,
    /// and answers it in kind. A request that cannot be read gets an empty answer (and a
    /// warning here): a voter then fails it rather than try again, a client's connection
    /// closes.
    pub async fn answer_call(shard: &Rc<Shard>, frame: bytes::Bytes) -> Vec<u8> {
        let controller = Controller::of(shard);
        let call = match rpc::decode_call(frame) {
            Ok(call) => call,
            Err(reason) => {
                tracing::warn!(reason, "an unreadable request for the controller");
                return Vec::new();
            }
        };
        if let Some(client) = call.client {
            tracing::debug!(%client, request = ?call.request, "a client's forwarded request");
        }
        let outcome = if controller.active_term.get().is_none() {
            Err(controller.not_controller())
        } else {
            let outcome = controller.execute(Some(shard), call.request.clone()).await;
            // A registration or a fencing change is published here before the answer; most
            // heartbeats change nothing.
            if let Err(refusal) = Controller::publish_if_behind(shard).await {
                tracing::warn!(message = refusal.message, "publishing a committed image");
            }
            outcome
        };
        let log_end = controller.store.borrow().end_offset();
        rpc::encode_answer(&call, outcome, log_end).to_vec()
    }
}

/// Waits `duration` without blocking the caller's executor, on a shard or on the main
/// thread alike (a node registers itself before its shards run): a short-lived thread
/// sleeps and wakes the caller. Only for the rare waits of registration.
async fn pause(duration: Duration) {
    let (wake, woken) = flume::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("controller-wait".into())
        .spawn(move || {
            std::thread::sleep(duration);
            let _ = wake.send(());
        });
    if spawned.is_ok() {
        let _ = woken.recv_async().await;
    }
}
