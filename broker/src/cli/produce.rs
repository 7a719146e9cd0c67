//! `ringlog produce TOPIC`: kafka-console-producer. Lines from stdin become records (with
//! `--key-separator`, `key SEP value`), partitioned like the Java client, gathered into one
//! v2 batch per partition and sent to each partition's leader.
//!
//! Invariants:
//! - Lines are slices of the chunk stdin was read into (`Bytes::slice`): a record's key and
//!   value are never copied, and the per-partition record vectors are reused across sends.
//! - A batch is sent when stdin has nothing more ready (so an interactive line goes out at
//!   once) or when a partition holds [`BATCH_BYTES_MAX`]; with acks 1 or all the command
//!   waits for every answer and fails on the first error, named as Kafka names it.
//! - Retriable errors (leader moved, not yet available, a lost connection) are retried after
//!   refreshing the topic's metadata, at most [`ATTEMPTS_MAX`] times per send.
//! - Idempotent by default, as Kafka's console producer is: with acks=all the command takes
//!   a producer id (InitProducerId) and numbers each partition's records from 0, so a batch
//!   resent after a lost answer is stored once; `--no-idempotence`, acks 0 or 1, or a broker
//!   without InitProducerId send plain batches.

use std::io::Read;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use client::admin::{self, ProducerIdentity};
use client::blocking::Cluster;
use client::error::codes;
use client::{check, code_of, topic_name, TopicInfo};

use super::partitioner::Partitioner;
use super::topic::parse_setting;
use super::Connect;

/// Bytes of keys and values one partition gathers before its batch is sent.
pub const BATCH_BYTES_MAX: usize = 512 * 1024;
/// Sends of one batch before a retriable error is given up on.
pub const ATTEMPTS_MAX: u32 = 5;
/// Bytes read from stdin at a time.
const CHUNK_BYTES: usize = 64 * 1024;
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub connect: Connect,
    pub topic: String,
    /// Split each line into key and value at the first occurrence of SEP.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// 0 (no answer), 1 (leader has it) or all (every in-sync replica has it). Idempotence
    /// needs all: with 0 or 1 records are sent without it, as Kafka's producer does.
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: i16,
    /// Send plain batches, without a producer id and sequence numbers: a batch resent after
    /// a lost answer may then be stored twice.
    #[arg(long)]
    pub no_idempotence: bool,
    /// A header added to every record (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE")]
    pub header: Vec<String>,
    /// Send every record to this partition.
    #[arg(long)]
    pub partition: Option<i32>,
}

pub fn parse_acks(acks: &str) -> Result<i16, String> {
    match acks {
        "0" => Ok(0),
        "1" => Ok(1),
        "all" | "-1" => Ok(-1),
        other => Err(format!("acks must be 0, 1 or all, not {other:?}")),
    }
}

/// Splits `line` into (key, value) at the first `separator`; `None` when it is absent.
pub fn split_line(line: &Bytes, separator: &[u8]) -> Option<(Bytes, Bytes)> {
    if separator.is_empty() {
        return None;
    }
    let at = line
        .windows(separator.len())
        .position(|window| window == separator)?;
    Some((line.slice(..at), line.slice(at + separator.len()..)))
}

/// Reads `input` on its own thread and hands over chunks that end at a line end (or at
/// end of input), so the producer never waits on a half line.
fn spawn_reader(mut input: impl Read + Send + 'static) -> mpsc::Receiver<std::io::Result<Bytes>> {
    let (sender, receiver) = mpsc::sync_channel(16);
    std::thread::spawn(move || {
        let mut buffer = BytesMut::with_capacity(CHUNK_BYTES);
        loop {
            let filled = buffer.len();
            buffer.resize(filled + CHUNK_BYTES, 0);
            let read = match input.read(&mut buffer[filled..]) {
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(error) => {
                    let _ = sender.send(Err(error));
                    return;
                }
            };
            buffer.truncate(filled + read);
            if read == 0 && buffer.is_empty() {
                return;
            }
            let cut = if read == 0 {
                buffer.len()
            } else {
                match buffer.iter().rposition(|b| *b == b'\n') {
                    Some(newline) => newline + 1,
                    None => continue,
                }
            };
            if sender.send(Ok(buffer.split_to(cut).freeze())).is_err() || read == 0 {
                return;
            }
        }
    });
    receiver
}

