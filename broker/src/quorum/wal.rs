//! The durable half of a voter's Raft state: log entries, the hard state (term, vote,
//! commit) and the latest snapshot, in files of this node's metadata directory; raft-rs's
//! `MemStorage` holds the same in memory for the library to read.
//!
//! ```text
//! raft/wal        frames: length u32 LE | crc32 u32 LE | kind u8 | protobuf body
//!                 kind 1 Entry, 2 HardState, 3 snapshot taken (SnapshotMetadata)
//! raft/snapshot   crc32 u32 LE | protobuf Snapshot (metadata and the state machine's data)
//! ```
//!
//! Invariants: nothing is acknowledged (votes, appends) before the frames that record it
//! are fdatasynced; replay applies frames in order, an entry overwriting the entries from
//! its index on, exactly as the library asked; a torn or corrupt tail, never acknowledged,
//! is cut off; the snapshot file is replaced atomically, and the log is rewritten (aside,
//! synced, renamed) so that it starts with the snapshot.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::storage::MemStorage;

use crate::durable::replace_file;

const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
const FRAME_HEADER_BYTES: usize = 9;
/// A metadata entry is a batch of records, kilobytes; anything near this is damage.
const FRAME_BYTES_MAX: usize = 64 << 20;

pub struct Wal {
    dir: PathBuf,
    file: File,
    /// Bytes of whole frames.
    len: u64,
}

/// What a replay rebuilt.
pub struct Replayed {
    pub wal: Wal,
    pub storage: MemStorage,
    /// The snapshot the log starts from (empty metadata if none was taken).
    pub snapshot: Snapshot,
}

