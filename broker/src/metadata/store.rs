//! Where committed metadata records live, in the shape of a Raft log: changes are proposed
//! as batches, learnt committed asynchronously, and taken in commit order as a stream that
//! every node applies; a snapshot replaces the committed prefix by the records of its image.
//!
//! [`FileMetadataStore`] is the single-node store (a one-voter quorum): an append-only file
//! of batches, each framed as `length: u32 LE | crc32: u32 LE | JSON array of records` (see
//! docs/format.md), written and fdatasync'ed before `propose` returns, so its commit is
//! already done. Loading replays the file; a torn or corrupt tail (a crash mid-append) is
//! truncated at the last whole batch, which was never acknowledged. A proposal that fails
//! takes back what it wrote, so that no partial batch sits between committed ones. The file
//! keeps `RESERVE_BYTES` allocated past its end, so that records still fit once the disk is
//! full: deleting a topic, the way out of a full disk, is itself a record. Frames holding a
//! single record object are the first format's (`legacy.rs`); a file with any is rewritten
//! once, atomically, as a snapshot in the current format.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use thiserror::Error;

use super::legacy::LegacyRecord;
use super::{MetadataImage, MetadataRecord};
use crate::durable::replace_file;

/// A batch of metadata records is a few kilobytes; anything near this is corruption.
const RECORD_BYTES_MAX: usize = 16 << 20;
const FRAME_HEADER_BYTES: usize = 8;
/// Space allocated ahead of the file's end: thousands of records.
const RESERVE_BYTES: u64 = 1 << 20;
const RECORDS_FILE: &str = "records.log";

#[derive(Error, Debug)]
pub enum StoreError {
    #[error("metadata store {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metadata store {path}: record {index} does not apply: {reason}")]
    Inconsistent {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    /// The quorum store: this node is not the active controller.
    #[error("this node is not the active controller (the quorum's leader is {leader:?})")]
    NotController { leader: Option<u64> },
    #[error("metadata quorum: {0}")]
    Quorum(String),
}

/// Resolves once a proposed batch is committed (or can no longer be).
pub type Commit = Pin<Box<dyn Future<Output = Result<(), StoreError>>>>;

/// Records committed together, at `offset` (the number of records committed before them in
/// the file store, the Raft index in the quorum's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedBatch {
    pub offset: u64,
    pub records: Vec<MetadataRecord>,
    /// The records are a snapshot's: they replace everything applied before.
    pub snapshot: bool,
}

impl CommittedBatch {
    /// Applies the batch to `image`: a snapshot's records replace what `image` held, at an
    /// epoch that goes on from `image`'s (a snapshot rebuilds the image from fewer records
    /// than built it, and a shard takes only newer images). A record that does not apply
    /// is skipped, as it is on every node.
    pub fn apply_to(&self, image: &mut MetadataImage) {
        if self.snapshot {
            *image = MetadataImage {
                epoch: image.epoch,
                ..MetadataImage::default()
            };
        }
        for record in &self.records {
            if let Err(reason) = image.apply(record) {
                tracing::error!(offset = self.offset, reason, "a metadata record is skipped");
            }
        }
    }
}

/// Commits metadata records durably and rebuilds the image from them.
pub trait MetadataStore {
    /// The image of everything committed so far.
    fn load(&mut self) -> Result<MetadataImage, StoreError>;
    /// Gives `records` their place in the log, as one batch committed whole or not at all;
    /// the returned future resolves when it is committed. Only the active controller proposes.
    fn propose(&mut self, records: Vec<MetadataRecord>) -> Result<Commit, StoreError>;
    /// Batches committed since the last call (or since `load`), in commit order.
    fn take_committed(&mut self) -> Vec<CommittedBatch>;
    /// Replaces every committed record by `image`'s own records; `image` must be what the
    /// committed records build.
    fn snapshot(&mut self, image: &MetadataImage) -> Result<(), StoreError>;
    /// The offset the next record will have: records in the log, a snapshot's included.
    fn end_offset(&self) -> u64;
}

pub struct FileMetadataStore {
    path: PathBuf,
    /// The node that the first format's records describe.
    legacy_node_id: i32,
    file: Option<File>,
    /// Bytes of whole batches in the file.
    len: u64,
    /// Records in the file: the offset of the next batch.
    next_offset: u64,
    /// The file's blocks are allocated up to here (beyond `len`, without changing its size).
    reserved_to: u64,
    committed: Vec<CommittedBatch>,
}

