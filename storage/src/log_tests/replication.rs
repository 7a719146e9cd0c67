//! A follower's surface of the log: replicated appends, truncation, the leader-epoch cache and
//! its checkpoint, reads bounded by the high watermark.

use super::*;

const EPOCH_FILE: &str = "leader-epoch-checkpoint";

/// A leader's log in `dir` holding one `batch(2, _)` per epoch in `epochs`, all written; and
/// its batches as a follower would fetch them.
async fn leader_with(dir: &Path, config: LogConfig, epochs: &[i32]) -> (Log, Vec<u8>) {
    let log = open(dir, config).await;
    for (i, &epoch) in epochs.iter().enumerate() {
        log.append(&batch(2, 1_000 + i as i64), epoch, 0)
            .expect("append");
    }
    log.flush().await.expect("flush");
    let fetched = read_all(&log, 0).await;
    (log, fetched)
}

/// The batches of `bytes`, each as its own byte vector, in order.
fn batches_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    BatchIter::new(bytes)
        .map(|item| bytes[item.expect("valid").1].to_vec())
        .collect()
}

fn epochs_of(bytes: &[u8]) -> Vec<i32> {
    BatchIter::new(bytes)
        .map(|item| item.expect("valid").0.partition_leader_epoch)
        .collect()
}

#[test]
fn a_follower_stores_the_leaders_batches_byte_for_byte() {
    for mode in modes() {
        run(move || async move {
            let (leader_dir, dir) = (
                tempfile::tempdir().expect("tmp"),
                tempfile::tempdir().expect("tmp"),
            );
            let (_leader, fetched) =
                leader_with(leader_dir.path(), config(mode), &[1, 1, 3, 3, 7]).await;
            assert_eq!(epochs_of(&fetched), vec![1, 1, 3, 3, 7]);
            let follower = open(dir.path(), config(mode)).await;
            let batches = batches_of(&fetched);
            // One fetch answer of two batches, then the rest.
            let first: Vec<u8> = batches[..2].concat();
            let info = follower.append_replicated(&first, 0).expect("replicate");
            assert_eq!(
                (info.base_offset, info.last_offset, info.batch_count),
                (0, 3, 2)
            );
            let rest: Vec<u8> = batches[2..].concat();
            let info = follower.append_replicated(&rest, 0).expect("replicate");
            assert_eq!((info.base_offset, info.last_offset), (4, 9));
            assert_eq!(follower.log_end_offset(), 10);
            assert!(
                read_all(&follower, 0).await == fetched,
                "{mode:?}: same bytes"
            );
            follower.close().await.expect("close");
            let follower = open(dir.path(), config(mode)).await;
            assert!(
                read_all(&follower, 0).await == fetched,
                "{mode:?}: after reopen"
            );
            assert_eq!(follower.latest_epoch(), Some(7));
            assert_eq!(follower.end_offset_for_epoch(3), Some((3, 8)));
        });
    }
}

#[test]
fn a_replicated_append_must_continue_the_log_and_pass_the_crc() {
    run(|| async {
        let (leader_dir, dir) = (
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
        );
        let (_leader, fetched) =
            leader_with(leader_dir.path(), config(IoMode::Buffered), &[0, 0, 0]).await;
        let batches = batches_of(&fetched);
        let follower = open(dir.path(), config(IoMode::Buffered)).await;
        let unexpected = |result: Result<AppendInfo, AppendError>| match result {
            Err(AppendError::Batch(BatchError::UnexpectedBaseOffset {
                expected,
                base_offset,
            })) => Some((expected, base_offset)),
            _ => None,
        };
        // A batch that starts inside the one before it: nothing stored, not even the first.
        let overlap = [batches[0].clone(), batches[0].clone()].concat();
        assert_eq!(
            unexpected(follower.append_replicated(&overlap, 0)),
            Some((2, 0))
        );
        assert_eq!(follower.log_end_offset(), 0);
        // A flipped byte inside the CRC's range.
        let mut damaged = batches[0].clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0x40;
        assert!(matches!(
            follower.append_replicated(&damaged, 0),
            Err(AppendError::Batch(BatchError::CrcMismatch { .. }))
        ));
        assert!(matches!(
            follower.append_replicated(&[], 0),
            Err(AppendError::Batch(BatchError::Empty))
        ));
        assert_eq!(follower.log_end_offset(), 0);
        follower.append_replicated(&fetched, 0).expect("replicate");
        // An overlap: the batch is already there.
        assert_eq!(
            unexpected(follower.append_replicated(&batches[2], 0)),
            Some((6, 4))
        );
        assert_eq!(follower.log_end_offset(), 6);
    });
}

