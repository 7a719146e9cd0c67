//! `produce --idempotent` runs idempotent producers against a real node: every record is
//! stored once, and with `--resend-every` the batches sent twice are refused as duplicates.
//!
//! Method: 20,000 records by two producers over two partitions, every 10th batch sent a
//! second time right after the first; the JSON summary must show no error, a count of
//! duplicates refused, and log end offsets that add up to exactly the records sent (a copy
//! stored twice would add to them and shows as DUPLICATE_STORED).

mod common;

use common::{bench, start_node};

#[test]
fn idempotent_producers_store_every_record_once_and_resends_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr) = start_node(dir.path());
    let output = bench(
        &node,
        &[
            "produce",
            "--bootstrap-server",
            &addr.to_string(),
            "--topic",
            "idempotent",
            "--partitions",
            "2",
            "--producers",
            "2",
            "--acks",
            "all",
            "--idempotent",
            "--resend-every",
            "10",
            "--messages",
            "20000",
            "--batch-size",
            "4096",
            "--warmup",
            "0s",
            "--json",
        ],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let summary: serde_json::Value = serde_json::from_str(&text).expect("a JSON summary");
    assert_eq!(summary["errors"], serde_json::json!({}), "{text}");
    assert_eq!(summary["idempotent"], true);
    assert_eq!(summary["sent"], 20_000);
    assert_eq!(summary["log_end_offset_total"], 20_000, "{text}");
    let refused = summary["duplicates_refused"].as_u64().expect("a count");
    // About 40 batches per producer at 4 KiB (over 100 B records), so at least 6 resends.
    assert!(refused >= 6, "{refused} duplicates refused: {text}");
}
