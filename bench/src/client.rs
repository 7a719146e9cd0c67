//! A small Kafka client on glommio: framing, version negotiation, metadata, topic creation,
//! offsets and fetches. The produce hot path frames its own requests (`encode.rs`) and only
//! uses this module to connect and to decode responses.
//!
//! Invariants:
//! - Every frame read is length-checked against `FRAME_BYTES_MAX` before allocating.
//! - Responses on one connection arrive in request order (Kafka guarantees it); a response whose
//!   correlation id is not the oldest outstanding one is a protocol error, never skipped.
//! - API versions are the highest both sides support within `WANTED`; an API the broker does
//!   not offer in that range is an error naming the API.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    create_topics_request, fetch_request, list_offsets_request, metadata_request, ApiKey,
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest, DeleteTopicsRequest,
    FetchRequest, FetchResponse, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// Largest response frame accepted (a Fetch of many partitions stays well below this).
pub const FRAME_BYTES_MAX: usize = 256 * 1024 * 1024;
pub const CLIENT_ID: &str = "ringlog-bench";

/// (api, lowest, highest) versions this client can speak. Produce stops at 12 and Fetch at 12
/// because later versions name topics by id only; OffsetFetch stops at 7, before groups
/// became an array.
const WANTED: [(ApiKey, i16, i16); 15] = [
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 5),
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 1, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::InitProducerId, 0, 4),
];

/// Negotiated versions for one broker; -1 for an optional API the broker does not offer in
/// the wanted range (the call that needs it says so).
#[derive(Clone, Copy, Debug, Default)]
pub struct Versions {
    pub metadata: i16,
    pub create_topics: i16,
    pub delete_topics: i16,
    pub produce: i16,
    pub fetch: i16,
    pub list_offsets: i16,
    pub find_coordinator: i16,
    pub join_group: i16,
    pub sync_group: i16,
    pub heartbeat: i16,
    pub leave_group: i16,
    pub offset_fetch: i16,
    pub offset_commit: i16,
    pub init_producer_id: i16,
}

impl Versions {
    /// Picks the highest common version of each API in `WANTED`.
    pub fn negotiate(offered: &[(i16, i16, i16)]) -> Result<Versions> {
        let pick = |api: ApiKey| -> Result<i16> {
            let (_, lo, hi) = WANTED
                .iter()
                .find(|(k, _, _)| *k == api)
                .copied()
                .ok_or_else(|| anyhow!("{api:?} not wanted"))?;
            let (_, blo, bhi) = offered
                .iter()
                .find(|(k, _, _)| *k == api as i16)
                .copied()
                .ok_or_else(|| anyhow!("broker does not offer {api:?}"))?;
            let v = hi.min(bhi);
            if v < lo.max(blo) {
                bail!("no common {api:?} version: broker {blo}..={bhi}, bench {lo}..={hi}");
            }
            Ok(v)
        };
        let optional = |api: ApiKey| pick(api).unwrap_or(-1);
        Ok(Versions {
            metadata: pick(ApiKey::Metadata)?,
            create_topics: optional(ApiKey::CreateTopics),
            delete_topics: optional(ApiKey::DeleteTopics),
            produce: pick(ApiKey::Produce)?,
            fetch: optional(ApiKey::Fetch),
            list_offsets: optional(ApiKey::ListOffsets),
            find_coordinator: optional(ApiKey::FindCoordinator),
            join_group: optional(ApiKey::JoinGroup),
            sync_group: optional(ApiKey::SyncGroup),
            heartbeat: optional(ApiKey::Heartbeat),
            leave_group: optional(ApiKey::LeaveGroup),
            offset_fetch: optional(ApiKey::OffsetFetch),
            offset_commit: optional(ApiKey::OffsetCommit),
            init_producer_id: optional(ApiKey::InitProducerId),
        })
    }
}

/// Kafka's own spelling of an error code, e.g. 3 → `UNKNOWN_TOPIC_OR_PARTITION`.
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(c)) => format!("UNKNOWN_ERROR_CODE_{c}"),
        Some(e) => {
            let camel = format!("{e:?}");
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
    }
}

