//! `ringlog-bench consume --group` against a real ringlog node: members split the
//! partitions, read every record once, commit where they stopped, and a later run of the
//! same group resumes from those commits.
//!
//! Method: produce a known count to a 4-partition topic, consume it with a group of 3
//! members (one idles after the first run grows to 5 members), produce more, consume again
//! with the same group, and check the counts against the JSON summaries.

mod common;

use common::{bench, start_node};

fn summary(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "the --json summary parses ({e}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn assert_clean(s: &serde_json::Value) {
    assert_eq!(
        s["errors"].as_object().map(|e| e.len()),
        Some(0),
        "no errors: {s}"
    );
}

#[test]
fn a_group_splits_the_partitions_commits_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr) = start_node(dir.path());
    let addr = addr.to_string();
    let produce = |messages: &str| {
        let out = bench(
            &node,
            &[
                "produce",
                "--bootstrap-server",
                &addr,
                "--topic",
                "grouped",
                "--partitions",
                "4",
                "--producers",
                "2",
                "--messages",
                messages,
                "--warmup",
                "0s",
                "--json",
            ],
        );
        let s = summary(&out);
        assert_clean(&s);
        assert_eq!(s["acked"].as_u64(), messages.parse().ok(), "{s}");
    };
    let consume = |consumers: &str| {
        let out = bench(
            &node,
            &[
                "consume",
                "--bootstrap-server",
                &addr,
                "--topic",
                "grouped",
                "--group",
                "readers",
                "--consumers",
                consumers,
                "--verify-crc",
                "--duration",
                "60s",
                "--json",
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        (summary(&out), stderr)
    };

    produce("20000");
    let (first, stderr) = consume("3");
    assert_clean(&first);
    assert_eq!(first["consumers"].as_u64(), Some(3));
    assert_eq!(
        first["measured_messages"].as_u64(),
        Some(20_000),
        "every record read once: {first}\n{stderr}"
    );
    assert_eq!(
        stderr.matches("joined group readers").count(),
        3,
        "3 members joined once each (one generation):\n{stderr}"
    );

    produce("5000");
    let (second, stderr) = consume("5");
    assert_clean(&second);
    assert_eq!(
        second["measured_messages"].as_u64(),
        Some(5_000),
        "the group resumed from its commits: {second}\n{stderr}"
    );
    assert!(
        stderr.contains("partitions []"),
        "5 members on 4 partitions: one idles:\n{stderr}"
    );

    let (third, _) = consume("1");
    assert_clean(&third);
    assert_eq!(third["measured_messages"].as_u64(), Some(0), "{third}");
}