impl FileMetadataStore {
    /// The store in `dir` (created if missing), on the node `node_id`.
    pub fn new(dir: &Path, node_id: i32) -> FileMetadataStore {
        FileMetadataStore {
            path: dir.join(super::METADATA_TOPIC).join(RECORDS_FILE),
            legacy_node_id: node_id,
            file: None,
            len: 0,
            next_offset: 0,
            reserved_to: 0,
            committed: Vec::new(),
        }
    }

    /// Keeps `RESERVE_BYTES` allocated past the end when less than half of it is left.
    /// Failing to is not an error: the disk may be full, and the reserve is what is left.
    fn reserve(&mut self) {
        let Some(file) = &self.file else { return };
        if self.reserved_to >= self.len + RESERVE_BYTES / 2 {
            return;
        }
        // SAFETY: fallocate on an open descriptor this store owns; KEEP_SIZE leaves the
        // file's size, and so what `load` reads, unchanged.
        let done = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                self.len as libc::off_t,
                RESERVE_BYTES as libc::off_t,
            )
        };
        if done == 0 {
            self.reserved_to = self.len + RESERVE_BYTES;
        } else {
            let error = std::io::Error::last_os_error();
            tracing::debug!(path = %self.path.display(), %error, "metadata reserve not extended");
        }
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn dir(&self) -> &Path {
        self.path
            .parent()
            .expect("the path has a parent by construction")
    }

    /// Writes `records` as the whole file, atomically ([`replace_file`]).
    fn rewrite(&mut self, records: &[MetadataRecord]) -> Result<(), StoreError> {
        let frame = encode_batch(records);
        replace_file(&self.path, &frame).map_err(|e| self.io(e))?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        self.file = Some(file);
        self.len = frame.len() as u64;
        self.next_offset = records.len() as u64;
        self.reserved_to = 0;
        self.reserve();
        Ok(())
    }
}

impl MetadataStore for FileMetadataStore {
    fn load(&mut self) -> Result<MetadataImage, StoreError> {
        std::fs::create_dir_all(self.dir()).map_err(|e| self.io(e))?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| self.io(e))?;
        let (frames, valid_bytes) = decode_frames(&bytes);
        if valid_bytes < bytes.len() {
            tracing::warn!(
                path = %self.path.display(),
                dropped_bytes = bytes.len() - valid_bytes,
                "truncating a torn metadata record"
            );
            file.set_len(valid_bytes as u64).map_err(|e| self.io(e))?;
            file.sync_data().map_err(|e| self.io(e))?;
        }
        let mut image = MetadataImage::default();
        let (mut index, mut upgraded) = (0, false);
        for frame in frames {
            let records = match frame {
                Frame::Batch(records) => records,
                Frame::Legacy(record) => {
                    upgraded = true;
                    record
                        .upgrade(&image, self.legacy_node_id)
                        .map_err(|reason| StoreError::Inconsistent {
                            path: self.path.clone(),
                            index,
                            reason,
                        })?
                }
            };
            for record in &records {
                image
                    .apply(record)
                    .map_err(|reason| StoreError::Inconsistent {
                        path: self.path.clone(),
                        index,
                        reason,
                    })?;
                index += 1;
            }
        }
        self.file = Some(file);
        self.len = valid_bytes as u64;
        self.next_offset = index as u64;
        if upgraded {
            tracing::info!(path = %self.path.display(), "metadata rewritten in the current format");
            self.snapshot(&image)?;
        }
        self.reserve();
        Ok(image)
    }

    fn propose(&mut self, records: Vec<MetadataRecord>) -> Result<Commit, StoreError> {
        let frame = encode_batch(&records);
        let Some(file) = self.file.as_mut() else {
            panic!("propose before load");
        };
        let result = file.write_all(&frame).and_then(|()| file.sync_data());
        if let Err(error) = result {
            // Not committed: a part of it left in the file would hide every later batch.
            let _ = file.set_len(self.len).and_then(|()| file.sync_data());
            return Err(self.io(error));
        }
        self.len += frame.len() as u64;
        let offset = self.next_offset;
        self.next_offset += records.len() as u64;
        self.committed.push(CommittedBatch {
            offset,
            records,
            snapshot: false,
        });
        self.reserve();
        Ok(Box::pin(std::future::ready(Ok(()))))
    }

    fn take_committed(&mut self) -> Vec<CommittedBatch> {
        std::mem::take(&mut self.committed)
    }

    fn snapshot(&mut self, image: &MetadataImage) -> Result<(), StoreError> {
        self.rewrite(&image.to_records())
    }

    fn end_offset(&self) -> u64 {
        self.next_offset
    }
}

