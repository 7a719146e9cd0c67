use super::*;

const LIMITS: GroupLimits = GroupLimits {
    members_max: 10,
    initial_rebalance_delay: Duration::ZERO,
};

fn request(member_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(30),
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from_static(b"m")))
            .collect(),
        require_known_member_id: true,
        supports_skip_assignment: false,
    }
}

fn static_request(member_id: &str, instance: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        instance_id: Some(instance.to_string()),
        ..request(member_id, protocols)
    }
}

fn answered(joined: Joined) -> JoinOutcome {
    match joined {
        Joined::Now(outcome) => outcome,
        Joined::Waiting | Joined::Persist(_) => panic!("expected an immediate answer"),
    }
}

const P0: Bytes = Bytes::from_static(b"p0");
const P1: Bytes = Bytes::from_static(b"p1");

/// Joins a new dynamic member the v4+ way: ask for an id, then join with it.
fn join_new(group: &mut Group, now: Instant) -> (String, flume::Receiver<JoinOutcome>) {
    let (tx, _rx) = flume::bounded(1);
    let required = answered(group.join(request("", &["range"]), tx, LIMITS, now));
    assert_eq!(required.error_code, code(ResponseError::MemberIdRequired));
    let (tx, rx) = flume::bounded(1);
    assert!(matches!(
        group.join(request(&required.member_id, &["range"]), tx, LIMITS, now),
        Joined::Waiting
    ));
    (required.member_id, rx)
}

