//! The high-watermark checkpoint, Kafka's `replication-offset-checkpoint`: one file per log
//! directory naming each partition's high watermark, written by shard 0 every
//! `replica.high.watermark.checkpoint.interval.ms` from what every shard reports, and read
//! by each shard when it starts.
//!
//! Invariants: the file is replaced atomically (`storage::OffsetCheckpoint::write`); a
//! replicated partition opens with the smaller of its checkpointed high watermark (0 when
//! it has none) and its log's completed writes, so after a restart a consumer sees nothing
//! the ISR had not acknowledged before it, even though the local log may hold more; the
//! watermark then moves as the ISR's fetches prove it may. A partition with one replica
//! opens at its completed writes: the node alone is its ISR. A checkpoint entry is used
//! once, at the first open of its partition.

use std::collections::HashMap;
use std::rc::Rc;

use storage::{OffsetCheckpoint, PartitionOffset, REPLICATION_OFFSET_CHECKPOINT_FILE};

use crate::shard_state::Shard;

/// High watermarks read at start, by (topic, partition), until their partition opens.
pub type CheckpointedHighWatermarks = HashMap<(String, i32), i64>;

/// The high watermark a partition opens with: see the module's invariants.
pub fn initial_high_watermark(replicas: usize, checkpointed: Option<i64>, written_end: i64) -> i64 {
    if replicas <= 1 {
        return written_end;
    }
    checkpointed.unwrap_or(0).clamp(0, written_end)
}

/// Reads the log directory's checkpoint; an unreadable one counts as none (every
/// replicated partition then opens at 0 and catches up), with a warning.
pub async fn read(shard: &Shard) -> CheckpointedHighWatermarks {
    let path = shard
        .config
        .log_dir
        .join(REPLICATION_OFFSET_CHECKPOINT_FILE);
    match OffsetCheckpoint::read(&path).await {
        Ok(entries) => entries
            .into_iter()
            .map(|e| ((e.topic, e.partition), e.offset))
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "the high-watermark checkpoint is unreadable: ignored");
            HashMap::new()
        }
    }
}

/// Shard 0: writes the checkpoint every interval until cancelled, having first removed
/// what a crash in an earlier write left behind.
pub async fn write_forever(shard: Rc<Shard>) {
    let path = shard
        .config
        .log_dir
        .join(REPLICATION_OFFSET_CHECKPOINT_FILE);
    match OffsetCheckpoint::remove_leftovers(&path) {
        Ok(removed) if !removed.is_empty() => {
            tracing::info!(
                ?removed,
                "removed what an interrupted checkpoint write left"
            )
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "leftovers of a checkpoint write stay"),
    }
    loop {
        glommio::timer::sleep(
            shard
                .config
                .replica_fetch
                .high_watermark_checkpoint_interval,
        )
        .await;
        if let Err(error) = write_once(&shard).await {
            tracing::warn!(%error, "writing the high-watermark checkpoint failed");
        }
    }
}

/// Gathers every shard's high watermarks and replaces the checkpoint with them.
pub async fn write_once(shard: &Rc<Shard>) -> Result<(), storage::StorageError> {
    let mut entries: Vec<PartitionOffset> = Vec::new();
    for owner in 0..shard.router.shard_count() {
        let job = |owner: Rc<Shard>| async move {
            owner
                .owned_partitions_by_topic()
                .into_iter()
                .map(|(topic, partition)| PartitionOffset {
                    topic,
                    partition: partition.index,
                    offset: partition.high_watermark(),
                })
                .collect::<Vec<_>>()
        };
        match shard.router.call(shard, owner, job).await {
            Ok(mut owned) => entries.append(&mut owned),
            Err(_) => return Ok(()), // stopping: the last checkpoint stands
        }
    }
    entries.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let path = shard
        .config
        .log_dir
        .join(REPLICATION_OFFSET_CHECKPOINT_FILE);
    OffsetCheckpoint::write(&path, &entries).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicated_partition_opens_at_its_checkpoint_and_a_lone_one_at_its_writes() {
        assert_eq!(initial_high_watermark(1, Some(3), 10), 10);
        assert_eq!(initial_high_watermark(3, Some(7), 10), 7);
        assert_eq!(
            initial_high_watermark(3, Some(12), 10),
            10,
            "never past the log"
        );
        assert_eq!(initial_high_watermark(3, None, 10), 0);
    }
}
