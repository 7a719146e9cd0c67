//! A shard's replica fetchers: one task per leader the shard follows partitions of, each
//! sending that leader one Fetch at a time for all of them, through the client crate.
//!
//! Invariants:
//! - At most one fetcher per (shard, leader): `Fetchers::running` holds the leaders that
//!   have one, and a fetcher leaves it in the same step in which it finds nothing left to
//!   follow, so a partition handed to that leader later always finds a fetcher.
//! - What a fetch brings is applied only to a partition that still follows the same leader
//!   at the same leader epoch as when the fetch was sent; batches are appended as the leader
//!   stored them (`Log::append_replicated`), in fetch order.
//! - A divergent tail is cut where the leader's log and this one last agree (the leader's
//!   diverging epoch, Fetch v12), never below the log start; the partition's high watermark
//!   follows the cut.
//! - A partition that failed is left out of fetches for `replica.fetch.backoff.ms`; a
//!   failed connection, or one that left a fetch unanswered for
//!   `replica.socket.timeout.ms`, is dropped and retried after the same backoff. A leader
//!   that does not know the partition yet (its metadata behind this node's, as right after
//!   the topic's creation) is asked again sooner: after `LEADER_BEHIND_PAUSE`, doubled for
//!   each such answer in a row, up to the backoff.
//! - With `replica.fsync.before.fetch`, a fetch's offset never passes what is fdatasynced
//!   here: the appended batches are synced (one group commit per fetch answer) first.
//! - A partition this shard comes to follow from the leader while a fetch waits there (a
//!   new topic, a moved leadership) is fetched at once: the waiting fetch, which does not
//!   name it, is abandoned with its connection rather than waited out
//!   (`replica.fetch.wait.max.ms`).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use bytes::Bytes;
use client::Connection;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use shard::Notify;
use storage::{AppendError, StorageError};

use crate::errors::code;
use crate::partition::{Leadership, Partition};
use crate::request::fetch::whole_batches_within;
use crate::request::now_ms;
use crate::shard_state::Shard;

/// The fetchers of one shard.
#[derive(Default)]
pub struct Fetchers {
    /// Fired when the partitions this shard follows may have changed (an image installed)
    /// and when the shard stops.
    pub followed_changed: Notify,
    /// Leaders a fetcher runs for.
    running: RefCell<BTreeSet<i32>>,
}

/// Starts a fetcher for every leader the shard follows partitions of, as images come, until
/// the shard stops.
pub async fn follow_forever(shard: Rc<Shard>) {
    loop {
        let generation = shard.fetchers.followed_changed.generation();
        if shard.is_stopped() {
            return;
        }
        for leader in shard.followed_leaders() {
            if shard.fetchers.running.borrow_mut().insert(leader) {
                glommio::spawn_local(fetch_from(shard.clone(), leader)).detach();
            }
        }
        shard
            .fetchers
            .followed_changed
            .changed_since(generation)
            .await;
    }
}

async fn fetch_from(shard: Rc<Shard>, leader: i32) {
    let mut fetcher = Fetcher {
        shard,
        leader,
        connection: None,
        resting: HashMap::new(),
        behind: HashMap::new(),
        fetch_from: HashMap::new(),
    };
    fetcher.run().await;
    fetcher.shard.fetchers.running.borrow_mut().remove(&leader);
}

/// One followed partition in a fetch: its topic's name, the partition, and the leadership
/// the fetch was sent under.
struct Followed {
    topic: String,
    partition: Rc<Partition>,
    leadership: Leadership,
}

type PartitionKey = (String, i32);

/// How a fetch ended.
enum Fetched {
    Answer(FetchResponse),
    /// Left unanswered for a partition the fetch did not name (its connection dropped).
    Abandoned,
    /// The shard stopped.
    Stopped,
}

/// How long a fetcher left with only throttled replicas waits before it looks again.
const THROTTLED_PAUSE: Duration = Duration::from_millis(100);

/// The first pause for a partition its leader answered as unknown to it (see
/// `leader_is_behind`). Metadata reaches the nodes of a cluster within milliseconds of each
/// other; the full backoff (Kafka's default 1 s) would hold every acks=all write to a new
/// topic for that long.
const LEADER_BEHIND_PAUSE: Duration = Duration::from_millis(10);

