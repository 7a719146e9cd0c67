"""kill -9 during an acks=all produce loop loses no acknowledged message.

Goal: the single-node durability promise. A broker answers acks=all only after
the batch is synced, so after `kill -9` and a restart on the same data dir,
every message a client saw acknowledged must be in the log exactly once, at
the partition and offset it was acknowledged with, in produce order per key;
and the recovered log must keep accepting and serving writes.

Method: crash_producer.py runs as a separate process so the broker can be
killed under it; it appends every acknowledgement to a file the moment its
delivery callback fires. The test waits until acknowledgements are flowing,
SIGKILLs the broker, lets the producer drain, restarts the broker and compares
the whole log with the file. Two crash rounds per case, so the second crash
hits a log that was itself recovered; one and three partitions; both
log.io.mode values.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients import consume_all, create_topic, produce_all, producer, unique_topic

HERE = Path(__file__).resolve().parent
ACKS_BEFORE_KILL = 2000
RUN_BEFORE_KILL_S = 2.0
WAIT_FOR_ACKS_S = 60
PRODUCER_SECONDS_MAX = 90
ROUNDS = 2


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


def crash_round(broker, topic, ack_path: Path, log_path: Path, first_seq: int):
    """Starts the producer, kills the broker under it, waits for the producer."""
    before = len(read_acks(ack_path))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, str(HERE / "crash_producer.py"), broker.bootstrap,
                                 topic, str(ack_path), str(PRODUCER_SECONDS_MAX), str(first_seq)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        started = time.monotonic()
        deadline = started + WAIT_FOR_ACKS_S
        while True:
            acked = len(read_acks(ack_path)) - before
            if acked >= ACKS_BEFORE_KILL and time.monotonic() - started >= RUN_BEFORE_KILL_S:
                break
            assert proc.poll() is None, (f"producer exited early after {acked} acks:\n"
                                         f"{log_path.read_text()[-2000:]}")
            assert time.monotonic() < deadline, (
                f"only {acked} acks in {WAIT_FOR_ACKS_S}s; producer log:\n"
                f"{log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        broker.kill9()
        assert proc.wait(60) == 0, f"producer failed:\n{log_path.read_text()[-2000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


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
@pytest.mark.parametrize("partitions", [1, 3])
def test_kill9_loses_no_acknowledged_message(broker_factory, tmp_path, io_mode, partitions):
    broker = broker_factory(io_mode=io_mode, cores=2)
    topic = unique_topic(f"crash-{io_mode}-{partitions}")
    create_topic(broker.bootstrap, topic, partitions)
    ack_path = tmp_path / "acks.txt"
    first_seq = 0
    for round_no in range(ROUNDS):
        crash_round(broker, topic, ack_path, tmp_path / "producer.log", first_seq)
        broker.start()
        acks = read_acks(ack_path)
        assert len(acks) >= ACKS_BEFORE_KILL * (round_no + 1)
        log = consume_all(broker.bootstrap, topic, partitions)
        check_log_against_acks(log, acks)
        first_seq = max(seq for _, seq, _, _ in acks) + 1_000_000  # fresh, still increasing

    # The recovered log takes new writes at its end and serves them.
    ends = {p: len(recs) for p, recs in log.items()}
    reports = produce_all(producer(broker.bootstrap),
                          [{"topic": topic, "key": b"after", "value": b"after:%d" % (first_seq + i),
                            "partition": i % partitions} for i in range(30)])
    for r in reports:
        assert r.offset >= ends[r.partition], (
            f"a write after recovery got offset {r.offset} below the end {ends[r.partition]}")
    final = consume_all(broker.bootstrap, topic, partitions)
    check_log_against_acks(final, acks + [(r.key.decode(), int(r.value.split(b":")[1]),
                                           r.partition, r.offset) for r in reports])
