"""Kafka's own command-line tools (the classes behind kafka-topics.sh and the others, from
the kafka-tools 4.x jar) against ringlog.

Goal: an operator's everyday commands work unchanged: topics, the console producer and
consumer, consumer groups (with offset resets that replay history), configs, offsets, and
the two perf tools as neutral load generators; and, on three nodes, kafka-leader-election,
kafka-reassign-partitions and kafka-metadata-quorum asking the controllers directly.

Method: each tool runs as its script would (`java -cp <jars> <class> <args>`), its output
is parsed and checked against what the test created or what ringlog reports through
confluent-kafka.
"""

import json
import re

import pytest

from confluent_kafka.admin import NewTopic

import kafka_java as kj
from clients import admin, create_topic, unique_topic, wait_for, watermarks
from conftest import finish, start_cluster


def topics(broker, *args, **kwargs):
    return kj.tool(kj.TOPICS, "--bootstrap-server", broker.bootstrap, *args, **kwargs)


def groups(broker, *args, **kwargs):
    return kj.tool(kj.CONSUMER_GROUPS, "--bootstrap-server", broker.bootstrap, *args, **kwargs)


def console_consume(broker, *args):
    return kj.tool(kj.CONSOLE_CONSUMER, "--bootstrap-server", broker.bootstrap,
                   "--timeout-ms", 10000, *args).stdout.splitlines()


def test_kafka_topics_create_list_describe_alter_delete(broker):
    topic = unique_topic("tools")
    topics(broker, "--create", "--topic", topic, "--partitions", 2, "--replication-factor", 1,
           "--config", "retention.ms=86400000")
    assert topic in topics(broker, "--list").stdout.split()
    described = topics(broker, "--describe", "--topic", topic).stdout
    assert re.search(rf"Topic: {topic}\s+TopicId: \S+\s+PartitionCount: 2", described), described
    assert "retention.ms=86400000" in described
    assert len(re.findall(r"Partition: \d+\s+Leader: \d+", described)) == 2, described
    topics(broker, "--alter", "--topic", topic, "--partitions", 4)
    assert "PartitionCount: 4" in topics(broker, "--describe", "--topic", topic).stdout
    topics(broker, "--delete", "--topic", topic)
    assert topic not in topics(broker, "--list").stdout.split()


def test_console_producer_and_consumer_with_keys_headers_and_a_group(broker):
    topic = unique_topic("console")
    create_topic(broker.bootstrap, topic, 1)
    lines = "".join(f"h1:v{i},h2:w\tkey-{i}\tvalue-{i}\n" for i in range(20))
    kj.tool(kj.CONSOLE_PRODUCER, "--bootstrap-server", broker.bootstrap, "--topic", topic,
            "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
            input_text=lines)
    assert watermarks(broker.bootstrap, topic, 1) == {0: (0, 20)}
    read = console_consume(broker, "--topic", topic, "--from-beginning",
                           "--formatter-property", "print.key=true",
                           "--formatter-property", "print.headers=true",
                           "--max-messages", 20)
    assert read == [f"h1:v{i},h2:w\tkey-{i}\tvalue-{i}" for i in range(20)]
    group = unique_topic("g")
    first = console_consume(broker, "--topic", topic, "--group", group, "--from-beginning",
                            "--max-messages", 15)
    assert first == [f"value-{i}" for i in range(15)]
    rest = console_consume(broker, "--topic", topic, "--group", group, "--max-messages", 5)
    assert rest == [f"value-{i}" for i in range(15, 20)], "the group resumes where it committed"


def test_kafka_consumer_groups_list_describe_reset_delete(broker):
    topic = unique_topic("groups")
    create_topic(broker.bootstrap, topic, 1)
    kj.tool(kj.CONSOLE_PRODUCER, "--bootstrap-server", broker.bootstrap, "--topic", topic,
            input_text="".join(f"m{i}\n" for i in range(10)))
    group = unique_topic("g")
    assert len(console_consume(broker, "--topic", topic, "--group", group,
                               "--from-beginning", "--max-messages", 10)) == 10
    assert group in groups(broker, "--list").stdout.split()
    described = groups(broker, "--describe", "--group", group).stdout
    row = next(line.split() for line in described.splitlines() if topic in line)
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert row[:6] == [group, topic, "0", "10", "10", "0"], described
    plan = groups(broker, "--reset-offsets", "--group", group, "--topic", topic,
                  "--to-earliest", "--dry-run").stdout
    assert re.search(rf"{group}\s+{topic}\s+0\s+0", plan), plan
    groups(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
           "--execute")
    replay = console_consume(broker, "--topic", topic, "--group", group, "--max-messages", 10)
    assert replay == [f"m{i}" for i in range(10)], "a reset to earliest replays history"
    deleted = groups(broker, "--delete", "--group", group).stdout
    assert "successful" in deleted.lower(), deleted
    assert group not in groups(broker, "--list").stdout.split()


