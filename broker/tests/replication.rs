//! Replicated partitions on three nodes (RF 3, `min.insync.replicas=2`): followers fetch
//! from their leaders, acks=all is answered once every ISR member holds the batch, and
//! losing brokers loses no acknowledged record.
//! - A follower that hangs (SIGSTOP) holds acks=all answers back until it is fenced (or,
//!   alive, lags `replica.lag.time.max.ms`) and leaves the ISR; an answered record is
//!   visible at once (the high watermark passed it). Back, it catches up and rejoins.
//! - kill -9 of a leader moves its leaderships to ISR members, which hold every
//!   acknowledged record, and acks=all goes on with two in sync; with one (the second
//!   stopped by SIGTERM: every node is also a metadata voter, and one voter of three cannot
//!   commit a fencing), acks=all is refused with NOT_ENOUGH_REPLICAS while acks=1 works;
//!   `ringlog cluster describe` counts the under-replicated partitions.
//! - A follower stopped and restarted catches up on what it missed and rejoins the ISR.
//! - A leader deposed while it held acks=1 records alone truncates them (the diverging
//!   epoch of Fetch v12) and converges on the new leader's log.
//! - A group's committed offsets survive a kill -9 of its coordinator: `__consumer_offsets`
//!   is replicated, and the new leader of the group's partition serves them.
//! - With `replica.fsync.before.fetch`, consumers see only what every ISR member synced.
//! - A follower joins the ISR only as the incarnation the metadata registers (the broker
//!   epoch of Fetch v15's replica state, KIP-903).
//! - A tool reads a follower's copy with Kafka's debugging replica id (-2); a consumer may
//!   not.
//! - A follower whose leader leaves a fetch unanswered (frozen, still registered) gives up
//!   on it after `replica.socket.timeout.ms` and connects again.
//! - A new topic's first acks=all writes wait for no follower fetch that was already waiting
//!   at their leader (`replica.fetch.wait.max.ms`), nor for the fetch backoff of a follower
//!   that named the topic before its leader knew it.
//!
//! Every wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{wait_for, Cluster};
use common::replicated::{
    create_named, fetch_as_follower, leaders_among, produce_round, produce_to_leader, states,
    wait_isr, wait_readable, with_topic, Acknowledged, PARTITIONS, TOPIC,
};
use common::{
    batch, commit_offset, committed_offset, find_coordinator, produce, read_values, Stopped,
};
use kafka_protocol::error::ResponseError;

/// Three nodes (with `extra` settings) and [`TOPIC`], every replica in sync, and a first
/// round of acks=all records that every leader serves: the cluster, the leaders and what
/// was acknowledged.
#[track_caller]
fn started(extra: &[&str]) -> (Cluster, BTreeMap<i32, i32>, Acknowledged) {
    let mut settings = vec!["replica.fetch.backoff.ms=100"];
    settings.extend_from_slice(extra);
    with_topic(Cluster::start_with(&settings))
}

/// A running node other than `leader`: a follower of every partition `leader` leads (RF 3
/// on three nodes).
fn a_follower(cluster: &Cluster, leader: i32) -> i32 {
    *cluster
        .nodes
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower")
}

/// Freezes (SIGSTOP) a follower of partition 0 and writes one record there with acks=all,
/// which must be answered (once the follower left the ISR) and then be visible at once:
/// the high watermark passed it. Answers the frozen node.
#[track_caller]
fn hang_a_follower(
    cluster: &Cluster,
    leaders: &BTreeMap<i32, i32>,
    acknowledged: &mut Acknowledged,
) -> i32 {
    let leader = leaders[&0];
    let hung = a_follower(cluster, leader);
    cluster.nodes[&hung].signal("STOP");
    let mut client = cluster.client(leader);
    let value = Bytes::from_static(b"while-one-hangs");
    let (code, _) = produce(&mut client, TOPIC, 0, batch(&[&value]), -1);
    assert_eq!(code, 0);
    acknowledged
        .get_mut(&0)
        .expect("a round before")
        .push(value);
    assert_eq!(
        read_values(&mut client, TOPIC, 0),
        acknowledged[&0],
        "an acknowledged record is below the high watermark"
    );
    hung
}

