"""Malformed, oversized and hostile requests on raw sockets.

Goal: whatever a client sends, the node answers with the error code a Kafka
broker would give or closes that one connection; it never dies, never stores a
batch it should have refused, never lets one stalled client hold up the
others, and never loses data it already has.

Method: one broker per module (once with one core, once with two), started with
small limits (socket.request.max.bytes=1 MiB, message.max.bytes=100,000,
auto-create off) and seeded with 1,000 records through confluent-kafka. Each
test sends its bad bytes with kafka_wire.py, checks the answer (error code or
closed connection, against a deadline), and then `healthy()` checks that the
process is alive, a normal confluent-kafka client can still produce and
consume, and the seeded records read back byte for byte. The broker's stderr
must not grow by more than a few warnings per test (logged once, no floods).
"""

import os
import socket
import struct
import time

import pytest

import kafka_wire as wire
from clients import (consume_all, create_topic, produce_all, producer, topic_partitions,
                     unique_topic, watermarks)
from conftest import Broker, finish

REQUEST_MAX_BYTES = 1 << 20
MESSAGE_MAX_BYTES = 100_000
SEED_PARTITIONS = 2
RSS_MAX_BYTES = 2 << 30
CLOSE_TIMEOUT_S = 10
LOGGED_MAX = 10


class Node:
    def __init__(self, broker, seed_topic, seed, probe_topic):
        self.broker = broker
        self.port = broker.port
        self.seed_topic = seed_topic
        self.seed = seed
        self.probe_topic = probe_topic
        self.correlation = 1000

    def next_id(self):
        self.correlation += 1
        return self.correlation


@pytest.fixture(scope="module", params=[1, 2], ids=["1core", "2cores"])
def shared_node(request, tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("bad-input"), io_mode="direct", cores=request.param,
                    settings={"auto.create.topics.enable": "false",
                              "socket.request.max.bytes": str(REQUEST_MAX_BYTES),
                              "message.max.bytes": str(MESSAGE_MAX_BYTES)})
    try:
        broker.start()
        seed_topic, probe_topic = unique_topic("seed"), unique_topic("probe")
        create_topic(broker.bootstrap, seed_topic, SEED_PARTITIONS)
        create_topic(broker.bootstrap, probe_topic, 1)
        produce_all(producer(broker.bootstrap),
                    [{"topic": seed_topic, "key": b"seed-%d" % i, "value": os.urandom(50)}
                     for i in range(1000)])
        seed = consume_all(broker.bootstrap, seed_topic, SEED_PARTITIONS)
        assert sum(len(r) for r in seed.values()) == 1000
    except BaseException:
        broker.kill9()
        raise
    yield Node(broker, seed_topic, {p: [r.as_tuple() for r in rs] for p, rs in seed.items()},
               probe_topic)
    finish(broker)


def warnings_logged(broker):
    return sum(1 for line in broker.log_text().splitlines()
               if " WARN" in line or " ERROR" in line)


@pytest.fixture
def node(shared_node):
    """The module's node; if an earlier test killed it, it is restarted on the
    same data dir so each test reports on its own input, not on the last one's.
    Bad input is logged once per connection, never in a flood."""
    if not shared_node.broker.alive():
        shared_node.broker.start()
    before = warnings_logged(shared_node.broker)
    yield shared_node
    added = warnings_logged(shared_node.broker) - before
    assert added <= LOGGED_MAX, f"{added} WARN/ERROR lines for one test's bad input"


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def healthy(node):
    """The node still serves a normal client and still has the seeded data."""
    b = node.broker
    assert b.alive(), f"the broker died (exit {b.proc.returncode})"
    corr = node.next_id()
    got_corr, body = wire.roundtrip(node.port, wire.api_versions_request(0, corr))
    assert got_corr == corr and wire.parse_api_versions_v0(body)[0] == wire.NONE

    marker = os.urandom(8).hex().encode()
    produce_all(producer(b.bootstrap), [{"topic": node.probe_topic, "key": b"probe",
                                         "value": marker + b"-%d" % i} for i in range(10)],
                timeout=60)
    probe = consume_all(b.bootstrap, node.probe_topic, 1, timeout=60)[0]
    assert [r.value for r in probe[-10:]] == [marker + b"-%d" % i for i in range(10)], (
        "a normal produce+consume did not round-trip")

    seed = consume_all(b.bootstrap, node.seed_topic, SEED_PARTITIONS, timeout=60)
    for p in range(SEED_PARTITIONS):
        assert [r.as_tuple() for r in seed[p]] == node.seed[p], (
            f"seeded partition {p} changed")
    assert rss_bytes(b.proc.pid) < RSS_MAX_BYTES, "broker memory grew past 2 GiB"


