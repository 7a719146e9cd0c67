//! `ringlog consume TOPIC`: kafka-console-consumer. Fetches from each partition's leader and
//! prints records; with `--group` it joins the group, starts from the committed offsets and
//! commits what it printed (periodically, on rebalance and at exit).
//!
//! Invariants:
//! - A partition's position is the offset after the last record printed from it, never
//!   past it: `--max-messages` stops mid-batch, and the commit names exactly that position.
//! - Records below the position (a batch that starts earlier) and control records are
//!   skipped; a batch the fetch cut short is left for the next fetch.
//! - The command ends after `--max-messages` records, after `--timeout-ms` without a new
//!   record, on Ctrl-C, or when stdout closes; with a group it then commits and leaves.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::{Buf, Bytes};
use client::blocking::Cluster;
use client::fetch::{fetch_request, FetchLimits, BATCH_HEADER_BYTES};
use client::member::{Heartbeat, Member, MemberConfig};
use client::offsets::{self, TopicPartition, EARLIEST, LATEST};
use client::{check, code_of, TopicInfo};
use kafka_protocol::records::RecordBatchDecoder;

use super::format::{ConsoleLayout, Format};
use super::Connect;

const FETCH_WAIT_MS_MAX: i32 = 500;
const FETCH_BYTES_MAX: i32 = 16 * 1024 * 1024;
const PARTITION_FETCH_BYTES_MAX: i32 = 1024 * 1024;
const AUTO_COMMIT_INTERVAL: Duration = Duration::from_secs(5);
const OFFSET_OUT_OF_RANGE: i16 = 1;

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub connect: Connect,
    pub topic: String,
    /// Consume as a member of this consumer group and commit offsets.
    #[arg(long, conflicts_with_all = ["partition", "offset"])]
    pub group: Option<String>,
    /// Start at the earliest offset when there is no committed offset (default: latest).
    #[arg(long)]
    pub from_beginning: bool,
    /// Read only this partition.
    #[arg(long)]
    pub partition: Option<i32>,
    /// Where to start in --partition: an offset, earliest or latest.
    #[arg(long, requires = "partition")]
    pub offset: Option<String>,
    /// Exit after printing this many records.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Exit when no record arrived for this long.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Output format: %k key, %v value, %p partition, %o offset, %t timestamp (ms), %h
    /// headers, %K/%S key/value length, %% percent, \n \t escapes; e.g. '%k %v %p %o %t\n'.
    #[arg(long, conflicts_with = "print_key")]
    pub format: Option<String>,
    /// Print the key, a tab, then the value (kafka-console-consumer's print.key).
    #[arg(long)]
    pub print_key: bool,
}

/// Where a partition without a (valid) committed offset starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    Earliest,
    Latest,
    Offset(i64),
}

pub fn parse_start(offset: Option<&str>, from_beginning: bool) -> Result<StartAt> {
    match offset {
        None if from_beginning => Ok(StartAt::Earliest),
        None => Ok(StartAt::Latest),
        Some("earliest") => Ok(StartAt::Earliest),
        Some("latest") => Ok(StartAt::Latest),
        Some(number) => match number.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(StartAt::Offset(offset)),
            _ => {
                bail!("--offset must be a non-negative number, earliest or latest, not {number:?}")
            }
        },
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn catch_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// Why the fetch loop stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    MaxMessages,
    Idle,
    Interrupted,
    OutputClosed,
}

struct Consumer<'a, W: Write> {
    cluster: Cluster,
    topic: TopicInfo,
    /// partition → next offset to read.
    positions: BTreeMap<i32, i64>,
    reset: StartAt,
    format: Format,
    out: &'a mut W,
    printed: u64,
    max_messages: Option<u64>,
}

