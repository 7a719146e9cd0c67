//! Kafka's text checkpoint files: a line with the version (`0`), a line with the entry count,
//! then one entry a line, fields separated by one space. Two of them live here:
//! `replication-offset-checkpoint` (per log directory, `topic partition offset` lines: the
//! high watermarks, [`OffsetCheckpoint`]) and `leader-epoch-checkpoint` (per partition,
//! `epoch start_offset` lines, `crate::leader_epoch`).
//!
//! Invariants: a file is written whole to `<name>.<n>.tmp`, fdatasynced, renamed over `<name>`
//! and the directory fsynced, so a crash leaves the old file or the new one, never a mix; a
//! file is accepted only if its version is 0, its count matches the entry lines exactly and
//! every field parses (a torn or foreign file is refused whole, never half read).

use std::path::{Path, PathBuf};

use crate::error::StorageError;
use crate::io::{read_small_file, sync_dir, write_small_file};

/// The only version of Kafka's checkpoint files.
const CHECKPOINT_VERSION: &str = "0";
/// A checkpoint larger than this is taken for damage (a node's high watermarks of a million
/// partitions take about 50 MB).
const CHECKPOINT_BYTES_MAX: u64 = 256 << 20;

/// The entry lines of a checkpoint's text, each split into exactly `fields` fields; `Err`
/// with the reason if the text is not a whole version-0 checkpoint.
pub(crate) fn parse_lines(text: &str, fields: usize) -> Result<Vec<Vec<&str>>, String> {
    let mut lines = text.split('\n');
    match lines.next() {
        Some(CHECKPOINT_VERSION) => {}
        Some(other) => return Err(format!("version {other:?}, expected {CHECKPOINT_VERSION}")),
        None => return Err("empty".to_string()),
    }
    let count: usize = lines
        .next()
        .and_then(|line| line.parse().ok())
        .ok_or("no entry count")?;
    let mut entries = Vec::with_capacity(count.min(1 << 16));
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        let split: Vec<&str> = line.split(' ').collect();
        if split.len() != fields || split.iter().any(|f| f.is_empty()) {
            return Err(format!("entry {line:?} does not have {fields} fields"));
        }
        entries.push(split);
    }
    // Only the final newline may follow the entries.
    if lines.any(|line| !line.is_empty()) || !text.ends_with('\n') {
        return Err("text after the entries, or no final newline".to_string());
    }
    if entries.len() != count {
        return Err(format!("{} entries, the count says {count}", entries.len()));
    }
    Ok(entries)
}

/// The text of a checkpoint holding `entries` (each already formatted as its fields).
pub(crate) fn encode_lines(entries: impl ExactSizeIterator<Item = String>) -> Vec<u8> {
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for entry in entries {
        text.push_str(&entry);
        text.push('\n');
    }
    text.into_bytes()
}