/// Appends a whole request frame (size prefix included) to `out`.
pub fn encode_request<R: Request>(
    out: &mut Vec<u8>,
    correlation_id: i32,
    version: i16,
    request: &R,
) -> Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    header.encode(out, R::header_version(version))?;
    request.encode(out, version)?;
    let size = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Splits a response frame body (no size prefix) into its correlation id and message.
pub fn decode_response<R: Request>(frame: Bytes, version: i16) -> Result<(i32, R::Response)> {
    let mut body = frame;
    let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))?;
    let response = R::Response::decode(&mut body, version)
        .with_context(|| format!("decoding {:?} v{version} response", R::KEY))?;
    Ok((header.correlation_id, response))
}

/// Reads one frame body into `buf`, which it resizes to the frame: only growth is
/// zero-filled, since the read overwrites every byte.
pub async fn read_frame<S: futures_lite::AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .await
        .context("reading frame size")?;
    let size = i32::from_be_bytes(size);
    if size < 4 || size as usize > FRAME_BYTES_MAX {
        bail!("bad frame size {size}");
    }
    buf.resize(size as usize, 0);
    stream.read_exact(buf).await.context("reading frame body")?;
    Ok(())
}

pub fn correlation_id_of(frame: &[u8]) -> i32 {
    i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]])
}

/// One partition's leader.
#[derive(Clone, Debug)]
pub struct PartitionLeader {
    pub partition: i32,
    pub leader: SocketAddr,
}

/// How to create a topic the bench needs and does not find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSpec {
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic-level settings, Kafka's names (`retention.bytes`, `segment.bytes`, ...).
    pub configs: Vec<(String, String)>,
}

/// A request-at-a-time connection, for admin calls and fetches.
pub struct Connection {
    pub stream: TcpStream,
    pub versions: Versions,
    correlation_id: i32,
    out: Vec<u8>,
    frame: Vec<u8>,
    /// The last answer's frame; its buffer is read into again once nothing else holds it
    /// (a Fetch answer's records are slices of it).
    last_frame: Bytes,
}

pub async fn resolve(addr: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .ok_or_else(|| anyhow!("{addr} resolves to nothing"))
}

