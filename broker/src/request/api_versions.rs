//! ApiVersions: exactly the ranges this node implements.
//!
//! Tagged fields are encoded only when they differ from their defaults (no features are
//! announced), as Kafka does: librdkafka before 2.2 mis-reads default-valued tagged fields.

use kafka_protocol::messages::{ApiVersionsResponse, ResponseKind};

use crate::shard_state::Shard;

pub fn handle(shard: &Shard) -> ResponseKind {
    ResponseKind::ApiVersions(
        ApiVersionsResponse::default()
            .with_error_code(0)
            .with_api_keys(shard.apis.announced())
            .with_finalized_features_epoch(-1),
    )
}
