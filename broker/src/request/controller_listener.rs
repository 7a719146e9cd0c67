//! What a node's controller listener answers a Kafka client: an admin tool given
//! `--bootstrap-controller` (KIP-919) asks it as it asks Kafka's controllers. ApiVersions;
//! DescribeCluster for the controllers (endpoint type 2: every voter at its controller
//! listener, the active controller named); DescribeQuorum, the leader's account from any
//! voter; and the requests brokers send the active controller (BrokerRegistration,
//! BrokerHeartbeat, AllocateProducerIds, AlterPartition), read by `controller/rpc/`.
//! Runs on shard 0, where the controller lives; the quorum's transport frames the answers.
//!
//! Invariants: a request of an API or version not announced here gets an empty answer,
//! which closes the connection (as Kafka closes it), except ApiVersions of a newer version,
//! answered with UNSUPPORTED_VERSION and the ranges, as Kafka does; nothing a client sends
//! can panic the node.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, DescribeClusterRequest, DescribeClusterResponse,
    RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use net::{DecodeError, OutFrame, SupportedApis};

use super::authorized;
use crate::controller::Controller;
use crate::errors::code;
use crate::shard_state::Shard;

/// DescribeCluster's endpoint type for controllers (KIP-919).
const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

/// What the controller listener announces.
pub fn apis() -> SupportedApis {
    SupportedApis::new(&[
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::DescribeCluster, 1, 2),
        (ApiKey::DescribeQuorum, 0, 2),
        (ApiKey::BrokerRegistration, 0, 4),
        (ApiKey::BrokerHeartbeat, 0, 1),
        (ApiKey::AllocateProducerIds, 0, 0),
        (ApiKey::AlterPartition, 2, 3),
    ])
}

/// The answer to one request `frame` (header and body) of a client of the controller
/// listener: the response without its length prefix, or nothing to close the connection.
pub async fn answer(shard: &Rc<Shard>, frame: Vec<u8>) -> Vec<u8> {
    let apis = apis();
    if frame.len() < net::frame::REQUEST_BYTES_MIN {
        return Vec::new();
    }
    let frame = Bytes::from(frame);
    let request = match net::decode_request(frame.clone(), &apis) {
        Ok(request) => request,
        Err(DecodeError::UnsupportedApiVersions { correlation_id, .. }) => {
            let mut out = OutFrame::with_capacity(256);
            return match net::response::encode_unsupported_api_versions(
                correlation_id,
                &apis,
                &mut out,
            ) {
                Ok(()) => unframed(&out),
                Err(_) => Vec::new(),
            };
        }
        Err(error) => {
            tracing::debug!(%error, "a request the controller listener does not serve");
            return Vec::new();
        }
    };
    let version = request.api_version;
    let body = match request.body {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(
            ApiVersionsResponse::default()
                .with_api_keys(apis.announced())
                .with_finalized_features_epoch(-1),
        ),
        RequestKind::DescribeCluster(body) => describe_controllers(shard, body),
        RequestKind::DescribeQuorum(body) => {
            super::describe_quorum::handle(shard, body, version).await
        }
        // A broker's request of the active controller, read as the voters' are.
        _ => return Controller::answer_call(shard, frame).await,
    };
    let mut out = OutFrame::with_capacity(1024);
    match net::encode_response(
        request.api_key,
        version,
        request.correlation_id,
        &body,
        &mut out,
    ) {
        Ok(()) => unframed(&out),
        Err(error) => {
            tracing::warn!(%error, "encoding an answer of the controller listener");
            Vec::new()
        }
    }
}

/// The frame without its length prefix, which the transport writes.
fn unframed(out: &OutFrame) -> Vec<u8> {
    out.to_bytes()[4..].to_vec()
}

/// DescribeCluster asked of a controller: the voters at their controller listeners and the
/// active controller; a request for brokers is answered MISMATCHED_ENDPOINT_TYPE, as
/// Kafka's controllers answer it.
fn describe_controllers(shard: &Shard, request: DescribeClusterRequest) -> ResponseKind {
    let config = &shard.config;
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(ENDPOINT_TYPE_CONTROLLER)
        .with_cluster_id(StrBytes::from_string(
            config.cluster_id.clone().unwrap_or_default(),
        ))
        .with_cluster_authorized_operations(authorized::if_asked(
            request.include_cluster_authorized_operations,
            authorized::CLUSTER,
        ));
    if request.endpoint_type != ENDPOINT_TYPE_CONTROLLER {
        return ResponseKind::DescribeCluster(
            response
                .with_error_code(code(ResponseError::MismatchedEndpointType))
                .with_error_message(Some(StrBytes::from_static_str(
                    "The request was sent to an endpoint of type CONTROLLER, but we wanted an \
                     endpoint of type BROKER",
                ))),
        );
    }
    response.controller_id = BrokerId(
        config
            .active_controller
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    response.brokers = config
        .quorum_voters
        .iter()
        .map(|(&id, address)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(StrBytes::from_string(address.ip().to_string()))
                .with_port(address.port().into())
        })
        .collect();
    ResponseKind::DescribeCluster(response)
}
