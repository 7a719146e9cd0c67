//! glommio sends a device's O_DIRECT I/O to its busy-polled ring only if the device can
//! poll: a log opened first on a fresh directory must not make that decision from its own
//! empty segment file.
//!
//! Method: in a process of its own (glommio remembers the answer per device and process),
//! open a direct-mode log on a fresh directory and append, then read the segment through a
//! glommio `DmaFile`. Where the device has no poll queues (virtio-blk, most cloud disks),
//! such a read on the polled ring fails with EOPNOTSUPP, and writes on it made the shard
//! busy-poll; where the device can poll, or the directory is on tmpfs, the read simply works.

use std::rc::Rc;

use glommio::io::OpenOptions;
use storage::{BatchCache, IoMode, Log, LogConfig};

#[test]
fn a_fresh_direct_log_leaves_the_poll_decision_to_the_device() {
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor")
        .run(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = LogConfig {
                io_mode: IoMode::Direct,
                ..LogConfig::default()
            };
            let log = Log::open(
                dir.path().to_path_buf(),
                config,
                Rc::new(BatchCache::new(1 << 20)),
            )
            .await
            .expect("open");
            let batch = common::encode_batch(&common::BatchSpec {
                record_count: 10,
                ..common::BatchSpec::default()
            });
            log.append(&batch, 0, 0).expect("append");
            log.sync().await.expect("sync");

            let segment = dir.path().join("00000000000000000000.log");
            let file = OpenOptions::new()
                .read(true)
                .dma_open(&segment)
                .await
                .expect("dma open");
            let read = file.read_at_aligned(0, 4096).await;
            let read = read.expect("an O_DIRECT read through glommio works on this device");
            // From the magic byte on, the stored batch is the appended one (the base offset
            // and leader epoch before it are the log's to set).
            assert_eq!(&read[16..batch.len()], &batch[16..], "the batch is on disk");
            file.close().await.expect("close");
            log.close().await.expect("close");
        });
}

mod common;