/// The pause after an answer that says the leader is behind, given the pause the answer
/// before it in a row cost: `LEADER_BEHIND_PAUSE`, doubled each time, never over `backoff`.
fn behind_pause(last: Option<Duration>, backoff: Duration) -> Duration {
    last.map_or(LEADER_BEHIND_PAUSE, |last| last * 2)
        .min(backoff)
}

/// Whether a partition's error says its leader has not yet applied the metadata this node
/// follows it by: the topic or partition unknown there, not its leader yet, or a leader
/// epoch newer than its own.
fn leader_is_behind(error_code: i16) -> bool {
    [
        ResponseError::UnknownTopicId,
        ResponseError::UnknownTopicOrPartition,
        ResponseError::NotLeaderOrFollower,
        ResponseError::UnknownLeaderEpoch,
    ]
    .into_iter()
    .any(|error| code(error) == error_code)
}

struct Fetcher {
    shard: Rc<Shard>,
    leader: i32,
    connection: Option<Connection>,
    /// Partitions left out of fetches until the instant given (after an error).
    resting: HashMap<PartitionKey, Instant>,
    /// Partitions whose last answers said the leader does not know them yet, with the pause
    /// the last of them cost.
    behind: HashMap<PartitionKey, Duration>,
    /// Where to fetch a partition from when that is past its log end: the leader's log
    /// start, for a replica whose whole log is below it.
    fetch_from: HashMap<PartitionKey, i64>,
}

impl Fetcher {
    /// Fetches until the shard stops or follows nothing of this leader.
    async fn run(&mut self) {
        let backoff = self.shard.config.replica_fetch.backoff;
        loop {
            if self.shard.is_stopped() {
                return;
            }
            let followed_generation = self.shard.fetchers.followed_changed.generation();
            let all = self.shard.followed_from(self.leader);
            if all.is_empty() {
                return;
            }
            if !self.behind.is_empty() {
                self.behind.retain(|(topic, index), _| {
                    all.iter().any(|(t, p)| t == topic && p.index == *index)
                });
            }
            let now = Instant::now();
            self.resting.retain(|_, until| *until > now);
            // Replicas the topic throttles (KIP-73) sit out while this shard's share of
            // `follower.replication.throttled.rate` is spent.
            let rate = self
                .shard
                .throttle_rate("follower.replication.throttled.rate");
            let throttled_out = !self.shard.follower_throttle.allows(rate, now);
            let mut sitting_out = 0;
            // Every partition not resting, throttled ones included: what this fetch leaves
            // out only while it rests is not news to it.
            let mut known: Vec<Rc<Partition>> = Vec::new();
            let followed: Vec<Followed> = all
                .into_iter()
                .filter(|(topic, p)| !self.resting.contains_key(&(topic.clone(), p.index)))
                .inspect(|(_, p)| known.push(p.clone()))
                .filter(|(_, p)| {
                    let sits_out = throttled_out && p.throttles_follower_traffic();
                    sitting_out += usize::from(sits_out);
                    !sits_out
                })
                .map(|(topic, partition)| Followed {
                    topic,
                    leadership: partition.leadership(),
                    partition,
                })
                .collect();
            if followed.is_empty() {
                let mut next = self
                    .resting
                    .values()
                    .min()
                    .copied()
                    .unwrap_or(now + backoff);
                // Throttled replicas sat out: look again once the bucket may have refilled.
                if sitting_out > 0 {
                    next = next.min(now + THROTTLED_PAUSE);
                }
                self.pause(next.saturating_duration_since(now)).await;
                continue;
            }
            match self.fetch(&followed, &known, followed_generation).await {
                Ok(Fetched::Answer(response)) => self.apply(response, &followed).await,
                Ok(Fetched::Abandoned) => {}
                Ok(Fetched::Stopped) => return,
                Err(error) => {
                    tracing::warn!(leader = self.leader, %error, "replica fetch failed");
                    self.connection = None;
                    self.pause(backoff).await;
                }
            }
        }
    }

    /// Sleeps for `duration`, or less if the followed partitions change or the shard stops.
    async fn pause(&self, duration: Duration) {
        let changed = &self.shard.fetchers.followed_changed;
        let generation = changed.generation();
        futures_lite::future::or(
            glommio::timer::sleep(duration),
            changed.changed_since(generation),
        )
        .await;
    }

