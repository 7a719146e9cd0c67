//! Tests of the partition log through its public surface (`Log` and the crate's re-exports,
//! plus the files it keeps, as docs/format.md describes them), each run in both I/O modes
//! inside a glommio executor with a small io memory, on a temporary directory.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::path::Path;
use std::rc::Rc;

use crate::batch::test_batches::{batch_base_offsets, encode_batch, BatchSpec};
use crate::batch::{BatchError, BatchIter};
use crate::log::PAUSE_SEAL;
use crate::{
    AppendError, AppendInfo, BatchCache, Deleted, IoMode, Log, LogConfig, ReadError, Retention,
    StorageError, TruncateError,
};

mod compaction;
mod faults;
mod replication;
mod stage;

/// docs/format.md: the file a clean close leaves.
const CLEAN_SHUTDOWN_FILE: &str = "clean_shutdown.checkpoint";
/// docs/format.md: segment files are allocated ahead in steps of 32 MiB.
const ALLOCATION_STEP_BYTES: u64 = 32 << 20;
/// docs/format.md: the newest two producer snapshots are kept.
const SNAPSHOTS_KEPT: usize = 2;
/// docs/format.md: direct mode writes 4096-byte blocks.
const BLOCK_BYTES: usize = 4096;
const LOG_SUFFIX: &str = "log";
const INDEX_SUFFIX: &str = "index";
const TIME_INDEX_SUFFIX: &str = "timeindex";
const SPARE_SUFFIX: &str = "spare";
const SNAPSHOT_SUFFIX: &str = "snapshot";

/// Wall-clock time in milliseconds since the epoch.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

pub(crate) fn run<F: Future<Output = ()> + 'static>(test: impl FnOnce() -> F + Send + 'static) {
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor")
        .run(test());
}

fn modes() -> [IoMode; 2] {
    [IoMode::Buffered, IoMode::Direct]
}

fn config(io_mode: IoMode) -> LogConfig {
    LogConfig {
        io_mode,
        ..LogConfig::default()
    }
}

/// Segments that roll after `batches` of `batch(2, _)` each.
fn small_segments(io_mode: IoMode, batches: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max: batch(2, 1_000).len() as u64 * batches,
        ..config(io_mode)
    }
}

fn batch(record_count: i32, base_timestamp: i64) -> Vec<u8> {
    encode_batch(&BatchSpec {
        record_count,
        base_timestamp,
        ..BatchSpec::default()
    })
}

async fn open(dir: &Path, config: LogConfig) -> Log {
    Log::open(dir.to_path_buf(), config, Rc::new(BatchCache::new(8 << 20)))
        .await
        .expect("open")
}

/// Every batch from `offset` to the end, in order.
async fn read_all(log: &Log, mut offset: i64) -> Vec<u8> {
    let mut out = Vec::new();
    while offset < log.log_end_offset() {
        let result = log.read(offset, 1 << 20).await.expect("read");
        assert!(!result.records.is_empty());
        for item in BatchIter::new(&result.records) {
            let (header, _) = item.expect("valid batch");
            offset = header.last_offset() + 1;
        }
        out.extend_from_slice(&result.records);
    }
    out
}

#[test]
fn append_assigns_offsets_and_epoch_and_reads_back() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            let mut request = batch(3, 1_000);
            request.extend_from_slice(&batch(2, 2_000));
            let info = log.append(&request, 7, 0).expect("append");
            assert_eq!(info.base_offset, 0);
            assert_eq!(info.last_offset, 4);
            assert_eq!(info.batch_count, 2);
            assert_eq!(info.bytes, request.len());
            assert_eq!(info.max_timestamp, 2_001);
            assert_eq!(info.offset_of_max_timestamp, 3);
            let info = log.append(&batch(1, 3_000), 8, 0).expect("append");
            assert_eq!((info.base_offset, info.last_offset), (5, 5));
            assert_eq!(log.log_end_offset(), 6);
            assert_eq!(
                log.size_bytes(),
                (request.len() + batch(1, 3_000).len()) as u64
            );

            // Served from the write queue, then from disk (or the cache).
            for pass in 0..2 {
                let all = log.read(0, 1 << 20).await.expect("read");
                assert_eq!(
                    batch_base_offsets(&all.records),
                    vec![0, 3, 5],
                    "pass {pass}"
                );
                assert_eq!((all.log_start_offset, all.log_end_offset), (0, 6));
                let epochs: Vec<i32> = BatchIter::new(&all.records)
                    .map(|b| b.expect("valid").0.partition_leader_epoch)
                    .collect();
                assert_eq!(epochs, vec![7, 7, 8]);
                log.flush().await.expect("flush");
            }
            log.close().await.expect("close");
        });
    }
}

#[test]
fn read_in_the_middle_of_a_batch_returns_the_whole_batch() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            for _ in 0..3 {
                log.append(&batch(4, 1_000), 0, 0).expect("append");
            }
            log.flush().await.expect("flush");
            let result = log.read(6, 1 << 20).await.expect("read");
            assert_eq!(batch_base_offsets(&result.records), vec![4, 8]);
            // KIP-74: at least one whole batch even if it is larger than max_bytes.
            let result = log.read(5, 1).await.expect("read");
            assert_eq!(batch_base_offsets(&result.records), vec![4]);
            let one_batch_bytes = batch(4, 1_000).len();
            let result = log.read(0, one_batch_bytes * 2 + 1).await.expect("read");
            assert_eq!(batch_base_offsets(&result.records), vec![0, 4]);
        });
    }
}

#[test]
fn read_at_and_after_the_end() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            assert!(log
                .read(0, 100)
                .await
                .expect("empty log")
                .records
                .is_empty());
            log.append(&batch(2, 1_000), 0, 0).expect("append");
            let at_end = log.read(2, 100).await.expect("read at end");
            assert!(at_end.records.is_empty());
            assert_eq!(at_end.log_end_offset, 2);
            for offset in [3, -1] {
                match log.read(offset, 100).await {
                    Err(ReadError::OffsetOutOfRange {
                        log_end_offset: 2, ..
                    }) => {}
                    other => panic!("offset {offset}: expected out of range, got {other:?}"),
                }
            }
        });
    }
}

#[test]
fn invalid_batches_store_nothing() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), config(IoMode::Buffered)).await;
        let mut request = batch(1, 1_000);
        let mut bad = batch(1, 1_000);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        request.extend_from_slice(&bad);
        match log.append(&request, 0, 0) {
            Err(AppendError::Batch(BatchError::CrcMismatch { .. })) => {}
            other => panic!("expected a crc error, got {other:?}"),
        }
        assert!(matches!(
            log.append(&[], 0, 0),
            Err(AppendError::Batch(BatchError::Empty))
        ));
        assert_eq!(log.log_end_offset(), 0);
        assert_eq!(log.size_bytes(), 0);
    });
}

#[test]
fn batches_above_the_limit_store_nothing() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let small = batch(1, 1_000);
        let config = LogConfig {
            batch_bytes_max: small.len(),
            ..config(IoMode::Buffered)
        };
        let log = open(dir.path(), config).await;
        let mut request = small.clone();
        request.extend_from_slice(&batch(2, 1_000));
        match log.append(&request, 0, 0) {
            Err(AppendError::Batch(BatchError::BatchTooLarge {
                batch_bytes_max, ..
            })) => {
                assert_eq!(batch_bytes_max, small.len())
            }
            other => panic!("expected BatchTooLarge, got {other:?}"),
        }
        assert_eq!(log.log_end_offset(), 0, "nothing of the request was stored");
        log.append(&small, 0, 0)
            .expect("a batch at the limit is accepted");
        assert_eq!(log.log_end_offset(), 1);
    });
}

#[test]
fn segments_roll_by_size() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = small_segments(mode, 3);
            let log = open(dir.path(), config).await;
            for _ in 0..7 {
                log.append(&batch(2, 1_000), 0, 0).expect("append");
            }
            log.flush().await.expect("flush");
            assert_eq!(segment_bases(&log), vec![0, 6, 12]);
            assert_eq!(
                batch_base_offsets(&read_all(&log, 0).await),
                vec![0, 2, 4, 6, 8, 10, 12]
            );
            log.close().await.expect("close");
            for name in ["00000000000000000006.log", "00000000000000000006.index"] {
                assert!(dir.path().join(name).exists(), "{name}");
            }
            let log = open(dir.path(), config).await;
            assert_eq!(log.log_end_offset(), 14);
            assert_eq!(
                batch_base_offsets(&read_all(&log, 5).await),
                vec![4, 6, 8, 10, 12]
            );
            assert_eq!(
                log.append(&batch(1, 1_000), 0, 0)
                    .expect("append")
                    .base_offset,
                14
            );
            log.close().await.expect("close");
        });
    }
}

