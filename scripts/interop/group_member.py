"""A consumer-group member as a separate process, for tests that kill one.

Usage: group_member.py BOOTSTRAP GROUP TOPIC OUT_FILE
Subscribes to TOPIC in GROUP (confluent-kafka, session.timeout.ms=6000) and, for
every record, appends "partition offset" to OUT_FILE and commits that offset
synchronously before reading on (at-least-once, one record at a time). Each
assignment change is appended as "assigned p,p,...". Runs until killed or for
120 s at most.
"""

import sys
import time

from confluent_kafka import Consumer


def main():
    bootstrap, group, topic, out_path = sys.argv[1:5]
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
    })
    with open(out_path, "a", buffering=1) as out:
        def on_assign(_consumer, partitions):
            out.write("assigned " + ",".join(str(p.partition) for p in partitions) + "\n")

        consumer.subscribe([topic], on_assign=on_assign)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out.write(f"{msg.partition()} {msg.offset()}\n")
            consumer.commit(message=msg, asynchronous=False)
    consumer.close()


if __name__ == "__main__":
    main()
