"""Three ringlog nodes in one metadata quorum, used by confluent-kafka as a user would.

Goal: a client that knows any of the three nodes finds all three brokers, creates topics
(the admin client sends them to the controller that Metadata names), produces keyed
records idempotently to partitions led by every broker, and reads them back in a consumer
group whose coordinator may sit on any node; when the controller is killed, the other two
elect another and take new topics, and the killed node comes back and serves its
partitions again.

Method: each node is formatted with one cluster id (`ringlog format`) and started with
`node.id` and `controller.quorum.voters`; the three start at once, since each waits for a
quorum before it is ready. Partitions have one replica (data replication is a later step):
what a killed node leads is unavailable until it returns.
"""

import subprocess
import threading

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import NewTopic

from clients import admin, produce_all, producer, topic_partitions, unique_topic, wait_for
from conftest import Broker, finish, free_port, ringlog_bin

CLUSTER_ID = "interopQuorumClusterXw"


@pytest.fixture
def cluster(tmp_path):
    voters = ",".join(f"{i}@127.0.0.1:{free_port()}" for i in (1, 2, 3))
    nodes = []
    for node_id in (1, 2, 3):
        broker = Broker(tmp_path, settings={"node.id": node_id,
                                            "controller.quorum.voters": voters},
                        name=f"node{node_id}")
        subprocess.run([str(ringlog_bin()), "format", "--cluster-id", CLUSTER_ID,
                        "--set", f"log.dirs={broker.data_dir}", "--set", f"node.id={node_id}"],
                       check=True, capture_output=True)
        nodes.append(broker)
    errors = []

    def start(broker):
        try:
            broker.start(ready_timeout=60)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=start, args=(b,)) for b in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for b in nodes:
            b.kill9()
        raise errors[0]
    yield nodes
    for b in nodes:
        finish(b)


def bootstrap(nodes):
    return ",".join(b.bootstrap for b in nodes if b.alive())


def controller_id(client):
    """The controller the cluster names, or None while the client cannot learn it."""
    try:
        return client.describe_cluster(request_timeout=5).result(10).controller.id
    except Exception:  # the old controller gone, no answer yet
        return None


def create(client, topic, partitions):
    futures = client.create_topics([NewTopic(topic, num_partitions=partitions,
                                             replication_factor=1)], operation_timeout=30)
    futures[topic].result(30)


def test_three_nodes_serve_topics_groups_and_survive_the_controller(cluster):
    a = admin(bootstrap(cluster))
    wait_for(lambda: len(a.describe_cluster().result(10).nodes) == 3, 30, "three brokers")

    topic = unique_topic("quorum")
    create(a, topic, 6)
    wait_for(lambda: topic_partitions(a, topic) == 6, 30, "the topic on the cluster")
    leaders = {p.id: p.leader for p in a.list_topics(topic, timeout=10).topics[topic]
               .partitions.values()}
    assert set(leaders.values()) == {1, 2, 3}, f"partitions led by every broker: {leaders}"

    # Idempotent, keyed: producer ids come from the controller, wherever it asks.
    p = producer(bootstrap(cluster), **{"enable.idempotence": True})
    messages = [{"topic": topic, "key": f"k{i % 12}".encode(), "value": f"{i}".encode()}
                for i in range(600)]
    reports = produce_all(p, messages)
    assert len(reports) == 600

    # A group read through one node only: the coordinator is wherever the group lands.
    group = unique_topic("g")
    c = Consumer({"bootstrap.servers": cluster[1].bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen = []
    try:
        def read():
            for msg in c.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen.append((msg.key(), int(msg.value())))
            return len(seen) >= 600
        wait_for(read, 60, "the group to read every record")
        c.commit(asynchronous=False)
    finally:
        c.close()
    per_key = {}
    for key, value in seen:
        per_key.setdefault(key, []).append(value)
    for key, values in per_key.items():
        assert values == sorted(values), f"key {key} out of order"
    assert sorted(v for _, v in seen) == list(range(600))

    # The controller dies: the other two elect another, which takes a new topic.
    old = controller_id(a)
    victim = cluster[old - 1]
    victim.kill9()
    # A client that learnt the old controller waits for its metadata to refresh; a fresh
    # one finds the new controller once the survivors have elected it.
    wait_for(lambda: controller_id(admin(bootstrap(cluster))) not in (old, -1, None), 30,
             "a new controller")
    after = unique_topic("after")

    def created():
        try:
            create(admin(bootstrap(cluster)), after, 2)
            return True
        except Exception:  # NOT_CONTROLLER while the new one settles
            return False
    wait_for(created, 30, "the new controller to take a topic")

    # Back from its files, the old controller catches up and serves its partitions again.
    victim.start(ready_timeout=60)
    back = admin(victim.bootstrap)
    wait_for(lambda: topic_partitions(back, after) == 2, 30, "the returned node to know the topic")
    mine = [part for part, leader in leaders.items() if leader == old]
    p2 = producer(bootstrap(cluster))
    reports = produce_all(p2, [{"topic": topic, "partition": part, "value": b"again"}
                               for part in mine])
    assert {r.partition for r in reports} == set(mine)
