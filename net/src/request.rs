//! Decoding one request frame into a typed [`Request`].
//!
//! Invariants: the version is checked against [`SupportedApis`] before the body is decoded,
//! so handlers only ever see versions the node announced; decoding borrows from the frame
//! (`Bytes` slices), so a produce request's record batches are never copied here.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::{Decodable, StrBytes};
use thiserror::Error;

use crate::SupportedApis;

/// A decoded request and what the connection needs to answer it.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<StrBytes>,
    pub body: RequestKind,
    /// Size of the frame body, for memory accounting.
    pub frame_bytes: usize,
    /// The client's address, when the connection knows it (Kafka reports it as the
    /// member's client host).
    pub peer: Option<std::net::SocketAddr>,
    /// The connection's way out, set by the connection (absent when decoded elsewhere).
    pub outbox: Option<std::rc::Rc<crate::Outbox>>,
}

#[derive(Error, Debug)]
pub enum DecodeError {
    #[error("unknown api key {api_key}")]
    UnknownApiKey { api_key: i16, correlation_id: i32 },
    /// Kafka answers this one (UNSUPPORTED_VERSION in a v0 response) instead of closing.
    #[error("ApiVersions v{api_version} is not supported")]
    UnsupportedApiVersions {
        api_version: i16,
        correlation_id: i32,
    },
    #[error("{api_key:?} v{api_version} is not supported")]
    UnsupportedVersion {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
    },
    #[error("{api_key:?} v{api_version} does not parse: {reason}")]
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
        reason: String,
    },
}

/// Decodes a frame body (the bytes after the length prefix).
pub fn decode_request(mut frame: Bytes, apis: &SupportedApis) -> Result<Request, DecodeError> {
    let frame_bytes = frame.len();
    assert!(
        frame_bytes >= crate::frame::REQUEST_BYTES_MIN,
        "frame::check admits no less"
    );
    let fixed = &frame[..8];
    let api_key_raw = i16::from_be_bytes([fixed[0], fixed[1]]);
    let api_version = i16::from_be_bytes([fixed[2], fixed[3]]);
    let correlation_id = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    let api_key = ApiKey::try_from(api_key_raw).map_err(|()| DecodeError::UnknownApiKey {
        api_key: api_key_raw,
        correlation_id,
    })?;
    if !apis.supports(api_key_raw, api_version) {
        return Err(match api_key {
            ApiKey::ApiVersions => DecodeError::UnsupportedApiVersions {
                api_version,
                correlation_id,
            },
            _ => DecodeError::UnsupportedVersion {
                api_key,
                api_version,
                correlation_id,
            },
        });
    }
    let malformed = |reason: anyhow::Error| DecodeError::Malformed {
        api_key,
        api_version,
        correlation_id,
        reason: reason.to_string(),
    };
    let header_version = api_key.request_header_version(api_version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(malformed)?;
    let body = RequestKind::decode(api_key, &mut frame, api_version).map_err(malformed)?;
    // Kafka ignores bytes after the body, and some clients send them (librdkafka 2.x's
    // Metadata v12 carries three), so they are ignored here too.
    if frame.has_remaining() {
        tracing::trace!(
            ?api_key,
            api_version,
            trailing_bytes = frame.remaining(),
            "ignored"
        );
    }
    Ok(Request {
        api_key,
        api_version,
        correlation_id: header.correlation_id,
        client_id: header.client_id,
        body,
        frame_bytes,
        peer: None,
        outbox: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::Encodable;

    fn apis() -> SupportedApis {
        SupportedApis::new(&[(ApiKey::ApiVersions, 0, 3), (ApiKey::Metadata, 0, 12)])
    }

    fn frame(api_key: ApiKey, version: i16, body: &RequestKind) -> Bytes {
        let mut out = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        header
            .encode(&mut out, api_key.request_header_version(version))
            .expect("header");
        body.encode(&mut out, version).expect("body");
        out.freeze()
    }

    #[test]
    fn decodes_a_supported_request() {
        let body = RequestKind::Metadata(MetadataRequest::default());
        let request = decode_request(frame(ApiKey::Metadata, 9, &body), &apis()).expect("ok");
        assert_eq!(request.api_key, ApiKey::Metadata);
        assert_eq!(request.correlation_id, 42);
        assert_eq!(request.client_id.as_deref(), Some("test"));
    }

    #[test]
    fn refuses_what_is_not_announced() {
        let body = RequestKind::ApiVersions(ApiVersionsRequest::default());
        let error = decode_request(frame(ApiKey::ApiVersions, 4, &body), &apis()).unwrap_err();
        assert!(matches!(
            error,
            DecodeError::UnsupportedApiVersions {
                correlation_id: 42,
                ..
            }
        ));
        let mut unknown = frame(ApiKey::ApiVersions, 0, &body).to_vec();
        unknown[..2].copy_from_slice(&999i16.to_be_bytes());
        let error = decode_request(Bytes::from(unknown), &apis()).unwrap_err();
        assert!(matches!(
            error,
            DecodeError::UnknownApiKey { api_key: 999, .. }
        ));
    }

    #[test]
    fn huge_array_counts_are_refused_not_allocated() {
        // Metadata v0 whose topic array claims i32::MAX entries in a 14-byte frame: an
        // unpatched decoder would ask for ~100 GB up front and abort the process.
        let mut frame = Vec::new();
        frame.extend_from_slice(&3i16.to_be_bytes()); // Metadata
        frame.extend_from_slice(&0i16.to_be_bytes()); // v0
        frame.extend_from_slice(&7i32.to_be_bytes()); // correlation id
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
        frame.extend_from_slice(&i32::MAX.to_be_bytes()); // topic count
        let error = decode_request(Bytes::from(frame), &apis()).unwrap_err();
        assert!(
            matches!(
                error,
                DecodeError::Malformed {
                    correlation_id: 7,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn garbage_bodies_are_malformed_not_panics() {
        let body = RequestKind::Metadata(MetadataRequest::default());
        let good = frame(ApiKey::Metadata, 9, &body);
        for cut in crate::frame::REQUEST_BYTES_MIN..good.len() {
            let mut truncated = good.slice(..cut).to_vec();
            // Claim a huge topic array so a decoder that trusts lengths would overrun.
            truncated.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
            let _ = decode_request(Bytes::from(truncated), &apis());
        }
    }
}
