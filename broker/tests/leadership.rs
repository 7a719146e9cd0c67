//! Who leads a partition and where its replicas live, changed on purpose, on three nodes:
//! - A preferred leader that was killed and came back gets its partitions back, by
//!   ElectLeaders (`ringlog partition elect-leaders`) or by the controller's own periodic
//!   balancing (`auto.leader.rebalance.enable`); acks=all goes on, nothing acknowledged is
//!   lost; a follower's fetch waiting on the deposed leader is answered at once.
//! - A partition whose only in-sync replica died stays offline (no clean election can pick
//!   the out-of-sync replica) until an unclean election is asked for, by ElectLeaders or by
//!   turning `unclean.leader.election.enable` on; the new leader is alone in the ISR, what
//!   only the dead one held is lost (as Kafka warns), and the dead one, back, truncates to
//!   the new leader's log.
//! - A partition's replicas move to other brokers with its data (AlterPartitionReassignments,
//!   `ringlog partition reassign`): new replicas catch up, the old ones leave and delete
//!   their copies; a move that cannot complete is listed and can be cancelled; Kafka's errors
//!   for what cannot be done.
//! - Replicas of a new topic span the racks brokers name (`broker.rack`), and Metadata
//!   names each broker's rack.
//!
//! Method: real processes (`common::cluster`), Kafka requests through the test client and
//! the `ringlog` binary; every wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{wait_for, Cluster};
use common::replicated::{
    fetch_as_follower, leaders_among, produce_round, produce_to_leader, wait_isr, wait_readable,
    with_topic, PARTITIONS, TOPIC,
};
use common::{alter_resource, list_offset, metadata, read_values, topic_name, Client, Stopped};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, CreateTopicsRequest, ElectLeadersRequest,
    ListPartitionReassignmentsRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

/// Settings every node of these tests starts with.
const SETTINGS: &[&str] = &["replica.fetch.backoff.ms=100"];

