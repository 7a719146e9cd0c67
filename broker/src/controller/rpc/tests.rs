//! Every request and its answer across the Kafka encoding, refusals, garbled frames.
use kafka_protocol::messages::RequestKind;

use bytes::BytesMut;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::{
    ApiKey, DeleteTopicsRequest, EnvelopeResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

use super::requests::envelope;
use super::*;
use crate::controller::alter_partitions::AlterPartitionItem;
use crate::controller::cluster::{Executed, ForwardedRequest};
use crate::controller::partitions::PartitionOutcome;
use crate::controller::{Election, QuorumView, Refusal, TopicSpec};
use crate::errors::code;
use crate::metadata::records::BrokerEndpoint;

const CLIENT: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 7));

fn refusal_of(error: ResponseError, message: &str) -> Refusal {
    Refusal {
        error_code: code(error),
        message: message.into(),
    }
}

/// One request of every kind the controller is asked.
fn every_request() -> Vec<ForwardedRequest> {
    let topic_id = Uuid::new_v4().as_u128();
    vec![
        ForwardedRequest::Register {
            broker_id: 2,
            cluster_id: "c1".into(),
            incarnation_id: Uuid::new_v4(),
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.2".into(),
                port: 9093,
                security_protocol: 0,
            }],
            rack: Some("r1".into()),
        },
        ForwardedRequest::Heartbeat {
            broker_id: 2,
            broker_epoch: 7,
            metadata_offset: 41,
            want_fence: false,
        },
        ForwardedRequest::Heartbeat {
            broker_id: 3,
            broker_epoch: 1,
            metadata_offset: 0,
            want_fence: true,
        },
        ForwardedRequest::ControlledShutdown {
            broker_id: 2,
            broker_epoch: 7,
        },
        ForwardedRequest::AllocateProducerIds {
            broker_id: 2,
            broker_epoch: 7,
        },
        ForwardedRequest::CreateTopic(TopicSpec {
            name: "__consumer_offsets".into(),
            partition_count: 50,
            replication_factor: 3,
            assignments: None,
            configs: [("cleanup.policy".to_string(), "compact".to_string())].into(),
        }),
        ForwardedRequest::CreateTopic(TopicSpec {
            name: "placed".into(),
            partition_count: -1,
            replication_factor: -1,
            assignments: Some(vec![vec![1, 2], vec![2, 3]]),
            configs: BTreeMap::new(),
        }),
        ForwardedRequest::AlterPartitions {
            broker_id: 1,
            broker_epoch: 4,
            items: vec![
                AlterPartitionItem {
                    topic_id,
                    partition: 0,
                    leader_epoch: 3,
                    partition_epoch: 9,
                    isr: vec![1, 3],
                    broker_epochs: vec![4, 6],
                },
                AlterPartitionItem {
                    topic_id,
                    partition: 5,
                    leader_epoch: 1,
                    partition_epoch: 2,
                    isr: vec![1],
                    broker_epochs: vec![-1],
                },
            ],
        },
        ForwardedRequest::DescribeQuorum,
        ForwardedRequest::DeleteTopic { topic_id },
        ForwardedRequest::CreatePartitions {
            name: "t".into(),
            partition_count: 6,
            assignments: Some(vec![vec![3, 1]]),
            validate_only: true,
        },
        ForwardedRequest::CreatePartitions {
            name: "t".into(),
            partition_count: 8,
            assignments: None,
            validate_only: false,
        },
        ForwardedRequest::AlterTopicConfigs {
            name: "t".into(),
            changes: vec![
                ("retention.ms".into(), Some("1000".into())),
                ("segment.bytes".into(), None),
            ],
            validate_only: false,
        },
        ForwardedRequest::AlterBrokerConfigs {
            resource: "".into(),
            changes: vec![("log.cleaner.threads".into(), Some("2".into()))],
            validate_only: true,
        },
        ForwardedRequest::ElectLeaders {
            election: Election::Preferred,
            partitions: Some(vec![("a".into(), 0), ("a".into(), 2), ("b".into(), 1)]),
        },
        ForwardedRequest::ElectLeaders {
            election: Election::Unclean,
            partitions: None,
        },
        ForwardedRequest::AlterReassignments {
            reassignments: vec![
                (("a".into(), 0), Some(vec![2, 3])),
                (("a".into(), 1), None),
                (("b".into(), 0), Some(vec![1])),
            ],
            allow_replication_factor_change: false,
        },
    ]
}

