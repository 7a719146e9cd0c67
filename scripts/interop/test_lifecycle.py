"""Starting, configuring and stopping a node the way a user does.

Goal: `ringlog serve` honours Kafka's config names from a properties file and
from `--set` (which wins), runs with no arguments on 127.0.0.1:9092 with data
under ./data, shuts down cleanly on SIGINT and SIGTERM (exit 0, promptly), and
keeps topics, their configs and their data across a clean restart.

Method: real processes and real clients; each wait has a deadline.
"""

import signal
import socket
import subprocess
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from clients import (admin, consume_all, create_topic, produce_all, producer, topic_partitions,
                     unique_topic, wait_for)
from conftest import ringlog_bin


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly_and_restart_keeps_everything(broker_factory, sig):
    broker = broker_factory(cores=2)
    topic = unique_topic("life")
    create_topic(broker.bootstrap, topic, 3, config={"retention.ms": "7200000"})
    reports = produce_all(producer(broker.bootstrap, acks="1"),
                          [{"topic": topic, "key": b"k%d" % i, "value": b"v%d" % i}
                           for i in range(3000)])
    broker.stop_cleanly(sig)
    broker.start()

    assert topic_partitions(broker.bootstrap, topic) == 3, "topic lost across restart"
    res = ConfigResource(ResourceType.TOPIC, topic)
    a = admin(broker.bootstrap)  # keep the client alive until its future resolves
    entries = a.describe_configs([res])[res].result(30)
    assert entries["retention.ms"].value == "7200000", "topic config lost across restart"
    got = consume_all(broker.bootstrap, topic, 3)
    assert sorted((r.partition, r.offset, r.value) for rs in got.values() for r in rs) == sorted(
        (r.partition, r.offset, r.value) for r in reports), (
        f"acks=1 data written before a clean {sig.name} shutdown must all be there")


def test_config_file_with_set_overrides(broker_factory, tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("# a Kafka-style properties file\n"
                     "num.partitions=5\n"
                     "auto.create.topics.enable=true\n"
                     "message.max.bytes=123456\n")
    broker = broker_factory(settings={"num.partitions": "2"},
                            extra_args=["--config", str(props)])
    topic = unique_topic("cfgfile")
    produce_all(producer(broker.bootstrap), [{"topic": topic, "key": b"k", "value": b"v"}])
    assert topic_partitions(broker.bootstrap, topic) == 2, "--set num.partitions must win"
    a = admin(broker.bootstrap)
    node = list(a.list_topics(timeout=10).brokers)[0]
    res = ConfigResource(ResourceType.BROKER, str(node))
    assert a.describe_configs([res])[res].result(30)["message.max.bytes"].value == "123456", (
        "message.max.bytes from the properties file was not applied")


def test_invalid_config_value_fails_fast(tmp_path):
    p = subprocess.run([str(ringlog_bin()), "serve", "--cores", "1",
                        "--set", f"log.dirs={tmp_path}", "--set", "log.io.mode=bogus",
                        "--set", "listeners=PLAINTEXT://127.0.0.1:1"],
                       capture_output=True, timeout=30, cwd=tmp_path)
    assert p.returncode != 0, "log.io.mode=bogus was accepted"
    assert b"log.io.mode" in p.stderr, f"the error should name the key: {p.stderr[-500:]!r}"


def test_serve_without_arguments_uses_9092_and_data_dir(tmp_path):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 9092))
        except OSError:
            pytest.skip("port 9092 is taken on this machine")
    log = open(tmp_path / "stderr", "wb")
    proc = subprocess.Popen([str(ringlog_bin()), "serve", "--cores", "1"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", 9092), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "no listener on 127.0.0.1:9092 in 30s"
                time.sleep(0.05)
        topic = unique_topic("default")
        create_topic("127.0.0.1:9092", topic, 1)
        produce_all(producer("127.0.0.1:9092"), [{"topic": topic, "key": b"k", "value": b"v"}])
        wait_for(lambda: (tmp_path / "data").is_dir() and any((tmp_path / "data").iterdir()), 10,
                 "the log under ./data")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


def test_shutdown_does_not_wait_for_idle_or_parked_clients(broker_factory):
    """SIGTERM with an idle connection, a half-sent request and a consumer whose
    fetch is parked for 10 s still exits promptly and cleanly."""
    import kafka_wire as wire
    from confluent_kafka import TopicPartition

    from clients import consumer

    broker = broker_factory(cores=2)
    topic = unique_topic("parked")
    create_topic(broker.bootstrap, topic, 2)
    idle = wire.connect(broker.port)
    half = wire.connect(broker.port)
    half.sendall(wire.api_versions_request(0, 1)[:7])
    c = consumer(broker.bootstrap, **{"fetch.wait.max.ms": 10000})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(2)])
        assert c.consume(num_messages=1, timeout=1.0) == []
        started = time.monotonic()
        broker.stop_cleanly(signal.SIGTERM)
        assert time.monotonic() - started < 10, "shutdown waited for clients"
    finally:
        idle.close()
        half.close()
        c.close()
