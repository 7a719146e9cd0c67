"""kill -9 during a produce loop loses no acknowledged message, and takes back
nothing a consumer saw.

Goal: the single-node durability and visibility promises. A broker answers
acks=1 once the batch's write has completed and acks=all once it is synced, so
after `kill -9` (a crash of the process, not of the machine) and a restart on
the same data dir, every message a client saw acknowledged must be in the log
exactly once, at the partition and offset it was acknowledged with, in produce
order per key. Consumers see only what a crash cannot take back, so every
record a consumer read before the kill must be at the same offset with the
same bytes afterwards. The recovered log must keep accepting and serving
writes.

Method: crash_producer.py (retries off, so no resend can duplicate or
reorder) and crash_consumer.py run as separate processes so the broker can be
killed under them; each appends every acknowledgement or record to a file the
moment it arrives. The test waits until acknowledgements are flowing, SIGKILLs
the broker at a random moment, lets both drain, restarts the broker and
compares the whole log with both files. Several crash rounds per case, so
later crashes hit a log that was itself recovered; acks=all and acks=1; one
and three partitions; both log.io.mode values.
"""

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients import consume_all, create_topic, produce_all, producer, unique_topic

HERE = Path(__file__).resolve().parent
ACKS_BEFORE_KILL = 2000
# The kill comes at a random moment this long after acknowledgements began.
RUN_BEFORE_KILL_S = (0.5, 2.5)
WAIT_FOR_ACKS_S = 60
PRODUCER_SECONDS_MAX = 90


def read_acks(path: Path):
    """[(key, seq, partition, offset)] from complete lines of the ack file."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")[:-1]  # a line without its newline was not finished
    rows = []
    for line in lines:
        key, seq, partition, offset = line.split()
        rows.append((key, int(seq), int(partition), int(offset)))
    return rows


def read_seen(path: Path):
    """[(partition, offset, value)] from complete lines of the consumer's file."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().split("\n")[:-1]:
        partition, offset, value = line.split(" ", 2)
        rows.append((int(partition), int(offset), value))
    return rows