pub fn run(args: ConsumeArgs, out: &mut impl Write) -> Result<u64> {
    catch_interrupts();
    let mut cluster = args.connect.cluster()?;
    let topic = cluster.topic(&args.topic)?;
    let format = match (&args.format, args.print_key) {
        (Some(format), _) => Format::parse(format)?,
        (None, print_key) => Format::console(ConsoleLayout {
            key: print_key,
            ..Default::default()
        }),
    };
    let start = parse_start(args.offset.as_deref(), args.from_beginning)?;
    let mut consumer = Consumer {
        cluster,
        topic,
        positions: BTreeMap::new(),
        reset: match start {
            StartAt::Offset(_) => StartAt::Latest,
            other => other,
        },
        format,
        out,
        printed: 0,
        max_messages: args.max_messages,
    };
    let idle = args.timeout_ms.map(Duration::from_millis);
    match &args.group {
        None => {
            let partitions: Vec<i32> = match args.partition {
                Some(partition) => {
                    if !consumer
                        .topic
                        .partitions
                        .iter()
                        .any(|p| p.partition == partition)
                    {
                        bail!("partition {partition} of {} does not exist", args.topic);
                    }
                    vec![partition]
                }
                None => consumer
                    .topic
                    .partitions
                    .iter()
                    .map(|p| p.partition)
                    .collect(),
            };
            consumer.start_positions(&partitions, start)?;
            consumer.fetch_until_stop(idle, None)?;
        }
        Some(group) => consume_in_group(&mut consumer, group, idle)?,
    }
    consumer.out.flush().ok();
    Ok(consumer.printed)
}

fn consume_in_group<W: Write>(
    consumer: &mut Consumer<'_, W>,
    group: &str,
    idle: Option<Duration>,
) -> Result<()> {
    let config = MemberConfig::new(group, vec![consumer.topic.name.clone()]);
    let mut member = consumer
        .cluster
        .run(async |cluster| Member::join(cluster, config).await)?;
    let outcome = (|| -> Result<()> {
        loop {
            consumer.assign(&mut member)?;
            let stop = consumer.fetch_until_stop(idle, Some(&mut member))?;
            // Eager protocol: commit before giving the partitions up. A fenced commit was
            // already reported; rejoining (or leaving) is right either way.
            consumer.commit(&mut member)?;
            match stop {
                None => consumer
                    .cluster
                    .run(async |cluster| member.rejoin(cluster).await)?,
                Some(_) => return Ok(()),
            }
        }
    })();
    let left = consumer
        .cluster
        .run(async |cluster| member.leave(cluster).await);
    outcome.and(left)
}

