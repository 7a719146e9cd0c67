//! Fetch: read whole batches from each owning shard, long-poll until `min_bytes` or
//! `max_wait_ms`, trim to `max_bytes` in request order.
//!
//! ```text
//! request ─▶ per-owner reads (concurrent) ─▶ enough? ─yes─▶ trim to max_bytes ─▶ response
//!                  ▲                            │no
//!                  └── first owner that sees ◀──┘ wait on every owner at once
//!                      new data (or deadline)
//! ```
//! Consumers see only what is below each partition's high watermark: what a crash of the
//! process cannot take back. A fetch at an offset between the high watermark and the log end
//! finds no records and no error, as in Kafka. A waiting fetch is answered the moment a
//! high watermark passes its offset: owners wait on their partitions'
//! `high_watermark_moved` signals, and the first owner to see data ends the wait for all. A
//! follower's fetch waits for new completed writes (`written_moved`) only: as in Kafka, a
//! moved high watermark alone does not answer it (the follower learns it with its next
//! data, or when its wait ends), which would cost each follower one more round trip for
//! every move. Fetch sessions (KIP-227) are declined: the node answers session id 0, so clients
//! keep sending full fetch requests; an incremental request for a session we never created
//! gets FETCH_SESSION_ID_NOT_FOUND. Only a partition's leader serves it
//! (NOT_LEADER_OR_FOLLOWER elsewhere), and a `current_leader_epoch` (v9+) that is not the
//! leader's is answered FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH, as Kafka checks it;
//! from v12, NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH carry the leader this node knows.
//! From v12 a fetch whose `last_fetched_epoch` ended below its offset on the leader (a log
//! that diverged under an earlier leader) gets no records but the diverging epoch and where
//! it ends, so the fetcher truncates to it.
//!
//! A fetch with replica id -2 (Kafka's debugging replica id, a tool's) reads any replica this
//! node holds, leader or follower, up to its high watermark. A fetch with a replica id is a
//! follower's: the leader records its position (which moves the high watermark,
//! `Partition::record_follower_fetch`), reads it up to the completed writes rather than the
//! high watermark, and answers a waiting one also when the high watermark moves, so
//! followers learn it without waiting out their `max_wait_ms`. From v13 topics are named by
//! id, from v15 a follower names its broker epoch (KIP-903), and v16 answers carry the
//! endpoints of the leaders they name (KIP-951).

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use shard::Notify;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use storage::batch::BatchHeader;
use storage::ReadError;

use net::{Outbox, Reply, Reservation};

use super::now_ms;
use crate::errors::{self, code, NONE};
use crate::partition::DEBUGGING_REPLICA_ID;
use crate::shard_state::Shard;

/// Longest a fetch may wait, whatever the client asks: bounds the waiters a client can park.
const WAIT_MS_MAX: i32 = 60_000;

