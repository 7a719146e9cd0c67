"""What a client can make the node hold is bounded, and normal clients are served while
others misbehave.

Goal: the memory bounds of README's configuration table, as a client sees them.
- Clients that pipeline large fetches and never read the answers: the answers a shard
  holds stay under `queued.max.response.bytes`, one connection holds at most a quarter of
  it, a connection that reads nothing for `connections.max.write.ms` is closed, and a
  normal consumer of the same partition keeps getting records all along.
- A flood of connections: an idle connection costs a few KiB, a frame whose length prefix
  promises a megabyte and sends ten bytes costs what arrived plus one small read buffer,
  and after the flood leaves, the memory goes back to the system within seconds.

Method: a real node; the node's resident memory (VmRSS from /proc) is sampled while raw
sockets misbehave, next to a confluent-kafka consumer or a plain request that must keep
being answered. The sizes are those of the CI machine; the bounds are the configured
budgets plus a fixed allowance, far below what the node held without them (gigabytes).
"""

import os
import resource
import socket
import threading
import time

from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

import kafka_wire as wire
from clients import consumer, create_topic, produce_all, producer, unique_topic

MIB = 1 << 20
KIB = 1 << 10


def socket_count(broker) -> int:
    """Sockets the node has open: its listener and its connections."""
    fds = Path(f"/proc/{broker.proc.pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


def rss_bytes(broker) -> int:
    with open(f"/proc/{broker.proc.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS line")


RESPONSE_BUDGET = 64 * MIB
# The batch cache of each shard, set so that the bound below does not depend on the memory.
CACHE_BYTES = 64 * MIB
SHARDS = 2
NON_READERS = 20
FETCHES_EACH = 50


def test_clients_that_never_read_their_answers_are_bounded_and_closed(broker_factory):
    broker = broker_factory(cores=SHARDS, settings={
        "queued.max.response.bytes": str(RESPONSE_BUDGET),
        "connections.max.write.ms": "5000",
        "log.cache.max.bytes": str(CACHE_BYTES),
    })
    topic = unique_topic("unread")
    create_topic(broker.bootstrap, topic, 1)
    value = b"v" * 1000
    produce_all(producer(broker.bootstrap, acks="1", **{"linger.ms": 20}),
                ({"topic": topic, "partition": 0, "value": value} for _ in range(150_000)),
                timeout=120)
    baseline = rss_bytes(broker)
    sockets_before = socket_count(broker)

    non_readers = []
    for index in range(NON_READERS):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", broker.port))
        s.sendall(b"".join(wire.fetch_v4_request(topic, 0, 0, index * 1000 + c)
                           for c in range(FETCHES_EACH)))
        non_readers.append(s)

    got = []  # (seconds since the attack began, records so far)
    started = time.monotonic()

    def read_normally():
        c = consumer(broker.bootstrap)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count = 0
        while time.monotonic() - started < 15:
            count += sum(1 for m in c.consume(num_messages=1000, timeout=0.2) if not m.error())
            got.append((time.monotonic() - started, count))
        c.close()

    reader = threading.Thread(target=read_normally)
    reader.start()
    peak = baseline
    while reader.is_alive():
        peak = max(peak, rss_bytes(broker))
        time.sleep(0.1)
    reader.join()

    # Answer budgets of both shards, the batch caches' share the reads may fill, and room
    # for everything else; without the budgets the node held several GB here.
    allowed = SHARDS * RESPONSE_BUDGET + SHARDS * CACHE_BYTES + 96 * MIB
    assert peak - baseline <= allowed, (
        f"RSS grew {(peak - baseline) / MIB:.0f} MiB (allowed {allowed / MIB:.0f} MiB)")
    early = max((n for t, n in got if t <= 4.0), default=0)
    assert early > 0, f"the normal consumer got nothing while the others held their answers: {got[:5]}"
    assert got[-1][1] >= 20_000, f"the normal consumer read only {got[-1][1]} records in 15 s"
    # The node closes every connection that read nothing for connections.max.write.ms (the
    # clients still read nothing: reading would make them readers).
    deadline = time.monotonic() + 20
    while socket_count(broker) > sockets_before:
        assert time.monotonic() < deadline, (
            f"{socket_count(broker) - sockets_before} connections that read nothing are "
            f"still open")
        time.sleep(0.2)
    for s in non_readers:
        s.close()


FLOOD = 3000


def test_a_flood_of_connections_and_half_frames_costs_little_and_leaves_nothing(broker_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FLOOD + 1024
    if soft < wanted:
        # The node inherits the limit; as root the hard limit can be raised too.
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(wanted, soft), max(wanted, hard)))
    broker = broker_factory(cores=SHARDS)
    time.sleep(0.5)
    baseline = rss_bytes(broker)

    sockets = []
    for index in range(FLOOD):
        s = wire.connect(broker.port)
        s.sendall(wire.api_versions_request(0, index))
        sockets.append(s)
    for s in sockets:
        wire.read_response(s)
    time.sleep(1.0)
    idle = rss_bytes(broker)
    per_connection = (idle - baseline) / FLOOD
    assert per_connection <= 16 * KIB, f"an idle connection costs {per_connection / KIB:.1f} KiB"

    # Half of them start a frame that says 1 MiB and send ten bytes of it.
    promise = (1 << 20).to_bytes(4, "big") + b"\x00\x12\x00\x00\x00\x00"
    for s in sockets[::2]:
        s.sendall(promise)
    time.sleep(1.0)
    partial = rss_bytes(broker)
    per_half_frame = (partial - idle) / (FLOOD / 2)
    assert per_half_frame <= 16 * KIB, f"a frame of ten bytes costs {per_half_frame / KIB:.1f} KiB"
    # Everyone else is served meanwhile.
    corr, _ = wire.roundtrip(broker.port, wire.metadata_v1_request(None, 77))
    assert corr == 77

    for s in sockets:
        s.close()
    deadline = time.monotonic() + 15
    while rss_bytes(broker) > baseline + 32 * MIB:
        assert time.monotonic() < deadline, (
            f"RSS still {(rss_bytes(broker) - baseline) / MIB:.0f} MiB above the start "
            f"15 s after the flood left")
        time.sleep(0.5)