impl<W: Write> Consumer<'_, W> {
    /// Positions from the member's assignment: committed offsets, else the reset policy.
    fn assign(&mut self, member: &mut Member) -> Result<()> {
        self.topic = self.cluster.topic(&self.topic.name)?;
        let partitions = member
            .assignment
            .get(&self.topic.name)
            .cloned()
            .unwrap_or_default();
        let committed = self
            .cluster
            .run(async |cluster| member.committed(cluster).await)?;
        self.positions.clear();
        let mut uncommitted = Vec::new();
        for partition in partitions {
            match committed.get(&(self.topic.name.clone(), partition)) {
                Some(offset) => {
                    self.positions.insert(partition, *offset);
                }
                None => uncommitted.push(partition),
            }
        }
        self.start_positions(&uncommitted, self.reset)
    }

    fn start_positions(&mut self, partitions: &[i32], start: StartAt) -> Result<()> {
        let which = match start {
            StartAt::Offset(offset) => {
                for partition in partitions {
                    self.positions.insert(*partition, offset);
                }
                return Ok(());
            }
            StartAt::Earliest => EARLIEST,
            StartAt::Latest => LATEST,
        };
        if partitions.is_empty() {
            return Ok(());
        }
        let topic = &self.topic;
        let offsets = self
            .cluster
            .run(async |cluster| offsets::log_offsets(cluster, topic, partitions, which).await)?;
        self.positions.extend(offsets);
        Ok(())
    }

    /// Commits the positions; `false` when the coordinator no longer counts this member in
    /// the generation (a rebalance moved on without it), which Kafka's consumer also only
    /// logs: the records are read again by the partition's next owner.
    fn commit(&mut self, member: &mut Member) -> Result<bool> {
        let positions: BTreeMap<TopicPartition, i64> = self
            .positions
            .iter()
            .map(|(partition, offset)| ((self.topic.name.clone(), *partition), *offset))
            .collect();
        match self
            .cluster
            .run(async |cluster| member.commit(cluster, &positions).await)
        {
            Ok(()) => Ok(true),
            Err(error) if is_fenced(&error) => {
                eprintln!("WARN offsets not committed: {error:#}");
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Fetches and prints until a stop condition (`Some`) or, in a group, until a rebalance
    /// takes the assignment away (`None`).
    fn fetch_until_stop(
        &mut self,
        idle: Option<Duration>,
        mut member: Option<&mut Member>,
    ) -> Result<Option<Stop>> {
        let mut last_record = Instant::now();
        let mut last_commit = Instant::now();
        let mut committed_positions = self.positions.clone();
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(Some(Stop::Interrupted));
            }
            if self.max_messages.is_some_and(|max| self.printed >= max) {
                return Ok(Some(Stop::MaxMessages));
            }
            let waited = last_record.elapsed();
            if idle.is_some_and(|idle| waited >= idle) {
                return Ok(Some(Stop::Idle));
            }
            if let Some(member) = member.as_deref_mut() {
                if member.heartbeat_due()
                    && self
                        .cluster
                        .run(async |cluster| member.heartbeat(cluster).await)?
                        == Heartbeat::Rebalance
                {
                    return Ok(None);
                }
                if last_commit.elapsed() >= AUTO_COMMIT_INTERVAL
                    && committed_positions != self.positions
                {
                    if !self.commit(member)? {
                        return Ok(None);
                    }
                    committed_positions = self.positions.clone();
                    last_commit = Instant::now();
                }
            }
            let wait_ms = match idle {
                Some(idle) => {
                    (idle.saturating_sub(waited).as_millis() as i32).clamp(1, FETCH_WAIT_MS_MAX)
                }
                None => FETCH_WAIT_MS_MAX,
            };
            if self.positions.is_empty() {
                // An idle group member: nothing to fetch, keep heartbeating.
                std::thread::sleep(Duration::from_millis(wait_ms as u64));
                continue;
            }
            let before = self.printed;
            match self.fetch_once(wait_ms) {
                Ok(()) => {}
                Err(error) if is_broken_pipe(&error) => return Ok(Some(Stop::OutputClosed)),
                Err(error) => return Err(error),
            }
            if self.printed > before {
                last_record = Instant::now();
            }
        }
    }

    /// One Fetch to each leader of the positions' partitions, printing what came back.
    fn fetch_once(&mut self, wait_ms: i32) -> Result<()> {
        let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for (partition, offset) in &self.positions {
            let leader = self
                .topic
                .partitions
                .iter()
                .find(|p| p.partition == *partition)
                .map_or(-1, |p| p.leader);
            by_leader
                .entry(leader)
                .or_default()
                .push((*partition, *offset));
        }
        for (leader, partitions) in by_leader {
            if leader < 0 {
                std::thread::sleep(Duration::from_millis(wait_ms as u64));
                self.topic = self.cluster.topic(&self.topic.name)?;
                continue;
            }
            let request = fetch_request(
                &self.topic.name,
                self.topic.topic_id,
                &partitions,
                FetchLimits {
                    max_wait_ms: wait_ms,
                    max_bytes: FETCH_BYTES_MAX,
                    partition_max_bytes: PARTITION_FETCH_BYTES_MAX,
                },
            );
            let response = self
                .cluster
                .broker(leader)?
                .run(async |connection| connection.call(&request).await)?;
            check(response.error_code, None, || {
                format!("fetch from {}", self.topic.name)
            })?;
            let mut stale_metadata = false;
            for data in response.responses.iter().flat_map(|t| t.partitions.iter()) {
                let partition = data.partition_index;
                match data.error_code {
                    0 => {}
                    OFFSET_OUT_OF_RANGE => {
                        // auto.offset.reset: the reset policy decides where to go instead.
                        self.positions.remove(&partition);
                        self.start_positions(&[partition], self.reset)?;
                        continue;
                    }
                    code if kafka_protocol::error::ResponseError::try_from_code(code)
                        .is_some_and(|e| e.is_retriable()) =>
                    {
                        stale_metadata = true;
                        continue;
                    }
                    code => check(code, None, || {
                        format!("fetch {}-{partition}", self.topic.name)
                    })?,
                }
                if let Some(records) = &data.records {
                    self.print_records(partition, records.clone())?;
                    if self.max_messages.is_some_and(|max| self.printed >= max) {
                        break;
                    }
                }
            }
            self.out.flush()?;
            if stale_metadata {
                self.topic = self.cluster.topic(&self.topic.name)?;
            }
            if self.max_messages.is_some_and(|max| self.printed >= max) {
                break;
            }
        }
        Ok(())
    }

    /// Prints the records of `partition` at or after its position, advancing it.
    fn print_records(&mut self, partition: i32, records: Bytes) -> Result<()> {
        let Some(position) = self.positions.get(&partition).copied() else {
            return Ok(());
        };
        let limit = self
            .max_messages
            .map_or(u64::MAX, |max| max.saturating_sub(self.printed));
        let batches = Batches {
            partition,
            records,
            position,
        };
        let (position, printed) = print_batches(self.out, &self.format, batches, limit)
            .with_context(|| format!("records of {}-{partition}", self.topic.name))?;
        self.positions.insert(partition, position);
        self.printed += printed;
        Ok(())
    }
}

