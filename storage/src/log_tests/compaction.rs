//! Log compaction through `Log::clean`: which records survive (the latest per key,
//! tombstones until `delete_retention_ms`), compressed batches, the cleaner checkpoint,
//! idempotent producer state, and crashes part-way through a swap (stopped at each step by
//! the cleaner's test stops, then reopened without a close). Each log rolls a segment per
//! append (`segment_ms_max` 0, one millisecond between appends) and ends with a filler batch
//! in the active segment, so every record before it is in a sealed, cleanable segment.

use super::*;
use crate::compact::test_records::{decode_records, encode_keyed_batch, Decoded, KeyedBatch};
use crate::log::{CleanStep, PAUSE_AFTER_SWAP, STOP_AT};
use crate::{CleanPolicy, CleanStats, IoThrottle};
use proptest::prelude::*;
use std::time::Duration;

/// Timestamps of the batches these tests append.
const T0: i64 = 1_700_000_000_000;

fn rolling(io_mode: IoMode) -> LogConfig {
    LogConfig {
        segment_ms_max: 0,
        ..config(io_mode)
    }
}

fn keyed(records: &[(&str, Option<&str>)]) -> Vec<u8> {
    keyed_with(records, 0, -1, -1)
}

fn keyed_with(
    records: &[(&str, Option<&str>)],
    codec: u8,
    producer_id: i64,
    sequence: i32,
) -> Vec<u8> {
    encode_keyed_batch(&KeyedBatch {
        records: records
            .iter()
            .map(|(key, value)| (Some(key.as_bytes()), value.map(str::as_bytes)))
            .collect(),
        base_timestamp: T0,
        codec,
        producer_id,
        producer_epoch: if producer_id >= 0 { 0 } else { -1 },
        base_sequence: sequence,
    })
}

/// Appends each batch in a segment of its own, then a filler batch that stays active, and
/// waits until every sealed segment is on disk.
async fn append_rolled(log: &Log, batches: &[Vec<u8>], now_ms: &Cell<i64>) {
    for batch in batches
        .iter()
        .chain(std::iter::once(&keyed(&[("filler", Some("f"))])))
    {
        now_ms.set(now_ms.get() + 1);
        log.append(batch, 0, now_ms.get()).expect("append");
    }
    log.flush().await.expect("flush");
}

/// Every record from offset 0, as `(offset, key, value)` strings, the filler left out.
async fn records(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("utf-8");
    decode_records(&read_all(log, 0).await)
        .into_iter()
        .flat_map(|(_, records)| records)
        .map(|(offset, key, value): Decoded| (offset, text(key.expect("keyed")), value.map(text)))
        .filter(|(_, key, _)| key != "filler")
        .collect()
}

fn record(offset: i64, key: &str, value: Option<&str>) -> (i64, String, Option<String>) {
    (offset, key.to_string(), value.map(str::to_string))
}

fn policy() -> CleanPolicy {
    CleanPolicy::default()
}

async fn clean(log: &Log, now_ms: i64) -> CleanStats {
    log.clean(policy(), now_ms, &IoThrottle::unlimited())
        .await
        .expect("clean")
}