/// Stops every node but `kept`, one at a time with SIGTERM (controlled shutdowns, which the
/// quorum commits while two voters run), until `kept` leads every partition alone:
/// partition → leader.
#[track_caller]
fn stop_all_but(cluster: &mut Cluster, kept: i32) -> BTreeMap<i32, i32> {
    let mut running: Vec<i32> = cluster.nodes.keys().copied().collect();
    for id in running.clone().into_iter().filter(|&id| id != kept) {
        let _stopped: Stopped = cluster.nodes.remove(&id).expect("running").stop();
        running.retain(|&r| r != id);
        leaders_among(cluster, &running);
        if running.len() > 1 {
            // The next controlled shutdown needs a controller: wait for the election.
            cluster.controller();
        }
    }
    leaders_among(cluster, &[kept])
}

#[test]
fn acknowledged_records_survive_a_hung_follower_a_killed_leader_and_a_stopped_one() {
    let (mut cluster, leaders, mut acknowledged) = started(&[]);
    let mut alive: Vec<i32> = vec![1, 2, 3];

    // A follower of partition 0 hangs: an acks=all write to it is answered only once the
    // follower is fenced and out of the ISR, and what is answered is visible at once.
    let hung = hang_a_follower(&cluster, &leaders, &mut acknowledged);
    alive.retain(|&id| id != hung);
    let leaders = leaders_among(&cluster, &alive);
    wait_readable(&cluster, &leaders, &acknowledged);
    // Back, it catches up and rejoins every ISR.
    cluster.nodes[&hung].signal("CONT");
    alive.push(hung);
    alive.sort_unstable();
    wait_isr(&cluster, &alive);

    // kill -9 the leader of partition 0: its leaderships go to the ISR members left, which
    // hold everything acknowledged, and two in sync is enough for min.insync.replicas=2.
    let killed = leaders[&0];
    let _killed: Stopped = cluster.nodes.remove(&killed).expect("running").kill();
    alive.retain(|&id| id != killed);
    let leaders = leaders_among(&cluster, &alive);
    wait_readable(&cluster, &leaders, &acknowledged);
    produce_round(&cluster, &leaders, "two-in-sync", -1, 0, &mut acknowledged);
    // The tools see it: every partition lacks one replica, none lacks a leader.
    let survivor = cluster.nodes.values().next().expect("a survivor");
    let described = std::process::Command::new(env!("CARGO_BIN_EXE_ringlog"))
        .args(["cluster", "describe", "--bootstrap-server"])
        .arg(format!("127.0.0.1:{}", survivor.port))
        .output()
        .expect("ringlog runs");
    assert!(described.status.success(), "{described:?}");
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.contains("UnderReplicatedPartitions: 3\tOfflinePartitions: 0"),
        "{described}"
    );

    // A second one stops: the last leads everything alone, holds everything acknowledged,
    // and refuses acks=all.
    let second = alive[0];
    let _second: Stopped = cluster.nodes.remove(&second).expect("running").stop();
    alive.retain(|&id| id != second);
    let leaders = leaders_among(&cluster, &alive);
    wait_readable(&cluster, &leaders, &acknowledged);
    let refused = ResponseError::NotEnoughReplicas.code();
    produce_round(&cluster, &leaders, "alone", -1, refused, &mut acknowledged);
    produce_round(&cluster, &leaders, "alone-acks-1", 1, 0, &mut acknowledged);
    wait_readable(&cluster, &leaders, &acknowledged);
}