def expect_closed(sock, what):
    try:
        wire.wait_closed(sock, CLOSE_TIMEOUT_S)
    except TimeoutError:
        pytest.fail(f"{what}: the broker kept the connection open for {CLOSE_TIMEOUT_S}s "
                    "(Kafka closes it)", pytrace=False)


def produce_raw(node, topic, partition, records, acks=1):
    corr = node.next_id()
    got_corr, body = wire.roundtrip(
        node.port, wire.produce_v3_request(topic, partition, records, corr, acks=acks))
    assert got_corr == corr, f"response correlation id {got_corr}, sent {corr}"
    results, _throttle, leftover = wire.parse_produce_v3(body)
    assert leftover == 0, f"Produce v3 response has {leftover} trailing bytes"
    assert list(results) == [(topic, partition)], f"response names {list(results)}"
    return results[(topic, partition)]


def latest(node, topic=None, partitions=SEED_PARTITIONS):
    return watermarks(node.broker.bootstrap, topic or node.seed_topic, partitions)


# --- framing -----------------------------------------------------------------

def test_truncated_frames_then_close(node):
    """Half a length prefix, and a frame shorter than its prefix, then EOF."""
    for partial in (b"\x00\x00", wire.int32(100) + b"\x00\x03\x00\x01abc",
                    wire.api_versions_request(0, 1)[:-3]):
        with wire.connect(node.port) as s:
            s.sendall(partial)
    healthy(node)


@pytest.mark.parametrize("size", [REQUEST_MAX_BYTES + 1, 0x7FFFFFFF, -5, 0],
                         ids=["limit+1", "2GiB", "negative", "zero"])
def test_bad_length_prefix_closes_the_connection(node, size):
    with wire.connect(node.port) as s:
        s.sendall(wire.int32(size) + b"\x00\x12\x00\x00\x00\x00\x00\x01")
        expect_closed(s, f"length prefix {size}")
    healthy(node)


def test_frame_just_under_the_limit_is_not_refused_for_size(node):
    """socket.request.max.bytes is a limit, not a cliff below it: a large
    (but too large for message.max.bytes) produce under the request limit gets
    an answer, not a closed connection."""
    batch = wire.record_batch([(b"k", b"x" * (REQUEST_MAX_BYTES - 4096))])
    error, _ = produce_raw(node, node.seed_topic, 0, batch)
    assert error == wire.MESSAGE_TOO_LARGE, f"expected MESSAGE_TOO_LARGE, got {error}"
    healthy(node)


# --- headers -----------------------------------------------------------------

def test_unknown_api_key_closes_the_connection(node):
    with wire.connect(node.port) as s:
        s.sendall(wire.request(9999, 0, node.next_id(), b""))
        expect_closed(s, "unknown API key 9999")
    healthy(node)


def test_unsupported_version_of_a_non_api_versions_request_closes(node):
    with wire.connect(node.port) as s:
        s.sendall(wire.request(wire.METADATA, 999, node.next_id(), wire.int32(-1)))
        expect_closed(s, "Metadata v999")
    healthy(node)