#[test]
fn two_members_join_sync_and_become_stable() {
    let now = Instant::now();
    let mut group = Group::new("g");
    let (first, first_rx) = join_new(&mut group, now);
    let first_join = first_rx
        .try_recv()
        .expect("a lone member completes the join at once");
    assert_eq!(
        (first_join.generation, first_join.leader.as_str()),
        (1, first.as_str())
    );
    // A second member triggers a rebalance; it completes when the first rejoins.
    let (second, second_rx) = join_new(&mut group, now);
    assert!(second_rx.try_recv().is_err(), "waits for the first member");
    assert_eq!(group.state, GroupState::PreparingRebalance);
    assert_eq!(
        group.heartbeat(&first, None, 1, now),
        code(ResponseError::RebalanceInProgress)
    );
    let (tx, first_rx) = flume::bounded(1);
    assert!(matches!(
        group.join(request(&first, &["range"]), tx, LIMITS, now),
        Joined::Waiting
    ));
    let leader_view = first_rx.try_recv().expect("join completed");
    let follower_view = second_rx.try_recv().expect("join completed");
    assert_eq!(leader_view.generation, 2);
    assert_eq!(leader_view.members.len(), 2, "the leader sees every member");
    assert!(follower_view.members.is_empty());
    // The follower's SyncGroup waits for the leader's.
    let (tx, follower_sync) = flume::bounded(1);
    assert_eq!(group.sync(&second, None, 2, vec![], tx, now), Ok(false));
    let (tx, leader_sync) = flume::bounded(1);
    let assignments = vec![
        (first.clone(), Bytes::from_static(b"p0")),
        (second.clone(), Bytes::from_static(b"p1")),
    ];
    assert_eq!(group.sync(&first, None, 2, assignments, tx, now), Ok(true));
    group.complete_sync(None);
    assert_eq!(
        leader_sync.try_recv().expect("answered").assignment,
        Bytes::from_static(b"p0")
    );
    assert_eq!(
        follower_sync.try_recv().expect("answered").assignment,
        Bytes::from_static(b"p1")
    );
    assert_eq!(group.state, GroupState::Stable);
    assert_eq!(group.heartbeat(&second, None, 2, now), NONE);
    assert_eq!(
        group.heartbeat(&second, None, 1, now),
        code(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        group.heartbeat("stranger", None, 2, now),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn an_expired_member_is_removed_and_the_rest_rebalance() {
    let now = Instant::now();
    let mut group = Group::new("g");
    let (first, _) = join_new(&mut group, now);
    let (second, second_rx) = join_new(&mut group, now);
    let (tx, _first_rx) = flume::bounded(1);
    assert!(matches!(
        group.join(request(&first, &["range"]), tx, LIMITS, now),
        Joined::Waiting
    ));
    second_rx.try_recv().expect("generation 2");
    // Only the second member keeps heartbeating; the first expires.
    let later = now + Duration::from_secs(8);
    assert_eq!(group.heartbeat(&second, None, 2, later), NONE);
    let after = now + Duration::from_secs(11);
    group.expire(LIMITS, after);
    assert!(!group.members.contains_key(&first));
    assert_eq!(group.state, GroupState::PreparingRebalance);
    let (tx, rx) = flume::bounded(1);
    assert!(matches!(
        group.join(request(&second, &["range"]), tx, LIMITS, after),
        Joined::Waiting
    ));
    let outcome = rx.try_recv().expect("completes with the survivor alone");
    assert_eq!((outcome.generation, outcome.leader), (3, second));
}

#[test]
fn static_members_are_fenced_and_keep_their_place() {
    let now = Instant::now();
    let mut group = Group::new("g");
    let mut join_static = || {
        let (tx, rx) = flume::bounded(1);
        let mut req = request("", &["range"]);
        req.instance_id = Some("instance-1".into());
        let _ = group.join(req, tx, LIMITS, now);
        rx.try_recv().expect("answered")
    };
    let first = join_static();
    assert_eq!(first.error_code, NONE);
    let second = join_static();
    assert_ne!(
        first.member_id, second.member_id,
        "a restart gets a new member id"
    );
    let fenced = group.heartbeat(&first.member_id, Some("instance-1"), group.generation, now);
    assert_eq!(fenced, code(ResponseError::FencedInstanceId));
    assert_eq!(group.members.len(), 1);
}

/// Two static members through the join of generation 2, before any SyncGroup:
/// "instance-1" (returned first) leads, "instance-2" follows.
fn completing_static_pair(protocols: &[&str], now: Instant) -> (Group, String, String) {
    let mut group = Group::new("g");
    let join = |group: &mut Group, request: JoinRequest| {
        let (tx, rx) = flume::bounded(1);
        assert!(matches!(
            group.join(request, tx, LIMITS, now),
            Joined::Waiting
        ));
        rx
    };
    let leader = join(&mut group, static_request("", "instance-1", protocols))
        .try_recv()
        .expect("a lone member completes the join at once")
        .member_id;
    let follower_rx = join(&mut group, static_request("", "instance-2", protocols));
    let leader_rx = join(&mut group, static_request(&leader, "instance-1", protocols));
    assert_eq!(leader_rx.try_recv().expect("generation 2").leader, leader);
    let follower = follower_rx.try_recv().expect("generation 2").member_id;
    assert_eq!(
        (group.state, group.generation),
        (GroupState::CompletingRebalance, 2)
    );
    (group, leader, follower)
}

/// [`completing_static_pair`] after the leader's SyncGroup: Stable, the leader owns
/// P0 and the follower P1.
fn stable_static_pair(protocols: &[&str], now: Instant) -> (Group, String, String) {
    let (mut group, leader, follower) = completing_static_pair(protocols, now);
    let (tx, _) = flume::bounded(1);
    let assignments = vec![(leader.clone(), P0), (follower.clone(), P1)];
    let synced = group.sync(&leader, Some("instance-1"), 2, assignments, tx, now);
    assert_eq!(synced, Ok(true));
    group.complete_sync(None);
    assert_eq!(group.state, GroupState::Stable);
    (group, leader, follower)
}

/// Rejoins `instance` with an empty member id, as a restarted consumer does, and
/// expects the group to ask for the fresh member id to be persisted.
fn restart_static(
    group: &mut Group,
    request: JoinRequest,
    now: Instant,
) -> (StaticRejoin, flume::Receiver<JoinOutcome>) {
    let (tx, rx) = flume::bounded(1);
    let Joined::Persist(rejoin) = group.join(request, tx, LIMITS, now) else {
        panic!("a Stable group persists a static rejoin before answering it");
    };
    assert!(
        rx.try_recv().is_err(),
        "no answer before the group is persisted"
    );
    (rejoin, rx)
}

#[test]
fn a_restarted_static_member_takes_its_place_without_a_rebalance() {
    let now = Instant::now();
    let (mut group, leader, follower) = stable_static_pair(&["range"], now);
    // The restarted consumer owns nothing yet, so its subscription metadata differs.
    let mut restarted = static_request("", "instance-2", &["range"]);
    restarted.protocols[0].1 = Bytes::from_static(b"m, owning nothing");
    let (rejoin, rx) = restart_static(&mut group, restarted, now);
    assert_eq!(group.state, GroupState::Stable);
    assert_eq!(
        group.heartbeat(&leader, Some("instance-1"), 2, now),
        NONE,
        "the other member is not asked to rejoin"
    );
    group.complete_static_rejoin(rejoin, None);
    let answer = rx.try_recv().expect("answered once persisted");
    assert_eq!(answer.error_code, NONE);
    assert_eq!(
        (answer.generation, answer.leader.as_str()),
        (2, leader.as_str())
    );
    assert_eq!(answer.protocol.as_deref(), Some("range"));
    assert!(answer.member_id.starts_with("instance-2-") && answer.member_id != follower);
    assert!(answer.members.is_empty() && !answer.skip_assignment);
    assert_eq!((group.state, group.generation), (GroupState::Stable, 2));

    let (tx, _) = flume::bounded(1);
    let synced = group.sync(&answer.member_id, Some("instance-2"), 2, vec![], tx, now);
    assert_eq!(
        synced.map_err(|outcome| (outcome.error_code, outcome.assignment)),
        Err((NONE, P1)),
        "SyncGroup hands back the assignment at once"
    );
    let new_id = answer.member_id.as_str();
    assert_eq!(group.heartbeat(new_id, Some("instance-2"), 2, now), NONE);
    assert_eq!(group.heartbeat(&leader, Some("instance-1"), 2, now), NONE);

    // Whatever the old member id still sends is fenced.
    let fenced = code(ResponseError::FencedInstanceId);
    assert_eq!(
        group.heartbeat(&follower, Some("instance-2"), 2, now),
        fenced
    );
    let (tx, _) = flume::bounded(1);
    let synced = group.sync(&follower, Some("instance-2"), 2, vec![], tx, now);
    assert_eq!(synced.map_err(|outcome| outcome.error_code), Err(fenced));
    // OffsetCommit asks the same check.
    assert!(matches!(
        group.check_member(&follower, Some("instance-2")),
        Err(ResponseError::FencedInstanceId)
    ));
    assert_eq!(
        group.leave(&follower, Some("instance-2"), LIMITS, now),
        fenced
    );
    let (tx, _) = flume::bounded(1);
    let join = answered(group.join(
        static_request(&follower, "instance-2", &["range"]),
        tx,
        LIMITS,
        now,
    ));
    assert_eq!(join.error_code, fenced);
    assert_eq!((group.state, group.members.len()), (GroupState::Stable, 2));
}

#[test]
fn a_restarted_static_leader_is_told_to_skip_its_assignment() {
    let now = Instant::now();
    let (mut group, leader, follower) = stable_static_pair(&["range"], now);
    let mut restarted = static_request("", "instance-1", &["range"]);
    restarted.supports_skip_assignment = true;
    let (rejoin, rx) = restart_static(&mut group, restarted, now);
    group.complete_static_rejoin(rejoin, None);
    let answer = rx.try_recv().expect("answered");
    assert_eq!(answer.error_code, NONE);
    assert_ne!(answer.member_id, leader);
    assert_eq!(answer.leader, answer.member_id, "it still leads");
    assert!(answer.skip_assignment);
    let mut ids: Vec<&str> = answer.members.iter().map(|(id, ..)| id.as_str()).collect();
    ids.sort_unstable();
    let mut expected = vec![answer.member_id.as_str(), follower.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected, "the leader sees every member");
    assert_eq!((group.state, group.generation), (GroupState::Stable, 2));
    assert_eq!(group.leader.as_deref(), Some(answer.member_id.as_str()));
}

#[test]
fn a_restarted_static_leader_before_v9_syncs_as_a_follower() {
    let now = Instant::now();
    let (mut group, leader, follower) = stable_static_pair(&["range"], now);
    let restarted = static_request("", "instance-1", &["range"]);
    let (rejoin, rx) = restart_static(&mut group, restarted, now);
    group.complete_static_rejoin(rejoin, None);
    let answer = rx.try_recv().expect("answered");
    assert_eq!(answer.error_code, NONE);
    assert_eq!(
        answer.leader, leader,
        "told the old leader id, which is not its own"
    );
    assert!(answer.members.is_empty() && !answer.skip_assignment);
    // Even a client that assigns anyway gets the group's assignment back.
    let (tx, _) = flume::bounded(1);
    let reassigned = vec![
        (answer.member_id.clone(), Bytes::from_static(b"everything")),
        (follower.clone(), Bytes::new()),
    ];
    let synced = group.sync(
        &answer.member_id,
        Some("instance-1"),
        2,
        reassigned,
        tx,
        now,
    );
    assert_eq!(
        synced.map_err(|outcome| (outcome.error_code, outcome.assignment)),
        Err((NONE, P0))
    );
    assert_eq!(group.members[&follower].assignment, P1);
    assert_eq!((group.state, group.generation), (GroupState::Stable, 2));
}

#[test]
fn a_static_rejoin_that_changes_the_selected_protocol_rebalances() {
    let now = Instant::now();
    let (mut group, leader, _) = stable_static_pair(&["range", "roundrobin"], now);
    assert_eq!(group.protocol.as_deref(), Some("range"));
    // Only roundrobin is left that every member supports.
    let (tx, restarted_rx) = flume::bounded(1);
    let restarted = static_request("", "instance-2", &["roundrobin"]);
    assert!(matches!(
        group.join(restarted, tx, LIMITS, now),
        Joined::Waiting
    ));
    assert_eq!(group.state, GroupState::PreparingRebalance);
    assert_eq!(
        group.heartbeat(&leader, Some("instance-1"), 2, now),
        code(ResponseError::RebalanceInProgress)
    );
    let (tx, _) = flume::bounded(1);
    let rejoined = static_request(&leader, "instance-1", &["range", "roundrobin"]);
    assert!(matches!(
        group.join(rejoined, tx, LIMITS, now),
        Joined::Waiting
    ));
    let answer = restarted_rx.try_recv().expect("generation 3");
    assert_eq!(
        (answer.generation, answer.protocol.as_deref()),
        (3, Some("roundrobin"))
    );
}

#[test]
fn a_static_rejoin_while_completing_a_rebalance_rebalances() {
    let now = Instant::now();
    let (mut group, leader, follower) = completing_static_pair(&["range"], now);
    let (tx, old_sync) = flume::bounded(1);
    let waiting = group.sync(&follower, Some("instance-2"), 2, vec![], tx, now);
    assert_eq!(
        waiting,
        Ok(false),
        "the follower waits for the leader's SyncGroup"
    );
    // The leader is assigning partitions to the old member id: the group rebalances so
    // that the new one gets some.
    let (tx, restarted_rx) = flume::bounded(1);
    let restarted = static_request("", "instance-2", &["range"]);
    assert!(matches!(
        group.join(restarted, tx, LIMITS, now),
        Joined::Waiting
    ));
    assert_eq!(
        old_sync.try_recv().expect("answered").error_code,
        code(ResponseError::FencedInstanceId)
    );
    assert_eq!(group.state, GroupState::PreparingRebalance);
    let (tx, leader_rx) = flume::bounded(1);
    let rejoined = static_request(&leader, "instance-1", &["range"]);
    assert!(matches!(
        group.join(rejoined, tx, LIMITS, now),
        Joined::Waiting
    ));
    let restarted = restarted_rx.try_recv().expect("generation 3");
    let roster = leader_rx.try_recv().expect("generation 3").members;
    assert_eq!(restarted.generation, 3);
    assert!(roster.iter().any(|(id, ..)| *id == restarted.member_id));
    assert!(!roster.iter().any(|(id, ..)| *id == follower));
}

#[test]
fn a_static_rejoin_while_preparing_a_rebalance_waits_for_it() {
    let now = Instant::now();
    let (mut group, leader, follower) = stable_static_pair(&["range"], now);
    // The follower's new metadata starts a rebalance; the leader has not rejoined yet.
    let (tx, old_join) = flume::bounded(1);
    let mut changed = static_request(&follower, "instance-2", &["range"]);
    changed.protocols[0].1 = Bytes::from_static(b"other topics");
    assert!(matches!(
        group.join(changed, tx, LIMITS, now),
        Joined::Waiting
    ));
    assert_eq!(group.state, GroupState::PreparingRebalance);
    let (tx, restarted_rx) = flume::bounded(1);
    let restarted = static_request("", "instance-2", &["range"]);
    assert!(matches!(
        group.join(restarted, tx, LIMITS, now),
        Joined::Waiting
    ));
    assert_eq!(
        old_join.try_recv().expect("answered").error_code,
        code(ResponseError::FencedInstanceId)
    );
    assert!(restarted_rx.try_recv().is_err(), "waits for the leader");
    let (tx, _) = flume::bounded(1);
    let rejoined = static_request(&leader, "instance-1", &["range"]);
    assert!(matches!(
        group.join(rejoined, tx, LIMITS, now),
        Joined::Waiting
    ));
    let answer = restarted_rx.try_recv().expect("generation 3");
    assert_eq!((answer.error_code, answer.generation), (NONE, 3));
    assert_ne!(answer.member_id, follower);
}

#[test]
fn a_static_rejoin_that_cannot_be_persisted_is_undone() {
    let now = Instant::now();
    let (mut group, _, follower) = stable_static_pair(&["range"], now);
    let mut restarted = static_request("", "instance-2", &["range"]);
    restarted.protocols[0].1 = Bytes::from_static(b"m, owning nothing");
    restarted.client_id = "restarted".into();
    let (rejoin, rx) = restart_static(&mut group, restarted, now);
    group.complete_static_rejoin(rejoin, Some(ResponseError::CoordinatorNotAvailable));
    let answer = rx.try_recv().expect("answered");
    assert_eq!(
        answer.error_code,
        code(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(
        answer.member_id, "",
        "the client retries as a restarted member"
    );
    // The group is as the log has it: the old member id holds the instance again.
    assert_eq!(group.heartbeat(&follower, Some("instance-2"), 2, now), NONE);
    let member = &group.members[&follower];
    assert_eq!(
        (
            member.client_id.as_str(),
            &member.protocols[0].1,
            &member.assignment
        ),
        ("client", &Bytes::from_static(b"m"), &P1)
    );
    assert_eq!((group.state, group.members.len()), (GroupState::Stable, 2));
}

#[test]
fn a_newer_takeover_during_the_write_answers_only_the_newer_member() {
    let now = Instant::now();
    let (mut group, _, _) = stable_static_pair(&["range"], now);
    let request = || static_request("", "instance-2", &["range"]);
    let (first, first_rx) = restart_static(&mut group, request(), now);
    let (second, second_rx) = restart_static(&mut group, request(), now);
    let fenced = first_rx
        .try_recv()
        .expect("the newer takeover fences the first");
    assert_eq!(fenced.error_code, code(ResponseError::FencedInstanceId));
    // The first write fails after the instance has moved on: nothing is undone.
    group.complete_static_rejoin(first, Some(ResponseError::CoordinatorNotAvailable));
    group.complete_static_rejoin(second, None);
    let answer = second_rx.try_recv().expect("answered");
    assert_eq!(answer.error_code, NONE);
    assert_eq!(
        group.heartbeat(&answer.member_id, Some("instance-2"), 2, now),
        NONE
    );
}

#[test]
fn inconsistent_protocols_and_group_size_are_refused() {
    let now = Instant::now();
    let mut group = Group::new("g");
    join_new(&mut group, now);
    let (tx, _) = flume::bounded(1);
    let refused = answered(group.join(request("", &["roundrobin"]), tx, LIMITS, now));
    assert_eq!(
        refused.error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );
    let small = GroupLimits {
        members_max: 1,
        ..LIMITS
    };
    let (tx, _) = flume::bounded(1);
    let refused = answered(group.join(request("", &["range"]), tx, small, now));
    assert_eq!(refused.error_code, code(ResponseError::GroupMaxSizeReached));
}

#[test]
fn leaving_the_last_member_empties_the_group() {
    let now = Instant::now();
    let mut group = Group::new("g");
    let (member, _) = join_new(&mut group, now);
    assert_eq!(group.leave(&member, None, LIMITS, now), NONE);
    assert_eq!(group.state, GroupState::Empty);
    assert_eq!(
        group.leave(&member, None, LIMITS, now),
        code(ResponseError::UnknownMemberId)
    );
}
