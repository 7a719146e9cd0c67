//! A group member as the coordinator holds it: what it stated in its last JoinGroup, its
//! assignment, its session, and the answers it waits for.
//!
//! Invariants: a member with a waiter is answered exactly once, through that waiter; its
//! session restarts at every join, sync and heartbeat.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{JoinRequest, JoinWaiter, SyncWaiter};

/// What a member states about itself in every JoinGroup.
pub(super) struct JoinSettings {
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
}

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// Supported protocols in the member's order of preference, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// Order of arrival; the longest-standing member becomes leader.
    pub joined_seq: u64,
    pub expires_at: Instant,
    pub(super) join_waiter: Option<JoinWaiter>,
    pub(super) sync_waiter: Option<SyncWaiter>,
}

impl Member {
    pub(super) fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    pub(super) fn is_waiting(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }

    /// Takes what a JoinGroup states about the member; its session restarts `now`.
    pub(super) fn update(&mut self, request: JoinRequest, now: Instant) {
        self.apply(JoinSettings {
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout: request.session_timeout,
            rebalance_timeout: request.rebalance_timeout,
            protocols: request.protocols,
        });
        self.expires_at = now + self.session_timeout;
    }

    pub(super) fn settings(&self) -> JoinSettings {
        JoinSettings {
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            session_timeout: self.session_timeout,
            rebalance_timeout: self.rebalance_timeout,
            protocols: self.protocols.clone(),
        }
    }

    pub(super) fn apply(&mut self, settings: JoinSettings) {
        self.client_id = settings.client_id;
        self.client_host = settings.client_host;
        self.session_timeout = settings.session_timeout;
        self.rebalance_timeout = settings.rebalance_timeout;
        self.protocols = settings.protocols;
    }
}

/// `<instance id or client id>-<uuid>`, as Kafka names members.
pub(super) fn new_member_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}
