//! Log compaction on each shard (Kafka's log cleaner): every `log.cleaner.backoff.ms`, the
//! shard cleans those of its partitions whose topic's `cleanup.policy` includes `compact`
//! and whose log is dirty enough (see `storage::Log::clean`), up to `log.cleaner.threads`
//! of them at once. It runs on a task queue of its own with a small share and hands the CPU
//! back every quarter millisecond of its own work (storage's `CpuSlice`), so produce and
//! fetch keep the shard when they need it, within the shard's share of
//! `log.cleaner.io.max.bytes.per.second`, and its reads wait for a pause in the shard's log
//! writes (for at most a few milliseconds), so they do not queue ahead of produce's.
//!
//! Invariants: a partition is cleaned when its dirty ratio reaches `min.cleanable.dirty.ratio`,
//! when its oldest dirty segment is older than `max.compaction.lag.ms`, or when tombstones an
//! earlier pass kept are due; never past its high watermark (a follower may still truncate
//! above it) nor into a segment younger than `min.compaction.lag.ms`; topic and cleaner
//! settings are read from the metadata image at each pass, so a change applies from the
//! next one; each cleaning's offset map gets an equal share of
//! `log.cleaner.dedupe.buffer.size` (`CleanerSettings::dedupe_share`); a partition whose log
//! fails is skipped and logged, never stopping the others.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::{Latency, Shares};
use storage::{CleanPolicy, CleanStats, IoThrottle};

use crate::config::CleanerSettings;
use crate::metadata::TopicMeta;
use crate::partition::Partition;
use crate::request::now_ms;
use crate::shard_state::Shard;

/// The cleaner's share of a busy shard, against 1000 for the default task queue (about 9%).
pub const CLEANER_SHARES: usize = 100;

/// Starts the shard's cleaner on its own task queue; `None` when `log.cleaner.enable` is off.
pub fn start(shard: &Rc<Shard>) -> Option<glommio::Task<()>> {
    if !shard.config.cleaner_enable {
        return None;
    }
    let queue = glommio::executor().create_task_queue(
        Shares::Static(CLEANER_SHARES),
        Latency::NotImportant,
        "cleaner",
    );
    match glommio::spawn_local_into(clean_forever(shard.clone()), queue) {
        Ok(task) => Some(task),
        Err(error) => {
            tracing::error!(%error, "could not start the log cleaner");
            None
        }
    }
}

/// How often a pausing cleaner looks for a change of `log.cleaner.backoff.ms`.
const BACKOFF_CHECK: Duration = Duration::from_secs(1);

/// Runs cleaning passes until the task is cancelled, with the settings of the moment.
pub async fn clean_forever(shard: Rc<Shard>) {
    let throttle = Rc::new(IoThrottle::unlimited());
    loop {
        pause(&shard).await;
        clean_once(&shard, &throttle).await;
    }
}

/// Waits `log.cleaner.backoff.ms`, as it is while waiting: a shorter one set meanwhile
/// ends the pause within `BACKOFF_CHECK`, as Kafka's reconfigured cleaner starts over.
async fn pause(shard: &Shard) {
    let started = Instant::now();
    loop {
        let left = shard
            .cleaner_settings()
            .backoff
            .saturating_sub(started.elapsed());
        if left.is_zero() {
            return;
        }
        glommio::timer::sleep(left.min(BACKOFF_CHECK)).await;
    }
}

/// One pass over the shard's compacted partitions, `log.cleaner.threads` at a time; what it
/// did, summed.
pub async fn clean_once(shard: &Rc<Shard>, throttle: &Rc<IoThrottle>) -> CleanStats {
    let cleaner = shard.cleaner_settings();
    let shards = shard.router.shard_count();
    throttle.set_rate(cleaner.io_share(shards));
    let due = Rc::new(RefCell::new(due_partitions(shard, &cleaner)));
    let total = Rc::new(RefCell::new(CleanStats::default()));
    let threads = cleaner.threads.min(due.borrow().len());
    let queue = glommio::executor().current_task_queue();
    let mut workers = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (shard, due, total, throttle) =
            (shard.clone(), due.clone(), total.clone(), throttle.clone());
        let worker = async move {
            loop {
                let Some(next) = due.borrow_mut().pop() else {
                    break;
                };
                let stats = clean_partition(&shard, next, &throttle).await;
                add(&mut total.borrow_mut(), &stats);
            }
        };
        match glommio::spawn_local_into(worker, queue) {
            Ok(task) => workers.push(task),
            Err(error) => tracing::error!(%error, "could not start a cleaning"),
        }
    }
    for worker in workers {
        worker.await;
    }
    let total = *total.borrow();
    total
}

