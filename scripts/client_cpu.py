#!/usr/bin/env python3
"""A real client's produce load and what it costs the node: librdkafka (confluent-kafka)
sends N messages to a topic of P partitions, round robin, and the script reports the
client's rate and the node's CPU (utime + stime of its process, from /proc) per million
messages sent in the measured part.

    scripts/client_cpu.py --bootstrap-server 127.0.0.1:9092 --broker-pid PID \
        [--acks all] [--partitions 3] [--messages 1000000] [--message-size 100] \
        [--linger-ms 5] [--topic T] [--json]

This is the shape of load librdkafka's applications put on a broker (batches built by
linger.ms and batch.size, several partitions per request), beside ringlog-bench's fixed
batches. The client runs in this process: pin it away from the node (`taskset -c 1`). The
topic is created when missing; a warm-up of 2 % of the messages (at least 1000) goes first
and is not measured. Values are random bytes, so compression or deduplication gains nothing.
"""

import argparse
import json
import os
import sys
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (the fields after the command name)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ensure_topic(bootstrap: str, topic: str, partitions: int):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


def send(producer: Producer, topic: str, value: bytes, partitions: int, count: int) -> int:
    """Sends `count` messages round robin over the partitions; returns the failures."""
    failures = 0

    def delivered(err, _msg):
        nonlocal failures
        if err is not None:
            failures += 1

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise SystemExit("messages left undelivered after 60 s")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--broker-pid", type=int, required=True)
    parser.add_argument("--topic", default="client-cpu")
    parser.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--message-size", type=int, default=100)
    parser.add_argument("--linger-ms", type=float, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.messages <= 0 or args.partitions <= 0 or args.message_size <= 0:
        parser.error("--messages, --partitions and --message-size must be positive")

    ensure_topic(args.bootstrap_server, args.topic, args.partitions)
    producer = Producer({
        "bootstrap.servers": args.bootstrap_server,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "enable.idempotence": False,
    })
    value = os.urandom(args.message_size)
    warmup = max(1000, args.messages // 50)
    send(producer, args.topic, value, args.partitions, warmup)

    cpu_before, started = process_cpu_seconds(args.broker_pid), time.monotonic()
    failures = send(producer, args.topic, value, args.partitions, args.messages)
    elapsed = time.monotonic() - started
    cpu = process_cpu_seconds(args.broker_pid) - cpu_before

    result = {
        "messages": args.messages,
        "failed": failures,
        "seconds": round(elapsed, 3),
        "msgs_per_sec": round(args.messages / elapsed),
        "acks": args.acks,
        "partitions": args.partitions,
        "message_size": args.message_size,
        "linger_ms": args.linger_ms,
        "broker_cpu_seconds": round(cpu, 3),
        "broker_cpu_seconds_per_million": round(cpu / (args.messages / 1e6), 4),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['msgs_per_sec'] / 1e6:.3f} M msgs/s from librdkafka "
              f"(acks={args.acks}, linger.ms={args.linger_ms:g}, {args.partitions} partitions, "
              f"{args.message_size} B), {failures} failed; node {cpu:.2f} CPU-s, "
              f"{result['broker_cpu_seconds_per_million']:.3f} CPU-s per million messages")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
