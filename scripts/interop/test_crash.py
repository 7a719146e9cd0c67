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
import zlib
from pathlib import Path

import pytest

from clients import consume_all, create_topic, produce_all, producer, unique_topic

HERE = Path(__file__).resolve().parent
ACKS_BEFORE_KILL = 2000
# The kill comes at a random moment this long after acknowledgements began.
RUN_BEFORE_KILL_S = (0.5, 2.5)
WAIT_FOR_ACKS_S = 60
PRODUCER_SECONDS_MAX = 90


def read_acks(path: Path, from_byte=0):
    """[(key, seq, partition, offset)] from complete lines of the ack file, from `from_byte`."""
    if not path.exists():
        return []
    with open(path, "rb") as f:
        f.seek(from_byte)
        text = f.read().decode()
    lines = text.split("\n")[:-1]  # a line without its newline was not finished
    rows = []
    for line in lines:
        key, seq, partition, offset = line.split()
        rows.append((key, int(seq), int(partition), int(offset)))
    return rows


def read_seen(path: Path):
    """[(partition, offset, crc32 of the value)] from complete lines of the consumer's file."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().split("\n")[:-1]:
        partition, offset, crc = line.split()
        rows.append((int(partition), int(offset), int(crc)))
    return rows


def crash_round(broker, topic, ends, load, paths, first_seq: int):
    """Starts the producer and a consumer reading from `ends`, kills the broker under them
    at a random moment, waits for both."""
    ack_path, seen_path, log_path = paths
    acks, rate, pad = load
    before = ack_path.stat().st_size if ack_path.exists() else 0
    run_before_kill_s = random.uniform(*RUN_BEFORE_KILL_S)
    start = ",".join(str(ends[p]) for p in sorted(ends))
    with open(log_path, "ab") as log:
        producer_proc = subprocess.Popen(
            [sys.executable, str(HERE / "crash_producer.py"), broker.bootstrap, topic,
             str(ack_path), str(PRODUCER_SECONDS_MAX), str(first_seq), acks, str(rate), str(pad)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        consumer_proc = subprocess.Popen(
            [sys.executable, str(HERE / "crash_consumer.py"), broker.bootstrap, topic,
             str(len(ends)), str(seen_path), str(PRODUCER_SECONDS_MAX), start],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    procs = (producer_proc, consumer_proc)
    try:
        started = time.monotonic()
        deadline = started + WAIT_FOR_ACKS_S
        while True:
            acked = len(read_acks(ack_path, before))
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
    return read_acks(ack_path, before)


def check_log_against_seen(stored, seen):
    """Every record a consumer saw is still there, at its offset, with its bytes.
    `stored` maps (partition, offset) to the crc32 of the value there now."""
    taken_back = [(p, offset, crc, stored.get((p, offset)))
                  for p, offset, crc in seen if stored.get((p, offset)) != crc]
    assert not taken_back, (f"{len(taken_back)} of {len(seen)} records a consumer saw were "
                            f"taken back by the crash (partition, offset, crc seen, crc now): "
                            f"{taken_back[:5]}")


def check_log_against_acks(by_partition, acks, start=None):
    """The records read from `start` (default 0) hold every acknowledgement in `acks`
    exactly once, where it was acknowledged, in produce order per key."""
    where = {}
    for p, recs in by_partition.items():
        first = (start or {}).get(p, 0)
        offsets = [r.offset for r in recs]
        assert offsets == list(range(first, first + len(recs))), (
            f"partition {p}: offsets after recovery are not contiguous from {first}")
        last_seq = {}
        for r in recs:
            key, seq, _ = r.value.decode().split(":", 2)
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
# acks=1 runs at full speed with 4 KB values, so that the broker's writes are always busy:
# the crash must find batches acknowledged while later writes are still queued or in
# flight, which a slow producer rarely leaves behind. Each round reads back only what it
# added.
@pytest.mark.parametrize("acks,partitions,rounds,rate,pad", [
    ("all", 1, 2, 20_000, 0),
    ("all", 3, 2, 20_000, 0),
    ("1", 3, 10, 1_000_000, 4000),
])
def test_kill9_loses_no_acknowledged_message(broker_factory, tmp_path, io_mode, acks, partitions,
                                             rounds, rate, pad):
    broker = broker_factory(io_mode=io_mode, cores=2)
    topic = unique_topic(f"crash-{io_mode}-{acks}-{partitions}")
    create_topic(broker.bootstrap, topic, partitions)
    ack_path, seen_path = tmp_path / "acks.txt", tmp_path / "seen.txt"
    first_seq = 0
    ends = {p: 0 for p in range(partitions)}
    stored = {}
    for _ in range(rounds):
        round_acks = crash_round(broker, topic, ends, (acks, rate, pad),
                                 (ack_path, seen_path, tmp_path / "clients.log"), first_seq)
        broker.start()
        assert len(round_acks) >= ACKS_BEFORE_KILL
        added = consume_all(broker.bootstrap, topic, partitions, start=dict(ends))
        check_log_against_acks(added, round_acks, ends)
        for p, recs in added.items():
            stored.update(((p, r.offset), zlib.crc32(r.value)) for r in recs)
            ends[p] += len(recs)
        check_log_against_seen(stored, read_seen(seen_path))
        first_seq = max(seq for _, seq, _, _ in round_acks) + 1_000_000  # fresh, increasing
    assert read_seen(seen_path), "the consumer saw records while the load ran"

    # The recovered log takes new writes at its end and serves them.
    reports = produce_all(producer(broker.bootstrap),
                          [{"topic": topic, "key": b"after", "value": b"after:%d:" % (first_seq + i),
                            "partition": i % partitions} for i in range(30)])
    for r in reports:
        assert r.offset >= ends[r.partition], (
            f"a write after recovery got offset {r.offset} below the end {ends[r.partition]}")
    final = consume_all(broker.bootstrap, topic, partitions, start=dict(ends))
    check_log_against_acks(final, [(r.key.decode(), int(r.value.split(b":")[1]), r.partition,
                                    r.offset) for r in reports], ends)
