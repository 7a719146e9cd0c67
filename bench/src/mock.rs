//! A tiny in-process Kafka broker for tests: one node, blocking std threads, logs in memory.
//!
//! Invariants:
//! - Speaks ApiVersions, Metadata, CreateTopics, Produce, ListOffsets and Fetch through the
//!   kafka-protocol crate's own request decoders and response encoders, so the bench's client
//!   is checked against the spec's message layouts, not against itself.
//! - Produce validates each batch's CRC-32C, assigns offsets by rewriting the base offset
//!   (outside the CRC), and sends no response for acks=0, as Kafka does.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};

#[derive(Default)]
struct Log {
    /// (base offset, batch bytes)
    batches: Vec<(i64, Vec<u8>)>,
    next_offset: i64,
}

#[derive(Default)]
struct State {
    topics: BTreeMap<String, Vec<Log>>,
}

pub struct MockBroker {
    pub addr: SocketAddr,
}

impl MockBroker {
    pub fn start() -> MockBroker {
        // Binding an ephemeral loopback port only fails if the machine has no loopback.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State::default()));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = state.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, addr, state);
                });
            }
        });
        MockBroker { addr }
    }
}

fn serve(mut stream: TcpStream, addr: SocketAddr, state: Arc<Mutex<State>>) -> Result<()> {
    stream.set_nodelay(true)?;
    loop {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size)?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut body)?;
        let mut buf = Bytes::from(body);
        let header = kafka_protocol::protocol::decode_request_header_from_buffer(&mut buf)?;
        let v = header.request_api_version;
        let mut out = BytesMut::new();
        let corr = header.correlation_id;
        match ApiKey::try_from(header.request_api_key) {
            Ok(ApiKey::ApiVersions) => {
                let keys = [
                    (ApiKey::Produce, ProduceRequest::VERSIONS),
                    (ApiKey::Fetch, FetchRequest::VERSIONS),
                    (ApiKey::ListOffsets, ListOffsetsRequest::VERSIONS),
                    (ApiKey::Metadata, MetadataRequest::VERSIONS),
                    (ApiKey::ApiVersions, ApiVersionsRequest::VERSIONS),
                    (ApiKey::CreateTopics, CreateTopicsRequest::VERSIONS),
                ];
                let r = ApiVersionsResponse::default().with_api_keys(
                    keys.iter()
                        .map(|(k, vr)| {
                            ApiVersion::default()
                                .with_api_key(*k as i16)
                                .with_min_version(vr.min)
                                .with_max_version(vr.max)
                        })
                        .collect(),
                );
                respond(&mut out, corr, v, &r)?;
            }
            Ok(ApiKey::Metadata) => {
                let req = MetadataRequest::decode(&mut buf, v)?;
                let st = state.lock().expect("not poisoned");
                let mut topics = Vec::new();
                for t in req.topics.unwrap_or_default() {
                    let name = t.name.clone().expect("named");
                    let mut mt = MetadataResponseTopic::default()
                        .with_name(Some(name.clone()))
                        .with_topic_id(topic_id(&name));
                    match st.topics.get(name.0.as_str()) {
                        None => mt.error_code = 3,
                        Some(logs) => {
                            mt.partitions = (0..logs.len() as i32)
                                .map(|p| {
                                    MetadataResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_leader_id(BrokerId(1))
                                        .with_replica_nodes(vec![BrokerId(1)])
                                        .with_isr_nodes(vec![BrokerId(1)])
                                })
                                .collect()
                        }
                    }
                    topics.push(mt);
                }
                let r = MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_string(addr.ip().to_string()))
                        .with_port(addr.port() as i32)])
                    .with_topics(topics);
                respond(&mut out, corr, v, &r)?;
            }
            Ok(ApiKey::CreateTopics) => {
                let req = CreateTopicsRequest::decode(&mut buf, v)?;
                let mut st = state.lock().expect("not poisoned");
                let mut results = Vec::new();
                for t in req.topics {
                    let code = if st.topics.contains_key(t.name.0.as_str()) {
                        36
                    } else {
                        0
                    };
                    let n = t.num_partitions.max(1) as usize;
                    st.topics
                        .entry(t.name.0.to_string())
                        .or_insert_with(|| (0..n).map(|_| Log::default()).collect());
                    results.push(
                        CreatableTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(code),
                    );
                }
                respond(
                    &mut out,
                    corr,
                    v,
                    &CreateTopicsResponse::default().with_topics(results),
                )?;
            }
            Ok(ApiKey::Produce) => {
                let req = ProduceRequest::decode(&mut buf, v)?;
                let mut st = state.lock().expect("not poisoned");
                let mut responses = Vec::new();
                for t in req.topic_data {
                    let mut parts = Vec::new();
                    for p in t.partition_data {
                        let mut pr = PartitionProduceResponse::default().with_index(p.index);
                        let log = st
                            .topics
                            .get_mut(t.name.0.as_str())
                            .and_then(|logs| logs.get_mut(p.index as usize));
                        match (log, p.records) {
                            (Some(log), Some(records)) => match append(log, &records) {
                                Ok(base) => pr.base_offset = base,
                                Err(_) => pr.error_code = 2,
                            },
                            _ => pr.error_code = 3,
                        }
                        parts.push(pr);
                    }
                    responses.push(
                        TopicProduceResponse::default()
                            .with_name(t.name)
                            .with_partition_responses(parts),
                    );
                }
                if req.acks == 0 {
                    continue;
                }
                respond(
                    &mut out,
                    corr,
                    v,
                    &ProduceResponse::default().with_responses(responses),
                )?;
            }
            Ok(ApiKey::ListOffsets) => {
                let req = ListOffsetsRequest::decode(&mut buf, v)?;
                let st = state.lock().expect("not poisoned");
                let mut topics = Vec::new();
                for t in req.topics {
                    let logs = st.topics.get(t.name.0.as_str());
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let r = ListOffsetsPartitionResponse::default()
                                .with_partition_index(p.partition_index);
                            match logs.and_then(|l| l.get(p.partition_index as usize)) {
                                None => r.with_error_code(3),
                                Some(log) => r.with_offset(if p.timestamp == -2 {
                                    0
                                } else {
                                    log.next_offset
                                }),
                            }
                        })
                        .collect();
                    topics.push(
                        ListOffsetsTopicResponse::default()
                            .with_name(t.name)
                            .with_partitions(parts),
                    );
                }
                respond(
                    &mut out,
                    corr,
                    v,
                    &ListOffsetsResponse::default().with_topics(topics),
                )?;
            }
            Ok(ApiKey::Fetch) => {
                let req = FetchRequest::decode(&mut buf, v)?;
                let deadline = std::time::Instant::now()
                    + std::time::Duration::from_millis(req.max_wait_ms.max(0) as u64);
                let responses = loop {
                    let st = state.lock().expect("not poisoned");
                    let mut any = false;
                    let mut responses = Vec::new();
                    for t in &req.topics {
                        // From v13 topics are named by id (KIP-516).
                        let name = if v >= 13 {
                            let named = st.topics.keys().find(|n| topic_id(n) == t.topic_id);
                            named.cloned().unwrap_or_default()
                        } else {
                            t.topic.0.to_string()
                        };
                        let logs = st.topics.get(name.as_str());
                        let mut parts = Vec::new();
                        for p in &t.partitions {
                            let mut pd = PartitionData::default().with_partition_index(p.partition);
                            match logs.and_then(|l| l.get(p.partition as usize)) {
                                None => pd.error_code = 3,
                                Some(log) => {
                                    pd.high_watermark = log.next_offset;
                                    let mut records = Vec::new();
                                    for (base, b) in &log.batches {
                                        let last = base
                                            + i32::from_be_bytes(
                                                b[23..27].try_into().expect("4 bytes"),
                                            ) as i64;
                                        if last >= p.fetch_offset
                                            && records.len() < p.partition_max_bytes as usize
                                        {
                                            records.extend_from_slice(b);
                                        }
                                    }
                                    any |= !records.is_empty();
                                    pd.records = Some(Bytes::from(records));
                                }
                            }
                            parts.push(pd);
                        }
                        responses.push(
                            FetchableTopicResponse::default()
                                .with_topic(t.topic.clone())
                                .with_topic_id(t.topic_id)
                                .with_partitions(parts),
                        );
                    }
                    if any || std::time::Instant::now() >= deadline {
                        break responses;
                    }
                    drop(st);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                };
                respond(
                    &mut out,
                    corr,
                    v,
                    &FetchResponse::default().with_responses(responses),
                )?;
            }
            _ => bail!("mock broker: unsupported API {}", header.request_api_key),
        }
        stream.write_all(&out)?;
    }
}

