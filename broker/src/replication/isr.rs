//! The ISR, kept by each leader: a shard proposes, for the partitions it leads, to drop
//! followers that have not caught up for `replica.lag.time.max.ms` and to add back those
//! that reached the high watermark (Kafka's AlterPartition, through the controller).
//!
//! Invariants: a partition has at most one change in flight, computed at its current leader
//! and partition epochs (the controller refuses a stale one); until an image settles it,
//! the high watermark counts the old and the proposed ISR together (`ReplicaSet`). A pass
//! sends all the shard's due changes in one AlterPartition request (one commit). Checks run
//! every half lag limit, as Kafka's do, and at once when a follower outside the ISR reaches
//! the high watermark. A shard that could not check for longer than the lag limit (the
//! process was paused or starved) shrinks nothing on its first check back: its followers'
//! fetches could not be served meanwhile, so their silence says nothing about them. Time a
//! pass spends waiting on the controller (out of reach, say) is not such a stall.

use std::rc::Rc;

use crate::controller::Controller;
use crate::shard_state::Shard;

/// Keeps the ISRs of the partitions this shard leads until the shard stops.
pub async fn maintain_forever(shard: Rc<Shard>) {
    let lag_max = shard.config.replica_fetch.lag_time_max;
    // When the last pass ended: the time to the next pass is the wait, plus however long
    // the shard could not run. A pass that waits on the controller (which may be out of
    // reach) is not a stall of the shard, so it does not count.
    let mut last_pass_end = std::time::Instant::now();
    loop {
        let generation = shard.isr_wanted.generation();
        if shard.is_stopped() {
            return;
        }
        if last_pass_end.elapsed() > lag_max {
            tracing::info!(stalled = ?last_pass_end.elapsed(), "ISR checks were stalled: no shrink this time");
            for partition in shard.owned_partitions() {
                partition.forgive_lag();
            }
        }
        propose_changes(&shard).await;
        last_pass_end = std::time::Instant::now();
        futures_lite::future::or(
            glommio::timer::sleep(lag_max / 2),
            shard.isr_wanted.changed_since(generation),
        )
        .await;
    }
}

/// Proposes every ISR change due on this shard's partitions, in one request.
async fn propose_changes(shard: &Rc<Shard>) {
    let image = shard.image();
    let lag_max_ms = shard.config.replica_fetch.lag_time_max.as_millis() as i64;
    // KIP-903: a replica joins only as the incarnation the metadata registers (a fetch that
    // named none, from a broker before Fetch v15, is taken at its word).
    let eligible = |id: i32, epoch: i64| {
        image
            .live_broker(id)
            .is_some_and(|broker| epoch == -1 || broker.epoch == epoch)
    };
    let mut due = Vec::new();
    for (topic, partition) in shard.owned_partitions_by_topic() {
        let Some(change) = partition.isr_change(lag_max_ms, eligible) else {
            continue;
        };
        tracing::info!(topic, partition = partition.index, isr = ?change.isr, "proposing an ISR");
        partition.propose_isr(change.isr.clone());
        due.push((topic, partition, change));
    }
    if due.is_empty() {
        return;
    }
    let changes = due
        .iter()
        .map(|(_, p, change)| (p.topic_id, p.index, change.clone()))
        .collect();
    let job = move |zero: Rc<Shard>| async move { Controller::change_isrs(&zero, changes).await };
    let outcomes = match shard.router.call(shard, 0, job).await {
        Ok(Ok(outcomes)) => outcomes,
        Ok(Err(refusal)) => due.iter().map(|_| Err(refusal.clone())).collect(),
        Err(_) => {
            for (_, partition, _) in &due {
                partition.abandon_isr();
            }
            return;
        }
    };
    for ((topic, partition, _), outcome) in due.iter().zip(outcomes) {
        // An accepted change is settled by the image that carries it.
        if let Err(refusal) = outcome {
            tracing::info!(
                topic,
                partition = partition.index,
                message = refusal.message,
                "ISR change refused"
            );
            partition.abandon_isr();
        }
    }
}
