//! Idempotent producers on one shard: the producer ids it hands out, and the expiry of idle
//! producers in the partitions it owns.
//!
//! Producer ids come in blocks of [`PRODUCER_ID_BLOCK_SIZE`] that the controller commits to
//! the metadata as taken (a ProducerIds record) before handing them over, as Kafka's
//! controller does for its brokers; each shard takes its own block and gives out ids from
//! it without asking anyone, so InitProducerId crosses to shard 0 once per block. A restart
//! forgets the rest of every block, so no id is ever given out twice.
//!
//! Invariants: ids from one shard's block are given out at most once (`next` only grows, on
//! this shard's thread); one block request at a time per shard (a FIFO of turns), so
//! concurrent callers never waste a block each.

use std::cell::Cell;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use shard::Turns;

use crate::controller::{Controller, ProducerIdBlock, PRODUCER_ID_BLOCK_SIZE};
use crate::errors::code;
use crate::request::now_ms;
use crate::shard_state::Shard;

/// The producer ids a shard has left: `[next, end)`.
pub struct ProducerIds {
    next: Cell<i64>,
    end: Cell<i64>,
    /// Callers waiting for a block, in order.
    refill: Rc<Turns>,
}

impl Default for ProducerIds {
    fn default() -> Self {
        ProducerIds {
            next: Cell::new(0),
            end: Cell::new(0),
            refill: Turns::new(),
        }
    }
}

impl ProducerIds {
    fn take(&self) -> Option<i64> {
        let next = self.next.get();
        if next >= self.end.get() {
            return None;
        }
        self.next.set(next + 1);
        Some(next)
    }

    fn install(&self, block: ProducerIdBlock) {
        assert!(
            block.first >= self.end.get() && block.size > 0,
            "producer id blocks only move forward: {block:?} after {}",
            self.end.get()
        );
        self.next.set(block.first);
        self.end.set(block.first + block.size);
    }

    /// A producer id never given out before, or the Kafka error why none can be had.
    pub async fn generate(shard: &Rc<Shard>) -> Result<i64, i16> {
        let ids = &shard.producer_ids;
        if let Some(id) = ids.take() {
            return Ok(id);
        }
        let turn = ids.refill.take();
        turn.wait().await;
        // Whoever had the turn before may have refilled the block already.
        if let Some(id) = ids.take() {
            return Ok(id);
        }
        match Controller::allocate_producer_ids_from(shard, shard.config.node_id).await {
            Ok(Ok(block)) => {
                debug_assert_eq!(block.size, PRODUCER_ID_BLOCK_SIZE);
                tracing::debug!(shard = shard.id(), first = block.first, "producer id block");
                ids.install(block);
                Ok(ids.take().expect("a fresh block holds ids"))
            }
            Ok(Err(refusal)) => {
                tracing::error!(reason = refusal.message, "no producer id block");
                Err(refusal.error_code)
            }
            Err(stopped) => {
                tracing::warn!(%stopped, "no producer id block");
                Err(code(ResponseError::CoordinatorNotAvailable))
            }
        }
    }
}

/// Every `producer.id.expiration.check.interval.ms`, forgets the producers of this shard's
/// partitions that appended nothing for `producer.id.expiration.ms`, until cancelled.
pub async fn expire_forever(shard: Rc<Shard>) {
    loop {
        glommio::timer::sleep(shard.config.producer_id_expiration_check_interval).await;
        let now = now_ms();
        for partition in shard.owned_partitions() {
            partition.log.expire_producers(now);
        }
    }
}