fn files_ending(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// user1 → A, B, C; user2 → X; user3 → Y, Z, over five segments.
fn users() -> Vec<Vec<u8>> {
    vec![
        keyed(&[("user1", Some("A")), ("user3", Some("Y"))]),
        keyed(&[("user1", Some("B"))]),
        keyed(&[("user1", Some("C")), ("user2", Some("X"))]),
        keyed(&[("user3", Some("Z"))]),
    ]
}

fn latest_users() -> Vec<(i64, String, Option<String>)> {
    vec![
        record(3, "user1", Some("C")),
        record(4, "user2", Some("X")),
        record(5, "user3", Some("Z")),
    ]
}

#[test]
fn cleaning_keeps_the_latest_value_of_each_key_at_its_offset() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(mode)).await;
            let now = Cell::new(T0);
            append_rolled(&log, &users(), &now).await;
            let size_before = log.size_bytes();
            let first = dir.path().join("00000000000000000000.log");
            let modified = || {
                std::fs::metadata(&first)
                    .and_then(|m| m.modified())
                    .expect("mtime")
            };
            let modified_before = modified();
            std::thread::sleep(Duration::from_millis(20));
            let stats = clean(&log, now.get()).await;
            assert_eq!(stats.segments_rewritten, 4, "{mode:?}");
            assert_eq!(
                stats.bytes_read, stats.bytes_before,
                "{mode:?}: all four read"
            );
            let logs = files_ending(dir.path(), ".log");
            assert_eq!(
                logs.len(),
                2,
                "{mode:?}: the sealed segments merged into one"
            );
            assert_eq!(modified(), modified_before, "{mode:?}: as old as before");
            assert_eq!(stats.records_removed, 3, "{mode:?}: A, Y and B");
            assert_eq!(stats.batches_removed, 2);
            assert_eq!(stats.first_dirty_offset, 6, "up to the active segment");
            assert!(log.size_bytes() < size_before);
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
            // Offsets in a gap answer the next batch.
            for offset in [0, 1, 2] {
                let read = log.read(offset, 1 << 20).await.expect("read");
                assert_eq!(
                    batch_base_offsets(&read.records)[0],
                    3,
                    "{mode:?} at {offset}"
                );
            }
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 7));
            // The cleaned log survives a clean close and a crash alike.
            log.close().await.expect("close");
            drop(log);
            let log = open(dir.path(), rolling(mode)).await;
            assert_eq!(records(&log).await, latest_users(), "{mode:?} reopened");
            drop(log);
            for index in files_ending(dir.path(), ".index") {
                std::fs::remove_file(dir.path().join(index)).expect("remove index");
            }
            let log = open(dir.path(), rolling(mode)).await;
            assert_eq!(records(&log).await, latest_users(), "{mode:?} rebuilt");
            assert_eq!(log.log_end_offset(), 7);
            let info = log.append(&keyed(&[("user2", Some("X2"))]), 0, now.get() + 10);
            assert_eq!(info.expect("append").base_offset, 7);
        });
    }
}

#[test]
fn a_throttled_cleaning_moves_no_faster_than_its_rate() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(mode)).await;
            let now = Cell::new(T0);
            append_rolled(&log, &users(), &now).await;
            // About a quarter of a second for each pass over the segments.
            let rate = 4.0 * log.size_bytes() as f64;
            let throttle = IoThrottle::new(rate);
            let started = std::time::Instant::now();
            let stats = log
                .clean(policy(), now.get(), &throttle)
                .await
                .expect("clean");
            let elapsed = started.elapsed().as_secs_f64();
            assert_eq!(stats.segments_rewritten, 4, "{mode:?}");
            // Every segment is read twice: into the offset map (all of it is dirty), then
            // to rewrite it; 20 ms is the throttle's slack.
            let floor = 2.0 * stats.bytes_read as f64 / rate - 0.020;
            assert!(
                elapsed >= floor,
                "{mode:?}: {elapsed} s, at least {floor} s"
            );
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
        });
    }
}

#[test]
fn tombstones_go_only_after_delete_retention() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(mode)).await;
            let now = Cell::new(T0);
            let batches = [
                keyed(&[("user1", Some("A"))]),
                keyed(&[("user1", None)]),
                keyed(&[("user2", Some("X"))]),
            ];
            append_rolled(&log, &batches, &now).await;
            let retention = CleanPolicy {
                delete_retention_ms: 1_000,
                ..policy()
            };
            let stats = log
                .clean(retention, T0 + 10, &IoThrottle::unlimited())
                .await
                .expect("clean");
            assert_eq!(
                stats.records_removed, 1,
                "{mode:?}: A goes, its tombstone stays"
            );
            assert_eq!(
                records(&log).await,
                vec![record(1, "user1", None), record(2, "user2", Some("X"))]
            );
            let early = log
                .clean(retention, T0 + 500, &IoThrottle::unlimited())
                .await
                .expect("clean");
            assert_eq!(
                early.segments_rewritten, 0,
                "{mode:?}: the tombstone is not due"
            );
            assert!(log.cleanable(retention, T0 + 500).dirty_bytes == 0);
            assert!(log.cleanable(retention, T0 + 1_001).tombstones_due);
            // Still due after a reopen: the checkpoint keeps the time.
            log.close().await.expect("close");
            drop(log);
            let log = open(dir.path(), rolling(mode)).await;
            let late = log
                .clean(retention, T0 + 1_001, &IoThrottle::unlimited())
                .await
                .expect("clean");
            assert_eq!(late.records_removed, 1, "{mode:?}: the tombstone goes");
            assert_eq!(records(&log).await, vec![record(2, "user2", Some("X"))]);
            assert!(!log.cleanable(retention, T0 + 5_000).tombstones_due);
        });
    }
}

