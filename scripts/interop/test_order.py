"""One producer's messages are stored in the order it sent them, with many
requests in flight, on every partition.

Goal: Kafka's per-partition order under pipelining. A producer with
max.in.flight.requests.per.connection > 1 and no retries relies on the broker
applying one connection's requests to a partition in the order they arrived.

Method: a topic with 4 partitions on a two-shard node, so some partitions are
owned by the shard that accepted the producer's connection and some by the
other one (the cross-core path). For each partition in turn, one
confluent-kafka producer with librdkafka's defaults except linger.ms=0,
acks=1 and retries=0 (so no resend can reorder anything) sends 1000 messages
of 10 KB and then 1000 of 500 KB, each value starting with its sequence
number: librdkafka keeps many Produce requests in flight on one connection,
and the large ones fill the partition's write queue. Then the partition is read
back from offset 0, and the sequence numbers must be 0, 1, 2, ... in offset
order. No delivery may fail.
"""

from clients import consume_all, create_topic, produce_all, producer, unique_topic

PARTITIONS = 4
SMALL_COUNT, SMALL_BYTES = 1000, 10_000
LARGE_COUNT, LARGE_BYTES = 1000, 500_000


def value(sequence: int, size: int) -> bytes:
    head = b"%08d:" % sequence
    return head + b"v" * (size - len(head))


def test_one_producer_keeps_its_order_on_every_partition(broker):
    topic = unique_topic("order")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    for partition in range(PARTITIONS):
        sizes = [SMALL_BYTES] * SMALL_COUNT + [LARGE_BYTES] * LARGE_COUNT
        prod = producer(broker.bootstrap, **{"acks": "1", "linger.ms": 0, "retries": 0,
                                             "queue.buffering.max.kbytes": 1 << 20})
        reports = produce_all(prod, ({"topic": topic, "partition": partition,
                                      "value": value(sequence, size)}
                                     for sequence, size in enumerate(sizes)), timeout=300)
        assert len(reports) == len(sizes)
    log = consume_all(broker.bootstrap, topic, PARTITIONS, timeout=300)
    for partition in range(PARTITIONS):
        stored = [int(r.value[:8]) for r in log[partition]]
        inversions = [(r.offset, s) for r, s in zip(log[partition], stored) if s != r.offset]
        assert not inversions, (
            f"partition {partition}: {len(inversions)} messages out of send order; first "
            f"(offset, sequence stored there): {inversions[:5]}")
        assert len(stored) == SMALL_COUNT + LARGE_COUNT
