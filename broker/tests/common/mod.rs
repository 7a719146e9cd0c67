//! Test harness: a real `ringlog` process on a free loopback port with its own data
//! directory, and a minimal blocking Kafka client on the `client` crate's framing (raw
//! frames too, for tests of what the node does with bad ones).
//! Nodes start through [`launch`], which races nothing for their ports; a node's output
//! goes to `node.log` in its directory and is printed when a test fails. A node runs on
//! loopback, or inside a network namespace at an address of its own ([`Host`]).

#![allow(dead_code)] // each test file uses a different part of the harness

pub mod cluster;
pub mod launch;
pub mod logs;
pub mod netns;
pub mod replicated;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use client::frame::{api_key_of, decode_response_kind, encode_request_kind, frame_size};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{ApiKey, IncrementalAlterConfigsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

/// Where a node runs and takes clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// On 127.0.0.1, at a port the launcher picks.
    Loopback,
    /// Inside network namespace `netns` (`ip netns exec`), listening at `ip`: for clients
    /// on `client_port`, for the metadata quorum (when in one) on `controller_port`.
    Netns {
        netns: String,
        ip: IpAddr,
        client_port: u16,
        controller_port: u16,
    },
}

/// A node started for one test; killed when dropped.
pub struct Node {
    pub child: Child,
    /// Where its clients connect: `ip` and `port`.
    pub ip: IpAddr,
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
        Node::start_at(dir, &Host::Loopback, settings)
    }

    /// Starts a node on an existing data directory, on `host`.
    pub fn start_at(dir: &Path, host: &Host, settings: &[&str]) -> Node {
        let log = dir.join("node.log");
        let serve = |ip: IpAddr, port: u16, mut command: Command| {
            command
                .arg("serve")
                .arg("--cores")
                .arg("2")
                .args(["--set", &format!("log.dirs={}", dir.join("data").display())])
                .args(["--set", &format!("listeners=PLAINTEXT://{ip}:{port}")])
                .env("RUST_LOG", launch::log_filter("warn"));
            for setting in settings {
                command.args(["--set", setting]);
            }
            command
        };
        let (ip, launched) = match host {
            Host::Loopback => {
                let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
                let launched = launch::launch(&log, |port| {
                    serve(ip, port, Command::new(env!("CARGO_BIN_EXE_ringlog")))
                });
                (ip, launched)
            }
            Host::Netns {
                netns,
                ip,
                client_port,
                ..
            } => {
                // `ip netns exec` execs the node: the child is the node's own process.
                let mut command = Command::new("ip");
                command
                    .args(["netns", "exec", netns])
                    .arg(env!("CARGO_BIN_EXE_ringlog"));
                let command = serve(*ip, *client_port, command);
                (*ip, launch::launch_at(&log, *client_port, command))
            }
        };
        Node {
            child: launched.child,
            ip,
            port: launched.port,
            dir: dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// What the node has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }

    pub fn connect(&self) -> Client {
        Client::connect_to(self.address())
    }

    /// SIGTERM, and waits (bounded) for a clean exit. The data directory stays for
    /// [`Stopped::restart`].
    pub fn stop(mut self) -> Stopped {
        let signalled = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(signalled.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the node ignored SIGTERM; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "exit {status}; log:\n{}", self.log_text());
        Stopped {
            dir: self.dir.clone(),
            tmp: self._tmp.take(),
        }
    }

    /// Sends `signal` (`STOP` freezes the process as a hung machine would, `CONT` thaws it).
    pub fn signal(&self, signal: &str) {
        let signalled = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(signalled.success(), "kill -{signal}");
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
                "--- log of the node at {} ---\n{}",
                self.address(),
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

/// How long connecting to a node may take (a node in a namespace is never out of reach of
/// the test itself, but a wait must be bounded all the same).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    pub fn connect(port: u16) -> Client {
        Client::connect_to(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
    }

    pub fn connect_to(address: SocketAddr) -> Client {
        Client::try_connect_to(address, CONNECT_TIMEOUT, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("connect to {address}: {e}"))
    }

    /// Connects within `connect_timeout`, or the error; a read or a write of this client
    /// fails after `io_timeout` (for a client of a node that may be down or frozen).
    pub fn try_connect_to(
        address: SocketAddr,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> std::io::Result<Client> {
        let stream = TcpStream::connect_timeout(&address, connect_timeout)?;
        stream.set_read_timeout(Some(io_timeout))?;
        stream.set_write_timeout(Some(io_timeout))?;
        Ok(Client {
            stream,
            correlation_id: 0,
            awaited: Default::default(),
        })
    }

    /// Sends `request` at `version` and decodes the answer; panics if the node closes.
    pub fn call(&mut self, version: i16, request: RequestKind) -> ResponseKind {
        let api_key = api_key_of(&request).expect("the harness frames this request");
        self.send(api_key, version, &request);
        self.receive(api_key, version)
    }

    /// As [`Client::call`], but a node that closes the connection or does not answer in
    /// time is the error (`TimedOut` or `WouldBlock` for the latter), not a panic. The
    /// client is of no further use after an error.
    pub fn try_call(
        &mut self,
        version: i16,
        request: RequestKind,
    ) -> std::io::Result<ResponseKind> {
        let api_key = api_key_of(&request).expect("the harness frames this request");
        self.try_send(api_key, version, &request)?;
        self.try_receive(api_key, version)
    }

    pub fn send(&mut self, api_key: ApiKey, version: i16, request: &RequestKind) {
        self.try_send(api_key, version, request).expect("write");
    }

    /// As [`Client::send`]; the error if the write fails.
    pub fn try_send(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &RequestKind,
    ) -> std::io::Result<()> {
        assert_eq!(api_key_of(request).ok(), Some(api_key), "{request:?}");
        self.correlation_id += 1;
        let mut frame = BytesMut::new();
        encode_request_kind(
            &mut frame,
            "ringlog-tests",
            self.correlation_id,
            version,
            request,
        )
        .expect("request encodes");
        self.awaited.push_back(self.correlation_id);
        self.stream.write_all(&frame)
    }

    /// Sends a request the node does not answer (Produce with acks=0).
    pub fn send_unanswered(&mut self, api_key: ApiKey, version: i16, request: &RequestKind) {
        self.send(api_key, version, request);
        self.awaited.pop_back();
    }

    /// Sends `body` (header and message, possibly malformed) behind a size prefix.
    pub fn send_raw(&mut self, body: &[u8]) {
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(body);
        self.stream.write_all(&frame).expect("write");
    }

    pub fn receive(&mut self, api_key: ApiKey, version: i16) -> ResponseKind {
        self.try_receive(api_key, version).unwrap_or_else(|_| {
            panic!("the node closed the connection instead of answering {api_key:?} v{version}")
        })
    }

    /// As [`Client::receive`]; the error if the connection ends or the read times out.
    pub fn try_receive(&mut self, api_key: ApiKey, version: i16) -> std::io::Result<ResponseKind> {
        let frame = self.try_receive_frame()?;
        let (correlation_id, response) =
            decode_response_kind(frame, api_key, version).expect("response decodes");
        let expected = self.awaited.pop_front().expect("an answer was awaited");
        assert_eq!(correlation_id, expected, "answers arrive in request order");
        Ok(response)
    }

    /// The next frame, or `None` when the node closed the connection.
    pub fn receive_frame(&mut self) -> Option<Bytes> {
        self.try_receive_frame().ok()
    }

    fn try_receive_frame(&mut self) -> std::io::Result<Bytes> {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length)?;
        let size = frame_size(length).expect("the node sent a frame of a sane size");
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body)?;
        Ok(Bytes::from(body))
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

/// A v2 record batch of `values` (keys `k0`, `k1`, …), CRC-32C included.
pub fn batch(values: &[&[u8]]) -> Bytes {
    encode_batch(values, None)
}

/// The producer of an idempotent batch and the sequence number of its first record.
#[derive(Clone, Copy, Debug)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

/// As [`batch`], from an idempotent producer. Only the batch's base sequence goes on the
/// wire; the node derives the rest (wrapping past `i32::MAX` to 0).
pub fn idempotent_batch(producer: Producer, values: &[&[u8]]) -> Bytes {
    encode_batch(values, Some(producer))
}

fn encode_batch(values: &[&[u8]], producer: Option<Producer>) -> Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let (producer_id, producer_epoch) = producer.map_or((-1, -1), |p| (p.id, p.epoch));
    // The codec keeps records in one batch while offset minus sequence stays the same.
    let sequence = |i: usize| producer.map_or(-1, |p| p.base_sequence.wrapping_add(i as i32));
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            delete_horizon: false,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence(i),
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

/// How many files of partition `topic`-`partition` in a node's directory `dir` have names
/// ending in `suffix`.
pub fn partition_files(dir: &Path, topic: &str, partition: i32, suffix: &str) -> usize {
    let dir = dir.join("data").join(format!("{topic}-{partition}"));
    std::fs::read_dir(dir)
        .expect("partition dir")
        .filter(|e| {
            let name = e.as_ref().expect("entry").file_name();
            name.to_string_lossy().ends_with(suffix)
        })
        .count()
}

pub fn topic_name(topic: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(topic.to_string()))
}

/// Creates `topic` with `partitions` partitions and the topic `configs`; panics unless the
/// node created it.
pub fn create_topic(client: &mut Client, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::CreateTopicsRequest;
    let configs = configs
        .iter()
        .map(|(key, value)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_value(Some(StrBytes::from_string(value.to_string())))
        })
        .collect();
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(topic_name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(configs)]);
    let ResponseKind::CreateTopics(answer) = client.call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.topics[0].error_code, 0, "creating {topic}");
}

