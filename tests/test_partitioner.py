"""The batch partitioner against kafka-python's own (the Java client's murmur2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2

from workers.transport.partitioner import murmur2, partitions


def kafka_partition(key: bytes, count: int) -> int:
    """kafka-python's DefaultPartitioner for a keyed message on partitions 0 .. count - 1."""
    return (kafka_murmur2(key) & 0x7FFFFFFF) % count


@given(st.binary(max_size=64))
def test_murmur2_is_kafkas(key: bytes) -> None:
    assert murmur2(key) == kafka_murmur2(key)


@given(st.lists(st.binary(max_size=40), max_size=50), st.integers(1, 64))
def test_each_key_gets_the_partition_kafkas_partitioner_gives_it(keys: list[bytes], count: int) -> None:
    assert partitions(keys, count) == [kafka_partition(key, count) for key in keys]


# Apache Kafka's UtilsTest.testMurmur2: what the Java client's Utils.murmur2 returns (signed).
JAVA_CASES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "signed"), JAVA_CASES.items())
def test_the_java_clients_values(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed % (1 << 32)
    assert partitions([key], 7) == [(signed & 0x7FFFFFFF) % 7]


def test_no_keys_and_bad_counts() -> None:
    assert partitions([], 4) == []
    with pytest.raises(ValueError, match="at least one partition"):
        partitions([b"k"], 0)
