//! ⑤ One handler per Kafka API. Each reads top to bottom as the data path: look up or
//! split by owner, run the owners' parts through the router, merge in request order.

mod api_versions;
mod create_partitions;
mod create_topics;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod fetch;
mod list_offsets;
mod metadata;
mod produce;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use net::{Handler, Reply, Request, SupportedApis};

use crate::shard_state::Shard;

/// The APIs and versions this node implements, as ApiVersions announces them.
pub fn supported_apis() -> SupportedApis {
    SupportedApis::new(&[
        (ApiKey::Produce, 3, 11),
        (ApiKey::Fetch, 4, 12),
        (ApiKey::ListOffsets, 1, 6),
        (ApiKey::Metadata, 0, 12),
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::CreateTopics, 2, 7),
        (ApiKey::DeleteTopics, 1, 6),
        (ApiKey::DescribeConfigs, 1, 4),
        (ApiKey::CreatePartitions, 0, 3),
        (ApiKey::DescribeCluster, 0, 1),
    ])
}

impl Handler for Shard {
    fn handle(self: Rc<Self>, request: Request) -> Pin<Box<dyn Future<Output = Reply>>> {
        Box::pin(async move {
            let version = request.api_version;
            let respond = |body: ResponseKind| Reply::Respond(Box::new(body));
            match request.body {
                RequestKind::Produce(body) => return produce::handle(&self, body, version).await,
                RequestKind::Fetch(body) => respond(fetch::handle(&self, body, version).await),
                RequestKind::ListOffsets(body) => {
                    respond(list_offsets::handle(&self, body, version).await)
                }
                RequestKind::Metadata(body) => {
                    respond(metadata::handle(&self, body, version).await)
                }
                RequestKind::ApiVersions(_) => respond(api_versions::handle(&self)),
                RequestKind::CreateTopics(body) => {
                    respond(create_topics::handle(&self, body, version).await)
                }
                RequestKind::DeleteTopics(body) => {
                    respond(delete_topics::handle(&self, body, version).await)
                }
                RequestKind::DescribeConfigs(body) => {
                    respond(describe_configs::handle(&self, body))
                }
                RequestKind::CreatePartitions(body) => {
                    respond(create_partitions::handle(&self, body).await)
                }
                RequestKind::DescribeCluster(_) => respond(describe_cluster::handle(&self)),
                other => {
                    // `net` admits only announced APIs, so this is a programmer error;
                    // close the connection rather than answer wrongly.
                    tracing::error!(request = ?std::mem::discriminant(&other), "no handler");
                    Reply::Close
                }
            }
        })
    }
}

/// Current wall-clock time in Kafka's unit.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
