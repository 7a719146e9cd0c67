//! Reaching a group's coordinator: the shard that owns the group's `__consumer_offsets`
//! partition. Every group handler goes through [`on_coordinator`].

use std::future::Future;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;

use crate::controller::{Controller, TopicSpec};
use crate::errors::code;
use crate::groups::{GroupCoordinator, OFFSETS_TOPIC};
use crate::shard_state::Shard;

/// Runs `job` on the coordinator shard of `group_id`; COORDINATOR_NOT_AVAILABLE when the
/// offsets topic does not exist yet or the shard has stopped.
pub async fn on_coordinator<F, Fut, R>(shard: &Rc<Shard>, group_id: &str, job: F) -> Result<R, i16>
where
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    dispatch_on_coordinator(shard, group_id, job).await?.await
}

/// Hands `job` to the coordinator shard of `group_id` and returns the future of its result
/// (see [`shard::Router::dispatch`] for the order this keeps).
pub async fn dispatch_on_coordinator<F, Fut, R>(
    shard: &Rc<Shard>,
    group_id: &str,
    job: F,
) -> Result<impl Future<Output = Result<R, i16>>, i16>
where
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let unavailable = code(ResponseError::CoordinatorNotAvailable);
    let Some((_, owner)) = GroupCoordinator::locate(shard, group_id) else {
        return Err(unavailable);
    };
    let pending = shard
        .router
        .dispatch(shard, owner, job)
        .await
        .map_err(|_| unavailable)?;
    Ok(async move { pending.await.map_err(|_| unavailable) })
}

/// Creates `__consumer_offsets` (compacted, `offsets.topic.num.partitions`,
/// `offsets.topic.replication.factor`) on first use, as Kafka does when a client first looks
/// for a group coordinator; with fewer live brokers than its replication factor it is not
/// created (COORDINATOR_NOT_AVAILABLE, which clients retry), as Kafka refuses since KIP-115.
pub async fn ensure_offsets_topic(shard: &Rc<Shard>) -> Result<(), i16> {
    if shard.image().topic(OFFSETS_TOPIC).is_some() {
        return Ok(());
    }
    let spec = TopicSpec {
        name: OFFSETS_TOPIC.to_string(),
        partition_count: shard.config.groups.offsets_partitions,
        replication_factor: shard.config.groups.offsets_replication_factor,
        assignments: None,
        configs: [
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("segment.bytes".to_string(), (100u64 << 20).to_string()),
        ]
        .into(),
    };
    let created = Controller::create_internal_topic_from(shard, spec).await;
    match created {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(refusal)) if refusal.error_code == code(ResponseError::TopicAlreadyExists) => Ok(()),
        _ => Err(code(ResponseError::CoordinatorNotAvailable)),
    }
}

pub fn string(value: &kafka_protocol::protocol::StrBytes) -> String {
    value.as_str().to_string()
}

/// A copy of bytes a group keeps after the request is answered (a member's protocol
/// metadata, an assignment): a slice of the request would keep the connection's whole
/// receive buffer alive, outside the request budget that covered it, for as long as the
/// member lives.
pub fn owned(value: &bytes::Bytes) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(value)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{JoinGroupRequest, SyncGroupRequest};
    use kafka_protocol::protocol::StrBytes;

    /// Whether `kept` is a slice of `received`.
    fn pins(received: &Bytes, kept: &Bytes) -> bool {
        received.as_ptr_range().contains(&kept.as_ptr())
    }

    #[test]
    fn what_a_group_keeps_shares_nothing_with_the_request() {
        let received = Bytes::from(vec![7u8; 1 << 20]);
        let piece = received.slice(1000..1100);
        let join =
            JoinGroupRequest::default().with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(piece.clone())]);
        let kept = super::super::join_group::join_request(&join, 9, "c".into(), "h".into());
        assert_eq!(kept.protocols[0].1, piece);
        assert!(
            !pins(&received, &kept.protocols[0].1),
            "metadata pins the request"
        );
        let sync = SyncGroupRequest::default().with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_static_str("m-1"))
                .with_assignment(piece.clone()),
        ]);
        let kept = super::super::sync_group::assignments(&sync);
        assert_eq!(kept[0].1, piece);
        assert!(
            !pins(&received, &kept[0].1),
            "an assignment pins the request"
        );
    }
}
