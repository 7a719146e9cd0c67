"""Hand-encoded Kafka wire frames for tests that must send what no client would.

Real clients never send a truncated frame, a lying record-batch length or a bad
CRC, so the bad-input tests build those bytes here, by hand, from the Kafka
protocol guide. Only the few messages the tests need are covered: the request
and response headers, ApiVersions v0/v3, Metadata v1, Produce v3 and the v2
record batch (with CRC-32C). Everything is big-endian, as on the wire.
test_kafka_wire.py checks the encoders against known vectors.
"""

import socket
import struct
import time

# Kafka error codes the tests look for.
NONE = 0
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87

# API keys.
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
DESCRIBE_CLUSTER = 60


# --- CRC-32C (Castagnoli), reflected polynomial 0x82F63B78 -----------------

def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# --- primitive encoders ----------------------------------------------------

def int8(v):
    return struct.pack(">b", v)


def int16(v):
    return struct.pack(">h", v)


def int32(v):
    return struct.pack(">i", v)


def int64(v):
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    assert v >= 0, v
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def varint(v: int) -> bytes:
    """Signed zig-zag varint (also used for varlong: Python ints are unbounded)."""
    return uvarint((v << 1) ^ (v >> 63))


def string(s):
    """Nullable int16-length string."""
    if s is None:
        return int16(-1)
    b = s.encode() if isinstance(s, str) else s
    return int16(len(b)) + b


def compact_string(s):
    if s is None:
        return uvarint(0)
    b = s.encode() if isinstance(s, str) else s
    return uvarint(len(b) + 1) + b


def array(items):
    """int32-counted array of already-encoded items; None is the null array."""
    if items is None:
        return int32(-1)
    return int32(len(items)) + b"".join(items)


def nullable_bytes(b):
    if b is None:
        return int32(-1)
    return int32(len(b)) + b


# --- primitive decoder -----------------------------------------------------

class Reader:
    """Cursor over a response body; every read checks it stays in bounds."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"read of {n} bytes at {self.pos} overruns {len(self.data)}-byte body")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def _unpack(self, fmt):
        (v,) = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return v

    def int8(self):
        return self._unpack(">b")

    def int16(self):
        return self._unpack(">h")

    def int32(self):
        return self._unpack(">i")

    def int64(self):
        return self._unpack(">q")

    def uvarint(self):
        shift = 0
        v = 0
        while True:
            b = self.take(1)[0]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7
            if shift > 63:
                raise ValueError("varint longer than 10 bytes")

    def varint(self):
        u = self.uvarint()
        return (u >> 1) ^ -(u & 1)

    def string(self):
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def array(self, item):
        n = self.int32()
        if n < 0:
            return None
        return [item(self) for _ in range(n)]

    def compact_array(self, item):
        n = self.uvarint()
        if n == 0:
            return None
        return [item(self) for _ in range(n - 1)]

    def tagged_fields(self):
        """Returns {tag: raw bytes}."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            fields[tag] = self.take(size)
        return fields


# --- framing ---------------------------------------------------------------

CLIENT_ID = "ringlog-wire-test"


def request(api_key, api_version, correlation_id, body, flexible=False, client_id=CLIENT_ID):
    """A whole frame: int32 size, request header v1 (v2 if flexible), body."""
    header = int16(api_key) + int16(api_version) + int32(correlation_id) + string(client_id)
    if flexible:
        header += uvarint(0)  # no tagged fields in the header
    payload = header + body
    return int32(len(payload)) + payload


class ConnectionClosed(Exception):
    pass


