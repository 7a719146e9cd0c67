"""confluent-kafka (a current librdkafka) against a single ringlog node.

Goal: a real, unmodified Kafka client can do the everyday things a user does —
create a topic, produce keyed data with acks=all, read it back in order, find
offsets by timestamp, survive a broker restart, and administer topics — and the
data it reads is exactly the data it wrote.

Method: every check compares what the client was told when it wrote (the
delivery reports: partition and offset per record) with what it reads back.
Keys are placed by `partitioner=murmur2_random`, which must agree with the Java
client's default partitioner; partitioner.py recomputes that mapping
independently. The 100,000-message round trip runs in both log.io.mode values.
"""

import time

import pytest
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType

import kafka_wire as wire
from clients import (admin, consume_all, consumer, create_topic, produce_all, producer,
                     topic_partitions, unique_topic, wait_for, watermarks)
from partitioner import java_partition

KEYS = 1000
PER_KEY = 100  # KEYS * PER_KEY = 100,000 messages
PARTITIONS = 3


def keyed_messages(topic):
    """Round-robin over keys so each key's sequence numbers interleave with the
    others'; the value carries the key's sequence number and some padding."""
    pad = b"x" * 64
    for seq in range(PER_KEY):
        for k in range(KEYS):
            key = b"key-%d" % k
            yield {"topic": topic, "key": key, "value": b"%s:%d:%s" % (key, seq, pad)}


def seq_of(value: bytes) -> int:
    return int(value.split(b":")[1])


def check_partition_contents(by_partition, expected_total):
    """Count, contiguous offsets from 0, per-key sequence order, Java placement."""
    total = sum(len(recs) for recs in by_partition.values())
    assert total == expected_total, f"read {total} records, wrote {expected_total}"
    for p, recs in by_partition.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(recs))), (
            f"partition {p}: offsets are not 0..{len(recs) - 1} in order "
            f"(first break near {next(i for i, o in enumerate(offsets) if o != i)})")
        last_seq = {}
        for r in recs:
            assert java_partition(r.key, PARTITIONS) == p, (
                f"key {r.key!r} read from partition {p}, Java would use "
                f"{java_partition(r.key, PARTITIONS)}")
            assert r.value.startswith(r.key + b":"), f"value {r.value[:30]!r} not for key {r.key!r}"
            seq = seq_of(r.value)
            assert seq == last_seq.get(r.key, -1) + 1, (
                f"partition {p} offset {r.offset}: key {r.key!r} seq {seq} follows "
                f"seq {last_seq.get(r.key)}")
            last_seq[r.key] = seq
    return total


@pytest.mark.parametrize("io_mode", ["direct", "buffered"])
def test_100k_keyed_acks_all_round_trip_and_restart(broker_factory, io_mode):
    broker = broker_factory(io_mode=io_mode, cores=2)
    topic = unique_topic("keyed")
    create_topic(broker.bootstrap, topic, PARTITIONS)

    reports = produce_all(producer(broker.bootstrap, acks="all"), keyed_messages(topic),
                          timeout=300)
    assert len(reports) == KEYS * PER_KEY
    wrong = [r for r in reports if r.partition != java_partition(r.key, PARTITIONS)]
    assert not wrong, (f"{len(wrong)} keys placed unlike the Java partitioner, e.g. "
                       f"{wrong[0].key!r} -> {wrong[0].partition}")
    acked_at = {(r.partition, r.offset): (r.key, r.value) for r in reports}
    assert len(acked_at) == len(reports), "two acknowledgements named the same offset"

    first = consume_all(broker.bootstrap, topic, PARTITIONS, timeout=180)
    check_partition_contents(first, KEYS * PER_KEY)
    for p, recs in first.items():
        for r in recs:
            assert acked_at[(p, r.offset)] == (r.key, r.value), (
                f"partition {p} offset {r.offset} holds {r.key!r}, was acked as "
                f"{acked_at[(p, r.offset)][0]!r}")

    broker.restart()
    assert watermarks(broker.bootstrap, topic, PARTITIONS) == {
        p: (0, len(first[p])) for p in range(PARTITIONS)}, "watermarks changed across restart"
    again = consume_all(broker.bootstrap, topic, PARTITIONS, timeout=180)
    for p in range(PARTITIONS):
        assert [r.as_tuple() for r in again[p]] == [r.as_tuple() for r in first[p]], (
            f"partition {p} reads differently after a restart")


