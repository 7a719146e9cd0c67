//! Three nodes, each broker and controller (Kafka's combined mode), in one metadata quorum:
//! started at once on directories formatted with one cluster id, each killed, stopped or
//! restarted on its own directory, and the account of the cluster that every node must agree
//! on. The nodes run on loopback, or each in a network namespace of its own ([`Host`]).
//! Every wait is bounded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{MetadataResponse, RequestKind, ResponseKind};

use super::{metadata, try_fetch_at, Client, Host, Node};

pub const WAIT: Duration = Duration::from_secs(60);
pub const CLUSTER_ID: &str = "q3ClusterTestsXXXXXXXw";

pub struct Cluster {
    pub dirs: BTreeMap<i32, PathBuf>,
    hosts: BTreeMap<i32, Host>,
    voters: String,
    /// Extra settings every node starts with.
    extra: Vec<String>,
    /// `broker.rack` of the nodes that have one.
    racks: BTreeMap<i32, String>,
    pub nodes: BTreeMap<i32, Node>,
    /// Dropped last: a node that fails shows its log from there.
    _tmp: tempfile::TempDir,
}

/// A port for a controller listener: below the kernel's ephemeral range, like the client
/// ports, so that no connection's source port takes it before its node binds it (the
/// voters' addresses are fixed, so a node cannot retry on another port).
pub fn free_port() -> u16 {
    super::launch::candidate_port()
}

impl Cluster {
    /// Formats three directories with one cluster id and starts the three nodes at once
    /// (each waits for a quorum before it is ready).
    pub fn start() -> Cluster {
        Cluster::start_with(&[])
    }

    /// As [`Cluster::start`], every node with `extra` settings too.
    pub fn start_with(extra: &[&str]) -> Cluster {
        let hosts = (1..=3).map(|id| (id, Host::Loopback)).collect();
        Cluster::start_on(hosts, extra)
    }

    /// As [`Cluster::start_with`], node `id` in rack `racks[id - 1]`.
    pub fn start_in_racks(racks: [&str; 3], extra: &[&str]) -> Cluster {
        let hosts = (1..=3).map(|id| (id, Host::Loopback)).collect();
        let racks = (1..=3)
            .zip(racks)
            .map(|(id, r)| (id, r.to_string()))
            .collect();
        Cluster::start_configured(hosts, racks, extra)
    }

    /// As [`Cluster::start_with`], node `id` on `hosts[id]` (ids 1 to 3).
    pub fn start_on(hosts: BTreeMap<i32, Host>, extra: &[&str]) -> Cluster {
        Cluster::start_configured(hosts, BTreeMap::new(), extra)
    }