#[test]
fn a_reconfigured_log_takes_the_new_limits_from_the_next_append() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            for _ in 0..3 {
                log.append(&batch(2, 1_000), 0, 0).expect("append");
            }
            let small = batch(1, 1_000).len();
            let changed = LogConfig {
                segment_bytes_max: batch(2, 1_000).len() as u64 * 2,
                batch_bytes_max: small,
                io_mode: if mode == IoMode::Direct {
                    IoMode::Buffered
                } else {
                    IoMode::Direct
                },
                ..config(mode)
            };
            log.reconfigure(changed).expect("reconfigure");
            assert_eq!(log.config().io_mode, mode, "the I/O mode stays as opened");
            assert_eq!(log.config().batch_bytes_max, small);
            assert!(matches!(
                log.append(&batch(2, 1_000), 0, 0),
                Err(AppendError::Batch(BatchError::BatchTooLarge { .. }))
            ));
            for _ in 0..3 {
                log.append(&batch(1, 1_000), 0, 0)
                    .expect("append within the new limit");
            }
            log.flush().await.expect("flush");
            assert!(
                segment_bases(&log).len() > 1,
                "the smaller segment size rolled the active segment: {:?}",
                segment_bases(&log)
            );
            let bad = LogConfig {
                segment_bytes_max: 1,
                ..config(mode)
            };
            assert!(log.reconfigure(bad).is_err(), "checked as at open");
            log.close().await.expect("close");
        });
    }
}

#[test]
fn segments_roll_by_age() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            segment_ms_max: 1_000,
            ..config(IoMode::Buffered)
        };
        let log = open(dir.path(), config).await;
        log.append(&batch(1, 1_000), 0, 10_000).expect("append");
        log.append(&batch(1, 1_000), 0, 10_900).expect("append");
        assert_eq!(log.segment_base_offsets().len(), 1);
        log.append(&batch(1, 1_000), 0, 11_001).expect("append");
        assert_eq!(segment_bases(&log), vec![0, 2]);
        assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 1, 2]);
    });
}

#[test]
fn offset_for_timestamp_finds_first_record_at_or_after() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let batch_bytes = batch(3, 0).len() as u64;
            let config = LogConfig {
                segment_bytes_max: batch_bytes * 2,
                index_interval_bytes: 1,
                ..config(mode)
            };
            let log = open(dir.path(), config).await;
            assert_eq!(log.offset_for_timestamp(0).await.expect("lookup"), None);
            for ts in [1_000, 2_000, 3_000, 4_000, 5_000] {
                log.append(&batch(3, ts), 0, 0).expect("append");
            }
            let cases = [
                // Record i of a batch appended with `ts` has timestamp ts + i.
                (0, Some((0, 1_000))),
                (1_002, Some((2, 1_002))),
                (1_003, Some((3, 2_000))),
                (3_500, Some((9, 4_000))),
                (5_002, Some((14, 5_002))),
                (5_003, None),
            ];
            for (ts, expected) in cases {
                assert_eq!(
                    log.offset_for_timestamp(ts).await.expect("lookup"),
                    expected,
                    "{ts}"
                );
            }
            log.close().await.expect("close");
            let log = open(dir.path(), config).await;
            for (ts, expected) in cases {
                assert_eq!(
                    log.offset_for_timestamp(ts).await.expect("lookup"),
                    expected,
                    "{ts}"
                );
            }
        });
    }
}

#[test]
fn max_timestamp_record_is_the_first_with_the_largest_timestamp() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let batch_bytes = batch(3, 0).len() as u64;
            let config = LogConfig {
                segment_bytes_max: batch_bytes * 2,
                ..config(mode)
            };
            let log = open(dir.path(), config).await;
            assert_eq!(log.max_timestamp_record().await.expect("lookup"), None);
            // Record i of a batch appended with `ts` has timestamp ts + i: the largest,
            // 5_002, is offset 8, and offset 14 (in a later segment) carries it again.
            for ts in [1_000, 3_000, 5_000, 2_000, 5_000] {
                log.append(&batch(3, ts), 0, 0).expect("append");
            }
            assert_eq!(
                log.max_timestamp_record().await.expect("lookup"),
                Some((8, 5_002))
            );
            log.close().await.expect("close");
            let log = open(dir.path(), config).await;
            assert_eq!(
                log.max_timestamp_record().await.expect("lookup"),
                Some((8, 5_002))
            );
        });
    }
}

#[test]
fn reopen_after_clean_close_skips_recovery() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            for _ in 0..5 {
                log.append(&batch(2, 1_000), 0, 0).expect("append");
            }
            log.close().await.expect("close");
            assert!(matches!(
                log.append(&batch(1, 1_000), 0, 0),
                Err(AppendError::Storage(StorageError::Closed { .. }))
            ));
            let checkpoint = dir.path().join(CLEAN_SHUTDOWN_FILE);
            assert!(checkpoint.exists());
            let log_file = dir.path().join("00000000000000000000.log");
            let size = std::fs::metadata(&log_file).expect("stat").len();
            assert_eq!(
                size,
                5 * batch(2, 1_000).len() as u64,
                "no padding after close"
            );

            let log = open(dir.path(), config(mode)).await;
            assert!(
                !checkpoint.exists(),
                "a crash after reopen must run recovery"
            );
            assert_eq!(log.log_end_offset(), 10);
            assert_eq!(
                log.append(&batch(1, 1_000), 0, 0)
                    .expect("append")
                    .base_offset,
                10
            );
            assert_eq!(
                batch_base_offsets(&read_all(&log, 0).await),
                vec![0, 2, 4, 6, 8, 10]
            );
            log.sync().await.expect("sync");
        });
    }
}

#[test]
fn torn_final_batch_is_truncated_and_appends_continue() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let batch_bytes = batch(2, 1_000).len() as u64;
            let log = open(dir.path(), config(mode)).await;
            for _ in 0..4 {
                log.append(&batch(2, 1_000), 0, 0).expect("append");
            }
            log.sync().await.expect("sync");
            drop(log); // crash: no close
            let log_file = dir.path().join("00000000000000000000.log");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&log_file)
                .expect("open");
            file.set_len(batch_bytes * 4 - 10)
                .expect("cut the last batch");
            drop(file);

            let log = open(dir.path(), config(mode)).await;
            assert_eq!(log.log_end_offset(), 6);
            assert_eq!(
                std::fs::metadata(&log_file).expect("stat").len(),
                batch_bytes * 3
            );
            assert_eq!(
                log.append(&batch(2, 1_000), 0, 0)
                    .expect("append")
                    .base_offset,
                6
            );
            log.sync().await.expect("sync");
            drop(log);

            // Garbage after the valid batches (a torn write of something else).
            let mut bytes = std::fs::read(&log_file).expect("read");
            bytes.truncate((batch_bytes * 4) as usize);
            bytes.extend_from_slice(&[0xab; 300]);
            std::fs::write(&log_file, &bytes).expect("write");
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(log.log_end_offset(), 8);
            assert_eq!(
                batch_base_offsets(&read_all(&log, 0).await),
                vec![0, 2, 4, 6]
            );
            assert_eq!(
                log.append(&batch(1, 1_000), 0, 0)
                    .expect("append")
                    .base_offset,
                8
            );
            log.close().await.expect("close");
        });
    }
}

#[test]
fn corrupt_index_is_rebuilt() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let batch_bytes = batch(2, 1_000).len() as u64;
            let config = LogConfig {
                segment_bytes_max: batch_bytes * 4,
                index_interval_bytes: 1,
                ..config(mode)
            };
            let log = open(dir.path(), config).await;
            for ts in 0..10 {
                log.append(&batch(2, ts * 100), 0, 0).expect("append");
            }
            log.close().await.expect("close");
            let index = dir.path().join("00000000000000000000.index");
            let good = std::fs::read(&index).expect("read index");
            assert_eq!(good.len(), 3 * 8, "entries for batches 2..4");
            let mut bad = good.clone();
            bad[4..8].copy_from_slice(&u32::MAX.to_be_bytes()); // points past the end
            std::fs::write(&index, &bad).expect("corrupt index");
            std::fs::write(dir.path().join("00000000000000000008.timeindex"), [1, 2, 3])
                .expect("corrupt time index");

            let log = open(dir.path(), config).await;
            assert_eq!(std::fs::read(&index).expect("read index"), good, "rebuilt");
            assert_eq!(
                batch_base_offsets(&log.read(5, 1).await.expect("read").records),
                vec![4]
            );
            assert_eq!(
                log.offset_for_timestamp(250).await.expect("lookup"),
                Some((6, 300))
            );
            assert_eq!(log.log_end_offset(), 20);
        });
    }
}