/// A fresh producer id from InitProducerId v4 without a transactional id, at epoch 0.
pub fn init_producer_id(client: &mut Client) -> i64 {
    use kafka_protocol::messages::InitProducerIdRequest;
    let request = InitProducerIdRequest::default()
        // Null, not the codec's default of "": an empty transactional id is refused.
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let ResponseKind::InitProducerId(answer) = client.call(4, RequestKind::InitProducerId(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.error_code, 0, "InitProducerId");
    assert_eq!(
        answer.producer_epoch, 0,
        "a fresh producer id starts at epoch 0"
    );
    answer.producer_id.0
}

/// A Produce request (v9) of `records` for one partition.
pub fn produce_request(
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// The answer to a Produce request (v9) for one partition: (error code, base offset).
pub fn produce_answer(client: &mut Client) -> (i16, i64) {
    let ResponseKind::Produce(answer) = client.receive(ApiKey::Produce, 9) else {
        unreachable!()
    };
    let partition = &answer.responses[0].partition_responses[0];
    (partition.error_code, partition.base_offset)
}

/// Produces `records` to one partition and waits for the answer: (error code, base offset).
pub fn produce(
    client: &mut Client,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> (i16, i64) {
    let request = produce_request(topic, partition, records, acks);
    client.send(ApiKey::Produce, 9, &RequestKind::Produce(request));
    produce_answer(client)
}

/// Every record value of a partition from offset 0 to its high watermark, in offset order.
pub fn read_values(client: &mut Client, topic: &str, partition: i32) -> Vec<Bytes> {
    read_record_sets(client, topic, partition)
        .into_iter()
        .flat_map(|set| set.records)
        .map(|record| record.value.unwrap_or_default())
        .collect()
}

/// (producer id, base sequence, record count) of every batch of a partition, in offset
/// order.
pub fn read_batches(client: &mut Client, topic: &str, partition: i32) -> Vec<(i64, i32, usize)> {
    read_record_sets(client, topic, partition)
        .into_iter()
        .filter_map(|set| {
            let first = set.records.first()?;
            Some((first.producer_id, first.sequence, set.records.len()))
        })
        .collect()
}

/// The batches a Fetch at `offset` returns, or `None` at the high watermark.
pub fn fetch_at(client: &mut Client, topic: &str, partition: i32, offset: i64) -> Option<Bytes> {
    try_fetch_at(client, topic, partition, offset)
        .unwrap_or_else(|code| panic!("fetch at {offset}: error {code}"))
}

/// A consumer's Fetch of one partition of `topic` at `offset`: waiting at most
/// `max_wait_ms` for one byte, answering at most `max_bytes` (per partition and in all).
pub fn fetch_one(
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    max_bytes: i32,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    kafka_protocol::messages::FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)])])
}