def test_offsets_for_times_finds_the_first_record_at_or_after(broker):
    """ListOffsets by timestamp returns, per partition, the first record whose
    timestamp is >= the target (a record offset, not a batch's base offset),
    and -1 past the end; before and after a restart."""
    topic = unique_topic("times")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    base = int(time.time() * 1000) - 3_600_000
    count = 600
    msgs = [{"topic": topic, "key": b"k%d" % (i % 50), "value": b"v%d" % i,
             "timestamp": base + 10 * i} for i in range(count)]
    reports = produce_all(producer(broker.bootstrap, **{"linger.ms": 50}), msgs)
    # Delivery reports do not carry the timestamp; it follows from the value.
    stamped = [(r.partition, r.offset, base + 10 * int(r.value[1:])) for r in reports]
    read = consume_all(broker.bootstrap, topic, PARTITIONS)
    assert sorted((r.partition, r.offset, r.timestamp) for rs in read.values() for r in rs) == (
        sorted(stamped)), "records must keep the CreateTime the producer gave them"

    def expected_offsets(target):
        out = {}
        for p in range(PARTITIONS):
            hits = [o for pp, o, ts in stamped if pp == p and ts >= target]
            out[p] = min(hits) if hits else -1
        return out

    def lookup(target):
        c = consumer(broker.bootstrap)
        try:
            found = c.offsets_for_times([TopicPartition(topic, p, target)
                                         for p in range(PARTITIONS)], timeout=10)
        finally:
            c.close()
        for tp in found:
            assert tp.error is None, f"offsets_for_times error on partition {tp.partition}: {tp.error}"
        return {tp.partition: tp.offset for tp in found}

    targets = [base - 1, base + 10 * 300 + 5, base + 10 * 599, base + 10 * count + 1]
    for attempt in ("before restart", "after restart"):
        for target in targets:
            assert lookup(target) == expected_offsets(target), (
                f"{attempt}: offsets for timestamp base+{target - base}")
        if attempt == "before restart":
            broker.restart()

    target = targets[1]
    start = expected_offsets(target)
    got = consume_all(broker.bootstrap, topic, PARTITIONS, start=start)
    read = sorted(r.timestamp for recs in got.values() for r in recs)
    assert read == sorted(ts for _, _, ts in stamped if ts >= target), (
        "consuming from the looked-up offsets did not yield exactly the records at or "
        "after the timestamp")


def test_delete_then_recreate_topic_starts_empty(broker):
    topic = unique_topic("delete")
    create_topic(broker.bootstrap, topic, 2)
    produce_all(producer(broker.bootstrap), [{"topic": topic, "key": b"k%d" % i, "value": b"v"}
                                             for i in range(100)])
    a = admin(broker.bootstrap)
    a.delete_topics([topic], operation_timeout=30)[topic].result(30)
    wait_for(lambda: topic_partitions(a, topic) is None, 30, f"{topic} to leave Metadata")

    with pytest.raises(KafkaException) as err:
        a.delete_topics([topic], operation_timeout=30)[topic].result(30)
    assert err.value.args[0].code() == 3, f"deleting a missing topic: {err.value}"

    broker.restart()
    assert topic_partitions(broker.bootstrap, topic) is None, "a deleted topic came back on restart"

    create_topic(broker.bootstrap, topic, 3)
    assert watermarks(broker.bootstrap, topic, 3) == {0: (0, 0), 1: (0, 0), 2: (0, 0)}, (
        "a recreated topic must not see the deleted topic's data")
    produce_all(producer(broker.bootstrap), [{"topic": topic, "key": b"n", "value": b"new"}])
    got = consume_all(broker.bootstrap, topic, 3)
    assert [(r.key, r.value) for recs in got.values() for r in recs] == [(b"n", b"new")]


