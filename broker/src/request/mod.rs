//! ⑤ One handler per Kafka API. Each reads top to bottom as the data path: look up or
//! split by owner, run the owners' parts through the router, merge in request order.

mod alter_configs;
mod alter_partition_reassignments;
mod api_versions;
mod authorized;
mod config_change;
pub mod controller_listener;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_quorum;
mod elect_leaders;
pub(crate) mod fetch;
mod find_coordinator;
mod group_route;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_partition_reassignments;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod partition_outcomes;
mod produce;
mod sync_group;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use net::{Answer, Handler, Reply, Request, SupportedApis};

use crate::shard_state::Shard;

/// The APIs and versions this node implements, as ApiVersions announces them.
pub fn supported_apis() -> SupportedApis {
    SupportedApis::new(&[
        (ApiKey::Produce, 3, 11),
        (ApiKey::Fetch, 4, 16),
        (ApiKey::ListOffsets, 1, 10),
        (ApiKey::Metadata, 0, 12),
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::CreateTopics, 2, 7),
        (ApiKey::DeleteTopics, 1, 6),
        (ApiKey::DescribeConfigs, 1, 4),
        (ApiKey::CreatePartitions, 0, 3),
        (ApiKey::DescribeCluster, 0, 2),
        (ApiKey::FindCoordinator, 0, 4),
        (ApiKey::JoinGroup, 0, 9),
        (ApiKey::SyncGroup, 0, 5),
        (ApiKey::Heartbeat, 0, 4),
        (ApiKey::LeaveGroup, 0, 5),
        (ApiKey::OffsetCommit, 2, 8),
        (ApiKey::OffsetFetch, 1, 8),
        (ApiKey::ListGroups, 0, 5),
        (ApiKey::DescribeGroups, 0, 5),
        (ApiKey::DeleteGroups, 0, 2),
        (ApiKey::OffsetDelete, 0, 0),
        (ApiKey::InitProducerId, 0, 5),
        (ApiKey::OffsetForLeaderEpoch, 2, 4),
        (ApiKey::IncrementalAlterConfigs, 0, 1),
        (ApiKey::DeleteRecords, 0, 2),
        (ApiKey::DescribeQuorum, 0, 2),
        (ApiKey::ElectLeaders, 0, 2),
        (ApiKey::AlterPartitionReassignments, 0, 1),
        (ApiKey::ListPartitionReassignments, 0, 0),
        (ApiKey::DescribeLogDirs, 1, 4),
        (ApiKey::AlterConfigs, 0, 2),
    ])
}

impl Handler for Shard {
    /// Requests that change state in an order the client relies on are admitted by their
    /// handler (see each one's doc); every other request is admitted at once.
    // Admission resolves to the answer's future by design: see `net::Handler::admit`.
    #[allow(clippy::async_yields_async)]
    fn admit(self: Rc<Self>, request: Request) -> Pin<Box<dyn Future<Output = Answer>>> {
        Box::pin(async move {
            let version = request.api_version;
            match request.body {
                RequestKind::Produce(body) => produce::admit(&self, body, version).await,
                RequestKind::OffsetCommit(body) => offset_commit::admit(&self, body).await,
                body => {
                    let request = Request { body, ..request };
                    Box::pin(answer(self, request)) as Answer
                }
            }
        })
    }
}