#[test]
fn batches_larger_than_the_write_buffer() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = LogConfig {
                write_buffer_bytes_max: 8192,
                ..config(mode)
            };
            let log = open(dir.path(), config).await;
            let big = encode_batch(&BatchSpec {
                record_count: 4,
                value_bytes: 9_000,
                ..BatchSpec::default()
            });
            let small = batch(1, 1_000);
            let mut expected = Vec::new();
            for round in 0..6 {
                let records = if round % 2 == 0 { &big } else { &small };
                expected.push(log.log_end_offset());
                log.append(records, 0, 0).expect("append");
                if round % 2 == 1 {
                    // Read back from the write queue first, then let the writer catch up.
                    let tail = read_all(&log, expected[round - 1]).await;
                    assert_eq!(tail.len(), big.len() + small.len());
                    log.flush().await.expect("flush");
                }
            }
            let all = read_all(&log, 0).await;
            assert_eq!(batch_base_offsets(&all), vec![0, 4, 5, 9, 10, 14]);
            log.close().await.expect("close");
            let log = open(dir.path(), config).await;
            assert_eq!(read_all(&log, 0).await, all);
        });
    }
}

#[test]
fn appends_beyond_the_pending_limit_get_backpressure() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            write_buffer_bytes_max: 8192,
            ..config(IoMode::Direct)
        };
        let log = open(dir.path(), config).await;
        let records = encode_batch(&BatchSpec {
            value_bytes: 4_000,
            ..BatchSpec::default()
        });
        let mut accepted = 0;
        let refused = loop {
            match log.append(&records, 0, 0) {
                Ok(_) => accepted += 1,
                Err(error) => break error,
            }
            assert!(accepted < 100, "no backpressure");
        };
        assert!(matches!(
            refused,
            AppendError::Storage(StorageError::WriteBufferFull { .. })
        ));
        log.flush().await.expect("flush");
        log.append(&records, 0, 0)
            .expect("accepted again after the flush");
        assert_eq!(log.log_end_offset(), accepted + 1);
    });
}

/// Appends `records`, waiting for room in the write queue as often as it is full.
async fn append_waiting_for_room(log: &Log, records: &[u8]) {
    while let Err(error) = log.append(records, 0, 0) {
        match error {
            AppendError::Storage(StorageError::WriteBufferFull { .. }) => {
                log.wait_for_room(records.len()).await.expect("room")
            }
            error => panic!("append: {error}"),
        }
    }
}

/// A log with 64 KiB write buffers (a 512 KiB write queue), and a ~10 KB batch, which does
/// not divide a buffer.
async fn small_queue_log(dir: &Path, mode: IoMode) -> (Log, LogConfig, Vec<u8>) {
    let config = LogConfig {
        write_buffer_bytes_max: 64 << 10,
        ..config(mode)
    };
    let log = open(dir, config).await;
    let records = encode_batch(&BatchSpec {
        value_bytes: 10_000,
        ..BatchSpec::default()
    });
    (log, config, records)
}

#[test]
fn a_full_write_queue_takes_appends_again_once_its_oldest_write_is_done() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let (log, _, records) = small_queue_log(dir.path(), mode).await;
            let mut appended = 0;
            let mut waits = 0;
            while appended < 400 {
                match log.append(&records, 0, 0) {
                    Ok(_) => appended += 1,
                    Err(AppendError::Storage(StorageError::WriteBufferFull { .. })) => {
                        let queued = log.write_queue_bytes();
                        log.wait_for_room(records.len()).await.expect("room");
                        // Room came from the oldest writes; the rest are still queued.
                        let left = log.write_queue_bytes();
                        assert!(left > 0 && left < queued, "{mode:?}: {queued} -> {left}");
                        waits += 1;
                    }
                    Err(error) => panic!("append: {error}"),
                }
            }
            assert!(waits > 0, "{mode:?}: no backpressure");
            log.flush().await.expect("flush");
            assert_eq!(log.write_queue_bytes(), 0);
            let stored = read_all(&log, 0).await;
            assert_eq!(stored.len(), 400 * records.len(), "{mode:?}");
        });
    }
}

#[test]
fn full_chunks_are_written_two_at_a_time_in_direct_mode() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            // The batches do not divide a chunk: each chunk is filled to its end, so the next
            // one starts on a fresh block.
            let (log, config, records) = small_queue_log(dir.path(), mode).await;
            let count = 300;
            for _ in 0..count {
                append_waiting_for_room(&log, &records).await;
            }
            log.sync().await.expect("sync");
            let writes = log.disk_writes();
            let most = if mode == IoMode::Direct { 2 } else { 1 };
            assert_eq!(writes.most_in_flight, most, "{mode:?}: {writes:?}");
            let expected = records.len() * count;
            assert_eq!(read_all(&log, 0).await.len(), expected, "{mode:?}");
            // What is on disk is whole and in order: recovery keeps every batch.
            drop(log);
            let log = open(dir.path(), config).await;
            let stored = read_all(&log, 0).await;
            assert_eq!(stored.len(), expected, "{mode:?}");
            assert_eq!(
                batch_base_offsets(&stored),
                (0..count as i64).collect::<Vec<i64>>()
            );
        });
    }
}

#[test]
fn concurrent_syncs_share_fdatasyncs() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            let mut tasks = Vec::new();
            for _ in 0..16 {
                let log = log.clone();
                tasks.push(glommio::spawn_local(async move {
                    let info = log.append(&batch(1, 1_000), 0, 0).expect("append");
                    log.sync().await.expect("sync");
                    info.base_offset
                }));
            }
            let mut offsets = Vec::new();
            for task in tasks {
                offsets.push(task.await);
            }
            offsets.sort_unstable();
            assert_eq!(offsets, (0..16).collect::<Vec<i64>>());
            let progress = log.write_progress();
            assert_eq!(progress.ops_synced, progress.ops_enqueued);
        });
    }
}

#[test]
fn direct_mode_serves_tailing_reads_from_the_cache() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Rc::new(BatchCache::new(1 << 20));
        let log = Log::open(
            dir.path().to_path_buf(),
            config(IoMode::Direct),
            cache.clone(),
        )
        .await
        .expect("open");
        log.append(&batch(2, 1_000), 0, 0).expect("append");
        log.flush().await.expect("flush");
        assert!(cache.size_bytes() > 0);
        log.append(&batch(2, 1_000), 0, 0).expect("append");
        log.flush().await.expect("flush");
        // Remove the file's data behind the log's back: only the cache can answer now.
        let log_file = dir.path().join("00000000000000000000.log");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log_file)
            .expect("open")
            .set_len(0)
            .expect("cut");
        assert_eq!(
            batch_base_offsets(&log.read(0, 1 << 20).await.expect("read").records),
            vec![0, 2]
        );
        log.delete().await.expect("delete");
        assert_eq!(cache.size_bytes(), 0);
        assert!(!dir.path().exists());
    });
}

