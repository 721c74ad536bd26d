"""spark_replay.decode_kafka refuses what metadata_log.kafka's reader refuses.

The vectorised path (`_plan`, `_HotRows.add_framed`, `_Values.walk`) reads
batches straight from the file's bytes; a batch whose record count and last
offset delta disagree, or whose records' offset deltas are not 0, 1, ..., must
leave it for the reference reader, which names the batch. A Kafka snapshot with
data after its SnapshotFooter is refused as the replays refuse it. No Spark here:
these are the tasks' functions, run in this process.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import crc32c
import pytest

from metadata_log.errors import CorruptBatchError, MetadataLogError
from metadata_log.kafka.writer import (
    HEADER,
    MAGIC,
    encode_batch,
    encode_metadata_value,
    encode_native_batch,
    varint,
)
from metadata_log.records import NoOpRecord, SnapshotFooter, SnapshotHeader
from spark_replay import decode_kafka
from spark_replay.decode import FORMAT_KAFKA, SOURCE_SEGMENT, SOURCE_SNAPSHOT, LogFile

NOOP = encode_metadata_value("NoOpRecord", 0, {})


def _noops(n: int, start: int = 0) -> bytes:
    return b"".join(encode_batch(start + i, 1, 1000 + i, [(None, NOOP)]) for i in range(n))


def _batch(
    base: int, deltas: list[int], count: int | None = None, last: int | None = None
) -> bytes:
    """A batch of NoOpRecords with the given offset deltas, header fields as told."""
    body = b""
    for d in deltas:
        rec = b"\x00" + varint(0) + varint(d) + varint(-1) + varint(len(NOOP)) + NOOP + varint(0)
        body += varint(len(rec)) + rec
    count = len(deltas) if count is None else count
    last = len(deltas) - 1 if last is None else last
    head = HEADER.pack(
        base, HEADER.size - 12 + len(body), 1, MAGIC, 0, 0, last, 1000, 1000, -1, -1, -1, count
    )
    crc = crc32c.crc32c(head[21:] + body)
    return head[:17] + struct.pack(">I", crc) + head[21:] + body


def _segment(tmp_path: Path, data: bytes) -> LogFile:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return LogFile(str(path), SOURCE_SEGMENT, 0, last_segment=True, fmt=FORMAT_KAFKA)


def _read(f: LogFile) -> int:
    return sum(b.num_rows for b in decode_kafka.read_kafka_file(f, 1000))


def test_a_whole_segment_takes_the_fast_path(tmp_path: Path) -> None:
    f = _segment(tmp_path, _noops(2) + _batch(2, [0, 1, 2]) + _batch(5, [0]) + _noops(1, 6))
    with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        plan = decode_kafka._plan(f, m)
        assert plan is not None
        del plan
    assert _read(f) == 7


@pytest.mark.parametrize(("count", "last"), [(-1, 0), (0, 0), (1, 3)])
def test_a_batch_whose_count_and_last_delta_disagree_is_refused_as_the_reference_does(
    tmp_path: Path, count: int, last: int
) -> None:
    deltas = [0] if count == 1 else []
    f = _segment(tmp_path, _noops(2) + _batch(2, deltas, count, last) + _noops(1, 3 + last))
    with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert decode_kafka._plan(f, m) is None  # the reference reader decides
    with pytest.raises(CorruptBatchError, match=f"record count {count}, last delta {last}$"):
        _read(f)


@pytest.mark.parametrize(
    ("deltas", "bad"),
    [([1], 0), ([0, 0], 1), ([0, 2, 2], 1), ([1, 0], 0)],
)
def test_records_whose_offset_deltas_are_out_of_place_are_refused(
    tmp_path: Path, deltas: list[int], bad: int
) -> None:
    f = _segment(tmp_path, _noops(2) + _batch(2, deltas) + _noops(1, 2 + len(deltas)))
    with pytest.raises(CorruptBatchError) as e:
        _read(f)
    assert str(e.value) == (
        f"corrupt batch in {f.path} at offset {2 + bad} (file position 144): "
        f"record {bad} of the batch has offset delta {deltas[bad]}, not {bad}"
    )


def test_the_record_walk_leaves_offset_deltas_out_of_place_to_the_reference(
    tmp_path: Path,
) -> None:
    for deltas, walked in (([0, 1], True), ([0, 0], False), ([1, 1], False)):
        data = _batch(0, deltas)
        got = decode_kafka._Values().walk(data, 61, len(data), len(deltas), 0)
        assert (got is not None) == walked, deltas


def test_a_snapshot_with_data_after_its_footer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000003-0000000001.checkpoint"
    whole = (
        encode_native_batch(0, 1, 1000, [SnapshotHeader(1000)], True)
        + encode_native_batch(1, 1, 1000, [NoOpRecord()], False)
        + encode_native_batch(2, 1, 1000, [SnapshotFooter()], True)
    )
    f = LogFile(str(path), SOURCE_SNAPSHOT, 0, snapshot_end_offset=3, fmt=FORMAT_KAFKA)
    path.write_bytes(whole)
    assert _read(f) == 3
    path.write_bytes(whole + encode_native_batch(3, 1, 1000, [NoOpRecord()], False))
    with pytest.raises(MetadataLogError) as e:
        _read(f)
    assert str(e.value) == f"{path}: data after the snapshot footer at offset 3"
    path.write_bytes(whole + whole)  # the same snapshot twice
    with pytest.raises(MetadataLogError) as e:
        _read(f)
    assert str(e.value) == f"{path}: data after the snapshot footer at offset 0"
