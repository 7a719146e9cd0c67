//! Where committed metadata records live.
//!
//! [`FileMetadataStore`] is the single-node store: an append-only file of records, each
//! framed as `length: u32 LE | crc32: u32 LE | JSON payload` (see docs/format.md), written
//! and fdatasync'ed before the commit returns. Loading replays the file; a torn or corrupt
//! tail (a crash mid-append) is truncated at the last whole record, which was never
//! acknowledged. A commit that fails takes back what it wrote, so that no partial record
//! sits between committed ones. The file keeps `RESERVE_BYTES` allocated past its end, so
//! that records still fit once the disk is full: deleting a topic, the way out of a full
//! disk, is itself a record.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{MetadataImage, MetadataRecord};

/// A metadata record is a few hundred bytes; anything near this is corruption.
const RECORD_BYTES_MAX: usize = 16 << 20;
const FRAME_HEADER_BYTES: usize = 8;
/// Space allocated ahead of the file's end: thousands of records.
const RESERVE_BYTES: u64 = 1 << 20;

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
    /// Bytes of whole records in the file.
    len: u64,
    /// The file's blocks are allocated up to here (beyond `len`, without changing its size).
    reserved_to: u64,
}

impl FileMetadataStore {
    /// The store in `dir` (created if missing).
    pub fn new(dir: &Path) -> FileMetadataStore {
        FileMetadataStore {
            path: dir.join("__cluster_metadata").join("records.log"),
            file: None,
            len: 0,
            reserved_to: 0,
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
        self.len = valid_bytes as u64;
        self.reserve();
        Ok(image)
    }

    fn commit(&mut self, record: &MetadataRecord) -> Result<(), StoreError> {
        let frame = encode_record(record);
        let Some(file) = self.file.as_mut() else {
            panic!("commit before load");
        };
        let result = file.write_all(&frame).and_then(|()| file.sync_data());
        if let Err(error) = result {
            // Not committed: a part of it left in the file would hide every later record.
            let _ = file.set_len(self.len).and_then(|()| file.sync_data());
            return Err(self.io(error));
        }
        self.len += frame.len() as u64;
        self.reserve();
        Ok(())
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
    fn space_for_records_is_allocated_ahead_without_growing_the_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = FileMetadataStore::new(dir.path());
        store.load().expect("load");
        store.commit(&create("a")).expect("commit");
        let meta = std::fs::metadata(&store.path).expect("stat");
        assert!(
            meta.blocks() * 512 >= RESERVE_BYTES,
            "{} bytes allocated",
            meta.blocks() * 512
        );
        let mut reopened = FileMetadataStore::new(dir.path());
        let image = reopened.load().expect("reload");
        assert!(image.topic("a").is_some());
        assert_eq!(
            reopened.len,
            meta.len(),
            "the reserve is not part of the records"
        );
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