/// One partition's part of the request, with its place in the response.
#[derive(Clone)]
struct Part {
    slot: (usize, usize),
    topic: String,
    partition: i32,
    offset: i64,
    /// The end of what this fetch has already seen of the partition (its offset until a read
    /// shows more): a waiting fetch waits for visible data past it, so one short of its
    /// `min_bytes` waits for more to land instead of reading the same bytes again.
    seen_end: i64,
    max_bytes: usize,
    /// -1: no check.
    current_leader_epoch: i32,
    /// The epoch of the last batch the fetcher holds (v12+), -1 if none or not sent.
    last_fetched_epoch: i32,
    /// The follower's broker id, -1 for a consumer.
    replica_id: i32,
    /// The follower's broker epoch (v15+, KIP-903), -1 when not sent.
    replica_epoch: i64,
    version: i16,
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: FetchRequest,
    version: i16,
    outbox: Option<Rc<Outbox>>,
) -> Reply {
    if request.session_id != 0 {
        let refused = FetchResponse::default()
            .with_error_code(code(ResponseError::FetchSessionIdNotFound))
            .with_session_id(0);
        return Reply::Respond(Box::new(ResponseKind::Fetch(refused)));
    }
    let read_committed = request.isolation_level == 1;
    // From v15 a follower names itself and its incarnation in `replica_state` (KIP-903).
    let (replica_id, replica_epoch) = if version >= 15 {
        let state = &request.replica_state;
        (state.replica_id.0, state.replica_epoch)
    } else {
        (request.replica_id.0, -1)
    };
    // Below -2 (Kafka's debugging replica id) means nothing: a consumer.
    let replica_id = if replica_id < DEBUGGING_REPLICA_ID {
        -1
    } else {
        replica_id
    };
    // From v13 topics are named by id (KIP-516).
    let image = (version >= 13).then(|| shard.image());
    let mut response = FetchResponse::default().with_session_id(0);
    let mut parts_by_owner: Vec<Vec<Part>> = (0..shard.router.shard_count())
        .map(|_| Vec::new())
        .collect();
    for (topic_index, topic) in request.topics.into_iter().enumerate() {
        let name = match &image {
            Some(image) => image.topic_by_id(&topic.topic_id).map(|t| t.name.clone()),
            None => Some(topic.topic.to_string()),
        };
        let unknown = if name.is_some() {
            ResponseError::UnknownTopicOrPartition
        } else {
            ResponseError::UnknownTopicId
        };
        let name = name.unwrap_or_default();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for (partition_index, wanted) in topic.partitions.into_iter().enumerate() {
            partitions.push(
                empty_partition(wanted.partition, read_committed).with_error_code(code(unknown)),
            );
            if wanted.partition < 0 || unknown == ResponseError::UnknownTopicId {
                continue;
            }
            parts_by_owner[shard.owner(&name, wanted.partition)].push(Part {
                slot: (topic_index, partition_index),
                topic: name.clone(),
                partition: wanted.partition,
                offset: wanted.fetch_offset,
                seen_end: wanted.fetch_offset,
                max_bytes: wanted.partition_max_bytes.max(1) as usize,
                current_leader_epoch: if version >= 9 {
                    wanted.current_leader_epoch
                } else {
                    -1
                },
                last_fetched_epoch: if version >= 12 {
                    wanted.last_fetched_epoch
                } else {
                    -1
                },
                replica_id,
                replica_epoch,
                version,
            });
        }
        response.responses.push(
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    let wait = Duration::from_millis(request.max_wait_ms.clamp(0, WAIT_MS_MAX) as u64);
    let deadline = Instant::now() + wait;
    let min_bytes = request.min_bytes.max(0) as usize;
    let want_bytes = (request.max_bytes.max(1) as usize).min(ANSWER_BYTES_MAX);
    let mut woken = false;
    let held = loop {
        let mut held = reserve_answer(shard, outbox.as_deref(), want_bytes).await;
        let answers = read_everywhere(shard, &parts_by_owner, read_committed, held.bytes).await;
        let total_bytes: usize = answers
            .iter()
            .map(|(_, d)| d.records.as_ref().map_or(0, Bytes::len))
            .sum();
        held.shrink_to(total_bytes);
        for ((topic_index, partition_index), data) in answers {
            response.responses[topic_index].partitions[partition_index] = data;
        }
        // As in Kafka, an error anywhere answers at once: one read on an owner, or a topic id
        // this node does not know (never read, answered with the error it was given above).
        let failed = response
            .responses
            .iter()
            .flat_map(|topic| &topic.partitions)
            .any(|partition| partition.error_code != NONE);
        // A follower woken by new writes takes them at once, however few.
        let follower_woken = woken && replica_id >= 0;
        if total_bytes >= min_bytes || failed || follower_woken || Instant::now() >= deadline {
            break held;
        }
        drop(held); // nothing worth holding while waiting

        // Short of min_bytes: what was just read is seen, and only more wakes the wait.
        for part in parts_by_owner.iter_mut().flatten() {
            let (topic_index, partition_index) = part.slot;
            let read = &response.responses[topic_index].partitions[partition_index];
            part.seen_end = part.seen_end.max(read.high_watermark);
        }
        wait_for_data(shard, &parts_by_owner, deadline).await;
        woken = true;
    };
    trim_to(&mut response, request.max_bytes.max(0) as usize);
    if version >= 16 {
        response.node_endpoints = leader_endpoints(shard, &response);
    }
    if version < 5 {
        // log_start_offset exists from v5 on; the codec refuses it in older versions.
        for partition in response
            .responses
            .iter_mut()
            .flat_map(|t| &mut t.partitions)
        {
            partition.log_start_offset = -1;
        }
    }
    Reply::RespondHolding(Box::new(ResponseKind::Fetch(response)), held.reservations)
}

/// The most answer bytes one fetch asks for, whatever its `max_bytes` (a read is capped at
/// this too).
const ANSWER_BYTES_MAX: usize = 64 << 20;

/// What a fetch's answer may hold until it is written, and the reservations behind it.
struct AnswerHold {
    bytes: usize,
    reservations: Vec<Reservation>,
}

impl AnswerHold {
    /// Gives back what the answer did not use (a batch past the grant keeps what it has).
    fn shrink_to(&mut self, used_bytes: usize) {
        self.bytes = self.bytes.min(used_bytes);
        for reservation in &mut self.reservations {
            reservation.shrink_to(used_bytes);
        }
    }
}

/// Reserves answer memory for a fetch: up to `want_bytes`, less when the budgets are short,
/// at least the floor (one whole batch, KIP-74) after waiting for it, or at once from the
/// reserve when the connection keeps up with its answers.
async fn reserve_answer(shard: &Shard, outbox: Option<&Outbox>, want_bytes: usize) -> AnswerHold {
    let floor = want_bytes.min(shard.config.response_floor_bytes());
    let mut reservations = Vec::with_capacity(2);
    let mut grant = want_bytes;
    if let Some(outbox) = outbox {
        // A client that stopped reading waits here, holding nothing of the shard's.
        let mut own = outbox.budget.reserve(floor).await;
        own.try_grow((want_bytes - floor).min(outbox.budget.available_bytes()));
        grant = own.bytes();
        reservations.push(own);
    }
    let budget = &shard.response_budget;
    let keeps_up = outbox.is_none_or(Outbox::keeps_up);
    // Units another fetch already waits for are not free for this one.
    let free = budget.available_bytes();
    let taken = match budget.try_reserve(grant) {
        Some(taken) => Some(taken),
        None if free >= floor => budget.try_reserve(free),
        None => None,
    };
    let taken = match taken {
        Some(taken) => taken,
        None => match keeps_up.then(|| shard.response_reserve.try_reserve(floor)) {
            Some(Some(taken)) => taken,
            _ => budget.reserve(floor).await,
        },
    };
    grant = taken.bytes();
    reservations.push(taken);
    let mut hold = AnswerHold {
        bytes: grant,
        reservations,
    };
    hold.shrink_to(grant);
    hold
}

fn empty_partition(index: i32, read_committed: bool) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
        .with_aborted_transactions(read_committed.then(Vec::new))
}

/// Reads every part on its owner; owners work concurrently.
async fn read_everywhere(
    shard: &Rc<Shard>,
    parts_by_owner: &[Vec<Part>],
    read_committed: bool,
    budget_bytes: usize,
) -> Vec<((usize, usize), PartitionData)> {
    let mut calls = Vec::new();
    for (owner, parts) in parts_by_owner.iter().enumerate() {
        if parts.is_empty() {
            continue;
        }
        let (shard, parts) = (shard.clone(), parts.clone());
        calls.push(glommio::spawn_local(async move {
            let job =
                move |owner: Rc<Shard>| read_on_owner(owner, parts, read_committed, budget_bytes);
            shard.router.call(&shard, owner, job).await
        }));
    }
    let mut answers = Vec::new();
    for call in calls {
        match call.await {
            Ok(mut part_answers) => answers.append(&mut part_answers),
            Err(stopped) => tracing::warn!(%stopped, "fetch part lost"),
        }
    }
    answers
}

/// Reads one owner runs at once: enough for the disk to overlap them.
const READS_IN_FLIGHT_MAX: usize = 4;

/// Runs on the owning shard. Reads run up to [`READS_IN_FLIGHT_MAX`] at a time, in request
/// order, and none asks for more than is left of `budget_bytes` (the response's max_bytes)
/// after the answers so far and the reads in flight. So a fetch of many partitions holds
/// about `budget_bytes` per owner (KIP-74 may add one batch per read), however many
/// partitions it names; partitions past the budget answer their offsets without records,
/// as the response's trim would have left them.
async fn read_on_owner(
    shard: Rc<Shard>,
    parts: Vec<Part>,
    read_committed: bool,
    budget_bytes: usize,
) -> Vec<((usize, usize), PartitionData)> {
    let mut answers = Vec::with_capacity(parts.len());
    let mut in_flight = std::collections::VecDeque::with_capacity(READS_IN_FLIGHT_MAX);
    let (mut used_bytes, mut reserved_bytes) = (0usize, 0usize);
    for part in parts {
        // Wait for a read when the window is full, or when the reads in flight may have
        // spent the budget: what they actually bring decides what is left.
        while in_flight.len() == READS_IN_FLIGHT_MAX
            || (!in_flight.is_empty() && used_bytes + reserved_bytes >= budget_bytes)
        {
            let (cap, read): (usize, glommio::Task<_>) =
                in_flight.pop_front().expect("a read in flight");
            let answer: ((usize, usize), PartitionData) = read.await;
            reserved_bytes -= cap;
            used_bytes += answer.1.records.as_ref().map_or(0, Bytes::len);
            answers.push(answer);
        }
        let cap = part
            .max_bytes
            .min(budget_bytes.saturating_sub(used_bytes + reserved_bytes));
        reserved_bytes += cap;
        let shard = shard.clone();
        in_flight.push_back((
            cap,
            glommio::spawn_local(async move { read_part(&shard, part, read_committed, cap).await }),
        ));
    }
    for (_, read) in in_flight {
        answers.push(read.await);
    }
    answers
}

/// One partition's answer: its offsets and, when `cap_bytes` is not 0, whole batches from
/// the fetch offset up to `cap_bytes` (at least one batch, KIP-74).
async fn read_part(
    shard: &Shard,
    part: Part,
    read_committed: bool,
    cap_bytes: usize,
) -> ((usize, usize), PartitionData) {
    let mut data = empty_partition(part.partition, read_committed);
    let Some(partition) = shard.partition(&part.topic, part.partition) else {
        data.error_code = code(ResponseError::UnknownTopicOrPartition);
        return (part.slot, data);
    };
    // A debugging fetch (replica id -2, a tool's) may read any replica, as in Kafka.
    let require_leader = part.replica_id != DEBUGGING_REPLICA_ID;
    if let Err(error_code) = partition.check_leader(part.current_leader_epoch, require_leader) {
        data.error_code = error_code;
        if part.version >= 12 && error_code != code(ResponseError::UnknownLeaderEpoch) {
            let leadership = partition.leadership();
            data.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leadership.leader))
                .with_leader_epoch(leadership.leader_epoch);
        }
        return (part.slot, data);
    }
    if let Some((epoch, end_offset)) = diverging_epoch(&partition, &part) {
        data.diverging_epoch = EpochEndOffset::default()
            .with_epoch(epoch)
            .with_end_offset(end_offset);
        data.high_watermark = partition.high_watermark();
        data.last_stable_offset = data.high_watermark;
        data.log_start_offset = partition.log.log_start_offset();
        data.records = Some(Bytes::new());
        return (part.slot, data);
    }
    let follower = part.replica_id >= 0;
    if follower && part.offset <= partition.log.log_end_offset() {
        let fetched = partition.record_follower_fetch(
            part.replica_id,
            part.replica_epoch,
            part.offset,
            now_ms(),
        );
        if !fetched {
            data.error_code = code(ResponseError::NotLeaderOrFollower);
            return (part.slot, data);
        }
        if partition.may_join_isr(part.replica_id, part.offset) {
            shard.isr_wanted.notify_all();
        }
    }
    // A replica the topic throttles (KIP-73) gets nothing while this shard's share of
    // `leader.replication.throttled.rate` is spent; what it gets is counted against it.
    let throttled = follower && partition.throttles_leader_traffic(part.replica_id);
    let rate = || shard.throttle_rate("leader.replication.throttled.rate");
    let cap_bytes = if throttled && !shard.leader_throttle.allows(rate(), Instant::now()) {
        0
    } else {
        cap_bytes
    };
    let result = if cap_bytes == 0 {
        // Out of budget: no records, but an offset out of range is still an error.
        let (start, end) = (
            partition.log.log_start_offset(),
            partition.log.log_end_offset(),
        );
        if (start..=end).contains(&part.offset) {
            Ok(Some(Bytes::new()))
        } else {
            Err(ReadError::OffsetOutOfRange {
                offset: part.offset,
                log_start_offset: start,
                log_end_offset: end,
            })
        }
    } else if follower {
        partition
            .read_for_follower(part.offset, cap_bytes)
            .await
            .map(|read| Some(read.records))
    } else {
        partition
            .read(part.offset, cap_bytes)
            .await
            .map(|read| Some(read.records))
    };
    let high_watermark = partition.high_watermark();
    data.high_watermark = high_watermark;
    data.last_stable_offset = high_watermark;
    data.log_start_offset = partition.log.log_start_offset();
    if throttled {
        let sent = result
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map_or(0, Bytes::len);
        shard.leader_throttle.take(sent);
    }
    match result {
        Ok(records) => data.records = records,
        Err(ReadError::OffsetOutOfRange { .. }) => {
            data.error_code = code(ResponseError::OffsetOutOfRange)
        }
        Err(error) => data.error_code = errors::read_error(&error),
    }
    (part.slot, data)
}