def test_kafka_configs_describe(broker):
    topic = unique_topic("configs")
    create_topic(broker.bootstrap, topic, 1, config={"retention.ms": "3600000"})
    out = kj.tool(kj.CONFIGS, "--bootstrap-server", broker.bootstrap, "--describe",
                  "--entity-type", "topics", "--entity-name", topic).stdout
    assert "retention.ms=3600000" in out, out
    brokers = kj.tool(kj.CONFIGS, "--bootstrap-server", broker.bootstrap, "--describe",
                      "--entity-type", "brokers", "--all").stdout
    assert "message.max.bytes=" in brokers, brokers


def test_kafka_configs_alter_sets_and_deletes_topic_settings(broker):
    topic = unique_topic("alter")
    create_topic(broker.bootstrap, topic, 1)

    def configs(*args):
        return kj.tool(kj.CONFIGS, "--bootstrap-server", broker.bootstrap, *args,
                       "--entity-type", "topics", "--entity-name", topic)

    configs("--alter", "--add-config", "retention.ms=1000,max.message.bytes=2000000")
    out = configs("--describe").stdout
    assert "retention.ms=1000" in out and "max.message.bytes=2000000" in out, out
    configs("--alter", "--delete-config", "retention.ms")
    out = configs("--describe").stdout
    assert "retention.ms" not in out and "max.message.bytes=2000000" in out, out
    refused = kj.tool(kj.CONFIGS, "--bootstrap-server", broker.bootstrap, "--alter",
                      "--entity-type", "topics", "--entity-name", topic,
                      "--add-config", "retention.ms=soon", check=False)
    assert refused.returncode != 0
    assert "Invalid value soon for configuration retention.ms" in refused.stdout + refused.stderr


def test_kafka_configs_alter_the_cluster_wide_broker_defaults(broker):
    topic = unique_topic("defaults")
    create_topic(broker.bootstrap, topic, 1)

    def configs(*args, **kwargs):
        return kj.tool(kj.CONFIGS, "--bootstrap-server", broker.bootstrap, *args, **kwargs)

    configs("--alter", "--entity-type", "brokers", "--entity-default",
            "--add-config", "log.retention.ms=3600000")
    out = configs("--describe", "--entity-type", "brokers", "--entity-default").stdout
    assert "log.retention.ms=3600000" in out, out
    out = configs("--describe", "--all", "--entity-type", "topics", "--entity-name", topic).stdout
    assert re.search(r"retention\.ms=3600000 sensitive=false synonyms=\{"
                     r"DYNAMIC_DEFAULT_BROKER_CONFIG:log\.retention\.ms=3600000", out), out
    refused = configs("--alter", "--entity-type", "brokers", "--entity-name", "1",
                      "--add-config", "log.retention.hours=1", check=False)
    assert refused.returncode != 0
    assert "Cannot update these configs dynamically" in refused.stdout + refused.stderr


def test_kafka_delete_records_moves_the_low_watermark(broker, tmp_path):
    topic = unique_topic("trim")
    create_topic(broker.bootstrap, topic, 1)
    kj.tool(kj.CONSOLE_PRODUCER, "--bootstrap-server", broker.bootstrap, "--topic", topic,
            input_text="".join(f"m{i}\n" for i in range(10)))
    offsets = tmp_path / "offsets.json"
    offsets.write_text('{"partitions": [{"topic": "%s", "partition": 0, "offset": 6}], '
                       '"version": 1}' % topic)
    out = kj.tool(kj.DELETE_RECORDS, "--bootstrap-server", broker.bootstrap,
                  "--offset-json-file", offsets).stdout
    assert re.search(rf"partition: {topic}-0\s+low_watermark: 6", out), out
    earliest = kj.tool(kj.GET_OFFSETS, "--bootstrap-server", broker.bootstrap, "--topic",
                       topic, "--time", -2).stdout.split()
    assert earliest == [f"{topic}:0:6"], earliest


