//! Encoding one response frame: length prefix, response header, body.
//!
//! Invariant: the length prefix is set last, from the bytes actually encoded, so a frame
//! can never announce a length its body does not have.

use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;

use crate::out_frame::OutFrame;
use crate::SupportedApis;

/// Kafka's UNSUPPORTED_VERSION error code.
pub const UNSUPPORTED_VERSION: i16 = 35;

/// Encodes the framed response into `out`, which it clears first.
pub fn encode_response(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
    out: &mut OutFrame,
) -> anyhow::Result<()> {
    out.clear();
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header.encode(out, api_key.response_header_version(api_version))?;
    body.encode(out, api_version)?;
    out.seal();
    Ok(())
}

/// Kafka's answer to an ApiVersions request of a version it does not know: a v0 response
/// with UNSUPPORTED_VERSION and the supported ranges, so the client can retry lower.
pub fn encode_unsupported_api_versions(
    correlation_id: i32,
    apis: &SupportedApis,
    out: &mut OutFrame,
) -> anyhow::Result<()> {
    let body = ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(apis.announced());
    encode_response(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &ResponseKind::ApiVersions(body),
        out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn unsupported_api_versions_is_a_v0_error_response() {
        let apis = SupportedApis::new(&[(ApiKey::ApiVersions, 0, 3)]);
        let mut out = OutFrame::default();
        encode_unsupported_api_versions(7, &apis, &mut out).expect("encode");
        let mut frame = out.to_bytes();
        assert_eq!(frame.get_i32() as usize, frame.len());
        assert_eq!(
            frame.get_i32(),
            7,
            "v0 response header: correlation id only"
        );
        let body = ApiVersionsResponse::decode(&mut frame, 0).expect("decode");
        assert_eq!(body.error_code, UNSUPPORTED_VERSION);
        assert_eq!(body.api_keys.len(), 1);
        assert_eq!(body.api_keys[0].max_version, 3);
    }
}