/// The endpoints of the leaders that partitions refused as not led here name (v16,
/// KIP-951), so that a client goes straight to them.
fn leader_endpoints(shard: &Shard, response: &FetchResponse) -> Vec<NodeEndpoint> {
    let leaders: Vec<i32> = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter(|p| p.error_code != NONE)
        .map(|p| p.current_leader.leader_id.0)
        .collect();
    super::leader_endpoints(shard, leaders)
        .into_iter()
        .map(|leader| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(leader.node_id))
                .with_host(StrBytes::from_string(leader.host))
                .with_port(leader.port)
                .with_rack(leader.rack.map(StrBytes::from_string))
        })
        .collect()
}

/// Kafka's check of a fetch's `last_fetched_epoch` against the leader's log: the epoch and
/// its end offset here if the fetcher's log cannot be a prefix of this one (the epoch ends
/// before the fetch offset, or this log never had it).
fn diverging_epoch(partition: &crate::partition::Partition, part: &Part) -> Option<(i32, i64)> {
    if part.last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end_offset) = partition
        .log
        .end_offset_for_epoch(part.last_fetched_epoch)
        .unwrap_or((-1, -1));
    (epoch < part.last_fetched_epoch || end_offset < part.offset).then_some((epoch, end_offset))
}

/// Returns once any owner sees one of its parts' partitions grow past the fetch offset,
/// or at `deadline`.
async fn wait_for_data(shard: &Rc<Shard>, parts_by_owner: &[Vec<Part>], deadline: Instant) {
    let woken = Rc::new(Notify::new());
    let before = woken.generation();
    for (owner, parts) in parts_by_owner.iter().enumerate() {
        if parts.is_empty() {
            continue;
        }
        let (shard, parts, woken) = (shard.clone(), parts.clone(), woken.clone());
        glommio::spawn_local(async move {
            let job = move |owner: Rc<Shard>| wait_on_owner(owner, parts, deadline);
            let _ = shard.router.call(&shard, owner, job).await;
            woken.notify_all();
        })
        .detach();
    }
    let timer = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
    futures_lite::future::or(woken.changed_since(before), timer).await;
}