#[test]
fn a_read_from_disk_is_one_read_and_direct_mode_reads_ahead() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            // Batches of ~64 KiB, as producers send them, read 1 MiB at a time.
            let spec = BatchSpec {
                record_count: 600,
                value_bytes: 100,
                ..BatchSpec::default()
            };
            for _ in 0..40 {
                log.append(&encode_batch(&spec), 0, 0).expect("append");
            }
            log.close().await.expect("close");
            // Reopened with an empty cache, so every read goes to the file.
            let cache = Rc::new(BatchCache::new(8 << 20));
            let log = Log::open(dir.path().to_path_buf(), config(mode), cache.clone())
                .await
                .expect("open");
            let (mut offset, mut reads, mut bytes) = (0, 0, 0);
            while offset < log.log_end_offset() {
                let result = log.read(offset, 1 << 20).await.expect("read");
                assert!(!result.records.is_empty() && result.records.len() <= 1 << 20);
                let batches = batch_base_offsets(&result.records);
                assert_eq!(batches[0], offset, "{mode:?}: starts at the offset asked");
                offset = batches.last().expect("a batch") + 600;
                reads += 1;
                bytes += result.records.len() as u64;
                let disk = log.disk_reads();
                match mode {
                    IoMode::Buffered => {
                        assert_eq!(disk.count, reads, "{mode:?}: each answer is one read")
                    }
                    // The first answer reads the file itself; each later one was read ahead
                    // while the consumer handled the one before.
                    IoMode::Direct => assert_eq!(
                        (disk.count - disk.ahead, disk.ahead),
                        (1, reads - 1),
                        "{mode:?}: answer {reads}"
                    ),
                }
            }
            assert_eq!(offset, 40 * 600);
            // A window is the answer's limit plus two index intervals, in whole blocks.
            let window_bytes = (1 << 20) + 2 * 4096 + 2 * BLOCK_BYTES as u64;
            // Read-aheads behind the reader were dropped: at most the last two windows stay.
            assert!(
                cache.read_ahead_size_bytes() as u64 <= 2 * window_bytes,
                "{mode:?}: {} bytes of read-ahead left",
                cache.read_ahead_size_bytes()
            );
            assert!(
                log.disk_reads().bytes <= reads * window_bytes,
                "{mode:?}: {:?} to answer {bytes} bytes",
                log.disk_reads()
            );
            log.close().await.expect("close");
        });
    }
}

#[test]
fn failed_write_latches_the_log() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let one_batch_segments = LogConfig {
            segment_bytes_max: batch(1, 1_000).len() as u64,
            ..config(IoMode::Buffered)
        };
        let log = open(dir.path(), one_batch_segments).await;
        log.append(&batch(1, 1_000), 0, 0).expect("append");
        log.sync().await.expect("sync");
        // A real I/O failure: with the directory gone, sealing the rolled segment cannot
        // create its index files.
        std::fs::remove_dir_all(dir.path()).expect("remove the directory");
        log.append(&batch(1, 1_000), 0, 0).expect("append");
        assert!(matches!(log.sync().await, Err(StorageError::Failed { .. })));
        assert!(matches!(
            log.append(&batch(1, 1_000), 0, 0),
            Err(AppendError::Storage(StorageError::Failed { .. }))
        ));
        assert!(matches!(log.sync().await, Err(StorageError::Failed { .. })));
        assert_eq!(
            batch_base_offsets(&log.read(0, 1 << 20).await.expect("read").records),
            vec![0]
        );
    });
}

/// Compares logs without printing megabytes of bytes on failure.
fn assert_same(actual: &[u8], expected: &[u8], mode: IoMode) {
    let differs_at = actual.iter().zip(expected).position(|(a, b)| a != b);
    assert!(
        differs_at.is_none() && actual.len() == expected.len(),
        "{mode:?}: {} bytes read, {} expected, first difference at {differs_at:?}",
        actual.len(),
        expected.len()
    );
}

/// A tailing reader runs beside a producer that appends, flushes and syncs at random, with
/// tiny write buffers and segments so reads hit the write queue, writes in flight, the cache,
/// sealed segments and rolls. Every byte the reader sees must be what was appended.
#[test]
fn tailing_reader_sees_exactly_what_was_appended() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = LogConfig {
                segment_bytes_max: 24 << 10,
                write_buffer_bytes_max: 8 << 10,
                index_interval_bytes: 256,
                ..config(mode)
            };
            let log = open(dir.path(), config).await;
            let expected = Rc::new(RefCell::new(Vec::<u8>::new()));
            let batches_count = 200u64;
            let done = Rc::new(Cell::new(false));
            let producer = {
                let (log, expected, done) = (log.clone(), expected.clone(), done.clone());
                glommio::spawn_local(async move {
                    let mut seed = 0x243f_6a88_85a3_08d3u64;
                    let mut next = move |bound: u64| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed % bound
                    };
                    for index in 0..batches_count {
                        let spec = BatchSpec {
                            record_count: 1 + next(4) as i32,
                            base_timestamp: index as i64,
                            value_bytes: next(3_000) as usize,
                            value_fill: index as u8,
                            ..BatchSpec::default()
                        };
                        let mut records = encode_batch(&spec);
                        let info = loop {
                            match log.append(&records, 1, 0) {
                                Ok(info) => break info,
                                Err(AppendError::Storage(StorageError::WriteBufferFull {
                                    ..
                                })) => log.flush().await.expect("flush"),
                                Err(error) => panic!("append: {error}"),
                            }
                        };
                        records[..8].copy_from_slice(&info.base_offset.to_be_bytes());
                        records[12..16].copy_from_slice(&1i32.to_be_bytes());
                        expected.borrow_mut().extend_from_slice(&records);
                        match next(10) {
                            0 => log.sync().await.expect("sync"),
                            1 => log.flush().await.expect("flush"),
                            2..=4 => glommio::yield_if_needed().await,
                            _ => {}
                        }
                        if next(10) == 0 {
                            glommio::timer::sleep(std::time::Duration::from_micros(50)).await;
                        }
                    }
                    log.sync().await.expect("final sync");
                    done.set(true);
                })
            };
            let mut seen = Vec::new();
            let mut offset = 0;
            // Bounded by time, not by idle rounds: a loaded machine may stall the producer.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while std::time::Instant::now() < deadline {
                let result = log
                    .read(offset, 1 + (seen.len() % 5_000))
                    .await
                    .expect("read");
                if result.records.is_empty() {
                    if done.get() && offset == log.log_end_offset() {
                        break;
                    }
                    glommio::timer::sleep(std::time::Duration::from_micros(20)).await;
                    continue;
                }
                for item in BatchIter::new(&result.records) {
                    offset = item.expect("valid batch").0.last_offset() + 1;
                }
                seen.extend_from_slice(&result.records);
                let expected = expected.borrow();
                assert_same(&seen, &expected[..seen.len()], mode);
            }
            producer.await;
            assert_same(&seen, &expected.borrow(), mode);
            assert!(log.segment_base_offsets().len() > 3, "rolled");
            log.close().await.expect("close");
            let log = open(dir.path(), config).await;
            assert_same(&read_all(&log, 0).await, &expected.borrow(), mode);
        });
    }
}

/// Appends made while the writer is busy coalesce: a burst of small batches becomes a few
/// large writes, into a file allocated ahead of them.
#[test]
fn appends_coalesce_into_few_aligned_writes() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            let records = batch(1, 1_000);
            for _ in 0..2_000 {
                log.append(&records, 0, 0).expect("append");
            }
            let ops = log.write_progress().ops_enqueued;
            assert!(
                ops <= 8,
                "{mode:?}: {ops} writes for {} bytes",
                records.len() * 2_000
            );
            log.flush().await.expect("flush");
            let path = dir.path().join("00000000000000000000.log");
            let size = || std::fs::metadata(&path).expect("stat").len();
            // Allocated ahead of the writes in whole steps, so that syncs find the blocks
            // and the size already on disk; closing cuts the file to its data.
            assert_eq!(size(), ALLOCATION_STEP_BYTES, "{mode:?}");
            let logical = log.size_bytes();
            log.close().await.expect("close");
            assert_eq!(size(), logical, "{mode:?}");
        });
    }
}

#[test]
fn an_append_that_fits_a_chunk_is_one_write() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            // ~64 KiB requests, each flushed before the next, as acks=all producers send.
            let spec = BatchSpec {
                record_count: 600,
                value_bytes: 100,
                ..BatchSpec::default()
            };
            let request = encode_batch(&spec);
            assert!(request.len() > 60_000);
            for i in 0..10 {
                let before = log.write_progress().ops_enqueued;
                log.append(&request, 0, 0).expect("append");
                let ops = log.write_progress().ops_enqueued - before;
                assert_eq!(ops, 1, "{mode:?}: append {i} took {ops} writes");
                log.sync().await.expect("sync");
            }
            assert_eq!(
                batch_base_offsets(&read_all(&log, 0).await),
                (0..10).map(|i| i * 600).collect::<Vec<i64>>()
            );
        });
    }
}

/// A clean-shutdown checkpoint is not blindly trusted: the batches after the last index entry
/// are re-checked, and a corrupt one sends the open through full recovery.
#[test]
fn clean_checkpoint_is_double_checked() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            for _ in 0..4 {
                log.append(&batch(2, 1_000), 0, 0).expect("append");
            }
            log.close().await.expect("close");
            let log_file = dir.path().join("00000000000000000000.log");
            let mut bytes = std::fs::read(&log_file).expect("read");
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff; // same size, so the checkpoint still matches the file
            std::fs::write(&log_file, &bytes).expect("write");
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(log.log_end_offset(), 6, "the corrupt last batch was cut");
            assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 2, 4]);
        });
    }
}

