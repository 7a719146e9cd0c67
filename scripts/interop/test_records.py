"""Record contents survive the broker byte for byte.

Goal: whatever a producer puts in a record — compression codec, headers, null
keys and values, values close to message.max.bytes — a consumer gets back
unchanged, and compressed batches stay compressed on disk (the broker stores
batches as sent and never recompresses).

Method: confluent-kafka produces with each setting, reads back with assign(),
and for compression the partition's .log file is parsed (docs/format.md) to
check the codec bits of the stored batches. Both io modes.
"""

import os
import struct

import pytest

from clients import consume_all, create_topic, produce_all, producer, unique_topic

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(broker, topic, partition=0):
    dirs = [d for d in broker.data_dir.rglob(f"{topic}-{partition}") if d.is_dir()]
    assert len(dirs) == 1
    codecs = set()
    for log in sorted(dirs[0].glob("*.log")):
        data = log.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            (batch_length,) = struct.unpack(">i", data[pos + 8:pos + 12])
            if batch_length <= 0 or data[pos + 16] != 2:
                break
            (attributes,) = struct.unpack(">h", data[pos + 21:pos + 23])
            codecs.add(attributes & 0x7)
            pos += 12 + batch_length
    return codecs


@pytest.mark.parametrize("io_mode", ["direct", "buffered"])
@pytest.mark.parametrize("codec", sorted(CODECS))
def test_compressed_batches_are_stored_as_sent(broker_factory, io_mode, codec):
    broker = broker_factory(io_mode=io_mode, cores=1)
    topic = unique_topic(f"codec-{codec}")
    create_topic(broker.bootstrap, topic, 1)
    values = [b"%d:" % i + b"compressible " * 20 for i in range(2000)]
    produce_all(producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 20}),
                [{"topic": topic, "key": b"k%d" % i, "value": v, "partition": 0}
                 for i, v in enumerate(values)])
    got = consume_all(broker.bootstrap, topic, 1)[0]
    assert [r.value for r in got] == values, f"{codec} records changed on the way"
    assert [r.offset for r in got] == list(range(len(values)))
    broker.stop_cleanly()
    assert stored_codecs(broker, topic) == {CODECS[codec]}, (
        f"batches on disk should keep codec {CODECS[codec]} ({codec})")


def test_headers_null_keys_and_null_values_round_trip(broker):
    topic = unique_topic("shapes")
    create_topic(broker.bootstrap, topic, 1)
    prod = producer(broker.bootstrap)
    expected = [
        (None, b"no key", None),
        (b"tombstone", None, None),
        (None, None, None),
        (b"k", b"v", [("h1", b"x"), ("h2", b""), ("h1", b"dup")]),
        (b"", b"", [("empty", None)]),
    ]
    for key, value, headers in expected:
        prod.produce(topic, key=key, value=value, headers=headers, partition=0)
    assert prod.flush(30) == 0
    got = consume_all(broker.bootstrap, topic, 1)[0]
    assert len(got) == len(expected)
    for r, (key, value, headers) in zip(got, expected):
        assert (r.key, r.value) == (key, value)
        assert (r.headers or None) == (headers or None), f"headers of record {r.offset}"


@pytest.mark.parametrize("io_mode", ["direct", "buffered"])
def test_values_near_message_max_bytes(broker_factory, io_mode):
    broker = broker_factory(io_mode=io_mode, cores=2)
    topic = unique_topic("big")
    create_topic(broker.bootstrap, topic, 2)
    values = [os.urandom(n) for n in (300_000, 700_000, 990_000, 1, 512_000)]
    produce_all(producer(broker.bootstrap, **{"linger.ms": 0}),
                [{"topic": topic, "value": v, "partition": i % 2} for i, v in enumerate(values)])
    got = consume_all(broker.bootstrap, topic, 2)
    assert [r.value for r in got[0]] == values[0::2]
    assert [r.value for r in got[1]] == values[1::2]
    broker.restart()
    again = consume_all(broker.bootstrap, topic, 2)
    assert [r.value for r in again[0]] + [r.value for r in again[1]] == values[0::2] + values[1::2]
