//! The command-line tools against a real node, as a user runs them.
//!
//! Method: start a node on a free port, run the `ringlog` binary's `topic`, `produce`,
//! `consume` and `group` subcommands as child processes (stdin piped in, stdout and exit
//! status checked), and compare what they print with what was produced: topic admin round
//! trip, keyed records landing on Java's murmur2 partition, reading by partition and offset,
//! and a consumer group that commits, shows its lag, is rewound with reset-offsets and
//! re-reads everything.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use broker::cli::partitioner::partition_for_key;
use common::Node;

fn ringlog_command(node: &Node, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringlog"));
    command
        .args(args)
        .args(["--bootstrap-server", &format!("127.0.0.1:{}", node.port)])
        .env("RUST_LOG", "warn");
    command
}

/// Runs `ringlog ARGS --bootstrap-server …` with `stdin`, waiting at most 60 s.
fn ringlog(node: &Node, args: &[&str], stdin: &str) -> Output {
    let mut child = ringlog_command(node, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ringlog runs");
    let mut input = child.stdin.take().expect("stdin piped");
    input.write_all(stdin.as_bytes()).expect("stdin written");
    drop(input);
    wait_output(child, Duration::from_secs(60))
}

fn wait_output(mut child: Child, limit: Duration) -> Output {
    wait_exit(&mut child, limit);
    child.wait_with_output().expect("output")
}

/// Waits for `child` to exit (killing it and failing after `limit`).
fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("child status") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ringlog did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Like [`ringlog`], requiring success; returns stdout.
fn ok(node: &Node, args: &[&str], stdin: &str) -> String {
    let output = ringlog(node, args, stdin);
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "ringlog {args:?} failed: {}\nstdout: {stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Like [`ringlog`], requiring failure; returns stderr.
fn fails(node: &Node, args: &[&str]) -> String {
    let output = ringlog(node, args, "");
    assert!(!output.status.success(), "ringlog {args:?} should fail");
    String::from_utf8_lossy(&output.stderr).to_string()
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

#[test]
fn topics_are_created_listed_described_grown_and_deleted() {
    let node = Node::start(&[]);
    let created = ok(
        &node,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=60000",
        ],
        "",
    );
    assert_eq!(created, "Created topic orders.\n");
    ok(
        &node,
        &["topic", "create", "payments", "--partitions", "1"],
        "",
    );
    let listed = lines(&ok(&node, &["topic", "list"], ""));
    assert!(listed.contains(&"orders".to_string()) && listed.contains(&"payments".to_string()));

    let described = ok(&node, &["topic", "describe", "orders"], "");
    let first = described.lines().next().unwrap();
    assert!(first.starts_with("Topic: orders\tTopicId: "), "{first}");
    assert!(
        first.contains("PartitionCount: 3\tReplicationFactor: 1"),
        "{first}"
    );
    assert!(first.ends_with("Configs: retention.ms=60000"), "{first}");
    for partition in 0..3 {
        let line = described.lines().nth(1 + partition).unwrap();
        assert!(line.starts_with(&format!(
            "\tTopic: orders\tPartition: {partition}\tLeader: "
        )));
        assert!(
            line.contains("Replicas: ") && line.contains("Isr: "),
            "{line}"
        );
    }

    let grown = ok(
        &node,
        &["topic", "add-partitions", "orders", "--partitions", "5"],
        "",
    );
    assert_eq!(grown, "Topic orders now has 5 partitions.\n");
    let described = ok(&node, &["topic", "describe", "orders"], "");
    assert!(described.contains("PartitionCount: 5"), "{described}");
    assert_eq!(described.lines().count(), 6);

    let error = fails(&node, &["topic", "create", "orders", "--partitions", "1"]);
    assert!(error.contains("TOPIC_ALREADY_EXISTS"), "{error}");
    let error = fails(
        &node,
        &["topic", "add-partitions", "orders", "--partitions", "2"],
    );
    assert!(error.contains("INVALID_PARTITIONS"), "{error}");

    assert_eq!(
        ok(&node, &["topic", "delete", "orders"], ""),
        "Deleted topic orders.\n"
    );
    let listed = lines(&ok(&node, &["topic", "list"], ""));
    assert!(!listed.contains(&"orders".to_string()), "{listed:?}");
    let error = fails(&node, &["topic", "describe", "orders"]);
    assert!(error.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{error}");
}

#[test]
fn produced_lines_are_consumed_with_keys_and_positions() {
    let node = Node::start(&[]);
    ok(
        &node,
        &["topic", "create", "orders", "--partitions", "3"],
        "",
    );
    let keyed = "user1:order-A\nuser2:order-B\nuser1:order-C\nuser3:order-D\nuser4:order:E\n";
    ok(
        &node,
        &[
            "produce",
            "orders",
            "--key-separator",
            ":",
            "--header",
            "src=cli",
            "--acks",
            "all",
        ],
        keyed,
    );
    ok(&node, &["produce", "orders"], "plain-0\nplain-1\nplain-2\n");

    let printed = ok(
        &node,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max-messages",
            "8",
            "--format",
            r"%k|%v|%p|%o|%h|%t\n",
        ],
        "",
    );
    let records: Vec<Vec<String>> = printed
        .lines()
        .map(|line| line.split('|').map(str::to_string).collect())
        .collect();
    assert_eq!(records.len(), 8, "{printed}");
    for (key, value) in [
        ("user1", "order-A"),
        ("user2", "order-B"),
        ("user1", "order-C"),
        ("user3", "order-D"),
        ("user4", "order:E"),
    ] {
        let record = records
            .iter()
            .find(|r| r[1] == value)
            .unwrap_or_else(|| panic!("{value} consumed: {printed}"));
        assert_eq!(record[0], key);
        let expected = partition_for_key(key.as_bytes(), 3);
        assert_eq!(
            record[2],
            expected.to_string(),
            "{key} lands on murmur2's partition"
        );
        assert_eq!(record[4], "src=cli");
    }
    // Timestamps are the producer's create times, in ms.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    for record in &records {
        let timestamp: i64 = record[5].parse().expect("a number");
        assert!(
            (now_ms - 60_000..=now_ms).contains(&timestamp),
            "{record:?}"
        );
    }
    // Unkeyed lines go round-robin: one per partition.
    let plain: BTreeSet<&str> = records
        .iter()
        .filter(|r| r[1].starts_with("plain-"))
        .map(|r| r[2].as_str())
        .collect();
    assert_eq!(plain, BTreeSet::from(["0", "1", "2"]));
    // Within a partition, offsets count up from 0 in the order produced.
    let user1: Vec<&str> = records
        .iter()
        .filter(|r| r[0] == "user1")
        .map(|r| r[3].as_str())
        .collect();
    let user1_partition = partition_for_key(b"user1", 3);
    let in_partition: Vec<&Vec<String>> = records
        .iter()
        .filter(|r| r[2] == user1_partition.to_string())
        .collect();
    assert_eq!(user1.len(), 2);
    assert!(user1[0] < user1[1]);

    // One partition from an offset: exactly the records after it, then idle exit.
    let from_one = ok(
        &node,
        &[
            "consume",
            "orders",
            "--partition",
            &user1_partition.to_string(),
            "--offset",
            "1",
            "--timeout-ms",
            "1000",
            "--format",
            r"%o %v\n",
        ],
        "",
    );
    let expected: Vec<String> = in_partition
        .iter()
        .filter(|r| r[3] != "0")
        .map(|r| format!("{} {}", r[3], r[1]))
        .collect();
    assert_eq!(lines(&from_one), expected);

    // The default layout is the value alone; --print-key puts the key and a tab first.
    let values = ok(
        &node,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max-messages",
            "8",
        ],
        "",
    );
    assert_eq!(values.lines().count(), 8);
    assert!(values.lines().any(|l| l == "order-A"));
    let with_keys = ok(
        &node,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max-messages",
            "8",
            "--print-key",
        ],
        "",
    );
    assert!(
        with_keys.lines().any(|l| l == "user1\torder-A"),
        "{with_keys}"
    );
    assert!(
        with_keys.lines().any(|l| l == "null\tplain-0"),
        "{with_keys}"
    );

    // Latest (the default start) sees nothing old.
    let latest = ok(&node, &["consume", "orders", "--timeout-ms", "500"], "");
    assert_eq!(latest, "");

    // A line without the separator fails the way kafka-console-producer does.
    let output = ringlog(
        &node,
        &["produce", "orders", "--key-separator", ":"],
        "nokey\n",
    );
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("No key separator found on line number 1: 'nokey'"),
        "{error}"
    );
    let error = fails(&node, &["produce", "missing"]);
    assert!(error.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{error}");
}