#[test]
fn a_lagging_follower_leaves_the_isr_and_rejoins_once_caught_up() {
    // Brokers stay registered through a minute of silence: only the lag takes a follower out.
    let (mut cluster, leaders, mut acknowledged) = started(&[
        "replica.lag.time.max.ms=1000",
        "broker.session.timeout.ms=60000",
    ]);
    let all = [1, 2, 3];

    // A follower hangs without being fenced: it leaves the ISR for its lag, and acks=all
    // is answered by the two left.
    let hung = hang_a_follower(&cluster, &leaders, &mut acknowledged);
    let leader = leaders[&0];
    let in_sync: Vec<i32> = all.iter().copied().filter(|&id| id != hung).collect();
    wait_for(|| {
        let (_, isr) = states(&cluster, leader)[&0].clone();
        (isr == in_sync).then_some(())
    });

    // Thawed, it catches up and every ISR is whole again.
    cluster.nodes[&hung].signal("CONT");
    wait_isr(&cluster, &all);

    // Stopped and restarted, it catches up on what it missed and rejoins.
    let stopped = cluster.nodes.remove(&hung).expect("running").stop();
    let leaders = leaders_among(&cluster, &in_sync);
    produce_round(
        &cluster,
        &leaders,
        "while-stopped",
        -1,
        0,
        &mut acknowledged,
    );
    drop(stopped);
    let node = cluster.launch(hung);
    cluster.nodes.insert(hung, node);
    wait_isr(&cluster, &all);

    // The two others stop in turn (controlled shutdowns, which the quorum still commits):
    // the one that was away leads everything and holds everything acknowledged.
    let leaders = stop_all_but(&mut cluster, hung);
    wait_readable(&cluster, &leaders, &acknowledged);
}

#[test]
fn a_replica_joins_the_isr_only_as_the_incarnation_the_metadata_registers() {
    // Brokers stay registered through a minute of silence: only the lag takes one out.
    let (cluster, leaders, mut acknowledged) = started(&[
        "replica.lag.time.max.ms=1000",
        "broker.session.timeout.ms=60000",
    ]);
    let hung = hang_a_follower(&cluster, &leaders, &mut acknowledged);
    let leader = leaders[&0];
    let without_hung = |isr: &Vec<i32>| !isr.contains(&hung) && isr.len() == 2;
    wait_for(|| without_hung(&states(&cluster, leader)[&0].1).then_some(()));

    // Fetches at the leader's log end that claim to come from the hung broker, as an
    // incarnation before its registration (every broker registered once: epoch 1): they
    // bring it no place in the ISR, however long they go on.
    let mut client = cluster.client(leader);
    let topic_id = common::metadata(&mut client, &[TOPIC]).topics[0].topic_id;
    let log_end = acknowledged[&0].len() as i64;
    let started_at = std::time::Instant::now();
    while started_at.elapsed() < std::time::Duration::from_secs(3) {
        assert_eq!(
            fetch_as_follower(&mut client, topic_id, hung, 0, log_end, 0),
            0
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        let isr = states(&cluster, leader)[&0].1.clone();
        assert!(
            without_hung(&isr),
            "a stale incarnation joined the ISR: {isr:?}"
        );
    }
    // As the registered incarnation, the same fetch brings it back.
    wait_for(|| {
        assert_eq!(
            fetch_as_follower(&mut client, topic_id, hung, 1, log_end, 0),
            0
        );
        states(&cluster, leader)[&0].1.contains(&hung).then_some(())
    });
    cluster.nodes[&hung].signal("CONT");
    wait_isr(&cluster, &[1, 2, 3]);
}

/// Fetch v12 of partition 0 of [`TOPIC`] from offset 0 as `replica_id` (-1 a consumer, -2
/// a tool): the error code and the values.
fn fetch_as(client: &mut common::Client, replica_id: i32) -> (i16, Vec<Bytes>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, RequestKind, ResponseKind};
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(replica_id))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(common::topic_name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let ResponseKind::Fetch(answer) = client.call(12, RequestKind::Fetch(request)) else {
        unreachable!()
    };
    let data = &answer.responses[0].partitions[0];
    let records = data.records.clone().unwrap_or_default();
    (data.error_code, common::values(&records))
}