def test_kafka_log_dirs_describes_each_replica_size(broker):
    topic = unique_topic("dirs")
    create_topic(broker.bootstrap, topic, 2)
    kj.tool(kj.CONSOLE_PRODUCER, "--bootstrap-server", broker.bootstrap, "--topic", topic,
            "--producer-property", "partitioner.class="
            "org.apache.kafka.clients.producer.RoundRobinPartitioner",
            input_text="".join(f"m{i}\n" for i in range(10)))
    out = kj.tool(kj.LOG_DIRS, "--bootstrap-server", broker.bootstrap, "--describe",
                  "--topic-list", topic).stdout
    described = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (node,) = described["brokers"]
    (log_dir,) = node["logDirs"]
    assert log_dir["error"] is None, log_dir
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}, out
    assert all(size > 0 for size in sizes.values()), out
    assert all(p["offsetLag"] == 0 and not p["isFuture"] for p in log_dir["partitions"])


def test_kafka_metadata_quorum_describes_a_one_voter_quorum(broker):
    create_topic(broker.bootstrap, unique_topic("quorum"), 1)
    status = kj.tool(kj.METADATA_QUORUM, "--bootstrap-server", broker.bootstrap, "describe",
                     "--status").stdout
    assert re.search(r"LeaderId:\s+1\b", status), status
    high_watermark = int(re.search(r"HighWatermark:\s+(\d+)", status).group(1))
    assert high_watermark > 0, status
    assert re.search(r"CurrentVoters:\s+\[.*\"id\":\s*1\b", status), status
    replication = kj.tool(kj.METADATA_QUORUM, "--bootstrap-server", broker.bootstrap,
                          "describe", "--replication").stdout
    assert re.search(r"^1\s+\S+\s+%d\s+0\s+" % high_watermark, replication, re.M), replication


def test_kafka_get_offsets(broker):
    topic = unique_topic("offsets")
    create_topic(broker.bootstrap, topic, 2)
    kj.tool(kj.CONSOLE_PRODUCER, "--bootstrap-server", broker.bootstrap, "--topic", topic,
            "--producer-property", "partitioner.class="
            "org.apache.kafka.clients.producer.RoundRobinPartitioner",
            input_text="".join(f"m{i}\n" for i in range(10)))
    latest = kj.tool(kj.GET_OFFSETS, "--bootstrap-server", broker.bootstrap, "--topic", topic,
                     "--time", -1).stdout.split()
    earliest = kj.tool(kj.GET_OFFSETS, "--bootstrap-server", broker.bootstrap, "--topic",
                       topic, "--time", -2).stdout.split()
    assert sorted(earliest) == [f"{topic}:0:0", f"{topic}:1:0"]
    ends = watermarks(broker.bootstrap, topic, 2)
    assert sorted(latest) == [f"{topic}:{p}:{ends[p][1]}" for p in range(2)]
    assert sum(end for _, end in ends.values()) == 10
    assert all(end > 0 for _, end in ends.values()), f"round robin fills both: {ends}"


def test_perf_tools_as_load_generators(broker):
    topic = unique_topic("perf")
    create_topic(broker.bootstrap, topic, 1)
    out = kj.tool(kj.PRODUCER_PERF, "--topic", topic, "--num-records", 50000,
                  "--record-size", 100, "--throughput", -1, "--producer-props",
                  f"bootstrap.servers={broker.bootstrap}", "acks=all").stdout
    assert re.search(r"50000 records sent, [\d.]+ records/sec", out), out
    assert watermarks(broker.bootstrap, topic, 1) == {0: (0, 50000)}
    out = kj.tool(kj.CONSUMER_PERF, "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--messages", 50000, "--timeout", 30000).stdout
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
    row = out.strip().splitlines()[-1].split(", ")
    assert int(row[4]) == 50000, out


# Tools that move leadership and replicas, on three nodes.

@pytest.fixture
def cluster(tmp_path):
    nodes = start_cluster(tmp_path, {"broker.heartbeat.interval.ms": 200,
                                     "broker.session.timeout.ms": 1500,
                                     "replica.fetch.backoff.ms": 100})
    yield nodes
    for b in nodes:
        finish(b)


def bootstrap(nodes):
    return ",".join(b.bootstrap for b in nodes if b.alive())


def partition_states(bootstrap_servers, topic):
    """{partition: (leader, replicas, isr)} as the cluster's metadata gives it."""
    described = admin(bootstrap_servers).list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs))
            for p in described.partitions.values()}


def controller_listeners(nodes):
    voters = nodes[0].settings["controller.quorum.voters"]
    return ",".join(voter.split("@", 1)[1] for voter in voters.split(","))


