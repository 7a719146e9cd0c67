"""Kafka's own command-line tools (the classes behind kafka-topics.sh and the others, from
the kafka-tools 4.x jar) against a single ringlog node.

Goal: an operator's everyday commands work unchanged: topics, the console producer and
consumer, consumer groups (with offset resets that replay history), configs, offsets, and
the two perf tools as neutral load generators. Tools whose API ringlog lacks yet are listed
in EXPECTED_FAILURES with the API they need; each entry must fail with the Java client's
words for a missing API, naming it, so that the issue adding the API has to remove its
entry.

Method: each tool runs as its script would (`java -cp <jars> <class> <args>`), its output
is parsed and checked against what the test created or what ringlog reports through
confluent-kafka.
"""

import re

import pytest

import kafka_java as kj
from clients import create_topic, unique_topic, watermarks


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


# Tools that need an API ringlog does not have yet, and the issue that brings it.
EXPECTED_FAILURES = [
    ("kafka-reassign-partitions --list", kj.REASSIGN, ["--list"],
     "LIST_PARTITION_REASSIGNMENTS", "replication"),
    ("kafka-leader-election", kj.LEADER_ELECTION,
     ["--election-type", "preferred", "--all-topic-partitions"], "ELECT_LEADERS",
     "replication"),
]


@pytest.mark.parametrize("name,cls,args,api,issue", EXPECTED_FAILURES,
                         ids=[e[0] for e in EXPECTED_FAILURES])
def test_tools_whose_api_is_missing_name_it(broker, tmp_path, name, cls, args, api, issue):
    topic = unique_topic("missing")
    create_topic(broker.bootstrap, topic, 1)
    offsets = tmp_path / "offsets.json"
    offsets.write_text('{"partitions": [{"topic": "%s", "partition": 0, "offset": 0}]}' % topic)
    args = [a.format(topic=topic, offsets=offsets) for a in args]
    done = kj.tool(cls, "--bootstrap-server", broker.bootstrap, *args, check=False,
                   timeout=120)
    said = done.stdout + done.stderr
    # The Java client names the API the node lacks: "The node does not support ELECT_LEADERS",
    # or "The INCREMENTAL_ALTER_CONFIGS API is not supported by the cluster".
    assert re.search(rf"does not support {api}\b|The {api} API is not supported", said), (
        f"{name} must fail for want of {api} (else it works now: remove it from "
        f"EXPECTED_FAILURES, the {issue} issue):\n{said[-3000:]}")