#[test]
fn a_tool_reads_a_follower_with_kafkas_debugging_replica_id() {
    let (cluster, leaders, acknowledged) = started(&[]);
    let follower = *cluster
        .nodes
        .keys()
        .find(|&&id| id != leaders[&0])
        .expect("a follower");
    let mut client = cluster.client(follower);
    let (refused, _) = fetch_as(&mut client, -1);
    assert_eq!(
        refused,
        ResponseError::NotLeaderOrFollower.code(),
        "a consumer"
    );
    // A tool reads the follower's own copy, up to its high watermark.
    wait_for(|| {
        let (error, values) = fetch_as(&mut client, -2);
        assert_eq!(error, 0);
        (values == acknowledged[&0]).then_some(())
    });
}

#[test]
fn a_tool_sees_each_replicas_log_end_where_a_consumer_sees_the_high_watermark() {
    let (cluster, leaders, acknowledged) = started(&["replica.lag.time.max.ms=60000"]);
    let leader = leaders[&0];
    let hung = a_follower(&cluster, leader);
    let other = *cluster
        .nodes
        .keys()
        .find(|&&id| id != leader && id != hung)
        .expect("a second follower");
    let written = acknowledged[&0].len() as i64;
    cluster.nodes[&hung].signal("STOP");
    // acks=1: the leader's log grows past the high watermark, which waits for the frozen
    // follower (still in the ISR for a minute).
    let mut client = cluster.client(leader);
    let (code, _) = produce(
        &mut client,
        TOPIC,
        0,
        batch(&[b"past-the-hw".as_slice()]),
        1,
    );
    assert_eq!(code, 0);
    assert_eq!(common::list_offset(&mut client, TOPIC, -1, -1), written);
    assert_eq!(common::list_offset(&mut client, TOPIC, -1, -2), written + 1);
    // A follower answers a tool from its own log: the record it fetched, not yet committed.
    let mut follower = cluster.client(other);
    wait_for(|| (common::list_offset(&mut follower, TOPIC, -1, -2) == written + 1).then_some(()));
    cluster.nodes[&hung].signal("CONT");
}

#[test]
fn a_deposed_leader_truncates_what_only_it_held_and_converges_on_the_new_leaders_log() {
    let (mut cluster, leaders, mut acknowledged) =
        started(&["replica.high.watermark.checkpoint.interval.ms=100"]);
    let all = [1, 2, 3];
    // Every node checkpoints the high watermarks it knows, leader or follower, in Kafka's
    // replication-offset-checkpoint.
    for dir in cluster.dirs.values() {
        let path = dir.join("data/replication-offset-checkpoint");
        wait_for(|| {
            let text = std::fs::read_to_string(&path).ok()?;
            let expected: Vec<String> =
                (0..PARTITIONS).map(|p| format!("{TOPIC} {p} 10")).collect();
            let lines: Vec<&str> = text.lines().collect();
            let whole = lines.len() == 2 + PARTITIONS as usize && lines[..2] == ["0", "3"];
            (whole && lines[2..] == expected).then_some(())
        });
    }

    // The followers of partition 0 hang; its leader takes acks=1 records alone.
    let deposed = leaders[&0];
    let followers: Vec<i32> = all.iter().copied().filter(|&id| id != deposed).collect();
    for id in &followers {
        cluster.nodes[id].signal("STOP");
    }
    let mut client = cluster.client(deposed);
    let alone = |i: usize| Bytes::from(format!("only-on-{deposed}-{i}"));
    for i in 0..20 {
        let (code, _) = produce(&mut client, TOPIC, 0, batch(&[&alone(i)]), 1);
        assert_eq!(code, 0, "acks=1 is the leader's write alone");
    }
    // Then the leader hangs and the followers come back: one of them leads at a new epoch
    // and takes acks=all writes. What the deposed leader held alone is not there, but for
    // what the followers' last fetches brought before they hung (acks=1 promises nothing
    // more).
    cluster.nodes[&deposed].signal("STOP");
    for id in &followers {
        cluster.nodes[id].signal("CONT");
    }
    let leaders = leaders_among(&cluster, &followers);
    produce_round(&cluster, &leaders, "new-epoch", -1, 0, &mut acknowledged);
    let new_leader = leaders[&0];
    let new_log = wait_for(|| {
        let log = read_values(&mut cluster.client(new_leader), TOPIC, 0);
        log.ends_with(&acknowledged[&0][acknowledged[&0].len() - 10..])
            .then_some(log)
    });
    assert!(
        !new_log.contains(&alone(19)),
        "the new leader has the deposed one's tail"
    );
    let kept: Vec<&Bytes> = new_log
        .iter()
        .filter(|v| !v.starts_with(b"only-on-"))
        .collect();
    assert_eq!(kept, acknowledged[&0].iter().collect::<Vec<_>>());

    // Back, the deposed leader truncates its own tail, fetches the new leader's, and
    // rejoins the ISR; left alone, it serves the new leader's log.
    cluster.nodes[&deposed].signal("CONT");
    wait_isr(&cluster, &all);
    stop_all_but(&mut cluster, deposed);
    assert_eq!(read_values(&mut cluster.client(deposed), TOPIC, 0), new_log);
}

