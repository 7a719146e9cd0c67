//! Kafka framing on the client side: a request becomes a size-prefixed frame with a request
//! header; an answer frame becomes its correlation id and typed response. Sans I/O except
//! [`read_frame`], which works on any async reader.
//!
//! Invariants:
//! - A frame size outside `4..=FRAME_BYTES_MAX` is refused before anything is allocated for
//!   it ([`frame_size`]).
//! - Decoding never panics on bad bytes: a short, truncated or garbled frame is an error
//!   (`proptests` below feed arbitrary bytes to every decoder here).
//! - [`expect_response`] accepts only the correlation id that was sent; answers on one
//!   connection arrive in request order, so any other id means the connection is unusable.

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncReadExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::versions::api_key;

/// Largest answer frame accepted; a Fetch is capped well below it by its `max_bytes`.
pub const FRAME_BYTES_MAX: usize = 256 * 1024 * 1024;

/// The body size a frame's 4-byte prefix announces, if it is one this client accepts.
pub fn frame_size(prefix: [u8; 4]) -> Result<usize> {
    let size = i32::from_be_bytes(prefix);
    if size < 4 || size as usize > FRAME_BYTES_MAX {
        bail!("a frame of {size} bytes (accepted: 4..={FRAME_BYTES_MAX})");
    }
    Ok(size as usize)
}

fn header(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: &'static str,
) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(client_id)))
}

/// Writes the size prefix over the 4 bytes reserved at `start`.
fn finish_frame(out: &mut [u8], start: usize) {
    let size = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// Appends a whole request frame (size prefix included) to `out`.
pub fn encode_request<R: Request>(
    out: &mut Vec<u8>,
    client_id: &'static str,
    correlation_id: i32,
    version: i16,
    request: &R,
) -> Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    header(R::KEY, version, correlation_id, client_id).encode(out, R::header_version(version))?;
    request
        .encode(out, version)
        .with_context(|| format!("encoding {:?} v{version}", api_key::<R>()))?;
    finish_frame(out, start);
    Ok(())
}

/// As [`encode_request`] for a request known only at run time (test harnesses).
pub fn encode_request_kind(
    out: &mut BytesMut,
    client_id: &'static str,
    correlation_id: i32,
    version: i16,
    request: &RequestKind,
) -> Result<()> {
    let api = api_key_of(request)?;
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    header(api as i16, version, correlation_id, client_id)
        .encode(out, api.request_header_version(version))?;
    request
        .encode(out, version)
        .with_context(|| format!("encoding {api:?} v{version}"))?;
    finish_frame(out, start);
    Ok(())
}

/// The correlation id at the start of an answer frame's body.
pub fn correlation_id_of(frame: &[u8]) -> Result<i32> {
    let id = frame
        .get(..4)
        .ok_or_else(|| anyhow!("an answer of {} bytes has no correlation id", frame.len()))?;
    Ok(i32::from_be_bytes([id[0], id[1], id[2], id[3]]))
}

/// Splits an answer frame body (no size prefix) into its correlation id and message.
pub fn decode_response<R: Request>(frame: Bytes, version: i16) -> Result<(i32, R::Response)> {
    let mut body = frame;
    let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
        .with_context(|| format!("{:?} v{version} response header", api_key::<R>()))?;
    let response = R::Response::decode(&mut body, version)
        .with_context(|| format!("decoding {:?} v{version} response", api_key::<R>()))?;
    Ok((header.correlation_id, response))
}

/// As [`decode_response`], failing unless the answer carries `correlation_id`.
pub fn expect_response<R: Request>(
    frame: Bytes,
    version: i16,
    correlation_id: i32,
) -> Result<R::Response> {
    let got = correlation_id_of(&frame)?;
    if got != correlation_id {
        bail!("answer with correlation id {got} to request {correlation_id}");
    }
    Ok(decode_response::<R>(frame, version)?.1)
}

/// As [`decode_response`] for a request known only at run time (test harnesses).
pub fn decode_response_kind(
    frame: Bytes,
    api: ApiKey,
    version: i16,
) -> Result<(i32, ResponseKind)> {
    let mut body = frame;
    let header = ResponseHeader::decode(&mut body, api.response_header_version(version))
        .with_context(|| format!("{api:?} v{version} response header"))?;
    let response = ResponseKind::decode(api, &mut body, version)
        .with_context(|| format!("decoding {api:?} v{version} response"))?;
    Ok((header.correlation_id, response))
}

/// Reads one frame body into `buf`, which it resizes to the frame: only growth is
/// zero-filled, since the read overwrites every byte.
pub async fn read_frame<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Result<()> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await?;
    let size = frame_size(prefix)?;
    buf.resize(size, 0);
    stream.read_exact(buf).await?;
    Ok(())
}