/// A success of each request's kind, as the controller reports it.
fn success(request: &ForwardedRequest) -> Executed {
    let outcomes = |refused: bool| {
        vec![
            PartitionOutcome {
                topic: "a".into(),
                partition: 0,
                refusal: None,
            },
            PartitionOutcome {
                topic: "b".into(),
                partition: 1,
                refusal: refused.then(|| refusal_of(ResponseError::ElectionNotNeeded, "b-1 leads")),
            },
        ]
    };
    match request {
        ForwardedRequest::Register { .. } => Executed::Value(8),
        ForwardedRequest::AllocateProducerIds { .. } => Executed::Value(5000),
        ForwardedRequest::Heartbeat { want_fence, .. } => Executed::Heartbeat {
            fenced: *want_fence,
            shutting_down: false,
        },
        ForwardedRequest::ControlledShutdown { .. } => Executed::Heartbeat {
            fenced: true,
            shutting_down: true,
        },
        ForwardedRequest::AlterPartitions { .. } => Executed::Epochs(vec![
            Ok(10),
            Err(Refusal {
                error_code: code(ResponseError::InvalidUpdateVersion),
                message: "InvalidUpdateVersion".into(),
            }),
        ]),
        ForwardedRequest::DescribeQuorum => Executed::Quorum(QuorumView {
            leader: 2,
            epoch: 5,
            high_watermark: 120,
            voters: vec![(1, 118), (2, 120), (3, -1)],
            directories: [(1, Uuid::from_u128(0x11)), (2, Uuid::from_u128(0x22))].into(),
        }),
        ForwardedRequest::ElectLeaders { .. } => Executed::Partitions(outcomes(true)),
        ForwardedRequest::AlterReassignments { .. } => Executed::Partitions(outcomes(false)),
        _ => Executed::Value(0),
    }
}

/// Sends `request` and answers it with `outcome` across the encodings.
fn round_trip(
    request: &ForwardedRequest,
    outcome: Result<Executed, Refusal>,
) -> (Result<Executed, Refusal>, u64) {
    let frame = encode_call(request, 2, 17, Some(CLIENT));
    let call = decode_call(frame).expect("a request this node sent reads back");
    assert_eq!(&call.request, request);
    let expected = is_enveloped(request).then_some(CLIENT);
    assert_eq!(
        call.client, expected,
        "the client's address travels in the Envelope"
    );
    let answer = encode_answer(&call, outcome, 4242);
    decode_answer(request, 17, answer).expect("an answer reads back")
}

#[test]
fn every_request_and_its_answer_survive_the_kafka_encoding() {
    for request in every_request() {
        let outcome = success(&request);
        let expected = success(&request);
        assert_eq!(
            round_trip(&request, Ok(outcome)),
            (Ok(expected), 4242),
            "{request:?}"
        );
    }
}

#[test]
fn refusals_come_back_with_their_code_and_message_where_kafka_has_a_field() {
    let with_message = refusal_of(ResponseError::InvalidPartitions, "Topic has 8 already.");
    for request in every_request() {
        let (outcome, _) = round_trip(&request, Err(with_message.clone()));
        let refused = outcome.expect_err("a refusal stays one");
        assert_eq!(refused.error_code, with_message.error_code, "{request:?}");
        let carries_message = !matches!(
            request,
            ForwardedRequest::Register { .. }
                | ForwardedRequest::Heartbeat { .. }
                | ForwardedRequest::ControlledShutdown { .. }
                | ForwardedRequest::AllocateProducerIds { .. }
                | ForwardedRequest::AlterPartitions { .. }
                | ForwardedRequest::ElectLeaders { .. }
        );
        if carries_message {
            assert_eq!(refused.message, with_message.message, "{request:?}");
        } else {
            assert_eq!(refused.message, "InvalidPartitions", "{request:?}");
        }
    }
}

/// A node that is no longer the active controller says so: on the Envelope for a
/// forwarded client request (as Kafka does), in the answer itself otherwise. Either way
/// the requester sees NOT_CONTROLLER and tries the next controller.
#[test]
fn not_controller_is_said_where_kafka_says_it() {
    let refused = refusal_of(ResponseError::NotController, "node 3 is");
    for request in every_request() {
        let call = decode_call(encode_call(&request, 1, 5, None)).unwrap();
        let mut answer = encode_answer(&call, Err(refused.clone()), 0);
        if is_enveloped(&request) {
            ResponseHeader::decode(&mut answer, ApiKey::Envelope.response_header_version(0))
                .unwrap();
            let envelope = EnvelopeResponse::decode(&mut answer, 0).unwrap();
            assert_eq!(envelope.error_code, refused.error_code);
            assert!(envelope.response_data.is_none());
        }
        let answer = encode_answer(&call, Err(refused.clone()), 0);
        let (outcome, _) = decode_answer(&request, 5, answer).unwrap();
        assert_eq!(outcome.unwrap_err().error_code, refused.error_code);
    }
}