def test_create_partitions_grows_a_topic_and_keeps_its_data(broker):
    topic = unique_topic("grow")
    create_topic(broker.bootstrap, topic, 2)
    before = produce_all(producer(broker.bootstrap),
                         [{"topic": topic, "key": b"k%d" % i, "value": b"old%d" % i}
                          for i in range(200)])
    a = admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic, 5)], operation_timeout=30)[topic].result(30)
    wait_for(lambda: topic_partitions(a, topic) == 5, 30, f"{topic} to have 5 partitions")

    with pytest.raises(KafkaException) as err:
        a.create_partitions([NewPartitions(topic, 3)], operation_timeout=30)[topic].result(30)
    assert err.value.args[0].code() == 37, f"shrinking must be INVALID_PARTITIONS: {err.value}"

    produce_all(producer(broker.bootstrap),
                [{"topic": topic, "key": b"new", "value": b"p%d" % p, "partition": p}
                 for p in range(5)])
    broker.restart()
    assert topic_partitions(broker.bootstrap, topic) == 5, "added partitions lost on restart"
    got = consume_all(broker.bootstrap, topic, 5)
    for p in (2, 3, 4):
        assert [r.value for r in got[p]] == [b"p%d" % p], f"new partition {p}"
    for p in (0, 1):
        old = [(r.offset, r.value) for r in before if r.partition == p]
        assert [(r.offset, r.value) for r in got[p][:-1]] == sorted(old), (
            f"partition {p} lost or reordered its data when the topic grew")


def test_validate_only_create_creates_nothing(broker):
    topic = unique_topic("dry")
    a = admin(broker.bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                    validate_only=True, operation_timeout=30)[topic].result(30)
    assert topic_partitions(a, topic) is None, "validate_only created the topic"


def config_value(entries, name):
    assert name in entries, f"DescribeConfigs lacks {name}; it has {sorted(entries)[:40]}"
    return entries[name].value


@pytest.mark.parametrize("broker", [{"settings": {"message.max.bytes": "1500000"}}],
                         indirect=True)