#[test]
fn a_replicated_append_keeps_the_gaps_of_a_compacted_leader() {
    run(|| async {
        let (leader_dir, dir) = (
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
        );
        let (_leader, fetched) =
            leader_with(leader_dir.path(), config(IoMode::Buffered), &[0, 0, 0]).await;
        let batches = batches_of(&fetched);
        let follower = open(dir.path(), config(IoMode::Buffered)).await;
        // Offsets 0 and 1 went with the leader's cleaner; 2 and 3 are gone too.
        let info = follower
            .append_replicated(&batches[1], 0)
            .expect("replicate");
        assert_eq!((info.base_offset, info.last_offset), (2, 3));
        let info = follower
            .append_replicated(&batches[2], 0)
            .expect("replicate");
        assert_eq!((info.base_offset, info.last_offset), (4, 5));
        assert_eq!(follower.log_end_offset(), 6);
        let read = follower.read(0, 1 << 20).await.expect("read");
        assert_eq!(batch_base_offsets(&read.records), vec![2, 4]);
        follower.close().await.expect("close");
        let follower = open(dir.path(), config(IoMode::Buffered)).await;
        assert_eq!(follower.log_end_offset(), 6);
    });
}

#[test]
fn a_follower_tracks_producers_without_refusing_their_batches() {
    run(|| async {
        let (leader_dir, dir) = (
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
        );
        let leader = open(leader_dir.path(), config(IoMode::Buffered)).await;
        let now = wall_clock_ms();
        leader.append(&idempotent(9, 0, 0), 2, now).expect("append");
        // The leader's producer state knew a different history; the follower takes the
        // batches as they come: a sequence gap is no refusal on this path.
        let fresh_dir = tempfile::tempdir().expect("tmp");
        let fresh = open(fresh_dir.path(), config(IoMode::Buffered)).await;
        fresh.append(&idempotent(9, 0, 10), 2, now).expect("append");
        leader.flush().await.expect("flush");
        fresh.flush().await.expect("flush");
        let mut fetched = read_all(&leader, 0).await;
        let mut gap = read_all(&fresh, 0).await;
        gap[..8].copy_from_slice(&2i64.to_be_bytes());
        fetched.extend_from_slice(&gap);
        let follower = open(dir.path(), config(IoMode::Buffered)).await;
        follower
            .append_replicated(&fetched, now)
            .expect("replicate");
        assert_eq!(follower.log_end_offset(), 4);
        assert_eq!(follower.producer_count(), 1);
        // Promoted, the follower answers the producer's retry of its last batch as a retry.
        let retry = follower
            .append(&idempotent(9, 0, 10), 3, now)
            .expect("append");
        assert!(retry.duplicate);
        assert_eq!((retry.base_offset, retry.last_offset), (2, 3));
        assert!(out_of_order(follower.append(&idempotent(9, 0, 20), 3, now)));
    });
}

#[test]
fn offsets_for_leader_epoch_and_the_checkpoint_file() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let (log, _) = leader_with(dir.path(), config(mode), &[1, 1, 4, 4, 4, 6]).await;
            assert_eq!(log.latest_epoch(), Some(6));
            assert_eq!(log.end_offset_for_epoch(6), Some((6, 12)));
            assert_eq!(log.end_offset_for_epoch(5), Some((4, 10)));
            assert_eq!(log.end_offset_for_epoch(4), Some((4, 10)));
            assert_eq!(log.end_offset_for_epoch(2), Some((1, 4)));
            assert_eq!(log.end_offset_for_epoch(0), Some((0, 0)));
            assert_eq!(log.end_offset_for_epoch(7), None);
            log.close().await.expect("close");
            let path = dir.path().join(EPOCH_FILE);
            let text = std::fs::read_to_string(&path).expect("checkpoint");
            assert_eq!(text, "0\n3\n1 0\n4 4\n6 10\n");

            // Damaged or missing, it is rebuilt from the batches.
            for damage in [Some("0\n3\n1 0\n4 4\n"), Some("garbage"), None] {
                match damage {
                    Some(bytes) => std::fs::write(&path, bytes).expect("damage"),
                    None => std::fs::remove_file(&path).expect("remove"),
                }
                let log = open(dir.path(), config(mode)).await;
                assert_eq!(log.end_offset_for_epoch(5), Some((4, 10)), "{damage:?}");
                assert_eq!(log.latest_epoch(), Some(6));
                assert_eq!(std::fs::read_to_string(&path).expect("rewritten"), text);
                log.close().await.expect("close");
            }
        });
    }
}

