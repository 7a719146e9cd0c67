//! The metadata store of a node in a quorum of several voters: batches of records are
//! entries of the Raft log that [`crate::quorum::Quorum`] replicates, one JSON array of
//! records per entry (the WAL frames them with a CRC). Every node applies the committed
//! entries in log order; only the active controller proposes.
//!
//! Invariants: a batch is taken from `take_committed` once, in log order, and only after
//! the quorum committed it; `load` returns only once this node has applied everything the
//! quorum had committed when it caught up with the leader, so a node never starts serving
//! from an image older than the one it last served (nor one behind the cluster's); a
//! proposal on a node that does not lead fails with `StoreError::NotController`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::store::{Commit, CommittedBatch, MetadataStore, StoreError};
use super::{MetadataImage, MetadataRecord};
use crate::quorum::{Committed, Quorum, QuorumError};

/// How long a starting node waits for a quorum, and to catch up with it, before giving up.
pub const CATCH_UP_MAX: Duration = Duration::from_secs(120);

pub struct QuorumMetadataStore {
    quorum: Arc<Quorum>,
    /// The last Raft index applied.
    applied: u64,
}

impl QuorumMetadataStore {
    pub fn new(quorum: Arc<Quorum>) -> QuorumMetadataStore {
        QuorumMetadataStore { quorum, applied: 0 }
    }

    fn decode(index: u64, data: &[u8]) -> Result<Vec<MetadataRecord>, StoreError> {
        serde_json::from_slice(data).map_err(|error| {
            StoreError::Quorum(format!("entry {index} holds no batch of records: {error}"))
        })
    }

    /// Waits until a leader is known and this voter has applied all it knows committed.
    fn wait_caught_up(&self) -> Result<(), StoreError> {
        let deadline = Instant::now() + CATCH_UP_MAX;
        let mut next_report = Instant::now() + Duration::from_secs(5);
        loop {
            let status = self
                .quorum
                .status()
                .ok_or_else(|| StoreError::Quorum("the quorum thread has stopped".into()))?;
            if let Some(failure) = status.failed {
                return Err(StoreError::Quorum(failure));
            }
            if status.leader.is_some()
                && status.commit_index > 0
                && status.applied_index >= status.commit_index
            {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Quorum(format!(
                    "no quorum of the voters after {CATCH_UP_MAX:?} (leader {:?}, committed {}, \
                     applied {})",
                    status.leader, status.commit_index, status.applied_index
                )));
            }
            if now >= next_report {
                tracing::info!(
                    leader = ?status.leader,
                    committed = status.commit_index,
                    "waiting for the metadata quorum"
                );
                next_report = now + Duration::from_secs(5);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl MetadataStore for QuorumMetadataStore {
    fn load(&mut self) -> Result<MetadataImage, StoreError> {
        self.wait_caught_up()?;
        let mut image = MetadataImage::default();
        for batch in self.take_committed() {
            if batch.snapshot {
                image = MetadataImage::default();
            }
            for (index, record) in batch.records.iter().enumerate() {
                image
                    .apply(record)
                    .map_err(|reason| StoreError::Inconsistent {
                        path: "metadata quorum".into(),
                        index,
                        reason,
                    })?;
            }
        }
        Ok(image)
    }

    fn propose(&mut self, records: Vec<MetadataRecord>) -> Result<Commit, StoreError> {
        let data = serde_json::to_vec(&records).expect("records always serialize");
        let proposer = self.quorum.proposer();
        Ok(Box::pin(async move {
            proposer.commit(data).await.map_err(|error| match error {
                QuorumError::NotLeader { leader } => StoreError::NotController { leader },
                error => StoreError::Quorum(error.to_string()),
            })
        }))
    }

    fn take_committed(&mut self) -> Vec<CommittedBatch> {
        let mut batches = Vec::new();
        for committed in self.quorum.committed().try_iter() {
            let (index, data, snapshot) = match committed {
                Committed::Entry { index, data, .. } => (index, data, false),
                Committed::Snapshot { index, data } => (index, data, true),
            };
            self.applied = index;
            match Self::decode(index, &data) {
                Ok(records) => batches.push(CommittedBatch {
                    offset: index,
                    records,
                    snapshot,
                }),
                // Every voter refuses it alike: the image stays what it was.
                Err(error) => tracing::error!(%error, "a committed metadata entry is skipped"),
            }
        }
        batches
    }

    fn snapshot(&mut self, image: &MetadataImage) -> Result<(), StoreError> {
        let data = serde_json::to_vec(&image.to_records()).expect("records always serialize");
        self.quorum
            .compact(self.applied, data)
            .map_err(|error| StoreError::Quorum(error.to_string()))
    }

    fn end_offset(&self) -> u64 {
        self.applied + 1
    }
}
