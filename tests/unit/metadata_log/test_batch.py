"""Batches: round trip, and a flipped bit anywhere (length and CRCs included) is detected."""

from __future__ import annotations

import msgpack
import pytest

from metadata_log.batch import (
    HEADER_SIZE,
    RecordBatch,
    decode_batches,
    decode_records,
    encode_batch,
    encode_payload,
    iter_headers,
    parse_header,
    with_base_offset,
)
from metadata_log.errors import CorruptBatchError, IncompleteBatchError, RecordDecodeError
from metadata_log.records import (
    Endpoint,
    FenceBrokerRecord,
    LeaderChangeMessage,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    encode_record,
)

RECORDS = (
    RegisterBrokerRecord(1, "inc-1", 10, (Endpoint("PLAINTEXT", "h1", 9092),), (), "r1"),
    PartitionChangeRecord("topicid", 0, isr=(1, 2), leader=1),
    FenceBrokerRecord(1, 10),
)


def test_round_trip() -> None:
    data = encode_batch(5, 3, 1234, RECORDS)
    [batch] = decode_batches(data, first_offset=5)
    assert batch == RecordBatch(5, 3, 1234, RECORDS, False)
    h = parse_header(data, 0, "x", 5)
    assert (h.base_offset, h.length, h.record_count, h.last_offset, h.next_offset) == (
        5,
        len(data),
        3,
        7,
        8,
    )
    assert decode_records(data, 0, h) == list(RECORDS)


def test_control_batch_round_trip() -> None:
    data = encode_batch(0, 1, 0, [LeaderChangeMessage(1, (1, 2, 3), (1, 2))], control=True)
    [batch] = decode_batches(data)
    assert batch.control and batch.records == (LeaderChangeMessage(1, (1, 2, 3), (1, 2)),)


def test_with_base_offset_moves_the_batch() -> None:
    data = encode_batch(0, 2, 99, RECORDS)
    moved = with_base_offset(data, 40)
    [batch] = decode_batches(moved, first_offset=40)
    assert batch.base_offset == 40 and batch.records == RECORDS


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_batch(0, 0, 0, [])


@pytest.mark.parametrize("control", [False, True])
def test_every_flipped_bit_is_detected(control: bool) -> None:
    recs = [LeaderChangeMessage(2, (1, 2, 3), (2, 3))] if control else list(RECORDS)
    data = encode_batch(7, 4, 1_700_000_000_000, recs, control)
    for pos in range(len(data)):
        for bit in range(8):
            bad = bytearray(data)
            bad[pos] ^= 1 << bit
            with pytest.raises((CorruptBatchError, IncompleteBatchError)) as info:
                list(iter_headers(bytes(bad), "seg.log", 7))
            # The error names where the batch should start, whatever field was hit.
            assert info.value.position == 0
            assert "seg.log" in str(info.value)
            if pos < HEADER_SIZE:
                # Header fields, the length included, are covered by the header CRC.
                assert isinstance(info.value, CorruptBatchError)
                assert info.value.offset == 7


def test_every_flipped_byte_of_the_second_batch_names_its_offset() -> None:
    first = encode_batch(0, 1, 0, RECORDS)
    second = encode_batch(3, 1, 0, RECORDS[:2])
    for pos in range(len(second)):
        bad = bytearray(first + second)
        bad[len(first) + pos] ^= 0xFF
        with pytest.raises(CorruptBatchError) as info:
            list(iter_headers(bytes(bad), "seg.log", 0))
        assert info.value.offset == 3
        assert info.value.position == len(first)
        assert "at offset 3" in str(info.value)


def test_truncated_batch_is_incomplete() -> None:
    data = encode_batch(0, 1, 0, RECORDS)
    for cut in range(1, len(data)):
        with pytest.raises(IncompleteBatchError):
            list(iter_headers(data[:cut], "seg.log", 0))


def test_offsets_must_be_contiguous() -> None:
    data = encode_batch(0, 1, 0, RECORDS) + encode_batch(4, 1, 0, RECORDS)
    with pytest.raises(CorruptBatchError, match="expected 3"):
        decode_batches(data, "seg.log", 0)


@pytest.mark.parametrize(
    "bad, reason",
    [
        ([FenceBrokerRecord.TYPE, 0, "one", 2], "field id has a bad value"),
        ([FenceBrokerRecord.TYPE, 0, 1], "has 2 fields, record carries 1"),
        ([FenceBrokerRecord.TYPE, 1, 1, 2], "version 1 is newer than supported"),
        ([99, 0, 1], "unknown record type 99"),
        ([True, 0, 1, 2], "unknown record type True"),
        ({"type": 7}, "not an array"),
    ],
)
def test_bad_record_in_a_batch_names_its_offset_and_file(bad: object, reason: str) -> None:
    """A batch whose CRCs are right but whose third record cannot be decoded."""
    good = [encode_record(r) for r in RECORDS[:2]]
    payload = b"".join([*good, msgpack.packb(bad), encode_record(RECORDS[2])])
    batch = encode_payload(50, 1, 0, payload, 4)
    ((pos, header),) = list(iter_headers(batch, "seg.log"))
    with pytest.raises(RecordDecodeError, match=rf"seg.log at offset 52: .*{reason}"):
        decode_records(batch, pos, header, "seg.log")


def test_garbage_inside_a_batch_names_the_offset_of_the_bad_record() -> None:
    payload = b"".join([encode_record(r) for r in RECORDS[:2]]) + b"\xc1"
    batch = encode_payload(50, 1, 0, payload, 3)
    ((pos, header),) = list(iter_headers(batch, "seg.log"))
    with pytest.raises(RecordDecodeError, match=r"seg.log at offset 52: not valid msgpack"):
        decode_records(batch, pos, header, "seg.log")


def test_record_count_must_match() -> None:
    payload = b"".join([encode_record(r) for r in RECORDS])
    batch = encode_payload(50, 1, 0, payload, 4)
    ((pos, header),) = list(iter_headers(batch, "seg.log"))
    with pytest.raises(RecordDecodeError, match="declares 4 records, holds 3"):
        decode_records(batch, pos, header, "seg.log")
