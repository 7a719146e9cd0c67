"""Consumer groups with real clients: confluent-kafka members share partitions,
idle when outnumbered, wake when partitions are added, read independently per
group, move on when a member dies, replay after an offset reset, find their
commits again after the broker restarts (cleanly or by kill -9), and a restarted
static member (group.instance.id) takes its partitions back without a rebalance.

Method: a 2-shard broker with group.initial.rebalance.delay.ms lowered so
rebalances settle fast; consumers run in this process and are polled in turn
(every wait has a deadline), except in the member-death test, where members are
separate processes so one can be SIGKILLed. Offsets are checked against the
producer's delivery reports, so every record is accounted for by
(partition, offset).
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import NewPartitions

from clients import admin, create_topic, produce_all, producer, unique_topic, wait_for

HERE = Path(__file__).resolve().parent
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "300"}
SESSION_TIMEOUT_S = 6


def member(bootstrap, group, **overrides):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_TIMEOUT_S * 1000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    conf.update(overrides)
    return Consumer(conf)


def assignments(consumers):
    return [sorted(tp.partition for tp in c.assignment()) for c in consumers]


def settle(bootstrap, group, consumers, partitions, timeout=60):
    """Polls every consumer until the broker reports the group Stable with all of
    them as members, each consumer holds exactly what the broker says it was
    assigned, and the assignments are disjoint and cover `partitions` partitions;
    returns the assignments.

    The broker's view matters with cooperative-sticky: between its two rounds the
    group is Stable, the member giving a partition up still holds it and the new
    member holds nothing yet, which looks settled from the consumers alone."""
    client = admin(bootstrap)

    def settled():
        for c in consumers:
            msg = c.poll(0.05)
            assert msg is None or not msg.error(), msg.error()
        described = client.describe_consumer_groups([group])[group].result(10)
        if described.state != ConsumerGroupState.STABLE or len(described.members) != len(consumers):
            return None
        assigned = {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
                    for m in described.members}
        current = assignments(consumers)
        if current != [assigned.get(c.memberid()) for c in consumers]:
            return None
        flat = [p for a in current for p in a]
        return current if sorted(flat) == list(range(partitions)) else None
    return wait_for(settled, timeout, f"{len(consumers)} members to split {partitions} partitions",
                    interval=0)


def read(consumers, expected, timeout=60, commit=True):
    """Polls the consumers until `expected` records were read in total, then
    commits each consumer's position; returns one list of (partition, offset)
    per consumer."""
    got = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while sum(map(len, got)) < expected:
        assert time.monotonic() < deadline, f"read {sum(map(len, got))} of {expected} records"
        for i, c in enumerate(consumers):
            for msg in c.consume(num_messages=1000, timeout=0.05):
                assert not msg.error(), msg.error()
                got[i].append((msg.partition(), msg.offset()))
    if commit:
        for c, records in zip(consumers, got):
            if records:  # a consumer that read nothing has no position to commit
                c.commit(asynchronous=False)
    return got


def produce(bootstrap, topic, count, partitions=None):
    prod = producer(bootstrap)
    messages = [{"topic": topic, "key": f"k{i}".encode(), "value": f"v{i}".encode(),
                 **({"partition": i % partitions} if partitions else {})} for i in range(count)]
    return {(r.partition, r.offset) for r in produce_all(prod, messages)}


def close_all(consumers):
    for c in consumers:
        c.close()


@pytest.mark.parametrize("broker", [{"settings": GROUP_SETTINGS}], indirect=True)
@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_members_split_partitions_and_read_everything_once(broker, strategy):
    topic, group = unique_topic("split"), unique_topic("g")
    create_topic(broker.bootstrap, topic, 3)
    consumers = [member(broker.bootstrap, group, **{"partition.assignment.strategy": strategy})
                 for _ in range(2)]
    for c in consumers:
        c.subscribe([topic])
    owned = settle(broker.bootstrap, group, consumers, 3)
    assert all(owned), f"both members own partitions: {owned}"
    produced = produce(broker.bootstrap, topic, 3000)
    got = read(consumers, len(produced))
    for records, partitions in zip(got, owned):
        assert {p for p, _ in records} <= set(partitions), "a member read only its partitions"
    union = [r for records in got for r in records]
    assert len(union) == len(set(union)), "no record was read twice"
    assert set(union) == produced, "together the members read every record"
    close_all(consumers)


@pytest.mark.parametrize("broker", [{"settings": GROUP_SETTINGS}], indirect=True)
def test_extra_members_idle_until_partitions_are_added(broker):
    topic, group = unique_topic("idle"), unique_topic("g")
    create_topic(broker.bootstrap, topic, 2)
    consumers = [member(broker.bootstrap, group) for _ in range(5)]
    for c in consumers:
        c.subscribe([topic])
    owned = settle(broker.bootstrap, group, consumers, 2)
    assert sorted(len(a) for a in owned) == [0, 0, 0, 1, 1], f"2 busy, 3 idle: {owned}"
    produced = produce(broker.bootstrap, topic, 200, partitions=2)
    got = read(consumers, len(produced))
    assert sum(1 for records in got if records) == 2, "exactly two members received records"

    client = admin(broker.bootstrap)  # kept alive until its future resolves
    client.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    owned = settle(broker.bootstrap, group, consumers, 5)
    assert all(len(a) == 1 for a in owned), f"after growing to 5, each member owns one: {owned}"
    produced = produce(broker.bootstrap, topic, 500, partitions=5)
    got = read(consumers, len(produced))
    assert all(records for records in got), "all five members received records"
    close_all(consumers)


@pytest.mark.parametrize("broker", [{"settings": GROUP_SETTINGS}], indirect=True)
def test_two_groups_each_read_the_whole_topic(broker):
    topic = unique_topic("shared")
    create_topic(broker.bootstrap, topic, 3)
    produced = produce(broker.bootstrap, topic, 1000)
    for group in (unique_topic("a"), unique_topic("b")):
        c = member(broker.bootstrap, group)
        c.subscribe([topic])
        got = read([c], len(produced))[0]
        assert set(got) == produced, f"group {group} read the whole topic"
        close_all([c])


@pytest.mark.parametrize("broker", [{"settings": GROUP_SETTINGS}], indirect=True)
def test_reset_offsets_replays_history(broker):
    topic, group = unique_topic("replay"), unique_topic("g")
    create_topic(broker.bootstrap, topic, 3)
    produced = produce(broker.bootstrap, topic, 600)
    c = member(broker.bootstrap, group)
    c.subscribe([topic])
    read([c], len(produced))  # commits what it read
    close_all([c])

    cli = [str(broker.binary), "group", "reset-offsets", group, "--topic", topic,
           "--to-earliest", "--execute", "--bootstrap-server", broker.bootstrap]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"reset-offsets failed: {done.stdout}\n{done.stderr}"

    c = member(broker.bootstrap, group)
    c.subscribe([topic])
    got = read([c], len(produced))[0]
    assert set(got) == produced, "after the reset the group re-reads its full history"
    close_all([c])


@pytest.mark.parametrize("broker", [{"settings": GROUP_SETTINGS}], indirect=True)
def test_a_killed_member_hands_its_partitions_to_the_survivor(broker, tmp_path):
    topic, group = unique_topic("failover"), unique_topic("g")
    create_topic(broker.bootstrap, topic, 4)
    produced = produce(broker.bootstrap, topic, 400, partitions=4)
    logs = [tmp_path / f"member{i}.log" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, str(HERE / "group_member.py"), broker.bootstrap,
                               group, topic, str(log)]) for log in logs]
    try:
        def split():
            last = [_last_assignment(log) for log in logs]
            return last if all(last) and sorted(sum(last, [])) == [0, 1, 2, 3] else None
        wait_for(split, 60, "the two members to split 4 partitions")
        wait_for(lambda: len(_records(logs)) >= len(produced), 60, "the first batch to be read")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        killed_at = time.monotonic()
        more = produce(broker.bootstrap, topic, 400, partitions=4)
        wait_for(lambda: _last_assignment(logs[1]) == [0, 1, 2, 3], SESSION_TIMEOUT_S + 20,
                 "the survivor to own every partition")
        moved_after = time.monotonic() - killed_at
        assert moved_after < SESSION_TIMEOUT_S + 10, f"partitions moved after {moved_after:.1f}s"
        everything = produced | more
        wait_for(lambda: everything <= _records(logs), 60, "every record to be processed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()


def _last_assignment(log):
    lines = [line for line in _lines(log) if line.startswith("assigned")]
    if not lines:
        return None
    rest = lines[-1].split(" ", 1)[1] if " " in lines[-1] else ""
    return sorted(int(p) for p in rest.split(",") if p)


def _records(logs):
    out = set()
    for log in logs:
        for line in _lines(log):
            if line and not line.startswith("assigned"):
                partition, offset = line.split()
                out.add((int(partition), int(offset)))
    return out


def _lines(log):
    try:
        return log.read_text().splitlines()
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill9"])
def test_commits_survive_a_broker_restart(broker_factory, crash):
    broker = broker_factory(settings=GROUP_SETTINGS)
    topic, group = unique_topic("durable"), unique_topic("g")
    create_topic(broker.bootstrap, topic, 3)
    produced = produce(broker.bootstrap, topic, 300)
    c = member(broker.bootstrap, group)
    c.subscribe([topic])
    read([c], len(produced), commit=False)
    c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in
                 c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)}
    assert sum(committed.values()) == len(produced)
    close_all([c])
    if crash:
        broker.crash_restart()
    else:
        broker.restart()
    c = member(broker.bootstrap, group)
    again = {tp.partition: tp.offset for tp in
             c.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)}
    assert again == committed, "committed offsets survive the restart"
    more = produce(broker.bootstrap, topic, 30)
    c.subscribe([topic])
    got = read([c], len(more))[0]
    assert set(got) == more, "the group resumes exactly after its commits"
    close_all([c])


class Events:
    """A consumer's on_assign / on_revoke callbacks, recorded in order as
    ("assign" | "revoke", [partition, ...])."""

    def __init__(self):
        self.seen = []

    def on_assign(self, _consumer, partitions):
        self.seen.append(("assign", sorted(tp.partition for tp in partitions)))

    def on_revoke(self, _consumer, partitions):
        self.seen.append(("revoke", sorted(tp.partition for tp in partitions)))


def static_member(bootstrap, group, topic, instance):
    """A subscribed member with its own group.instance.id and the eager range
    assignor, so that any rebalance shows as a revoke of everything it owns.
    Returns the consumer, its Events and the set of (partition, offset) it read."""
    events = Events()
    c = member(bootstrap, group, **{"group.instance.id": instance,
                                    "partition.assignment.strategy": "range"})
    c.subscribe([topic], on_assign=events.on_assign, on_revoke=events.on_revoke)
    return c, events, set()


# What a client reports while its broker restarts: lost connections, not errors.
BROKER_DOWN = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


def poll_members(members, seconds=None, until=None, broker_may_be_down=False, what=""):
    """Polls every (consumer, events, read) in turn, adding the records each
    reads to its `read`, for `seconds`, or until `until()` holds (then failing
    after 60 s)."""
    deadline = time.monotonic() + (seconds if seconds is not None else 60)
    while time.monotonic() < deadline:
        if until is not None and until():
            return
        for c, _, read in members:
            msg = c.poll(0.05)
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                read.add((msg.partition(), msg.offset()))
                continue
            assert broker_may_be_down and not error.fatal() and error.code() in BROKER_DOWN, \
                error
    assert until is None or until(), f"timed out after 60s waiting for {what}"


def members_by_instance(bootstrap, group):
    """DescribeGroups: the group's state and its members as {instance id: member id}."""
    client = admin(bootstrap)  # kept alive until its future resolves
    described = client.describe_consumer_groups([group])[group].result(10)
    return described.state, {m.group_instance_id: m.member_id for m in described.members}


