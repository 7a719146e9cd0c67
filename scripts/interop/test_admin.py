"""Admin answers that Kafka's Java client and tools check, asked with confluent-kafka's
AdminClient and on the wire.

Goal: what an AdminClient reads about topics, the cluster and groups is what a Kafka 4
broker without an authorizer answers: the operations the caller may perform (all that
Kafka defines for the resource type), ListOffsets' newer queries (the record with the
largest timestamp, the earliest local and the latest tiered offset), and group types.

Method: each answer is compared with the value Kafka defines for it; the max-timestamp
query runs over records whose timestamps are out of order, within a batch and across
batches, before and after a restart.
"""

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AclOperation, OffsetSpec

import kafka_wire as wire
from clients import admin, create_topic, produce_all, producer, unique_topic, wait_for

# Kafka's AclEntry.supportedOperations for each resource type.
TOPIC_OPERATIONS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                    AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
GROUP_OPERATIONS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPERATIONS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                      AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                      AclOperation.DESCRIBE}


def committed_group(bootstrap, topic):
    """A classic group that joined, consumed one record and committed; left open."""
    group = unique_topic("g")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    msg = wait_for(lambda: c.poll(0.5), 30, "a record for the group")
    c.commit(message=msg, asynchronous=False)
    return group, c


def test_authorized_operations_are_kafkas_without_an_authorizer(broker):
    topic = unique_topic("ops")
    create_topic(broker.bootstrap, topic, 1)
    produce_all(producer(broker.bootstrap), [{"topic": topic, "value": b"v"}])
    a = admin(broker.bootstrap)
    from confluent_kafka import TopicCollection

    asked = a.describe_topics(TopicCollection([topic]),
                              include_authorized_operations=True)[topic].result(30)
    assert set(asked.authorized_operations) == TOPIC_OPERATIONS
    not_asked = a.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert not not_asked.authorized_operations, "operations sent without being asked"

    cluster = a.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == CLUSTER_OPERATIONS
    assert not a.describe_cluster().result(30).authorized_operations

    group, member = committed_group(broker.bootstrap, topic)
    try:
        described = a.describe_consumer_groups(
            [group], include_authorized_operations=True)[group].result(30)
        assert set(described.authorized_operations) == GROUP_OPERATIONS
        assert not a.describe_consumer_groups([group])[group].result(30).authorized_operations
    finally:
        member.close()


def test_max_timestamp_finds_the_first_record_with_the_largest_timestamp(broker):
    """KIP-734: the offset and timestamp of the first record carrying the largest
    timestamp, wherever it sits in the log."""
    topic = unique_topic("maxts")
    create_topic(broker.bootstrap, topic, 1)
    base = int(time.time() * 1000) - 3_600_000
    # Batches of 10 (linger and batch.num.messages); the largest timestamp is record 23,
    # in the middle of the third batch, and record 41 carries it again later.
    stamps = [base + (i * 7919) % 1000 for i in range(60)]
    stamps[23] = stamps[41] = base + 5000
    msgs = [{"topic": topic, "value": b"v%d" % i, "timestamp": ts}
            for i, ts in enumerate(stamps)]
    prod = producer(broker.bootstrap, **{"linger.ms": 100, "batch.num.messages": 10})
    reports = produce_all(prod, msgs)
    offset_of = {int(r.value[1:]): r.offset for r in reports}
    tp = TopicPartition(topic, 0)

    def ask(spec):
        info = a.list_offsets({tp: spec}, request_timeout=10)[tp].result(30)
        return info.offset, info.timestamp

    for moment in ("before restart", "after restart"):
        # A client of its own each time: the first one's view of the leaders died with
        # the node it knew.
        a = admin(broker.bootstrap)
        assert ask(OffsetSpec.max_timestamp()) == (offset_of[23], base + 5000), moment
        assert ask(OffsetSpec.earliest())[0] == 0, moment
        assert ask(OffsetSpec.latest())[0] == 60, moment
        if moment == "before restart":
            broker.restart()


def test_max_timestamp_of_an_empty_partition_is_no_offset(broker):
    topic = unique_topic("maxts-empty")
    create_topic(broker.bootstrap, topic, 1)
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    info = a.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(30)
    assert info.offset == -1


@pytest.mark.parametrize("version", [7, 8, 9, 10])
def test_list_offsets_sentinels_on_the_wire(broker, version):
    """Earliest local is the log start (no tiered storage), latest tiered is no offset
    with no epoch, a query newer than the request's version is UNSUPPORTED_VERSION."""
    topic = unique_topic("sentinels")
    create_topic(broker.bootstrap, topic, 1)
    produce_all(producer(broker.bootstrap),
                [{"topic": topic, "value": b"v%d" % i} for i in range(5)])

    def ask(timestamp, v=version):
        frame = wire.list_offsets_request(v, topic, 0, timestamp, correlation_id=7)
        correlation_id, body = wire.roundtrip(broker.port, frame, flexible_header=v >= 6)
        assert correlation_id == 7
        return wire.parse_list_offsets(v, body)[(topic, 0)]

    error, _, offset, _ = ask(-2)
    assert (error, offset) == (wire.NONE, 0)
    error, _, offset, _ = ask(-1)
    assert (error, offset) == (wire.NONE, 5)
    if version >= 8:
        error, timestamp, offset, _ = ask(-4)
        assert (error, timestamp, offset) == (wire.NONE, -1, 0)
    else:
        assert ask(-4)[0] == wire.UNSUPPORTED_VERSION
    if version >= 9:
        assert ask(-5) == (wire.NONE, -1, -1, -1)
    else:
        assert ask(-5)[0] == wire.UNSUPPORTED_VERSION
    assert ask(-3, v=6)[0] == wire.UNSUPPORTED_VERSION


def test_list_groups_by_type(broker):
    topic = unique_topic("types")
    create_topic(broker.bootstrap, topic, 1)
    produce_all(producer(broker.bootstrap), [{"topic": topic, "value": b"v"}])
    group, member = committed_group(broker.bootstrap, topic)
    try:
        a = admin(broker.bootstrap)

        def listed(**kwargs):
            result = a.list_consumer_groups(request_timeout=10, **kwargs).result(30)
            return {g.group_id: g for g in result.valid}

        classic = listed(types={ConsumerGroupType.CLASSIC})
        assert group in classic, "a classic group must be listed under its type"
        assert classic[group].type == ConsumerGroupType.CLASSIC
        assert group not in listed(types={ConsumerGroupType.CONSUMER})
        assert listed()[group].type == ConsumerGroupType.CLASSIC
    finally:
        member.close()