def test_describe_configs_for_topic_and_broker(broker):
    topic = unique_topic("cfg")
    create_topic(broker.bootstrap, topic, 1, config={"segment.bytes": "1048576",
                                                     "retention.ms": "3600000"})
    a = admin(broker.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = a.describe_configs([res])[res].result(30)
    assert config_value(entries, "segment.bytes") == "1048576"
    assert config_value(entries, "retention.ms") == "3600000"

    node_ids = list(a.list_topics(timeout=10).brokers)
    assert len(node_ids) == 1, f"a single node should list one broker, got {node_ids}"
    res = ConfigResource(ResourceType.BROKER, str(node_ids[0]))
    entries = a.describe_configs([res])[res].result(30)
    assert config_value(entries, "message.max.bytes") == "1500000", (
        "broker config must report the value given with --set")


def test_broker_settings_change_at_run_time_and_survive_a_restart(broker):
    """incremental_alter_configs on the broker itself (librdkafka does not name the
    cluster-wide resource ""; kafka-configs does, in test_kafka_tools.py): topics without a
    value of their own inherit it, DescribeConfigs names the level it comes from, a read-only
    broker setting is refused, and a restart keeps it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigSource
    topic = unique_topic("inherit")
    create_topic(broker.bootstrap, topic, 1)
    a = admin(broker.bootstrap)
    node = str(list(a.list_topics(timeout=10).brokers)[0])

    def alter(name, key, value):
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        res = ConfigResource(ResourceType.BROKER, name, incremental_configs=[entry])
        return a.incremental_alter_configs([res])[res]

    def inherited(client):
        res = ConfigResource(ResourceType.TOPIC, topic)
        entry = client.describe_configs([res])[res].result(30)["retention.bytes"]
        return entry.value, entry.source

    assert inherited(a) == ("-1", ConfigSource.DEFAULT_CONFIG.value)
    alter(node, "log.retention.bytes", "987654321").result(30)
    assert inherited(a) == ("987654321", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    with pytest.raises(KafkaException) as refused:
        alter(node, "log.retention.hours", "1").result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST, refused.value
    broker.restart()
    after = admin(broker.bootstrap)
    assert inherited(after) == ("987654321", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_topic_settings_change_at_run_time_and_survive_a_restart(broker):
    """incremental_alter_configs on a topic: SET, APPEND and SUBTRACT to a list setting,
    DELETE back to the default; DescribeConfigs names the topic as the source; a bad value is
    INVALID_CONFIG, a missing topic UNKNOWN_TOPIC_OR_PARTITION, validate_only changes nothing;
    a restart keeps what was set."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigSource
    topic = unique_topic("topiccfg")
    create_topic(broker.bootstrap, topic, 1)
    a = admin(broker.bootstrap)

    def alter(changes, name=topic, validate_only=False):
        entries = [ConfigEntry(key, value, incremental_operation=op)
                   for key, op, value in changes]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        return a.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)

    def described(client, key):
        res = ConfigResource(ResourceType.TOPIC, topic)
        entry = client.describe_configs([res])[res].result(30)[key]
        return entry.value, entry.source

    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
    TOPIC, DEFAULT = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value

    alter([("retention.ms", SET, "7200000"), ("cleanup.policy", APPEND, "compact")])
    assert described(a, "retention.ms") == ("7200000", TOPIC)
    assert described(a, "cleanup.policy") == ("delete,compact", TOPIC)
    alter([("cleanup.policy", SUBTRACT, "delete")])
    assert described(a, "cleanup.policy") == ("compact", TOPIC)
    alter([("retention.ms", SET, "60000")], validate_only=True)
    assert described(a, "retention.ms") == ("7200000", TOPIC), "validate_only changed it"

    with pytest.raises(KafkaException) as refused:
        alter([("retention.ms", SET, "soon")])
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value
    with pytest.raises(KafkaException) as missing:
        alter([("retention.ms", SET, "1000")], name=unique_topic("absent"))
    assert missing.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, missing.value

    broker.restart()
    a = admin(broker.bootstrap)
    assert described(a, "retention.ms") == ("7200000", TOPIC), "the restart lost it"
    assert described(a, "cleanup.policy") == ("compact", TOPIC)
    alter([("retention.ms", DELETE, None)])
    assert described(a, "retention.ms") == ("604800000", DEFAULT)


def test_delete_records_through_the_admin_client(broker):
    """AdminClient.delete_records (DeleteRecords): the answer carries the new low watermark,
    consumers' watermarks and reads from the beginning follow it, an offset past the high
    watermark is refused with OFFSET_OUT_OF_RANGE, OFFSET_END (-1) means the high watermark,
    and a restart keeps the start it was given."""
    topic = unique_topic("delrec")
    create_topic(broker.bootstrap, topic, 1)
    produce_all(producer(broker.bootstrap),
                [{"topic": topic, "partition": 0, "key": b"k%d" % i, "value": b"v%d" % i}
                 for i in range(10)])
    a = admin(broker.bootstrap)

    def delete_below(offset):
        tp = TopicPartition(topic, 0, offset)
        return a.delete_records([tp], request_timeout=30)[tp].result(30)

    assert delete_below(4).low_watermark == 4
    assert watermarks(broker.bootstrap, topic, 1)[0] == (4, 10)
    got = consume_all(broker.bootstrap, topic, 1)[0]
    assert [(r.offset, r.value) for r in got] == [(o, b"v%d" % o) for o in range(4, 10)]

    with pytest.raises(KafkaException) as refused:
        delete_below(11)
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, refused.value
    assert watermarks(broker.bootstrap, topic, 1)[0] == (4, 10), "a refused delete moved it"

    broker.restart()
    assert watermarks(broker.bootstrap, topic, 1)[0] == (4, 10), "the restart lost the start"
    a = admin(broker.bootstrap)
    assert delete_below(OFFSET_END).low_watermark == 10
    assert watermarks(broker.bootstrap, topic, 1)[0] == (10, 10)