def recv_exact(sock, n, deadline):
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"got {len(buf)} of {n} bytes before the deadline")
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError) as e:
            raise ConnectionClosed(str(e)) from e
        if not chunk:
            raise ConnectionClosed(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_response(sock, timeout=10.0, flexible_header=False):
    """Reads one response frame; returns (correlation_id, body bytes)."""
    deadline = time.monotonic() + timeout
    (size,) = struct.unpack(">i", recv_exact(sock, 4, deadline))
    if size < 4:
        raise ValueError(f"response frame size {size} is too small for a header")
    payload = recv_exact(sock, size, deadline)
    r = Reader(payload)
    correlation_id = r.int32()
    if flexible_header:
        r.tagged_fields()
    return correlation_id, payload[r.pos:]


def wait_closed(sock, timeout=10.0):
    """Returns the bytes the peer sent before it closed; raises TimeoutError if it
    is still open after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    got = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"connection still open after {timeout}s (received {len(got)} bytes)")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return bytes(got)
        if not chunk:
            return bytes(got)
        got += chunk


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def roundtrip(port, frame, timeout=10.0, flexible_header=False):
    with connect(port, timeout) as s:
        s.sendall(frame)
        return read_response(s, timeout, flexible_header)


# --- ApiVersions (key 18) --------------------------------------------------

def api_versions_request(version, correlation_id, software=("ringlog-wire-test", "1.0")):
    if version >= 3:
        body = compact_string(software[0]) + compact_string(software[1]) + uvarint(0)
        return request(API_VERSIONS, version, correlation_id, body, flexible=True)
    return request(API_VERSIONS, version, correlation_id, b"")


def parse_api_versions_v0(body):
    """v0 body: error_code, [api_key min max]. Returns (error, {key: (min, max)}, leftover)."""
    r = Reader(body)
    error = r.int16()
    keys = r.array(lambda r: (r.int16(), r.int16(), r.int16()))
    return error, {k: (lo, hi) for k, lo, hi in keys or []}, r.remaining()


def parse_api_versions_v3(body):
    """v3 body (response header is v0 for ApiVersions, always). Returns a dict."""
    r = Reader(body)
    error = r.int16()

    def key(r):
        k, lo, hi = r.int16(), r.int16(), r.int16()
        tags = r.tagged_fields()
        return k, lo, hi, tags

    keys = r.compact_array(key) or []
    throttle = r.int32()
    tags = r.tagged_fields()
    return {
        "error": error,
        "apis": {k: (lo, hi) for k, lo, hi, _ in keys},
        "api_tags": {k: t for k, _, _, t in keys if t},
        "throttle_ms": throttle,
        "tags": tags,
        "leftover": r.remaining(),
    }


# --- Metadata v1 (key 3) ---------------------------------------------------

def metadata_v1_request(topics, correlation_id):
    """topics=None asks for every topic."""
    items = None if topics is None else [string(t) for t in topics]
    return request(METADATA, 1, correlation_id, array(items))


def metadata_v4_request(topics, correlation_id):
    """As v1, but never creates a topic it asks for (v4's allow_auto_topic_creation false),
    which a Kafka broker with its default auto.create.topics.enable=true would do."""
    items = None if topics is None else [string(t) for t in topics]
    return request(METADATA, 4, correlation_id, array(items) + int8(0))


def parse_metadata_v1(body, version=1):
    """Metadata v1 to v4 (v2 adds the cluster id, v3 the throttle time)."""
    r = Reader(body)
    if version >= 3:
        r.int32()  # throttle_time_ms
    brokers = r.array(lambda r: {"node_id": r.int32(), "host": r.string(),
                                 "port": r.int32(), "rack": r.string()})
    if version >= 2:
        r.string()  # cluster_id
    controller = r.int32()

    def partition(r):
        return {"error": r.int16(), "index": r.int32(), "leader": r.int32(),
                "replicas": r.array(lambda r: r.int32()), "isr": r.array(lambda r: r.int32())}

    def topic(r):
        return {"error": r.int16(), "name": r.string(), "internal": r.int8() != 0,
                "partitions": r.array(partition)}

    topics = r.array(topic)
    return {"brokers": brokers, "controller": controller,
            "topics": {t["name"]: t for t in topics}, "leftover": r.remaining()}


# --- v2 record batch -------------------------------------------------------

BATCH_HEADER_BYTES = 61
CRC_OFFSET = 17  # baseOffset 8 + batchLength 4 + partitionLeaderEpoch 4 + magic 1
CRC_COVERS_FROM = 21  # attributes onwards


def record(offset_delta, key, value, timestamp_delta=0):
    body = (int8(0) + varint(timestamp_delta) + varint(offset_delta)
            + (varint(-1) if key is None else varint(len(key)) + key)
            + (varint(-1) if value is None else varint(len(value)) + value)
            + varint(0))  # no headers
    return varint(len(body)) + body


def record_batch(records, base_timestamp_ms=None):
    """records: list of (key bytes|None, value bytes|None). Returns the batch bytes
    with a correct batchLength and CRC, as a producer would send it."""
    assert records, "a v2 batch holds at least one record"
    ts = int(time.time() * 1000) if base_timestamp_ms is None else base_timestamp_ms
    recs = b"".join(record(i, k, v) for i, (k, v) in enumerate(records))
    after_crc = (int16(0)                      # attributes: no compression, CreateTime
                 + int32(len(records) - 1)     # lastOffsetDelta
                 + int64(ts) + int64(ts)       # baseTimestamp, maxTimestamp
                 + int64(-1) + int16(-1) + int32(-1)  # producerId, epoch, baseSequence
                 + int32(len(records)) + recs)
    crc = struct.pack(">I", crc32c(after_crc))
    after_length = int32(-1) + int8(2) + crc + after_crc  # leader epoch, magic
    return int64(0) + int32(len(after_length)) + after_length


def batch_with_length(batch, batch_length):
    """The same batch with its batchLength field overwritten (CRC untouched)."""
    return batch[:8] + int32(batch_length) + batch[12:]


def batch_with_bad_crc(batch):
    crc = struct.unpack(">I", batch[CRC_OFFSET:CRC_OFFSET + 4])[0]
    return batch[:CRC_OFFSET] + struct.pack(">I", crc ^ 0xDEADBEEF) + batch[CRC_OFFSET + 4:]


# --- Produce v3 (key 0) ----------------------------------------------------

def produce_v3_request(topic, partition, records, correlation_id, acks=1, timeout_ms=10000):
    """records: the raw bytes of the partition's record set (one v2 batch)."""
    body = (string(None) + int16(acks) + int32(timeout_ms)
            + array([string(topic) + array([int32(partition) + nullable_bytes(records)])]))
    return request(PRODUCE, 3, correlation_id, body)


def parse_produce_v3(body):
    """Returns ({(topic, partition): (error, base_offset)}, throttle_ms, leftover)."""
    r = Reader(body)

    def part(r):
        return r.int32(), r.int16(), r.int64(), r.int64()

    out = {}
    for name, parts in r.array(lambda r: (r.string(), r.array(part))):
        for index, error, base_offset, _append_time in parts:
            out[(name, index)] = (error, base_offset)
    throttle = r.int32()
    return out, throttle, r.remaining()


# --- Fetch (key 1) ---------------------------------------------------------

def fetch_v4_request(topic, partition, offset, correlation_id, max_bytes=50 << 20,
                     partition_max_bytes=50 << 20, max_wait_ms=0, min_bytes=1):
    body = (int32(-1) + int32(max_wait_ms) + int32(min_bytes) + int32(max_bytes) + int8(0)
            + array([string(topic) + array([int32(partition) + int64(offset)
                                            + int32(partition_max_bytes)])]))
    return request(FETCH, 4, correlation_id, body)


# --- ListOffsets (key 2) ---------------------------------------------------

def compact_array(items):
    """uvarint(n + 1)-counted array of already-encoded items (flexible versions)."""
    return uvarint(len(items) + 1) + b"".join(items)


def list_offsets_request(version, topic, partition, timestamp, correlation_id, replica_id=-1):
    """v4 and later (leader epoch fields); v6 and later are flexible. `replica_id` -1 asks
    as a consumer (latest = the high watermark), -2 as a tool (latest = the log end)."""
    assert version >= 4
    flexible = version >= 6
    part = int32(partition) + int32(-1) + int64(timestamp)
    if flexible:
        part += uvarint(0)
        topics = compact_array([compact_string(topic) + compact_array([part]) + uvarint(0)])
    else:
        topics = array([string(topic) + array([part])])
    body = int32(replica_id) + int8(0) + topics
    if version >= 10:
        body += int32(5000)  # timeout_ms
    if flexible:
        body += uvarint(0)
    return request(LIST_OFFSETS, version, correlation_id, body, flexible=flexible)


def parse_list_offsets(version, body):
    """Returns {(topic, partition): (error, timestamp, offset, leader_epoch)}."""
    r = Reader(body)
    flexible = version >= 6
    r.int32()  # throttle_time_ms

    def part(r):
        fields = r.int32(), r.int16(), r.int64(), r.int64(), r.int32()
        if flexible:
            r.tagged_fields()
        return fields

    def topic(r):
        name = r.compact_string() if flexible else r.string()
        parts = r.compact_array(part) if flexible else r.array(part)
        if flexible:
            r.tagged_fields()
        return name, parts

    topics = r.compact_array(topic) if flexible else r.array(topic)
    out = {}
    for name, parts in topics:
        for index, error, timestamp, offset, epoch in parts:
            out[(name, index)] = (error, timestamp, offset, epoch)
    return out
