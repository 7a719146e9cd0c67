//! The group coordinator speaks Kafka's error codes and keeps its state across crashes.
//!
//! Method: a real node, driven with hand-built requests (the `kafka-protocol` codecs) so
//! that every refusal can be provoked on purpose: unknown members, stale generations,
//! fenced static members, rebalances in progress, commits for unknown topics, bad session
//! timeouts and inconsistent protocols. A flood of joins must leave the coordinator
//! serving a normal member, refused joins of group ids never used leave no group, and a
//! group left with no committed offset is dropped at the next cleanup. Last, committed offsets and the group's generation must
//! survive `kill -9` and a restart, because commits are fdatasync'ed before the answer.

mod common;

use bytes::Bytes;
use common::{Client, Node};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn node() -> Node {
    Node::start(&[
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=4",
    ])
}

fn create_topic(client: &mut Client, name: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(text(name)))
        .with_num_partitions(partitions)
        .with_replication_factor(1)]);
    let ResponseKind::CreateTopics(answer) = client.call(7, RequestKind::CreateTopics(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.topics[0].error_code, 0);
}

fn find_coordinator(client: &mut Client, group: &str) {
    let request = FindCoordinatorRequest::default().with_key(text(group));
    let ResponseKind::FindCoordinator(answer) =
        client.call(3, RequestKind::FindCoordinator(request))
    else {
        unreachable!()
    };
    assert_eq!(
        answer.error_code, 0,
        "FindCoordinator creates __consumer_offsets"
    );
}

fn join(
    client: &mut Client,
    group: &str,
    member: &str,
    instance: Option<&str>,
    protocol: &str,
    session_timeout_ms: i32,
) -> JoinGroupResponse {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_session_timeout_ms(session_timeout_ms)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(text(member))
        .with_group_instance_id(instance.map(text))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(text(protocol))
            .with_metadata(Bytes::from_static(b"subscription"))]);
    let ResponseKind::JoinGroup(answer) = client.call(7, RequestKind::JoinGroup(request)) else {
        unreachable!()
    };
    answer
}

/// A dynamic member's two-step join (MEMBER_ID_REQUIRED, then join with the id).
fn join_member(client: &mut Client, group: &str) -> JoinGroupResponse {
    let first = join(client, group, "", None, "range", 10_000);
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let second = join(
        client,
        group,
        first.member_id.as_str(),
        None,
        "range",
        10_000,
    );
    assert_eq!(second.error_code, 0);
    second
}

fn sync(client: &mut Client, group: &str, member: &str, generation: i32) -> SyncGroupResponse {
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_generation_id(generation)
        .with_member_id(text(member))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(text(member))
            .with_assignment(Bytes::from_static(b"all-partitions"))]);
    let ResponseKind::SyncGroup(answer) = client.call(5, RequestKind::SyncGroup(request)) else {
        unreachable!()
    };
    answer
}

fn heartbeat(client: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_generation_id(generation)
        .with_member_id(text(member));
    let ResponseKind::Heartbeat(answer) = client.call(4, RequestKind::Heartbeat(request)) else {
        unreachable!()
    };
    answer.error_code
}

fn commit(
    client: &mut Client,
    group: &str,
    member: &str,
    generation: i32,
    topic: &str,
    offset: i64,
) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(text(member))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(text(topic)))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)
                .with_committed_metadata(Some(text("meta")))])]);
    let ResponseKind::OffsetCommit(answer) = client.call(8, RequestKind::OffsetCommit(request))
    else {
        unreachable!()
    };
    answer.topics[0].partitions[0].error_code
}

fn committed(client: &mut Client, group: &str, topic: &str) -> i64 {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(text(topic)))
            .with_partition_indexes(vec![0])]));
    let ResponseKind::OffsetFetch(answer) = client.call(7, RequestKind::OffsetFetch(request))
    else {
        unreachable!()
    };
    assert_eq!(answer.error_code, 0);
    answer.topics[0].partitions[0].committed_offset
}