/// Runs `ringlog ARGS --bootstrap-server` against node `id`: (success, stdout + stderr).
fn ringlog(cluster: &Cluster, id: i32, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ringlog"))
        .args(args)
        .arg("--bootstrap-server")
        .arg(cluster.nodes[&id].address().to_string())
        .env("RUST_LOG", "warn")
        .output()
        .expect("ringlog runs");
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// Partition → (leader, replicas, ISR sorted) of `topic`, as node `id` answers.
fn partitions(cluster: &Cluster, id: i32, topic: &str) -> BTreeMap<i32, (i32, Vec<i32>, Vec<i32>)> {
    let answer = metadata(&mut cluster.client(id), &[topic]);
    let Some(topic) = answer.topics.first() else {
        return BTreeMap::new();
    };
    topic
        .partitions
        .iter()
        .map(|p| {
            let replicas = p.replica_nodes.iter().map(|id| id.0).collect();
            let mut isr: Vec<i32> = p.isr_nodes.iter().map(|id| id.0).collect();
            isr.sort_unstable();
            (p.partition_index, (p.leader_id.0, replicas, isr))
        })
        .collect()
}

/// Waits until node `id` names each partition's preferred replica (its first) as leader.
#[track_caller]
fn wait_preferred_leaders(cluster: &Cluster, id: i32, topic: &str) -> BTreeMap<i32, i32> {
    wait_for(|| {
        let states = partitions(cluster, id, topic);
        let preferred = states
            .values()
            .all(|(leader, replicas, _)| replicas.first() == Some(leader));
        (!states.is_empty() && preferred).then(|| {
            states
                .iter()
                .map(|(&p, (leader, _, _))| (p, *leader))
                .collect()
        })
    })
}

/// Kills node `victim`, waits until the others lead everything, and starts it again: the
/// partitions it preferred are led elsewhere, every replica in sync again.
#[track_caller]
fn kill_and_restart(cluster: &mut Cluster, victim: i32) {
    let _killed: Stopped = cluster.nodes.remove(&victim).expect("running").kill();
    let others: Vec<i32> = [1, 2, 3].into_iter().filter(|&id| id != victim).collect();
    leaders_among(cluster, &others);
    let node = cluster.launch(victim);
    cluster.nodes.insert(victim, node);
    wait_isr(cluster, &[1, 2, 3]);
}

/// ElectLeaders v2 through node `id`: (top-level error, partition → error).
fn elect(
    cluster: &Cluster,
    id: i32,
    election_type: i8,
    named: Option<(&str, &[i32])>,
) -> (i16, BTreeMap<i32, i16>) {
    let request = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_timeout_ms(30_000)
        .with_topic_partitions(named.map(|(topic, partitions)| {
            vec![TopicPartitions::default()
                .with_topic(topic_name(topic))
                .with_partitions(partitions.to_vec())]
        }));
    let ResponseKind::ElectLeaders(answer) = cluster
        .client(id)
        .call(2, RequestKind::ElectLeaders(request))
    else {
        unreachable!()
    };
    let results = answer
        .replica_election_results
        .iter()
        .flat_map(|t| t.partition_result.iter())
        .map(|p| (p.partition_id, p.error_code))
        .collect();
    (answer.error_code, results)
}

/// How long a follower's fetch in these tests asks the leader to wait for data.
const FOLLOWER_WAIT_SECS: u64 = 30;

#[test]
fn a_returning_preferred_leader_gets_its_partitions_back_when_asked() {
    let mut settings = SETTINGS.to_vec();
    settings.push("auto.leader.rebalance.enable=false");
    let (mut cluster, leaders, mut acknowledged) = with_topic(Cluster::start_with(&settings));
    let preferred = wait_preferred_leaders(&cluster, 1, TOPIC);
    assert_eq!(
        preferred, leaders,
        "a new topic is led by its preferred replicas"
    );

    let victim = leaders[&0];
    kill_and_restart(&mut cluster, victim);
    let moved = partitions(&cluster, victim, TOPIC);
    assert_ne!(
        moved[&0].0, victim,
        "leadership does not come back by itself"
    );

    // A follower's fetch waiting at the interim leader's log end (no writes come) ends the
    // moment that leader is deposed, not when its wait runs out.
    let interim = moved[&0].0;
    let third = [1, 2, 3]
        .into_iter()
        .find(|&id| id != victim && id != interim)
        .expect("three nodes");
    let waiting = {
        let mut client = cluster.client(interim);
        let topic_id = metadata(&mut client, &[TOPIC]).topics[0].topic_id;
        let log_end = list_offset(&mut client, TOPIC, -1, -2);
        std::thread::spawn(move || {
            let started = Instant::now();
            let wait_ms = FOLLOWER_WAIT_SECS as i32 * 1000;
            let code = fetch_as_follower(&mut client, topic_id, third, 1, log_end, wait_ms);
            (code, started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(!waiting.is_finished(), "the fetch waits for data");

    // The tool asks for preferred leaders of the topic: partition 0 comes back, the others
    // needed no election.
    let (ok, said) = ringlog(
        &cluster,
        1,
        &["partition", "elect-leaders", "--topic", TOPIC],
    );
    assert!(ok, "{said}");
    let elected: Vec<String> = moved
        .iter()
        .filter(|(_, (leader, replicas, _))| replicas[0] != *leader)
        .map(|(p, _)| format!("{TOPIC}-{p}"))
        .collect();
    assert!(
        said.contains(&format!(
            "Successfully completed leader election (PREFERRED) for partitions {}",
            elected.join(", ")
        )),
        "{said}"
    );
    let back = wait_preferred_leaders(&cluster, victim, TOPIC);
    assert_eq!(back, leaders);
    let (code, waited) = waiting.join().expect("the fetch returns");
    assert_eq!(code, ResponseError::NotLeaderOrFollower.code());
    assert!(
        waited < Duration::from_secs(FOLLOWER_WAIT_SECS / 2),
        "the deposed leader held its follower's fetch for {waited:?}"
    );
    // Every partition asked for by name again: not needed. All of them: nothing to answer.
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let (top, results) = elect(&cluster, 2, 0, Some((TOPIC, &all)));
    assert_eq!(top, 0);
    let not_needed = ResponseError::ElectionNotNeeded.code();
    assert!(
        results.values().all(|&code| code == not_needed),
        "{results:?}"
    );
    assert_eq!(elect(&cluster, 3, 0, None), (0, BTreeMap::new()));
    let (_, unknown) = elect(&cluster, 1, 0, Some(("no-such-topic", &[0])));
    assert_eq!(unknown[&0], ResponseError::UnknownTopicOrPartition.code());

    // The preferred leaders hold everything acknowledged and take acks=all again.
    wait_readable(&cluster, &back, &acknowledged);
    produce_round(&cluster, &back, "after-election", -1, 0, &mut acknowledged);
    wait_readable(&cluster, &back, &acknowledged);
}

#[test]
fn the_controller_gives_leadership_back_to_preferred_replicas_by_itself() {
    let mut settings = SETTINGS.to_vec();
    settings.push("leader.imbalance.check.interval.seconds=1");
    let (mut cluster, leaders, acknowledged) = with_topic(Cluster::start_with(&settings));
    let victim = leaders[&1];
    kill_and_restart(&mut cluster, victim);
    let back = wait_preferred_leaders(&cluster, victim, TOPIC);
    assert_eq!(back, leaders);
    wait_readable(&cluster, &back, &acknowledged);
}

/// Creates `topic` with one partition on `replicas` (the first leads) and the settings given.
fn create_on(client: &mut Client, topic: &str, replicas: &[i32], configs: &[(&str, &str)]) {
    let configs = configs
        .iter()
        .map(|(key, value)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_value(Some(StrBytes::from_string(value.to_string())))
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(replicas.iter().copied().map(BrokerId).collect())])
            .with_configs(configs)]);
    let ResponseKind::CreateTopics(answer) = client.call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.topics[0].error_code, 0, "creating {topic}");
}

/// Produces `values` one batch each to partition 0 of `topic` on node `leader`, each
/// expected to be acknowledged with `acks`.
#[track_caller]
fn produce_all(cluster: &Cluster, leader: i32, topic: &str, acks: i16, values: &[&str]) {
    let mut client = cluster.client(leader);
    for value in values {
        let code = produce_to_leader(&mut client, topic, 0, value, acks);
        assert_eq!(code, 0, "{value} to {topic} on {leader}");
    }
}

#[test]
fn an_offline_partition_comes_back_only_by_an_unclean_election() {
    let mut cluster = Cluster::start_with(SETTINGS);
    let controller = cluster.controller();
    // Two topics on brokers 1 (leader) and 2; broker 3 holds none (it keeps the quorum).
    let asked = "unclean-asked";
    let configured = "unclean-configured";
    for topic in [asked, configured] {
        create_on(&mut cluster.client(controller), topic, &[1, 2], &[]);
        produce_all(&cluster, 1, topic, -1, &["both-a", "both-b"]);
    }
    // Broker 2 hangs and is fenced: the ISR is broker 1 alone, which acknowledges more.
    cluster.nodes[&2].signal("STOP");
    wait_for(|| (partitions(&cluster, 3, asked)[&0].2 == [1]).then_some(()));
    wait_for(|| (partitions(&cluster, 3, configured)[&0].2 == [1]).then_some(()));
    for topic in [asked, configured] {
        produce_all(&cluster, 1, topic, -1, &["only-on-1"]);
    }
    // Broker 1 dies before broker 2 comes back: no in-sync replica is left alive.
    let one: Stopped = cluster.nodes.remove(&1).expect("running").kill();
    cluster.nodes[&2].signal("CONT");
    for topic in [asked, configured] {
        wait_for(|| {
            let (leader, _, isr) = partitions(&cluster, 3, topic)[&0].clone();
            (leader == -1 && isr == [1]).then_some(())
        });
    }

    // No clean election may pick broker 2.
    let (_, preferred) = elect(&cluster, 2, 0, Some((asked, &[0])));
    assert_eq!(
        preferred[&0],
        ResponseError::PreferredLeaderNotAvailable.code()
    );
    // Asked for, an unclean one does: broker 2 leads alone and has only what both held.
    let (ok, said) = ringlog(
        &cluster,
        3,
        &["partition", "elect-leaders", "--topic", asked, "--unclean"],
    );
    assert!(ok, "{said}");
    // The tool asked the active controller; node 3 shows the outcome once it applied it.
    wait_for(|| (partitions(&cluster, 3, asked)[&0].0 != -1).then_some(()));
    let (leader, _, isr) = partitions(&cluster, 3, asked)[&0].clone();
    assert_eq!((leader, isr), (2, vec![2]));
    let (_, again) = elect(&cluster, 3, 1, Some((asked, &[0])));
    assert_eq!(again[&0], ResponseError::ElectionNotNeeded.code());
    // The other topic stays offline until it allows unclean elections.
    assert_eq!(partitions(&cluster, 3, configured)[&0].0, -1);
    let unclean = [("unclean.leader.election.enable", 0, Some("true"))];
    let mut client = cluster.client(3);
    assert_eq!(
        alter_resource(&mut client, (2, configured), &unclean, false),
        0
    );
    wait_for(|| (partitions(&cluster, 3, configured)[&0].0 == 2).then_some(()));

    for topic in [asked, configured] {
        cluster.wait_serving(2, topic, 0);
        let both: Vec<Bytes> = vec![Bytes::from("both-a"), Bytes::from("both-b")];
        wait_for(|| (read_values(&mut cluster.client(2), topic, 0) == both).then_some(()));
        produce_all(&cluster, 2, topic, -1, &["after-unclean"]);
    }
    // Broker 1 comes back: it truncates what only it held, and follows broker 2.
    drop(one);
    let node = cluster.launch(1);
    cluster.nodes.insert(1, node);
    for topic in [asked, configured] {
        wait_for(|| (partitions(&cluster, 3, topic)[&0].2 == [1, 2]).then_some(()));
        let expected: Vec<Bytes> = ["both-a", "both-b", "after-unclean"]
            .into_iter()
            .map(Bytes::from)
            .collect();
        assert_eq!(read_values(&mut cluster.client(2), topic, 0), expected);
    }
}

/// AlterPartitionReassignments v1 of partition 0 of `topic` to `replicas` (`None`: cancel),
/// through node `id`: the partition's error code.
fn reassign(
    cluster: &Cluster,
    id: i32,
    topic: &str,
    replicas: Option<&[i32]>,
    allow_replication_factor_change: bool,
) -> i16 {
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_allow_replication_factor_change(allow_replication_factor_change)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(0)
                .with_replicas(
                    replicas.map(|ids| ids.iter().copied().map(BrokerId).collect()),
                )])]);
    let ResponseKind::AlterPartitionReassignments(answer) = cluster
        .client(id)
        .call(1, RequestKind::AlterPartitionReassignments(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.error_code, 0);
    answer.responses[0].partitions[0].error_code
}

