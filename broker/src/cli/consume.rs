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
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use kafka_protocol::records::RecordBatchDecoder;

use super::client::{topic_name, Cluster, TopicInfo};
use super::error::{check, code_of};
use super::format::{ConsoleLayout, Format};
use super::member::{Heartbeat, Member, MemberConfig};
use super::offsets::{self, TopicPartition, EARLIEST, LATEST};
use super::Connect;

const FETCH_WAIT_MS_MAX: i32 = 500;
const FETCH_BYTES_MAX: i32 = 16 * 1024 * 1024;
const PARTITION_FETCH_BYTES_MAX: i32 = 1024 * 1024;
const AUTO_COMMIT_INTERVAL: Duration = Duration::from_secs(5);
/// Bytes of a v2 batch header before its records; the last offset delta sits at 23.
const BATCH_HEADER_BYTES: usize = 61;
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
    let mut cluster = Cluster::connect(&args.connect.bootstrap_server)?;
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
    let mut member = Member::join(&mut consumer.cluster, config)?;
    let outcome = (|| -> Result<()> {
        loop {
            consumer.assign(&mut member)?;
            let stop = consumer.fetch_until_stop(idle, Some(&mut member))?;
            // Eager protocol: commit before giving the partitions up. A fenced commit was
            // already reported; rejoining (or leaving) is right either way.
            consumer.commit(&mut member)?;
            match stop {
                None => member.rejoin(&mut consumer.cluster)?,
                Some(_) => return Ok(()),
            }
        }
    })();
    let left = member.leave(&mut consumer.cluster);
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
        let committed = member.committed(&mut self.cluster)?;
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
        let offsets = offsets::log_offsets(&mut self.cluster, &self.topic, partitions, which)?;
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
        match member.commit(&mut self.cluster, &positions) {
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
                    && member.heartbeat(&mut self.cluster)? == Heartbeat::Rebalance
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
            let connection = self.cluster.broker(leader)?;
            let version = connection.version::<FetchRequest>()?;
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(wait_ms)
                .with_min_bytes(1)
                .with_max_bytes(FETCH_BYTES_MAX)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic_name(&self.topic.name))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|(partition, offset)| {
                                FetchPartition::default()
                                    .with_partition(*partition)
                                    .with_fetch_offset(*offset)
                                    .with_partition_max_bytes(PARTITION_FETCH_BYTES_MAX)
                            })
                            .collect(),
                    )]);
            let response = connection.call_at(version, &request)?;
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
    fn print_records(&mut self, partition: i32, mut records: Bytes) -> Result<()> {
        let Some(mut position) = self.positions.get(&partition).copied() else {
            return Ok(());
        };
        while records.remaining() >= BATCH_HEADER_BYTES {
            let base_offset = i64::from_be_bytes(records[0..8].try_into()?);
            let batch_length = i32::from_be_bytes(records[8..12].try_into()?);
            let batch_bytes = 12 + batch_length.max(0) as usize;
            if batch_length < 49 || records.remaining() < batch_bytes {
                break; // cut short by the fetch size; the next fetch starts at this batch
            }
            let last_offset_delta = i32::from_be_bytes(records[23..27].try_into()?);
            let mut batch = records.split_to(batch_bytes);
            let last_offset = base_offset + last_offset_delta as i64;
            if last_offset < position {
                continue;
            }
            let set = RecordBatchDecoder::decode(&mut batch)
                .with_context(|| format!("decoding a batch of {}-{partition}", self.topic.name))?;
            for record in &set.records {
                if record.offset < position || record.control {
                    continue;
                }
                if self.max_messages.is_some_and(|max| self.printed >= max) {
                    self.positions.insert(partition, position);
                    return Ok(());
                }
                self.format.write(self.out, partition, record)?;
                self.printed += 1;
                position = record.offset + 1;
            }
            position = position.max(last_offset + 1);
            self.positions.insert(partition, position);
        }
        Ok(())
    }
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