fn encode_batch(records: &[MetadataRecord]) -> Vec<u8> {
    let payload = serde_json::to_vec(records).expect("records always serialize");
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

enum Frame {
    Batch(Vec<MetadataRecord>),
    Legacy(LegacyRecord),
}

/// The whole frames at the start of `bytes`, and how many bytes they span.
fn decode_frames(bytes: &[u8]) -> (Vec<Frame>, usize) {
    let mut frames = Vec::new();
    let mut position = 0;
    while let Some(header) = bytes.get(position..position + FRAME_HEADER_BYTES) {
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if length > RECORD_BYTES_MAX {
            break;
        }
        let start = position + FRAME_HEADER_BYTES;
        let Some(payload) = bytes.get(start..start + length) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        let frame = if payload.first() == Some(&b'[') {
            serde_json::from_slice(payload).ok().map(Frame::Batch)
        } else {
            serde_json::from_slice(payload).ok().map(Frame::Legacy)
        };
        let Some(frame) = frame else { break };
        frames.push(frame);
        position = start + length;
    }
    (frames, position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::image::{topic_records, PartitionState};
    use crate::metadata::TopicMeta;
    use std::collections::BTreeMap;

    fn create(name: &str) -> Vec<MetadataRecord> {
        let local = PartitionState {
            replicas: vec![1],
            isr: vec![1],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
        };
        topic_records(&TopicMeta {
            name: name.into(),
            id: uuid::Uuid::new_v4(),
            partitions: vec![local.clone(), local],
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        })
    }

    #[test]
    fn a_snapshot_replaces_the_image_and_its_epoch_goes_on() {
        let mut image = MetadataImage::default();
        for name in ["a", "b", "c"] {
            let batch = CommittedBatch {
                offset: 0,
                records: create(name),
                snapshot: false,
            };
            batch.apply_to(&mut image);
        }
        let before = image.epoch;
        // The leader's snapshot holds only topic "c": fewer records than built this image.
        let mut only_c = MetadataImage::default();
        CommittedBatch {
            offset: 0,
            records: create("c"),
            snapshot: false,
        }
        .apply_to(&mut only_c);
        CommittedBatch {
            offset: 9,
            records: only_c.to_records(),
            snapshot: true,
        }
        .apply_to(&mut image);
        assert!(image.epoch > before, "{} after {before}", image.epoch);
        assert!(image.topic("a").is_none() && image.topic("b").is_none());
        assert_eq!(image.topic("c"), only_c.topic("c"));
    }

    fn commit(store: &mut FileMetadataStore, records: Vec<MetadataRecord>) {
        drop(store.propose(records).expect("propose"));
    }

    fn topic_names(image: &MetadataImage) -> Vec<&str> {
        image.topics.keys().map(String::as_str).collect()
    }

    #[test]
    fn space_for_records_is_allocated_ahead_without_growing_the_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = FileMetadataStore::new(dir.path(), 1);
        store.load().expect("load");
        commit(&mut store, create("a"));
        let meta = std::fs::metadata(&store.path).expect("stat");
        assert!(
            meta.blocks() * 512 >= RESERVE_BYTES,
            "{} bytes allocated",
            meta.blocks() * 512
        );
        let mut reopened = FileMetadataStore::new(dir.path(), 1);
        let image = reopened.load().expect("reload");
        assert!(image.topic("a").is_some());
        assert_eq!(
            reopened.len,
            meta.len(),
            "the reserve is not part of the records"
        );
    }

    #[test]
    fn committed_batches_survive_reopen_and_are_streamed_in_order() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut store = FileMetadataStore::new(dir.path(), 1);
        assert!(store.load().expect("empty").topics.is_empty());
        let (a, b) = (create("a"), create("b"));
        commit(&mut store, a.clone());
        commit(&mut store, b.clone());
        let committed = store.take_committed();
        assert_eq!(
            committed,
            vec![
                CommittedBatch {
                    offset: 0,
                    records: a.clone(),
                    snapshot: false,
                },
                CommittedBatch {
                    offset: a.len() as u64,
                    records: b,
                    snapshot: false,
                },
            ]
        );
        assert!(
            store.take_committed().is_empty(),
            "each batch is taken once"
        );
        let image = FileMetadataStore::new(dir.path(), 1)
            .load()
            .expect("reload");
        assert_eq!(topic_names(&image), vec!["a", "b"]);
        assert_eq!(
            image.topic("a").map(|t| t.configs["retention.ms"].as_str()),
            Some("1000")
        );
        assert_eq!(image.topic("b").map(TopicMeta::partition_count), Some(2));
    }

    #[test]
    fn a_torn_batch_is_truncated_whole_and_appends_continue() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut store = FileMetadataStore::new(dir.path(), 1);
        store.load().expect("empty");
        commit(&mut store, create("a"));
        commit(&mut store, create("b"));
        let path = dir.path().join("__cluster_metadata/records.log");
        let length = std::fs::metadata(&path).expect("stat").len();
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        // Cut inside the second batch: its topic must not appear without its partitions.
        file.set_len(length - 30).expect("cut");
        let mut store = FileMetadataStore::new(dir.path(), 1);
        let image = store.load().expect("recovered");
        assert_eq!(topic_names(&image), vec!["a"]);
        commit(&mut store, create("c"));
        let image = FileMetadataStore::new(dir.path(), 1)
            .load()
            .expect("reload");
        assert_eq!(topic_names(&image), vec!["a", "c"]);
    }

    #[test]
    fn a_snapshot_replaces_the_log_by_the_image() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut store = FileMetadataStore::new(dir.path(), 1);
        let mut image = store.load().expect("empty");
        for name in ["a", "b", "c"] {
            let records = create(name);
            records
                .iter()
                .for_each(|r| image.apply(r).expect("applies"));
            commit(&mut store, records);
        }
        let id = image.topic("b").expect("b").id;
        let removal = vec![MetadataRecord::RemoveTopic(
            crate::metadata::records::RemoveTopicRecord { topic_id: id },
        )];
        image.apply(&removal[0]).expect("removes");
        commit(&mut store, removal);
        let before = std::fs::metadata(&store.path).expect("stat").len();
        store.snapshot(&image).expect("snapshot");
        assert!(std::fs::metadata(&store.path).expect("stat").len() < before);
        commit(&mut store, create("d"));
        let reloaded = FileMetadataStore::new(dir.path(), 1)
            .load()
            .expect("reload");
        assert_eq!(topic_names(&reloaded), vec!["a", "c", "d"]);
        assert_eq!(reloaded.topic("a"), image.topic("a"));
    }

    /// Frames as the first format wrote them: one JSON object per record.
    fn legacy_frame(json: &str) -> Vec<u8> {
        let mut frame = (json.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&crc32fast::hash(json.as_bytes()).to_le_bytes());
        frame.extend_from_slice(json.as_bytes());
        frame
    }

    #[test]
    fn records_of_the_first_format_are_read_and_rewritten_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("__cluster_metadata/records.log");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let (kept, gone) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let mut bytes = Vec::new();
        for json in [
            format!(r#"{{"type":"CreateTopic","name":"kept","id":"{kept}","partition_count":1,"configs":{{"retention.ms":"5"}}}}"#),
            format!(r#"{{"type":"CreateTopic","name":"gone","id":"{gone}","partition_count":1,"configs":{{}}}}"#),
            format!(r#"{{"type":"CreatePartitions","id":"{kept}","partition_count":3}}"#),
            format!(r#"{{"type":"DeleteTopic","id":"{gone}"}}"#),
            r#"{"type":"ProducerIds","broker_id":7,"broker_epoch":-1,"next_producer_id_block_start":2000}"#.to_string(),
        ] {
            bytes.extend(legacy_frame(&json));
        }
        std::fs::write(&path, &bytes).expect("write");
        let image = FileMetadataStore::new(dir.path(), 7)
            .load()
            .expect("upgrade");
        let topic = image.topic("kept").expect("kept");
        assert_eq!((topic.id, topic.partition_count()), (kept, 3));
        assert_eq!(topic.configs["retention.ms"], "5");
        for partition in &topic.partitions {
            assert_eq!((partition.leader, partition.leader_epoch), (7, 0));
            assert_eq!((&partition.replicas, &partition.isr), (&vec![7], &vec![7]));
        }
        assert!(image.topic("gone").is_none());
        assert_eq!(image.next_producer_id_block_start, 2000);
        let rewritten = std::fs::read(&path).expect("read");
        assert_eq!(rewritten[FRAME_HEADER_BYTES], b'[', "current format");
        let reloaded = FileMetadataStore::new(dir.path(), 7)
            .load()
            .expect("reload");
        assert_eq!(reloaded.topics, image.topics);
        assert_eq!(reloaded.next_producer_id_block_start, 2000);
    }

    #[test]
    fn garbage_never_panics() {
        for length in 0..64 {
            let bytes: Vec<u8> = (0..length).map(|i| (i * 37 % 251) as u8).collect();
            let (frames, valid) = decode_frames(&bytes);
            assert!(frames.is_empty() && valid == 0);
        }
    }
}