def test_unsupported_api_versions_version_answers_v0_error_35(node):
    """Kafka answers an ApiVersions version it does not know with a v0 body:
    UNSUPPORTED_VERSION and (at least) its own ApiVersions range, so the client
    can retry with a version both sides speak; the connection stays open."""
    with wire.connect(node.port) as s:
        corr = node.next_id()
        s.sendall(wire.api_versions_request(127, corr))
        got_corr, body = wire.read_response(s)
        assert got_corr == corr
        error, apis, leftover = wire.parse_api_versions_v0(body)
        assert error == wire.UNSUPPORTED_VERSION, f"error_code {error}, expected 35"
        assert wire.API_VERSIONS in apis and apis[wire.API_VERSIONS][0] == 0, (
            f"the error response must list ApiVersions' own range, got {apis}")
        assert apis[wire.API_VERSIONS][1] >= 3, "ApiVersions v3 is what current clients use"
        assert leftover == 0, f"{leftover} bytes after the v0 body"

        corr = node.next_id()
        s.sendall(wire.api_versions_request(0, corr))
        got_corr, body = wire.read_response(s)
        assert got_corr == corr and wire.parse_api_versions_v0(body)[0] == wire.NONE, (
            "the connection must stay usable for the retry at v0")
    healthy(node)


# --- bodies that do not parse ------------------------------------------------

@pytest.mark.parametrize("api_key,version,body", [
    (wire.METADATA, 1, wire.int32(5) + wire.string("ab")),
    (wire.PRODUCE, 3, b"\x7f" * 7),
    (wire.PRODUCE, 3, wire.string(None) + wire.int16(1) + wire.int32(1000) + wire.int32(1)
     + wire.string("t") + wire.int32(1) + wire.int32(0) + wire.int32(4096) + b"short"),
], ids=["metadata-missing-topics", "produce-garbage", "produce-records-length-lies"])
def test_request_whose_fields_do_not_parse_closes_the_connection(node, api_key, version, body):
    with wire.connect(node.port) as s:
        s.sendall(wire.request(api_key, version, node.next_id(), body))
        expect_closed(s, f"api {api_key} v{version} with an unparsable body")
    healthy(node)


@pytest.mark.parametrize("api_key,version,body", [
    (wire.METADATA, 1, wire.int32(0x7FFFFFFF) + wire.string("a")),
    (wire.PRODUCE, 3, wire.string(None) + wire.int16(1) + wire.int32(1000)
     + wire.int32(0x7FFFFFFF) + wire.string("t")),
    (wire.METADATA, 1, wire.int32(1) + wire.int16(0x7FFF) + b"abc"),
], ids=["metadata-2g-topics", "produce-2g-topics", "metadata-32k-string"])
def test_huge_counts_in_a_small_request_are_refused_without_allocating(node, api_key, version,
                                                                       body):
    """A count or length field claiming far more than the frame holds must be
    refused before anything is allocated for it."""
    with wire.connect(node.port) as s:
        s.sendall(wire.request(api_key, version, node.next_id(), body))
        expect_closed(s, f"api {api_key} v{version} claiming a huge count")
    healthy(node)


# --- record batches ----------------------------------------------------------

def assert_refused(node, records, allowed, what, partition=0):
    before = latest(node)
    error, _ = produce_raw(node, node.seed_topic, partition, records)
    assert error in allowed, f"{what}: error_code {error}, expected one of {allowed}"
    assert latest(node) == before, f"{what}: the refused batch changed the log end"
    healthy(node)


def test_bad_crc_is_corrupt_message(node):
    batch = wire.batch_with_bad_crc(wire.record_batch([(b"k", b"v")]))
    assert_refused(node, batch, {wire.CORRUPT_MESSAGE}, "bad CRC")


@pytest.mark.parametrize("delta", [+100, -10, -1000], ids=["longer", "shorter", "negative"])
def test_batch_length_that_lies_is_refused(node, delta):
    batch = wire.record_batch([(b"k%d" % i, b"v" * 20) for i in range(5)])
    lied = wire.batch_with_length(batch, len(batch) - 12 + delta)
    assert_refused(node, lied, {wire.CORRUPT_MESSAGE, wire.INVALID_RECORD},
                   f"batchLength off by {delta}")