/// A partition due for cleaning, with how.
struct Due {
    topic: String,
    partition: Rc<Partition>,
    policy: CleanPolicy,
}

/// The shard's partitions due for cleaning now, the last first.
fn due_partitions(shard: &Shard, cleaner: &CleanerSettings) -> Vec<Due> {
    let image = shard.image();
    let dedupe_share = cleaner.dedupe_share(shard.router.shard_count());
    let mut due = Vec::new();
    for (name, partition) in shard.owned_partitions_by_topic() {
        let Some(topic) = image.topic(&name).filter(|t| t.id == partition.topic_id) else {
            continue;
        };
        let Some(settings) = settings_of(shard, topic, dedupe_share) else {
            continue;
        };
        let policy = CleanPolicy {
            end_offset_max: partition.high_watermark(),
            ..settings.policy
        };
        let now = now_ms();
        let cleanable = partition.log.cleanable(policy, now);
        let overdue = cleanable
            .oldest_dirty_timestamp_ms
            .is_some_and(|oldest| now.saturating_sub(oldest) > settings.max_lag_ms);
        let dirty_enough =
            cleanable.dirty_bytes > 0 && cleanable.dirty_ratio() >= settings.min_dirty_ratio;
        if dirty_enough || overdue || cleanable.tombstones_due {
            due.push(Due {
                topic: name,
                partition,
                policy,
            });
        }
    }
    due.reverse();
    due
}

/// Cleans one partition; what it did (nothing if it failed, which is logged).
async fn clean_partition(shard: &Shard, due: Due, throttle: &IoThrottle) -> CleanStats {
    let Due {
        topic,
        partition,
        policy,
    } = due;
    let started = Instant::now();
    match partition.log.clean(policy, now_ms(), throttle).await {
        Ok(stats) => {
            // Every round that read segments, with its time (the offset map's included), so
            // that the cleaner's throughput can be read off the log as Kafka's "MB of log
            // processed in N seconds".
            if stats.bytes_read > 0 {
                tracing::info!(
                    shard = shard.id(),
                    topic,
                    partition = partition.index,
                    segments = stats.segments_rewritten,
                    bytes_read = stats.bytes_read,
                    bytes_before = stats.bytes_before,
                    bytes_after = stats.bytes_after,
                    records_removed = stats.records_removed,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "cleaned log"
                );
            }
            stats
        }
        Err(error) => {
            let index = partition.index;
            tracing::warn!(topic, partition = index, %error, "cleaning failed");
            CleanStats::default()
        }
    }
}

/// Adds what a cleaning did to `total`.
fn add(total: &mut CleanStats, stats: &CleanStats) {
    total.segments_rewritten += stats.segments_rewritten;
    total.bytes_read += stats.bytes_read;
    total.bytes_before += stats.bytes_before;
    total.bytes_after += stats.bytes_after;
    total.records_removed += stats.records_removed;
    total.batches_removed += stats.batches_removed;
    total.keys += stats.keys;
}

/// A compacted topic's cleaning settings.
struct Settings {
    policy: CleanPolicy,
    min_dirty_ratio: f64,
    max_lag_ms: i64,
}

/// The topic's cleaning settings, with an offset map of `dedupe_bytes`, or `None` when its
/// cleanup policy does not compact.
fn settings_of(shard: &Shard, topic: &TopicMeta, dedupe_bytes: usize) -> Option<Settings> {
    if !shard.cleans_by(topic, "compact") {
        return None;
    }
    let ms = |key: &str, fallback: i64| {
        shard
            .topic_setting(topic, key)
            .and_then(|value| value.parse::<i64>().ok())
            .filter(|ms| *ms >= 0)
            .unwrap_or(fallback)
    };
    let min_dirty_ratio = shard
        .topic_setting(topic, "min.cleanable.dirty.ratio")
        .and_then(|value| value.parse::<f64>().ok())
        .unwrap_or(0.5);
    Some(Settings {
        policy: CleanPolicy {
            dedupe_buffer_bytes: dedupe_bytes,
            min_compaction_lag_ms: ms("min.compaction.lag.ms", 0),
            delete_retention_ms: ms("delete.retention.ms", 86_400_000),
            end_offset_max: i64::MAX,
        },
        min_dirty_ratio,
        max_lag_ms: ms("max.compaction.lag.ms", i64::MAX),
    })
}
