//! The directory each voter speaks from: the directory id a voter's first hello named is
//! kept (in `raft/voter-directories`), and a later hello of that voter from another
//! directory is refused. A voter whose directory was wiped lost the log entries and votes
//! it had acknowledged; counted as its old self, it could help elect a leader that lacks
//! committed entries (the hole KIP-853 closes in Kafka). Refused, it is out of the quorum
//! until an operator removes its line from every other voter's file.
//!
//! Invariants: a voter's directory is on disk (fsynced) before any message of it is taken;
//! the file only grows, one `voter directory` line per voter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::wire::WireError;

pub struct VoterDirectories {
    path: PathBuf,
    /// Taken by the connection threads, a few times per connection: never on a shard.
    known: Mutex<BTreeMap<u64, String>>,
}

impl VoterDirectories {
    /// Reads the file at `path`, if there is one.
    pub fn open(path: PathBuf) -> std::io::Result<VoterDirectories> {
        let known = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text).map_err(|line| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: unreadable line {line:?}", path.display()),
                )
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(error) => return Err(error),
        };
        Ok(VoterDirectories {
            path,
            known: Mutex::new(known),
        })
    }

    /// The directory each voter that spoke to this one spoke from.
    pub fn known(&self) -> BTreeMap<u64, String> {
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Whether voter `voter` may speak from `directory`: the one it first spoke from, or
    /// any if it never spoke (then that one is kept).
    pub fn admit(&self, voter: u64, directory: &str) -> Result<(), WireError> {
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match known.get(&voter) {
            Some(kept) if kept == directory => Ok(()),
            Some(kept) => Err(WireError::Refused(format!(
                "voter {voter} speaks from directory {directory}, but it voted from directory \
                 {kept}: a voter whose directory was replaced is not counted as its old self \
                 (remove its line from {} on every other voter to take it back)",
                self.path.display()
            ))),
            None => {
                if directory.is_empty() || directory.contains(char::is_whitespace) {
                    return Err(WireError::Refused(format!(
                        "voter {voter} names no valid directory id"
                    )));
                }
                let mut next = known.clone();
                next.insert(voter, directory.to_string());
                write(&self.path, &next).map_err(|error| {
                    WireError::Refused(format!("keeping voter {voter}'s directory: {error}"))
                })?;
                *known = next;
                Ok(())
            }
        }
    }
}

fn parse(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut known = BTreeMap::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        match (
            fields.next().map(str::parse::<u64>),
            fields.next(),
            fields.next(),
        ) {
            (Some(Ok(voter)), Some(directory), None) => {
                known.insert(voter, directory.to_string());
            }
            _ => return Err(line.to_string()),
        }
    }
    Ok(known)
}

fn write(path: &Path, known: &BTreeMap<u64, String>) -> std::io::Result<()> {
    let text: String = known
        .iter()
        .map(|(voter, directory)| format!("{voter} {directory}\n"))
        .collect();
    crate::durable::replace_file(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_voter_keeps_the_directory_it_first_spoke_from_across_restarts() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("voter-directories");
        let directories = VoterDirectories::open(path.clone()).expect("opens");
        directories.admit(2, "dirA").expect("first hello");
        directories
            .admit(2, "dirA")
            .expect("the same directory again");
        directories.admit(3, "dirB").expect("another voter");
        assert!(directories.admit(2, "dirC").is_err(), "a wiped directory");
        assert!(directories.admit(4, "").is_err());
        assert_eq!(
            std::fs::read_to_string(&path).expect("written"),
            "2 dirA\n3 dirB\n"
        );

        let reopened = VoterDirectories::open(path.clone()).expect("reopens");
        assert!(reopened.admit(2, "dirC").is_err(), "kept across a restart");
        reopened.admit(3, "dirB").expect("kept");

        std::fs::write(&path, "2 dirA extra\n").expect("write");
        assert!(VoterDirectories::open(path).is_err(), "a damaged file");
    }
}