/// As [`fetch_at`], the partition's error code if the node refuses (not the leader, say).
pub fn try_fetch_at(
    client: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<Option<Bytes>, i16> {
    let request = fetch_one(topic, partition, offset, 0, 8 << 20);
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let data = &answer.responses[0].partitions[0];
    if data.error_code != 0 {
        return Err(data.error_code);
    }
    let records = data.records.clone().unwrap_or_default();
    Ok((offset < data.high_watermark && !records.is_empty()).then_some(records))
}

/// Every record of a partition, batch by batch, in offset order, checking offsets are
/// dense.
fn read_record_sets(
    client: &mut Client,
    topic: &str,
    partition: i32,
) -> Vec<kafka_protocol::records::RecordSet> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    // Bounded: every round reads at least one record or ends.
    for _ in 0..100_000 {
        let Some(mut records) = fetch_at(client, topic, partition, offset) else {
            return out;
        };
        while records.has_remaining() {
            let mut set = kafka_protocol::records::RecordBatchDecoder::decode(&mut records)
                .expect("stored batches decode");
            set.records.retain(|record| record.offset >= offset);
            for record in &set.records {
                assert_eq!(record.offset, offset, "offsets are dense");
                offset += 1;
            }
            out.push(set);
        }
    }
    panic!("reading {topic}-{partition} did not end");
}