#[test]
fn a_missing_checkpoint_is_rebuilt_across_segments() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            // Two batches per segment, epochs [1 1] [1 2] [2 2] [3]: one segment changes
            // epoch inside, the others do not.
            let config = small_segments(mode, 2);
            let (log, _) = leader_with(dir.path(), config, &[1, 1, 1, 2, 2, 2, 3]).await;
            assert_eq!(segment_bases(&log), vec![0, 4, 8, 12]);
            log.close().await.expect("close");
            let path = dir.path().join(EPOCH_FILE);
            let text = std::fs::read_to_string(&path).expect("checkpoint");
            assert_eq!(text, "0\n3\n1 0\n2 6\n3 12\n");
            std::fs::remove_file(&path).expect("remove");
            let log = open(dir.path(), config).await;
            assert_eq!(std::fs::read_to_string(&path).expect("rebuilt"), text);
            assert_eq!(log.end_offset_for_epoch(1), Some((1, 6)));
            assert_eq!(log.end_offset_for_epoch(2), Some((2, 12)));
        });
    }
}

#[test]
fn epochs_appended_after_the_last_checkpoint_are_recovered_from_the_active_segment() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let (log, _) = leader_with(dir.path(), config(mode), &[1, 1, 5]).await;
            log.sync().await.expect("sync");
            drop(log); // crash
                       // As if the crash came before the background write of the checkpoint.
            std::fs::write(dir.path().join(EPOCH_FILE), "0\n1\n1 0\n").expect("stale");
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(log.latest_epoch(), Some(5));
            assert_eq!(log.end_offset_for_epoch(1), Some((1, 4)));
            // A checkpoint past the log end (the crash took those batches back) is cut.
            drop(log);
            std::fs::write(dir.path().join(EPOCH_FILE), "0\n3\n1 0\n5 4\n9 6\n").expect("ahead");
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(log.latest_epoch(), Some(5));
            assert_eq!(log.end_offset_for_epoch(9), None);
        });
    }
}

#[test]
fn retention_moves_the_first_epoch_up_to_the_log_start() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            // Two batches per segment: [0 2] [4 6] [8 10] [12]; epochs start at 0, 6, 10.
            let (log, _) =
                leader_with(dir.path(), small_segments(mode, 2), &[1, 1, 1, 2, 2, 3, 3]).await;
            assert_eq!(segment_bases(&log), vec![0, 4, 8, 12]);
            let keep_two = Retention { ms: -1, bytes: 1 };
            let deleted = log.apply_retention(keep_two, 0).await.expect("retention");
            assert_eq!(deleted.segments, 3);
            assert_eq!(log.log_start_offset(), 12);
            assert_eq!(
                log.end_offset_for_epoch(2),
                Some((2, 12)),
                "epochs 1 and 2 are gone: below the earliest, where it starts"
            );
            // Epoch 3 began at 10; its first batch left is at 12.
            assert_eq!(log.end_offset_for_epoch(3), Some((3, 14)));
            let text = std::fs::read_to_string(dir.path().join(EPOCH_FILE)).expect("checkpoint");
            assert_eq!(text, "0\n1\n3 12\n");
            drop(log);
            let log = open(dir.path(), small_segments(mode, 2)).await;
            assert_eq!(log.end_offset_for_epoch(3), Some((3, 14)));
        });
    }
}

#[test]
fn reads_below_a_bound_stop_before_the_batch_that_reaches_it() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let log = open(dir.path(), config(mode)).await;
            for _ in 0..4 {
                log.append(&batch(3, 1_000), 0, 0).expect("append");
            }
            // Batches [0-2] [3-5] [6-8] [9-11]; a bound inside the third keeps it out.
            let read = |offset, bound| {
                let log = log.clone();
                async move {
                    let result = log.read_below(offset, 1 << 20, bound).await.expect("read");
                    batch_base_offsets(&result.records)
                }
            };
            assert_eq!(read(0, 7).await, vec![0, 3]);
            assert_eq!(read(0, 9).await, vec![0, 3, 6]);
            assert_eq!(read(4, 6).await, vec![3]);
            assert_eq!(
                read(6, 7).await,
                Vec::<i64>::new(),
                "the batch ends past the bound"
            );
            assert_eq!(
                read(7, 7).await,
                Vec::<i64>::new(),
                "at the bound: no records, no error"
            );
            assert_eq!(read(0, 12).await, vec![0, 3, 6, 9]);
            log.flush().await.expect("flush");
            assert_eq!(read(1, 3).await, vec![0]);
        });
    }
}