#[test]
fn compressed_batches_are_cleaned_and_recompressed() {
    for codec in [1u8, 2, 3, 4] {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(IoMode::Buffered)).await;
            let now = Cell::new(T0);
            let value = "v".repeat(200);
            let batches = [
                keyed_with(
                    &[("k1", Some(&value)), ("k2", Some("b")), ("k1", Some("c"))],
                    codec,
                    -1,
                    -1,
                ),
                keyed_with(&[("k2", Some("d"))], codec, -1, -1),
            ];
            append_rolled(&log, &batches, &now).await;
            let stats = clean(&log, now.get()).await;
            assert_eq!(stats.records_removed, 2, "codec {codec}");
            let read = read_all(&log, 0).await;
            let decoded = decode_records(&read);
            let (header, first) = &decoded[0];
            assert_eq!(header.compression(), codec, "recompressed with its codec");
            assert_eq!((header.base_offset, header.last_offset_delta), (0, 2));
            assert_eq!(header.record_count, 1);
            assert_eq!(first, &vec![(2, Some(b"k1".to_vec()), Some(b"c".to_vec()))]);
            assert_eq!(
                records(&log).await,
                vec![record(2, "k1", Some("c")), record(3, "k2", Some("d"))]
            );
        });
    }
}

#[test]
fn a_second_clean_of_an_unchanged_log_is_a_no_op() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(mode)).await;
            let now = Cell::new(T0);
            append_rolled(&log, &users(), &now).await;
            assert!(log.cleanable(policy(), now.get()).dirty_ratio() > 0.99);
            assert!(clean(&log, now.get()).await.segments_rewritten > 0);
            let listing = files_ending(dir.path(), ".log");
            let again = clean(&log, now.get()).await;
            assert_eq!(again.segments_rewritten, 0, "{mode:?}");
            assert_eq!(again.keys, 0, "{mode:?}: nothing read into a map");
            assert_eq!(again.bytes_read, 0, "{mode:?}: nor rewritten");
            assert_eq!(log.cleanable(policy(), now.get()).dirty_bytes, 0);
            log.close().await.expect("close");
            drop(log);
            let log = open(dir.path(), rolling(mode)).await;
            assert_eq!(
                log.first_dirty_offset(),
                6,
                "the checkpoint survives a reopen"
            );
            assert_eq!(clean(&log, now.get()).await.keys, 0);
            // New records are dirty, and clean the old ones they replace.
            now.set(now.get() + 10);
            append_rolled(&log, &[keyed(&[("user2", Some("X2"))])], &now).await;
            let stats = clean(&log, now.get()).await;
            assert_eq!(
                (stats.keys, stats.records_removed),
                (2, 1),
                "{mode:?}: X goes"
            );
            assert_eq!(stats.first_dirty_offset, 8);
            assert_ne!(files_ending(dir.path(), ".log"), listing);
        });
    }
}

#[test]
fn idempotent_producer_state_survives_cleaning() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(mode)).await;
            let now = Cell::new(wall_clock_ms());
            let last = keyed_with(&[("b", Some("1"))], 0, 7, 1);
            let batches = [
                keyed_with(&[("a", Some("1"))], 0, 7, 0),
                last.clone(),
                keyed(&[("a", Some("2")), ("b", Some("2"))]),
            ];
            append_rolled(&log, &batches, &now).await;
            let stats = clean(&log, now.get()).await;
            assert_eq!(stats.records_removed, 2);
            // Both producer batches stay, empty, with their offsets and sequences.
            let decoded = decode_records(&read_all(&log, 0).await);
            let kept: Vec<(i64, i64, i32, i32)> = decoded
                .iter()
                .map(|(h, _)| {
                    (
                        h.base_offset,
                        h.producer_id,
                        h.base_sequence,
                        h.record_count,
                    )
                })
                .collect();
            assert_eq!(&kept[..2], &[(0, 7, 0, 0), (1, 7, 1, 0)], "{mode:?}");
            // Rebuilt from the cleaned log alone: no snapshot to start from.
            drop(log);
            for snapshot in files_ending(dir.path(), SNAPSHOT_SUFFIX) {
                std::fs::remove_file(dir.path().join(snapshot)).expect("remove snapshot");
            }
            let log = open(dir.path(), rolling(mode)).await;
            let retry = log.append(&last, 0, now.get() + 1).expect("append");
            assert!(retry.duplicate, "{mode:?}: the retry is still a duplicate");
            assert_eq!((retry.base_offset, retry.last_offset), (1, 1));
            let next = log.append(&keyed_with(&[("c", Some("1"))], 0, 7, 2), 0, now.get() + 2);
            assert!(!next.expect("append").duplicate);
        });
    }
}

