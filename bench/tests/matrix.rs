//! A short matrix against a real ringlog node: the report folder is complete, parses, and
//! accounts for every message.
//!
//! Method: start one node (`common`), run `ringlog-bench matrix` (acks 0, 1, all × 100 B and
//! 1 KiB, a fixed message count, no warm-up), then read table.txt, results.json, every .hgrm
//! and every plot. Each run produced to a fresh topic, so its log end offsets must equal the
//! messages sent; acks 1/all runs must have every message acknowledged and one latency sample
//! per message. Given the node's pid, every run reports the node's CPU time.

mod common;

use std::process::Command;

use common::start_node;

const MESSAGES: u64 = 5_000;

#[test]
fn short_matrix_against_ringlog_counts_every_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr) = start_node(dir.path());
    let report = dir.path().join("report");
    let output = Command::new(env!("CARGO_BIN_EXE_ringlog-bench"))
        .arg("matrix")
        .args(["--bootstrap-server", &addr.to_string()])
        .args(["--output", report.to_str().expect("utf-8 temp path")])
        .args(["--messages", &MESSAGES.to_string()])
        .args([
            "--warmup",
            "0s",
            "--sizes",
            "100,1024",
            "--partitions",
            "2",
            "--producers",
            "2",
        ])
        .args(["--broker-label", "ringlog"])
        .args(["--broker-pid", &node.pid().to_string()])
        .output()
        .expect("running ringlog-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "ringlog-bench matrix failed ({}):\n{stdout}\n{stderr}\nbroker log:\n{}",
        output.status,
        std::fs::read_to_string(&node.log).unwrap_or_default()
    );
    assert!(stdout.contains("p99.9"), "the table is printed:\n{stdout}");
    assert!(
        stdout.contains("CPU s/M"),
        "the table has the CPU column:\n{stdout}"
    );

    let table = std::fs::read_to_string(report.join("table.txt")).expect("table.txt");
    for needle in [
        "# command: ",
        "matrix",
        "# broker: ringlog (127.0.0.1:",
        "# machine: ",
        "# generator on CPUs ",
        "# date: ",
    ] {
        assert!(
            table.contains(needle),
            "table.txt lacks {needle:?}:\n{table}"
        );
    }

    let json = std::fs::read_to_string(report.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("results.json parses");
    let env = &v["environment"];
    assert!(env["command"]
        .as_str()
        .is_some_and(|c| c.contains("matrix")));
    assert!(env["cores"].as_u64().is_some_and(|c| c >= 1));
    assert!(env["generator_cpus"]
        .as_str()
        .is_some_and(|c| !c.is_empty()));
    assert!(env["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert!(env["date_utc"].as_str().is_some_and(|d| d.ends_with('Z')));
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 6, "acks 0, 1, all × 2 sizes");
    for r in runs {
        let acks = r["acks"].as_str().expect("acks");
        let size = r["message_bytes"].as_u64().expect("size");
        let what = format!("acks={acks} size={size}");
        assert_eq!(
            r["errors"].as_object().map(|e| e.len()),
            Some(0),
            "{what}: {r}"
        );
        assert_eq!(r["sent"].as_u64(), Some(MESSAGES), "{what}");
        assert!(
            r["broker_cpu_s"].as_f64().is_some_and(|cpu| cpu >= 0.0)
                && r["broker_cpu_s_per_million"].is_f64(),
            "{what}: the node's CPU time"
        );
        // Ticks of /proc/stat and of the process are counted apart: over a window this
        // short only their presence is sure.
        assert!(
            r["machine_cpu_s_per_million"].is_f64(),
            "{what}: the machine's CPU time"
        );
        assert_eq!(
            r["log_end_offset_total"].as_i64(),
            Some(MESSAGES as i64),
            "{what}: log end"
        );
        if acks != "0" {
            assert_eq!(
                r["acked"].as_u64(),
                Some(MESSAGES),
                "{what}: every message acked"
            );
            assert_eq!(
                r["latency"]["count"].as_u64(),
                Some(MESSAGES),
                "{what}: one sample each"
            );
            assert!(
                r["latency"]["p99_ms"].as_f64().is_some_and(|p| p > 0.0),
                "{what}"
            );
        }
        let name = format!("acks{acks}-{size}b.hgrm");
        let hgrm = std::fs::read_to_string(report.join(&name)).expect(&name);
        if acks != "0" {
            let total = hgrm
                .lines()
                .find(|l| l.starts_with("#[Max"))
                .and_then(|l| l.rsplit('=').next())
                .and_then(|n| n.trim().trim_end_matches(']').trim().parse::<u64>().ok());
            assert_eq!(total, Some(MESSAGES), "{name} total count");
        }
    }
    for acks in ["0", "1", "all"] {
        let name = format!("latency-acks{acks}.svg");
        let svg = std::fs::read_to_string(report.join(&name)).expect(&name);
        assert!(
            svg.starts_with("<svg") && svg.contains(&format!("acks={acks}")),
            "{name}"
        );
    }
}