    /// One Fetch for every partition in `followed`, unless the shard stops first, or a
    /// partition of this leader outside `known` (this shard's followed partitions as of
    /// `followed_changed`'s `generation`, less those resting) wants fetching first: one it
    /// came to follow, or one whose rest ended.
    async fn fetch(
        &mut self,
        followed: &[Followed],
        known: &[Rc<Partition>],
        generation: u64,
    ) -> Result<Fetched> {
        let connection = match self.connection.take() {
            Some(connection) => connection,
            None => self.connect().await?,
        };
        let version = connection.version::<FetchRequest>()?;
        let request = self.request(followed, version);
        let connection = self.connection.insert(connection);
        let stopping = self.shard.stopping.generation();
        let stopped = async {
            self.shard.stopping.changed_since(stopping).await;
            Fetched::Stopped
        };
        let (shard, leader, resting) = (&self.shard, self.leader, &self.resting);
        // Looks again at each image and when a rest ends; nothing to look at before either.
        let grown = async {
            let changed = &shard.fetchers.followed_changed;
            let (mut generation, mut rest_ends) = (generation, resting.values().min().copied());
            loop {
                let rested = async {
                    match rest_ends {
                        Some(end) => {
                            let left = end.saturating_duration_since(Instant::now());
                            glommio::timer::sleep(left).await;
                        }
                        None => futures_lite::future::pending().await,
                    }
                };
                futures_lite::future::or(changed.changed_since(generation), rested).await;
                generation = changed.generation();
                let now = Instant::now();
                rest_ends = None;
                for (topic, partition) in shard.followed_from(leader) {
                    if known.iter().any(|k| Rc::ptr_eq(k, &partition)) {
                        continue;
                    }
                    match resting.get(&(topic, partition.index)) {
                        Some(&until) if until > now => {
                            rest_ends = Some(rest_ends.map_or(until, |end| end.min(until)));
                        }
                        _ => return Fetched::Abandoned,
                    }
                }
            }
        };
        // A connection's answer is bounded by replica.socket.timeout.ms; past it the caller
        // drops the connection and connects again.
        let timeout = self.shard.config.replica_fetch.socket_timeout;
        let answered = async {
            let answer = connection.call_with_timeout(version, &request, timeout);
            answer.await.map(Fetched::Answer)
        };
        let fetched = futures_lite::future::or(answered, async {
            Ok(futures_lite::future::or(stopped, grown).await)
        })
        .await;
        if matches!(fetched, Ok(Fetched::Abandoned)) {
            // Its answer would come on this connection after the next request's turn.
            self.connection = None;
        }
        fetched
    }

    async fn connect(&self) -> Result<Connection> {
        let address = {
            let image = self.shard.image();
            let broker = image
                .live_broker(self.leader)
                .ok_or_else(|| anyhow!("broker {} is not live", self.leader))?;
            let endpoint = broker
                .endpoint()
                .ok_or_else(|| anyhow!("broker {} has no endpoint", self.leader))?;
            format!("{}:{}", endpoint.host, endpoint.port)
        };
        Connection::connect(&address, "ringlog-replica-fetcher").await
    }