#[test]
fn rejects_unusable_configs_and_oversized_appends() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Rc::new(BatchCache::new(1 << 20));
        for config in [
            LogConfig {
                segment_bytes_max: 10,
                ..LogConfig::default()
            },
            LogConfig {
                segment_bytes_max: 1 << 40,
                ..LogConfig::default()
            },
            LogConfig {
                write_buffer_bytes_max: 100,
                ..LogConfig::default()
            },
        ] {
            let opened = Log::open(dir.path().join("bad"), config, cache.clone()).await;
            assert!(matches!(opened, Err(StorageError::InvalidConfig(_))));
        }
        let config = LogConfig {
            segment_bytes_max: 1_000,
            ..config(IoMode::Buffered)
        };
        let log = open(dir.path(), config).await;
        let big = encode_batch(&BatchSpec {
            value_bytes: 2_000,
            ..BatchSpec::default()
        });
        assert!(matches!(
            log.append(&big, 0, 0),
            Err(AppendError::Batch(BatchError::RecordsTooLarge { .. }))
        ));
        let mut inconsistent = batch(2, 0);
        inconsistent[57..61].copy_from_slice(&3i32.to_be_bytes()); // record count, inside the CRC
        let crc = crate::batch::compute_crc(&inconsistent);
        inconsistent[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            log.append(&inconsistent, 0, 0),
            Err(AppendError::Batch(BatchError::InvalidRecordCount { .. }))
        ));
        assert_eq!(log.log_end_offset(), 0);
    });
}

/// A sync whose caller gives up mid-fdatasync (its future dropped, as a request timeout would)
/// neither blocks later syncs nor lets them skip the files it had taken.
#[test]
fn cancelled_sync_does_not_stall_or_skip_later_syncs() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            log.append(&batch(1, 1_000), 0, 0).expect("append");
            // Written before the sync: it needs an fdatasync round, in direct mode too.
            log.flush().await.expect("flush");
            let syncing = glommio::spawn_local({
                let log = log.clone();
                async move { log.sync().await }
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            // Until the fdatasync is in flight, or already done (on a loaded machine the
            // poll may miss the whole flight; then there is nothing left to cancel).
            loop {
                let started = {
                    let progress = log.write_progress();
                    progress.sync_in_flight || progress.ops_synced > 0
                };
                if started {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "sync never started");
                glommio::timer::sleep(std::time::Duration::from_micros(10)).await;
            }
            // Cancel while the fdatasync is in flight (None: the future was dropped unfinished).
            if syncing.cancel().await.is_none() {
                let progress = log.write_progress();
                assert!(!progress.sync_in_flight, "slot freed");
                assert_eq!(progress.files_to_sync, 1, "file handed back");
                assert_eq!(progress.ops_synced, 0);
            }
            log.sync().await.expect("sync after a cancelled one");
            let progress = log.write_progress();
            assert_eq!(progress.ops_synced, progress.ops_enqueued);
        });
    }
}

#[test]
fn a_relative_directory_works() {
    run(|| async {
        let dir = tempfile::tempdir().expect("tempdir");
        let relative = std::env::current_dir()
            .ok()
            .and_then(|cwd| pathdiff(dir.path(), &cwd))
            .expect("a relative path to the temp dir");
        let log = open(&relative, config(IoMode::Buffered)).await;
        log.append(&batch(2, 0), 0, 0).expect("append");
        log.sync().await.expect("sync");
        log.close().await.expect("close");
    });
}

/// `target` relative to `base` (both absolute).
fn pathdiff(target: &std::path::Path, base: &std::path::Path) -> Option<std::path::PathBuf> {
    let common = base.ancestors().find(|a| target.starts_with(a))?;
    let ups = base.strip_prefix(common).ok()?.components().count();
    let mut out: std::path::PathBuf = std::iter::repeat_n("..", ups).collect();
    out.push(target.strip_prefix(common).ok()?);
    Some(out)
}

fn segment_bases(log: &Log) -> Vec<i64> {
    log.segment_base_offsets()
}

/// Names of the files in `dir` with `suffix`, sorted.
fn files_with(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| {
            // docs/format.md: the offset in 20 decimal digits, a dot, the suffix.
            name.split_once('.').is_some_and(|(digits, s)| {
                s == suffix && digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())
            })
        })
        .collect();
    names.sort();
    names
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("stat").ino()
}

/// A log of `config` (two `batch(2, _)` per segment) holding seven batches, all written:
/// segments 0, 4, 8 and the active 12.
async fn seven_batches_in_four_segments(dir: &Path, config: LogConfig) -> Log {
    let log = open(dir, config).await;
    for _ in 0..7 {
        log.append(&batch(2, 1_000), 0, 0).expect("append");
    }
    log.flush().await.expect("flush");
    assert_eq!(segment_bases(&log), vec![0, 4, 8, 12]);
    log
}

#[test]
fn deleted_records_are_gone_for_readers_and_stay_gone_after_a_restart() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = small_segments(mode, 2);
            let log = seven_batches_in_four_segments(dir.path(), config).await;
            assert_eq!(log.delete_records_before(6).await.expect("delete"), 6);
            assert_eq!(
                segment_bases(&log),
                vec![4, 8, 12],
                "segment 0 ended before 6"
            );
            assert_eq!(log.log_start_offset(), 6);
            assert!(matches!(
                log.read(5, 1 << 20).await,
                Err(ReadError::OffsetOutOfRange {
                    log_start_offset: 6,
                    ..
                })
            ));
            assert_eq!(
                batch_base_offsets(&read_all(&log, 6).await),
                vec![6, 8, 10, 12]
            );
            assert_eq!(
                log.delete_records_before(3).await.expect("below"),
                6,
                "never back"
            );
            assert!(matches!(
                log.delete_records_before(15).await,
                Err(ReadError::OffsetOutOfRange {
                    log_end_offset: 14,
                    ..
                })
            ));
            // Retention does not move the start back to a segment's base.
            let keep_all = Retention { ms: -1, bytes: -1 };
            log.apply_retention(keep_all, 0).await.expect("retention");
            assert_eq!(log.log_start_offset(), 6);
            log.close().await.expect("close");

            let log = open(dir.path(), config).await;
            assert_eq!(log.log_start_offset(), 6, "the start survives a restart");
            assert!(log.read(5, 1 << 20).await.is_err());
            // Up to the end: everything but the active segment goes, appends go on.
            assert_eq!(log.delete_records_before(14).await.expect("all"), 14);
            assert_eq!(segment_bases(&log), vec![12]);
            assert_eq!(
                log.read(14, 1 << 20)
                    .await
                    .expect("at the end")
                    .records
                    .len(),
                0
            );
            assert_eq!(
                log.append(&batch(2, 1_000), 0, 0)
                    .expect("append")
                    .base_offset,
                14
            );
            log.close().await.expect("close");
        });
    }
}

#[test]
fn retention_by_size_deletes_the_oldest_segments_and_moves_the_start() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let batch_bytes = batch(2, 1_000).len() as u64;
            let config = small_segments(mode, 2);
            let log = seven_batches_in_four_segments(dir.path(), config).await;
            let keep_three_batches = Retention {
                ms: -1,
                bytes: (batch_bytes * 3) as i64,
            };
            let deleted = log
                .apply_retention(keep_three_batches, 0)
                .await
                .expect("retention");
            assert_eq!(
                deleted,
                Deleted {
                    segments: 2,
                    bytes: batch_bytes * 4
                }
            );
            assert_eq!(segment_bases(&log), vec![8, 12]);
            assert_eq!(log.log_start_offset(), 8);
            assert_eq!(log.size_bytes(), batch_bytes * 3);
            assert!(!dir.path().join("00000000000000000000.log").exists());
            assert!(!dir.path().join("00000000000000000004.index").exists());
            match log.read(7, 1 << 20).await {
                Err(ReadError::OffsetOutOfRange {
                    log_start_offset: 8,
                    log_end_offset: 14,
                    ..
                }) => {}
                other => panic!("read below the start: {other:?}"),
            }
            assert_eq!(
                batch_base_offsets(&read_all(&log, 8).await),
                vec![8, 10, 12]
            );
            // Nothing more to delete: the rest is within the limit.
            let again = log.apply_retention(keep_three_batches, 0).await;
            assert_eq!(again.expect("retention"), Deleted::default());

            // The start offset is the first segment's base: it survives a crash.
            drop(log);
            let log = open(dir.path(), config).await;
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (8, 14));
            assert_eq!(
                batch_base_offsets(&read_all(&log, 8).await),
                vec![8, 10, 12]
            );
            log.close().await.expect("close");
        });
    }
}