def crash_round(broker, topic, partitions, load, paths, first_seq: int):
    """Starts the producer and the consumer, kills the broker under them at a random
    moment, waits for both."""
    ack_path, seen_path, log_path = paths
    acks, rate = load
    before = len(read_acks(ack_path))
    run_before_kill_s = random.uniform(*RUN_BEFORE_KILL_S)
    with open(log_path, "ab") as log:
        producer_proc = subprocess.Popen(
            [sys.executable, str(HERE / "crash_producer.py"), broker.bootstrap, topic,
             str(ack_path), str(PRODUCER_SECONDS_MAX), str(first_seq), acks, str(rate)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        consumer_proc = subprocess.Popen(
            [sys.executable, str(HERE / "crash_consumer.py"), broker.bootstrap, topic,
             str(partitions), str(seen_path), str(PRODUCER_SECONDS_MAX)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    procs = (producer_proc, consumer_proc)
    try:
        started = time.monotonic()
        deadline = started + WAIT_FOR_ACKS_S
        while True:
            acked = len(read_acks(ack_path)) - before
            if acked >= ACKS_BEFORE_KILL and time.monotonic() - started >= run_before_kill_s:
                break
            for proc in procs:
                assert proc.poll() is None, (f"a client exited early after {acked} acks:\n"
                                             f"{log_path.read_text()[-2000:]}")
            assert time.monotonic() < deadline, (
                f"only {acked} acks in {WAIT_FOR_ACKS_S}s; client log:\n"
                f"{log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        broker.kill9()
        for proc in procs:
            assert proc.wait(60) == 0, f"a client failed:\n{log_path.read_text()[-2000:]}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def check_log_against_seen(by_partition, seen):
    """Every record a consumer saw is still there, at its offset, with its bytes."""
    taken_back = []
    for partition, offset, value in seen:
        records = by_partition[partition]
        now = records[offset].value.decode() if offset < len(records) else None
        if now != value:
            taken_back.append((partition, offset, value, now))
    assert not taken_back, (f"{len(taken_back)} of {len(seen)} records a consumer saw were "
                            f"taken back by the crash (partition, offset, seen, now): "
                            f"{taken_back[:5]}")


def check_log_against_acks(by_partition, acks):
    where = {}
    for p, recs in by_partition.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(recs))), (
            f"partition {p}: offsets after recovery are not contiguous from 0")
        last_seq = {}
        for r in recs:
            key, seq = r.value.decode().split(":")
            seq = int(seq)
            assert r.key.decode() == key, f"partition {p} offset {r.offset}: key/value mismatch"
            assert seq > last_seq.get(key, -1), (
                f"partition {p} offset {r.offset}: {key} seq {seq} after {last_seq.get(key)} "
                "(duplicate or reordered record)")
            last_seq[key] = seq
            where.setdefault((key, seq), []).append((p, r.offset))
    lost = [a for a in acks if (a[0], a[1]) not in where]
    assert not lost, f"{len(lost)} of {len(acks)} acknowledged messages lost, first {lost[:5]}"
    doubled = [a for a in acks if len(where[(a[0], a[1])]) != 1]
    assert not doubled, f"acknowledged messages stored more than once: {doubled[:5]}"
    moved = [a for a in acks if where[(a[0], a[1])][0] != (a[2], a[3])]
    assert not moved, ("acknowledged messages found at another partition/offset than acked "
                       f"(key, seq, partition, offset): {moved[:5]} now at "
                       f"{[where[(a[0], a[1])] for a in moved[:5]]}")


@pytest.mark.parametrize("io_mode", ["direct", "buffered"])
# acks=1 runs at full speed: the crash must find batches acknowledged while their writes
# are still queued or in flight, which a slow producer rarely leaves behind.
@pytest.mark.parametrize("acks,partitions,rounds,rate", [
    ("all", 1, 2, 20_000),
    ("all", 3, 2, 20_000),
    ("1", 3, 10, 1_000_000),
])
def test_kill9_loses_no_acknowledged_message(broker_factory, tmp_path, io_mode, acks, partitions,
                                             rounds, rate):
    broker = broker_factory(io_mode=io_mode, cores=2)
    topic = unique_topic(f"crash-{io_mode}-{acks}-{partitions}")
    create_topic(broker.bootstrap, topic, partitions)
    ack_path, seen_path = tmp_path / "acks.txt", tmp_path / "seen.txt"
    first_seq = 0
    for round_no in range(rounds):
        crash_round(broker, topic, partitions, (acks, rate),
                    (ack_path, seen_path, tmp_path / "clients.log"), first_seq)
        broker.start()
        acks_so_far = read_acks(ack_path)
        assert len(acks_so_far) >= ACKS_BEFORE_KILL * (round_no + 1)
        log = consume_all(broker.bootstrap, topic, partitions)
        check_log_against_acks(log, acks_so_far)
        check_log_against_seen(log, read_seen(seen_path))
        first_seq = max(seq for _, seq, _, _ in acks_so_far) + 1_000_000  # fresh, increasing
    assert read_seen(seen_path), "the consumer saw records while the load ran"

    # The recovered log takes new writes at its end and serves them.
    ends = {p: len(recs) for p, recs in log.items()}
    reports = produce_all(producer(broker.bootstrap),
                          [{"topic": topic, "key": b"after", "value": b"after:%d" % (first_seq + i),
                            "partition": i % partitions} for i in range(30)])
    for r in reports:
        assert r.offset >= ends[r.partition], (
            f"a write after recovery got offset {r.offset} below the end {ends[r.partition]}")
    final = consume_all(broker.bootstrap, topic, partitions)
    check_log_against_acks(final, acks_so_far + [(r.key.decode(), int(r.value.split(b":")[1]),
                                                 r.partition, r.offset) for r in reports])
