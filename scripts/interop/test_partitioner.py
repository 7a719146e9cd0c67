"""Unit tests for the Python port of Kafka's murmur2 partitioner.

The interop tests trust partitioner.py to say where a Java producer would put a
key, so it is checked here against the vectors of Kafka's own
UtilsTest.testMurmur2, plus the partition arithmetic on a negative hash. No
broker is needed.
"""

import pytest

from partitioner import java_partition, murmur2

# org.apache.kafka.common.utils.UtilsTest.testMurmur2
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"", 275646681),
]


@pytest.mark.parametrize("key,expected", KAFKA_VECTORS)
def test_murmur2_matches_kafka_utils_test(key, expected):
    assert murmur2(key) == expected, f"murmur2({key!r})"


def test_partition_masks_sign_bit_before_modulo():
    # murmur2(b"foobar") is negative; Java's toPositive masks the sign bit,
    # it does not take the absolute value: (-790332482 & 0x7fffffff) % 50 == 16.
    assert java_partition(b"foobar", 50) == (-790332482 & 0x7FFFFFFF) % 50 == 16
    assert java_partition(b"foobar", 50) != abs(-790332482) % 50


def test_every_tail_length_is_hashed():
    # Keys of length 0..7 cover each `length % 4` branch; distinct keys that
    # differ only in their tail must not collide by ignoring it.
    hashes = {murmur2(b"k" * n) for n in range(8)}
    assert len(hashes) == 8
    for n in range(1, 4):
        assert murmur2(b"abcd" + b"x" * n) != murmur2(b"abcd" + b"y" * n)