#[test]
fn retention_by_time_of_everything_keeps_the_end_offset() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = small_segments(mode, 2);
            let log = open(dir.path(), config).await;
            for timestamp in [1_000, 2_000, 3_000] {
                log.append(&batch(2, timestamp), 0, 0).expect("append");
            }
            log.flush().await.expect("flush");
            let retention = Retention {
                ms: 10_000,
                bytes: -1,
            };
            // The first segment's largest timestamp is 2001, the active one's 3001.
            let deleted = log
                .apply_retention(retention, 12_500)
                .await
                .expect("retention");
            assert_eq!(deleted.segments, 1);
            assert_eq!(log.log_start_offset(), 4);
            // Now the active segment has expired too: it is rolled and deleted, and an empty
            // segment at the end offset remains, in memory and on disk.
            let deleted = log
                .apply_retention(retention, 13_002)
                .await
                .expect("retention");
            assert_eq!(deleted.segments, 1);
            assert_eq!(segment_bases(&log), vec![6]);
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (6, 6));
            assert_eq!(
                files_with(dir.path(), LOG_SUFFIX),
                vec!["00000000000000000006.log".to_string()]
            );
            assert!(files_with(dir.path(), INDEX_SUFFIX).is_empty());
            drop(log); // crash
            let log = open(dir.path(), config).await;
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (6, 6));
            let info = log.append(&batch(1, 20_000), 0, 0).expect("append");
            assert_eq!(info.base_offset, 6);
            assert_eq!(batch_base_offsets(&read_all(&log, 6).await), vec![6]);
            log.close().await.expect("close");
            let log = open(dir.path(), config).await;
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (6, 7));
            log.close().await.expect("close");
        });
    }
}

#[test]
fn retention_waits_for_a_segment_to_be_sealed() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let batch_bytes = batch(2, 1_000).len() as u64;
        let config = small_segments(IoMode::Direct, 1);
        let log = open(dir.path(), config).await;
        for _ in 0..3 {
            log.append(&batch(2, 1_000), 0, 0).expect("append");
        }
        // Nothing has been written yet: the two sealed-to-be segments stay for now.
        let everything_but_one = Retention {
            ms: -1,
            bytes: batch_bytes as i64,
        };
        let deleted = log.apply_retention(everything_but_one, 0).await;
        assert_eq!(deleted.expect("retention"), Deleted::default());
        assert_eq!(segment_bases(&log), vec![0, 2, 4]);
        log.flush().await.expect("flush");
        let deleted = log.apply_retention(everything_but_one, 0).await;
        assert_eq!(deleted.expect("retention").segments, 2);
        assert_eq!(segment_bases(&log), vec![4]);
        assert_eq!(batch_base_offsets(&read_all(&log, 4).await), vec![4]);
    });
}

/// A seal (an fdatasync and small files) goes on beside the next segment's writes, and a
/// crash before it wrote the indexes leaves a log that recovery reads back whole.
#[test]
fn the_next_segment_is_written_beside_a_seal_and_a_crash_in_the_seal_loses_nothing() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let dir = dir.path();
            let log = open(dir, small_segments(mode, 2)).await;
            let pause = Rc::new(glommio::sync::Semaphore::new(0));
            PAUSE_SEAL.set(Some(pause.clone()));
            for timestamp in 0..3 {
                log.append(&batch(2, 1_000 + timestamp), 0, 0)
                    .expect("append");
            }
            // The third batch starts the second segment; acks=1 waits for its write only.
            let written = futures_lite::future::or(
                async { log.wait_written(6).await.map(|()| true) },
                async {
                    glommio::timer::sleep(std::time::Duration::from_secs(10)).await;
                    Ok(false)
                },
            )
            .await
            .expect("written");
            assert!(written, "{mode:?}: the next segment waited for the seal");
            assert_eq!(segment_bases(&log), vec![0, 4]);
            assert!(files_with(dir, INDEX_SUFFIX).is_empty(), "{mode:?}: sealed");
            // What a crash now would leave.
            let crashed = tempfile::tempdir().expect("tempdir");
            for entry in std::fs::read_dir(dir).expect("read dir") {
                let entry = entry.expect("entry");
                std::fs::copy(entry.path(), crashed.path().join(entry.file_name())).expect("copy");
            }
            PAUSE_SEAL.set(None);
            pause.signal(1);
            log.flush().await.expect("flush");
            assert_eq!(files_with(dir, INDEX_SUFFIX).len(), 1, "{mode:?}: sealed");
            let expected = read_all(&log, 0).await;
            assert_eq!(batch_base_offsets(&expected), vec![0, 2, 4]);
            log.close().await.expect("close");
            let recovered = open(crashed.path(), small_segments(mode, 2)).await;
            assert_eq!(segment_bases(&recovered), vec![0, 4], "{mode:?}");
            assert_same(&read_all(&recovered, 0).await, &expected, mode);
            let next = recovered.append(&batch(2, 2_000), 0, 0).expect("append");
            assert_eq!(next.base_offset, 6, "{mode:?}");
            recovered.close().await.expect("close");
        });
    }
}

#[test]
fn indexes_left_without_their_log_are_removed_on_open() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = small_segments(IoMode::Buffered, 1);
        let log = open(dir.path(), config).await;
        for _ in 0..3 {
            log.append(&batch(2, 1_000), 0, 0).expect("append");
        }
        log.close().await.expect("close");
        // A crash while retention deleted segment 0: its .log is gone, its indexes not.
        std::fs::remove_file(dir.path().join("00000000000000000000.log")).expect("remove");
        let log = open(dir.path(), config).await;
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (2, 6));
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let files = files_with(dir.path(), suffix);
            assert!(
                files
                    .iter()
                    .all(|name| !name.starts_with("00000000000000000000.")),
                "{files:?}"
            );
        }
        log.close().await.expect("close");
    });
}

/// Runs `op` on four segments of two batches each (reopened, so that reads go to the files
/// rather than the batch cache) and, while it waits for its first file read, lets retention
/// delete the first two segments: their files may be new segments' (spares) before the read
/// completes. Returns what `op` answered and the log.
async fn under_retention<T: 'static, F: Future<Output = T> + 'static>(
    dir: &Path,
    mode: IoMode,
    op: impl FnOnce(Log) -> F,
) -> (T, Log) {
    let config = small_segments(mode, 2);
    let log = seven_batches_in_four_segments(dir, config).await;
    log.close().await.expect("close");
    let log = open(dir, config).await;
    let op = glommio::spawn_local(op(log.clone()));
    glommio::executor().yield_now().await;
    let keep_three_batches = Retention {
        ms: -1,
        bytes: (batch(2, 1_000).len() * 3) as i64,
    };
    let deleted = log.apply_retention(keep_three_batches, 0).await;
    assert_eq!(deleted.expect("retention").segments, 2, "{mode:?}");
    (op.await, log)
}

#[test]
fn a_read_under_way_when_retention_deletes_its_segment_finds_it_gone() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let read = |log: Log| async move { log.read(0, 1 << 20).await };
            let (read, log) = under_retention(dir.path(), mode, read).await;
            match read {
                Err(ReadError::OffsetOutOfRange {
                    offset: 0,
                    log_start_offset: 8,
                    ..
                }) => {}
                other => panic!("{mode:?}: a read of a deleted segment: {other:?}"),
            }
            log.close().await.expect("close");
        });
    }
}

#[test]
fn a_time_query_under_way_when_retention_deletes_its_segment_searches_again() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let query = |log: Log| async move { log.offset_for_timestamp(1_000).await };
            let (found, log) = under_retention(dir.path(), mode, query).await;
            // The first record at or after the time among those the log still holds.
            let found = found.expect("lookup").expect("a record");
            assert_eq!(found.0, 8, "{mode:?}");
            log.close().await.expect("close");
        });
    }
}

