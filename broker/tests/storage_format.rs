//! Formatted storage: `ringlog format` names a directory's cluster and node once; a node
//! takes its cluster id from it and refuses a directory of another node or cluster.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Client, Node};
use kafka_protocol::messages::{DescribeClusterRequest, RequestKind, ResponseKind};

fn ringlog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ringlog"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("ringlog runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn data_dir(dir: &Path) -> String {
    format!("log.dirs={}", dir.join("data").display())
}

fn cluster_id(client: &mut Client) -> String {
    let ResponseKind::DescribeCluster(answer) = client.call(
        0,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    ) else {
        unreachable!()
    };
    answer.cluster_id.to_string()
}

/// Runs `serve` on `dir`, which must refuse to start; returns what it printed.
fn refused_start(dir: &Path, settings: &[&str]) -> String {
    let data = data_dir(dir);
    let mut args = vec!["serve", "--cores", "1", "--set", &data];
    args.extend(["--set", "listeners=PLAINTEXT://127.0.0.1:0"]);
    for setting in settings {
        args.extend(["--set", setting]);
    }
    let output = ringlog(&args);
    assert!(!output.status.success(), "started: {}", text(&output));
    text(&output)
}

#[test]
fn a_formatted_directory_keeps_its_cluster_and_node() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = data_dir(tmp.path());
    let id = String::from_utf8(ringlog(&["random-uuid"]).stdout).expect("utf-8");
    let id = id.trim().to_string();
    assert_eq!(id.len(), 22, "{id:?}");
    let format = |extra: &[&str]| {
        let mut args = vec![
            "format",
            "--cluster-id",
            &id,
            "--set",
            &data,
            "--set",
            "node.id=2",
        ];
        args.extend(extra);
        ringlog(&args)
    };
    let formatted = format(&[]);
    assert!(formatted.status.success(), "{}", text(&formatted));
    assert!(text(&formatted).contains(&id));
    let again = format(&[]);
    assert!(!again.status.success(), "formatted twice");
    assert!(
        text(&again).contains("already formatted"),
        "{}",
        text(&again)
    );
    let ignored = format(&["--ignore-formatted"]);
    assert!(ignored.status.success(), "{}", text(&ignored));
    let bad = ringlog(&["format", "--cluster-id", "not-a-uuid", "--set", &data]);
    assert!(!bad.status.success());

    let node = Node::start_in(tmp.path(), &["node.id=2"]);
    assert_eq!(cluster_id(&mut node.connect()), id);
    let stopped = node.stop();

    let other_node = refused_start(&stopped.dir, &["node.id=3"]);
    assert!(other_node.contains("belongs to node 2"), "{other_node}");
    let other_cluster = refused_start(
        &stopped.dir,
        &["node.id=2", "cluster.id=AAAAAAAAAAAAAAAAAAAAAA"],
    );
    assert!(
        other_cluster.contains("belongs to cluster"),
        "{other_cluster}"
    );
    let node = stopped.restart(&["node.id=2", &format!("cluster.id={id}")]);
    assert_eq!(cluster_id(&mut node.connect()), id);
}

#[test]
fn a_single_node_formats_its_directory_on_first_start() {
    let node = Node::start(&[]);
    let first = cluster_id(&mut node.connect());
    assert_eq!(first.len(), 22, "{first:?}");
    let properties = std::fs::read_to_string(node.dir.join("data/meta.properties")).expect("read");
    assert!(
        properties.contains(&format!("cluster.id={first}")),
        "{properties}"
    );
    assert!(properties.contains("node.id=1"), "{properties}");
    let node = node.stop().restart(&[]);
    assert_eq!(
        cluster_id(&mut node.connect()),
        first,
        "the same cluster after a restart"
    );
}