/// Records gathered per partition, waiting to be sent.
struct Pending {
    records: Vec<Vec<Record>>,
    bytes: Vec<usize>,
}

pub fn run(args: ProduceArgs, input: impl Read + Send + 'static) -> Result<u64> {
    let mut cluster = args.connect.cluster()?;
    let topic = cluster.topic(&args.topic)?;
    let partitions = topic.partitions.len() as u32;
    if partitions == 0 {
        bail!("topic {} has no partitions", args.topic);
    }
    let fixed = match args.partition {
        Some(p) if p < 0 || p as u32 >= partitions => {
            bail!(
                "partition {p} does not exist: {} has {partitions}",
                args.topic
            )
        }
        Some(p) => Some(p as u32),
        None => None,
    };
    let mut headers: IndexMap<StrBytes, Option<Bytes>> = IndexMap::new();
    for header in &args.header {
        let (key, value) = parse_setting(header)?;
        headers.insert(
            StrBytes::from_string(key.to_string()),
            Some(Bytes::copy_from_slice(value.as_bytes())),
        );
    }
    let separator = args.key_separator.as_deref().map(str::as_bytes);
    let mut partitioner = Partitioner::new(partitions, fixed);
    let idempotent = if !args.no_idempotence && args.acks == -1 {
        init_producer_id(&mut cluster)?
    } else {
        None
    };
    let mut sender = Sender {
        cluster,
        topic,
        acks: args.acks,
        encoded: BytesMut::with_capacity(BATCH_BYTES_MAX),
        idempotent,
        next_sequences: vec![0; partitions as usize],
    };
    let mut pending = Pending {
        records: (0..partitions).map(|_| Vec::new()).collect(),
        bytes: vec![0; partitions as usize],
    };
    let chunks = spawn_reader(input);
    let mut line_number = 0u64;
    let mut produced = 0u64;
    let mut add_chunk = |chunk: Bytes, pending: &mut Pending, sender: &mut Sender| -> Result<()> {
        let now_ms = now_ms();
        let mut start = 0;
        while start < chunk.len() {
            let end = chunk[start..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(chunk.len(), |at| start + at);
            let mut line = chunk.slice(start..end);
            start = end + 1;
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            line_number += 1;
            let (key, value) = match separator {
                None => (None, line),
                Some(separator) => match split_line(&line, separator) {
                    Some((key, value)) => (Some(key), value),
                    None => bail!(
                        "No key separator found on line number {line_number}: '{}'",
                        String::from_utf8_lossy(&line)
                    ),
                },
            };
            let partition = partitioner.pick(key.as_deref()) as usize;
            let records = &mut pending.records[partition];
            let offset = records.len() as i64;
            pending.bytes[partition] += key.as_ref().map_or(0, Bytes::len) + value.len();
            records.push(Record {
                transactional: false,
                control: false,
                partition_leader_epoch: -1,
                delete_horizon: false,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset,
                // The encoder starts a new batch whenever offset - sequence changes, and
                // takes the base sequence from the first record: offset - 1 keeps one batch
                // with base sequence -1 (no idempotence).
                sequence: offset as i32 - 1,
                timestamp: now_ms,
                key,
                value: Some(value),
                headers: headers.clone(),
            });
            produced += 1;
            if pending.bytes[partition] >= BATCH_BYTES_MAX {
                sender.send(pending)?;
            }
        }
        Ok(())
    };
    loop {
        let chunk = match chunks.recv() {
            Ok(chunk) => chunk?,
            Err(mpsc::RecvError) => break,
        };
        let mut result = add_chunk(chunk, &mut pending, &mut sender);
        while result.is_ok() {
            match chunks.try_recv() {
                Ok(chunk) => {
                    result = chunk
                        .map_err(Into::into)
                        .and_then(|chunk| add_chunk(chunk, &mut pending, &mut sender))
                }
                Err(_) => break,
            }
        }
        // What was read before a bad line is still sent, as kafka-console-producer does.
        sender.send(&mut pending)?;
        result?;
    }
    sender.send(&mut pending)?;
    Ok(produced)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A producer id from the bootstrap broker; `None` (plain batches) when it does not offer
/// InitProducerId.
fn init_producer_id(cluster: &mut Cluster) -> Result<Option<ProducerIdentity>> {
    let identity = cluster
        .any()
        .run(async |connection| admin::init_producer_id(connection).await)?;
    if identity.is_none() {
        tracing::warn!("the broker offers no InitProducerId: producing without idempotence");
    }
    Ok(identity)
}

struct Sender {
    cluster: Cluster,
    topic: TopicInfo,
    acks: i16,
    encoded: BytesMut,
    idempotent: Option<ProducerIdentity>,
    /// Per partition, the sequence number of the next record (idempotent only).
    next_sequences: Vec<i32>,
}

impl Sender {
    /// Sends every partition's pending records, one request per leader, and empties them.
    fn send(&mut self, pending: &mut Pending) -> Result<()> {
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        let mut batches: Vec<(i32, Bytes)> = Vec::new();
        for (partition, records) in pending.records.iter_mut().enumerate() {
            if records.is_empty() {
                continue;
            }
            if let Some(producer) = self.idempotent {
                let base_sequence = self.next_sequences[partition];
                for record in records.iter_mut() {
                    record.producer_id = producer.id;
                    record.producer_epoch = producer.epoch;
                    // The encoder keeps one batch while offset - sequence stays the same and
                    // takes the first record's sequence as the batch's base sequence.
                    record.sequence = base_sequence.wrapping_add(record.offset as i32);
                }
                self.next_sequences[partition] =
                    net::sequence::sequence_after(base_sequence, records.len() as u64);
            }
            RecordBatchEncoder::encode(&mut self.encoded, records.iter(), &options)?;
            batches.push((partition as i32, self.encoded.split().freeze()));
            records.clear();
            pending.bytes[partition] = 0;
        }
        let mut attempt = 1;
        while !batches.is_empty() {
            match self.send_batches(&batches) {
                Ok(()) => return Ok(()),
                Err((failed, error)) => {
                    // A lost connection may have lost only the answer: resending is safe
                    // when the broker recognises the batch (idempotence), not otherwise.
                    let retriable = match code_of(&error) {
                        Some(code) => {
                            ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
                        }
                        None => self.idempotent.is_some(),
                    };
                    if !retriable || attempt >= ATTEMPTS_MAX {
                        return Err(error);
                    }
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(100 * attempt as u64));
                    self.topic = self.cluster.topic(&self.topic.name)?;
                    batches.retain(|(partition, _)| failed.contains(partition));
                }
            }
        }
        Ok(())
    }

    /// Sends `batches` grouped by leader; on failure, the partitions that did not succeed
    /// and the first error.
    fn send_batches(&mut self, batches: &[(i32, Bytes)]) -> Result<(), (Vec<i32>, anyhow::Error)> {
        let mut leaders: Vec<i32> = batches
            .iter()
            .map(|(partition, _)| self.leader(*partition))
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        let mut failed = Vec::new();
        let mut first_error = None;
        for leader in leaders {
            let partition_data: Vec<PartitionProduceData> = batches
                .iter()
                .filter(|(partition, _)| self.leader(*partition) == leader)
                .map(|(partition, records)| {
                    PartitionProduceData::default()
                        .with_index(*partition)
                        .with_records(Some(records.clone()))
                })
                .collect();
            let sent: Vec<i32> = partition_data.iter().map(|p| p.index).collect();
            let outcome = if leader < 0 {
                let what = || format!("produce to {}", self.topic.name);
                // Retriable: the metadata refresh may find one.
                check(codes::LEADER_NOT_AVAILABLE, None, what).map_err(|error| (sent, error))
            } else {
                let request = ProduceRequest::default()
                    .with_acks(self.acks)
                    .with_timeout_ms(PRODUCE_TIMEOUT_MS)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(topic_name(&self.topic.name))
                        .with_partition_data(partition_data)]);
                self.send_one(leader, &request, sent)
            };
            if let Err((partitions, error)) = outcome {
                failed.extend(partitions);
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            None => Ok(()),
            Some(error) => Err((failed, error)),
        }
    }

    fn leader(&self, partition: i32) -> i32 {
        self.topic.leader(partition)
    }

    fn send_one(
        &mut self,
        leader: i32,
        request: &ProduceRequest,
        sent: Vec<i32>,
    ) -> Result<(), (Vec<i32>, anyhow::Error)> {
        let acks = self.acks;
        let answer = self.cluster.broker(leader).and_then(|mut connection| {
            connection.run(async |connection| {
                let version = connection.version::<ProduceRequest>()?;
                if acks == 0 {
                    connection.send_at(version, request).await?;
                    return Ok(None);
                }
                connection.call_at(version, request).await.map(Some)
            })
        });
        let response = match answer {
            Ok(Some(response)) => response,
            Ok(None) => return Ok(()),
            Err(error) => {
                // The connection may be broken mid-frame; reconnect on next use.
                self.cluster.forget(leader);
                return Err((sent, error));
            }
        };
        let mut failed = Vec::new();
        let mut first_error = None;
        for topic in &response.responses {
            for partition in &topic.partition_responses {
                let what = || format!("produce to {}-{}", self.topic.name, partition.index);
                if let Err(error) =
                    check(partition.error_code, partition.error_message.as_ref(), what)
                {
                    failed.push(partition.index);
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            None => Ok(()),
            Some(error) => Err((failed, error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_separator() {
        let line = Bytes::from_static(b"user1:order:A");
        let (key, value) = split_line(&line, b":").unwrap();
        assert_eq!((&key[..], &value[..]), (&b"user1"[..], &b"order:A"[..]));
        let (key, value) = split_line(&Bytes::from_static(b"k::v"), b"::").unwrap();
        assert_eq!((&key[..], &value[..]), (&b"k"[..], &b"v"[..]));
        let (key, value) = split_line(&Bytes::from_static(b":v"), b":").unwrap();
        assert_eq!((&key[..], &value[..]), (&b""[..], &b"v"[..]));
        assert!(split_line(&Bytes::from_static(b"no separator"), b":").is_none());
        assert!(split_line(&Bytes::from_static(b"a:b"), b"").is_none());
    }

    #[test]
    fn acks_take_kafka_spellings() {
        assert_eq!(parse_acks("0"), Ok(0));
        assert_eq!(parse_acks("1"), Ok(1));
        assert_eq!(parse_acks("all"), Ok(-1));
        assert_eq!(parse_acks("-1"), Ok(-1));
        assert!(parse_acks("2").is_err());
    }

    #[test]
    fn reader_hands_over_whole_lines() {
        let input = std::io::Cursor::new(b"a\nbb\nccc".to_vec());
        let chunks: Vec<Bytes> = spawn_reader(input).iter().map(|c| c.unwrap()).collect();
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(all, b"a\nbb\nccc");
        for chunk in &chunks[..chunks.len() - 1] {
            assert_eq!(chunk.last(), Some(&b'\n'));
        }
    }

    #[test]
    fn one_batch_per_partition_send() {
        let records: Vec<Record> = (0..3)
            .map(|offset| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: -1,
                delete_horizon: false,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset,
                sequence: offset as i32 - 1,
                timestamp: 1,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: Default::default(),
            })
            .collect();
        let mut encoded = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut encoded, records.iter(), &options).unwrap();
        let mut encoded = encoded.freeze();
        let batches =
            kafka_protocol::records::RecordBatchDecoder::decode_batch_info(&mut encoded).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].record_count, 3);
        assert_eq!(batches[0].base_sequence, -1);
    }

    mod scripted {
        //! The producer against a scripted broker: retry after a leader move, fail by name.

        use std::sync::{Arc, Mutex};

        use kafka_protocol::messages::metadata_response::{
            MetadataResponsePartition, MetadataResponseTopic,
        };
        use kafka_protocol::messages::produce_response::{
            PartitionProduceResponse, TopicProduceResponse,
        };
        use kafka_protocol::messages::*;
        use kafka_protocol::records::RecordBatchDecoder;

        use super::super::*;
        use crate::cli::partitioner::partition_for_key;
        use client::fake_broker::{api_versions, broker_entry, FakeBroker};

        const RANGES: &[(ApiKey, i16, i16)] = &[
            (ApiKey::ApiVersions, 0, 3),
            (ApiKey::Metadata, 1, 12),
            (ApiKey::Produce, 3, 11),
        ];
        const IDEMPOTENT_RANGES: &[(ApiKey, i16, i16)] = &[
            (ApiKey::ApiVersions, 0, 3),
            (ApiKey::Metadata, 1, 12),
            (ApiKey::Produce, 3, 11),
            (ApiKey::InitProducerId, 0, 4),
        ];
        const PRODUCER_ID: i64 = 4242;

        /// (partition, key, value) of every record the broker accepted.
        type Accepted = Arc<Mutex<Vec<(i32, String, String)>>>;
        /// (partition, producer id, producer epoch, base sequence) of every batch received,
        /// refused ones included.
        type Batches = Arc<Mutex<Vec<(i32, i64, i16, i32)>>>;

        struct Scripted {
            fake: FakeBroker,
            accepted: Accepted,
            batches: Batches,
        }

        /// A broker offering `ranges` with topic `t` of two partitions whose Produce answers
        /// are `errors`, in turn, then 0; each accepted Produce is reported on `produced`.
        fn scripted(
            ranges: &'static [(ApiKey, i16, i16)],
            errors: Vec<i16>,
            produced: Option<std::sync::mpsc::Sender<()>>,
        ) -> Scripted {
            let accepted: Accepted = Default::default();
            let accepted_by_fake = accepted.clone();
            let batches: Batches = Default::default();
            let batches_by_fake = batches.clone();
            let mut errors = errors.into_iter();
            let fake = FakeBroker::start(Box::new(move |request, _version, port| match request {
                RequestKind::ApiVersions(_) => api_versions(ranges),
                RequestKind::InitProducerId(request) => {
                    assert!(request.transactional_id.is_none());
                    ResponseKind::InitProducerId(
                        InitProducerIdResponse::default()
                            .with_producer_id(ProducerId(PRODUCER_ID))
                            .with_producer_epoch(0),
                    )
                }
                RequestKind::Metadata(request) => {
                    let topics = request.topics.unwrap_or_default().into_iter().map(|t| {
                        MetadataResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                (0..2)
                                    .map(|p| {
                                        MetadataResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_leader_id(BrokerId(1))
                                    })
                                    .collect(),
                            )
                    });
                    ResponseKind::Metadata(
                        MetadataResponse::default()
                            .with_brokers(vec![broker_entry(port)])
                            .with_topics(topics.collect()),
                    )
                }
                RequestKind::Produce(request) => {
                    let error = errors.next().unwrap_or(0);
                    let mut topics = Vec::new();
                    for topic in request.topic_data {
                        let mut partitions = Vec::new();
                        for data in topic.partition_data {
                            let mut header = data.records.clone().unwrap_or_default();
                            let info = RecordBatchDecoder::decode_batch_info(&mut header).unwrap();
                            batches_by_fake.lock().unwrap().push((
                                data.index,
                                info[0].producer_id,
                                info[0].producer_epoch,
                                info[0].base_sequence,
                            ));
                            if error == 0 {
                                let mut records = data.records.clone().unwrap_or_default();
                                let set = RecordBatchDecoder::decode(&mut records).unwrap();
                                let mut accepted = accepted_by_fake.lock().unwrap();
                                for record in set.records {
                                    let text = |b: Option<Bytes>| {
                                        String::from_utf8(b.unwrap_or_default().to_vec()).unwrap()
                                    };
                                    accepted.push((
                                        data.index,
                                        text(record.key),
                                        text(record.value),
                                    ));
                                }
                            }
                            partitions.push(
                                PartitionProduceResponse::default()
                                    .with_index(data.index)
                                    .with_error_code(error),
                            );
                        }
                        topics.push(
                            TopicProduceResponse::default()
                                .with_name(topic.name)
                                .with_partition_responses(partitions),
                        );
                    }
                    if let (0, Some(produced)) = (error, &produced) {
                        let _ = produced.send(());
                    }
                    ResponseKind::Produce(ProduceResponse::default().with_responses(topics))
                }
                other => panic!("the scripted broker does not answer {other:?}"),
            }));
            Scripted {
                fake,
                accepted,
                batches,
            }
        }

        fn broker(errors: Vec<i16>) -> (FakeBroker, Accepted) {
            let scripted = scripted(RANGES, errors, None);
            (scripted.fake, scripted.accepted)
        }

        fn args(fake: &FakeBroker) -> ProduceArgs {
            ProduceArgs {
                connect: Connect {
                    bootstrap_server: fake.address(),
                },
                topic: "t".into(),
                key_separator: Some(":".into()),
                acks: -1,
                no_idempotence: false,
                header: Vec::new(),
                partition: None,
            }
        }

        #[test]
        fn a_moved_leader_is_retried_and_keys_pick_partitions() {
            let (fake, accepted) = broker(vec![6]);
            let input = std::io::Cursor::new(b"a:1\nb:2\na:3\n".to_vec());
            assert_eq!(run(args(&fake), input).unwrap(), 3);
            assert_eq!(fake.seen(ApiKey::Produce), [11, 11], "one retry");
            let accepted = accepted.lock().unwrap();
            let mut got: Vec<(i32, String, String)> = accepted.clone();
            got.sort_by(|x, y| x.2.cmp(&y.2));
            let pa = partition_for_key(b"a", 2) as i32;
            let pb = partition_for_key(b"b", 2) as i32;
            let expected = [(pa, "a", "1"), (pb, "b", "2"), (pa, "a", "3")];
            let expected: Vec<(i32, String, String)> = expected
                .iter()
                .map(|(p, k, v)| (*p, k.to_string(), v.to_string()))
                .collect();
            assert_eq!(got, expected);
        }

        /// Input that hands over `first`, then waits until the broker accepted a Produce
        /// before it hands over `second`: two sends, one after the other.
        struct TwoSends {
            parts: Vec<Vec<u8>>,
            produced: std::sync::mpsc::Receiver<()>,
        }

        impl std::io::Read for TwoSends {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.parts.is_empty() {
                    return Ok(0);
                }
                if self.parts.len() == 1 {
                    let _ = self.produced.recv_timeout(Duration::from_secs(30));
                }
                let part = self.parts.remove(0);
                out[..part.len()].copy_from_slice(&part);
                Ok(part.len())
            }
        }

        #[test]
        fn idempotent_batches_number_records_per_partition_and_retries_resend_them() {
            let pa = partition_for_key(b"a", 2) as i32;
            // A key of the other partition.
            let other = (b'b'..=b'z')
                .find(|k| partition_for_key(&[*k], 2) as i32 != pa)
                .expect("some key lands on the other partition");
            let pb = partition_for_key(&[other], 2) as i32;
            let (produced, accepted_produce) = std::sync::mpsc::channel();
            let scripted = scripted(IDEMPOTENT_RANGES, vec![6], Some(produced));
            let mut first_part = b"a:1\na:2\n".to_vec();
            first_part.extend_from_slice(&[other, b':', b'3', b'\n']);
            let input = TwoSends {
                parts: vec![first_part, b"a:4\n".to_vec()],
                produced: accepted_produce,
            };
            assert_eq!(run(args(&scripted.fake), input).unwrap(), 4);
            assert_eq!(scripted.fake.seen(ApiKey::InitProducerId).len(), 1);
            let mut batches = scripted.batches.lock().unwrap().clone();
            // The first send's two batches went in one request: order them by partition.
            batches[..2].sort();
            batches[2..4].sort();
            let mut first = vec![(pa, PRODUCER_ID, 0, 0), (pb, PRODUCER_ID, 0, 0)];
            first.sort();
            let mut expected = first.clone();
            expected.extend(first); // the retry after NOT_LEADER_OR_FOLLOWER: the same batches
            expected.push((pa, PRODUCER_ID, 0, 2)); // a's sequences go on after 2 records
            assert_eq!(batches, expected);
            assert_eq!(scripted.accepted.lock().unwrap().len(), 4);
        }

        #[test]
        fn without_idempotence_batches_carry_no_producer_id() {
            let scripted = scripted(IDEMPOTENT_RANGES, vec![], None);
            let mut plain = args(&scripted.fake);
            plain.no_idempotence = true;
            let input = std::io::Cursor::new(b"a:1\n".to_vec());
            assert_eq!(run(plain, input).unwrap(), 1);
            assert!(scripted.fake.seen(ApiKey::InitProducerId).is_empty());
            let batches = scripted.batches.lock().unwrap().clone();
            assert_eq!(batches.len(), 1);
            assert_eq!((batches[0].1, batches[0].3), (-1, -1));
        }

        #[test]
        fn a_refused_batch_fails_with_kafkas_error_name() {
            let (fake, accepted) = broker(vec![10]);
            let input = std::io::Cursor::new(b"a:1\n".to_vec());
            let error = run(args(&fake), input).unwrap_err();
            assert!(format!("{error:#}").contains("produce to t-"), "{error:#}");
            assert!(
                format!("{error:#}").contains("MESSAGE_TOO_LARGE"),
                "{error:#}"
            );
            assert_eq!(fake.seen(ApiKey::Produce), [11], "not retriable");
            assert!(accepted.lock().unwrap().is_empty());
        }
    }
}
