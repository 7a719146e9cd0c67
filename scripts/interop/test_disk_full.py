"""A node whose disk fills up.

Goal: when the log directory's file system is full, the node stays up, answers every
produce to the full partitions with KAFKA_STORAGE_ERROR, keeps serving what it stored, says
so in its log once per failed partition rather than once per request, and takes writes
again on a topic created after space was freed.

Method: the node's log.dirs is a 96 MiB ext4 file system in a file, mounted through a loop
device (the test needs root and a loop device; it is skipped without them); a producer
fills it, then reads, log lines and a new topic are checked.
"""

import os
import shutil
import subprocess

import pytest

from clients import consume_all, create_topic, producer, unique_topic, watermarks


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        pytest.skip("needs root and mkfs.ext4 to mount a small file system")
    image = tmp_path / "disk.img"
    mount = tmp_path / "disk"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(96 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"no loop device to mount a small file system: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(bootstrap, topic):
    """Produces 4 KiB records until the node refuses them; returns (stored, refused)."""
    stored, refused = [], []

    def report(err, msg):
        (refused if err else stored).append((err, msg.offset()))

    p = producer(bootstrap, **{"acks": "1", "retries": 0, "linger.ms": 1,
                               "batch.size": 65536, "message.timeout.ms": 20000})
    value = os.urandom(4096)
    for _ in range(60):  # at most 60 x 1000 x 4 KiB = 240 MiB, 2.5 times the disk
        for _ in range(1000):
            while True:
                try:
                    p.produce(topic, value, on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.1)
        p.flush(30)
        if refused:
            break
    return stored, refused


def test_a_full_disk_refuses_writes_and_keeps_the_node_serving(broker_factory, small_disk):
    b = broker_factory(cores=1, settings={"log.dirs": str(small_disk / "data")})
    topic = unique_topic("full")
    create_topic(b.bootstrap, topic, 1)
    stored, refused = fill(b.bootstrap, topic)
    assert refused, "the 96 MiB disk never filled up"
    codes = {err.name() for err, _ in refused}
    assert codes == {"KAFKA_STORAGE_ERROR"}, codes
    assert b.alive(), "the node died when its disk filled up"

    # What was acknowledged is there and readable.
    end = watermarks(b.bootstrap, topic, 1)[0][1]
    assert end >= len(stored)
    read = consume_all(b.bootstrap, topic, 1)
    assert len(read[0]) == end

    # More requests to the full partition, each refused.
    _, refused_more = fill(b.bootstrap, topic)
    assert refused_more and {err.name() for err, _ in refused_more} == {"KAFKA_STORAGE_ERROR"}
    # A few lines about the failed partition (its first error, and the requests in flight
    # when it came), not one per refused request.
    failures = [line for line in b.log_text().splitlines() if f"{topic}-0" in line]
    assert len(failures) <= 10, f"{len(failures)} log lines about one failed log"

    # Space freed (the full topic deleted), a new topic takes writes again.
    from clients import admin
    a = admin(b.bootstrap)
    a.delete_topics([topic], operation_timeout=30)[topic].result(60)
    fresh = unique_topic("after")
    create_topic(b.bootstrap, fresh, 1)
    stored_after, refused_after = [], []

    def report(err, msg):
        (refused_after if err else stored_after).append(err)

    p = producer(b.bootstrap, acks="1")
    for i in range(100):
        p.produce(fresh, b"v%d" % i, on_delivery=report)
    p.flush(30)
    assert (len(stored_after), refused_after) == (100, [])
    assert b.alive()
