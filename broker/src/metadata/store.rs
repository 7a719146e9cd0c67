//! Where committed metadata records live.
//!
//! [`FileMetadataStore`] is the single-node store: an append-only file of records, each
//! framed as `length: u32 LE | crc32: u32 LE | JSON payload` (see docs/format.md), written
//! and fdatasync'ed before the commit returns. Loading replays the file; a torn or corrupt
//! tail (a crash mid-append) is truncated at the last whole record, which was never
//! acknowledged.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{MetadataImage, MetadataRecord};

/// A metadata record is a few hundred bytes; anything near this is corruption.
const RECORD_BYTES_MAX: usize = 16 << 20;
const FRAME_HEADER_BYTES: usize = 8;

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
}

/// Commits metadata records durably and rebuilds the image from them.
pub trait MetadataStore {
    /// The image from every record committed so far.
    fn load(&mut self) -> Result<MetadataImage, StoreError>;
    /// Makes `record` durable; on return it is committed.
    fn commit(&mut self, record: &MetadataRecord) -> Result<(), StoreError>;
}

pub struct FileMetadataStore {
    path: PathBuf,
    file: Option<File>,
}

impl FileMetadataStore {
    /// The store in `dir` (created if missing).
    pub fn new(dir: &Path) -> FileMetadataStore {
        FileMetadataStore {
            path: dir.join("__cluster_metadata").join("records.log"),
            file: None,
        }
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl MetadataStore for FileMetadataStore {
    fn load(&mut self) -> Result<MetadataImage, StoreError> {
        let dir = self
            .path
            .parent()
            .expect("the path has a parent by construction");
        std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| self.io(e))?;
        let (records, valid_bytes) = decode_records(&bytes);
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
        for (index, record) in records.iter().enumerate() {
            image
                .apply(record)
                .map_err(|reason| StoreError::Inconsistent {
                    path: self.path.clone(),
                    index,
                    reason,
                })?;
        }
        self.file = Some(file);
        Ok(image)
    }

    fn commit(&mut self, record: &MetadataRecord) -> Result<(), StoreError> {
        let frame = encode_record(record);
        let Some(file) = self.file.as_mut() else {
            panic!("commit before load");
        };
        let result = file.write_all(&frame).and_then(|()| file.sync_data());
        result.map_err(|e| self.io(e))
    }
}

fn encode_record(record: &MetadataRecord) -> Vec<u8> {
    let payload = serde_json::to_vec(record).expect("records always serialize");
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// The whole records at the start of `bytes`, and how many bytes they span.
fn decode_records(bytes: &[u8]) -> (Vec<MetadataRecord>, usize) {
    let mut records = Vec::new();
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
        let Ok(record) = serde_json::from_slice(payload) else {
            break;
        };
        records.push(record);
        position = start + length;
    }
    (records, position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicMeta;
    use std::collections::BTreeMap;

    fn create(name: &str) -> MetadataRecord {
        MetadataRecord::CreateTopic(TopicMeta {
            name: name.into(),
            id: uuid::Uuid::new_v4(),
            partition_count: 2,
            configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
        })
    }

    #[test]
    fn committed_records_survive_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut store = FileMetadataStore::new(dir.path());
        assert!(store.load().expect("empty").topics.is_empty());
        store.commit(&create("a")).expect("commit");
        store.commit(&create("b")).expect("commit");
        let image = FileMetadataStore::new(dir.path()).load().expect("reload");
        assert_eq!(image.topics.len(), 2);
        assert_eq!(
            image.topic("a").map(|t| t.configs["retention.ms"].as_str()),
            Some("1000")
        );
    }

    #[test]
    fn a_torn_tail_is_truncated_and_appends_continue() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut store = FileMetadataStore::new(dir.path());
        store.load().expect("empty");
        store.commit(&create("a")).expect("commit");
        store.commit(&create("b")).expect("commit");
        let path = dir.path().join("__cluster_metadata/records.log");
        let length = std::fs::metadata(&path).expect("stat").len();
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(length - 3).expect("cut");
        let mut store = FileMetadataStore::new(dir.path());
        let image = store.load().expect("recovered");
        assert_eq!(image.topics.keys().collect::<Vec<_>>(), vec!["a"]);
        store.commit(&create("c")).expect("commit after recovery");
        let image = FileMetadataStore::new(dir.path()).load().expect("reload");
        assert_eq!(image.topics.keys().collect::<Vec<_>>(), vec!["a", "c"]);
    }

    #[test]
    fn garbage_never_panics() {
        for length in 0..64 {
            let bytes: Vec<u8> = (0..length).map(|i| (i * 37 % 251) as u8).collect();
            let (records, valid) = decode_records(&bytes);
            assert!(records.is_empty() && valid == 0);
        }
    }
}