#[test]
fn refusals_carry_kafkas_error_codes() {
    let node = node();
    let mut client = node.connect();
    create_topic(&mut client, "orders", 1);
    find_coordinator(&mut client, "g");

    let leader = join_member(&mut client, "g");
    let (member, generation) = (leader.member_id.to_string(), leader.generation_id);
    assert_eq!(leader.leader.as_str(), member, "a lone member leads");
    assert_eq!(sync(&mut client, "g", &member, generation).error_code, 0);
    assert_eq!(heartbeat(&mut client, "g", &member, generation), 0);

    assert_eq!(
        heartbeat(&mut client, "g", "stranger", generation),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        heartbeat(&mut client, "g", &member, generation - 1),
        ILLEGAL_GENERATION
    );
    assert_eq!(
        sync(&mut client, "g", &member, generation + 5).error_code,
        ILLEGAL_GENERATION
    );
    assert_eq!(
        commit(&mut client, "g", &member, generation - 1, "orders", 1),
        ILLEGAL_GENERATION
    );
    assert_eq!(
        commit(&mut client, "g", "stranger", generation, "orders", 1),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        commit(&mut client, "g", &member, generation, "no-such-topic", 1),
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        commit(&mut client, "g", &member, generation, "orders", 7),
        0
    );
    assert_eq!(committed(&mut client, "g", "orders"), 7);

    let bad_timeout = join(&mut client, "g", "", None, "range", 10);
    assert_eq!(bad_timeout.error_code, INVALID_SESSION_TIMEOUT);
    let other_protocol = join(&mut client, "g", "", None, "roundrobin", 10_000);
    assert_eq!(other_protocol.error_code, INCONSISTENT_GROUP_PROTOCOL);

    // A second member starts a rebalance: the first one's heartbeat says so.
    let mut second = node.connect();
    let required = join(&mut second, "g", "", None, "range", 10_000);
    assert_eq!(required.error_code, MEMBER_ID_REQUIRED);
    let second_id = required.member_id.to_string();
    let port = node.port;
    let joiner = std::thread::spawn(move || {
        let mut second = Client::connect(port);
        join(&mut second, "g", &second_id, None, "range", 10_000)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let code = heartbeat(&mut client, "g", &member, generation);
        if code == REBALANCE_IN_PROGRESS {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rebalance seen (last code {code})"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let rejoined = join(&mut client, "g", &member, None, "range", 10_000);
    assert_eq!(rejoined.error_code, 0);
    assert_eq!(rejoined.generation_id, generation + 1);
    assert_eq!(rejoined.members.len(), 2, "the leader sees both members");
    let joined = joiner.join().expect("second member");
    assert_eq!(
        (joined.error_code, joined.generation_id),
        (0, generation + 1)
    );
}

#[test]
fn static_members_fence_their_predecessors() {
    let node = node();
    let mut client = node.connect();
    find_coordinator(&mut client, "static");
    let first = join(
        &mut client,
        "static",
        "",
        Some("instance-a"),
        "range",
        10_000,
    );
    assert_eq!(
        first.error_code, 0,
        "static members need no MEMBER_ID_REQUIRED round"
    );
    let restarted = join(
        &mut client,
        "static",
        "",
        Some("instance-a"),
        "range",
        10_000,
    );
    assert_eq!(restarted.error_code, 0);
    assert_ne!(restarted.member_id, first.member_id);
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(text("static")))
        .with_generation_id(restarted.generation_id)
        .with_member_id(first.member_id.clone())
        .with_group_instance_id(Some(text("instance-a")));
    let ResponseKind::Heartbeat(answer) = client.call(4, RequestKind::Heartbeat(request)) else {
        unreachable!()
    };
    assert_eq!(answer.error_code, FENCED_INSTANCE_ID);
}

/// The group ids ListGroups (v4, every state) names.
fn listed_groups(client: &mut Client) -> Vec<String> {
    let request = ListGroupsRequest::default();
    let ResponseKind::ListGroups(answer) = client.call(4, RequestKind::ListGroups(request)) else {
        unreachable!()
    };
    assert_eq!(answer.error_code, 0);
    answer
        .groups
        .iter()
        .map(|g| g.group_id.as_str().to_string())
        .collect()
}

#[test]
fn refused_joins_of_new_groups_leave_no_group_behind() {
    let node = node();
    let mut client = node.connect();
    find_coordinator(&mut client, "kept");
    let kept = join_member(&mut client, "kept");
    assert_eq!(kept.error_code, 0);
    // A member id the coordinator never handed out, for group ids it never saw.
    for i in 0..500 {
        let answer = join(
            &mut client,
            &format!("g{i}"),
            "stranger",
            None,
            "range",
            10_000,
        );
        assert_eq!(answer.error_code, UNKNOWN_MEMBER_ID);
    }
    assert_eq!(listed_groups(&mut client), vec!["kept".to_string()]);
}

/// LeaveGroup (v1) of `member`.
fn leave(client: &mut Client, group: &str, member: &str) -> i16 {
    let request = LeaveGroupRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_member_id(text(member));
    let ResponseKind::LeaveGroup(answer) = client.call(1, RequestKind::LeaveGroup(request)) else {
        unreachable!()
    };
    answer.error_code
}

#[test]
fn a_group_left_without_offsets_is_dropped_and_one_with_offsets_kept() {
    let node = Node::start(&[
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=4",
        "offsets.retention.check.interval.ms=500",
    ]);
    let mut client = node.connect();
    create_topic(&mut client, "t", 1);
    find_coordinator(&mut client, "gone");
    find_coordinator(&mut client, "kept");
    for group in ["gone", "kept"] {
        let member = join_member(&mut client, group);
        let id = member.member_id.to_string();
        assert_eq!(
            sync(&mut client, group, &id, member.generation_id).error_code,
            0
        );
        if group == "kept" {
            assert_eq!(
                commit(&mut client, group, &id, member.generation_id, "t", 5),
                0
            );
        }
        assert_eq!(leave(&mut client, group, &id), 0);
    }
    // Bounded: a few check intervals.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while listed_groups(&mut client).contains(&"gone".to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the unused group stays"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(listed_groups(&mut client), vec!["kept".to_string()]);
    assert_eq!(committed(&mut client, "kept", "t"), 5);
}

#[test]
fn a_join_flood_leaves_the_coordinator_serving() {
    let node = node();
    let mut flood = node.connect();
    find_coordinator(&mut flood, "flooded");
    for _ in 0..2_000 {
        let answer = join(&mut flood, "flooded", "", None, "range", 10_000);
        assert_eq!(answer.error_code, MEMBER_ID_REQUIRED);
    }
    let mut client = node.connect();
    create_topic(&mut client, "t", 1);
    let member = join_member(&mut client, "flooded");
    let id = member.member_id.to_string();
    assert_eq!(
        sync(&mut client, "flooded", &id, member.generation_id).error_code,
        0
    );
    assert_eq!(
        commit(&mut client, "flooded", &id, member.generation_id, "t", 3),
        0
    );
    assert_eq!(committed(&mut client, "flooded", "t"), 3);
}

#[test]
fn commits_and_groups_survive_kill_9() {
    let node = node();
    let mut client = node.connect();
    create_topic(&mut client, "events", 1);
    find_coordinator(&mut client, "durable");
    let member = join_member(&mut client, "durable");
    let id = member.member_id.to_string();
    assert_eq!(
        sync(&mut client, "durable", &id, member.generation_id).error_code,
        0
    );
    assert_eq!(
        commit(
            &mut client,
            "durable",
            &id,
            member.generation_id,
            "events",
            41
        ),
        0
    );
    // A standalone (assign()) consumer's commit to another group, generation -1.
    assert_eq!(commit(&mut client, "standalone", "", -1, "events", 9), 0);
    drop(client);
    let node = node.kill().restart(&[
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=4",
    ]);
    let mut client = node.connect();
    assert_eq!(committed(&mut client, "durable", "events"), 41);
    assert_eq!(committed(&mut client, "standalone", "events"), 9);
    // The member was restored with its generation: it carries on without rejoining.
    assert_eq!(
        heartbeat(&mut client, "durable", &id, member.generation_id),
        0
    );
}

#[test]
fn offsets_of_empty_groups_expire_after_the_retention() {
    // offsets.retention.minutes has minute granularity, as in Kafka: this test waits ~1 min.
    let node = Node::start(&[
        "offsets.retention.minutes=1",
        "offsets.topic.num.partitions=4",
    ]);
    let mut client = node.connect();
    create_topic(&mut client, "aging", 1);
    find_coordinator(&mut client, "idle-group");
    assert_eq!(commit(&mut client, "idle-group", "", -1, "aging", 5), 0);
    // A group with a live member keeps its offsets however old they are.
    let member = join_member(&mut client, "busy-group");
    let id = member.member_id.to_string();
    assert_eq!(
        sync(&mut client, "busy-group", &id, member.generation_id).error_code,
        0
    );
    assert_eq!(
        commit(
            &mut client,
            "busy-group",
            &id,
            member.generation_id,
            "aging",
            6
        ),
        0
    );
    let started = std::time::Instant::now();
    while committed(&mut client, "idle-group", "aging") != -1 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "offsets never expired"
        );
        assert_eq!(
            heartbeat(&mut client, "busy-group", &id, member.generation_id),
            0
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(55),
        "expired too early"
    );
    assert_eq!(committed(&mut client, "busy-group", "aging"), 6);
}
