//! A node's port is its own: a second node on the same address is refused at start-up,
//! saying which address is taken, and the first keeps serving every connection; port 0 binds
//! one port for all shards and advertises it.
//!
//! Method: real processes. The first node starts through the harness; the second is the same
//! command with another data directory, as a user would type it twice. Then a burst of
//! connections, each with a Metadata request, must all reach the first node (the second
//! would answer with a different cluster of topics, or not at all).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Node;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

fn serve(dir: &std::path::Path, listener: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringlog"));
    command
        .args(["serve", "--cores", "2"])
        .args(["--set", &format!("log.dirs={}", dir.display())])
        .args(["--set", &format!("listeners={listener}")])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null());
    command
}

/// Topic names the node at `port` reports.
fn topics(port: u16) -> Vec<String> {
    let mut client = common::Client::connect(port);
    let all_topics = MetadataRequest::default().with_topics(None);
    let ResponseKind::Metadata(answer) = client.call(1, RequestKind::Metadata(all_topics)) else {
        unreachable!()
    };
    let mut names: Vec<String> = answer
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .collect();
    names.sort();
    names
}

#[test]
fn a_second_node_on_a_taken_port_is_refused_and_the_first_keeps_every_connection() {
    let first = Node::start(&["num.partitions=2"]);
    // A topic only the first node has, so an answer from anywhere else would show.
    let mut client = first.connect();
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_static_str("only-on-the-first")),
        ))]))
        .with_allow_auto_topic_creation(true);
    client.call(4, RequestKind::Metadata(request));

    let other = tempfile::tempdir().expect("temp dir");
    let listener = format!("PLAINTEXT://127.0.0.1:{}", first.port);
    let started = Instant::now();
    let second = serve(other.path(), &listener)
        .output()
        .expect("the second node runs");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refusing took {:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "the second node started: {stderr}"
    );
    assert!(
        stderr.contains(&format!("127.0.0.1:{}", first.port))
            && stderr.contains("address already in use"),
        "the refusal names the address: {stderr}"
    );
    assert!(
        !stderr.contains(" ready "),
        "the second node never became ready: {stderr}"
    );

    for _ in 0..40 {
        assert_eq!(topics(first.port), vec!["only-on-the-first".to_string()]);
    }
}

#[test]
fn port_zero_binds_one_port_for_every_shard_and_advertises_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = serve(dir.path(), "PLAINTEXT://127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the node starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (found_tx, found_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            if line.contains(" ready ") {
                let _ = found_tx.send(line.clone());
            }
        }
    });
    let ready = found_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the node logs ready");
    let port: u16 = ready
        .split("address=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|address| address.trim_matches('"').rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no address in {ready:?}"));
    assert_ne!(port, 0);
    let mut client = common::Client::connect(port);
    let ResponseKind::Metadata(answer) =
        client.call(1, RequestKind::Metadata(MetadataRequest::default()))
    else {
        unreachable!()
    };
    assert_eq!(
        answer.brokers[0].port,
        i32::from(port),
        "clients are told the real port"
    );
    let _ = child.kill();
    let _ = child.wait();
}