/// The API a request belongs to.
pub fn api_key_of(request: &RequestKind) -> Result<ApiKey> {
    Ok(match request {
        RequestKind::Produce(_) => ApiKey::Produce,
        RequestKind::Fetch(_) => ApiKey::Fetch,
        RequestKind::ListOffsets(_) => ApiKey::ListOffsets,
        RequestKind::Metadata(_) => ApiKey::Metadata,
        RequestKind::ApiVersions(_) => ApiKey::ApiVersions,
        RequestKind::CreateTopics(_) => ApiKey::CreateTopics,
        RequestKind::DeleteTopics(_) => ApiKey::DeleteTopics,
        RequestKind::DescribeConfigs(_) => ApiKey::DescribeConfigs,
        RequestKind::CreatePartitions(_) => ApiKey::CreatePartitions,
        RequestKind::DescribeCluster(_) => ApiKey::DescribeCluster,
        RequestKind::FindCoordinator(_) => ApiKey::FindCoordinator,
        RequestKind::JoinGroup(_) => ApiKey::JoinGroup,
        RequestKind::SyncGroup(_) => ApiKey::SyncGroup,
        RequestKind::Heartbeat(_) => ApiKey::Heartbeat,
        RequestKind::LeaveGroup(_) => ApiKey::LeaveGroup,
        RequestKind::OffsetCommit(_) => ApiKey::OffsetCommit,
        RequestKind::OffsetFetch(_) => ApiKey::OffsetFetch,
        RequestKind::ListGroups(_) => ApiKey::ListGroups,
        RequestKind::DescribeGroups(_) => ApiKey::DescribeGroups,
        RequestKind::DeleteGroups(_) => ApiKey::DeleteGroups,
        RequestKind::OffsetDelete(_) => ApiKey::OffsetDelete,
        RequestKind::InitProducerId(_) => ApiKey::InitProducerId,
        RequestKind::OffsetForLeaderEpoch(_) => ApiKey::OffsetForLeaderEpoch,
        RequestKind::IncrementalAlterConfigs(_) => ApiKey::IncrementalAlterConfigs,
        RequestKind::DeleteRecords(_) => ApiKey::DeleteRecords,
        RequestKind::DescribeQuorum(_) => ApiKey::DescribeQuorum,
        RequestKind::ElectLeaders(_) => ApiKey::ElectLeaders,
        RequestKind::AlterPartitionReassignments(_) => ApiKey::AlterPartitionReassignments,
        RequestKind::ListPartitionReassignments(_) => ApiKey::ListPartitionReassignments,
        RequestKind::DescribeLogDirs(_) => ApiKey::DescribeLogDirs,
        RequestKind::AlterConfigs(_) => ApiKey::AlterConfigs,
        RequestKind::BrokerHeartbeat(_) => ApiKey::BrokerHeartbeat,
        other => bail!("this client does not frame {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse, ProduceRequest};

    #[test]
    fn request_frames_roundtrip() {
        let request = ProduceRequest::default().with_acks(1).with_timeout_ms(5);
        let mut out = Vec::new();
        encode_request(&mut out, "test", 9, 9, &request).expect("encodes");
        let size = frame_size(out[0..4].try_into().expect("4 bytes")).expect("size");
        assert_eq!(size, out.len() - 4);
        let mut body = Bytes::copy_from_slice(&out[4..]);
        let header = RequestHeader::decode(&mut body, 2).expect("header");
        assert_eq!((header.request_api_key, header.correlation_id), (0, 9));
        let back = ProduceRequest::decode(&mut body, 9).expect("body");
        assert_eq!(back.acks, 1);

        let mut kind = BytesMut::new();
        encode_request_kind(&mut kind, "test", 9, 9, &RequestKind::Produce(request))
            .expect("encodes");
        assert_eq!(&kind[..], &out[..], "both encoders write the same frame");
    }

    fn metadata_answer(correlation_id: i32) -> Bytes {
        let mut frame = Vec::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut frame, 1)
            .expect("h");
        MetadataResponse::default()
            .encode(&mut frame, 9)
            .expect("encodes");
        Bytes::from(frame)
    }

    #[test]
    fn answers_decode_only_with_the_awaited_correlation_id() {
        let (corr, _) =
            decode_response::<MetadataRequest>(metadata_answer(41), 9).expect("decodes");
        assert_eq!(corr, 41);
        assert!(expect_response::<MetadataRequest>(metadata_answer(41), 9, 41).is_ok());
        let error = expect_response::<MetadataRequest>(metadata_answer(40), 9, 41).unwrap_err();
        assert!(error
            .to_string()
            .contains("correlation id 40 to request 41"));
        let (corr, kind) =
            decode_response_kind(metadata_answer(7), ApiKey::Metadata, 9).expect("decodes");
        assert_eq!(corr, 7);
        assert!(matches!(kind, ResponseKind::Metadata(_)));
    }

    #[test]
    fn frame_sizes_outside_the_limit_are_refused() {
        assert!(frame_size(3i32.to_be_bytes()).is_err());
        assert!(frame_size((-1i32).to_be_bytes()).is_err());
        assert!(frame_size(((FRAME_BYTES_MAX + 1) as i32).to_be_bytes()).is_err());
        assert_eq!(frame_size(4i32.to_be_bytes()).unwrap(), 4);
        assert!(correlation_id_of(&[0, 0, 1]).is_err());
    }

    #[test]
    fn read_frame_refuses_before_allocating() {
        let mut huge = &((FRAME_BYTES_MAX + 1) as i32).to_be_bytes()[..];
        let mut buf = Vec::new();
        let error = futures_lite::future::block_on(read_frame(&mut huge, &mut buf)).unwrap_err();
        assert!(error.to_string().contains("frame of"));
        assert_eq!(buf.capacity(), 0, "nothing allocated");
        let mut short = &[0u8, 0, 0, 8, 1, 2][..];
        assert!(futures_lite::future::block_on(read_frame(&mut short, &mut buf)).is_err());
    }
}

#[cfg(test)]
mod proptests {
    //! Arbitrary bytes, and every truncation of real answers, fed to the decoders: each
    //! returns, Ok or Err, and never panics.

    use super::*;
    use crate::versions::CLIENT_APIS;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, MetadataResponse, TopicName};
    use proptest::prelude::*;

    fn every_api_version() -> impl Strategy<Value = (ApiKey, i16)> {
        (0..CLIENT_APIS.len()).prop_flat_map(|i| {
            let (api, min, max) = CLIENT_APIS[i];
            (Just(api), min..=max)
        })
    }

    /// A Metadata and a Fetch answer with content in every array, encoded at `version`.
    fn real_answers() -> Vec<(ApiKey, i16, Bytes)> {
        let metadata = MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092)])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_replica_nodes(vec![BrokerId(1)])
                    .with_isr_nodes(vec![BrokerId(1)])])]);
        let fetch =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![
                    PartitionData::default().with_records(Some(Bytes::from_static(&[7; 80])))
                ])]);
        let mut out = Vec::new();
        for version in [1, 9, 12] {
            let mut frame = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(5)
                .encode(
                    &mut frame,
                    ApiKey::Metadata.response_header_version(version),
                )
                .unwrap();
            metadata.encode(&mut frame, version).unwrap();
            out.push((ApiKey::Metadata, version, frame.freeze()));
        }
        for version in [4, 11, 12] {
            let mut frame = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(5)
                .encode(&mut frame, ApiKey::Fetch.response_header_version(version))
                .unwrap();
            fetch.encode(&mut frame, version).unwrap();
            out.push((ApiKey::Fetch, version, frame.freeze()));
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_answers_never_panic(
            (api, version) in every_api_version(),
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let _ = decode_response_kind(Bytes::from(bytes.clone()), api, version);
            let _ = correlation_id_of(&bytes);
            let _ = expect_response::<kafka_protocol::messages::MetadataRequest>(
                Bytes::from(bytes), version.clamp(1, 12), 1);
        }

        #[test]
        fn truncated_answers_are_errors_not_panics(cut in 0usize..400, flip in any::<(usize, u8)>()) {
            for (api, version, frame) in real_answers() {
                let whole = decode_response_kind(frame.clone(), api, version);
                prop_assert!(whole.is_ok(), "{api:?} v{version} decodes whole");
                let cut = cut.min(frame.len());
                let _ = decode_response_kind(frame.slice(..cut), api, version);
                let mut garbled = frame.to_vec();
                if !garbled.is_empty() {
                    let at = flip.0 % garbled.len();
                    garbled[at] ^= flip.1;
                }
                let _ = decode_response_kind(Bytes::from(garbled), api, version);
            }
        }

        #[test]
        fn arbitrary_streams_frame_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut stream = &bytes[..];
            let mut buf = Vec::new();
            let read = futures_lite::future::block_on(read_frame(&mut stream, &mut buf));
            if read.is_ok() {
                let size = frame_size(bytes[..4].try_into().unwrap()).unwrap();
                prop_assert_eq!(&buf[..], &bytes[4..4 + size]);
            }
        }
    }
}