    fn start_configured(
        hosts: BTreeMap<i32, Host>,
        racks: BTreeMap<i32, String>,
        extra: &[&str],
    ) -> Cluster {
        assert_eq!(hosts.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        let tmp = tempfile::tempdir().expect("tmp");
        let voters = hosts
            .iter()
            .map(|(id, host)| match host {
                Host::Loopback => format!("{id}@127.0.0.1:{}", free_port()),
                Host::Netns {
                    ip,
                    controller_port,
                    ..
                } => format!("{id}@{ip}:{controller_port}"),
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut dirs = BTreeMap::new();
        for id in 1..=3 {
            let dir = tmp.path().join(format!("node-{id}"));
            std::fs::create_dir_all(&dir).expect("dir");
            let output = Command::new(env!("CARGO_BIN_EXE_ringlog"))
                .args(["format", "--cluster-id", CLUSTER_ID])
                .args(["--set", &format!("log.dirs={}", dir.join("data").display())])
                .args(["--set", &format!("node.id={id}")])
                .env("RUST_LOG", "warn")
                .output()
                .expect("ringlog format runs");
            assert!(output.status.success(), "{output:?}");
            dirs.insert(id, dir);
        }
        let mut cluster = Cluster {
            _tmp: tmp,
            dirs,
            hosts,
            voters,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            racks,
            nodes: BTreeMap::new(),
        };
        let started: Vec<(i32, Node)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (1..=3)
                .map(|id| {
                    let cluster = &cluster;
                    scope.spawn(move || (id, cluster.launch(id)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a node starts"))
                .collect()
        });
        cluster.nodes.extend(started);
        cluster
    }

    fn settings(&self, id: i32) -> Vec<String> {
        let mut settings = vec![
            format!("node.id={id}"),
            format!("controller.quorum.voters={}", self.voters),
            // A dead broker is fenced within seconds, not Kafka's default 9.
            "broker.heartbeat.interval.ms=200".into(),
            "broker.session.timeout.ms=1500".into(),
            // Snapshots of the metadata log every few records, so that a node that was down
            // catches up from one.
            "metadata.log.max.record.bytes.between.snapshots=2048".into(),
        ];
        settings.extend(
            self.racks
                .get(&id)
                .map(|rack| format!("broker.rack={rack}")),
        );
        settings.extend(self.extra.iter().cloned());
        settings
    }

    pub fn launch(&self, id: i32) -> Node {
        let settings = self.settings(id);
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        Node::start_at(&self.dirs[&id], &self.hosts[&id], &settings)
    }

    pub fn client(&self, id: i32) -> Client {
        self.nodes[&id].connect()
    }

    /// Waits until every running node gives the same account of the cluster: its brokers,
    /// every topic's id, and each partition's leader, epochs, replicas and ISR.
    pub fn wait_agreed(&self) {
        wait_for(|| {
            let accounts: Vec<String> = self
                .nodes
                .keys()
                .map(|&id| account(&mut self.client(id)))
                .collect();
            accounts.iter().all(|a| *a == accounts[0]).then_some(())
        });
    }

    /// The controller every running node names, once they agree and it is one of them.
    /// Node `id`'s controller listener.
    pub fn controller_address(&self, id: i32) -> std::net::SocketAddr {
        self.voters
            .split(',')
            .find_map(|voter| voter.strip_prefix(&format!("{id}@")))
            .and_then(|address| address.parse().ok())
            .expect("every node is a voter")
    }

    pub fn controller(&self) -> i32 {
        wait_for(|| {
            let named: Vec<i32> = self
                .nodes
                .keys()
                .map(|&id| metadata(&mut self.client(id), &[]).controller_id.0)
                .collect();
            let first = named[0];
            (named.iter().all(|&c| c == first) && self.nodes.contains_key(&first)).then_some(first)
        })
    }

    /// Waits until node `id` serves `topic`-`partition` as its leader. A node names a new
    /// leader in Metadata once the shard that answers has applied the change; the shard that
    /// owns the partition applies it on its own, a moment later at most.
    #[track_caller]
    pub fn wait_serving(&self, id: i32, topic: &str, partition: i32) {
        let refused = kafka_protocol::error::ResponseError::NotLeaderOrFollower.code();
        wait_for(
            || match try_fetch_at(&mut self.client(id), topic, partition, 0) {
                Err(code) if code == refused => None,
                answer => Some(answer.unwrap_or_else(|code| {
                    panic!("node {id} refuses {topic}-{partition}: error {code}")
                })),
            },
        );
    }
}

#[track_caller]
pub fn wait_for<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn broker_ids(answer: &MetadataResponse) -> Vec<i32> {
    let mut ids: Vec<i32> = answer.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    ids
}

/// A node's Metadata for everything, in a canonical order: equal on two nodes exactly
/// when their images agree on what clients see.
pub fn account(client: &mut Client) -> String {
    let request = kafka_protocol::messages::MetadataRequest::default().with_topics(None);
    let ResponseKind::Metadata(answer) = client.call(12, RequestKind::Metadata(request)) else {
        unreachable!()
    };
    account_of(&answer)
}

/// The account of a Metadata answer for everything (see [`account`]).
pub fn account_of(answer: &MetadataResponse) -> String {
    let mut lines = vec![format!("brokers {:?}", broker_ids(answer))];
    for topic in &answer.topics {
        for p in &topic.partitions {
            lines.push(format!(
                "{:?} {} {} leader {} epoch {} replicas {:?} isr {:?}",
                topic.name,
                topic.topic_id,
                p.partition_index,
                p.leader_id.0,
                p.leader_epoch,
                p.replica_nodes,
                p.isr_nodes
            ));
        }
    }
    lines.sort();
    lines.join("\n")
}
