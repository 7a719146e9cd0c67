//! Test harness: a real `ringlog` process on a free loopback port with its own data
//! directory, and a minimal blocking Kafka client built on the `kafka-protocol` codecs.
//! Nodes start through [`launch`], which races nothing for their ports; a node's output
//! goes to `node.log` in its directory and is printed when a test fails.

#![allow(dead_code)] // each test file uses a different part of the harness

pub mod launch;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// A node started for one test; killed when dropped.
pub struct Node {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Node {
    pub fn start(settings: &[&str]) -> Node {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut node = Node::start_in(&dir, settings);
        node._tmp = Some(tmp);
        node
    }

    /// Starts a node on an existing data directory (for restarts).
    pub fn start_in(dir: &Path, settings: &[&str]) -> Node {
        let launched = launch::launch(&dir.join("node.log"), |port| {
            let listener = format!("PLAINTEXT://127.0.0.1:{port}");
            let mut command = Command::new(env!("CARGO_BIN_EXE_ringlog"));
            command
                .arg("serve")
                .arg("--cores")
                .arg("2")
                .args(["--set", &format!("log.dirs={}", dir.join("data").display())])
                .args(["--set", &format!("listeners={listener}")])
                .env("RUST_LOG", launch::log_filter("warn"));
            for setting in settings {
                command.args(["--set", setting]);
            }
            command
        });
        Node {
            child: launched.child,
            port: launched.port,
            dir: dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// What the node has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.port)
    }

    /// SIGKILL, as a crash. The data directory stays for [`Stopped::restart`].
    pub fn kill(mut self) -> Stopped {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Stopped {
            dir: self.dir.clone(),
            tmp: self._tmp.take(),
        }
    }
}

/// A node that was killed; its data directory lives as long as this value.
pub struct Stopped {
    pub dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
}

impl Stopped {
    /// Starts a node again on the same data directory.
    pub fn restart(self, settings: &[&str]) -> Node {
        let mut node = Node::start_in(&self.dir, settings);
        node._tmp = self.tmp;
        node
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- log of the node on port {} ---\n{}",
                self.port,
                self.log_text()
            );
        }
    }
}

pub struct Client {
    stream: TcpStream,
    correlation_id: i32,
    /// Correlation ids sent and not yet answered, oldest first.
    awaited: std::collections::VecDeque<i32>,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Client {
            stream,
            correlation_id: 0,
            awaited: Default::default(),
        }
    }

    /// Sends `request` at `version` and decodes the answer; panics if the node closes.
    pub fn call(&mut self, version: i16, request: RequestKind) -> ResponseKind {
        let api_key = api_key_of(&request);
        self.send(api_key, version, &request);
        self.receive(api_key, version)
    }

    pub fn send(&mut self, api_key: ApiKey, version: i16, request: &RequestKind) {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("ringlog-tests")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, api_key.request_header_version(version))
            .expect("header");
        request.encode(&mut body, version).expect("request encodes");
        self.awaited.push_back(self.correlation_id);
        self.send_raw(&body);
    }

    pub fn send_raw(&mut self, body: &[u8]) {
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(body);
        self.stream.write_all(&frame).expect("write");
    }

    pub fn receive(&mut self, api_key: ApiKey, version: i16) -> ResponseKind {
        let mut frame = self.receive_frame().unwrap_or_else(|| {
            panic!("the node closed the connection instead of answering {api_key:?} v{version}")
        });
        let header = ResponseHeader::decode(&mut frame, api_key.response_header_version(version))
            .expect("response header");
        let expected = self.awaited.pop_front().expect("an answer was awaited");
        assert_eq!(
            header.correlation_id, expected,
            "answers arrive in request order"
        );
        ResponseKind::decode(api_key, &mut frame, version).expect("response decodes")
    }

    /// The next frame, or `None` when the node closed the connection.
    pub fn receive_frame(&mut self) -> Option<Bytes> {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// True once the node has closed the connection (reads end), within `timeout`.
    pub fn is_closed_within(&mut self, timeout: Duration) -> bool {
        self.stream
            .set_read_timeout(Some(timeout))
            .expect("timeout");
        let mut byte = [0u8; 1];
        let closed = matches!(self.stream.read(&mut byte), Ok(0) | Err(_));
        self.stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        closed
    }
}

fn api_key_of(request: &RequestKind) -> ApiKey {
    match request {
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
        other => panic!("the harness does not send {other:?}"),
    }
}

/// A v2 record batch of `values` (keys `k0`, `k1`, …), CRC-32C included.
pub fn batch(values: &[&[u8]]) -> Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            delete_horizon: false,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::copy_from_slice(value)),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("batch encodes");
    out.freeze()
}

/// The values of every record in `records` (one or more batches).
pub fn values(records: &Bytes) -> Vec<Bytes> {
    let mut records = records.clone();
    let mut out = Vec::new();
    while records.has_remaining() {
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut records)
            .expect("stored batches decode");
        out.extend(set.records.into_iter().filter_map(|r| r.value));
    }
    out
}