/// The coordinator of `group` as the nodes in `alive` name it, once they agree, it is one of
/// them and it serves the group (`__consumer_offsets` is created on first use).
#[track_caller]
fn coordinator_among(cluster: &Cluster, alive: &[i32], group: &str) -> i32 {
    wait_for(|| {
        let named: Vec<(i16, i32)> = alive
            .iter()
            .map(|&id| find_coordinator(&mut cluster.client(id), group))
            .collect();
        let (code, first) = named[0];
        let agreed = code == 0 && named.iter().all(|n| *n == named[0]) && alive.contains(&first);
        let serving =
            agreed && committed_offset(&mut cluster.client(first), group, TOPIC, 0).0 == 0;
        serving.then_some(first)
    })
}

#[test]
fn committed_offsets_survive_the_loss_of_the_groups_coordinator() {
    let (mut cluster, _, _) = started(&["offsets.topic.num.partitions=3"]);
    let mut alive = vec![1, 2, 3];
    let coordinator = coordinator_among(&cluster, &alive, "readers");
    let mut client = cluster.client(coordinator);
    assert_eq!(commit_offset(&mut client, "readers", TOPIC, 0, 7), 0);
    assert_eq!(committed_offset(&mut client, "readers", TOPIC, 0), (0, 7));
    // The offsets topic is replicated like any other (offsets.topic.replication.factor is
    // 3 in a cluster): a new coordinator, the new leader of the group's partition, has the
    // commit.
    let _killed: Stopped = cluster.nodes.remove(&coordinator).expect("running").kill();
    alive.retain(|&id| id != coordinator);
    let moved = coordinator_among(&cluster, &alive, "readers");
    assert_ne!(moved, coordinator);
    let mut client = cluster.client(moved);
    assert_eq!(committed_offset(&mut client, "readers", TOPIC, 0), (0, 7));
    assert_eq!(commit_offset(&mut client, "readers", TOPIC, 0, 9), 0);
    assert_eq!(committed_offset(&mut client, "readers", TOPIC, 0), (0, 9));
}

