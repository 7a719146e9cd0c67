"""Recovery of damaged segment files after a crash.

Goal: after `kill -9`, a segment whose last batch is torn (cut short) or
corrupt (CRC mismatch) is truncated at the last valid batch, the log reads
cleanly up to there, and new writes continue at the truncated end; a garbage
offset index is not trusted. This is the end-to-end view of what the storage
crate's unit tests check in isolation.

Method: write a few acks=all batches, SIGKILL the node, damage the files as
docs/format.md describes them (the .log is raw v2 record batches; in direct
mode zero padding may follow the last one), restart, and compare what a real
client reads with what was acknowledged.
"""

import os
import struct

import pytest

from clients import consume_all, create_topic, produce_all, producer, unique_topic, watermarks


def partition_dir(broker, topic, partition=0):
    dirs = [d for d in broker.data_dir.rglob(f"{topic}-{partition}") if d.is_dir()]
    assert len(dirs) == 1, f"expected one folder for {topic}-{partition}, found {dirs}"
    return dirs[0]


def batches(path):
    """[(position, total bytes, base offset, last offset)] of a .log file, up to
    the first zero or impossible header (direct-mode padding)."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base_offset, batch_length = struct.unpack(">qi", data[pos:pos + 12])
        if batch_length <= 0 or pos + 12 + batch_length > len(data) or data[pos + 16] != 2:
            break
        (last_delta,) = struct.unpack(">i", data[pos + 23:pos + 27])
        out.append((pos, 12 + batch_length, base_offset, base_offset + last_delta))
        pos += 12 + batch_length
    return out


def write_batches(broker, topic, rounds=5, per_round=50):
    reports = []
    for r in range(rounds):  # one flush per round: at least one batch each
        reports += produce_all(producer(broker.bootstrap),
                               [{"topic": topic, "value": b"r%d-%d" % (r, i), "partition": 0}
                                for i in range(per_round)])
    return reports


def tear(path, position, length):
    """Cut the file in the middle of the batch at `position`."""
    with open(path, "r+b") as f:
        f.truncate(position + length // 2)


def corrupt(path, position, length):
    """Flip one byte inside the batch's records, so its CRC no longer matches."""
    with open(path, "r+b") as f:
        f.seek(position + length - 3)
        b = f.read(1)
        f.seek(position + length - 3)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("io_mode", ["direct", "buffered"])
@pytest.mark.parametrize("damage", [tear, corrupt], ids=["torn", "crc"])
def test_damaged_last_batch_is_truncated_after_a_crash(broker_factory, io_mode, damage):
    broker = broker_factory(io_mode=io_mode, cores=1)
    topic = unique_topic("tail")
    create_topic(broker.bootstrap, topic, 1)
    reports = write_batches(broker, topic)
    broker.kill9()

    logs = sorted(partition_dir(broker, topic).glob("*.log"))
    found = batches(logs[-1])
    assert found and found[-1][3] == max(r.offset for r in reports), (
        f"the last segment should end with the last acknowledged batch, found {found[-3:]}")
    position, length, cut_from, _ = found[-1]
    damage(logs[-1], position, length)

    broker.start()
    assert watermarks(broker.bootstrap, topic, 1)[0][1] == cut_from, (
        f"after recovery the log should end where the damaged batch began ({cut_from})")
    kept = consume_all(broker.bootstrap, topic, 1)[0]
    expected = sorted((r.offset, r.value) for r in reports if r.offset < cut_from)
    assert [(r.offset, r.value) for r in kept] == expected, "records before the damage changed"

    more = produce_all(producer(broker.bootstrap),
                       [{"topic": topic, "value": b"after-%d" % i, "partition": 0} for i in range(5)])
    assert sorted(r.offset for r in more) == list(range(cut_from, cut_from + 5)), (
        "new writes must continue at the truncated end")
    final = consume_all(broker.bootstrap, topic, 1)[0]
    assert [r.value for r in final[-5:]] == [b"after-%d" % i for i in range(5)]


def test_garbage_offset_index_is_not_trusted(broker_factory):
    broker = broker_factory(io_mode="buffered", cores=1,
                            settings={"log.segment.bytes": "16384"})
    topic = unique_topic("index")
    create_topic(broker.bootstrap, topic, 1)
    reports = write_batches(broker, topic, rounds=8, per_round=200)
    broker.kill9()

    indexes = sorted(partition_dir(broker, topic).glob("*.index"))
    assert indexes, "no .index files: expected several segments with log.segment.bytes=16384"
    for idx in indexes:
        # Entries that point far past the end of the .log, and a partial entry.
        idx.write_bytes(struct.pack(">II", 7, 1 << 30) * 4 + os.urandom(5))

    broker.start()
    got = consume_all(broker.bootstrap, topic, 1)[0]
    assert [(r.offset, r.value) for r in got] == sorted((r.offset, r.value) for r in reports)
    for start in (1, 333, 777, len(reports) - 1):
        part = consume_all(broker.bootstrap, topic, 1, start={0: start})[0]
        assert part and part[0].offset == start, f"read from offset {start} with a garbage index"