#[test]
fn deleted_segment_files_are_reused_by_new_segments() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = small_segments(mode, 2);
            let log = seven_batches_in_four_segments(dir.path(), config).await;
            let keep_last_two = Retention { ms: -1, bytes: 1 };
            let deleted = log
                .apply_retention(keep_last_two, 0)
                .await
                .expect("retention");
            assert_eq!(deleted.segments, 3);
            // Two (SPARES_MAX) of the three deleted files wait as spares, the oldest first.
            let spares = files_with(dir.path(), SPARE_SUFFIX);
            assert_eq!(
                spares,
                vec![
                    "00000000000000000000.spare".to_string(),
                    "00000000000000000004.spare".to_string()
                ]
            );
            let spare_inode = inode(&dir.path().join(&spares[1]));

            // The next roll takes a spare instead of allocating a new file. It holds older
            // batches past what the new segment writes: a crash must not resurrect them.
            log.append(&batch(2, 1_000), 0, 0).expect("append");
            log.append(&batch(2, 1_000), 0, 0).expect("append");
            log.sync().await.expect("sync");
            assert_eq!(segment_bases(&log), vec![12, 16]);
            let reused = dir.path().join("00000000000000000016.log");
            assert_eq!(inode(&reused), spare_inode);
            assert_eq!(files_with(dir.path(), SPARE_SUFFIX).len(), 1);
            drop(log); // crash
            let log = open(dir.path(), config).await;
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (12, 18));
            assert_eq!(
                batch_base_offsets(&read_all(&log, 12).await),
                vec![12, 14, 16]
            );
            // Closing cuts the reused file to its size.
            let remaining = dir.path().join("00000000000000000000.spare");
            let remaining_inode = inode(&remaining);
            log.close().await.expect("close");
            let batch_bytes = batch(2, 1_000).len() as u64;
            assert_eq!(std::fs::metadata(&reused).expect("stat").len(), batch_bytes);
            // Reopening finds the remaining spare: the next new segment is that file.
            let log = open(dir.path(), config).await;
            log.append(&batch(2, 1_000), 0, 0).expect("append");
            log.append(&batch(2, 1_000), 0, 0).expect("append");
            log.flush().await.expect("flush");
            assert_eq!(segment_bases(&log), vec![12, 16, 20]);
            let new_segment = dir.path().join("00000000000000000020.log");
            assert_eq!(inode(&new_segment), remaining_inode);
            assert!(files_with(dir.path(), SPARE_SUFFIX).is_empty());
        });
    }
}

#[test]
fn read_ahead_uses_at_most_half_the_cache() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = BatchSpec {
            record_count: 600,
            value_bytes: 100,
            ..BatchSpec::default()
        };
        let log = open(dir.path(), config(IoMode::Direct)).await;
        for _ in 0..40 {
            log.append(&encode_batch(&spec), 0, 0).expect("append");
        }
        log.close().await.expect("close");
        // A 1 MiB cache: a window of 1 MiB is more than the half read-aheads may take.
        let cache = Rc::new(BatchCache::new(1 << 20));
        let log = Log::open(
            dir.path().to_path_buf(),
            config(IoMode::Direct),
            cache.clone(),
        )
        .await
        .expect("open");
        let all = read_all(&log, 0).await;
        assert_eq!(batch_base_offsets(&all).len(), 40);
        assert_eq!(log.disk_reads().ahead, 0);
        // Small windows fit: reading 128 KiB at a time reads ahead again.
        let mut offset = 0;
        while offset < log.log_end_offset() {
            let result = log.read(offset, 128 << 10).await.expect("read");
            offset = batch_base_offsets(&result.records).last().expect("a batch") + 600;
        }
        assert!(log.disk_reads().ahead > 0, "{:?}", log.disk_reads());
        assert!(cache.read_ahead_size_bytes() <= 512 << 10);
    });
}

/// In direct mode a sync writes the chunks it waits for durable (`RWF_DSYNC`) and needs no
/// fdatasync, across a segment's roll too; bytes written before the sync still get one.
#[test]
fn syncs_write_direct_chunks_durable_in_place_of_fdatasyncs() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), small_segments(mode, 3)).await;
            let direct = mode == IoMode::Direct;
            let info = log.append(&batch(2, 1_000), 0, 0).expect("append");
            log.sync().await.expect("sync");
            assert!(log.synced_end_offset() > info.last_offset);
            let writes = log.disk_writes();
            assert_eq!(
                (writes.durable, writes.fdatasyncs),
                if direct { (1, 0) } else { (0, 1) },
                "{mode:?}: {writes:?}"
            );

            // Written before the sync asks: only an fdatasync makes it durable.
            let info = log.append(&batch(2, 1_000), 0, 0).expect("append");
            log.flush().await.expect("flush");
            assert!(log.synced_end_offset() <= info.last_offset);
            log.sync().await.expect("sync");
            assert!(log.synced_end_offset() > info.last_offset);
            let before = log.disk_writes();
            assert_eq!(before.fdatasyncs, if direct { 1 } else { 2 }, "{mode:?}");

            // Seven batches across two rolls, then one sync: durable writes and seals only.
            let mut last = 0;
            for _ in 0..7 {
                last = log
                    .append(&batch(2, 1_000), 0, 0)
                    .expect("append")
                    .last_offset;
            }
            log.sync().await.expect("sync");
            assert!(log.synced_end_offset() > last);
            assert!(log.segment_base_offsets().len() >= 3, "{mode:?}: rolled");
            let progress = log.write_progress();
            assert_eq!(progress.ops_synced, progress.ops_enqueued, "{mode:?}");
            let after = log.disk_writes();
            if direct {
                assert_eq!(after.fdatasyncs, before.fdatasyncs, "{after:?}");
                assert_eq!(after.durable - before.durable, after.count - before.count);
            }
            drop(log);
            let log = open(dir.path(), small_segments(mode, 3)).await;
            assert_eq!(log.log_end_offset(), last + 1, "{mode:?}");
        });
    }
}

/// Group commit keeps its promise: waiters whose batches are written before a sync starts
/// share its fdatasync (or, in direct mode, the one durable write that carries them all), and
/// a batch appended while a sync is in flight is answered only by a later one, which starts
/// after the batch's write completed (or is that batch's own durable write).
#[test]
fn group_commit_shares_fdatasyncs_and_never_answers_with_one_begun_before_the_write() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            // Sixteen waiters at once: one round (or two, if the writer split them) covers all.
            let mut waiters = Vec::new();
            for _ in 0..16 {
                let log = log.clone();
                waiters.push(glommio::spawn_local(async move {
                    let info = log.append(&batch(1, 1_000), 0, 0).expect("append");
                    log.sync().await.expect("sync");
                    assert!(log.synced_end_offset() > info.last_offset);
                }));
            }
            for waiter in waiters {
                waiter.await;
            }
            let writes = log.disk_writes();
            let shared = writes.fdatasyncs + writes.durable;
            assert!(
                (1..=2).contains(&shared),
                "{mode:?}: {writes:?} for 16 waiters"
            );

            // A batch appended while a sync is in flight: that sync must not answer it.
            let mut overlapped = 0;
            for _ in 0..40 {
                let first_done = Rc::new(std::cell::Cell::new(false));
                let first = {
                    let (log, first_done) = (log.clone(), first_done.clone());
                    glommio::spawn_local(async move {
                        log.append(&batch(1, 1_000), 0, 0).expect("append");
                        log.sync().await.expect("sync");
                        first_done.set(true);
                    })
                };
                // Until its sync is in flight (an fdatasync round, or in direct mode the
                // durable write); a disk that syncs faster than this loop looks leaves this
                // round without an overlap.
                let syncing = || {
                    let progress = log.write_progress();
                    progress.sync_in_flight || progress.writes_in_flight > 0
                };
                while !syncing() && !first_done.get() {
                    glommio::timer::sleep(std::time::Duration::from_micros(20)).await;
                }
                let during_sync = syncing();
                let info = log.append(&batch(1, 1_000), 0, 0).expect("append");
                log.sync().await.expect("sync");
                assert!(
                    log.synced_end_offset() > info.last_offset,
                    "answered by a sync that began before offset {} was written",
                    info.last_offset
                );
                overlapped += usize::from(during_sync);
                first.await;
            }
            assert!(
                overlapped > 0,
                "no append landed during a sync: nothing was tested"
            );
        });
    }
}

/// A batch of two records (the size of `batch(2, _)`) from an idempotent producer.
fn idempotent(producer_id: i64, epoch: i16, base_sequence: i32) -> Vec<u8> {
    encode_batch(&BatchSpec {
        record_count: 2,
        base_timestamp: 1_000,
        producer_id,
        producer_epoch: epoch,
        base_sequence,
        ..BatchSpec::default()
    })
}

