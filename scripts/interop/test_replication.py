"""Replicated partitions under real clients: confluent-kafka's idempotent producer
(acks=all) and a consumer group against three ringlog nodes, with 3 replicas per partition
and min.insync.replicas=2.

Goal: kill -9 of a partition's leader in the middle of production loses no acknowledged
record and doubles none: a new leader from the ISR takes over within seconds (the time is
printed), the producer goes on through its retries (the new leader knows the producer's
sequence numbers from the replicated batches), and a consumer of the same group resumes
from the offsets it committed before the kill, on whichever node coordinates the group now
(`__consumer_offsets` is replicated too).

Method: nodes fence a silent broker after 1.5 s (`broker.session.timeout.ms`), as a test
needs and a production cluster would not; everything else is the default.
"""

import threading
import time

import pytest
from confluent_kafka.admin import NewTopic

from clients import admin, consume_group, producer, unique_topic, wait_for
from conftest import finish, start_cluster

SETTINGS = {
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 1500,
    "replica.fetch.backoff.ms": 100,
}


@pytest.fixture
def cluster(tmp_path):
    nodes = start_cluster(tmp_path, SETTINGS)
    yield nodes
    for b in nodes:
        finish(b)


def bootstrap(nodes):
    return ",".join(b.bootstrap for b in nodes if b.alive())


def partitions(client, topic):
    return client.list_topics(topic, timeout=10).topics[topic].partitions


def assert_in_order(seen):
    """Per partition, each producer's records come in the order they were sent."""
    last = {}
    for partition, _, value in seen:
        phase, number = value.decode().rsplit("-", 1)
        key = (partition, phase)
        assert last.get(key, -1) < int(number), f"partition {partition} out of order at {value}"
        last[key] = int(number)


def test_a_killed_leader_loses_no_acknowledged_record_and_the_group_resumes(cluster):
    a = admin(bootstrap(cluster))
    wait_for(lambda: len(a.describe_cluster().result(10).nodes) == 3, 30, "three brokers")
    topic = unique_topic("replicated")
    new = NewTopic(topic, num_partitions=3, replication_factor=3,
                   config={"min.insync.replicas": "2"})
    a.create_topics([new], operation_timeout=30)[topic].result(30)
    wait_for(lambda: all(len(p.isrs) == 3 for p in partitions(a, topic).values()), 30,
             "every replica in sync")

    p = producer(bootstrap(cluster), **{"enable.idempotence": True,
                                         "message.timeout.ms": 120000})
    acknowledged, failed = [], []

    def report(error, msg):
        if error is not None:
            failed.append(error)
        else:
            acknowledged.append((msg.partition(), msg.value()))

    def send(phase, i):
        p.produce(topic, key=f"k{i % 30}".encode(), value=f"{phase}-{i}".encode(),
                  on_delivery=report)
        p.poll(0)

    # Before the kill: records read and committed by the group.
    for i in range(600):
        send("before", i)
    assert p.flush(60) == 0 and not failed
    group = unique_topic("g")
    seen = consume_group(bootstrap(cluster), group, topic, 600, 60)
    assert sorted(v for _, _, v in seen) == sorted(v for _, v in acknowledged)

    # During: a producer runs while the leader of partition 0 is killed.
    def produce_during():
        for i in range(3000):
            send("during", i)
            time.sleep(0.001)
    writer = threading.Thread(target=produce_during)
    writer.start()
    time.sleep(0.5)
    victim_id = partitions(a, topic)[0].leader
    victim = cluster[victim_id - 1]
    killed_at = time.monotonic()
    victim.kill9()
    survivors = admin(bootstrap(cluster))
    wait_for(lambda: partitions(survivors, topic)[0].leader not in (victim_id, -1), 30,
             "a new leader for partition 0")
    print(f"new leader of partition 0 {time.monotonic() - killed_at:.2f} s after kill -9 "
          f"of broker {victim_id}")
    writer.join(120)
    assert not writer.is_alive()
    assert p.flush(120) == 0
    assert not failed, failed[:3]

    # After: the group resumes from its commits, on whichever node coordinates it now, and
    # reads every record acknowledged since, once.
    during = sorted(v for _, v in acknowledged if v.startswith(b"during-"))
    assert len(during) == 3000
    seen = consume_group(bootstrap(cluster), group, topic, len(during), 90)
    values = [v for _, _, v in seen]
    assert not [v for v in values if v.startswith(b"before-")], "the group did not resume"
    assert sorted(values) == during
    assert_in_order(seen)
