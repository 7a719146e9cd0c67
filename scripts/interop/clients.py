"""confluent-kafka helpers shared by the interop tests.

Thin, bounded wrappers: every wait has a deadline and every delivery or fetch
error is raised, never swallowed. Most reading uses assign() with explicit offsets
and stops at the high watermark that ListOffsets reported when the read began;
consume_group() reads as a member of a consumer group.
"""

import time
import uuid

from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic


def unique_topic(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def producer(bootstrap, **overrides):
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "partitioner": "murmur2_random",  # the Java client's default for keyed records
        "enable.idempotence": False,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
    }
    conf.update(overrides)
    return Producer(conf)


def consumer(bootstrap, **overrides):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": unique_topic("assign-only"),  # required by the client, never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
    }
    conf.update(overrides)
    return Consumer(conf)


def consume_group(servers, group, topic, want, timeout):
    """Reads `topic` in consumer group `group` until `want` records came, commits, and
    leaves: the (partition, key, value) of each record, in the order each partition gave
    them."""
    c = Consumer({"bootstrap.servers": servers, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen = []
    try:
        def read():
            for msg in c.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen.append((msg.partition(), msg.key(), msg.value()))
            return len(seen) >= want
        wait_for(read, timeout, f"{want} records in group {group}")
        c.commit(asynchronous=False)
    finally:
        c.close()
    return seen


def wait_for(predicate, timeout, what, interval=0.1):
    """Polls predicate() until it returns a truthy value; fails after timeout."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except KafkaException as e:
            last_error = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


def topic_partitions(bootstrap_or_client, topic, timeout=10):
    """Partition count from Metadata, or None if the broker does not know the topic."""
    client = (admin(bootstrap_or_client) if isinstance(bootstrap_or_client, str)
              else bootstrap_or_client)
    # All-topics Metadata: naming the topic would let the client ask the broker
    # to auto-create it.
    md = client.list_topics(timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return None
    return len(t.partitions)


def create_topic(bootstrap, topic, partitions, config=None, timeout=30):
    a = admin(bootstrap)
    futures = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=timeout)
    futures[topic].result(timeout)
    wait_for(lambda: topic_partitions(a, topic) == partitions, timeout,
             f"topic {topic} to show {partitions} partitions in Metadata")


class Delivery:
    __slots__ = ("key", "value", "partition", "offset", "timestamp", "error")

    def __init__(self, msg, err):
        self.key = msg.key()
        self.value = msg.value()
        self.partition = msg.partition()
        self.offset = msg.offset()
        self.timestamp = msg.timestamp()[1]
        self.error = err


def produce_all(prod, messages, timeout=120):
    """messages: iterable of dicts with key/value and optional partition/timestamp.
    Returns the delivery reports in acknowledgement order; raises on any error."""
    reports = []

    def on_delivery(err, msg):
        reports.append(Delivery(msg, err))

    deadline = time.monotonic() + timeout
    sent = 0
    for m in messages:
        while True:
            try:
                prod.produce(m.get("topic"), key=m.get("key"), value=m.get("value"),
                             partition=m.get("partition", -1), timestamp=m.get("timestamp", 0),
                             on_delivery=on_delivery)
                break
            except BufferError:
                prod.poll(0.05)
                if time.monotonic() > deadline:
                    raise AssertionError(f"producer queue stayed full; {len(reports)} of "
                                         f"{sent} messages acknowledged")
        sent += 1
        prod.poll(0)
    left = prod.flush(max(1.0, deadline - time.monotonic()))
    assert left == 0, f"{left} messages still unacknowledged after {timeout}s"
    errors = [r for r in reports if r.error is not None]
    assert not errors, f"{len(errors)} deliveries failed, first: {errors[0].error}"
    assert len(reports) == sent, f"{sent} produced but {len(reports)} delivery reports"
    return reports


class Record:
    __slots__ = ("partition", "offset", "key", "value", "timestamp", "headers")

    def __init__(self, msg):
        self.partition = msg.partition()
        self.offset = msg.offset()
        self.key = msg.key()
        self.value = msg.value()
        self.timestamp = msg.timestamp()[1]
        self.headers = msg.headers()

    def as_tuple(self):
        return (self.partition, self.offset, self.key, self.value, self.timestamp)

    def __repr__(self):
        return f"Record{self.as_tuple()}"


def watermarks(bootstrap, topic, partitions, timeout=10):
    c = consumer(bootstrap)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                for p in range(partitions)}
    finally:
        c.close()


def consume_all(bootstrap, topic, partitions, start=None, timeout=120, **overrides):
    """Reads every partition from `start` ({partition: offset, or OFFSET_END for
    nothing}, default the beginning) up to the high watermark it has when the
    read begins. `overrides` are consumer settings.
    Returns {partition: [Record, ...]} in fetch order."""
    c = consumer(bootstrap, **overrides)
    try:
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                 for p in range(partitions)}
        low = {p: marks[p][0] for p in marks}
        high = {p: marks[p][1] for p in marks}
        start = start or {}
        begin = {p: start.get(p, OFFSET_BEGINNING) for p in range(partitions)}
        c.assign([TopicPartition(topic, p, begin[p]) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        # Logical offsets: OFFSET_BEGINNING reads from the low watermark,
        # OFFSET_END (-1, "no record at or after the timestamp") reads nothing.
        position = {p: low[p] if begin[p] == OFFSET_BEGINNING else
                    high[p] if begin[p] == OFFSET_END else begin[p] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(position[p] < high[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise AssertionError(f"read of {topic} stalled: positions {position}, "
                                     f"high watermarks {high}")
            for msg in c.consume(num_messages=10000, timeout=0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"fetch error on {topic}: {msg.error()}")
                rec = Record(msg)
                out[rec.partition].append(rec)
                position[rec.partition] = rec.offset + 1
        return out
    finally:
        c.close()