def test_describe_cluster_names_this_node(broker):
    a = admin(broker.bootstrap)  # keep the client alive until its future resolves
    desc = a.describe_cluster(request_timeout=10).result(30)
    assert desc.cluster_id, "cluster id must be set"
    assert [(n.host, n.port) for n in desc.nodes] == [("127.0.0.1", broker.port)]
    assert desc.controller is not None and desc.controller.id == desc.nodes[0].id


@pytest.mark.parametrize("enabled", [True, False])
def test_metadata_auto_creates_topics_only_when_enabled(broker_factory, enabled):
    broker = broker_factory(settings={"auto.create.topics.enable": str(enabled).lower(),
                                      "num.partitions": "4"})
    topic = unique_topic("auto")

    # Metadata v1 naming an unknown topic: Kafka creates it when enabled.
    def metadata_error():
        _, body = wire.roundtrip(broker.port, wire.metadata_v1_request([topic], 1))
        md = wire.parse_metadata_v1(body)
        assert md["leftover"] == 0, "Metadata v1 response has trailing bytes"
        t = md["topics"][topic]
        return t["error"], len(t["partitions"] or [])

    if enabled:
        wait_for(lambda: metadata_error() == (0, 4), 30,
                 f"{topic} to be auto-created with num.partitions=4")
        produce_all(producer(broker.bootstrap), [{"topic": topic, "key": b"k", "value": b"v"}])
    else:
        for _ in range(3):
            assert metadata_error()[0] == wire.UNKNOWN_TOPIC_OR_PARTITION, (
                "unknown topic with auto-create off must be UNKNOWN_TOPIC_OR_PARTITION")
        with pytest.raises(AssertionError, match="deliveries failed"):
            produce_all(producer(broker.bootstrap, **{"message.timeout.ms": 3000}),
                        [{"topic": topic, "key": b"k", "value": b"v"}], timeout=20)
        assert topic_partitions(broker.bootstrap, topic) is None, (
            "the topic appeared although auto.create.topics.enable=false")


def test_fetch_limits_smaller_than_a_batch_still_make_progress(broker):
    """Kafka returns the first batch whole even when it exceeds
    max.partition.fetch.bytes and fetch.max.bytes (KIP-74), so a consumer with
    tiny limits reads slowly but never stalls."""
    topic = unique_topic("tiny-fetch")
    create_topic(broker.bootstrap, topic, 2)
    reports = produce_all(producer(broker.bootstrap, **{"linger.ms": 20}),
                          [{"topic": topic, "key": b"k%d" % (i % 7), "value": b"%06d" % i + b"x" * 200}
                           for i in range(3000)])
    got = consume_all(broker.bootstrap, topic, 2, timeout=120,
                      # librdkafka wants fetch.max.bytes >= message.max.bytes
                      **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 2048,
                         "message.max.bytes": 2048})
    assert sorted((r.partition, r.offset, r.value) for rs in got.values() for r in rs) == sorted(
        (r.partition, r.offset, r.value) for r in reports)


def test_fetch_from_the_middle_of_a_batch_starts_at_that_record(broker):
    """A fetch at an offset inside a batch returns the whole batch; the client
    skips the records before its offset, so reading starts exactly there."""
    topic = unique_topic("mid-batch")
    create_topic(broker.bootstrap, topic, 1)
    prod = producer(broker.bootstrap, **{"linger.ms": 200, "batch.num.messages": 1000})
    reports = produce_all(prod, [{"topic": topic, "value": b"r%d" % i, "partition": 0}
                                 for i in range(100)])
    assert sorted(r.offset for r in reports) == list(range(100))
    for start in (1, 37, 99):
        got = consume_all(broker.bootstrap, topic, 1, start={0: start})[0]
        assert [(r.offset, r.value) for r in got] == [(o, b"r%d" % o) for o in range(start, 100)], (
            f"reading from offset {start}")


def test_acks_0_records_arrive(broker):
    topic = unique_topic("acks0")
    create_topic(broker.bootstrap, topic, 3)
    produce_all(producer(broker.bootstrap, acks="0"),
                [{"topic": topic, "key": b"k%d" % i, "value": b"v%d" % i} for i in range(2000)])
    wait_for(lambda: sum(h for _, h in watermarks(broker.bootstrap, topic, 3).values()) == 2000,
             30, "all 2000 acks=0 records to be appended")
    got = consume_all(broker.bootstrap, topic, 3)
    assert sorted(r.value for rs in got.values() for r in rs) == sorted(
        b"v%d" % i for i in range(2000))


