//! InitProducerId: a producer id for an idempotent producer.
//!
//! A request without a transactional id always gets a fresh producer id at epoch 0, whatever
//! producer id and epoch it names (v3+), as Kafka answers it: the client bumps epochs itself
//! (KIP-360), and its sequences start over with a new id. Transactional ids need a
//! transaction coordinator, which this node does not run yet: they get UNSUPPORTED_VERSION,
//! Kafka's answer for a feature the broker has not enabled (an empty one INVALID_REQUEST).

use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ResponseKind;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::errors::{code, NONE};
use crate::producers::ProducerIds;
use crate::shard_state::Shard;

pub async fn handle(shard: &Rc<Shard>, request: InitProducerIdRequest) -> ResponseKind {
    let outcome = match request.transactional_id.as_deref().map(|id| id.as_str()) {
        None => ProducerIds::generate(shard).await,
        Some("") => Err(code(ResponseError::InvalidRequest)),
        Some(transactional_id) => {
            tracing::info!(transactional_id, "transactions are not supported yet");
            Err(code(ResponseError::UnsupportedVersion))
        }
    };
    let (error_code, producer_id, producer_epoch) = match outcome {
        Ok(producer_id) => (NONE, producer_id, 0),
        Err(error_code) => (error_code, -1, -1),
    };
    ResponseKind::InitProducerId(
        InitProducerIdResponse::default()
            .with_error_code(error_code)
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch),
    )
}
