//! The stage under the real log: an append into staged memory is written (to the kernel) as
//! it returns, and survives a crash of the process before its segment write, through
//! `stage::replay` at the next start.

use super::*;
use crate::io::testing::plan_faults;
use crate::stage;
use std::path::PathBuf;

/// A data directory and a stage for it installed on this thread: (data dir kept alive, its
/// absolute path, stage dir kept alive, the stage file).
fn staged() -> (tempfile::TempDir, PathBuf, tempfile::TempDir, PathBuf) {
    let data = tempfile::tempdir().expect("tmp");
    let data_dir = std::path::absolute(data.path()).expect("absolute");
    let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
    let file = stage::install(shm.path(), &data_dir, 0, 8 << 20)
        .expect("install")
        .expect("/dev/shm is tmpfs: a stage");
    (data, data_dir, shm, file)
}

#[test]
fn a_staged_append_is_written_at_once_and_replayed_after_a_crash() {
    run(|| async {
        let (_data, data_dir, _shm, staged) = staged();
        let log_dir = data_dir.join("topic-0");
        let faults = plan_faults(&log_dir);
        let log = open(&log_dir, config(IoMode::Direct)).await;
        log.append(&batch(1, 1_000), 0, 0).expect("append");
        log.flush().await.expect("flush");
        faults.fail_next_write();
        let info = log.append(&batch(3, 2_000), 0, 0).expect("append");
        // Written as the append returns: acks=1 and the high watermark wait for no disk.
        assert_eq!(log.written_end_offset(), info.last_offset + 1);
        assert_eq!(log.written_end_offset(), log.log_end_offset());
        // The process dies before the chunk's write lands: here the write fails instead,
        // and the stage file as it is now is what a `kill -9` leaves behind.
        assert!(log.flush().await.is_err(), "the write failed");
        let expected = read_all(&log, 0).await;
        let crashed = tempfile::tempdir_in("/dev/shm").expect("shm");
        let name = staged.file_name().expect("a file name");
        std::fs::copy(&staged, crashed.path().join(name)).expect("copy the stage");
        drop(log);
        stage::uninstall();
        assert!(
            !staged.exists(),
            "nothing pending once the log dropped its chunks"
        );
        let replayed = stage::replay(crashed.path(), &data_dir).expect("replay");
        assert_eq!(replayed.chunks, 1);
        assert!(!crashed.path().join(name).exists(), "replayed stages go");
        let log = open(&log_dir, config(IoMode::Direct)).await;
        assert_eq!(log.log_end_offset(), 4, "the staged batch is back");
        assert_eq!(read_all(&log, 0).await, expected);
    });
}

#[test]
fn a_read_below_the_written_end_takes_staged_batches_not_yet_on_disk() {
    run(|| async {
        let (_data, data_dir, _shm, _file) = staged();
        let log = open(&data_dir.join("topic-0"), config(IoMode::Direct)).await;
        log.append(&batch(1, 1_000), 0, 0).expect("append");
        log.flush().await.expect("flush");
        log.append(&batch(1, 2_000), 0, 0).expect("append");
        log.append(&batch(1, 3_000), 0, 0).expect("append");
        // Nothing awaited: the last two are queued (staged), not written to the file.
        let written_end = log.written_end_offset();
        assert_eq!(written_end, 3);
        let read = log.read_below(0, 1 << 20, written_end).await.expect("read");
        assert_eq!(
            batch_base_offsets(&read.records),
            vec![0, 1, 2],
            "one read takes every batch below the bound, queued ones too"
        );
        drop(log);
        stage::uninstall();
    });
}

#[test]
fn without_a_stage_an_append_waits_for_its_write() {
    run(|| async {
        let data = tempfile::tempdir().expect("tmp");
        let log = open(&data.path().join("topic-0"), config(IoMode::Direct)).await;
        let info = log.append(&batch(3, 2_000), 0, 0).expect("append");
        assert_eq!(log.written_end_offset(), 0, "queued, not written");
        log.wait_written(info.last_offset + 1)
            .await
            .expect("written");
    });
}