/// The users' log, with a round stopped at `step` as a crash there would stop it.
async fn stopped_clean(dir: &Path, mode: IoMode, step: CleanStep) -> (Log, Cell<i64>) {
    let log = open(dir, rolling(mode)).await;
    let now = Cell::new(T0);
    append_rolled(&log, &users(), &now).await;
    STOP_AT.set(Some(step));
    let result = log
        .clean(policy(), now.get(), &IoThrottle::unlimited())
        .await;
    STOP_AT.set(None);
    assert!(result.is_err(), "{mode:?}: stopped at {step:?}");
    (log, now)
}

#[test]
fn a_crash_with_a_cleaned_file_left_keeps_the_old_segment() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let dir = dir.path();
            // The first segment loses everything: its .cleaned files are written first.
            let (log, now) = stopped_clean(dir, mode, CleanStep::Cleaned).await;
            assert_eq!(
                files_ending(dir, ".cleaned").len(),
                3,
                "{mode:?}: log and indexes"
            );
            drop(log);
            let log = open(dir, rolling(mode)).await;
            assert!(files_ending(dir, ".cleaned").is_empty(), "{mode:?}");
            let all = records(&log).await;
            assert_eq!(all.len(), 6, "{mode:?}: every record is still there");
            assert_eq!(log.first_dirty_offset(), 0);
            assert_eq!(clean(&log, now.get()).await.records_removed, 3);
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
        });
    }
}

#[test]
fn a_crash_with_a_swap_file_left_completes_the_swap() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let dir = dir.path();
            let (log, now) = stopped_clean(dir, mode, CleanStep::Swap).await;
            let swaps = files_ending(dir, ".swap");
            assert_eq!(
                swaps,
                vec![
                    "00000000000000000000.index.swap",
                    "00000000000000000000.log.swap",
                    "00000000000000000000.timeindex.swap",
                ],
                "{mode:?}"
            );
            drop(log);
            let log = open(dir, rolling(mode)).await;
            assert!(files_ending(dir, ".swap").is_empty(), "{mode:?}");
            // The swap held the four sealed segments merged: those it covers are gone.
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
            assert_eq!(files_ending(dir, ".log").len(), 2, "{mode:?}");
            assert_eq!(log.log_end_offset(), 7);
            assert_eq!(
                log.first_dirty_offset(),
                0,
                "the checkpoint was not written"
            );
            let again = clean(&log, now.get()).await;
            assert_eq!((again.records_removed, again.first_dirty_offset), (0, 6));
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
            // A crash with only the index swaps written keeps the old segment.
            drop(log);
            let stale = dir.join("00000000000000000003.index.swap");
            std::fs::write(&stale, b"stale").expect("write");
            let log = open(dir, rolling(mode)).await;
            assert!(!stale.exists());
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
        });
    }
}

#[test]
fn a_crash_after_merged_segments_were_set_aside_completes_the_swap() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let dir = dir.path();
            let (log, _) = stopped_clean(dir, mode, CleanStep::Deleted).await;
            // Every file of the four segments, the first one's indexes too: the swap's
            // renames then replace no file (which would free its blocks on the shard).
            let deleted = files_ending(dir, ".deleted");
            assert_eq!(deleted.len(), 12, "{mode:?}: {deleted:?}");
            for name in [
                "00000000000000000000.index",
                "00000000000000000000.timeindex",
            ] {
                assert!(
                    deleted.contains(&format!("{name}.deleted")),
                    "{mode:?}: {deleted:?}"
                );
            }
            drop(log);
            let log = open(dir, rolling(mode)).await;
            assert!(files_ending(dir, ".deleted").is_empty(), "{mode:?}");
            assert!(files_ending(dir, ".swap").is_empty(), "{mode:?}");
            assert_eq!(records(&log).await, latest_users(), "{mode:?}");
            assert_eq!(log.log_end_offset(), 7);
        });
    }
}

