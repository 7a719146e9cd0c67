"""kcat (Debian's 1.7.1 on librdkafka 2.0.2) against a single ringlog node.

Goal: an old client generation works too. librdkafka before 2.2 mis-reads
tagged fields that carry default values in an ApiVersions v3 response, so a
broker that encodes them breaks kcat while newer clients still work; this file
is where that shows.

Method: drive the kcat binary as a user would (-L metadata as JSON, -P with
-K: keyed lines and the Java-compatible partitioner, -C -e from the beginning
with a format string), parse its output, and check placement against
partitioner.py and against data written by confluent-kafka.
"""

import json
import re
import shutil
import subprocess

import pytest

from clients import create_topic, produce_all, producer, unique_topic
from partitioner import java_partition

PARTITIONS = 3
KCAT_TIMEOUT_S = 60


def kcat(broker, *args, stdin=None):
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs the Debian package)",
                    pytrace=False)
    cmd = [exe, "-b", broker.bootstrap, "-X", "socket.timeout.ms=10000", *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=KCAT_TIMEOUT_S)
    assert p.returncode == 0, (f"{' '.join(cmd)} exited {p.returncode}\n"
                               f"stderr: {p.stderr.decode(errors='replace')[-3000:]}")
    return p.stdout.decode()


def consume_lines(broker, topic):
    """[(key, value, partition, offset)] from `kcat -C -e -o beginning`."""
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
               "-f", "%k:%s:%p:%o\n")
    rows = []
    for line in out.splitlines():
        if not line:
            continue
        key, value, partition, offset = line.rsplit(":", 3)
        rows.append((key, value, int(partition), int(offset)))
    return rows


def test_kcat_is_the_old_librdkafka_generation():
    """Guards the premise of this file: the kcat under test links a librdkafka
    older than 2.2, the generation that trips over default-valued tagged fields."""
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs the Debian package)",
                    pytrace=False)
    out = subprocess.run([exe, "-V"], capture_output=True, timeout=10).stdout.decode()
    m = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", out)
    assert m, f"no librdkafka version in `kcat -V`: {out}"
    assert tuple(map(int, m.groups())) < (2, 2, 0), (
        f"kcat links librdkafka {'.'.join(m.groups())}; the old-client check needs < 2.2 "
        "(Debian bookworm's kcat 1.7.1 has 2.0.2)")


def test_kcat_lists_metadata(broker):
    topic = unique_topic("kcat-md")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    md = json.loads(kcat(broker, "-L", "-J"))
    brokers = [b["name"] for b in md["brokers"]]
    assert brokers == [broker.bootstrap], (
        f"kcat sees brokers {brokers}, expected the advertised {broker.bootstrap}")
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics, f"{topic} missing from kcat -L: {sorted(topics)}"
    parts = topics[topic]["partitions"]
    assert sorted(p["partition"] for p in parts) == list(range(PARTITIONS))
    for p in parts:
        assert p["leader"] == md["brokers"][0]["id"], f"partition {p} has no leader"


def test_kcat_keyed_produce_lands_each_key_in_one_partition(broker):
    topic = unique_topic("kcat-keys")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    keys = [f"user-{i}" for i in range(40)]
    lines = [f"{keys[i % len(keys)]}:{i}" for i in range(2000)]
    kcat(broker, "-P", "-t", topic, "-K:", "-X", "partitioner=murmur2_random",
         "-X", "acks=all", stdin=("\n".join(lines) + "\n").encode())

    rows = consume_lines(broker, topic)
    assert len(rows) == len(lines), f"kcat read {len(rows)} of {len(lines)} lines"
    assert sorted(int(v) for _, v, _, _ in rows) == list(range(len(lines)))
    seen = {}
    for key, value, partition, offset in rows:
        seen.setdefault(key, set()).add(partition)
        assert partition == java_partition(key.encode(), PARTITIONS), (
            f"kcat put {key} in partition {partition}, Java would use "
            f"{java_partition(key.encode(), PARTITIONS)}")
    assert all(len(ps) == 1 for ps in seen.values()), f"a key spans partitions: {seen}"
    for p in range(PARTITIONS):
        ordered = [(int(v), o) for k, v, pp, o in rows if pp == p]
        assert [o for _, o in ordered] == list(range(len(ordered))), f"partition {p} offsets"
        assert [v for v, _ in ordered] == sorted(v for v, _ in ordered), (
            f"partition {p} is not in produce order")


def test_kcat_reads_what_confluent_kafka_wrote(broker):
    topic = unique_topic("kcat-cross")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    reports = produce_all(producer(broker.bootstrap),
                          [{"topic": topic, "key": b"k%d" % i, "value": b"value-%d" % i}
                           for i in range(500)])
    written = sorted((r.key.decode(), r.value.decode(), r.partition, r.offset) for r in reports)
    assert sorted(consume_lines(broker, topic)) == written