def test_kafka_metadata_quorum_asks_the_controllers_directly(cluster):
    controllers = controller_listeners(cluster)
    status = kj.tool(kj.METADATA_QUORUM, "--bootstrap-controller", controllers, "describe",
                     "--status").stdout
    leader = int(re.search(r"LeaderId:\s+(\d+)", status).group(1))
    assert leader in (1, 2, 3), status
    high_watermark = int(re.search(r"HighWatermark:\s+(\d+)", status).group(1))
    assert high_watermark > 0, status
    voters = json.loads(re.search(r"CurrentVoters:\s+(\[.*\])", status).group(1))
    assert [v["id"] for v in voters] == [1, 2, 3], status
    for voter, address in zip(voters, controllers.split(",")):
        assert voter["endpoints"] == [f"CONTROLLER://{address}"], status
        assert voter["directoryId"] != "AAAAAAAAAAAAAAAAAAAAAA", status
    replication = kj.tool(kj.METADATA_QUORUM, "--bootstrap-controller", controllers,
                          "describe", "--replication").stdout
    rows = {int(line.split()[0]): line.split() for line in replication.splitlines()[1:]}
    assert sorted(rows) == [1, 2, 3], replication
    assert rows[leader][-1] == "Leader", replication
    assert all(rows[n][-1] == "Follower" for n in rows if n != leader), replication
    assert all(rows[n][1] == v["directoryId"] for n, v in zip((1, 2, 3), voters)), replication


def test_kafka_leader_election_gives_leadership_back_to_preferred_replicas(cluster):
    topic = unique_topic("elect")
    a = admin(bootstrap(cluster))
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)],
                    operation_timeout=30)[topic].result(30)
    wait_for(lambda: all(len(isr) == 3 for _, _, isr in
                         partition_states(bootstrap(cluster), topic).values()),
             30, "every replica in sync")
    victim = partition_states(bootstrap(cluster), topic)[0][0]
    cluster[victim - 1].kill9()
    wait_for(lambda: partition_states(bootstrap(cluster), topic)[0][0] not in (victim, -1), 30,
             "a new leader for partition 0")
    cluster[victim - 1].start()
    wait_for(lambda: all(len(isr) == 3 for _, _, isr in
                         partition_states(bootstrap(cluster), topic).values()),
             30, "the restarted broker back in sync")
    out = kj.tool(kj.LEADER_ELECTION, "--bootstrap-server", bootstrap(cluster),
                  "--election-type", "preferred", "--all-topic-partitions").stdout
    assert re.search(rf"Successfully completed leader election \(PREFERRED\) for partitions "
                     rf".*{topic}-0", out), out
    wait_for(lambda: all(leader == replicas[0] for leader, replicas, _ in
                         partition_states(bootstrap(cluster), topic).values()),
             30, "every partition led by its preferred replica")
    again = kj.tool(kj.LEADER_ELECTION, "--bootstrap-server", bootstrap(cluster),
                    "--election-type", "unclean", "--topic", topic, "--partition", 0).stdout
    assert f"Valid replica already elected for partitions {topic}-0" in again, again


def test_kafka_reassign_partitions_moves_a_partition_with_its_data(cluster, tmp_path):
    topic = unique_topic("reassign")
    a = admin(bootstrap(cluster))
    a.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1]])],
                    operation_timeout=30)[topic].result(30)
    kj.tool(kj.CONSOLE_PRODUCER, "--bootstrap-server", bootstrap(cluster), "--topic", topic,
            input_text="".join(f"m{i}\n" for i in range(100)))
    plan = tmp_path / "reassignment.json"
    plan.write_text('{"version": 1, "partitions": '
                    '[{"topic": "%s", "partition": 0, "replicas": [2, 3]}]}' % topic)

    def reassign(*args, **kwargs):
        return kj.tool(kj.REASSIGN, "--bootstrap-server", bootstrap(cluster), *args, **kwargs)

    out = reassign("--reassignment-json-file", plan, "--execute",
                   "--throttle", 50000000).stdout
    assert f"Successfully started partition reassignment for {topic}-0" in out, out
    # --verify reports the move, and once it is complete clears the throttles it set.
    verified = []
    wait_for(lambda: verified.append(reassign("--reassignment-json-file", plan,
                                              "--verify").stdout) or
             f"Reassignment of partition {topic}-0 is completed." in verified[-1],
             60, "the move completed")
    assert "Clearing broker-level throttles" in verified[-1], verified[-1]
    leader, replicas, isr = partition_states(bootstrap(cluster), topic)[0]
    assert (replicas, isr) == ([2, 3], [2, 3]) and leader in (2, 3)
    assert topic not in reassign("--list").stdout
    read = console_consume_from(bootstrap(cluster), topic, 100)
    assert read == [f"m{i}" for i in range(100)]


def console_consume_from(servers, topic, count):
    return kj.tool(kj.CONSOLE_CONSUMER, "--bootstrap-server", servers, "--topic", topic,
                   "--from-beginning", "--max-messages", count,
                   "--timeout-ms", 10000).stdout.splitlines()