def test_create_topics_errors_are_kafkas(broker):
    """Invalid requests get the error Kafka gives, per topic."""
    topic = unique_topic("errs")
    create_topic(broker.bootstrap, topic, 1)
    a = admin(broker.bootstrap)
    cases = [
        (NewTopic(topic, num_partitions=1, replication_factor=1), 36, "TOPIC_ALREADY_EXISTS"),
        (NewTopic(unique_topic("zero"), num_partitions=0, replication_factor=1), 37,
         "INVALID_PARTITIONS"),
        (NewTopic("bad/name", num_partitions=1, replication_factor=1), 17, "INVALID_TOPIC_EXCEPTION"),
        (NewTopic(unique_topic("rf"), num_partitions=1, replication_factor=3), 38,
         "INVALID_REPLICATION_FACTOR"),
    ]
    for new, code, name in cases:
        with pytest.raises(KafkaException) as err:
            a.create_topics([new], operation_timeout=30)[new.topic].result(30)
        assert err.value.args[0].code() == code, f"{new.topic}: expected {name} ({code}), got {err.value}"
    assert topic_partitions(a, "bad/name") is None


@pytest.mark.parametrize("reset,expect_records", [("earliest", True), ("error", False)])
def test_fetch_past_the_end_is_offset_out_of_range(broker, reset, expect_records):
    """A fetch beyond the log end gets OFFSET_OUT_OF_RANGE, which the client
    turns into its auto.offset.reset policy."""
    topic = unique_topic("oor")
    create_topic(broker.bootstrap, topic, 1)
    produce_all(producer(broker.bootstrap),
                [{"topic": topic, "value": b"r%d" % i, "partition": 0} for i in range(10)])
    c = consumer(broker.bootstrap, **{"auto.offset.reset": reset})
    try:
        c.assign([TopicPartition(topic, 0, 1_000_000)])
        deadline = time.monotonic() + 20
        values, errors = [], []
        while time.monotonic() < deadline and len(values) < 10 and not errors:
            for m in c.consume(num_messages=100, timeout=0.5):
                (errors if m.error() else values).append(m.error() or m.value())
    finally:
        c.close()
    if expect_records:
        assert values == [b"r%d" % i for i in range(10)], (
            f"auto.offset.reset=earliest should restart at 0; got {values[:3]} errors {errors}")
    else:
        assert not values and errors, "auto.offset.reset=error should surface an error"
        assert errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors[0]


def test_describe_configs_of_a_missing_topic_is_unknown_topic(broker):
    a = admin(broker.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, unique_topic("nope"))
    with pytest.raises(KafkaException) as err:
        a.describe_configs([res])[res].result(30)
    assert err.value.args[0].code() == 3, f"expected UNKNOWN_TOPIC_OR_PARTITION: {err.value}"


def test_a_compacted_topic_refuses_records_without_key(broker):
    """KIP-467: the delivery of a keyless record to a compacted topic fails with
    INVALID_RECORD (librdkafka does not retry it), and nothing of its batch is stored;
    keyed records go on."""
    topic = unique_topic("compacted")
    create_topic(broker.bootstrap, topic, 1, config={"cleanup.policy": "compact"})
    p = producer(broker.bootstrap, **{"linger.ms": 0, "acks": "1"})
    failures = []
    p.produce(topic, value=b"no key", partition=0,
              on_delivery=lambda err, msg: failures.append(err))
    assert p.flush(30) == 0
    assert len(failures) == 1 and failures[0] is not None, failures
    assert failures[0].code() == KafkaError.INVALID_RECORD, failures[0]
    reports = produce_all(p, [{"topic": topic, "key": b"k", "value": b"v", "partition": 0}])
    assert reports[0].offset == 0, "the refused batch took no offset"
    records = consume_all(broker.bootstrap, topic, 1)[0]
    assert [(r.key, r.value) for r in records] == [(b"k", b"v")]