#[test]
fn a_staged_queue_outgrows_the_heap_bound_until_the_stage_is_full() {
    run(|| async {
        let (_data, data_dir, _shm, _file) = staged();
        // A 512 KiB bound on heap chunks; the stage holds 8 MiB.
        let (log, config, records) =
            small_queue_log(&data_dir.join("topic-0"), IoMode::Direct).await;
        let heap_bound = 8 * config.write_buffer_bytes_max;
        // Nothing awaited: no write starts, as if the disk had stalled.
        let (mut accepted, mut answered_at_once) = (0, 0);
        let refused = loop {
            match log.append(&records, 0, 0) {
                Ok(info) => {
                    accepted += 1;
                    // What acks=1 waits for.
                    if log.written_end_offset() > info.last_offset {
                        answered_at_once += 1;
                    }
                }
                Err(error) => break error,
            }
            assert!(accepted < 10_000, "no backpressure at all");
        };
        let AppendError::Storage(StorageError::WriteBufferFull { pending_bytes, .. }) = refused
        else {
            panic!("refused with {refused}");
        };
        let queued = log.write_queue_bytes();
        assert!(
            answered_at_once * records.len() > 7 << 20,
            "a stalled disk holds back no acks=1 answer while the stage has room: \
             {answered_at_once} of {accepted} appends ({queued} bytes queued)"
        );
        assert!(
            pending_bytes > 0 && pending_bytes <= heap_bound,
            "then heap chunks, as many as the bound allows: {pending_bytes}"
        );
        log.wait_for_room(records.len()).await.expect("room");
        log.append(&records, 0, 0)
            .expect("room once writes went on");
        log.flush().await.expect("flush");
        assert_eq!(
            read_all(&log, 0).await.len(),
            (accepted + 1) * records.len()
        );
        drop(log);
        stage::uninstall();
    });
}

#[test]
fn staged_appends_within_a_hold_share_one_write_that_needs_no_waiter() {
    run(|| async {
        let (_data, data_dir, _shm, _file) = staged();
        let log = open(&data_dir.join("topic-0"), config(IoMode::Direct)).await;
        for timestamp in 0..3 {
            log.append(&batch(1, timestamp), 0, 0).expect("append");
            // The writer runs here: it would take each chunk as soon as it held a batch.
            futures_lite::future::yield_now().await;
        }
        assert_eq!(log.written_end_offset(), 3, "answered before any write");
        glommio::timer::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(
            (log.disk_writes().count, log.write_queue_bytes()),
            (1, 0),
            "one write, once the hold ended, with nobody waiting for it"
        );
        log.append(&batch(1, 3), 0, 0).expect("append");
        log.sync().await.expect("a sync ends the hold");
        assert_eq!(log.disk_writes().count, 2);
        drop(log);
        stage::uninstall();
    });
}

#[test]
fn a_full_stage_takes_back_the_caches_chunks_for_the_queue() {
    run(|| async {
        let data = tempfile::tempdir().expect("tmp");
        let data_dir = std::path::absolute(data.path()).expect("absolute");
        let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
        // 16 slots, and a cache (8 MiB) that could keep far more written chunks than that.
        stage::install(shm.path(), &data_dir, 0, 1 << 20)
            .expect("install")
            .expect("/dev/shm is tmpfs: a stage");
        let (log, _, records) = small_queue_log(&data_dir.join("topic-0"), IoMode::Direct).await;
        // 2 MiB of 10 KB batches in 64 KiB chunks: twice what the stage holds.
        for _ in 0..200 {
            append_waiting_for_room(&log, &records).await;
        }
        log.flush().await.expect("flush");
        // Every slot now holds a written chunk the cache keeps. Nothing awaited from here: the
        // disk stalls, and the queue must be staged to answer acks=1 at once.
        for _ in 0..20 {
            let info = log.append(&records, 0, 0).expect("append");
            assert!(
                log.written_end_offset() > info.last_offset,
                "answered from the stage, in slots the cache gave back"
            );
        }
        log.flush().await.expect("flush");
        assert_eq!(read_all(&log, 0).await.len(), 220 * records.len());
        drop(log);
        stage::uninstall();
    });
}