/// One partition's fetched record bytes and the position to print from.
struct Batches {
    partition: i32,
    records: Bytes,
    position: i64,
}

/// Prints at most `limit` records of `batches` at or after its position; answers the new
/// position (after the last record printed, or past whole batches consumed) and the count.
fn print_batches(
    out: &mut impl Write,
    format: &Format,
    batches: Batches,
    limit: u64,
) -> Result<(i64, u64)> {
    let Batches {
        partition,
        mut records,
        mut position,
    } = batches;
    let mut printed = 0;
    while records.remaining() >= BATCH_HEADER_BYTES {
        let base_offset = i64::from_be_bytes(records[0..8].try_into()?);
        let batch_length = i32::from_be_bytes(records[8..12].try_into()?);
        if batch_length < (BATCH_HEADER_BYTES - 12) as i32 {
            bail!("a batch at offset {base_offset} claims {batch_length} bytes");
        }
        let batch_bytes = 12 + batch_length as usize;
        if records.remaining() < batch_bytes {
            break; // cut short by the fetch size; the next fetch starts at this batch
        }
        let last_offset_delta = i32::from_be_bytes(records[23..27].try_into()?);
        let mut batch = records.split_to(batch_bytes);
        let last_offset = base_offset + last_offset_delta as i64;
        if last_offset < position {
            continue;
        }
        let set = RecordBatchDecoder::decode(&mut batch)
            .with_context(|| format!("decoding the batch at offset {base_offset}"))?;
        for record in &set.records {
            if record.offset < position || record.control {
                continue;
            }
            if printed >= limit {
                return Ok((position, printed));
            }
            format.write(out, partition, record)?;
            printed += 1;
            position = record.offset + 1;
        }
        // Past compacted-away offsets and control records at the batch's end too.
        position = position.max(last_offset + 1);
    }
    Ok((position, printed))
}

/// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS: the commit came from a
/// generation the group has left behind.
fn is_fenced(error: &anyhow::Error) -> bool {
    matches!(code_of(error), Some(22) | Some(25) | Some(27))
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One v2 batch of records at `offsets` (consecutive), values `v<offset>`.
    fn batch(offsets: std::ops::Range<i64>, control: bool) -> Bytes {
        let records: Vec<Record> = offsets
            .map(|offset| Record {
                transactional: control,
                control,
                partition_leader_epoch: 0,
                delete_horizon: false,
                producer_id: if control { 7 } else { -1 },
                producer_epoch: if control { 0 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset,
                // One batch: the encoder splits where offset - sequence changes.
                sequence: offset as i32 - 1,
                timestamp: 0,
                key: None,
                value: Some(Bytes::from(format!("v{offset}"))),
                headers: Default::default(),
            })
            .collect();
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
        out.freeze()
    }

    fn print(records: Bytes, position: i64, limit: u64) -> (String, i64, u64) {
        let mut out = Vec::new();
        let format = Format::parse(r"%o:%v\n").unwrap();
        let batches = Batches {
            partition: 0,
            records,
            position,
        };
        let (position, printed) = print_batches(&mut out, &format, batches, limit).unwrap();
        (String::from_utf8(out).unwrap(), position, printed)
    }

    fn concat(parts: &[Bytes]) -> Bytes {
        parts
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect::<Vec<u8>>()
            .into()
    }

    #[test]
    fn printing_starts_at_the_position_inside_a_batch() {
        let records = concat(&[batch(0..3, false), batch(3..5, false)]);
        assert_eq!(
            print(records.clone(), 0, u64::MAX),
            ("0:v0\n1:v1\n2:v2\n3:v3\n4:v4\n".into(), 5, 5)
        );
        assert_eq!(
            print(records, 2, u64::MAX),
            ("2:v2\n3:v3\n4:v4\n".into(), 5, 3)
        );
    }

    #[test]
    fn the_limit_stops_mid_batch_at_the_exact_position() {
        let records = concat(&[batch(0..3, false), batch(3..5, false)]);
        assert_eq!(
            print(records.clone(), 1, 3),
            ("1:v1\n2:v2\n3:v3\n".into(), 4, 3)
        );
        assert_eq!(print(records, 0, 0), (String::new(), 0, 0));
    }

    #[test]
    fn a_cut_batch_waits_and_control_batches_are_passed() {
        let whole = batch(0..2, false);
        let cut = batch(2..4, false);
        let records = concat(&[whole.clone(), cut.slice(..cut.len() - 5)]);
        assert_eq!(print(records, 0, u64::MAX), ("0:v0\n1:v1\n".into(), 2, 2));
        let records = concat(&[whole, batch(2..3, true), batch(3..4, false)]);
        assert_eq!(
            print(records, 0, u64::MAX),
            ("0:v0\n1:v1\n3:v3\n".into(), 4, 3)
        );
    }

    #[test]
    fn a_corrupt_batch_length_is_an_error_not_a_stall() {
        let mut bytes = batch(0..1, false).to_vec();
        bytes[8..12].copy_from_slice(&3i32.to_be_bytes());
        let mut out = Vec::new();
        let format = Format::parse("%v").unwrap();
        let batches = Batches {
            partition: 0,
            records: bytes.into(),
            position: 0,
        };
        assert!(print_batches(&mut out, &format, batches, u64::MAX).is_err());
    }

    #[test]
    fn start_positions_follow_kafka_console_consumer() {
        assert_eq!(parse_start(None, false).unwrap(), StartAt::Latest);
        assert_eq!(parse_start(None, true).unwrap(), StartAt::Earliest);
        assert_eq!(
            parse_start(Some("earliest"), false).unwrap(),
            StartAt::Earliest
        );
        assert_eq!(parse_start(Some("latest"), true).unwrap(), StartAt::Latest);
        assert_eq!(parse_start(Some("17"), false).unwrap(), StartAt::Offset(17));
        assert!(parse_start(Some("-3"), false).is_err());
        assert!(parse_start(Some("soon"), false).is_err());
    }
}
