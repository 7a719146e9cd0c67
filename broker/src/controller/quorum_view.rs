//! The metadata quorum as DescribeQuorum reports it, from the voter that leads it: who
//! leads in which epoch, the high watermark, and each voter's log end offset as the leader
//! knows it. A voter that does not lead asks the active controller, as Kafka's brokers
//! forward DescribeQuorum, so every node gives the same account; only when no leader can be
//! reached does it answer what it knows itself (its own log end, -1 for the others).

use std::collections::BTreeMap;
use std::rc::Rc;

use uuid::Uuid;

use super::cluster::{Executed, ForwardedRequest};
use super::Controller;
use crate::shard_state::Shard;

/// How long a voter that does not lead waits for the leader's account before it answers
/// with its own.
const ASK_LEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The quorum: its leader (-1 for none known), the epoch (Raft term), the high watermark
/// (records committed), and each voter with its log end offset (-1 where unknown) and the
/// directory it speaks from (KIP-853; the nil id where unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumView {
    pub leader: i32,
    pub epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<(i32, i64)>,
    pub directories: BTreeMap<i32, Uuid>,
}

impl Controller {
    /// Shard 0: the quorum as its leader sees it (asked of it when this voter does not
    /// lead; a one-voter node leads itself and commits what it writes).
    pub async fn quorum_view(shard: &Rc<Shard>) -> QuorumView {
        let controller = Self::of(shard);
        if controller.quorum.is_some() && controller.active_term.get().is_none() {
            let asked =
                controller.execute_or_forward(Some(shard), ForwardedRequest::DescribeQuorum);
            let timeout = glommio::timer::sleep(ASK_LEADER_TIMEOUT);
            let answer = futures_lite::future::or(async { Some(asked.await) }, async {
                timeout.await;
                None
            })
            .await;
            if let Some(Ok(Executed::Quorum(view))) = answer {
                return view;
            }
        }
        controller.own_quorum_view(shard.config.node_id).await
    }

    /// The quorum as this voter knows it.
    pub(super) async fn own_quorum_view(&self, node_id: i32) -> QuorumView {
        let Some(status) = self.quorum_status().await else {
            let end_offset = self.metadata_end_offset() as i64;
            return QuorumView {
                leader: node_id,
                epoch: 0,
                high_watermark: end_offset,
                voters: vec![(node_id, end_offset)],
                directories: BTreeMap::new(),
            };
        };
        let voters = status
            .voters
            .iter()
            .map(|&(id, matched)| {
                let end = match matched {
                    Some(matched) => matched as i64 + 1,
                    None if id == status.node_id => status.last_index as i64 + 1,
                    None => -1,
                };
                (id as i32, end)
            })
            .collect();
        QuorumView {
            leader: status.leader.map_or(-1, |l| l as i32),
            epoch: status.term as i32,
            high_watermark: status.commit_index as i64 + 1,
            voters,
            directories: status
                .directories
                .iter()
                .filter_map(|(&id, text)| Some((id as i32, client::parse_kafka_uuid(text)?)))
                .collect(),
        }
    }
}