/// The mock's id of a topic: a hash of its name (FNV-1a), never nil.
fn topic_id(name: &str) -> uuid::Uuid {
    let hash = name
        .bytes()
        .fold(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d_u128, |h, b| {
            (h ^ u128::from(b)).wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b)
        });
    uuid::Uuid::from_u128(hash | 1)
}

fn append(log: &mut Log, records: &[u8]) -> Result<i64> {
    let base = log.next_offset;
    let mut at = 0;
    while at < records.len() {
        let b = &records[at..];
        let len = i32::from_be_bytes(b[8..12].try_into()?) as usize + 12;
        let want = u32::from_be_bytes(b[17..21].try_into()?);
        if crc32c::crc32c(&b[21..len]) != want {
            bail!("CRC");
        }
        let mut batch = b[..len].to_vec();
        batch[0..8].copy_from_slice(&log.next_offset.to_be_bytes());
        let count = i32::from_be_bytes(b[57..61].try_into()?) as i64;
        log.batches.push((log.next_offset, batch));
        log.next_offset += count;
        at += len;
    }
    Ok(base)
}

fn respond<R: Encodable + HeaderVersion>(
    out: &mut BytesMut,
    corr: i32,
    version: i16,
    response: &R,
) -> Result<()> {
    let mut body = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(corr)
        .encode(&mut body, R::header_version(version))?;
    response.encode(&mut body, version)?;
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(())
}