/// Answers a request that needs no ordered admission.
async fn answer(shard: Rc<Shard>, request: Request) -> Reply {
    let version = request.api_version;
    // The client's address travels with the admin requests a node forwards (Envelope).
    let client = request.peer.map(|peer| peer.ip());
    let respond = |body: ResponseKind| Reply::Respond(Box::new(body));
    match request.body {
        RequestKind::Fetch(body) => fetch::handle(&shard, body, version, request.outbox).await,
        RequestKind::ListOffsets(body) => {
            respond(list_offsets::handle(&shard, body, version).await)
        }
        RequestKind::Metadata(body) => respond(metadata::handle(&shard, body, version).await),
        RequestKind::ApiVersions(_) => respond(api_versions::handle(&shard)),
        RequestKind::CreateTopics(body) => {
            respond(create_topics::handle(&shard, body, version).await)
        }
        RequestKind::DeleteTopics(body) => {
            respond(delete_topics::handle(&shard, body, version, client).await)
        }
        RequestKind::DescribeConfigs(body) => respond(describe_configs::handle(&shard, body)),
        RequestKind::CreatePartitions(body) => {
            respond(create_partitions::handle(&shard, body, client).await)
        }
        RequestKind::DescribeCluster(body) => {
            respond(describe_cluster::handle(&shard, body, version))
        }
        RequestKind::FindCoordinator(body) => {
            respond(find_coordinator::handle(&shard, body, version).await)
        }
        RequestKind::JoinGroup(body) => {
            let client_id = request.client_id.as_deref().unwrap_or_default().to_string();
            let client_host = request
                .peer
                .map(|peer| format!("/{}", peer.ip()))
                .unwrap_or_default();
            respond(join_group::handle(&shard, body, version, client_id, client_host).await)
        }
        RequestKind::SyncGroup(body) => respond(sync_group::handle(&shard, body, version).await),
        RequestKind::Heartbeat(body) => respond(heartbeat::handle(&shard, body).await),
        RequestKind::LeaveGroup(body) => respond(leave_group::handle(&shard, body, version).await),
        RequestKind::OffsetFetch(body) => {
            respond(offset_fetch::handle(&shard, body, version).await)
        }
        RequestKind::ListGroups(body) => respond(list_groups::handle(&shard, body, version).await),
        RequestKind::DescribeGroups(body) => {
            respond(describe_groups::handle(&shard, body, version).await)
        }
        RequestKind::DeleteGroups(body) => respond(delete_groups::handle(&shard, body).await),
        RequestKind::OffsetDelete(body) => respond(offset_delete::handle(&shard, body).await),
        RequestKind::InitProducerId(body) => respond(init_producer_id::handle(&shard, body).await),
        RequestKind::DeleteRecords(body) => respond(delete_records::handle(&shard, body).await),
        RequestKind::DescribeQuorum(body) => {
            respond(describe_quorum::handle(&shard, body, version).await)
        }
        RequestKind::IncrementalAlterConfigs(body) => {
            respond(incremental_alter_configs::handle(&shard, body, client).await)
        }
        RequestKind::OffsetForLeaderEpoch(body) => {
            respond(offset_for_leader_epoch::handle(&shard, body).await)
        }
        RequestKind::ElectLeaders(body) => {
            respond(elect_leaders::handle(&shard, body, version, client).await)
        }
        RequestKind::AlterPartitionReassignments(body) => {
            respond(alter_partition_reassignments::handle(&shard, body, version, client).await)
        }
        RequestKind::AlterConfigs(body) => {
            respond(alter_configs::handle(&shard, body, client).await)
        }
        RequestKind::DescribeLogDirs(body) => {
            respond(describe_log_dirs::handle(&shard, body).await)
        }
        RequestKind::ListPartitionReassignments(body) => {
            respond(list_partition_reassignments::handle(&shard, body))
        }
        other => {
            // `net` admits only announced APIs, so this is a programmer error;
            // close the connection rather than answer wrongly.
            tracing::error!(request = ?std::mem::discriminant(&other), "no handler");
            Reply::Close
        }
    }
}

/// A live leader's address, for the node endpoints of Produce v10+ and Fetch v16+ answers
/// (KIP-951).
pub(crate) struct LeaderEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The endpoints of `leaders` (each once, by id) that are live brokers; no image is taken
/// for none, the common answer (the image's `Arc` is shared by every shard).
pub(crate) fn leader_endpoints(shard: &Shard, mut leaders: Vec<i32>) -> Vec<LeaderEndpoint> {
    leaders.retain(|&id| id >= 0);
    if leaders.is_empty() {
        return Vec::new();
    }
    leaders.sort_unstable();
    leaders.dedup();
    let image = shard.image();
    leaders
        .into_iter()
        .filter_map(|id| {
            let broker = image.live_broker(id)?;
            let endpoint = broker.endpoint()?;
            Some(LeaderEndpoint {
                node_id: id,
                host: endpoint.host.clone(),
                port: endpoint.port.into(),
                rack: broker.rack.clone(),
            })
        })
        .collect()
}

/// Current wall-clock time in Kafka's unit.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
