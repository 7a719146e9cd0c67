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
