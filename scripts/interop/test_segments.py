"""Segment roll by size, on disk and through restarts.

Goal: a partition larger than log.segment.bytes is split into segment files
named by their base offset in 20 digits (as Kafka names them), and reads by
offset and by timestamp land in the right segment before and after a restart.

Method: a node with log.segment.bytes=65536 takes 20,000 records of ~100 bytes
in one partition (about 30 segments); the test lists the partition's folder,
checks the names, and reads from offsets at and around segment boundaries.
"""

import re
import time

from confluent_kafka import TopicPartition

from clients import consume_all, consumer, create_topic, produce_all, producer, unique_topic

SEGMENT_BYTES = 65536
COUNT = 20_000


def segment_base_offsets(broker, topic, partition=0):
    folders = [d for d in broker.data_dir.rglob(f"{topic}-{partition}") if d.is_dir()]
    assert len(folders) == 1, f"expected one folder for {topic}-{partition}, found {folders}"
    names = sorted(f.name for f in folders[0].iterdir() if f.name.endswith(".log"))
    for n in names:
        assert re.fullmatch(r"\d{20}\.log", n), f"segment file {n!r} is not <20 digits>.log"
    return [int(n[:20]) for n in names]


def test_segments_roll_by_size_and_reads_cross_them(broker_factory):
    broker = broker_factory(settings={"log.segment.bytes": str(SEGMENT_BYTES)})
    topic = unique_topic("segments")
    create_topic(broker.bootstrap, topic, 1)
    base = int(time.time() * 1000) - 3_600_000
    produce_all(producer(broker.bootstrap, **{"linger.ms": 5, "batch.size": 16384}),
                [{"topic": topic, "value": b"%08d" % i + b"y" * 92, "partition": 0,
                  "timestamp": base + i} for i in range(COUNT)])

    bases = segment_base_offsets(broker, topic)
    expected_segments = COUNT * 100 // SEGMENT_BYTES
    assert len(bases) >= expected_segments // 2, (
        f"{len(bases)} segments for ~{COUNT * 100} bytes with log.segment.bytes={SEGMENT_BYTES}")
    assert bases[0] == 0 and bases == sorted(set(bases))

    for attempt in ("before restart", "after restart"):
        everything = consume_all(broker.bootstrap, topic, 1)[0]
        assert [r.offset for r in everything] == list(range(COUNT)), attempt
        for b in bases[1:4] + bases[-2:]:
            for start in (b - 1, b, b + 1):
                got = consume_all(broker.bootstrap, topic, 1, start={0: start})[0]
                assert got and got[0].offset == start and got[0].value[:8] == b"%08d" % start, (
                    f"{attempt}: read from offset {start} (segment boundary {b})")
                assert len(got) == COUNT - start
        c = consumer(broker.bootstrap)
        try:
            for b in bases[1:4]:
                found = c.offsets_for_times([TopicPartition(topic, 0, base + b)], timeout=10)
                assert found[0].offset == b, (
                    f"{attempt}: timestamp of record {b} (first of a segment) maps to "
                    f"offset {found[0].offset}")
        finally:
            c.close()
        if attempt == "before restart":
            broker.restart()
            assert segment_base_offsets(broker, topic)[:len(bases)] == bases


def test_segments_roll_by_time(broker_factory):
    """log.roll.ms: the next append after the active segment has aged rolls it."""
    broker = broker_factory(settings={"log.roll.ms": "300"})
    topic = unique_topic("roll-ms")
    create_topic(broker.bootstrap, topic, 1)
    prod = producer(broker.bootstrap)
    deadline = time.monotonic() + 20
    written = 0
    while len(segment_base_offsets(broker, topic)) < 3:
        assert time.monotonic() < deadline, (
            f"{written} appends over 20s with log.roll.ms=300 made "
            f"{len(segment_base_offsets(broker, topic))} segments")
        produce_all(prod, [{"topic": topic, "value": b"t%d" % written, "partition": 0}])
        written += 1
        time.sleep(0.1)
    got = consume_all(broker.bootstrap, topic, 1)[0]
    assert [r.value for r in got] == [b"t%d" % i for i in range(written)]
