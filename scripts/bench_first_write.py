#!/usr/bin/env python3
"""How long a new replicated topic takes to acknowledge its first acks=all writes.

Against a running cluster (scripts/cluster.sh, or any Kafka-API cluster of three brokers):
creates TOPICS topics in turn, each with 3 partitions, 3 replicas and
min.insync.replicas=2, and times each from its CreateTopics call to the acknowledgement of
one acks=all record on every partition (confluent-kafka, retries on). Prints the times
sorted, in milliseconds.

    scripts/bench_first_write.py [TOPICS]          default 10
    BOOTSTRAP=127.0.0.1:9092 scripts/bench_first_write.py
"""

import os
import sys
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    topics = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    bootstrap = os.environ.get("BOOTSTRAP", "127.0.0.1:9092")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Short retry backoffs, so the client's own pauses do not hide the brokers'.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "topic.metadata.refresh.interval.ms": 100,
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 10,
        }
    )
    run = uuid.uuid4().hex[:8]
    took = []
    for i in range(topics):
        name = f"first-write-{run}-{i}"
        started = time.monotonic()
        created = admin.create_topics([NewTopic(name, 3, 3, config={"min.insync.replicas": "2"})])
        created[name].result(timeout=30)
        delivered = {}
        for partition in range(3):
            producer.produce(
                name,
                b"first",
                partition=partition,
                on_delivery=lambda error, _, p=partition: delivered.__setitem__(
                    p, (error, time.monotonic())
                ),
            )
        deadline = started + 60
        while len(delivered) < 3 and time.monotonic() < deadline:
            producer.poll(0.005)
        errors = [error for error, _ in delivered.values() if error]
        if len(delivered) < 3 or errors:
            sys.exit(f"{name}: not every first write was acknowledged: {errors or delivered}")
        took.append(max(at for _, at in delivered.values()) - started)
    print("first acks=all write on every partition of a new topic, ms:",
          " ".join(f"{t * 1000:.0f}" for t in sorted(took)))


if __name__ == "__main__":
    main()