/// A batch of two records whose values are 300 bytes of `fill`.
fn filled(fill: u8) -> Vec<u8> {
    encode_batch(&BatchSpec {
        record_count: 2,
        value_bytes: 300,
        value_fill: fill,
        ..BatchSpec::default()
    })
}

/// Segments that roll after two `filled` batches.
fn two_filled_per_segment(io_mode: IoMode) -> LogConfig {
    LogConfig {
        segment_bytes_max: 2 * filled(b'a').len() as u64,
        ..config(io_mode)
    }
}

/// `bytes` hold a record value of `filled(fill)`.
fn holds(bytes: &[u8], fill: u8) -> bool {
    bytes.windows(300).any(|w| w.iter().all(|&b| b == fill))
}

#[test]
fn truncation_inside_the_active_segment_is_durable_and_appends_continue() {
    for mode in modes() {
        for flush_first in [true, false] {
            run(move || async move {
                let dir = tempfile::tempdir().expect("tmp");
                let log = open(dir.path(), config(mode)).await;
                for (i, fill) in (b'a'..b'f').enumerate() {
                    log.append(&filled(fill), 1 + i as i32 / 2, 0)
                        .expect("append");
                }
                if flush_first {
                    log.sync().await.expect("sync");
                }
                // Batches at 0 2 4 6 8 with epochs 1 1 2 2 3; keep 0 2 4.
                log.truncate_to(6).await.expect("truncate");
                assert_eq!(log.log_end_offset(), 6);
                assert_eq!(log.written_end_offset(), 6);
                assert!(log.synced_end_offset() <= 6);
                assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 2, 4]);
                assert_eq!(log.latest_epoch(), Some(2));
                assert_eq!(log.end_offset_for_epoch(2), Some((2, 6)));
                assert_eq!(log.end_offset_for_epoch(3), None);
                // New batches take the freed offsets; reads see them, not the cut ones.
                log.append(&filled(b'x'), 4, 0).expect("append");
                let all = read_all(&log, 0).await;
                assert_eq!(batch_base_offsets(&all), vec![0, 2, 4, 6]);
                assert!(
                    holds(&all, b'x'),
                    "{mode:?}: the new batch, not the cut one"
                );
                assert!(
                    !holds(&all, b'd') && !holds(&all, b'e'),
                    "{mode:?}: cut data gone"
                );
                log.sync().await.expect("sync");
                drop(log); // crash
                let log = open(dir.path(), config(mode)).await;
                let all = read_all(&log, 0).await;
                assert_eq!(batch_base_offsets(&all), vec![0, 2, 4, 6]);
                assert!(holds(&all, b'x') && !holds(&all, b'd'));
                assert_eq!(log.end_offset_for_epoch(2), Some((2, 6)));
                assert_eq!(log.latest_epoch(), Some(4));
            });
        }
    }
}

#[test]
fn a_crash_right_after_a_truncation_never_brings_the_cut_records_back() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let log = open(dir.path(), two_filled_per_segment(mode)).await;
            for fill in b'a'..b'k' {
                log.append(&filled(fill), 0, 0).expect("append");
            }
            log.sync().await.expect("sync");
            log.truncate_to(8).await.expect("truncate");
            drop(log); // crash
            let log = open(dir.path(), two_filled_per_segment(mode)).await;
            assert_eq!(log.log_end_offset(), 8);
            assert_eq!(
                batch_base_offsets(&read_all(&log, 0).await),
                vec![0, 2, 4, 6]
            );
        });
    }
}