/// Replaces the file at `path` with `bytes` so that a crash leaves either the old file or the
/// new one: written whole to `<path>.<n>.tmp` and fdatasynced, renamed, then the directory
/// fsynced. `n` is unique in the process, so two writers of one file (a log closed and opened
/// again while the old one's write is in flight) never share a temporary file.
pub(crate) async fn write_atomically(path: &Path, bytes: Vec<u8>) -> Result<(), StorageError> {
    static TMP_FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = TMP_FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{n}.tmp"));
    let tmp = PathBuf::from(tmp);
    write_small_file(&tmp, bytes).await?;
    std::fs::rename(&tmp, path).map_err(|e| StorageError::io("rename", &tmp, e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    sync_dir(dir).await
}

/// A temporary file `write_atomically` left for the checkpoint `name` (a crash before the
/// rename), to be removed.
pub(crate) fn is_leftover(file_name: &str, name: &str) -> bool {
    file_name
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(".tmp"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The text of the checkpoint at `path`; `None` if there is none.
pub(crate) async fn read_text(path: &Path) -> Result<Option<String>, StorageError> {
    let Some(bytes) = read_small_file(path, CHECKPOINT_BYTES_MAX).await? else {
        return Ok(None);
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| StorageError::corrupt(path, "not UTF-8 text"))
}

/// The offset of one partition in a `replication-offset-checkpoint` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Kafka's `replication-offset-checkpoint`, one per log directory: the high watermark of each
/// partition, as `topic partition offset` lines.
pub struct OffsetCheckpoint;

/// The name of the high-watermark checkpoint in a log directory, as Kafka names it.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";

impl OffsetCheckpoint {
    /// The entries of the checkpoint at `path`: empty if there is no file,
    /// `StorageError::CorruptFile` if it is torn or not a checkpoint.
    pub async fn read(path: &Path) -> Result<Vec<PartitionOffset>, StorageError> {
        match read_text(path).await? {
            None => Ok(Vec::new()),
            Some(text) => Self::decode(&text).map_err(|reason| StorageError::corrupt(path, reason)),
        }
    }

    /// Removes what a crash before a rename left of the checkpoint at `path` (its
    /// `<name>.<n>.tmp` files), before its writer starts; what was removed.
    pub fn remove_leftovers(path: &Path) -> Result<Vec<PathBuf>, StorageError> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return Ok(Vec::new());
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(StorageError::io("read_dir", dir, error)),
        };
        let mut removed = Vec::new();
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            if file_name.to_str().is_some_and(|f| is_leftover(f, name)) {
                let leftover = entry.path();
                std::fs::remove_file(&leftover)
                    .map_err(|e| StorageError::io("remove", &leftover, e))?;
                removed.push(leftover);
            }
        }
        Ok(removed)
    }

    /// Replaces the checkpoint at `path` with `entries`, atomically (see the module comment).
    pub async fn write(path: &Path, entries: &[PartitionOffset]) -> Result<(), StorageError> {
        for entry in entries {
            let name_fits = !entry.topic.is_empty()
                && !entry
                    .topic
                    .contains(|c: char| c.is_whitespace() || c.is_control());
            if !name_fits {
                let reason = format!("topic {:?} cannot be written in a checkpoint", entry.topic);
                return Err(StorageError::InvalidConfig(reason));
            }
        }
        write_atomically(path, Self::encode(entries)).await
    }

    /// The text of a checkpoint holding `entries`.
    pub fn encode(entries: &[PartitionOffset]) -> Vec<u8> {
        encode_lines(
            entries
                .iter()
                .map(|e| format!("{} {} {}", e.topic, e.partition, e.offset)),
        )
    }

    /// The entries of a checkpoint's text; `Err` with the reason if it is not one.
    pub fn decode(text: &str) -> Result<Vec<PartitionOffset>, String> {
        parse_lines(text, 3)?
            .into_iter()
            .map(|fields| {
                let partition = fields[1].parse().ok().filter(|p: &i32| *p >= 0);
                let offset = fields[2].parse().ok().filter(|o: &i64| *o >= 0);
                match (partition, offset) {
                    (Some(partition), Some(offset)) => Ok(PartitionOffset {
                        topic: fields[0].to_string(),
                        partition,
                        offset,
                    }),
                    _ => Err(format!("entry {:?} does not parse", fields.join(" "))),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::log_tests::run;

    fn entry(topic: &str, partition: i32, offset: i64) -> PartitionOffset {
        PartitionOffset {
            topic: topic.to_string(),
            partition,
            offset,
        }
    }

    #[test]
    fn kafka_text_round_trips() {
        let entries = vec![entry("orders", 0, 42), entry("__consumer_offsets", 17, 0)];
        let text = OffsetCheckpoint::encode(&entries);
        assert_eq!(
            std::str::from_utf8(&text).expect("text"),
            "0\n2\norders 0 42\n__consumer_offsets 17 0\n"
        );
        assert_eq!(
            OffsetCheckpoint::decode(std::str::from_utf8(&text).expect("text")),
            Ok(entries)
        );
        assert_eq!(OffsetCheckpoint::decode("0\n0\n"), Ok(Vec::new()));
    }

    #[test]
    fn torn_and_foreign_texts_are_refused() {
        let whole = "0\n2\norders 0 42\norders 1 7\n";
        for cut in 0..whole.len() {
            assert!(
                OffsetCheckpoint::decode(&whole[..cut]).is_err(),
                "cut at {cut}: {:?}",
                &whole[..cut]
            );
        }
        for bad in [
            "1\n1\norders 0 42\n",
            "0\n1\norders 0\n",
            "0\n1\norders 0 42 9\n",
            "0\n1\norders x 42\n",
            "0\n1\norders 0 -3\n",
            "0\n1\norders  0 42\n",
            "0\n3\norders 0 42\n",
            "0\n1\norders 0 42\norders 1 7\n",
            "0\n1\norders 0 42\n\njunk\n",
            "garbage",
        ] {
            assert!(OffsetCheckpoint::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn write_replaces_the_file_and_read_refuses_garbage() {
        run(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE);
            assert_eq!(OffsetCheckpoint::read(&path).await.expect("read"), vec![]);
            let first = vec![entry("a", 0, 1), entry("b", 3, 9)];
            OffsetCheckpoint::write(&path, &first).await.expect("write");
            assert_eq!(OffsetCheckpoint::read(&path).await.expect("read"), first);
            let second = vec![entry("a", 0, 5)];
            OffsetCheckpoint::write(&path, &second)
                .await
                .expect("write");
            assert_eq!(OffsetCheckpoint::read(&path).await.expect("read"), second);
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .expect("read dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(
                names,
                vec![REPLICATION_OFFSET_CHECKPOINT_FILE],
                "no temporary file left"
            );
            let name = REPLICATION_OFFSET_CHECKPOINT_FILE;
            assert!(is_leftover("replication-offset-checkpoint.17.tmp", name));
            assert!(!is_leftover("replication-offset-checkpoint.tmp", name));
            assert!(!is_leftover(name, name));
            // A torn write of the file itself (the rename makes this impossible for our
            // writes, but a file copied or damaged by hand looks like this) is refused.
            std::fs::write(&path, b"0\n2\na 0 5\n").expect("tear");
            assert!(matches!(
                OffsetCheckpoint::read(&path).await,
                Err(StorageError::CorruptFile { .. })
            ));
            std::fs::write(&path, [0xff, 0x00, 0x13]).expect("garbage");
            assert!(matches!(
                OffsetCheckpoint::read(&path).await,
                Err(StorageError::CorruptFile { .. })
            ));
            assert!(OffsetCheckpoint::write(&path, &[entry("a b", 0, 1)])
                .await
                .is_err());
        });
    }

    fn topic() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._-]{1,20}"
    }

    proptest! {
        #[test]
        fn any_entries_round_trip(
            entries in proptest::collection::vec((topic(), 0i32..1000, 0i64..i64::MAX), 0..20)
        ) {
            let entries: Vec<PartitionOffset> =
                entries.into_iter().map(|(t, p, o)| entry(&t, p, o)).collect();
            let text = String::from_utf8(OffsetCheckpoint::encode(&entries)).expect("text");
            prop_assert_eq!(OffsetCheckpoint::decode(&text), Ok(entries.clone()));
            // Any strict prefix that cuts an entry, or the count, is refused.
            for cut in 0..text.len() {
                prop_assert!(OffsetCheckpoint::decode(&text[..cut]).is_err());
            }
        }

        #[test]
        fn any_text_is_parsed_or_refused_without_panicking(text in "\\PC{0,80}") {
            let _ = OffsetCheckpoint::decode(&text);
        }
    }

    #[test]
    fn leftovers_of_an_interrupted_write_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        let keep = ["replication-offset-checkpoint", "other.3.tmp", "orders-0"];
        let gone = [
            "replication-offset-checkpoint.3.tmp",
            "replication-offset-checkpoint.12.tmp",
        ];
        for name in keep.iter().chain(&gone) {
            std::fs::write(dir.path().join(name), b"x").expect("write");
        }
        let mut removed = OffsetCheckpoint::remove_leftovers(&path).expect("removes");
        removed.sort();
        let mut expected: Vec<PathBuf> = gone.iter().map(|n| dir.path().join(n)).collect();
        expected.sort();
        assert_eq!(removed, expected);
        for name in keep {
            assert!(dir.path().join(name).exists(), "{name} stays");
        }
        let missing = dir
            .path()
            .join("nowhere")
            .join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        assert_eq!(
            OffsetCheckpoint::remove_leftovers(&missing).expect("none"),
            Vec::<PathBuf>::new()
        );
    }
}
