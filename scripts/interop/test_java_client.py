"""Kafka's own Java client (kafka-clients 4.x) against a single ringlog node.

Goal: the client most Kafka users run works with its defaults: a producer (idempotent,
acks=all since Kafka 3.0) whose keyed records a consumer group reads back exactly once, in
order, from the partitions Java's partitioner chose; every compression codec; the
AdminClient calls of a user; a consumer that commits, restarts and resumes.

Method: scripts/interop/java/JavaClient.java prints what the producer was told (partition
and offset per record) and what the consumer read; the test compares the two and
recomputes each key's partition with partitioner.py.
"""

import pytest

from clients import create_topic, unique_topic
from kafka_java import client
from partitioner import java_partition

PARTITIONS = 3


def produced(bootstrap, topic, records, keys, *overrides):
    """[(partition, offset, key, sequence)] in send order."""
    out = client("produce", bootstrap, topic, records, keys, *overrides).stdout
    rows = [line.split() for line in out.splitlines()]
    return [(int(p), int(o), k, int(s)) for p, o, k, s in rows]


def consumed(bootstrap, topic, group, records, *overrides):
    """[(partition, offset, key, value)] in read order."""
    out = client("consume", bootstrap, topic, group, records, *overrides).stdout
    rows = [line.split() for line in out.splitlines()]
    return [(int(p), int(o), k, v) for p, o, k, v in rows]


def check_round_trip(sent, read):
    assert len(read) == len(sent), f"read {len(read)} records, sent {len(sent)}"
    assert sorted((p, o) for p, o, _, _ in read) == sorted((p, o) for p, o, _, _ in sent), (
        "the consumer must read exactly the offsets the producer was given")
    by_offset = {(p, o): (k, s) for p, o, k, s in sent}
    last = {}
    for p, o, key, value in read:
        assert by_offset[(p, o)] == (key, int(value.split(":")[1])), (
            f"partition {p} offset {o}: read {key} {value}")
        assert java_partition(key.encode(), PARTITIONS) == p, (
            f"{key} is in partition {p}, Java's partitioner says "
            f"{java_partition(key.encode(), PARTITIONS)}")
        assert last.get(p, -1) < o, f"partition {p}: offset {o} read after {last.get(p)}"
        last[p] = o
    for key in {k for _, _, k, _ in sent}:
        sequences = [s for _, _, k, s in sorted(sent, key=lambda r: (r[0], r[1])) if k == key]
        assert sequences == sorted(sequences), f"{key}: stored out of send order"


def test_default_producer_and_a_group_read_back_exactly_once(broker):
    topic = unique_topic("java")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = produced(broker.bootstrap, topic, 3000, 50)
    check_round_trip(sent, consumed(broker.bootstrap, topic, unique_topic("g"), 3000))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_records_read_back(broker, codec):
    topic = unique_topic(f"java-{codec}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = produced(broker.bootstrap, topic, 2000, 20, f"compression.type={codec}",
                    "linger.ms=20")
    check_round_trip(sent, consumed(broker.bootstrap, topic, unique_topic("g"), 2000))


def test_admin_client_calls(broker):
    """Create, list, describe (with authorized operations), add partitions, describe
    configs and the cluster, list offsets (earliest, latest, by time, max timestamp),
    list groups by type, describe a group and its offsets, delete the group and topic."""
    out = client("admin", broker.bootstrap, unique_topic("java-admin")).stdout
    steps = [line.split()[1] for line in out.splitlines() if line.startswith("ok ")]
    assert steps == ["createTopics", "listTopics", "describeTopics", "createPartitions",
                     "describeConfigs", "describeCluster", "listOffsets", "listGroups",
                     "describeConsumerGroups", "listConsumerGroupOffsets",
                     "deleteConsumerGroups", "deleteTopics"], out


def test_a_restarted_consumer_resumes_after_its_commit(broker):
    topic = unique_topic("java-resume")
    group = unique_topic("g")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = produced(broker.bootstrap, topic, 600, 30)
    assert len(consumed(broker.bootstrap, topic, group, 600)) == 600
    broker.restart()
    second = produced(broker.bootstrap, topic, 600, 30)
    read = consumed(broker.bootstrap, topic, group, 600)
    assert sorted((p, o) for p, o, _, _ in read) == sorted((p, o) for p, o, _, _ in second), (
        "after a restart the group must resume right after what it committed")
    assert not {(p, o) for p, o, _, _ in first} & {(p, o) for p, o, _, _ in read}