/// Runs on the owning shard: waits until a part's partition has visible data past what the
/// fetch has seen of it (`Part::seen_end`), the deadline passes, or the shard stops.
async fn wait_on_owner(shard: Rc<Shard>, parts: Vec<Part>, deadline: Instant) {
    let follower = parts.first().is_some_and(|part| part.replica_id >= 0);
    let partitions: Vec<_> = parts
        .iter()
        .filter_map(|part| {
            shard
                .partition(&part.topic, part.partition)
                .map(|p| (p, part.seen_end))
        })
        .collect();
    let stopping = shard.stopping.generation();
    // A follower wakes for new writes (and a change of leadership, which fires the same
    // signal); a consumer for the high watermark.
    fn signal(p: &crate::partition::Partition, follower: bool) -> &shard::Notify {
        if follower {
            &p.written_moved
        } else {
            &p.high_watermark_moved
        }
    }
    let generations: Vec<u64> = partitions
        .iter()
        .map(|(p, _)| signal(p, follower).generation())
        .collect();
    // What a consumer may read ends at the high watermark, what a follower may at the
    // completed writes.
    let visible_end = |p: &crate::partition::Partition| {
        if follower {
            p.log.written_end_offset()
        } else {
            p.high_watermark()
        }
    };
    // Checked after reading the generations, so an append in between is never missed.
    if partitions
        .iter()
        .any(|(p, seen_end)| visible_end(p) > *seen_end)
        || shard.is_stopped()
    {
        return;
    }
    let mut changes: Vec<_> = partitions
        .iter()
        .zip(&generations)
        .map(|((partition, _), generation)| signal(partition, follower).changed_since(*generation))
        .collect();
    let mut stop = shard.stopping.changed_since(stopping);
    let any_change = futures_lite::future::poll_fn(|cx| {
        if Pin::new(&mut stop).poll(cx).is_ready() {
            return Poll::Ready(());
        }
        for change in changes.iter_mut() {
            if Pin::new(change).poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    });
    let timer = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
    futures_lite::future::or(any_change, timer).await;
}

/// Keeps whole batches, in request order, until `max_bytes`; the first batch of the first
/// non-empty partition is always kept, however large (KIP-74), so a consumer can progress.
fn trim_to(response: &mut FetchResponse, max_bytes: usize) {
    let mut used_bytes = 0usize;
    for topic in &mut response.responses {
        for partition in &mut topic.partitions {
            let Some(records) = partition.records.as_mut() else {
                continue;
            };
            if records.is_empty() {
                continue;
            }
            let room_bytes = max_bytes.saturating_sub(used_bytes);
            let keep_bytes = if used_bytes == 0 {
                whole_batches_within(records, room_bytes).max(first_batch_bytes(records))
            } else {
                whole_batches_within(records, room_bytes)
            };
            records.truncate(keep_bytes);
            used_bytes += keep_bytes;
        }
    }
}

/// Bytes of the longest prefix of `records` made of whole batches and at most `limit` long.
pub(crate) fn whole_batches_within(records: &[u8], limit: usize) -> usize {
    let mut position = 0;
    while position < records.len() {
        let Ok(header) = BatchHeader::parse(&records[position..]) else {
            break;
        };
        let next = position + header.total_bytes();
        if next > limit || next > records.len() || header.total_bytes() == 0 {
            break;
        }
        position = next;
    }
    position
}

fn first_batch_bytes(records: &[u8]) -> usize {
    BatchHeader::parse(records).map_or(records.len(), |h| h.total_bytes().min(records.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two fake batches: only the length fields matter for trimming.
    fn batches(sizes: &[usize]) -> Bytes {
        let mut out = Vec::new();
        for size in sizes {
            let mut batch = vec![0u8; *size];
            batch[8..12].copy_from_slice(&((*size - 12) as i32).to_be_bytes());
            batch[16] = 2; // magic
            out.extend_from_slice(&batch);
        }
        Bytes::from(out)
    }

    fn response(partitions: &[&[usize]]) -> FetchResponse {
        let partitions = partitions
            .iter()
            .map(|sizes| PartitionData::default().with_records(Some(batches(sizes))))
            .collect();
        FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default().with_partitions(partitions)
        ])
    }

    fn kept(response: &FetchResponse) -> Vec<usize> {
        response.responses[0]
            .partitions
            .iter()
            .map(|p| p.records.as_ref().map_or(0, Bytes::len))
            .collect()
    }

    #[test]
    fn trims_at_batch_boundaries_in_request_order() {
        let mut fetched = response(&[&[100, 100], &[100]]);
        trim_to(&mut fetched, 250);
        assert_eq!(kept(&fetched), vec![200, 0]);
    }

    #[test]
    fn always_keeps_the_first_batch() {
        let mut fetched = response(&[&[], &[500, 100], &[100]]);
        trim_to(&mut fetched, 10);
        assert_eq!(kept(&fetched), vec![0, 500, 0]);
    }
}
