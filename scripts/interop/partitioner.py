"""Kafka's Java default partitioner for keyed records, in Python.

The Java client puts a keyed record in partition
`(murmur2(key) & 0x7fffffff) % partitions`, using Kafka's own murmur2 variant
(seed 0x9747b28c, little-endian 4-byte blocks). librdkafka's
`partitioner=murmur2_random` promises the same mapping; the interop tests use
this module to check that what the clients chose is what a Java producer would
have chosen, so that data written by one client family is found by another.
"""

import functools

M = 0x5BD1E995
SEED = 0x9747B28C
MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 as a signed 32-bit int, exactly as Java returns it."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * M) & MASK32
        k ^= k >> 24
        k = (k * M) & MASK32
        h = (h * M) & MASK32
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=65536)
def java_partition(key: bytes, partitions: int) -> int:
    """Partition the Java DefaultPartitioner / BuiltInPartitioner picks for a key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
