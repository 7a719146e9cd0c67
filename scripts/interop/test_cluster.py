"""Three ringlog nodes in one metadata quorum, used by confluent-kafka as a user would.

Goal: a client that knows any of the three nodes finds all three brokers, creates topics
(the admin client sends them to the controller that Metadata names), produces keyed
records idempotently to partitions led by every broker, and reads them back in a consumer
group whose coordinator may sit on any node; when the controller is killed, the other two
elect another and take new topics, and the killed node comes back and serves its
partitions again.

Method: each node is formatted with one cluster id (`ringlog format`) and started with
`node.id` and `controller.quorum.voters`; the three start at once, since each waits for a
quorum before it is ready. The topic here has one replica per partition, so what a killed
node leads is unavailable until it returns (test_replication.py replicates them).
"""

import pytest
from confluent_kafka.admin import NewTopic

from clients import (admin, consume_group, produce_all, producer, topic_partitions,
                     unique_topic, wait_for)
from conftest import finish, start_cluster

@pytest.fixture
def cluster(tmp_path):
    nodes = start_cluster(tmp_path)
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
    seen = [(key, int(value)) for _, key, value
            in consume_group(cluster[1].bootstrap, group, topic, 600, 60)]
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
