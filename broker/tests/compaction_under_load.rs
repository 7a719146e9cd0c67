//! Log compaction under concurrent produce and fetch at full speed: while the cleaner
//! rewrites segments, no reader may see an error or a malformed answer, and once it is done
//! each key keeps exactly its latest acknowledged record, at the offset it was acknowledged
//! at, across a `kill -9` too.
//!
//! Method: a node of two shards whose cleaner runs every 100 ms, and a compacted topic of
//! four partitions with 16 KiB segments (a segment rolls every few batches),
//! `min.cleanable.dirty.ratio=0.01`, `min.compaction.lag.ms=0` and
//! `delete.retention.ms=1000` (so that tombstones are both kept and dropped while the load
//! runs). For `LOAD_TIME`, one producer per partition sends batches of keyed records with as
//! many requests in flight as `IN_FLIGHT_REQUESTS`, over 100 keys, each value carrying the
//! key's next version and one record in 16 a tombstone; partitions 0 and 2 are written with
//! acks=1 (answered once the write completes) and 1 and 3 with acks=all by idempotent
//! producers, as Kafka's clients send it by default (answered after the fsync; the cleaner
//! keeps an idempotent producer's last batch, emptied if need be), and every acknowledged
//! record is kept as (partition, offset, key, version). Meanwhile two readers
//! read every partition from offset 0 to its high watermark, again and again, so that
//! cleaning swaps segments under their reads, and two tail the end of the log with waiting
//! fetches. Every fetch answer must have no error code (compaction never moves the log
//! start, so OFFSET_OUT_OF_RANGE is a failure too), a log start of 0, whole batches only,
//! every batch's CRC valid and offsets increasing; every record read must be, at its
//! offset, the one acknowledged there. A read from the start that finds a gap in the
//! offsets shows the cleaner ran while the load did: each partition must show one. Then one
//! record nearly a segment large seals each partition's last segment, and within a bounded
//! wait a read of each partition from offset 0 must hold, for each key, its latest
//! acknowledged record and no other (a key whose latest record is a tombstone: that
//! tombstone, or nothing once `delete.retention.ms` has passed), fewer records than were
//! produced. After a `kill -9` and a restart the same must hold, and the next record of each
//! partition takes the offset after the last one acknowledged.

mod common;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use common::{
    create_topic, fetch_one, init_producer_id, produce, produce_answer, produce_request, Client,
    Node,
};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const SETTINGS: &[&str] = &["log.cleaner.backoff.ms=100"];
const TOPIC: &str = "load";
const PARTITIONS: i32 = 4;
const SEGMENT_BYTES: usize = 16 << 10;
const KEYS_PER_PARTITION: u32 = 100;
const RECORDS_PER_BATCH: usize = 16;
const VALUE_BYTES: usize = 64;
/// One record in this many is a tombstone.
const TOMBSTONE_ONE_IN: u64 = 16;
const IN_FLIGHT_REQUESTS: usize = 4;
const LOAD_TIME: Duration = Duration::from_secs(6);
/// How long the cleaner may take to finish once the load has stopped.
const SETTLE_TIME: Duration = Duration::from_secs(30);
/// The key of the record that seals each partition's last segment.
const SEAL_KEY: &str = "seal";

/// A record as it was acknowledged, or read: its key's number and the version its value
/// carries (`None`: a tombstone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Keyed {
    key: u32,
    version: u64,
    tombstone: bool,
}

/// What the producers had acknowledged, by partition: offset → record.
type Acked = Vec<HashMap<i64, Keyed>>;

fn key_name(key: u32) -> String {
    format!("key-{key:03}")
}

/// `key-007=42` padded with dots to `VALUE_BYTES`.
fn value_of(key: u32, version: u64) -> Bytes {
    let mut value = format!("{}={version}", key_name(key)).into_bytes();
    value.resize(VALUE_BYTES.max(value.len()), b'.');
    Bytes::from(value)
}

/// The key number and version a record carries; panics on a record no producer wrote.
fn parse(key: &[u8], value: Option<&[u8]>) -> Keyed {
    let key_text = std::str::from_utf8(key).expect("utf-8 key");
    let number = key_text
        .strip_prefix("key-")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("a key no producer wrote: {key_text:?}"));
    let Some(value) = value else {
        // A tombstone's version is known only from the acknowledgement at its offset.
        return Keyed {
            key: number,
            version: 0,
            tombstone: true,
        };
    };
    let text = std::str::from_utf8(value).expect("utf-8 value");
    let (value_key, version) = text
        .trim_end_matches('.')
        .split_once('=')
        .unwrap_or_else(|| panic!("a value no producer wrote: {text:?}"));
    assert_eq!(value_key, key_text, "a record's value belongs to its key");
    Keyed {
        key: number,
        version: version.parse().expect("a version"),
        tombstone: false,
    }
}