#[test]
fn with_fsync_before_fetch_the_high_watermark_counts_only_synced_copies() {
    // No background fdatasync: only acks=all writes sync the leader.
    let (cluster, leaders, mut acknowledged) = started(&[
        "replica.fsync.before.fetch=true",
        "log.flush.interval.ms=3600000",
    ]);
    let mut client = cluster.client(leaders[&0]);
    // acks=1 is answered once the leader's write completed, but until a sync covers it on
    // the leader and every follower, consumers do not see it.
    let (code, _) = produce(&mut client, TOPIC, 0, batch(&[b"written-only"]), 1);
    assert_eq!(code, 0);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(read_values(&mut client, TOPIC, 0), acknowledged[&0]);
    // An acks=all write syncs the leader, and the followers sync before fetching on: both
    // are visible the moment acks=all is answered.
    let (code, _) = produce(&mut client, TOPIC, 0, batch(&[b"synced"]), -1);
    assert_eq!(code, 0);
    let expected = acknowledged.get_mut(&0).expect("round one");
    expected.extend([
        Bytes::from_static(b"written-only"),
        Bytes::from_static(b"synced"),
    ]);
    assert_eq!(read_values(&mut client, TOPIC, 0), *expected);
}

#[test]
fn a_follower_drops_a_fetch_its_leader_leaves_unanswered_for_the_socket_timeout() {
    // The frozen leader stays registered and its followers in sync (long session and
    // lag), so only replica.socket.timeout.ms ends a follower's wait for its answer.
    let (cluster, leaders, _) = started(&[
        "replica.socket.timeout.ms=1000",
        "broker.session.timeout.ms=60000",
        "replica.lag.time.max.ms=60000",
    ]);
    let leader = leaders[&0];
    let follower = a_follower(&cluster, leader);
    let logged_before = cluster.nodes[&follower].log_text().len();
    cluster.nodes[&leader].signal("STOP");
    let frozen_at = std::time::Instant::now();
    let leader_field = format!("leader={leader}");
    let failure = wait_for(|| {
        let text = cluster.nodes[&follower].log_text();
        text[logged_before..]
            .lines()
            .find(|line| line.contains("replica fetch failed") && line.contains(&leader_field))
            .map(str::to_string)
    });
    let waited = frozen_at.elapsed();
    cluster.nodes[&leader].signal("CONT");
    assert!(
        waited < std::time::Duration::from_secs(10),
        "the follower gave up after {waited:?}: {failure}"
    );
    wait_isr(&cluster, &[1, 2, 3]);
}

#[test]
fn a_new_topics_first_acks_all_writes_wait_for_no_fetch_already_waiting() {
    // Every follower's fetch waits at its leader for up to 20 s when there is nothing new,
    // and a partition that failed rests the default backoff (1 s) before it is fetched again.
    let wait = Duration::from_secs(20);
    let (cluster, _, _) = started(&[
        "replica.fetch.wait.max.ms=20000",
        "replica.socket.timeout.ms=30000",
        "replica.fetch.backoff.ms=1000",
    ]);
    // The first topic is replicated: the fetches of every follower now wait at its leaders.
    std::thread::sleep(Duration::from_millis(500));
    let controller = cluster.controller();
    let started = Instant::now();
    assert_eq!(create_named(&mut cluster.client(controller), "fresh"), 0);
    let leaders: BTreeMap<i32, i32> = wait_for(|| {
        let answer = common::metadata(&mut cluster.client(controller), &["fresh"]);
        let partitions = &answer.topics.first()?.partitions;
        let leaders: BTreeMap<i32, i32> = partitions
            .iter()
            .filter(|p| p.leader_id.0 >= 0)
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect();
        (leaders.len() == PARTITIONS as usize).then_some(leaders)
    });
    for (&partition, &leader) in &leaders {
        let mut client = cluster.client(leader);
        let code = produce_to_leader(&mut client, "fresh", partition, "first", -1);
        assert_eq!(code, 0, "acks=all on partition {partition}");
    }
    let took = started.elapsed();
    assert!(
        took < wait / 2,
        "the first acks=all writes took {took:?}: they waited for fetches that did not name the \
         new partitions"
    );
}