/// What a node sends is a Kafka request any Kafka decoder reads: the header names the
/// API Kafka uses for the exchange, and an Envelope holds the client's request.
#[test]
fn requests_are_kafka_frames() {
    for request in every_request() {
        let mut frame = encode_call(&request, 1, 9, Some(CLIENT));
        let key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let header =
            RequestHeader::decode(&mut frame, key.request_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, 9);
        assert_eq!(header.client_id.as_deref(), Some("ringlog-1-to-controller"));
        let body = RequestKind::decode(key, &mut frame, version).unwrap();
        match body {
            RequestKind::Envelope(envelope) => {
                assert!(is_enveloped(&request), "{request:?}");
                let mut inner = envelope.request_data;
                let inner_key = ApiKey::try_from(i16::from_be_bytes([inner[0], inner[1]])).unwrap();
                assert_eq!(inner_key, request_key(&request));
                let inner_version = i16::from_be_bytes([inner[2], inner[3]]);
                RequestHeader::decode(&mut inner, inner_key.request_header_version(inner_version))
                    .unwrap();
                RequestKind::decode(inner_key, &mut inner, inner_version).unwrap();
                let principal = envelope.request_principal.unwrap();
                assert_eq!(&principal[..2], &[0, 0], "the principal's version");
                let IpAddr::V6(client) = CLIENT else {
                    unreachable!()
                };
                assert_eq!(&envelope.client_host_address[..], &client.octets()[..]);
            }
            _ => {
                assert!(!is_enveloped(&request), "{request:?}");
                assert_eq!(key, request_key(&request));
            }
        }
    }
}

#[test]
fn requests_the_controller_does_not_serve_are_refused() {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(12)
        .encode(&mut out, ApiKey::Metadata.request_header_version(12))
        .unwrap();
    kafka_protocol::messages::MetadataRequest::default()
        .encode(&mut out, 12)
        .unwrap();
    let refused = decode_call(out.freeze()).unwrap_err();
    assert!(refused.contains("Metadata"), "{refused}");
    // A client request with two topics: the forwarding node always sends one.
    let two = DeleteTopicsRequest::default().with_topics(vec![
        DeleteTopicState::default().with_topic_id(Uuid::new_v4()),
        DeleteTopicState::default().with_topic_id(Uuid::new_v4()),
    ]);
    let mut inner = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::DeleteTopics as i16)
        .with_request_api_version(6)
        .encode(&mut inner, ApiKey::DeleteTopics.request_header_version(6))
        .unwrap();
    two.encode(&mut inner, 6).unwrap();
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Envelope as i16)
        .encode(&mut frame, ApiKey::Envelope.request_header_version(0))
        .unwrap();
    envelope(inner.freeze(), None)
        .encode(&mut frame, 0)
        .unwrap();
    assert!(decode_call(frame.freeze()).is_err());
}

/// Whatever bytes arrive, reading them ends in a request or an error, never a panic;
/// and a request cut short anywhere is an error.
#[test]
fn truncated_and_garbled_requests_are_errors_not_panics() {
    for request in every_request() {
        let frame = encode_call(&request, 1, 3, None);
        for cut in 0..frame.len() {
            let _ = decode_call(frame.slice(..cut));
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            let mut garbled = frame.to_vec();
            for _ in 0..3 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state as usize) % garbled.len();
                garbled[at] = (state >> 32) as u8;
            }
            let _ = decode_call(Bytes::from(garbled));
        }
    }
    for cut in 0..4 {
        assert!(decode_call(Bytes::from(vec![0u8; cut])).is_err());
    }
}

#[test]
fn an_answer_to_another_request_is_not_taken() {
    let request = ForwardedRequest::DescribeQuorum;
    let call = decode_call(encode_call(&request, 1, 5, None)).unwrap();
    let answer = encode_answer(&call, Ok(success(&request)), 0);
    assert!(decode_answer(&request, 6, answer).is_err());
}