def test_record_count_that_lies_is_refused(node):
    """CRC is valid, but the batch claims 2^31-1 records and holds one."""
    batch = bytearray(wire.record_batch([(b"k", b"v")]))
    batch[57:61] = struct.pack(">i", 0x7FFFFFFF)
    crc = wire.crc32c(bytes(batch[wire.CRC_COVERS_FROM:]))
    batch[wire.CRC_OFFSET:wire.CRC_OFFSET + 4] = struct.pack(">I", crc)
    assert_refused(node, bytes(batch), {wire.CORRUPT_MESSAGE, wire.INVALID_RECORD},
                   "record count 2^31-1")


def test_batch_above_message_max_bytes_is_message_too_large(node):
    batch = wire.record_batch([(b"big", os.urandom(MESSAGE_MAX_BYTES + 1000))])
    assert len(batch) < REQUEST_MAX_BYTES
    assert_refused(node, batch, {wire.MESSAGE_TOO_LARGE}, "batch above message.max.bytes")


def test_valid_hand_built_batch_is_stored(node):
    """Control for the refusals above: the same encoder's valid batch is
    accepted and read back by a real client, so refusals are for the lie."""
    before = latest(node)[1][1]
    value = os.urandom(16)
    error, base_offset = produce_raw(node, node.seed_topic, 1, wire.record_batch([(b"ctl", value)]))
    assert (error, base_offset) == (wire.NONE, before)
    got = consume_all(node.broker.bootstrap, node.seed_topic, SEED_PARTITIONS)
    last = got[1][-1]
    assert (last.offset, last.key, last.value) == (before, b"ctl", value)
    node.seed = {p: [r.as_tuple() for r in rs] for p, rs in got.items()}
    healthy(node)


# --- unknown targets ---------------------------------------------------------

def test_produce_to_missing_partition_is_unknown_topic_or_partition(node):
    batch = wire.record_batch([(b"k", b"v")])
    error, _ = produce_raw(node, node.seed_topic, 99, batch)
    assert error == wire.UNKNOWN_TOPIC_OR_PARTITION, f"partition 99: error_code {error}"
    missing = unique_topic("missing")
    error, _ = produce_raw(node, missing, 0, batch)
    assert error == wire.UNKNOWN_TOPIC_OR_PARTITION, f"missing topic: error_code {error}"
    assert topic_partitions(node.broker.bootstrap, missing) is None, (
        "a produce created a topic although auto.create.topics.enable=false")
    healthy(node)


# --- slow clients ------------------------------------------------------------

def test_stalled_half_frames_do_not_block_other_clients(node):
    """Twenty clients send half a request and stall; a normal client is served
    meanwhile, and each stalled request is answered once it is completed."""
    stalled = []
    try:
        for i in range(20):
            s = wire.connect(node.port)
            corr = node.next_id()
            frame = wire.api_versions_request(0 if i % 2 else 3, corr)
            cut = 2 if i % 3 == 0 else len(frame) // 2
            s.sendall(frame[:cut])
            stalled.append((s, corr, frame[cut:], i % 2 == 0))
        started = time.monotonic()
        healthy(node)
        assert time.monotonic() - started < 30, "normal client was slowed by stalled ones"
        for s, corr, rest, flexible in stalled:
            s.sendall(rest)
        for s, corr, rest, flexible in stalled:
            got_corr, body = wire.read_response(s)
            assert got_corr == corr
            parsed = (wire.parse_api_versions_v3(body)["error"] if flexible
                      else wire.parse_api_versions_v0(body)[0])
            assert parsed == wire.NONE
    finally:
        for s, *_ in stalled:
            s.close()


def test_connection_dropped_with_requests_in_flight(node):
    """A client pipelines requests and disconnects without reading answers."""
    for _ in range(5):
        with wire.connect(node.port) as s:
            frames = b"".join(wire.metadata_v1_request(None, node.next_id()) for _ in range(50))
            s.sendall(frames)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    healthy(node)