/// A move in progress, as ListPartitionReassignments lists it.
#[derive(Debug, PartialEq, Eq)]
struct Move {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

/// ListPartitionReassignments through node `id`: every move in progress.
fn moves(cluster: &Cluster, id: i32) -> Vec<Move> {
    let request = ListPartitionReassignmentsRequest::default().with_topics(None);
    let ResponseKind::ListPartitionReassignments(answer) = cluster
        .client(id)
        .call(0, RequestKind::ListPartitionReassignments(request))
    else {
        unreachable!()
    };
    let ids = |ids: &[BrokerId]| ids.iter().map(|id| id.0).collect();
    answer
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Move {
                topic: t.name.to_string(),
                partition: p.partition_index,
                replicas: ids(&p.replicas),
                adding: ids(&p.adding_replicas),
                removing: ids(&p.removing_replicas),
            })
        })
        .collect()
}

/// Whether node `id`'s data directory holds a copy of partition 0 of `topic`.
fn holds_copy(cluster: &Cluster, id: i32, topic: &str) -> bool {
    cluster.dirs[&id]
        .join("data")
        .join(format!("{topic}-0"))
        .exists()
}

#[test]
fn replicas_move_to_other_brokers_with_their_data() {
    let mut cluster = Cluster::start_with(SETTINGS);
    let controller = cluster.controller();
    let topic = "moving";
    create_on(&mut cluster.client(controller), topic, &[1], &[]);
    let values: Vec<String> = (0..50).map(|i| format!("record-{i}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    produce_all(&cluster, 1, topic, -1, &refs);
    let expected: Vec<Bytes> = values.iter().cloned().map(Bytes::from).collect();

    // From broker 1 to brokers 2 and 3, with the tool: both copy the log, broker 1 leaves
    // and deletes its copy, broker 2 leads.
    let (ok, said) = ringlog(
        &cluster,
        3,
        &[
            "partition",
            "reassign",
            topic,
            "--partition",
            "0",
            "--replicas",
            "2,3",
        ],
    );
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!("Started moving {topic}-0 to replicas 2,3.")),
        "{said}"
    );
    wait_for(|| {
        let (leader, replicas, isr) = partitions(&cluster, 1, topic)[&0].clone();
        (leader == 2 && replicas == [2, 3] && isr == [2, 3]).then_some(())
    });
    assert!(moves(&cluster, 1).is_empty(), "the move is complete");
    wait_for(|| (!holds_copy(&cluster, 1, topic)).then_some(()));
    for id in [2, 3] {
        assert!(holds_copy(&cluster, id, topic), "broker {id} holds a copy");
    }
    cluster.wait_serving(2, topic, 0);
    assert_eq!(read_values(&mut cluster.client(2), topic, 0), expected);
    produce_all(&cluster, 2, topic, -1, &["after-move"]);

    // A move to a broker that is down cannot complete: it is listed, and cancelled.
    let stopped = cluster.nodes.remove(&1).expect("running").stop();
    assert_eq!(reassign(&cluster, 2, topic, Some(&[2, 3, 1]), true), 0);
    // Node 2 answered once it served the move; node 3 follows the metadata log.
    let listed = wait_for(|| Some(moves(&cluster, 3)).filter(|m| !m.is_empty()));
    let expected_move = Move {
        topic: topic.to_string(),
        partition: 0,
        replicas: vec![2, 3, 1],
        adding: vec![1],
        removing: vec![],
    };
    assert_eq!(listed, vec![expected_move]);
    let (ok, said) = ringlog(&cluster, 3, &["partition", "reassignments"]);
    assert!(
        ok && said.contains("Replicas: 2,3,1\tAdding: 1\tRemoving: "),
        "{said}"
    );
    assert_eq!(reassign(&cluster, 3, topic, None, true), 0);
    assert!(moves(&cluster, 3).is_empty(), "cancelled");
    assert_eq!(partitions(&cluster, 3, topic)[&0].1, vec![2, 3]);
    drop(stopped);

    // Kafka's refusals.
    let no_move = ResponseError::NoReassignmentInProgress.code();
    assert_eq!(reassign(&cluster, 2, topic, None, true), no_move);
    let invalid = ResponseError::InvalidReplicaAssignment.code();
    assert_eq!(reassign(&cluster, 2, topic, Some(&[2, 2]), true), invalid);
    assert_eq!(reassign(&cluster, 2, topic, Some(&[2, 9]), true), invalid);
    let factor = ResponseError::InvalidReplicationFactor.code();
    assert_eq!(reassign(&cluster, 2, topic, Some(&[3]), false), factor);
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        reassign(&cluster, 2, "no-such-topic", Some(&[2]), true),
        unknown
    );

    // Shrinking to one replica completes at once, and the data is all there.
    assert_eq!(reassign(&cluster, 3, topic, Some(&[3]), true), 0);
    let (leader, replicas, _) = partitions(&cluster, 3, topic)[&0].clone();
    assert_eq!((leader, replicas), (3, vec![3]));
    cluster.wait_serving(3, topic, 0);
    let mut all = expected;
    all.push(Bytes::from("after-move"));
    wait_for(|| (read_values(&mut cluster.client(3), topic, 0) == all).then_some(()));
}