    fn request(&self, followed: &[Followed], version: i16) -> FetchRequest {
        let limits = &self.shard.config.replica_fetch;
        let mut topics: Vec<FetchTopic> = Vec::new();
        for item in followed {
            let log = &item.partition.log;
            let key = (item.topic.clone(), item.partition.index);
            let offset = log
                .log_end_offset()
                .max(self.fetch_from.get(&key).copied().unwrap_or(-1));
            let partition = FetchPartition::default()
                .with_partition(item.partition.index)
                .with_current_leader_epoch(if version >= 9 {
                    item.leadership.leader_epoch
                } else {
                    -1
                })
                .with_fetch_offset(offset)
                .with_last_fetched_epoch(if version >= 12 {
                    log.latest_epoch().unwrap_or(-1)
                } else {
                    -1
                })
                .with_log_start_offset(log.log_start_offset())
                .with_partition_max_bytes(limits.partition_bytes_max);
            match topics
                .iter_mut()
                .find(|t| t.topic_id == item.partition.topic_id)
            {
                Some(topic) => topic.partitions.push(partition),
                // Named both ways: by name up to v12, by id from v13 (KIP-516).
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(client::topic_name(&item.topic))
                        .with_topic_id(item.partition.topic_id)
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let node_id = self.shard.config.node_id;
        // From v15 the follower names its incarnation too (KIP-903).
        let (replica_id, replica_state) = if version >= 15 {
            let broker_epoch = self
                .shard
                .image()
                .brokers
                .get(&node_id)
                .map_or(-1, |b| b.epoch);
            let state = ReplicaState::default()
                .with_replica_id(BrokerId(node_id))
                .with_replica_epoch(broker_epoch);
            (-1, state)
        } else {
            (node_id, ReplicaState::default())
        };
        FetchRequest::default()
            .with_replica_id(BrokerId(replica_id))
            .with_replica_state(replica_state)
            .with_max_wait_ms(limits.wait_max.as_millis() as i32)
            .with_min_bytes(limits.min_bytes)
            .with_max_bytes(limits.response_bytes_max)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics)
    }

    async fn apply<'a>(&mut self, response: FetchResponse, followed: &'a [Followed]) {
        let mut appended: Vec<&'a Followed> = Vec::new();
        if response.error_code != 0 {
            tracing::warn!(
                leader = self.leader,
                error = response.error_code,
                "fetch refused"
            );
            self.pause(self.shard.config.replica_fetch.backoff).await;
            return;
        }
        for topic in response.responses {
            for data in topic.partitions {
                // Topics come back by id from v13, by name before.
                let Some(item) = followed.iter().find(|f| {
                    let same_topic = if topic.topic_id.is_nil() {
                        f.topic.as_str() == topic.topic.0.as_str()
                    } else {
                        f.partition.topic_id == topic.topic_id
                    };
                    same_topic && f.partition.index == data.partition_index
                }) else {
                    continue;
                };
                // The image may have moved the partition while the fetch was out.
                if item.partition.leadership() != item.leadership {
                    continue;
                }
                match self.apply_partition(item, data).await {
                    Ok(appended_here) => {
                        if appended_here {
                            appended.push(item);
                        }
                        if !self.behind.is_empty() {
                            self.behind
                                .remove(&(item.topic.clone(), item.partition.index));
                        }
                    }
                    Err(error) => self.rest(item, &error),
                }
            }
        }
        // The next fetch's offsets tell the leader what these copies hold: with
        // replica.fsync.before.fetch, only once they are on disk (synced together).
        if self.shard.config.replica_fetch.fsync_before_fetch {
            let syncs: Vec<_> = appended
                .iter()
                .map(|item| {
                    let partition = item.partition.clone();
                    glommio::spawn_local(async move { partition.sync().await })
                })
                .collect();
            for (item, sync) in appended.into_iter().zip(syncs) {
                let what = || format!("syncing {}-{}", item.topic, item.partition.index);
                if let Err(error) = client::check(sync.await, None, what) {
                    self.rest(item, &error);
                }
            }
        }
    }

    /// Leaves a partition that failed out of fetches for the backoff, or for less while its
    /// leader only lags behind this node's metadata.
    fn rest(&mut self, item: &Followed, error: &anyhow::Error) {
        tracing::debug!(topic = %item.topic, partition = item.partition.index,
            leader = self.leader, %error, "replica fetch of a partition failed");
        let key = (item.topic.clone(), item.partition.index);
        let backoff = self.shard.config.replica_fetch.backoff;
        let pause = match client::code_of(error) {
            Some(error_code) if leader_is_behind(error_code) => {
                let pause = behind_pause(self.behind.get(&key).copied(), backoff);
                self.behind.insert(key.clone(), pause);
                pause
            }
            _ => backoff,
        };
        self.resting.insert(key, Instant::now() + pause);
    }

