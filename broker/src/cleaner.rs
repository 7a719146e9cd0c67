//! Log compaction on each shard (Kafka's log cleaner): every `log.cleaner.backoff.ms`, the
//! shard cleans those of its partitions whose topic's `cleanup.policy` includes `compact`
//! and whose log is dirty enough (see `storage::Log::clean`). It runs on a task queue of its
//! own with a small share, so produce and fetch keep the shard when they need it.
//!
//! Invariants: a partition is cleaned when its dirty ratio reaches `min.cleanable.dirty.ratio`,
//! when its oldest dirty segment is older than `max.compaction.lag.ms`, or when tombstones an
//! earlier pass kept are due; never past its high watermark (a follower may still truncate
//! above it) nor into a segment younger than `min.compaction.lag.ms`; settings are read from
//! the metadata image at each pass; each shard's offset map gets an equal share of
//! `log.cleaner.dedupe.buffer.size`; a partition whose log fails is skipped and logged,
//! never stopping the others.

use std::rc::Rc;

use glommio::{Latency, Shares};
use storage::{CleanPolicy, CleanStats};

use crate::metadata::TopicMeta;
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

/// Runs cleaning passes until the task is cancelled.
pub async fn clean_forever(shard: Rc<Shard>) {
    loop {
        glommio::timer::sleep(shard.config.cleaner_backoff).await;
        clean_once(&shard).await;
    }
}

/// One pass over the shard's compacted partitions; what it did, summed.
pub async fn clean_once(shard: &Shard) -> CleanStats {
    let image = shard.image();
    let mut total = CleanStats::default();
    for (name, partition) in shard.owned_partitions_by_topic() {
        let Some(topic) = image.topic(&name).filter(|t| t.id == partition.topic_id) else {
            continue;
        };
        let Some(settings) = settings_of(shard, topic) else {
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
        if !(dirty_enough || overdue || cleanable.tombstones_due) {
            continue;
        }
        let started = std::time::Instant::now();
        match partition.log.clean(policy, now).await {
            Ok(stats) => {
                // Every round that read segments, with its time (the offset map's included),
                // so that the cleaner's throughput can be read off the log as Kafka's
                // "MB of log processed in N seconds".
                if stats.bytes_read > 0 {
                    tracing::info!(
                        shard = shard.id(),
                        topic = name,
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
                total.segments_rewritten += stats.segments_rewritten;
                total.bytes_read += stats.bytes_read;
                total.bytes_before += stats.bytes_before;
                total.bytes_after += stats.bytes_after;
                total.records_removed += stats.records_removed;
                total.batches_removed += stats.batches_removed;
                total.keys += stats.keys;
            }
            Err(error) => {
                let index = partition.index;
                tracing::warn!(topic = name, partition = index, %error, "cleaning failed");
            }
        }
    }
    total
}

/// A compacted topic's cleaning settings.
struct Settings {
    policy: CleanPolicy,
    min_dirty_ratio: f64,
    max_lag_ms: i64,
}

/// The topic's cleaning settings, or `None` when its cleanup policy does not compact.
fn settings_of(shard: &Shard, topic: &TopicMeta) -> Option<Settings> {
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
    let shards = shard.router.shard_count().max(1);
    Some(Settings {
        policy: CleanPolicy {
            dedupe_buffer_bytes: shard.config.cleaner_dedupe_buffer_bytes / shards,
            min_compaction_lag_ms: ms("min.compaction.lag.ms", 0),
            delete_retention_ms: ms("delete.retention.ms", 86_400_000),
            end_offset_max: i64::MAX,
        },
        min_dirty_ratio,
        max_lag_ms: ms("max.compaction.lag.ms", i64::MAX),
    })
}