/// `group describe`'s offset rows: (partition, current offset, log end offset, lag).
fn offset_rows(described: &str) -> Vec<(String, String, String, String)> {
    described
        .lines()
        .skip_while(|l| !l.starts_with("GROUP") || !l.contains("CURRENT-OFFSET"))
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (
                cells[2].into(),
                cells[3].into(),
                cells[4].into(),
                cells[5].into(),
            )
        })
        .collect()
}

#[test]
fn a_group_commits_shows_lag_and_rereads_after_a_reset() {
    let node = Node::start(&["group.initial.rebalance.delay.ms=0"]);
    ok(
        &node,
        &["topic", "create", "orders", "--partitions", "3"],
        "",
    );
    let values: Vec<String> = (0..9).map(|i| format!("v{i}")).collect();
    ok(&node, &["produce", "orders"], &(values.join("\n") + "\n"));

    let first = ok(
        &node,
        &[
            "consume",
            "orders",
            "--group",
            "g1",
            "--from-beginning",
            "--max-messages",
            "9",
        ],
        "",
    );
    let mut read = lines(&first);
    read.sort();
    assert_eq!(read, values);
    assert!(lines(&ok(&node, &["group", "list"], "")).contains(&"g1".to_string()));

    let described = ok(&node, &["group", "describe", "g1"], "");
    assert!(
        described.contains("Consumer group 'g1' has no active members."),
        "{described}"
    );
    let rows = offset_rows(&described);
    assert_eq!(rows.len(), 3, "{described}");
    for (partition, current, end, lag) in &rows {
        assert_eq!(
            (current, lag),
            (end, &"0".to_string()),
            "partition {partition}"
        );
        assert_eq!(end, "3");
    }

    // Nothing new: the group's next run reads nothing.
    let again = ok(
        &node,
        &["consume", "orders", "--group", "g1", "--timeout-ms", "1500"],
        "",
    );
    assert_eq!(again, "");

    // A dry run prints the plan and moves nothing.
    let plan = ok(
        &node,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--topic",
            "orders",
            "--to-earliest",
        ],
        "",
    );
    let planned: Vec<Vec<&str>> = plan
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        planned,
        (0..3)
            .map(|p| vec!["g1", "orders", ["0", "1", "2"][p], "0"])
            .collect::<Vec<_>>()
    );
    let rows = offset_rows(&ok(&node, &["group", "describe", "g1"], ""));
    assert!(rows.iter().all(|r| r.1 == "3"), "{rows:?}");

    // Shifting is clamped to the log: -5 from 3 is 0.
    let plan = ok(
        &node,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--all-topics",
            "--shift-by",
            "-5",
        ],
        "",
    );
    assert!(plan.lines().skip(2).all(|l| l.ends_with(" 0")), "{plan}");

    // While a member is active, the reset is refused with Kafka's message.
    let mut member = ringlog_command(&node, &["consume", "orders", "--group", "g1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("member runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let described = ok(&node, &["group", "describe", "g1"], "");
        if described.contains("Stable") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member never joined: {described}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let error = fails(
        &node,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--topic",
            "orders",
            "--to-earliest",
            "--execute",
        ],
    );
    assert!(
        error.contains(
            "Assignments can only be reset if the group 'g1' is inactive, but the current state \
             is Stable."
        ),
        "{error}"
    );
    // Ctrl-C: the member commits, leaves and exits cleanly.
    // SAFETY: signalling a child this test spawned and still owns.
    unsafe { libc::kill(member.id() as i32, libc::SIGINT) };
    let status = wait_exit(&mut member, Duration::from_secs(30));
    assert!(status.success(), "{status:?}");

    let plan = ok(
        &node,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--topic",
            "orders",
            "--to-earliest",
            "--execute",
        ],
        "",
    );
    assert!(plan.lines().skip(2).all(|l| l.ends_with(" 0")), "{plan}");
    let rows = offset_rows(&ok(&node, &["group", "describe", "g1"], ""));
    assert!(rows.iter().all(|r| r.1 == "0" && r.3 == "3"), "{rows:?}");

    let reread = ok(
        &node,
        &["consume", "orders", "--group", "g1", "--max-messages", "9"],
        "",
    );
    let mut reread = lines(&reread);
    reread.sort();
    assert_eq!(reread, values, "the whole history again");

    let error = fails(&node, &["group", "describe", "nobody"]);
    assert!(
        error.contains("Consumer group 'nobody' does not exist."),
        "{error}"
    );
    let deleted = ok(&node, &["group", "delete", "g1"], "");
    assert_eq!(
        deleted,
        "Deletion of requested consumer groups ('g1') was successful.\n"
    );
    assert!(!lines(&ok(&node, &["group", "list"], "")).contains(&"g1".to_string()));
}