    /// Applies one partition's answer; true if it appended batches.
    async fn apply_partition(&mut self, item: &Followed, data: PartitionData) -> Result<bool> {
        let partition = &item.partition;
        let mut appended = false;
        let key = (item.topic.clone(), partition.index);
        if data.error_code == code(ResponseError::OffsetOutOfRange) {
            return self.out_of_range(item, &data).await.map(|()| false);
        }
        if data.error_code != 0 {
            let what = || format!("fetching {}-{}", item.topic, partition.index);
            return client::check(data.error_code, None, what).map(|()| false);
        }
        if data.diverging_epoch.epoch >= 0 {
            let (epoch, end_offset) = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset);
            return truncate_diverging(partition, epoch, end_offset)
                .await
                .map(|()| false);
        }
        if let Some(records) = data.records.filter(|r| !r.is_empty()) {
            if partition.throttles_follower_traffic() {
                self.shard.follower_throttle.take(records.len());
            }
            append(partition, &records).await?;
            self.fetch_from.remove(&key);
            appended = true;
        }
        // The leader's log start (DeleteRecords, retention) moves this one's up to it.
        let start = data.log_start_offset.min(partition.log.log_end_offset());
        if start > partition.log.log_start_offset() {
            partition.log.delete_records_before(start).await?;
        }
        partition.learn_leader_high_watermark(data.high_watermark);
        Ok(appended)
    }

    /// The leader does not hold the fetch offset: below its log start, this replica starts
    /// over at that start; past its end (a log the epochs could not reconcile), it cuts back
    /// to the leader's high watermark.
    async fn out_of_range(&mut self, item: &Followed, data: &PartitionData) -> Result<()> {
        let log = &item.partition.log;
        let key = (item.topic.clone(), item.partition.index);
        let (leader_start, leader_high_watermark) = (data.log_start_offset, data.high_watermark);
        if leader_start >= 0 && log.log_end_offset() < leader_start {
            if log.log_end_offset() > log.log_start_offset() {
                log.truncate_to(log.log_start_offset()).await?;
                item.partition.truncated_to(log.log_start_offset());
            }
            tracing::info!(topic = %item.topic, partition = item.partition.index, leader_start,
                "replica below the leader's log start: fetching from there");
            self.fetch_from.insert(key, leader_start);
            return Ok(());
        }
        let cut = leader_high_watermark.max(log.log_start_offset());
        if cut < log.log_end_offset() {
            tracing::warn!(topic = %item.topic, partition = item.partition.index, cut,
                "replica past the leader's log: truncating to its high watermark");
            log.truncate_to(cut).await?;
            item.partition.truncated_to(cut);
        }
        Ok(())
    }
}

/// Cuts `partition`'s log where it last agrees with the leader, given the leader's
/// diverging `epoch` and the offset that epoch ends at on the leader (Kafka's
/// `getOffsetTruncationState`): if this log has that epoch, to the smaller of both ends;
/// if not, to the end of its largest epoch below it, and the next fetch checks again.
async fn truncate_diverging(partition: &Partition, epoch: i32, leader_end: i64) -> Result<()> {
    let log = &partition.log;
    let cut = match log.end_offset_for_epoch(epoch) {
        Some((own_epoch, own_end)) if own_epoch == epoch => own_end.min(leader_end),
        Some((_, own_end)) => own_end,
        None => leader_end,
    };
    let cut = cut.clamp(log.log_start_offset(), log.log_end_offset());
    tracing::info!(
        partition = partition.index,
        epoch,
        leader_end,
        cut,
        "replica diverged from its leader: truncating"
    );
    log.truncate_to(cut).await?;
    partition.truncated_to(cut);
    Ok(())
}

/// Appends a leader's batches to a follower's log, waiting for room when its write queue is
/// full. A trailing partial batch (a leader may cut one at its size limit) is left for the
/// next fetch.
async fn append(partition: &Partition, records: &Bytes) -> Result<(), AppendError> {
    let whole = &records[..whole_batches_within(records, records.len())];
    if whole.is_empty() {
        return Ok(());
    }
    loop {
        match partition.log.append_replicated(whole, now_ms()) {
            Ok(_) => return Ok(()),
            Err(AppendError::Storage(StorageError::WriteBufferFull { .. })) => {
                partition.log.wait_for_room(whole.len()).await?;
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_behind_on_metadata_is_asked_again_sooner_each_time_up_to_the_backoff() {
        let backoff = Duration::from_millis(1000);
        let mut pauses = vec![behind_pause(None, backoff)];
        while pauses.len() < 9 {
            pauses.push(behind_pause(pauses.last().copied(), backoff));
        }
        let ms: Vec<u128> = pauses.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(behind_pause(None, Duration::from_millis(5)).as_millis(), 5);
    }

    #[test]
    fn only_errors_of_a_leader_that_lags_the_metadata_shorten_the_pause() {
        for error in [
            ResponseError::UnknownTopicId,
            ResponseError::UnknownTopicOrPartition,
            ResponseError::NotLeaderOrFollower,
            ResponseError::UnknownLeaderEpoch,
        ] {
            assert!(leader_is_behind(code(error)), "{error:?}");
        }
        for error in [
            ResponseError::FencedLeaderEpoch,
            ResponseError::KafkaStorageError,
            ResponseError::CorruptMessage,
            ResponseError::UnknownServerError,
        ] {
            assert!(!leader_is_behind(code(error)), "{error:?}");
        }
    }
}