def produce_to(bootstrap, topic, partitions, count, tag):
    messages = [{"topic": topic, "key": f"k{i}".encode(), "value": f"{tag}-{i}".encode(),
                 "partition": partitions[i % len(partitions)]} for i in range(count)]
    return {(r.partition, r.offset) for r in produce_all(producer(bootstrap), messages)}


@pytest.mark.parametrize("broker", [{"settings": GROUP_SETTINGS}], indirect=True)
@pytest.mark.parametrize("restarted", ["leader", "follower"])
def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(broker,
                                                                               restarted):
    topic, group = unique_topic("static"), unique_topic("g")
    create_topic(broker.bootstrap, topic, 4)
    instances = ["instance-first", "instance-second"]
    # The first member to join leads the group: it owns everything alone
    # before the second one arrives.
    first = static_member(broker.bootstrap, group, topic, instances[0])
    settle(broker.bootstrap, group, [first[0]], 4)
    second = static_member(broker.bootstrap, group, topic, instances[1])
    owned = settle(broker.bootstrap, group, [first[0], second[0]], 4)
    assert [len(a) for a in owned] == [2, 2], f"two partitions each: {owned}"

    gone_index = 0 if restarted == "leader" else 1
    gone, survivor = (first, second) if gone_index == 0 else (second, first)
    gone_owned, survivor_owned = owned[gone_index], owned[1 - gone_index]
    gone_instance, survivor_instance = instances[gone_index], instances[1 - gone_index]
    gone_member_id = gone[0].memberid()
    survivor_events = survivor[1]
    survivor_seen = len(survivor_events.seen)
    # A static member sends no LeaveGroup on close: the coordinator keeps its
    # place until its session (6 s) would run out.
    gone[0].close()
    closed_at = time.monotonic()
    back = static_member(broker.bootstrap, group, topic, gone_instance)
    assert time.monotonic() - closed_at < 1.0, "the same instance subscribes again within a second"
    members = [survivor, back]

    poll_members(members, until=lambda: back[0].assignment(),
                 what="an assignment for the restarted member")
    # Watch past the session timeout of the replaced member id: it must not
    # expire into a rebalance either.
    poll_members(members, seconds=SESSION_TIMEOUT_S + 2)
    assert survivor_events.seen[survivor_seen:] == [], \
        "the other member was neither revoked nor reassigned"
    assert sorted(tp.partition for tp in survivor[0].assignment()) == survivor_owned
    assert back[1].seen == [("assign", gone_owned)], \
        "the restarted member got exactly its previous partitions"
    assert back[0].memberid() != gone_member_id, "the restart got a new member id"
    ids = {gone_instance: back[0].memberid(), survivor_instance: survivor[0].memberid()}
    assert members_by_instance(broker.bootstrap, group) == (ConsumerGroupState.STABLE, ids)

    after = produce_to(broker.bootstrap, topic, gone_owned, 200, "after-restart")
    poll_members(members, until=lambda: after <= back[2],
                 what="the restarted member to read what was produced after its restart")

    # The new member id was persisted: a restarted broker restores the group
    # with it, so neither member is fenced or sent through a rebalance.
    broker.restart()
    poll_members(members, seconds=SESSION_TIMEOUT_S + 2, broker_may_be_down=True)
    assert survivor_events.seen[survivor_seen:] == [], "no rebalance after the broker restart"
    assert back[1].seen == [("assign", gone_owned)], "no rebalance after the broker restart"
    assert members_by_instance(broker.bootstrap, group) == (ConsumerGroupState.STABLE, ids)
    later = produce_to(broker.bootstrap, topic, gone_owned, 50, "after-broker-restart")
    poll_members(members, until=lambda: later <= back[2],
                 what="the restarted member to read on after the broker restart")
    close_all([survivor[0], back[0]])