#[test]
fn truncation_drops_later_segments_and_reactivates_the_one_holding_the_offset() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let config = two_filled_per_segment(mode);
            let log = open(dir.path(), config).await;
            for fill in b'a'..b'h' {
                log.append(&filled(fill), 0, 0).expect("append");
            }
            log.flush().await.expect("flush");
            // Segments [0 2] [4 6] [8 10] [12]: cut inside the second.
            assert_eq!(segment_bases(&log), vec![0, 4, 8, 12]);
            log.truncate_to(6).await.expect("truncate");
            assert_eq!(segment_bases(&log), vec![0, 4]);
            assert_eq!(
                files_with(dir.path(), LOG_SUFFIX),
                vec!["00000000000000000000.log", "00000000000000000004.log"]
            );
            assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 2, 4]);
            // The reactivated segment takes the next batch, then rolls as before.
            log.append(&filled(b'x'), 0, 0).expect("append");
            log.append(&filled(b'y'), 0, 0).expect("append");
            assert_eq!(segment_bases(&log), vec![0, 4, 8]);
            // A cut at a segment's base keeps that segment, empty.
            log.truncate_to(4).await.expect("truncate");
            assert_eq!(segment_bases(&log), vec![0, 4]);
            assert_eq!(log.size_bytes(), 2 * filled(b'a').len() as u64);
            log.close().await.expect("close");
            let log = open(dir.path(), config).await;
            assert_eq!(log.log_end_offset(), 4);
            assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 2]);
            assert_eq!(
                log.offset_for_timestamp(0).await.expect("time query"),
                Some((0, BatchSpec::default().base_timestamp))
            );
        });
    }
}

#[test]
fn truncation_refuses_offsets_inside_a_batch_or_out_of_range() {
    run(|| async {
        let dir = tempfile::tempdir().expect("tmp");
        let log = open(dir.path(), config(IoMode::Direct)).await;
        for fill in b'a'..b'd' {
            log.append(&filled(fill), 0, 0).expect("append");
        }
        let before = read_all(&log, 0).await;
        assert!(matches!(
            log.truncate_to(3).await,
            Err(TruncateError::NotABatchBoundary {
                offset: 3,
                batch_base_offset: 2,
                batch_last_offset: 3
            })
        ));
        assert!(matches!(
            log.truncate_to(7).await,
            Err(TruncateError::OffsetOutOfRange { offset: 7, .. })
        ));
        assert!(matches!(
            log.truncate_to(-1).await,
            Err(TruncateError::OffsetOutOfRange { .. })
        ));
        log.truncate_to(6)
            .await
            .expect("the log end changes nothing");
        assert!(read_all(&log, 0).await == before);
        log.append(&filled(b'd'), 0, 0).expect("appends go on");
    });
}

#[test]
fn appends_wait_out_a_truncation() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let log = open(dir.path(), config(mode)).await;
            for fill in b'a'..b'k' {
                log.append(&filled(fill), 0, 0).expect("append");
            }
            // Queued, not yet written: the truncation waits for the writes in flight.
            let truncation = glommio::spawn_local({
                let log = log.clone();
                async move { log.truncate_to(10).await }
            });
            assert!(matches!(
                log.append(&filled(b'z'), 0, 0),
                Err(AppendError::Storage(StorageError::Truncating { .. }))
            ));
            truncation.await.expect("truncate");
            log.append(&filled(b'z'), 0, 0)
                .expect("append after the truncation");
            log.sync().await.expect("sync");
            let all = read_all(&log, 0).await;
            assert_eq!(batch_base_offsets(&all), vec![0, 2, 4, 6, 8, 10]);
            assert!(holds(&all, b'z') && !holds(&all, b'f'));
        });
    }
}

#[test]
fn truncation_rewinds_the_producer_state() {
    run(|| async {
        let dir = tempfile::tempdir().expect("tmp");
        let log = open(dir.path(), small_segments(IoMode::Buffered, 2)).await;
        for sequence in [0, 2, 4, 6, 8] {
            answer(&log, &idempotent(5, 0, sequence));
        }
        log.sync().await.expect("sync");
        // Snapshots were taken at the rolls (offsets 4 and 8).
        assert!(!files_with(dir.path(), SNAPSHOT_SUFFIX).is_empty());
        log.truncate_to(6).await.expect("truncate");
        // No snapshot past the cut is left to describe batches that are gone.
        for name in files_with(dir.path(), SNAPSHOT_SUFFIX) {
            let offset: i64 = name[..20].parse().expect("offset");
            assert!(offset <= 6, "{name}");
        }
        // The batch at 4 (sequence 4) is still there: its retry is a retry.
        assert_eq!(answer(&log, &idempotent(5, 0, 4)), (4, 5, true));
        // The batch with sequence 6 was cut: it is appended anew, at the log end.
        assert_eq!(answer(&log, &idempotent(5, 0, 6)), (6, 7, false));
        log.close().await.expect("close");
        let log = open(dir.path(), small_segments(IoMode::Buffered, 2)).await;
        assert_eq!(answer(&log, &idempotent(5, 0, 6)), (6, 7, true));
        assert_eq!(answer(&log, &idempotent(5, 0, 8)), (8, 9, false));
    });
}
