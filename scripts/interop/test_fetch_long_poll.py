"""A waiting Fetch is answered when data arrives, not when its timer runs out.

Goal: tailing consumers see new records at once. A Fetch with max.wait.ms and
min.bytes=1 that finds nothing must park and be answered the moment a produce
makes enough data available, on whichever shard owns the partition.

Method: a confluent-kafka consumer tails every partition of a topic with
fetch.wait.max.ms=10000, so a broker that only answers on the timer delivers
each record after a uniformly random 0-10 s wait. Five records, one at a time,
each to a different partition, must each arrive within 2 s of its
acknowledgement: a timer-only broker passes that by chance with probability
about 0.2^5.
"""

import time

from confluent_kafka import TopicPartition

from clients import consumer, create_topic, produce_all, producer, unique_topic, watermarks

WAIT_MAX_MS = 10_000
ARRIVAL_MAX_S = 2.0
PARTITIONS = 3


def test_parked_fetch_is_answered_on_arrival(broker):
    topic = unique_topic("tail")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ends = watermarks(broker.bootstrap, topic, PARTITIONS)
    c = consumer(broker.bootstrap, **{"fetch.wait.max.ms": WAIT_MAX_MS, "fetch.min.bytes": 1})
    prod = producer(broker.bootstrap, acks="1", **{"linger.ms": 0})
    try:
        c.assign([TopicPartition(topic, p, ends[p][1]) for p in range(PARTITIONS)])
        # Let the first fetches reach the broker and park there.
        assert c.consume(num_messages=1, timeout=1.0) == [], "nothing was produced yet"
        for i in range(5):
            partition = i % PARTITIONS
            produce_all(prod, [{"topic": topic, "value": b"tick-%d" % i, "partition": partition}])
            acked = time.monotonic()
            got = []
            while not got and time.monotonic() - acked < WAIT_MAX_MS / 1000 + 5:
                got = [m for m in c.consume(num_messages=1, timeout=0.1) if not m.error()]
            waited = time.monotonic() - acked
            assert got, f"record {i} never arrived"
            assert got[0].value() == b"tick-%d" % i and got[0].partition() == partition
            assert waited < ARRIVAL_MAX_S, (
                f"record {i} on partition {partition} arrived {waited:.2f}s after its ack: "
                f"the parked fetch waited for its {WAIT_MAX_MS} ms timer")
    finally:
        c.close()