#[test]
fn two_members_of_a_group_split_the_partitions() {
    let node = Node::start(&["group.initial.rebalance.delay.ms=0"]);
    ok(
        &node,
        &["topic", "create", "orders", "--partitions", "3"],
        "",
    );
    let spawn_member = || {
        ringlog_command(
            &node,
            &[
                "consume",
                "orders",
                "--group",
                "split",
                "--timeout-ms",
                "10000",
                "--format",
                r"%p %v\n",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("member runs")
    };
    let members = [spawn_member(), spawn_member()];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Until a member's JoinGroup lands the group does not exist, and describe says so.
        let output = ringlog(&node, &["group", "describe", "split"], "");
        let described = String::from_utf8_lossy(&output.stdout).to_string();
        let stable_with_two = output.status.success()
            && described
                .lines()
                .nth(1)
                .is_some_and(|l| l.split_whitespace().rev().take(2).eq(["2", "Stable"]));
        if stable_with_two {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "two members never settled: {described}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let values: Vec<String> = (0..30).map(|i| format!("key{i}:v{i}")).collect();
    ok(
        &node,
        &["produce", "orders", "--key-separator", ":"],
        &(values.join("\n") + "\n"),
    );

    let mut read: Vec<String> = Vec::new();
    let mut partitions_of: Vec<BTreeSet<String>> = Vec::new();
    for member in members {
        let output = wait_output(member, Duration::from_secs(60));
        assert!(output.status.success());
        let printed = String::from_utf8_lossy(&output.stdout).to_string();
        let mut partitions = BTreeSet::new();
        for line in printed.lines() {
            let (partition, value) = line.split_once(' ').expect("partition and value");
            partitions.insert(partition.to_string());
            read.push(value.to_string());
        }
        assert!(
            !partitions.is_empty(),
            "each member reads something: {printed}"
        );
        partitions_of.push(partitions);
    }
    assert!(
        partitions_of[0].is_disjoint(&partitions_of[1]),
        "no partition is shared: {partitions_of:?}"
    );
    read.sort();
    let mut expected: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    expected.sort();
    assert_eq!(read, expected, "everything once, nothing twice");
}

#[test]
fn produce_is_idempotent_by_default_and_plain_on_request() {
    let node = Node::start(&[]);
    ok(&node, &["topic", "create", "once", "--partitions", "1"], "");
    ok(&node, &["produce", "once"], "a\nb\nc\n");
    ok(&node, &["produce", "once"], "d\n");
    ok(&node, &["produce", "once", "--no-idempotence"], "e\n");
    ok(&node, &["produce", "once", "--acks", "1"], "f\n");
    let batches = common::read_batches(&mut node.connect(), "once", 0);
    assert_eq!(batches.len(), 4, "{batches:?}");
    let (first, second) = (batches[0], batches[1]);
    assert!(first.0 >= 0 && second.0 >= 0, "producer ids: {batches:?}");
    assert_ne!(first.0, second.0, "each run is a new producer");
    assert_eq!((first.1, first.2), (0, 3), "sequences start at 0");
    assert_eq!((second.1, second.2), (0, 1));
    assert_eq!(batches[2..].to_vec(), vec![(-1, -1, 1); 2], "plain batches");
}

#[test]
fn cluster_describe_names_the_cluster_its_controller_and_its_brokers() {
    let node = Node::start(&["broker.rack=rack-a"]);
    let out = ok(&node, &["cluster", "describe"], "");
    let lines = lines(&out);
    assert_eq!(lines.len(), 5, "{out}");
    let properties = std::fs::read_to_string(node.dir.join("data/meta.properties")).expect("read");
    let cluster_id = properties
        .lines()
        .find_map(|line| line.strip_prefix("cluster.id="))
        .expect("a cluster id");
    assert_eq!(
        lines[0],
        format!("ClusterId: {cluster_id}\tController: 1\tBrokers: 1")
    );
    assert_eq!(
        lines[1],
        format!(
            "\tBroker: 1\tEndpoint: 127.0.0.1:{}\tRack: rack-a\tFenced: false",
            node.port
        )
    );
    // A node alone is the whole quorum: the leader, caught up with what it committed.
    let high_watermark: i64 = lines[2]
        .strip_prefix("MetadataQuorum: leader 1\tLeaderEpoch: 0\tHighWatermark: ")
        .and_then(|rest| rest.parse().ok())
        .unwrap_or_else(|| panic!("quorum line: {}", lines[2]));
    assert!(high_watermark > 0, "its registration is committed");
    assert_eq!(
        lines[3],
        format!("\tVoter: 1\tLogEndOffset: {high_watermark}\tLag: 0")
    );
    assert_eq!(
        lines[4],
        "UnderReplicatedPartitions: 0\tOfflinePartitions: 0"
    );
}

#[test]
fn delete_records_moves_the_start_of_a_partition() {
    let node = Node::start(&[]);
    ok(
        &node,
        &["topic", "create", "history", "--partitions", "1"],
        "",
    );
    ok(&node, &["produce", "history"], "r0\nr1\nr2\nr3\nr4\n");
    let args = |partition: &'static str, offset: &'static str| {
        [
            "topic",
            "delete-records",
            "history",
            "--partition",
            partition,
            "--offset",
            offset,
        ]
    };
    assert_eq!(
        ok(&node, &args("0", "3"), ""),
        "partition: history-0\tlow_watermark: 3\n"
    );
    let read = ok(
        &node,
        &[
            "consume",
            "history",
            "--from-beginning",
            "--max-messages",
            "2",
            "--format",
            r"%o %v\n",
        ],
        "",
    );
    assert_eq!(read, "3 r3\n4 r4\n");
    // Past the high watermark is refused; -1 means the high watermark itself.
    let error = fails(&node, &args("0", "9"));
    assert!(error.contains("OFFSET_OUT_OF_RANGE"), "{error}");
    assert_eq!(
        ok(&node, &args("0", "-1"), ""),
        "partition: history-0\tlow_watermark: 5\n"
    );
    let error = fails(&node, &args("7", "0"));
    assert!(error.contains("no partition 7"), "{error}");
}
