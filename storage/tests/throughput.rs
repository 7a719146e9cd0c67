//! Throughput smoke measurement of both I/O modes on this machine (ignored by default; run with
//! `cargo test -p storage --release --test throughput -- --ignored --nocapture`).
//!
//! Method: one log per case, 1 KiB batches of 10 records appended as fast as the write queue
//! takes them (a flush when it pushes back) by one or more producer tasks, with or without
//! syncs (acks=all or acks=1), then a full read back. Prints MB/s; compare the two modes side by side in one run
//! (runs on a shared machine differ up to 2x, docs/BENCHMARKS.md).

mod common;

use std::rc::Rc;
use std::time::Instant;

use common::{encode_batch, BatchSpec};
use storage::{AppendError, BatchCache, IoMode, Log, LogConfig, StorageError};

const TOTAL_BYTES: usize = 256 << 20;

/// Appends `TOTAL_BYTES` from `producers_count` concurrent tasks, each syncing after every
/// `sync_every_bytes` it appended (0: never, acks=1), then reads everything back.
async fn measure(io_mode: IoMode, producers_count: usize, sync_every_bytes: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig {
        io_mode,
        ..LogConfig::default()
    };
    let cache = Rc::new(BatchCache::new(64 << 20));
    let log = Log::open(dir.path().to_path_buf(), config, cache)
        .await
        .expect("open");
    let spec = BatchSpec {
        record_count: 10,
        value_bytes: 90,
        ..BatchSpec::default()
    };
    let batch = Rc::new(encode_batch(&spec));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers_count {
        let (log, batch) = (log.clone(), batch.clone());
        tasks.push(glommio::spawn_local(async move {
            let (mut appended, mut since_sync) = (0, 0);
            while appended < TOTAL_BYTES / producers_count {
                match log.append(&batch, 0, 0) {
                    Ok(_) => {}
                    Err(AppendError::Storage(StorageError::WriteBufferFull { .. })) => {
                        log.flush().await.expect("flush");
                        continue;
                    }
                    Err(error) => panic!("append: {error}"),
                }
                appended += batch.len();
                since_sync += batch.len();
                if sync_every_bytes > 0 && since_sync >= sync_every_bytes {
                    log.sync().await.expect("sync");
                    since_sync = 0;
                }
                glommio::yield_if_needed().await;
            }
            appended
        }));
    }
    let mut appended = 0;
    for task in tasks {
        appended += task.await;
    }
    log.sync().await.expect("sync");
    let write_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (mut offset, mut read) = (0, 0);
    while offset < log.log_end_offset() {
        let result = log.read(offset, 1 << 20).await.expect("read");
        read += result.records.len();
        let mut at = 0;
        while at < result.records.len() {
            let header = storage::batch::BatchHeader::parse(&result.records[at..]).expect("header");
            offset = header.last_offset() + 1;
            at += header.total_bytes();
        }
    }
    let read_s = started.elapsed().as_secs_f64();
    println!(
        "{io_mode:?} producers {producers_count} sync every {sync_every_bytes} B: \
         append {:.0} MB/s, read back {:.0} MB/s",
        appended as f64 / write_s / 1e6,
        read as f64 / read_s / 1e6,
    );
    log.delete().await.expect("delete");
}

#[test]
#[ignore]
fn append_sync_read_throughput() {
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .expect("executor")
        .run(async move {
            for (producers_count, sync_every_bytes) in [(1, 0), (1, 1 << 20), (8, 64 << 10)] {
                for io_mode in [IoMode::Buffered, IoMode::Direct] {
                    measure(io_mode, producers_count, sync_every_bytes).await;
                }
            }
        });
}