/// Whether a record read at an offset is the one acknowledged there.
fn same_record(read: &Keyed, acked: &Keyed) -> bool {
    read.key == acked.key
        && read.tombstone == acked.tombstone
        && (read.tombstone || read.version == acked.version)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// A batch of `records` (key, value or `None` for a tombstone), from the idempotent
/// producer `(id, first sequence)` if one is given.
fn batch_of(records: &[(String, Option<Bytes>)], producer: Option<(i64, i32)>) -> Bytes {
    let timestamp = now_ms();
    let (producer_id, producer_epoch) = producer.map_or((-1, -1), |(id, _)| (id, 0));
    let records: Vec<Record> = (0..)
        .zip(records)
        .map(|(offset, (key, value))| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            delete_horizon: false,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: producer.map_or(-1, |(_, first)| first + offset as i32),
            timestamp,
            key: Some(Bytes::from(key.clone())),
            value: value.clone(),
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

/// xorshift64*: the producers' key choices, reproducible per partition.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Produces to `partition` until `stop`, `IN_FLIGHT_REQUESTS` at a time, at `acks` (all:
/// as an idempotent producer, as Kafka's clients are by default); every record
/// acknowledged, by offset.
fn produce_until(
    mut client: Client,
    partition: i32,
    acks: i16,
    stop: &AtomicBool,
) -> HashMap<i64, Keyed> {
    let producer_id = (acks == -1).then(|| init_producer_id(&mut client));
    let mut sequence = 0i32;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (partition as u64 + 1));
    let mut versions = vec![0u64; KEYS_PER_PARTITION as usize];
    let mut in_flight: VecDeque<Vec<Keyed>> = VecDeque::new();
    let mut acked = HashMap::new();
    let mut receive = |client: &mut Client, sent: Vec<Keyed>| {
        let (error_code, base_offset) = produce_answer(client);
        assert_eq!(error_code, 0, "produce to partition {partition}");
        for (offset, record) in (base_offset..).zip(sent) {
            acked.insert(offset, record);
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let mut sent = Vec::with_capacity(RECORDS_PER_BATCH);
        let mut records = Vec::with_capacity(RECORDS_PER_BATCH);
        for _ in 0..RECORDS_PER_BATCH {
            let key = (rng.next() % u64::from(KEYS_PER_PARTITION)) as u32;
            let version = &mut versions[key as usize];
            *version += 1;
            let tombstone = rng.next() % TOMBSTONE_ONE_IN == 0;
            let value = (!tombstone).then(|| value_of(key, *version));
            records.push((key_name(key), value));
            sent.push(Keyed {
                key,
                version: *version,
                tombstone,
            });
        }
        let batch = batch_of(&records, producer_id.map(|id| (id, sequence)));
        sequence += RECORDS_PER_BATCH as i32;
        let request = produce_request(TOPIC, partition, batch, acks);
        client.send(ApiKey::Produce, 9, &RequestKind::Produce(request));
        in_flight.push_back(sent);
        if in_flight.len() >= IN_FLIGHT_REQUESTS {
            let sent = in_flight.pop_front().expect("in flight");
            receive(&mut client, sent);
        }
    }
    while let Some(sent) = in_flight.pop_front() {
        receive(&mut client, sent);
    }
    acked
}

/// One fetch answer for one partition, checked: no error, log start 0, whole batches with
/// valid CRCs, offsets increasing from `offset`.
struct Fetched {
    high_watermark: i64,
    /// Where the next fetch starts: past the last batch of the answer, which may be empty
    /// (the cleaner keeps an idempotent producer's last batch with no records, as Kafka's
    /// does); `None` for an answer without batches.
    next_offset: Option<i64>,
    /// (offset, key, value) of every record at or past the fetch offset.
    records: Vec<(i64, Bytes, Option<Bytes>)>,
}

fn fetch(client: &mut Client, partition: i32, offset: i64, max_wait_ms: i32) -> Fetched {
    let request = fetch_one(TOPIC, partition, offset, max_wait_ms, 256 << 10);
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let where_ = format!("fetch of partition {partition} at {offset}");
    assert_eq!(answer.error_code, 0, "{where_}");
    let data = &answer.responses[0].partitions[0];
    assert_eq!(data.error_code, 0, "{where_}: error code");
    assert_eq!(
        data.log_start_offset, 0,
        "{where_}: compaction moved the log start"
    );
    let mut bytes = data.records.clone().unwrap_or_default();
    let mut records = Vec::new();
    let mut first = true;
    let mut previous_last = offset - 1;
    while bytes.has_remaining() {
        assert!(bytes.len() >= 12, "{where_}: a partial batch header");
        let length = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let batch_bytes = 12 + usize::try_from(length).expect("a batch length");
        assert!(bytes.len() >= batch_bytes, "{where_}: a partial batch");
        let mut batch = bytes.split_to(batch_bytes);
        let base_offset = i64::from_be_bytes(batch[0..8].try_into().expect("8 bytes"));
        let last_delta = i32::from_be_bytes(batch[23..27].try_into().expect("4 bytes"));
        let last_offset = base_offset + i64::from(last_delta);
        // The first batch holds `offset` or starts past it; each next one starts past the
        // one before.
        if first {
            assert!(
                last_offset >= offset,
                "{where_}: a batch ending at {last_offset}"
            );
        } else {
            assert!(
                base_offset > previous_last,
                "{where_}: batch {base_offset}..={last_offset} after {previous_last}"
            );
        }
        first = false;
        let set = RecordBatchDecoder::decode(&mut batch)
            .unwrap_or_else(|e| panic!("{where_}: batch at {base_offset} does not decode: {e}"));
        for record in set.records {
            assert!(
                (base_offset..=last_offset).contains(&record.offset),
                "{where_}: record {} outside its batch {base_offset}..={last_offset}",
                record.offset
            );
            if record.offset < offset {
                continue;
            }
            if let Some(&(last, _, _)) = records.last() {
                assert!(
                    record.offset > last,
                    "{where_}: {} after {last}",
                    record.offset
                );
            }
            let key = record
                .key
                .unwrap_or_else(|| panic!("{where_}: a record without key"));
            records.push((record.offset, key, record.value));
        }
        previous_last = last_offset;
    }
    assert!(
        records
            .last()
            .is_none_or(|&(last, _, _)| last < data.high_watermark),
        "{where_}: a record at or past the high watermark {}",
        data.high_watermark
    );
    Fetched {
        high_watermark: data.high_watermark,
        next_offset: (!first).then_some(previous_last + 1),
        records,
    }
}

/// Every record of `partition` from offset 0 to its high watermark, through fetches each
/// checked by [`fetch`], with offsets increasing across them.
fn read_all(client: &mut Client, partition: i32) -> Vec<(i64, Bytes, Option<Bytes>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    // Bounded: each fetch below the high watermark answers at least one batch.
    for _ in 0..100_000 {
        let fetched = fetch(client, partition, offset, 0);
        if offset >= fetched.high_watermark {
            return out;
        }
        let Some(next_offset) = fetched.next_offset else {
            panic!(
                "partition {partition}: no batch at {offset}, below the high watermark {}",
                fetched.high_watermark
            );
        };
        offset = next_offset;
        out.extend(fetched.records);
    }
    panic!("reading partition {partition} did not end");
}

/// What the readers read while the load ran.
#[derive(Default)]
struct Seen {
    /// By partition: offset → the record read there (the same at every read).
    records: Vec<HashMap<i64, Keyed>>,
    /// By partition: reads from offset 0 that found a gap (the cleaner had been there).
    gapped_reads: Vec<u64>,
    whole_reads: u64,
    tail_records: u64,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            records: vec![HashMap::new(); PARTITIONS as usize],
            gapped_reads: vec![0; PARTITIONS as usize],
            ..Seen::default()
        }
    }

    /// Keeps what was read at each offset; an offset must read the same every time.
    fn record(&mut self, partition: i32, records: &[(i64, Bytes, Option<Bytes>)]) {
        let seen = &mut self.records[partition as usize];
        for (offset, key, value) in records {
            let read = parse(key, value.as_deref());
            let first = *seen.entry(*offset).or_insert(read);
            assert_eq!(
                first, read,
                "partition {partition} at {offset} read two records"
            );
        }
    }
}

/// Reads every partition from offset 0 to its high watermark, in turn, until `stop`.
fn read_from_start_until(mut client: Client, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let mut partition = 0;
    while !stop.load(Ordering::Relaxed) {
        let records = read_all(&mut client, partition);
        let gapped = records
            .iter()
            .enumerate()
            .any(|(i, &(offset, _, _))| offset != i as i64);
        let mut seen = seen.lock().expect("seen");
        seen.record(partition, &records);
        seen.gapped_reads[partition as usize] += u64::from(gapped);
        seen.whole_reads += 1;
        partition = (partition + 1) % PARTITIONS;
    }
}

/// Follows the end of `partition` with waiting fetches until `stop`.
fn tail_until(mut client: Client, partition: i32, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let mut offset = fetch(&mut client, partition, 0, 0).high_watermark;
    while !stop.load(Ordering::Relaxed) {
        let fetched = fetch(&mut client, partition, offset, 100);
        offset = fetched.next_offset.unwrap_or(offset);
        let mut seen = seen.lock().expect("seen");
        seen.record(partition, &fetched.records);
        seen.tail_records += fetched.records.len() as u64;
    }
}

/// How a partition read from offset 0 compares with what was acknowledged: `Err` for what
/// no amount of cleaning mends (a record that is not the one acknowledged at its offset, a
/// latest record missing, a deleted key's older value without its tombstone), else the
/// number of older records the cleaner has yet to remove.
fn compare(
    read: &[(i64, Bytes, Option<Bytes>)],
    acked: &HashMap<i64, Keyed>,
    seal_offset: i64,
) -> Result<usize, String> {
    let mut latest: HashMap<u32, (i64, Keyed)> = HashMap::new();
    for (&offset, &record) in acked {
        let entry = latest.entry(record.key).or_insert((offset, record));
        if offset > entry.0 {
            *entry = (offset, record);
        }
    }
    let mut read_by_key: HashMap<u32, Vec<i64>> = HashMap::new();
    let mut seal_found = false;
    for (offset, key, value) in read {
        if key.as_ref() == SEAL_KEY.as_bytes() {
            if *offset != seal_offset {
                return Err(format!("a seal record at {offset}, not {seal_offset}"));
            }
            seal_found = true;
            continue;
        }
        let record = parse(key, value.as_deref());
        let Some(acked) = acked.get(offset) else {
            return Err(format!(
                "{record:?} at {offset}, where nothing was acknowledged"
            ));
        };
        if !same_record(&record, acked) {
            return Err(format!(
                "{record:?} at {offset}, where {acked:?} was acknowledged"
            ));
        }
        read_by_key.entry(record.key).or_default().push(*offset);
    }
    if !seal_found {
        return Err(format!("the seal record at {seal_offset} is missing"));
    }
    let mut older = 0;
    for (key, (latest_offset, record)) in &latest {
        let offsets = read_by_key.remove(key).unwrap_or_default();
        let kept = offsets.contains(latest_offset);
        // A deleted key may have lost its tombstone too, once delete.retention.ms passed.
        let gone = record.tombstone && offsets.is_empty();
        if !(kept || gone) {
            return Err(format!(
                "{} lost its latest record {record:?} at {latest_offset}; read at {offsets:?}",
                key_name(*key)
            ));
        }
        older += offsets.len() - usize::from(kept);
    }
    Ok(older)
}

/// Reads `partition` until the cleaner has left each key only its latest record (bounded);
/// what it read last.
fn wait_compacted(
    client: &mut Client,
    partition: i32,
    acked: &HashMap<i64, Keyed>,
    seal_offset: i64,
) -> Vec<(i64, Bytes, Option<Bytes>)> {
    let deadline = Instant::now() + SETTLE_TIME;
    loop {
        let read = read_all(client, partition);
        match compare(&read, acked, seal_offset) {
            Err(defect) => panic!("partition {partition}: {defect}"),
            Ok(0) => return read,
            Ok(older) => assert!(
                Instant::now() < deadline,
                "partition {partition}: {older} older records still there after {SETTLE_TIME:?}"
            ),
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// A thread's result; its panic goes on in the test's thread, which prints the node's log.
fn unwrap<T>(result: thread::Result<T>) -> T {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// One record nearly as large as a segment (a batch may not be larger): it does not fit
/// beside any other, so it rolls the partition's last segment, sealing every acknowledged
/// record into segments the cleaner may take. Its offset.
fn seal(client: &mut Client, partition: i32) -> i64 {
    let big = Bytes::from(vec![b'.'; SEGMENT_BYTES - 512]);
    let records = batch_of(&[(SEAL_KEY.to_string(), Some(big))], None);
    let (error_code, offset) = produce(client, TOPIC, partition, records, -1);
    assert_eq!(error_code, 0, "sealing partition {partition}");
    offset
}

#[test]
fn compaction_under_concurrent_produce_and_fetch_keeps_the_latest_values() {
    let started = Instant::now();
    let node = Node::start(SETTINGS);
    let mut client = node.connect();
    let segment_bytes = SEGMENT_BYTES.to_string();
    create_topic(
        &mut client,
        TOPIC,
        PARTITIONS,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", &segment_bytes),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("min.compaction.lag.ms", "0"),
            ("delete.retention.ms", "1000"),
        ],
    );

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::new()));
    let producers: Vec<_> = (0..PARTITIONS)
        .map(|partition| {
            let (client, stop) = (node.connect(), stop.clone());
            let acks = if partition % 2 == 0 { 1 } else { -1 };
            thread::spawn(move || produce_until(client, partition, acks, &stop))
        })
        .collect();
    let mut readers: Vec<_> = (0..2)
        .map(|_| {
            let (client, stop, seen) = (node.connect(), stop.clone(), seen.clone());
            thread::spawn(move || read_from_start_until(client, &stop, &seen))
        })
        .collect();
    readers.extend((0..2).map(|partition| {
        let (client, stop, seen) = (node.connect(), stop.clone(), seen.clone());
        thread::spawn(move || tail_until(client, partition, &stop, &seen))
    }));
    thread::sleep(LOAD_TIME);
    stop.store(true, Ordering::Relaxed);
    // Every thread stops before a failure is raised, while the node still runs.
    let read: Vec<_> = readers.into_iter().map(thread::JoinHandle::join).collect();
    let produced: Vec<_> = producers
        .into_iter()
        .map(thread::JoinHandle::join)
        .collect();
    read.into_iter().for_each(unwrap);
    let acked: Acked = produced.into_iter().map(unwrap).collect();

    let seen = Arc::try_unwrap(seen)
        .ok()
        .expect("readers are done")
        .into_inner()
        .expect("seen");
    let produced: usize = acked.iter().map(HashMap::len).sum();
    eprintln!(
        "{produced} records acknowledged in {LOAD_TIME:?}; {} reads from the start, {} of \
         them with gaps; {} records read at the tail",
        seen.whole_reads,
        seen.gapped_reads.iter().sum::<u64>(),
        seen.tail_records
    );
    for partition in 0..PARTITIONS as usize {
        let acked = &acked[partition];
        // Versions of a key grow with its offsets: the node kept each connection's order.
        let mut by_key: Vec<(u32, i64, u64)> = acked
            .iter()
            .map(|(&offset, r)| (r.key, offset, r.version))
            .collect();
        by_key.sort_unstable();
        for pair in by_key.windows(2) {
            if pair[0].0 == pair[1].0 {
                assert!(pair[0].2 < pair[1].2, "partition {partition}: {pair:?}");
            }
        }
        for (offset, read) in &seen.records[partition] {
            let acked = acked.get(offset).unwrap_or_else(|| {
                panic!("partition {partition}: {read:?} read at {offset}, never acknowledged")
            });
            assert!(
                same_record(read, acked),
                "partition {partition}: {read:?} read at {offset}, where {acked:?} was \
                 acknowledged"
            );
        }
        assert!(
            seen.gapped_reads[partition] > 0,
            "partition {partition}: no read from the start found the cleaner's gaps while \
             the load ran"
        );
    }
    assert!(seen.tail_records > 0, "the tail readers read nothing");

    let seals: Vec<i64> = (0..PARTITIONS)
        .map(|partition| seal(&mut client, partition))
        .collect();
    let mut kept = Vec::new();
    for partition in 0..PARTITIONS {
        let acked = &acked[partition as usize];
        let read = wait_compacted(&mut client, partition, acked, seals[partition as usize]);
        assert!(
            read.len() < acked.len(),
            "partition {partition}: {} records of {} produced: not compacted",
            read.len(),
            acked.len()
        );
        kept.push(read);
    }

    let node = node.kill().restart(SETTINGS);
    let mut client = node.connect();
    for partition in 0..PARTITIONS {
        let index = partition as usize;
        let read = read_all(&mut client, partition);
        let older = compare(&read, &acked[index], seals[index])
            .unwrap_or_else(|defect| panic!("after a restart, partition {partition}: {defect}"));
        assert_eq!(older, 0, "after a restart, partition {partition}");
        // Only a tombstone past delete.retention.ms may have gone since.
        for record in &read {
            assert!(
                kept[index].contains(record),
                "after a restart, partition {partition}: {record:?} was not there before"
            );
        }
        let next = produce(
            &mut client,
            TOPIC,
            partition,
            batch_of(&[(key_name(0), Some(value_of(0, u64::MAX)))], None),
            1,
        );
        assert_eq!(
            next,
            (0, seals[index] + 1),
            "after a restart, partition {partition}"
        );
    }
    eprintln!("done in {:?}", started.elapsed());
}