#[test]
fn replicas_are_placed_across_racks() {
    // Brokers 1 and 2 share a rack; every partition of two replicas has one in each rack.
    let cluster = Cluster::start_in_racks(["east", "east", "west"], SETTINGS);
    let controller = cluster.controller();
    let answer = metadata(&mut cluster.client(controller), &[]);
    let racks: BTreeMap<i32, String> = answer
        .brokers
        .iter()
        .map(|b| {
            (
                b.node_id.0,
                b.rack.as_ref().map(|r| r.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    let expected: BTreeMap<i32, String> = [(1, "east"), (2, "east"), (3, "west")]
        .into_iter()
        .map(|(id, rack)| (id, rack.to_string()))
        .collect();
    assert_eq!(racks, expected);
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name("racked"))
            .with_num_partitions(8)
            .with_replication_factor(2)]);
    let ResponseKind::CreateTopics(created) = cluster
        .client(controller)
        .call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    assert_eq!(created.topics[0].error_code, 0);
    let placed = partitions(&cluster, controller, "racked");
    assert_eq!(placed.len(), 8);
    for (partition, (_, replicas, _)) in placed {
        let spanned: std::collections::BTreeSet<&str> =
            replicas.iter().map(|id| racks[id].as_str()).collect();
        assert_eq!(spanned.len(), 2, "partition {partition} on {replicas:?}");
    }
}

/// IncrementalAlterConfigs of resource `kind` `name` (2 topic, 4 broker): SET each
/// `Some`, DELETE each `None`; the resource's error code.
fn alter_configs(cluster: &Cluster, resource: (i8, &str), changes: &[(&str, Option<&str>)]) -> i16 {
    let ops: Vec<(&str, i8, Option<&str>)> = changes
        .iter()
        .map(|(key, value)| (*key, if value.is_some() { 0 } else { 1 }, *value))
        .collect();
    alter_resource(&mut cluster.client(1), resource, &ops, false)
}

#[test]
fn a_throttled_move_copies_no_faster_than_its_rate() {
    let cluster = Cluster::start_with(SETTINGS);
    let controller = cluster.controller();
    let topic = "throttled";
    create_on(&mut cluster.client(controller), topic, &[1], &[]);
    let value = "x".repeat(10_000);
    let values: Vec<&str> = (0..50).map(|_| value.as_str()).collect();
    produce_all(&cluster, 1, topic, -1, &values);

    // As kafka-reassign-partitions --throttle sets it: every replica of the topic throttled
    // on both sides, 200 KB/s a broker (each of a node's two shards takes half of it).
    let rate = "200000";
    for key in [
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    ] {
        assert_eq!(alter_configs(&cluster, (2, topic), &[(key, Some("*"))]), 0);
    }
    for broker in ["1", "2"] {
        let rates = [
            ("leader.replication.throttled.rate", Some(rate)),
            ("follower.replication.throttled.rate", Some(rate)),
        ];
        assert_eq!(alter_configs(&cluster, (4, broker), &rates), 0);
    }
    let started = std::time::Instant::now();
    assert_eq!(reassign(&cluster, 1, topic, Some(&[1, 2]), true), 0);
    wait_for(|| (partitions(&cluster, 1, topic)[&0].2 == [1, 2]).then_some(()));
    let took = started.elapsed();
    // 500 KB at 100 KB/s, the first second's worth at once: 4 s at the least.
    println!("a throttled move of 500 KB took {took:?}");
    assert!(
        took >= std::time::Duration::from_millis(3500),
        "the copy went faster than the throttle allows: {took:?}"
    );

    // kafka-reassign-partitions --verify clears the throttles: every one removable.
    for key in [
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    ] {
        assert_eq!(alter_configs(&cluster, (2, topic), &[(key, None)]), 0);
    }
    let cleared = [
        ("leader.replication.throttled.rate", None),
        ("follower.replication.throttled.rate", None),
        ("replica.alter.log.dirs.io.max.bytes.per.second", None),
    ];
    assert_eq!(alter_configs(&cluster, (4, "1"), &cleared), 0);
    let expected: Vec<Bytes> = values.iter().map(|v| Bytes::from(v.to_string())).collect();
    wait_for(|| (partitions(&cluster, 1, topic)[&0].0 >= 1).then_some(()));
    let leader = partitions(&cluster, 1, topic)[&0].0;
    cluster.wait_serving(leader, topic, 0);
    assert_eq!(read_values(&mut cluster.client(leader), topic, 0), expected);
}