impl Connection {
    pub async fn connect(addr: SocketAddr) -> Result<Connection> {
        let stream = TcpStream::connect_timeout(addr, Duration::from_secs(10))
            .await
            .map_err(|e| anyhow!("connecting to {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| anyhow!("TCP_NODELAY: {e}"))?;
        let mut conn = Connection {
            stream,
            versions: Versions::default(),
            correlation_id: 0,
            out: Vec::with_capacity(4096),
            frame: Vec::with_capacity(4096),
            last_frame: Bytes::new(),
        };
        conn.versions = conn.api_versions().await?;
        Ok(conn)
    }

    /// Takes the last answer's buffer back when the caller has dropped the answer, so that
    /// reading the next frame neither allocates nor zero-fills what the last one covered.
    fn reclaim_frame(&mut self) {
        if self.frame.capacity() > 0 {
            return;
        }
        if let Ok(buffer) = std::mem::take(&mut self.last_frame).try_into_mut() {
            self.frame = Vec::from(buffer);
        }
    }

    pub fn next_correlation_id(&mut self) -> i32 {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        self.correlation_id
    }

    /// Sends `request` and waits for its response.
    pub async fn call<R: Request>(&mut self, version: i16, request: &R) -> Result<R::Response> {
        let corr = self.next_correlation_id();
        self.out.clear();
        encode_request(&mut self.out, corr, version, request)?;
        self.stream.write_all(&self.out).await?;
        self.reclaim_frame();
        read_frame(&mut self.stream, &mut self.frame).await?;
        // Hand the frame to the decoder without copying; fetched records stay slices of it.
        let frame = Bytes::from(std::mem::take(&mut self.frame));
        self.last_frame = frame.clone();
        let (got, response) = decode_response::<R>(frame, version)?;
        if got != corr {
            bail!("correlation id {got}, expected {corr}");
        }
        Ok(response)
    }

    async fn api_versions(&mut self) -> Result<Versions> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = self.call(3, &request).await?;
        if response.error_code == 35 {
            // UNSUPPORTED_VERSION: the broker answers in v0 with its own range; retry at v0.
            response = self.call(0, &ApiVersionsRequest::default()).await?;
        }
        if response.error_code != 0 {
            bail!("ApiVersions: {}", error_name(response.error_code));
        }
        let offered: Vec<(i16, i16, i16)> = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        Versions::negotiate(&offered)
    }

    /// Partition leaders of `topic`, or None when the topic does not exist.
    pub async fn leaders(&mut self, topic: &str) -> Result<Option<Vec<PartitionLeader>>> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
            )
            .with_name(Some(topic_name(topic)))]))
            .with_allow_auto_topic_creation(false);
        let response = self.call(self.versions.metadata, &request).await?;
        let brokers: BTreeMap<i32, (String, i32)> = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, (b.host.to_string(), b.port)))
            .collect();
        let Some(t) = response.topics.first() else {
            bail!("Metadata response without topics");
        };
        if t.error_code == 3 {
            return Ok(None);
        }
        if t.error_code != 0 {
            bail!("Metadata for {topic}: {}", error_name(t.error_code));
        }
        let mut leaders = Vec::new();
        for p in &t.partitions {
            if p.error_code != 0 {
                bail!(
                    "Metadata {topic}/{}: {}",
                    p.partition_index,
                    error_name(p.error_code)
                );
            }
            let (host, port) = brokers
                .get(&p.leader_id.0)
                .ok_or_else(|| anyhow!("leader {} of {topic} not in brokers", p.leader_id.0))?;
            let leader = resolve(&format!("{host}:{port}")).await?;
            leaders.push(PartitionLeader {
                partition: p.partition_index,
                leader,
            });
        }
        leaders.sort_by_key(|l| l.partition);
        if leaders.is_empty() {
            return Ok(None);
        }
        Ok(Some(leaders))
    }

    /// A producer id and epoch for an idempotent producer (InitProducerId, no transactional
    /// id).
    pub async fn init_producer_id(&mut self) -> Result<(i64, i16)> {
        if self.versions.init_producer_id < 0 {
            bail!("the broker does not offer InitProducerId: no idempotent producers");
        }
        let request = InitProducerIdRequest::default()
            // Null, not the codec's default of "": an empty transactional id is refused.
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        let response = self.call(self.versions.init_producer_id, &request).await?;
        if response.error_code != 0 {
            bail!("InitProducerId: {}", error_name(response.error_code));
        }
        Ok((response.producer_id.0, response.producer_epoch))
    }

    pub async fn create_topic(&mut self, topic: &str, spec: &TopicSpec) -> Result<()> {
        if self.versions.create_topics < 0 {
            bail!("broker offers no CreateTopics version this bench speaks");
        }
        let configs = spec
            .configs
            .iter()
            .map(|(key, value)| {
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(key.clone()))
                    .with_value(Some(StrBytes::from_string(value.clone())))
            })
            .collect();
        let request = CreateTopicsRequest::default()
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(topic_name(topic))
                .with_num_partitions(spec.partitions)
                .with_replication_factor(spec.replication_factor)
                .with_configs(configs)])
            .with_timeout_ms(30_000);
        let response = self.call(self.versions.create_topics, &request).await?;
        for t in &response.topics {
            // TOPIC_ALREADY_EXISTS (36): another producer raced us; fine.
            if t.error_code != 0 && t.error_code != 36 {
                bail!(
                    "CreateTopics {topic}: {} {}",
                    error_name(t.error_code),
                    t.error_message.as_deref().unwrap_or("")
                );
            }
        }
        Ok(())
    }

    /// Deletes `topic` and its data; a topic that is already gone is not an error.
    pub async fn delete_topic(&mut self, topic: &str) -> Result<()> {
        if self.versions.delete_topics < 0 {
            bail!("broker offers no DeleteTopics version this bench speaks");
        }
        let request = DeleteTopicsRequest::default()
            .with_topic_names(vec![topic_name(topic)])
            .with_timeout_ms(30_000);
        let response = self.call(self.versions.delete_topics, &request).await?;
        for t in &response.responses {
            // UNKNOWN_TOPIC_OR_PARTITION (3): nothing left to delete.
            if t.error_code != 0 && t.error_code != 3 {
                bail!("DeleteTopics {topic}: {}", error_name(t.error_code));
            }
        }
        Ok(())
    }

    /// Finds the leaders of `topic`, creating it as `spec` says when missing.
    pub async fn ensure_topic(
        &mut self,
        topic: &str,
        spec: &TopicSpec,
    ) -> Result<Vec<PartitionLeader>> {
        if let Some(leaders) = self.leaders(topic).await? {
            return Ok(leaders);
        }
        self.create_topic(topic, spec).await?;
        let partitions = spec.partitions;
        // Leaders can take a moment to be elected after creation.
        for _ in 0..100 {
            if let Some(leaders) = self.leaders(topic).await? {
                if leaders.len() as i32 >= partitions {
                    return Ok(leaders);
                }
            }
            glommio::timer::sleep(Duration::from_millis(50)).await;
        }
        bail!("topic {topic} has no leaders 5 s after creation")
    }

    /// Offsets of `partitions` at `timestamp` (-1 latest, -2 earliest).
    pub async fn list_offsets(
        &mut self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<Vec<(i32, i64)>> {
        if self.versions.list_offsets < 0 {
            bail!("broker offers no ListOffsets version this bench speaks");
        }
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            list_offsets_request::ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )]);
        let response = self.call(self.versions.list_offsets, &request).await?;
        let mut out = Vec::new();
        for t in &response.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    bail!(
                        "ListOffsets {topic}/{}: {}",
                        p.partition_index,
                        error_name(p.error_code)
                    );
                }
                out.push((p.partition_index, p.offset));
            }
        }
        out.sort();
        Ok(out)
    }

    /// One Fetch of `topic` at the given (partition, offset) positions.
    pub async fn fetch(
        &mut self,
        topic: &str,
        positions: &[(i32, i64)],
        max_wait_ms: i32,
        partition_bytes_max: i32,
    ) -> Result<FetchResponse> {
        if self.versions.fetch < 0 {
            bail!("broker offers no Fetch version this bench speaks");
        }
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(64 * 1024 * 1024)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(
                    positions
                        .iter()
                        .map(|&(p, offset)| {
                            fetch_request::FetchPartition::default()
                                .with_partition(p)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(offset)
                                .with_last_fetched_epoch(-1)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(partition_bytes_max)
                        })
                        .collect(),
                )]);
        self.call(self.versions.fetch, &request).await
    }
}

