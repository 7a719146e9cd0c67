//! Disk faults under the real log code: a fault plan (`crate::io::testing`) in front of the
//! segment files fails a write or an fdatasync, or tears a write at a chosen byte.

use super::*;
use crate::io::testing::{plan_faults, DiskFaults};

/// A log in `dir` with a fault plan in front of its segment files, holding one batch.
async fn faulty_log(dir: &Path, mode: IoMode) -> (Log, Rc<DiskFaults>) {
    let faults = plan_faults(dir);
    let log = open(dir, config(mode)).await;
    log.append(&batch(1, 1_000), 0, 0).expect("append");
    (log, faults)
}

#[test]
fn a_failed_fdatasync_latches_the_log() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let (log, faults) = faulty_log(dir.path(), mode).await;
            log.sync().await.expect("sync");
            faults.fail_next_sync();
            log.append(&batch(1, 1_000), 0, 0).expect("append");
            // Written before the sync: the sync is an fdatasync round, in direct mode too.
            log.flush().await.expect("flush");
            assert!(
                log.sync().await.is_err(),
                "{mode:?}: the failed fdatasync is reported"
            );
            assert_eq!(faults.injected.get(), 1);
            // Never retried: the kernel may have dropped the dirty pages.
            assert!(matches!(log.sync().await, Err(StorageError::Failed { .. })));
            assert!(matches!(
                log.append(&batch(1, 1_000), 0, 0),
                Err(AppendError::Storage(StorageError::Failed { .. }))
            ));
            // Writes that completed stay completed: a flush has nothing to wait for.
            log.flush().await.expect("flush");
            assert!(matches!(
                log.truncate_to(0).await,
                Err(TruncateError::Storage(StorageError::Failed { .. }))
            ));
            assert_eq!(
                log.synced_end_offset(),
                1,
                "{mode:?}: only the first sync counts"
            );
            // Reads still answer what was written.
            assert_eq!(
                batch_base_offsets(&log.read(0, 1 << 20).await.expect("read").records),
                vec![0, 1]
            );
        });
    }
}

/// A sync writes a direct chunk durable in place of an fdatasync: a failure of that write's
/// sync latches the log as a failed fdatasync does, and nothing of it counts as durable.
#[test]
fn a_failed_durable_write_latches_the_log() {
    run(|| async move {
        let dir = tempfile::tempdir().expect("tmp");
        let (log, faults) = faulty_log(dir.path(), IoMode::Direct).await;
        log.sync().await.expect("sync");
        assert_eq!(log.disk_writes().durable, 1, "{:?}", log.disk_writes());
        faults.fail_next_sync();
        log.append(&batch(1, 1_000), 0, 0).expect("append");
        assert!(log.sync().await.is_err(), "the failed sync is reported");
        assert_eq!(faults.injected.get(), 1);
        assert_eq!(log.disk_writes().fdatasyncs, 0, "{:?}", log.disk_writes());
        assert!(matches!(log.sync().await, Err(StorageError::Failed { .. })));
        assert!(matches!(
            log.append(&batch(1, 1_000), 0, 0),
            Err(AppendError::Storage(StorageError::Failed { .. }))
        ));
        assert_eq!(log.synced_end_offset(), 1, "only the first sync counts");
    });
}

#[test]
fn a_failed_write_latches_the_log_and_its_waiters() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let (log, faults) = faulty_log(dir.path(), mode).await;
            log.flush().await.expect("flush");
            faults.fail_next_write();
            let info = log.append(&batch(1, 1_000), 0, 0).expect("append");
            assert!(matches!(
                log.wait_written(info.last_offset + 1).await,
                Err(StorageError::Failed { .. })
            ));
            assert!(matches!(log.sync().await, Err(StorageError::Failed { .. })));
            assert!(matches!(
                log.append(&batch(1, 1_000), 0, 0),
                Err(AppendError::Storage(StorageError::Failed { .. }))
            ));
            assert_eq!(log.written_end_offset(), 1);
            drop(log);
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(
                log.log_end_offset(),
                1,
                "{mode:?}: the failed write left nothing"
            );
        });
    }
}

#[test]
fn a_write_torn_at_any_byte_of_the_last_batch_recovers_to_the_batch_before() {
    for mode in modes() {
        let last_len = batch(3, 2_000).len() as u64;
        for cut in 0..last_len {
            run(move || async move {
                let dir = tempfile::tempdir().expect("tmp");
                let faults = plan_faults(dir.path());
                let log = open(dir.path(), config(mode)).await;
                log.append(&batch(2, 1_000), 0, 0).expect("append");
                log.append(&batch(2, 1_000), 0, 0).expect("append");
                log.sync().await.expect("sync");
                let position = log.size_bytes();
                faults.tear_next_write_at(position + cut);
                log.append(&batch(3, 2_000), 0, 0).expect("append");
                assert!(
                    log.flush().await.is_err(),
                    "{mode:?} cut {cut}: the tear is seen"
                );
                assert_eq!(faults.injected.get(), 1);
                drop(log); // the process dies with the write half done
                let log = open(dir.path(), config(mode)).await;
                // The bytes the tear kept from landing were zeros already (the file is
                // allocated ahead, zeroed): then the disk holds the batch whole after all.
                let last = batch(3, 2_000);
                let whole = last[cut as usize..].iter().all(|&b| b == 0);
                let (end, bases) = if whole {
                    (7, vec![0, 2, 4])
                } else {
                    (4, vec![0, 2])
                };
                assert_eq!(log.log_end_offset(), end, "{mode:?} cut {cut}");
                let size = position + if whole { last.len() as u64 } else { 0 };
                assert_eq!(log.size_bytes(), size, "{mode:?} cut {cut}");
                assert_eq!(batch_base_offsets(&read_all(&log, 0).await), bases);
                // The log goes on from there, and the next open agrees.
                log.append(&batch(1, 3_000), 0, 0).expect("append");
                log.close().await.expect("close");
                let log = open(dir.path(), config(mode)).await;
                assert_eq!(log.log_end_offset(), end + 1, "{mode:?} cut {cut}");
            });
        }
    }
}

#[test]
fn a_truncation_that_fails_part_way_latches_the_log_and_a_reopen_recovers() {
    for mode in modes() {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tmp");
            let (log, faults) = faulty_log(dir.path(), mode).await;
            for _ in 0..3 {
                log.append(&batch(1, 1_000), 0, 0).expect("append");
            }
            log.sync().await.expect("sync");
            // The fdatasync of the cut segment fails: the files are half done.
            faults.fail_next_sync();
            assert!(log.truncate_to(2).await.is_err(), "{mode:?}");
            assert!(matches!(
                log.append(&batch(1, 1_000), 0, 0),
                Err(AppendError::Storage(StorageError::Failed { .. }))
            ));
            drop(log);
            let log = open(dir.path(), config(mode)).await;
            assert_eq!(log.log_end_offset(), 2, "{mode:?}: the cut itself landed");
            assert_eq!(batch_base_offsets(&read_all(&log, 0).await), vec![0, 1]);
        });
    }
}
