//! `--topic-config KEY=VALUE` reaches the broker when the bench creates its topic.
//!
//! Method: produce about 1.2 MB to a new topic created with `segment.bytes=65536`; the
//! partition's directory must then hold many segments, where the broker's default of 1 GiB
//! would make one.

mod common;

use std::time::{Duration, Instant};

use common::{bench, start_node};

#[test]
fn topic_settings_apply_to_the_topic_the_bench_creates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr) = start_node(dir.path());
    bench(
        &node,
        &[
            "produce",
            "--bootstrap-server",
            &addr.to_string(),
            "--topic",
            "configured",
            "--topic-config",
            "segment.bytes=65536",
            "--topic-config",
            "retention.ms=-1",
            "--messages",
            "10000",
            "--message-size",
            "100",
            "--warmup",
            "0s",
        ],
    );
    let partition_dir = dir.path().join("data").join("configured-0");
    let segments = || {
        std::fs::read_dir(&partition_dir)
            .expect("partition dir")
            .filter(|e| {
                let name = e.as_ref().expect("entry").file_name();
                name.to_string_lossy().ends_with(".log")
            })
            .count()
    };
    // acks=1 answers before the write: segment files appear as the writes complete.
    let deadline = Instant::now() + Duration::from_secs(20);
    while segments() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(segments() >= 10, "{} segments", segments());
}
