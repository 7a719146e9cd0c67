//! Crash recovery: every batch acknowledged by `sync` survives a crash, and the log keeps
//! working after it.
//!
//! Method: a seeded workload appends batches whose contents identify them (batch i carries
//! timestamp i and value byte i % 251), calling `sync` every few appends and once at the end,
//! remembering what that last sync covered. Then the log is dropped without `close` (the writer stops;
//! queued data is lost, as in a process crash), and the active segment's `.log` is damaged
//! the way a crash can: cut in the middle of its last (unsynced) batch, then garbage. The
//! log is reopened: every synced batch must read back byte-identical to what was appended (with
//! base offset and leader epoch patched in),
//! recovery must not have kept anything after the cut, and appends must continue at the new
//! log end offset. Runs in both I/O modes, with and without segment rolls.

mod common;

use std::path::Path;
use std::rc::Rc;

use common::{encode_batch, BatchSpec};
use storage::batch::BatchHeader;
use storage::{BatchCache, IoMode, Log, LogConfig};

fn run<F: std::future::Future<Output = ()> + 'static>(test: impl FnOnce() -> F + Send + 'static) {
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor")
        .run(test());
}

/// Deterministic pseudo-random numbers (xorshift), so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn batch_for(index: u64, record_count: i32, value_bytes: usize) -> Vec<u8> {
    encode_batch(&BatchSpec {
        record_count,
        base_timestamp: index as i64,
        value_bytes,
        value_fill: (index % 251) as u8,
        ..BatchSpec::default()
    })
}

/// The bytes the log must hold for an appended batch: base offset and leader epoch patched.
fn as_stored(mut batch: Vec<u8>, base_offset: i64, leader_epoch: i32) -> Vec<u8> {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    batch
}

async fn open(dir: &Path, config: &LogConfig) -> Log {
    Log::open(
        dir.to_path_buf(),
        *config,
        Rc::new(BatchCache::new(4 << 20)),
    )
    .await
    .expect("open")
}

async fn read_all(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let records = log.read(offset, 256 << 10).await.expect("read").records;
        let mut at = 0;
        while at < records.len() {
            let header = BatchHeader::parse(&records[at..]).expect("header");
            offset = header.last_offset() + 1;
            at += header.total_bytes();
        }
        out.extend_from_slice(&records);
    }
    out
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment")
}

fn crash_and_recover(io_mode: IoMode, segment_bytes_max: u64, seed: u64) {
    run(move || async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            io_mode,
            segment_bytes_max,
            index_interval_bytes: 512,
            write_buffer_bytes_max: 64 << 10,
            ..LogConfig::default()
        };
        let mut rng = Rng(seed);
        let log = open(dir.path(), &config).await;
        let mut stored = Vec::new(); // every appended batch as the log must hold it
        for index in 0..200u64 {
            let record_count = 1 + rng.below(5) as i32;
            let batch = batch_for(index, record_count, 1 + rng.below(700) as usize);
            let info = log.append(&batch, 3, index as i64).expect("append");
            stored.extend_from_slice(&as_stored(batch, info.base_offset, 3));
            if rng.below(8) == 0 {
                log.sync().await.expect("sync");
            }
        }
        log.sync().await.expect("sync");
        // Prefix of `stored` (and offsets) covered by a completed sync.
        let (synced_bytes, synced_end_offset) = (stored.len(), log.log_end_offset());

        // Unsynced tail: written to the file (flush) but never synced, then a crash.
        let mut unsynced_sizes = Vec::new();
        for index in 200..204u64 {
            let batch = batch_for(index, 2, 300);
            unsynced_sizes.push(batch.len() as u64);
            let info = log.append(&batch, 3, index as i64).expect("append");
            stored.extend_from_slice(&as_stored(batch, info.base_offset, 3));
        }
        log.flush().await.expect("flush");
        let end_before_crash = log.log_end_offset();
        drop(log);

        // Damage the active segment inside the unsynced tail: cut its last batch (the last
        // unsynced one) in the middle and append garbage, as a torn write would leave it.
        let segment = last_segment(dir.path());
        let mut bytes = std::fs::read(&segment).expect("read segment");
        let logical_bytes = {
            let mut at = 0;
            while let Ok(header) = BatchHeader::parse(&bytes[at..]) {
                at += header.total_bytes();
                if at >= bytes.len() {
                    break;
                }
            }
            at
        };
        let last_batch_bytes = *unsynced_sizes.last().expect("unsynced batches") as usize;
        bytes.truncate(logical_bytes - last_batch_bytes / 2);
        bytes.extend_from_slice(&[0x5a; 999]);
        std::fs::write(&segment, &bytes).expect("write damaged segment");

        let log = open(dir.path(), &config).await;
        let recovered = read_all(&log).await;
        let kept_bytes = stored.len() - last_batch_bytes;
        assert!(kept_bytes >= synced_bytes);
        assert!(
            log.log_end_offset() >= synced_end_offset,
            "seed {seed}: synced data lost"
        );
        assert!(
            log.log_end_offset() < end_before_crash,
            "seed {seed}: kept a torn batch"
        );
        assert_eq!(
            recovered.len(),
            kept_bytes,
            "seed {seed}: kept exactly the valid prefix"
        );
        assert_eq!(
            &recovered[..],
            &stored[..kept_bytes],
            "seed {seed}: contents differ"
        );

        // The log keeps working where recovery left it, and survives a clean restart.
        let next = log.log_end_offset();
        let info = log
            .append(&batch_for(999, 1, 10), 4, 0)
            .expect("append after recovery");
        assert_eq!(info.base_offset, next);
        log.close().await.expect("close");
        let log = open(dir.path(), &config).await;
        assert_eq!(log.log_end_offset(), next + 1);
        assert_eq!(
            read_all(&log).await.len(),
            kept_bytes + batch_for(999, 1, 10).len()
        );
    });
}

#[test]
fn synced_batches_survive_a_torn_tail_buffered() {
    crash_and_recover(IoMode::Buffered, 1 << 30, 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn synced_batches_survive_a_torn_tail_direct() {
    crash_and_recover(IoMode::Direct, 1 << 30, 0x2545_f491_4f6c_dd1d);
}

#[test]
fn synced_batches_survive_a_torn_tail_across_rolls_buffered() {
    crash_and_recover(IoMode::Buffered, 16 << 10, 0x1234_5678_9abc_def1);
}

#[test]
fn synced_batches_survive_a_torn_tail_across_rolls_direct() {
    crash_and_recover(IoMode::Direct, 16 << 10, 0x0fed_cba9_8765_4321);
}

/// Unsynced data still in the write queue at the crash is simply gone; synced data is not.
#[test]
fn queued_unwritten_data_is_lost_but_synced_data_is_not() {
    for io_mode in [IoMode::Buffered, IoMode::Direct] {
        run(move || async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = LogConfig {
                io_mode,
                ..LogConfig::default()
            };
            let log = open(dir.path(), &config).await;
            for index in 0..10 {
                log.append(&batch_for(index, 1, 100), 0, 0).expect("append");
            }
            log.sync().await.expect("sync");
            for index in 10..20 {
                log.append(&batch_for(index, 1, 100), 0, 0).expect("append");
            }
            drop(log); // no await since the appends: the writer never saw them
            let log = open(dir.path(), &config).await;
            assert_eq!(log.log_end_offset(), 10);
            assert_eq!(
                log.append(&batch_for(20, 1, 100), 0, 0)
                    .expect("append")
                    .base_offset,
                10
            );
        });
    }
}
