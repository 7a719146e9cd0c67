//! A scripted Kafka broker for unit tests of the client and its users: it decodes each
//! request with the `kafka-protocol` codecs and answers with whatever the test's handler
//! returns, so client logic (version branches, error handling, the group member's state
//! machine) is tested against canned responses without a node.
//!
//! Invariants:
//! - Every connection is served on its own thread; the handler is shared and called one
//!   request at a time, in arrival order per connection.
//! - A request the codec cannot decode, or a handler panic, closes the connection, so the
//!   client under test sees an error rather than a hang.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use bytes::{Buf, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Answers one request (decoded at `version`) given the fake's own port; runs under the
/// broker's lock.
pub type Handler = Box<dyn FnMut(RequestKind, i16, u16) -> ResponseKind + Send>;

pub struct FakeBroker {
    pub port: u16,
    /// (api, version) of every request served, in order.
    pub seen: Arc<Mutex<Vec<(ApiKey, i16)>>>,
}

impl FakeBroker {
    /// Listens on a free loopback port; `handler` answers everything.
    pub fn start(handler: Handler) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("address").port();
        let handler = Arc::new(Mutex::new(handler));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_by_server = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let handler = handler.clone();
                let seen = seen_by_server.clone();
                std::thread::spawn(move || serve(stream, port, handler, seen));
            }
        });
        FakeBroker { port, seen }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn seen(&self, api: ApiKey) -> Vec<i16> {
        let seen = self.seen.lock().expect("not poisoned");
        seen.iter()
            .filter(|(key, _)| *key == api)
            .map(|(_, v)| *v)
            .collect()
    }
}

fn serve(
    mut stream: TcpStream,
    port: u16,
    handler: Arc<Mutex<Handler>>,
    seen: Arc<Mutex<Vec<(ApiKey, i16)>>>,
) {
    loop {
        let mut size = [0u8; 4];
        if stream.read_exact(&mut size).is_err() {
            return;
        }
        let Ok(size) = crate::frame::frame_size(size) else {
            return;
        };
        let mut body = vec![0u8; size];
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        let mut frame = bytes::Bytes::from(body);
        let api_key = ApiKey::try_from((&frame[0..2]).get_i16()).expect("known api key");
        let version = (&frame[2..4]).get_i16();
        let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
            .expect("request header decodes");
        let request = RequestKind::decode(api_key, &mut frame, version).expect("request decodes");
        seen.lock().expect("not poisoned").push((api_key, version));
        let response = {
            let mut handler = handler.lock().expect("not poisoned");
            handler(request, version, port)
        };
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0; 4]);
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut out, api_key.response_header_version(version))
            .expect("response header encodes");
        response
            .encode(&mut out, version)
            .expect("canned response encodes at the request's version");
        let length = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&length.to_be_bytes());
        if stream.write_all(&out).is_err() {
            return;
        }
    }
}

/// An ApiVersions answer announcing `ranges`.
pub fn api_versions(ranges: &[(ApiKey, i16, i16)]) -> ResponseKind {
    ResponseKind::ApiVersions(
        ApiVersionsResponse::default().with_api_keys(
            ranges
                .iter()
                .map(|(key, min, max)| {
                    ApiVersion::default()
                        .with_api_key(*key as i16)
                        .with_min_version(*min)
                        .with_max_version(*max)
                })
                .collect(),
        ),
    )
}

/// The broker entry of a Metadata answer for node 1 at `port`.
pub fn broker_entry(port: u16) -> MetadataResponseBroker {
    MetadataResponseBroker::default()
        .with_node_id(BrokerId(1))
        .with_host(StrBytes::from_static_str("127.0.0.1"))
        .with_port(port as i32)
}