#[test]
fn replaced_segment_files_become_spares_for_new_segments() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let dir = dir.path();
            let log = open(dir, rolling(mode)).await;
            let now = Cell::new(T0);
            append_rolled(&log, &users(), &now).await;
            let old = |base: &str| inode(&dir.join(format!("000000000000000000{base}.log")));
            let (first, second) = (old("00"), old("02"));
            clean(&log, now.get()).await;
            // Four sealed segments merged into one: two of their files (SPARES_MAX) are kept,
            // the first segment's, which the swap would have unlinked, among them.
            assert_eq!(
                files_with(dir, SPARE_SUFFIX),
                vec!["00000000000000000000.spare", "00000000000000000002.spare"],
                "{mode:?}"
            );
            assert_eq!(inode(&dir.join("00000000000000000000.spare")), first);
            assert!(files_ending(dir, ".deleted").is_empty(), "{mode:?}");

            // The next roll takes a spare. Its old records lie past what the new segment
            // holds: a crash must not bring them back.
            now.set(now.get() + 1);
            log.append(&keyed(&[("user4", Some("W"))]), 0, now.get())
                .expect("append");
            log.sync().await.expect("sync");
            assert_eq!(inode(&dir.join("00000000000000000007.log")), second);
            drop(log);
            let log = open(dir, rolling(mode)).await;
            let mut latest = latest_users();
            latest.push(record(7, "user4", Some("W")));
            assert_eq!(records(&log).await, latest, "{mode:?}");
            assert_eq!(log.log_end_offset(), 8);

            // A truncation unlinks the spares: a cleaner's spare may hold offsets past the cut.
            assert_eq!(files_with(dir, SPARE_SUFFIX).len(), 1, "{mode:?}");
            log.truncate_to(7).await.expect("truncate");
            assert!(files_with(dir, SPARE_SUFFIX).is_empty(), "{mode:?}");
            log.close().await.expect("close");
        });
    }
}

#[test]
fn spares_freed_while_a_truncation_begins_are_unlinked() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let dir = dir.path();
            let log = open(dir, rolling(mode)).await;
            let now = Cell::new(T0);
            append_rolled(&log, &users(), &now).await;
            // The cleaner stops after its swap, before it renames the replaced files to
            // spares; a truncation starts (and finds no spares to unlink) meanwhile.
            let pause = Rc::new(glommio::sync::Semaphore::new(0));
            PAUSE_AFTER_SWAP.set(Some(pause.clone()));
            let cleaning = glommio::spawn_local({
                let (log, now) = (log.clone(), now.get());
                async move { clean(&log, now).await }
            });
            let mut turns = 0;
            while files_ending(dir, ".deleted").is_empty() {
                turns += 1;
                assert!(turns < 5_000, "{mode:?}: the swap never came");
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            let truncation = glommio::spawn_local({
                let log = log.clone();
                async move { log.truncate_to(5).await }
            });
            glommio::timer::sleep(Duration::from_millis(100)).await;
            PAUSE_AFTER_SWAP.set(None);
            pause.signal(1);
            truncation.await.expect("truncate");
            assert_eq!(cleaning.await.segments_rewritten, 4, "{mode:?}");
            assert!(files_with(dir, SPARE_SUFFIX).is_empty(), "{mode:?}");
            assert_eq!(log.log_end_offset(), 5);
            log.close().await.expect("close");
        });
    }
}

#[test]
fn merged_segments_stay_within_segment_bytes() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let segment_bytes_max = 200;
            let config = LogConfig {
                segment_bytes_max,
                ..rolling(mode)
            };
            let log = open(dir.path(), config).await;
            let now = Cell::new(T0);
            let mut batches = Vec::new();
            for i in 0..12 {
                let value = format!("{i}");
                batches.push(keyed(&[(["a", "b", "c"][i % 3], Some(&value))]));
            }
            append_rolled(&log, &batches, &now).await;
            let before = files_ending(dir.path(), ".log").len();
            clean(&log, now.get()).await;
            let logs = files_ending(dir.path(), ".log");
            assert!(logs.len() < before, "{mode:?}: {logs:?}");
            // The active segment's file is allocated ahead: sealed ones only.
            for name in &logs[..logs.len() - 1] {
                let bytes = std::fs::metadata(dir.path().join(name))
                    .expect("stat")
                    .len();
                assert!(bytes <= segment_bytes_max, "{mode:?}: {name} holds {bytes}");
            }
            let latest = vec![
                record(9, "a", Some("9")),
                record(10, "b", Some("10")),
                record(11, "c", Some("11")),
            ];
            assert_eq!(records(&log).await, latest, "{mode:?}");
            drop(log);
            let log = open(dir.path(), config).await;
            assert_eq!(records(&log).await, latest, "{mode:?} reopened");
        });
    }
}