/// The log start offset of partition 0 of `topic` (ListOffsets earliest, v5).
pub fn earliest_offset(client: &mut Client, topic: &str) -> i64 {
    list_offset(client, topic, -2, -1)
}

/// ListOffsets (v5) of partition 0 of `topic` at `timestamp` (-1 latest, -2 earliest), asked
/// as `replica_id` (-1 a consumer, -2 a tool).
pub fn list_offset(client: &mut Client, topic: &str, timestamp: i64, replica_id: i32) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{BrokerId, ListOffsetsRequest};
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(replica_id))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let ResponseKind::ListOffsets(answer) = client.call(5, RequestKind::ListOffsets(request))
    else {
        unreachable!()
    };
    let partition = &answer.topics[0].partitions[0];
    assert_eq!(
        partition.error_code, 0,
        "ListOffsets {timestamp} of {topic} as replica {replica_id}"
    );
    partition.offset
}

/// Error code and record values of a fetch of partition 0 of `topic` at `offset`.
pub fn fetch_values(client: &mut Client, topic: &str, offset: i64) -> (i16, Vec<Bytes>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::FetchRequest;
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let partition = &answer.responses[0].partitions[0];
    let records = partition.records.as_ref().map(values).unwrap_or_default();
    (partition.error_code, records)
}

/// Metadata (v12) for `topics` (`&[]`: brokers only), never auto-creating.
pub fn metadata(
    client: &mut Client,
    topics: &[&str],
) -> kafka_protocol::messages::MetadataResponse {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::MetadataRequest;
    let request = MetadataRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
            .collect(),
    ));
    let ResponseKind::Metadata(answer) = client.call(12, RequestKind::Metadata(request)) else {
        unreachable!()
    };
    answer
}

/// A standalone consumer's commit (generation -1) of `offset` for `partition` of `topic`:
/// the partition's error code.
pub fn commit_offset(
    client: &mut Client,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest};
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)])]);
    let ResponseKind::OffsetCommit(answer) = client.call(8, RequestKind::OffsetCommit(request))
    else {
        unreachable!()
    };
    answer.topics[0].partitions[0].error_code
}

/// The offset `group` committed for `partition` of `topic`: (error code, offset).
pub fn committed_offset(
    client: &mut Client,
    group: &str,
    topic: &str,
    partition: i32,
) -> (i16, i64) {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest};
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(vec![partition])]));
    let ResponseKind::OffsetFetch(answer) = client.call(7, RequestKind::OffsetFetch(request))
    else {
        unreachable!()
    };
    if answer.error_code != 0 {
        return (answer.error_code, -1);
    }
    let found = &answer.topics[0].partitions[0];
    (found.error_code, found.committed_offset)
}

/// IncrementalAlterConfigs of resource `kind` `name` (2 a topic, 4 a broker, "" the
/// cluster-wide default), ops `(name, operation, value)`; the resource's error code.
pub fn alter_resource(
    client: &mut Client,
    (kind, name): (i8, &str),
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> i16 {
    let configs = ops
        .iter()
        .map(|(name, op, value)| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_config_operation(*op)
                .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(configs)]);
    let ResponseKind::IncrementalAlterConfigs(answer) =
        client.call(1, RequestKind::IncrementalAlterConfigs(request))
    else {
        unreachable!()
    };
    answer.responses[0].error_code
}

/// FindCoordinator of `group`: (error code, the coordinator's node id).
pub fn find_coordinator(client: &mut Client, group: &str) -> (i16, i32) {
    use kafka_protocol::messages::FindCoordinatorRequest;
    let request = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
    let ResponseKind::FindCoordinator(answer) =
        client.call(4, RequestKind::FindCoordinator(request))
    else {
        unreachable!()
    };
    let coordinator = &answer.coordinators[0];
    (coordinator.error_code, coordinator.node_id.0)
}
