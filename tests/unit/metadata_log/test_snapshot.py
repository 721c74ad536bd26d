"""Snapshots: naming, atomic write, verified read, listing and deletion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metadata_log.batch import decode_batches, encode_batch
from metadata_log.errors import CorruptBatchError
from metadata_log.records import (
    FenceBrokerRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicRecord,
)
from metadata_log.snapshot import (
    SnapshotId,
    delete_snapshots_before,
    iter_snapshot_batches,
    latest_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
    write_snapshot_bytes,
)

RECORDS = [TopicRecord("orders", "tid")] + [
    PartitionRecord("tid", p, (1, 2, 3), (1, 2, 3), leader=1) for p in range(7)
]


def test_file_name() -> None:
    sid = SnapshotId(4096, 3)
    assert sid.file_name == "00000000000000004096-0000000003.checkpoint"
    assert SnapshotId.from_file_name(sid.file_name) == sid
    with pytest.raises(ValueError):
        SnapshotId.from_file_name("4096-3.checkpoint")
    with pytest.raises(ValueError):
        SnapshotId(-1, 0)


def test_write_and_read(tmp_path: Path) -> None:
    sid = SnapshotId(120, 4)
    path = write_snapshot(
        tmp_path,
        sid,
        iter(RECORDS),
        last_contained_log_time=777,
        append_time_ms=999,
        records_per_batch=3,
    )
    assert path == snapshot_path(tmp_path, sid)
    assert not list(tmp_path.glob("*.part"))
    snap = read_snapshot(path)
    assert snap.snapshot_id == sid
    assert snap.header == SnapshotHeader(777)
    assert list(snap.records()) == RECORDS
    batches = list(iter_snapshot_batches(path))
    # Header, 3 data batches of at most 3 records, footer; offsets from 0, epoch 4.
    assert [b.control for b in batches] == [True, False, False, False, True]
    assert batches[0].records == (SnapshotHeader(777),)
    assert batches[-1].records == (SnapshotFooter(),)
    assert [b.base_offset for b in batches] == [0, 1, 4, 7, 9]
    assert {b.leader_epoch for b in batches} == {4}
    assert {b.append_time_ms for b in batches} == {999}


def test_empty_snapshot(tmp_path: Path) -> None:
    path = write_snapshot(
        tmp_path, SnapshotId(1, 0), [], last_contained_log_time=0, append_time_ms=0
    )
    assert list(read_snapshot(path).records()) == []


def test_control_records_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data records only"):
        write_snapshot(
            tmp_path,
            SnapshotId(5, 1),
            [LeaderChangeMessage(1)],
            last_contained_log_time=0,
            append_time_ms=0,
        )
    assert not list(tmp_path.iterdir())  # no .part file left behind


def test_failed_write_leaves_no_part_file(tmp_path: Path) -> None:
    def boom():  # type: ignore[no-untyped-def]
        yield NoOpRecord()
        raise RuntimeError("image iteration failed")

    with pytest.raises(RuntimeError):
        write_snapshot(
            tmp_path, SnapshotId(5, 1), boom(), last_contained_log_time=0, append_time_ms=0
        )
    assert not list(tmp_path.iterdir())


def test_every_flipped_byte_is_detected(tmp_path: Path) -> None:
    path = write_snapshot(
        tmp_path,
        SnapshotId(10, 2),
        RECORDS[:3],
        last_contained_log_time=1,
        append_time_ms=2,
        records_per_batch=2,
    )
    data = path.read_bytes()
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        with pytest.raises(CorruptBatchError) as info:
            read_snapshot(path)
        assert str(path) in str(info.value) and "offset" in str(info.value)
    path.write_bytes(data)
    assert list(read_snapshot(path).records()) == RECORDS[:3]


def test_truncated_snapshot_is_corrupt(tmp_path: Path) -> None:
    path = write_snapshot(
        tmp_path, SnapshotId(10, 2), RECORDS, last_contained_log_time=1, append_time_ms=2
    )
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(CorruptBatchError):
            read_snapshot(path)
    # Cut exactly before the footer: complete batches, but no footer.
    footer = len(encode_batch(0, 2, 2, [SnapshotFooter()], True))
    path.write_bytes(data[:-footer])
    with pytest.raises(CorruptBatchError, match="SnapshotFooter"):
        read_snapshot(path)


def test_structure_is_checked(tmp_path: Path) -> None:
    header = encode_batch(0, 1, 0, [SnapshotHeader(0)], True)
    data = encode_batch(1, 1, 0, [NoOpRecord()])
    footer = encode_batch(2, 1, 0, [SnapshotFooter()], True)
    sid = SnapshotId(3, 1)
    with pytest.raises(CorruptBatchError, match="SnapshotHeader"):
        no_header = encode_batch(0, 1, 0, [NoOpRecord()])
        write_snapshot_bytes(
            tmp_path, sid, no_header + encode_batch(1, 1, 0, [SnapshotFooter()], True)
        )
    with pytest.raises(CorruptBatchError, match="expected 1"):
        write_snapshot_bytes(tmp_path, sid, header + encode_batch(5, 1, 0, [NoOpRecord()]) + footer)
    with pytest.raises(CorruptBatchError, match="SnapshotFooter"):
        write_snapshot_bytes(tmp_path, sid, header + data)
    mid_control = encode_batch(1, 1, 0, [LeaderChangeMessage(1)], True)
    with pytest.raises(CorruptBatchError, match="control batch inside"):
        write_snapshot_bytes(tmp_path, sid, header + mid_control + footer)
    assert not list(tmp_path.iterdir())
    path = write_snapshot_bytes(tmp_path, sid, header + data + footer)
    assert list(read_snapshot(path).records()) == [NoOpRecord()]


def test_write_snapshot_bytes_round_trip(tmp_path: Path) -> None:
    src = write_snapshot(
        tmp_path / "a", SnapshotId(50, 7), RECORDS, last_contained_log_time=5, append_time_ms=6
    )
    dst = write_snapshot_bytes(tmp_path / "b", SnapshotId(50, 7), src.read_bytes())
    assert dst.read_bytes() == src.read_bytes()
    assert decode_batches(dst.read_bytes(), first_offset=0)[1].records[0] == RECORDS[0]


def test_list_latest_and_delete(tmp_path: Path) -> None:
    assert list_snapshots(tmp_path / "missing") == []
    assert latest_snapshot(tmp_path) is None
    ids = [SnapshotId(100, 2), SnapshotId(10, 1), SnapshotId(100, 3), SnapshotId(2000, 3)]
    for sid in ids:
        write_snapshot(
            tmp_path, sid, [FenceBrokerRecord(1, 1)], last_contained_log_time=0, append_time_ms=0
        )
    (tmp_path / (SnapshotId(5000, 3).file_name + ".part")).write_bytes(b"partial")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert list_snapshots(tmp_path) == sorted(ids)
    assert latest_snapshot(tmp_path) == SnapshotId(2000, 3)
    deleted = delete_snapshots_before(tmp_path, SnapshotId(100, 3))
    assert deleted == [SnapshotId(10, 1), SnapshotId(100, 2)]
    assert list_snapshots(tmp_path) == [SnapshotId(100, 3), SnapshotId(2000, 3)]
    assert sorted(os.listdir(tmp_path))[0] == "00000000000000000000.log"