#[test]
fn a_full_offset_map_cleans_up_to_where_it_reached() {
    run(|| async {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), rolling(IoMode::Buffered)).await;
        let now = Cell::new(T0);
        append_rolled(&log, &users(), &now).await;
        // Room for two keys: the first round reads the first batch only.
        let small = CleanPolicy {
            dedupe_buffer_bytes: 64,
            ..policy()
        };
        let first = log
            .clean(small, now.get(), &IoThrottle::unlimited())
            .await
            .expect("clean");
        assert_eq!(first.first_dirty_offset, 2);
        let mut rounds = 1;
        while log.cleanable(small, now.get()).dirty_bytes > 0 {
            log.clean(small, now.get(), &IoThrottle::unlimited())
                .await
                .expect("clean");
            rounds += 1;
            assert!(rounds < 10);
        }
        assert_eq!(records(&log).await, latest_users());
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// For any stream of keyed records (values and tombstones, in batches of one to three),
    /// the cleaned log holds exactly the latest record of each key at its original offset,
    /// with a map that holds all keys and with one that fills up after three.
    #[test]
    fn the_cleaned_log_holds_the_latest_record_of_each_key(
        batches in proptest::collection::vec(
            proptest::collection::vec((0u8..6, proptest::option::weighted(0.8, 0u8..50)), 1..4),
            1..12,
        ),
        small_map in any::<bool>(),
    ) {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(IoMode::Buffered)).await;
            let now = Cell::new(T0);
            let mut latest = std::collections::BTreeMap::new();
            let mut offset = 0i64;
            let mut encoded = Vec::new();
            for batch in &batches {
                let records: Vec<(String, Option<String>)> = batch
                    .iter()
                    .map(|(key, value)| (format!("k{key}"), value.map(|v| format!("v{v}"))))
                    .collect();
                for (key, value) in &records {
                    latest.insert(key.clone(), (offset, value.clone()));
                    offset += 1;
                }
                let borrowed: Vec<(&str, Option<&str>)> =
                    records.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
                encoded.push(keyed(&borrowed));
            }
            append_rolled(&log, &encoded, &now).await;
            let policy = CleanPolicy {
                dedupe_buffer_bytes: if small_map { 3 * 32 } else { 1 << 20 },
                ..policy()
            };
            for _ in 0..batches.len() + 1 {
                log.clean(policy, now.get(), &IoThrottle::unlimited()).await.expect("clean");
            }
            let mut expected: Vec<(i64, String, Option<String>)> = latest
                .into_iter()
                .map(|(key, (offset, value))| (offset, key, value))
                .collect();
            expected.sort();
            assert_eq!(records(&log).await, expected);
        });
    }
}

#[test]
fn reads_racing_a_clean_answer_whole_valid_batches() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), rolling(mode)).await;
            let now = Cell::new(T0);
            let mut batches = Vec::new();
            for round in 0..20 {
                let value = format!("{round}");
                batches.push(keyed(&[("user1", Some(&value)), ("user2", Some(&value))]));
            }
            append_rolled(&log, &batches, &now).await;
            let done = Rc::new(Cell::new(false));
            let reader = {
                let (log, done) = (log.clone(), done.clone());
                glommio::spawn_local(async move {
                    let mut reads = 0;
                    while !done.get() || reads == 0 {
                        // read_all checks every batch's CRC; the latest values are always there.
                        let all = records(&log).await;
                        assert_eq!(
                            &all[all.len() - 2..],
                            &[
                                record(38, "user1", Some("19")),
                                record(39, "user2", Some("19")),
                            ]
                        );
                        reads += 1;
                        // Reads the cache answers never wait: let the cleaner run.
                        glommio::timer::sleep(std::time::Duration::from_micros(200)).await;
                    }
                    reads
                })
            };
            glommio::yield_if_needed().await;
            let stats = clean(&log, now.get()).await;
            assert_eq!(stats.records_removed, 38, "{mode:?}");
            done.set(true);
            assert!(reader.await > 0);
            assert_eq!(records(&log).await.len(), 2);
        });
    }
}