pub fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Records and bytes in a fetched record set, by v2 batch headers only (no record decoding).
/// Returns (records, bytes, next offset); a trailing partial batch is ignored as Kafka allows.
pub fn count_batches(records: &[u8], verify_crc: bool) -> Result<(u64, u64, Option<i64>)> {
    let mut at = 0;
    let (mut count, mut bytes, mut next) = (0u64, 0u64, None);
    while records.len() - at >= 61 {
        let b = &records[at..];
        let base_offset = i64::from_be_bytes(b[0..8].try_into()?);
        let len = i32::from_be_bytes(b[8..12].try_into()?) as usize + 12;
        if len > b.len() {
            break;
        }
        if b[16] != 2 {
            bail!("record batch magic {} at offset {base_offset}", b[16]);
        }
        if verify_crc {
            let want = u32::from_be_bytes(b[17..21].try_into()?);
            if crc32c::crc32c(&b[21..len]) != want {
                bail!("CRC mismatch in batch at offset {base_offset}");
            }
        }
        let last_delta = i32::from_be_bytes(b[23..27].try_into()?);
        let n = i32::from_be_bytes(b[57..61].try_into()?);
        let control = i16::from_be_bytes(b[21..23].try_into()?) & (1 << 5) != 0;
        if !control {
            count += n as u64;
            bytes += len as u64;
        }
        next = Some(base_offset + last_delta as i64 + 1);
        at += len;
    }
    Ok((count, bytes, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{fill_batch, BatchBuilder, Compression, PayloadPool};
    use kafka_protocol::messages::{MetadataResponse, ProduceRequest};

    #[test]
    fn answers_are_read_into_the_last_answers_buffer_once_it_is_free() {
        let _executors = crate::cores::executor_test_lock();
        let broker = crate::mock::MockBroker::start();
        let addr = broker.addr;
        crate::cores::run_local(async move {
            let mut conn = Connection::connect(addr).await.expect("connects");
            let first = conn.leaders("t").await.expect("metadata");
            let buffer = conn.last_frame.as_ptr();
            drop(first);
            conn.leaders("t").await.expect("metadata");
            assert_eq!(conn.last_frame.as_ptr(), buffer, "the buffer came back");
            // While an answer is alive, its buffer is not reused.
            let held = conn.last_frame.clone();
            conn.leaders("t").await.expect("metadata");
            assert_ne!(conn.last_frame.as_ptr(), held.as_ptr());
        })
        .expect("runs");
    }

    #[test]
    fn error_names_are_kafka_spelling() {
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(19), "NOT_ENOUGH_REPLICAS");
        assert_eq!(error_name(9999), "UNKNOWN_ERROR_CODE_9999");
    }

    #[test]
    fn negotiation_picks_highest_common() {
        let offered = [
            (18, 0, 4),
            (3, 0, 9),
            (19, 2, 7),
            (0, 3, 11),
            (1, 4, 17),
            (2, 0, 9),
        ];
        let v = Versions::negotiate(&offered).expect("negotiates");
        assert_eq!(
            (v.metadata, v.produce, v.fetch, v.list_offsets),
            (9, 11, 12, 7)
        );
        assert_eq!((v.join_group, v.offset_fetch), (-1, -1), "not offered");
        assert!(
            Versions::negotiate(&[(18, 0, 4), (3, 0, 9)]).is_err(),
            "no Produce"
        );
        assert!(
            Versions::negotiate(&[(3, 0, 9), (0, 13, 13)]).is_err(),
            "only v13 Produce"
        );
    }

    #[test]
    fn request_frames_roundtrip() {
        let request = ProduceRequest::default().with_acks(1).with_timeout_ms(5);
        let mut out = Vec::new();
        encode_request(&mut out, 9, 9, &request).expect("encodes");
        let size = i32::from_be_bytes(out[0..4].try_into().expect("4 bytes")) as usize;
        assert_eq!(size, out.len() - 4);
        let mut body = Bytes::copy_from_slice(&out[4..]);
        let header = RequestHeader::decode(&mut body, 2).expect("header");
        assert_eq!((header.request_api_key, header.correlation_id), (0, 9));
        let back = ProduceRequest::decode(&mut body, 9).expect("body");
        assert_eq!(back.acks, 1);

        let response = MetadataResponse::default();
        let mut frame = Vec::new();
        ResponseHeader::default()
            .with_correlation_id(41)
            .encode(&mut frame, 1)
            .expect("h");
        response.encode(&mut frame, 9).expect("encodes");
        let (corr, _) = decode_response::<MetadataRequest>(Bytes::from(frame), 9).expect("decodes");
        assert_eq!(corr, 41);
    }

    #[test]
    fn count_batches_reads_headers_and_crc() {
        let mut pool = PayloadPool::new(100, false, 1);
        let mut builder = BatchBuilder::new(4096, Compression::None);
        let mut log = Vec::new();
        let mut total = 0;
        for base in [0i64, 10, 20] {
            builder.reset(0);
            let n = fill_batch(&mut builder, &mut pool, 10);
            total += n;
            let mut batch = builder.finish().to_vec();
            batch[0..8].copy_from_slice(&base.to_be_bytes());
            log.extend_from_slice(&batch);
        }
        let full = log.len();
        log.extend_from_slice(&[0; 30]); // partial trailing batch
        let (count, bytes, next) = count_batches(&log, true).expect("counts");
        assert_eq!((count, bytes as usize, next), (total, full, Some(30)));
        log[100] ^= 1;
        assert!(count_batches(&log, true).is_err());
    }
}