fn io_error(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl Wal {
    /// Opens the state in `dir`, or starts one with `voters` if there is none.
    pub fn open(dir: &Path, voters: &[u64]) -> std::io::Result<Replayed> {
        std::fs::create_dir_all(dir)?;
        let snapshot = read_snapshot(&dir.join("snapshot"))?;
        let storage = MemStorage::new_with_conf_state(ConfState::from((voters.to_vec(), vec![])));
        let path = dir.join("wal");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut position = 0;
        while let Some((kind, body, next)) = next_frame(&bytes, position) {
            let applied = match kind {
                KIND_ENTRY => Entry::parse_from_bytes(body)
                    .map_err(|e| e.to_string())
                    .and_then(|entry| append(&storage, &entry)),
                KIND_HARD_STATE => HardState::parse_from_bytes(body)
                    .map(|state| storage.wl().set_hardstate(state))
                    .map_err(|e| e.to_string()),
                KIND_SNAPSHOT => SnapshotMetadata::parse_from_bytes(body)
                    .map_err(|e| e.to_string())
                    .and_then(|meta| {
                        if meta != *snapshot.get_metadata() {
                            return Err(format!(
                                "the log starts from snapshot {}, the snapshot file is {}",
                                meta.index,
                                snapshot.get_metadata().index
                            ));
                        }
                        storage
                            .wl()
                            .apply_snapshot(snapshot.clone())
                            .map_err(|e| e.to_string())
                    }),
                other => Err(format!("frame kind {other}")),
            };
            if let Err(reason) = applied {
                return Err(io_error(format!("{}: {reason}", path.display())));
            }
            position = next;
        }
        if position < bytes.len() {
            tracing::warn!(path = %path.display(), dropped_bytes = bytes.len() - position,
                "truncating a torn Raft log tail");
            file.set_len(position as u64)?;
            file.sync_data()?;
        }
        Ok(Replayed {
            wal: Wal {
                dir: dir.to_path_buf(),
                file,
                len: position as u64,
            },
            storage,
            snapshot,
        })
    }

    /// Appends `entries` and the hard state (if it changed), then syncs once.
    pub fn persist(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> std::io::Result<()> {
        let mut frames = Vec::new();
        for entry in entries {
            push_frame(&mut frames, KIND_ENTRY, &entry.write_to_bytes()?);
        }
        if let Some(state) = hard_state {
            push_frame(&mut frames, KIND_HARD_STATE, &state.write_to_bytes()?);
        }
        if frames.is_empty() {
            return Ok(());
        }
        let written = self
            .file
            .write_all(&frames)
            .and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            // A part of it left behind would hide every later frame.
            let _ = self.file.set_len(self.len);
            return Err(error);
        }
        self.len += frames.len() as u64;
        Ok(())
    }

    /// Makes `snapshot` the one the log starts from: the snapshot file is replaced, and the
    /// log rewritten as the snapshot's marker, `entries` (those after it) and `hard_state`.
    pub fn install_snapshot(
        &mut self,
        snapshot: &Snapshot,
        entries: &[Entry],
        hard_state: &HardState,
    ) -> std::io::Result<()> {
        let body = snapshot.write_to_bytes()?;
        let mut file_bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
        file_bytes.extend_from_slice(&body);
        replace_file(&self.dir.join("snapshot"), &file_bytes)?;
        let mut frames = Vec::new();
        push_frame(
            &mut frames,
            KIND_SNAPSHOT,
            &snapshot.get_metadata().write_to_bytes()?,
        );
        for entry in entries {
            push_frame(&mut frames, KIND_ENTRY, &entry.write_to_bytes()?);
        }
        push_frame(&mut frames, KIND_HARD_STATE, &hard_state.write_to_bytes()?);
        replace_file(&self.dir.join("wal"), &frames)?;
        self.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(self.dir.join("wal"))?;
        self.len = frames.len() as u64;
        Ok(())
    }

    /// Bytes in the log: what decides when a snapshot is due.
    pub fn bytes(&self) -> u64 {
        self.len
    }
}

/// Appends one replayed entry as the library appended it: from its index on, it replaces
/// what was there. Refuses what the library never writes (a gap, a compacted index).
fn append(storage: &MemStorage, entry: &Entry) -> Result<(), String> {
    use raft::Storage;
    let first = storage.first_index().map_err(|e| e.to_string())?;
    let last = storage.last_index().map_err(|e| e.to_string())?;
    if entry.index < first || entry.index > last + 1 {
        return Err(format!(
            "entry {} outside the log [{first}, {}]",
            entry.index,
            last + 1
        ));
    }
    storage
        .wl()
        .append(std::slice::from_ref(entry))
        .map_err(|e| e.to_string())
}

fn push_frame(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    let mut payload = Vec::with_capacity(1 + body.len());
    payload.push(kind);
    payload.extend_from_slice(body);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// The frame at `position`: (kind, body, position after it), if it is whole and intact.
fn next_frame(bytes: &[u8], position: usize) -> Option<(u8, &[u8], usize)> {
    let header = bytes.get(position..position + FRAME_HEADER_BYTES)?;
    let length = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    if length > FRAME_BYTES_MAX {
        return None;
    }
    let payload = bytes.get(position + 8..position + FRAME_HEADER_BYTES + length)?;
    (crc32fast::hash(payload) == crc).then(|| {
        (
            payload[0],
            &payload[1..],
            position + FRAME_HEADER_BYTES + length,
        )
    })
}

fn read_snapshot(path: &Path) -> std::io::Result<Snapshot> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Snapshot::default())
        }
        Err(error) => return Err(error),
    };
    let damaged = || io_error(format!("{} is damaged", path.display()));
    let (crc, body) = bytes.split_at_checked(4).ok_or_else(damaged)?;
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(damaged());
    }
    Snapshot::parse_from_bytes(body).map_err(|_| damaged())
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Entry::default()
        }
    }

    fn state(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..HardState::default()
        }
    }

    fn data(storage: &MemStorage, low: u64, high: u64) -> Vec<Vec<u8>> {
        storage
            .entries(low, high, None, raft::GetEntriesContext::empty(false))
            .expect("entries")
            .into_iter()
            .map(|e| e.data.to_vec())
            .collect()
    }

    #[test]
    fn entries_and_votes_survive_reopen_and_overwrites_replay_as_written() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut wal = Wal::open(dir.path(), &[1, 2, 3]).expect("open").wal;
        let first = [entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")];
        wal.persist(&first, Some(&state(1, 2, 1))).expect("persist");
        // A new leader's entries replace 2 and 3.
        wal.persist(&[entry(2, 2, b"B")], Some(&state(2, 3, 2)))
            .expect("persist");
        let replayed = Wal::open(dir.path(), &[1, 2, 3]).expect("reopen");
        let storage = replayed.storage;
        assert_eq!(storage.last_index().expect("last"), 2);
        assert_eq!(data(&storage, 1, 3), vec![b"a".to_vec(), b"B".to_vec()]);
        let initial = storage.initial_state().expect("state");
        assert_eq!(initial.hard_state, state(2, 3, 2));
        assert_eq!(initial.conf_state.voters, vec![1, 2, 3]);
    }

    #[test]
    fn a_torn_tail_is_cut_at_the_last_whole_frame() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut wal = Wal::open(dir.path(), &[1]).expect("open").wal;
        wal.persist(&[entry(1, 1, b"kept")], None).expect("persist");
        let whole = wal.bytes();
        wal.persist(&[entry(2, 1, b"torn")], None).expect("persist");
        let path = dir.path().join("wal");
        for cut in whole + 1..wal.bytes() {
            let file = OpenOptions::new().write(true).open(&path).expect("open");
            file.set_len(cut).expect("cut");
            let replayed = Wal::open(dir.path(), &[1]).expect("recovers");
            assert_eq!(
                replayed.storage.last_index().expect("last"),
                1,
                "cut at {cut}"
            );
            assert_eq!(replayed.wal.bytes(), whole);
            // Put the torn frame back for the next cut.
            let mut wal = replayed.wal;
            wal.persist(&[entry(2, 1, b"torn")], None).expect("persist");
        }
    }

    #[test]
    fn a_snapshot_starts_the_log_and_keeps_what_follows() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut wal = Wal::open(dir.path(), &[1]).expect("open").wal;
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, 1, &[i as u8])).collect();
        wal.persist(&entries, Some(&state(1, 1, 5)))
            .expect("persist");
        let mut snapshot = Snapshot {
            data: b"image at 3".to_vec().into(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = 3;
        meta.term = 1;
        meta.mut_conf_state().voters = vec![1];
        wal.install_snapshot(&snapshot, &entries[3..], &state(1, 1, 5))
            .expect("snapshot");
        let replayed = Wal::open(dir.path(), &[1]).expect("reopen");
        assert_eq!(replayed.snapshot, snapshot);
        let storage = replayed.storage;
        assert_eq!(storage.first_index().expect("first"), 4);
        assert_eq!(storage.last_index().expect("last"), 5);
        assert_eq!(storage.term(3).expect("term of the snapshot"), 1);
        assert_eq!(data(&storage, 4, 6), vec![vec![4], vec![5]]);
        assert_eq!(storage.initial_state().expect("state").hard_state.commit, 5);
    }

    #[test]
    fn garbage_is_cut_and_never_panics() {
        for length in 0..64usize {
            let dir = tempfile::tempdir().expect("tmp");
            let bytes: Vec<u8> = (0..length).map(|i| (i * 37 % 251) as u8).collect();
            std::fs::write(dir.path().join("wal"), &bytes).expect("write");
            let replayed = Wal::open(dir.path(), &[1]).expect("opens");
            assert_eq!(replayed.wal.bytes(), 0);
        }
    }
}
