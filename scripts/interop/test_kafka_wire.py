"""Unit tests for kafka_wire.py, the hand encoder behind the bad-input tests.

A bad-input test is only meaningful if the bytes it calls "valid" are valid:
otherwise the broker rejects them for the wrong reason and the test proves
nothing. These tests pin the encoders to independent facts: the CRC-32C check
value, Kafka's zig-zag varint examples, and the v2 record-batch layout (length,
magic, CRC coverage) from the protocol guide. The same encoders were also
cross-checked once by decoding their output with the Rust `kafka-protocol`
crate. No broker is needed.
"""

import struct

import kafka_wire as w


def test_crc32c_check_value():
    # The standard check value of CRC-32C (iSCSI / Castagnoli).
    assert w.crc32c(b"123456789") == 0xE3069283
    assert w.crc32c(b"") == 0


def test_crc32c_matches_the_crc32c_package():
    import crc32c as ext

    data = bytes(range(256)) * 5
    assert w.crc32c(data) == ext.crc32c(data)


def test_varints_follow_protobuf_zigzag():
    assert w.varint(0) == b"\x00"
    assert w.varint(-1) == b"\x01"
    assert w.varint(1) == b"\x02"
    assert w.varint(-64) == b"\x7f"
    assert w.varint(64) == b"\x80\x01"
    assert w.uvarint(300) == b"\xac\x02"
    for v in (0, 1, -1, 63, -64, 300, -300, 2**31 - 1, -(2**31), 2**62):
        assert w.Reader(w.varint(v)).varint() == v


def test_record_batch_header_layout():
    batch = w.record_batch([(b"key", b"value"), (None, b"v2")], base_timestamp_ms=1234)
    base_offset, batch_length, leader_epoch, magic, crc = struct.unpack(">qiibI", batch[:21])
    assert base_offset == 0
    assert batch_length == len(batch) - 12, "batchLength counts bytes after itself"
    assert magic == 2
    assert crc == w.crc32c(batch[w.CRC_COVERS_FROM:]), "CRC covers attributes..end"
    attributes, last_delta, first_ts, max_ts = struct.unpack(">hiqq", batch[21:43])
    assert (attributes, last_delta, first_ts, max_ts) == (0, 1, 1234, 1234)
    (count,) = struct.unpack(">i", batch[57:61])
    assert count == 2
    assert len(batch) > w.BATCH_HEADER_BYTES


def test_record_encoding_matches_the_protocol_guide():
    # length, attributes, timestampDelta, offsetDelta, keyLen, key, valueLen, value, headers
    rec = w.record(3, b"k", None)
    body = b"\x00" + b"\x00" + b"\x06" + b"\x02k" + b"\x01" + b"\x00"
    assert rec == w.varint(len(body)) + body


def test_corruptions_touch_only_what_they_say():
    batch = w.record_batch([(b"k", b"v")])
    bad = w.batch_with_bad_crc(batch)
    assert len(bad) == len(batch) and bad != batch
    assert bad[:17] == batch[:17] and bad[21:] == batch[21:]
    lied = w.batch_with_length(batch, 10_000)
    assert struct.unpack(">i", lied[8:12])[0] == 10_000 and lied[12:] == batch[12:]


def test_request_frame_and_header():
    frame = w.request(3, 1, 42, b"BODY", client_id="c")
    size, key, version, corr, cid_len = struct.unpack(">ihhih", frame[:14])
    assert size == len(frame) - 4
    assert (key, version, corr, cid_len) == (3, 1, 42, 1)
    assert frame[14:] == b"cBODY"
    flexible = w.request(18, 3, 1, b"", flexible=True, client_id="c")
    assert flexible.endswith(b"c\x00"), "header v2 ends with an empty tagged-field section"


def test_api_versions_v0_response_round_trip():
    body = w.int16(35) + w.array([w.int16(18) + w.int16(0) + w.int16(3)])
    assert w.parse_api_versions_v0(body) == (35, {18: (0, 3)}, 0)


def test_api_versions_v3_response_parses_tagged_fields():
    api = w.int16(18) + w.int16(0) + w.int16(3) + w.uvarint(0)
    body = (w.int16(0) + w.uvarint(2) + api + w.int32(0)
            + w.uvarint(1) + w.uvarint(1) + w.uvarint(8) + w.int64(5))
    parsed = w.parse_api_versions_v3(body)
    assert parsed["apis"] == {18: (0, 3)}
    assert parsed["tags"] == {1: w.int64(5)}
    assert parsed["leftover"] == 0


def test_produce_v3_request_and_response():
    batch = w.record_batch([(b"k", b"v")])
    frame = w.produce_v3_request("t", 2, batch, correlation_id=5, acks=-1)
    body = frame[4 + 2 + 2 + 4 + 2 + len(w.CLIENT_ID):]
    r = w.Reader(body)
    assert r.string() is None and r.int16() == -1 and r.int32() == 10000
    assert r.int32() == 1 and r.string() == "t"
    assert r.int32() == 1 and r.int32() == 2
    assert r.take(r.int32()) == batch and r.remaining() == 0
    response = w.array([w.string("t") + w.array([w.int32(2) + w.int16(10) + w.int64(-1) + w.int64(-1)])]) + w.int32(0)
    assert w.parse_produce_v3(response) == ({("t", 2): (10, -1)}, 0, 0)


def test_reader_refuses_to_overrun():
    r = w.Reader(b"\x00\x05ab")
    try:
        r.string()
    except ValueError:
        return
    raise AssertionError("a string longer than the body must not parse")
