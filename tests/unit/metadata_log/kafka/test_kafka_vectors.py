"""Kafka's own test vectors, from its unit tests (apache/kafka
clients/src/test/java/org/apache/kafka/common/utils/ByteUtilsTest.java and
Crc32CTest.java): varints, varlongs and CRC-32C, through the reader and the writer.
Kafka's metadata and raft tests hold no byte vectors of records; the real logs
under tests/fixtures/kafka are this project's vectors for those."""

from __future__ import annotations

import crc32c
import pytest

from metadata_log.kafka.batch import _varint
from metadata_log.kafka.message import read_uvarint
from metadata_log.kafka.writer import uvarint, varint

# ByteUtilsTest.testUnsignedVarintSerde (Java ints; negatives as their unsigned 32 bits)
UNSIGNED = [
    (0, "00"), (-1, "ffffffff0f"), (1, "01"), (63, "3f"), (-64, "c0ffffff0f"), (64, "40"),
    (8191, "ff3f"), (-8192, "80c0ffff0f"), (8192, "8040"), (-8193, "ffbfffff0f"),
    (1048575, "ffff3f"), (1048576, "808040"), (2**31 - 1, "ffffffff07"), (-(2**31), "8080808008"),
]  # fmt: skip
# ByteUtilsTest.testVarintSerde and testVarlongSerde (zig-zag)
SIGNED = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"),
    (1048575, "feff7f"), (-1048576, "ffff7f"), (1048576, "80808001"), (-1048577, "81808001"),
    (134217727, "feffff7f"), (-134217728, "ffffff7f"), (134217728, "8080808001"),
    (-134217729, "8180808001"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
    (17179869183, "feffffff7f"), (-17179869184, "ffffffff7f"), (17179869184, "808080808001"),
    (-17179869185, "818080808001"), (2199023255551, "feffffffff7f"),
    (-2199023255552, "ffffffffff7f"), (2199023255552, "80808080808001"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "hex_bytes"), UNSIGNED)
def test_unsigned_varints_as_kafka_writes_them(value: int, hex_bytes: str) -> None:
    raw = bytes.fromhex(hex_bytes)
    unsigned = value & 0xFFFFFFFF
    assert read_uvarint(raw, 0) == (unsigned, len(raw))
    assert uvarint(unsigned) == raw


@pytest.mark.parametrize(("value", "hex_bytes"), SIGNED)
def test_zigzag_varints_and_varlongs_as_kafka_writes_them(value: int, hex_bytes: str) -> None:
    raw = bytes.fromhex(hex_bytes)
    assert _varint(raw, 0) == (value, len(raw))
    assert varint(value) == raw


def test_crc32c_values() -> None:
    assert crc32c.crc32c(b"Some String") == 608512271  # Crc32CTest.testValue
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
