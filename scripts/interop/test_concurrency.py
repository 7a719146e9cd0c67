"""Several clients writing and reading the same partitions at once.

Goal: with SO_REUSEPORT, each client connection lands on some shard, usually
not the one owning the partition, so concurrent producers exercise the
cross-core hop and group commit at the same time. Nothing may be lost,
duplicated or reordered per producer, and offsets stay dense.

Method: four confluent-kafka producers (own connections) in threads, acks=all,
write 10,000 sequenced records each into three partitions while a tailing
reader follows along; then everything is read back and checked against the
delivery reports.
"""

import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from clients import consume_all, consumer, create_topic, produce_all, producer, unique_topic

PRODUCERS = 4
PER_PRODUCER = 10_000
PARTITIONS = 3


@pytest.mark.parametrize("broker", [{"cores": 2}], indirect=True)
def test_concurrent_producers_lose_and_reorder_nothing(broker):
    topic = unique_topic("concurrent")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    reports = {}
    errors = []

    def run(n):
        try:
            reports[n] = produce_all(
                producer(broker.bootstrap, **{"linger.ms": 2}),
                [{"topic": topic, "key": b"p%d-%d" % (n, i % 17), "value": b"p%d:%d" % (n, i)}
                 for i in range(PER_PRODUCER)], timeout=240)
        except BaseException as e:  # reported by the main thread
            errors.append((n, e))

    tailed = {p: [] for p in range(PARTITIONS)}

    def tail():
        c = consumer(broker.bootstrap)
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            deadline = time.monotonic() + 240
            seen = 0
            while seen < PRODUCERS * PER_PRODUCER and time.monotonic() < deadline:
                for m in c.consume(num_messages=10000, timeout=0.2):
                    if m.error():
                        errors.append(("tail", m.error()))
                        continue
                    tailed[m.partition()].append((m.offset(), m.value()))
                    seen += 1
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(PRODUCERS)]
    threads.append(threading.Thread(target=tail))
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a producer thread hung"
    assert not errors, f"producer failures: {errors}"

    acked = {(r.partition, r.offset): r.value for rs in reports.values() for r in rs}
    assert len(acked) == PRODUCERS * PER_PRODUCER, "two records were acknowledged at one offset"
    got = consume_all(broker.bootstrap, topic, PARTITIONS)
    for p, recs in got.items():
        assert [r.offset for r in recs] == list(range(len(recs))), f"partition {p} offsets"
        last = {}
        for r in recs:
            assert acked.get((p, r.offset)) == r.value, (
                f"partition {p} offset {r.offset} holds {r.value!r}, acked "
                f"{acked.get((p, r.offset))!r}")
            who, seq = r.value.split(b":")
            key = (who, r.key)
            assert int(seq) > last.get(key, -1), f"{r.key!r} reordered in partition {p}"
            last[key] = int(seq)
    assert sum(len(r) for r in got.values()) == PRODUCERS * PER_PRODUCER
    for p in range(PARTITIONS):
        assert tailed[p] == [(r.offset, r.value) for r in got[p]], (
            f"the reader that tailed partition {p} during the writes saw something else")
