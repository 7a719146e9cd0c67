//! Log retention on each shard: every `log.retention.check.interval.ms`, the shard deletes
//! from each of its partitions what the topic's `retention.ms` and `retention.bytes` let go
//! (whole segments, oldest first; see `storage::Retention`).
//!
//! Invariants: only topics whose `cleanup.policy` includes `delete` lose data this way (a
//! compacted topic such as `__consumer_offsets` keeps its segments); settings are read from
//! the metadata image at each pass, so a topic's new values apply from the next pass; a
//! partition whose log fails is skipped and logged, never stopping the others.

use std::rc::Rc;

use storage::{Deleted, Retention};

use crate::metadata::TopicMeta;
use crate::request::now_ms;
use crate::shard_state::Shard;

/// Runs retention passes until the task is cancelled.
pub async fn enforce_forever(shard: Rc<Shard>) {
    loop {
        glommio::timer::sleep(shard.config.retention_check_interval).await;
        enforce_once(&shard).await;
    }
}

/// One pass over the shard's partitions; what it deleted, summed.
pub async fn enforce_once(shard: &Shard) -> Deleted {
    let image = shard.image();
    let mut total = Deleted::default();
    for (name, partition) in shard.owned_partitions_by_topic() {
        let Some(topic) = image.topic(&name).filter(|t| t.id == partition.topic_id) else {
            continue;
        };
        let Some(retention) = retention_of(shard, topic) else {
            continue;
        };
        match partition.log.apply_retention(retention, now_ms()).await {
            Ok(deleted) => {
                total.segments += deleted.segments;
                total.bytes += deleted.bytes;
            }
            Err(error) => {
                tracing::warn!(topic = name, partition = partition.index, %error, "retention failed");
            }
        }
    }
    total
}

/// The topic's retention, or `None` when its cleanup policy does not delete.
fn retention_of(shard: &Shard, topic: &TopicMeta) -> Option<Retention> {
    if !shard.cleans_by(topic, "delete") {
        return None;
    }
    let limit = |key: &str| {
        shard
            .topic_setting(topic, key)
            .and_then(|value| value.parse::<i64>().ok())
            .unwrap_or(-1)
    };
    Some(Retention {
        ms: limit("retention.ms"),
        bytes: limit("retention.bytes"),
    })
}
