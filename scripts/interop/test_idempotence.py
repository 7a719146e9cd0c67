"""Idempotent producers: the defaults of real clients work, and a retry never writes a
record twice.

Goal: kafka-python 3.x with its defaults (idempotence on, acks=all) produces and reads
back; kcat and confluent-kafka with enable.idempotence=true do too; and when answers are
lost on the way back, so that clients resend batches the node already stored, every record
is stored exactly once and in order.

Method: the retry test puts a small TCP proxy (proxy.py, 127.0.0.1) between
confluent-kafka and the node, which advertises the proxy's address so that every
connection goes through it. The proxy cuts the connection right after forwarding some
Produce requests (the node appends them, their answers are lost), drops some Produce
answers and cuts, and cuts others half-way through the answer, at random (seeded, the seed
is printed). 100,000 keyed records go to 3 partitions; the read-back must hold each record
once, per key in the order produced, at dense offsets. The node logs each batch it refused
as a duplicate (debug level of broker::partition), and the test reports their number,
which must not be zero: otherwise no retry happened and nothing was tested.
"""

import os
import random
import shutil
import subprocess
import time

import pytest

from clients import consume_all, create_topic, produce_all, producer, unique_topic
from proxy import ChaosProxy
from test_confluent_kafka import KEYS, PARTITIONS, PER_KEY, check_partition_contents, keyed_messages

DUPLICATE_LINE = "duplicate batch not written again"


@pytest.fixture
def duplicates_logged(monkeypatch):
    """Brokers started from here on log each duplicate batch they refused."""
    base = os.environ.get("RUST_LOG", "info")
    monkeypatch.setenv("RUST_LOG", f"{base},broker::partition=debug")


def test_kafka_python_with_its_defaults_produces_and_consumes(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique_topic("kafka-python")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        assert prod.config["enable_idempotence"], "idempotence is kafka-python's default"
        futures = [prod.send(topic, key=b"k%d" % (i % 10), value=b"v%d" % i)
                   for i in range(2000)]
        prod.flush(timeout=60)
        acked = [f.get(timeout=30) for f in futures]
        producer_id = prod._transaction_manager.producer_id_and_epoch.producer_id
        assert producer_id >= 0, "the producer got an id from InitProducerId"
    finally:
        prod.close(timeout=10)
    written = {(m.partition, m.offset): b"v%d" % i for i, m in enumerate(acked)}
    assert len(written) == 2000, "every record has its own offset"

    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        cons.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        read = {}
        deadline = time.monotonic() + 60
        while len(read) < len(written) and time.monotonic() < deadline:
            for batch in cons.poll(timeout_ms=500).values():
                for record in batch:
                    read[(record.partition, record.offset)] = record.value
    finally:
        cons.close()
    assert read == written, f"read {len(read)} records, {len(written)} were acknowledged"


def test_kcat_with_idempotence_produces_and_consumes(broker):
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs the Debian package)",
                    pytrace=False)
    topic = unique_topic("kcat-idempotent")
    create_topic(broker.bootstrap, topic, 1)
    lines = "".join(f"line-{i}\n" for i in range(500))
    produced = subprocess.run([exe, "-b", broker.bootstrap, "-P", "-t", topic,
                               "-X", "enable.idempotence=true"],
                              input=lines.encode(), capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")[-2000:]
    consumed = subprocess.run([exe, "-b", broker.bootstrap, "-C", "-t", topic, "-o",
                               "beginning", "-e", "-q", "-f", "%s\n"],
                              capture_output=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")[-2000:]
    assert consumed.stdout.decode() == lines


def test_100k_idempotent_records_survive_lost_answers_exactly_once(broker_factory,
                                                                   duplicates_logged):
    seed = random.randrange(1 << 32)
    print(f"chaos proxy seed {seed}")
    with ChaosProxy(seed=seed) as proxy:
        through_proxy = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        broker = broker_factory(settings={"advertised.listeners": through_proxy})
        if broker.settings["advertised.listeners"] != through_proxy:
            # The first port was taken and the broker moved (and advertised its own).
            broker.settings["advertised.listeners"] = through_proxy
            broker.restart()
        proxy.target = ("127.0.0.1", broker.port)
        topic = unique_topic("idempotent")
        create_topic(broker.bootstrap, topic, PARTITIONS)
        prod = producer(proxy.bootstrap, **{
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            # About 200 Produce requests, so that some dozen answers are lost.
            "batch.num.messages": 500,
            "message.timeout.ms": 240000,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 200,
        })
        proxy.faults = True
        reports = produce_all(prod, keyed_messages(topic), timeout=300)
        proxy.faults = False
        prod.flush(30)
        assert len(reports) == KEYS * PER_KEY
        by_partition = consume_all(broker.bootstrap, topic, PARTITIONS, timeout=120)
        total = check_partition_contents(by_partition, KEYS * PER_KEY)
        acked = {(r.partition, r.offset) for r in reports}
        assert len(acked) == total, "each record was acknowledged at its own offset"
        refused = broker.log_text().count(DUPLICATE_LINE)
        print(f"proxy: {proxy.stats}; the node refused {refused} duplicate batches")
        assert proxy.stats["lost_answers"] > 0, f"the proxy lost no answer: {proxy.stats}"
        assert refused > 0, f"no batch was sent twice (seed {seed}): nothing was tested"
