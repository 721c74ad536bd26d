"""A Kafka batch is read within bounds and checked as Kafka checks it.

Decompression stops at MAX_DECOMPRESSED_BYTES for every codec (a small zstd
batch can unpack to gigabytes); a record count and last offset delta that do not
agree, and records whose offset deltas are not 0, 1, ... in order, are refused
by both the reference reader and the fast one (aiokafka's), each with one error
naming the file and offset.
"""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest

from metadata_log.errors import CorruptBatchError, MetadataLogError
from metadata_log.kafka import batch
from metadata_log.kafka.writer import HEADER, MAGIC, encode_batch, encode_metadata_value, varint

NOOP = encode_metadata_value("NoOpRecord", 0, {})
PATH = "seg.log"


def _batch(base: int, payload: bytes, count: int, last_delta: int, codec: int = 0) -> bytes:
    head = HEADER.pack(
        base, HEADER.size - 12 + len(payload), 1, MAGIC, 0, codec,
        last_delta, 1000, 1000, -1, -1, -1, count,
    )  # fmt: skip
    crc = crc32c.crc32c(head[21:] + payload)
    return head[:17] + struct.pack(">I", crc) + head[21:] + payload


def _records(deltas: list[int]) -> bytes:
    """NoOpRecords with the given offset deltas (encode_batch's framing)."""
    body = b""
    for d in deltas:
        rec = b"\x00" + varint(0) + varint(d) + varint(-1) + varint(len(NOOP)) + NOOP + varint(0)
        body += varint(len(rec)) + rec
    return body


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_a_batch_that_decompresses_past_the_bound_is_refused_with_its_offset(
    monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    records = [(None, NOOP)] * 400  # ~6 KB uncompressed, a few hundred bytes compressed
    data = encode_batch(7, 1, 1000, records, compression=compression)
    h = batch.parse_header(data, 0, PATH)
    size = len(batch.records_section(data, h, PATH))
    monkeypatch.setattr(batch, "MAX_DECOMPRESSED_BYTES", size)
    assert len(batch.records_of(data, h, PATH)) == 400  # at the bound: read
    monkeypatch.setattr(batch, "MAX_DECOMPRESSED_BYTES", size - 1)
    for read in (batch.raw_records, batch.records_of):
        with pytest.raises(CorruptBatchError) as e:
            read(data, h, PATH)
        assert str(e.value) == (
            f"corrupt batch in {PATH} at offset 7 (file position 0): the {compression} records "
            f"decompress to more than {size - 1} bytes (the bound on one batch)"
        )


def test_running_out_of_memory_while_decompressing_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = encode_batch(3, 1, 1000, [(None, NOOP)], compression="gzip")
    h = batch.parse_header(data, 0, PATH)

    def no_memory(*_args: object) -> bytes:
        raise MemoryError

    monkeypatch.setattr(batch, "_gzip", no_memory)
    with pytest.raises(MetadataLogError) as e:
        batch.records_of(data, h, PATH)
    assert str(e.value).endswith(
        "at offset 3 (file position 0): out of memory decompressing its gzip records "
        f"(at most {batch.MAX_DECOMPRESSED_BYTES} bytes)"
    )


@pytest.mark.parametrize(
    ("count", "last_delta"), [(-1, 0), (0, 0), (0, -1), (1, 3), (2, 0), (-1, -2)]
)
def test_a_record_count_that_disagrees_with_the_last_offset_delta_is_corrupt(
    count: int, last_delta: int
) -> None:
    data = _batch(5, b"", count, last_delta)
    with pytest.raises(CorruptBatchError) as e:
        batch.parse_header(data, 0, PATH)
    assert str(e.value) == (
        f"corrupt batch in {PATH} at offset 5 (file position 0): "
        f"record count {count}, last delta {last_delta}"
    )


@pytest.mark.parametrize("deltas", [[0, 0], [1, 1], [0, 2, 2], [1, 0], [0, 1, 3]])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_records_whose_offset_deltas_are_not_in_place_are_corrupt(
    deltas: list[int], compression: str
) -> None:
    payload = _records(deltas)
    if compression == "gzip":
        c = zlib.compressobj(wbits=31)
        payload = c.compress(payload) + c.flush()
    data = _batch(10, payload, len(deltas), len(deltas) - 1, codec=int(compression == "gzip"))
    h = batch.parse_header(data, 0, PATH)
    bad = next(i for i, d in enumerate(deltas) if d != i)
    for read in (batch.raw_records, batch.records_of):
        with pytest.raises(CorruptBatchError) as e:
            read(data, h, PATH)
        assert str(e.value) == (
            f"corrupt batch in {PATH} at offset {10 + bad} (file position 0): "
            f"record {bad} of the batch has offset delta {deltas[bad]}, not {bad}"
        )


def test_records_with_offset_deltas_in_place_are_read() -> None:
    data = _batch(10, _records([0, 1, 2]), 3, 2)
    h = batch.parse_header(data, 0, PATH)
    assert [r[0] for r in batch.records_of(data, h, PATH)] == [10, 11, 12]
    assert [r.offset for r in batch.raw_records(data, h, PATH)] == [10, 11, 12]