/// Appends `records` now (producers idle since the epoch would expire on the next open);
/// the offsets it was answered with and whether it was a retry.
fn answer(log: &Log, records: &[u8]) -> (i64, i64, bool) {
    let info = log.append(records, 0, wall_clock_ms()).expect("append");
    (info.base_offset, info.last_offset, info.duplicate)
}

fn out_of_order(result: Result<AppendInfo, AppendError>) -> bool {
    matches!(
        result,
        Err(AppendError::Producer(
            crate::ProducerError::OutOfOrderSequence { .. }
        ))
    )
}

#[test]
fn an_idempotent_retry_is_answered_with_its_offsets_and_stores_nothing() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(answer(&log, &idempotent(5, 0, 0)), (0, 1, false));
            assert_eq!(answer(&log, &batch(1, 1_000)), (2, 2, false));
            let size_bytes = log.size_bytes();
            assert_eq!(answer(&log, &idempotent(5, 0, 0)), (0, 1, true));
            assert_eq!((log.log_end_offset(), log.size_bytes()), (3, size_bytes));
            assert!(out_of_order(log.append(&idempotent(5, 0, 3), 0, 0)));
            assert!(matches!(
                log.append(&idempotent(5, 0, -1), 0, 0),
                Err(AppendError::Batch(
                    BatchError::InvalidProducerSequence { .. }
                ))
            ));
            let mut two = idempotent(5, 0, 2);
            two.extend_from_slice(&batch(1, 1_000));
            assert!(matches!(
                log.append(&two, 0, 0),
                Err(AppendError::Batch(BatchError::ProducerBatchNotAlone))
            ));
            assert_eq!(answer(&log, &idempotent(5, 0, 2)), (3, 4, false));
            assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 2, 3]);
            log.close().await.expect("close");
        });
    }
}

/// Producers A and B, whose batches span three segments (two batches each), and the
/// snapshots written when those rolled.
async fn producers_over_three_segments(dir: &Path, config: LogConfig) -> Log {
    let log = open(dir, config).await;
    for sequence in [0, 2, 4] {
        assert!(!answer(&log, &idempotent(1, 0, sequence)).2, "A");
    }
    for sequence in [0, 2] {
        assert!(!answer(&log, &idempotent(2, 3, sequence)).2, "B");
    }
    log.flush().await.expect("flush");
    assert_eq!(segment_bases(&log), vec![0, 4, 8]);
    assert_eq!(
        files_with(dir, SNAPSHOT_SUFFIX),
        vec![
            "00000000000000000004.snapshot",
            "00000000000000000008.snapshot"
        ]
    );
    log
}

/// A and B as [`producers_over_three_segments`] left them: every batch a retry, the next
/// sequence accepted, a gap refused.
fn check_producers_a_and_b(log: &Log) {
    for (index, sequence) in [0, 2, 4].into_iter().enumerate() {
        let offset = 2 * index as i64;
        assert_eq!(
            answer(log, &idempotent(1, 0, sequence)),
            (offset, offset + 1, true)
        );
    }
    assert_eq!(answer(log, &idempotent(2, 3, 2)), (8, 9, true));
    assert!(out_of_order(log.append(&idempotent(2, 3, 5), 0, 0)));
    assert!(matches!(
        log.append(&idempotent(2, 2, 4), 0, 0),
        Err(AppendError::Producer(
            crate::ProducerError::StaleEpoch { .. }
        ))
    ));
    assert_eq!(answer(log, &idempotent(1, 0, 6)), (10, 11, false));
}

#[test]
fn producer_state_is_rebuilt_after_a_crash_from_a_snapshot_and_the_log() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = small_segments(mode, 2);
            let log = producers_over_three_segments(dir.path(), config).await;
            drop(log); // crash: no close, no snapshot at the end
            let log = open(dir.path(), config).await;
            assert_eq!(log.producer_count(), 2);
            check_producers_a_and_b(&log);
            // A clean close writes a snapshot at the end, which alone rebuilds the state.
            log.close().await.expect("close");
            let names = files_with(dir.path(), SNAPSHOT_SUFFIX);
            assert_eq!(
                names.last().map(String::as_str),
                Some("00000000000000000012.snapshot")
            );
            assert_eq!(names.len(), SNAPSHOTS_KEPT);
            let log = open(dir.path(), config).await;
            assert_eq!(answer(&log, &idempotent(1, 0, 6)), (10, 11, true));
            log.close().await.expect("close");
        });
    }
}

#[test]
fn an_open_removes_the_snapshots_a_crash_left_beyond_those_kept() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = small_segments(IoMode::Buffered, 2);
        let log = producers_over_three_segments(dir.path(), config).await;
        let oldest = dir.path().join("00000000000000000004.snapshot");
        let saved = std::fs::read(&oldest).expect("read");
        log.close().await.expect("close");
        assert!(!oldest.exists(), "the close's snapshot trimmed the oldest");
        // A crash between a snapshot's write and its trim leaves one more than kept.
        std::fs::write(&oldest, saved).expect("restore");
        let log = open(dir.path(), config).await;
        assert_eq!(
            files_with(dir.path(), SNAPSHOT_SUFFIX),
            vec![
                "00000000000000000008.snapshot",
                "00000000000000000010.snapshot"
            ]
        );
        check_producers_a_and_b(&log);
        log.close().await.expect("close");
    });
}

#[test]
fn a_damaged_snapshot_gives_way_to_an_older_one_and_the_log() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = small_segments(IoMode::Buffered, 2);
        drop(producers_over_three_segments(dir.path(), config).await);
        let newest = dir.path().join("00000000000000000008.snapshot");
        let mut bytes = std::fs::read(&newest).expect("read");
        bytes[20] ^= 0x40;
        std::fs::write(&newest, bytes).expect("damage");
        let log = open(dir.path(), config).await;
        assert!(!newest.exists(), "a damaged snapshot is removed");
        check_producers_a_and_b(&log);
        log.close().await.expect("close");
    });
}

#[test]
fn producers_whose_batches_retention_deleted_are_kept_by_the_snapshot() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = small_segments(mode, 1);
            let log = open(dir.path(), config).await;
            assert_eq!(answer(&log, &idempotent(7, 0, 0)), (0, 1, false));
            for _ in 0..3 {
                log.append(&batch(2, 1_000), 0, 0).expect("append");
            }
            log.flush().await.expect("flush");
            let batch_bytes = batch(2, 1_000).len() as i64;
            let keep_one = Retention {
                ms: -1,
                bytes: batch_bytes,
            };
            log.apply_retention(keep_one, 0).await.expect("retention");
            assert_eq!(log.log_start_offset(), 6);
            drop(log); // crash: the producer's only batch is gone from the log
            let log = open(dir.path(), config).await;
            // KIP-360: the state outlives the records, so the retry is still known.
            assert_eq!(answer(&log, &idempotent(7, 0, 0)), (0, 1, true));
            assert!(out_of_order(log.append(&idempotent(7, 0, 5), 0, 0)));
            assert_eq!(answer(&log, &idempotent(7, 0, 2)), (8, 9, false));
            log.close().await.expect("close");
        });
    }
}

#[test]
fn idle_producers_expire_and_expired_ones_are_not_restored() {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            producer_id_expiration_ms: 1_000,
            ..config(IoMode::Buffered)
        };
        let log = open(dir.path(), config).await;
        let now_ms = wall_clock_ms();
        for (producer_id, at_ms) in [(1, now_ms - 10_000), (2, now_ms)] {
            log.append(&idempotent(producer_id, 0, 0), 0, at_ms)
                .expect("append");
        }
        assert_eq!(log.expire_producers(now_ms - 9_001), 0);
        assert_eq!(log.expire_producers(now_ms - 9_000), 1);
        assert_eq!(log.producer_count(), 1);
        // A forgotten producer starts anywhere.
        let info = log.append(&idempotent(1, 0, 40), 0, 0).expect("append");
        assert_eq!((info.base_offset, info.duplicate), (4, false));
        // Producers 1 and 3 idle since the epoch: the snapshot holds them, the next open
        // drops them.
        log.append(&idempotent(3, 0, 0), 0, 0).expect("append");
        log.close().await.expect("close");
        let log = open(dir.path(), config).await;
        assert_eq!(log.producer_count(), 1);
        assert_eq!(answer(&log, &idempotent(3, 0, 9)), (8, 9, false));
        log.close().await.expect("close");
    });
}
