//! The bench's side of the `client` crate: its client id and the few calls its runs share
//! (connect, fetch at the bench's limits, log offsets, topics).
//!
//! Invariants:
//! - Every request the bench sends carries [`CLIENT_ID`]; all but the produce hot path
//!   (`produce::pipeline`, framed by `encode.rs`) go through the `client` crate.
//! - Offsets are answered sorted by partition.

use std::net::SocketAddr;

use anyhow::Result;
use client::fetch::{fetch_request, FetchLimits};
use client::offsets;
use client::{Cluster, Connection};
use kafka_protocol::messages::FetchResponse;
use uuid::Uuid;

pub use client::admin::NewTopic as TopicSpec;
pub use client::{error_name, PartitionLeader};

pub const CLIENT_ID: &str = "ringlog-bench";
/// The most one Fetch may return, over all partitions.
const FETCH_BYTES_MAX: i32 = 64 * 1024 * 1024;

/// A connection to the broker at `addr` (a partition leader).
pub async fn connect(addr: SocketAddr) -> Result<Connection> {
    Connection::connect_to(addr, &addr.to_string(), CLIENT_ID).await
}

/// The cluster behind `bootstrap` (host:port, comma-separated).
pub async fn cluster(bootstrap: &str) -> Result<Cluster> {
    Cluster::connect(bootstrap, CLIENT_ID).await
}

/// One Fetch of `topic` (named by `topic_id` from Fetch v13 on) at the given (partition,
/// offset) positions.
pub async fn fetch(
    conn: &mut Connection,
    topic: &str,
    topic_id: Uuid,
    positions: &[(i32, i64)],
    max_wait_ms: i32,
    partition_bytes_max: i32,
) -> Result<FetchResponse> {
    let limits = FetchLimits {
        max_wait_ms,
        max_bytes: FETCH_BYTES_MAX,
        partition_max_bytes: partition_bytes_max,
    };
    conn.call(&fetch_request(topic, topic_id, positions, limits))
        .await
}

/// The id of `topic` (KIP-516), which fetches name it by.
pub async fn topic_id(cluster: &mut Cluster, topic: &str) -> Result<Uuid> {
    Ok(cluster.topic(topic).await?.topic_id)
}

/// (partition, offset) at `which` ([`offsets::EARLIEST`] or [`offsets::LATEST`]) of each of
/// `partitions` of `topic`, asked of each partition's leader.
pub async fn log_offsets(
    cluster: &mut Cluster,
    topic: &str,
    partitions: &[i32],
    which: i64,
) -> Result<Vec<(i32, i64)>> {
    let info = cluster.topic(topic).await?;
    let offsets = offsets::log_offsets(cluster, &info, partitions, which).await?;
    Ok(offsets.into_iter().collect())
}
