"""FileLog: append, read, roll, sparse index, truncate, reopen, epoch cache, trimming, reset."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from metadata_log import file_log as log_module
from metadata_log.batch import decode_batches, encode_batch
from metadata_log.checkpoints import CheckpointFormatError
from metadata_log.epoch_cache import LeaderEpochCache
from metadata_log.errors import CorruptBatchError, LogFatalError, OffsetOutOfRangeError
from metadata_log.file_log import (
    INDEX_ENTRY,
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    FileLog,
    index_file_name,
    segment_file_name,
)
from metadata_log.records import PartitionChangeRecord


def batch(base: int, epoch: int, n: int = 1, width: int = 0) -> bytes:
    """n records at `base`; `width` pads each record to make batches bigger."""
    recs = [PartitionChangeRecord("t" * (1 + width), base + i, isr=(1, 2, 3)) for i in range(n)]
    return encode_batch(base, epoch, 1_000 + base, recs)


def fill(log: FileLog, count: int, epoch: int = 1, n: int = 2, width: int = 0) -> list[bytes]:
    out = []
    for _ in range(count):
        b = batch(log.end_offset, epoch, n, width)
        log.append(b)
        out.append(b)
    return out


def read_all(log: FileLog, max_bytes: int = 1 << 20) -> bytes:
    out = []
    offset = log.start_offset
    while offset < log.end_offset:
        chunk = log.read(offset, max_bytes)
        assert chunk
        out.append(chunk)
        offset = decode_batches(chunk, first_offset=offset)[-1].next_offset
    return b"".join(out)


def test_fresh_log(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    with FileLog.open(d) as log:
        assert (log.start_offset, log.end_offset, log.flushed_offset, log.latest_epoch) == (
            0,
            0,
            0,
            0,
        )
        assert log.size_bytes == 0
        assert log.read(0, 100) == b""
        assert log.end_offset_for_epoch(0) == (-1, -1)
    assert (d / segment_file_name(0)).exists()


def test_append_and_read_back(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        written = fill(log, 10, n=3)
        assert log.end_offset == 30
        assert log.flushed_offset == 0
        assert read_all(log) == b"".join(written)
        # A read starting inside a batch returns that whole batch.
        assert log.read(4, 1) == written[1]
        # max_bytes bounds the batches, but at least one batch comes back.
        two = log.read(0, len(written[0]) + len(written[1]))
        assert two == written[0] + written[1]
        assert log.read(0, len(written[0]) + len(written[1]) - 1) == written[0]
        assert log.read(0, 0) == written[0]
        assert log.read(30, 100) == b""
        assert log.size_bytes == sum(map(len, written))


def test_interleaved_readers_each_read_with_one_pread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followers and the leader's own delivery read the tail at different offsets at
    once: each sequential reader costs one pread per read, and a read from the
    middle of an index interval scans the headers with one pread, not one each."""
    with FileLog.open(tmp_path, index_interval_bytes=4096) as log:
        written = fill(log, 200)  # ~100-byte batches: ~40 per index interval
        preads: list[int] = []
        real = os.pread

        def counting(fd: int, n: int, pos: int) -> bytes:
            preads.append(pos)
            return real(fd, n, pos)

        monkeypatch.setattr(log_module.os, "pread", counting)
        # A cold read 39 batches past an index entry: one pread to find it, one to read.
        assert log.read(78, len(written[39])) == written[39]
        assert len(preads) == 2
        # Three readers at different offsets, interleaved, one batch per read.
        positions = [0, 100, 300]

        def read_next(reader: int) -> None:
            want = written[positions[reader] // 2]
            assert log.read(positions[reader], len(want)) == want
            positions[reader] += 2

        for reader in range(3):
            read_next(reader)
        preads.clear()
        for _ in range(40):
            for reader in range(3):
                read_next(reader)
        assert len(preads) == 120
        # Readers at the same offset (the leader's followers and its own delivery,
        # each after the same appended batch) share a hint.
        preads.clear()
        for _ in range(3):
            assert (
                log.read(positions[0], len(written[positions[0] // 2]))
                == written[positions[0] // 2]
            )
        assert len(preads) == 3
        # A truncation forgets the hints: reads still return the right batches.
        log.truncate_to(104)
        assert log.read(100, len(written[50])) == written[50]
        with pytest.raises(OffsetOutOfRangeError):
            log.read(positions[2], 100)


def test_out_of_range_reads(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=200) as log:
        fill(log, 6)
        log.delete_segments_below(6)
        start = log.start_offset
        assert start > 0
        with pytest.raises(OffsetOutOfRangeError):
            log.read(start - 1, 100)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(log.end_offset + 1, 100)


def test_append_validation(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        log.append(batch(0, 5))
        with pytest.raises(ValueError, match="not the log end offset"):
            log.append(batch(3, 5))
        with pytest.raises(ValueError, match="below the log's latest epoch 5"):
            log.append(batch(1, 4))
        with pytest.raises(ValueError, match="exactly one batch"):
            log.append(batch(1, 5) + batch(2, 5))
        bad = bytearray(batch(1, 5))
        bad[-1] ^= 1
        with pytest.raises(CorruptBatchError):
            log.append(bytes(bad))
        assert log.end_offset == 1


def test_roll_and_sparse_index(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=1000, index_interval_bytes=150) as log:
        written = fill(log, 40, n=1, width=20)
        bases = log.segment_base_offsets()
        assert len(bases) > 3 and bases[0] == 0
        for name in os.listdir(tmp_path):
            if name.endswith(".log"):
                assert os.path.getsize(tmp_path / name) <= 1000
        # Every offset reads back its own batch, wherever the index entries fall.
        for i, b in enumerate(written):
            assert log.read(i, 1) == b
        # Sequential reads with a small max_bytes walk every segment.
        assert read_all(log, 300) == b"".join(written)
    # Rolled segments have their index written; entries are relative offset + position.
    data = (tmp_path / index_file_name(0)).read_bytes()
    entries = [INDEX_ENTRY.unpack_from(data, i) for i in range(0, len(data), INDEX_ENTRY.size)]
    assert entries[0] == (0, 0)
    positions = [p for _, p in entries]
    assert positions == sorted(positions) and len(entries) > 2
    assert all(b - a >= 150 for a, b in zip(positions, positions[1:], strict=False))


def test_batch_larger_than_a_segment(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=100) as log:
        big = fill(log, 3, n=10)
        assert all(len(b) > 100 for b in big)
        assert log.segment_base_offsets() == [0, 10, 20]
        assert log.read(15, 1) == big[1]


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=300) as log:
        written = fill(log, 5, epoch=1) + fill(log, 5, epoch=3)
        entries = log.epoch_entries()
        log.flush()
    with FileLog.open(tmp_path, segment_bytes=300) as log:
        assert log.end_offset == 20
        assert log.flushed_offset == 20
        assert log.epoch_entries() == entries == [(1, 0), (3, 10)]
        assert read_all(log) == b"".join(written)
        assert log.latest_epoch == 3


def test_close_flushes(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        fill(log, 3)
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\n__cluster_metadata 0 6\n"
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n1 0\n"


def test_epoch_cache_and_end_offset_for_epoch(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        fill(log, 2, epoch=2)  # 0..3
        fill(log, 3, epoch=4)  # 4..9
        fill(log, 1, epoch=7)  # 10..11
        assert log.epoch_entries() == [(2, 0), (4, 4), (7, 10)]
        assert log.end_offset_for_epoch(1) == (-1, -1)  # below the first epoch
        assert log.end_offset_for_epoch(2) == (2, 4)
        assert log.end_offset_for_epoch(3) == (2, 4)  # largest known epoch <= 3
        assert log.end_offset_for_epoch(4) == (4, 10)
        assert log.end_offset_for_epoch(6) == (4, 10)
        assert log.end_offset_for_epoch(7) == (7, 12)
        assert log.end_offset_for_epoch(9) == (7, 12)
        assert log.end_offset_for_epoch(-1) == (-1, -1)


def test_truncate_to(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=250) as log:
        written = fill(log, 4, epoch=1, n=3) + fill(log, 4, epoch=2, n=3)  # 24 offsets
        log.flush()
        assert len(log.segment_base_offsets()) > 2
        # A batch containing the offset goes whole.
        assert log.truncate_to(20) == 18
        assert log.end_offset == log.flushed_offset == 18
        assert read_all(log) == b"".join(written[:6])
        assert log.epoch_entries() == [(1, 0), (2, 12)]
        assert log.truncate_to(12) == 12
        assert log.epoch_entries() == [(1, 0)]
        assert log.latest_epoch == 1
        assert log.truncate_to(100) == 12  # beyond the end: nothing happens
        # The log grows again from there, with a lower epoch than the one removed.
        log.append(batch(12, 1))
        assert log.end_offset == 13
    with FileLog.open(tmp_path, segment_bytes=250) as log:
        assert log.end_offset == 13
        assert log.epoch_entries() == [(1, 0)]
        assert read_all(log) == b"".join(written[:4]) + batch(12, 1)
        assert log.truncate_to(0) == 0
        assert (log.start_offset, log.end_offset, log.latest_epoch) == (0, 0, 0)
        assert log.epoch_entries() == []
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [segment_file_name(0)]


def test_truncate_exactly_at_a_segment_boundary(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=250) as log:
        fill(log, 8, n=3)
        second = log.segment_base_offsets()[1]
        assert log.truncate_to(second) == second
        assert log.segment_base_offsets()[-1] < second
        log.append(batch(second, 1, 3))
        assert log.read(second, 1) == batch(second, 1, 3)


def test_delete_segments_below(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=250) as log:
        written = fill(log, 8, epoch=1, n=3) + fill(log, 4, epoch=2, n=3)  # 36 offsets
        bases = log.segment_base_offsets()
        # Only segments wholly below the offset go.
        assert log.delete_segments_below(bases[2] + 1) == bases[2]
        assert log.start_offset == bases[2]
        assert log.epoch_entries()[0] == (1, bases[2])
        assert log.read(bases[2], 1) == written[bases[2] // 3]
        assert log.delete_segments_below(0) == bases[2]  # nothing below the start
        # A fully covered log is trimmed to one empty segment at the end.
        assert log.delete_segments_below(36) == 36
        assert (log.start_offset, log.end_offset) == (36, 36)
        assert log.epoch_entries() == [(2, 36)]
        assert log.latest_epoch == 2
        assert log.read(36, 100) == b""
        log.append(batch(36, 2))
    with FileLog.open(tmp_path) as log:
        assert (log.start_offset, log.end_offset) == (36, 37)
        assert log.epoch_entries() == [(2, 36)]
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [segment_file_name(36)]


def test_reset(tmp_path: Path) -> None:
    snap = tmp_path / "00000000000000000500-0000000004.checkpoint"
    with FileLog.open(tmp_path, segment_bytes=250) as log:
        fill(log, 8)
        snap.write_bytes(b"snapshot")
        log.reset(500, 4)
        assert (log.start_offset, log.end_offset, log.flushed_offset) == (500, 500, 500)
        assert log.latest_epoch == 4
        assert log.epoch_entries() == [(4, 500)]
        assert log.end_offset_for_epoch(4) == (4, 500)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 100)
    assert snap.exists()  # snapshots are not the log's to delete
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [segment_file_name(500)]
    with FileLog.open(tmp_path) as log:
        assert (log.start_offset, log.end_offset, log.latest_epoch) == (500, 500, 4)
        # A batch of a later epoch at the same offset keeps the snapshot's epoch known.
        log.append(batch(500, 6))
        assert log.epoch_entries() == [(4, 500), (6, 500)]
        assert log.end_offset_for_epoch(5) == (4, 500)
        # Truncating the whole log keeps the snapshot's epoch (latest_epoch falls back).
        assert log.truncate_to(500) == 500
        assert log.latest_epoch == 4
        assert log.epoch_entries() == [(4, 500)]
    with FileLog.open(tmp_path) as log:
        assert log.epoch_entries() == [(4, 500)]


def test_stray_files_are_deleted_and_index_rebuilt(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, segment_bytes=300, index_interval_bytes=100) as log:
        written = fill(log, 10, n=2)
    good_index = (tmp_path / index_file_name(0)).read_bytes()
    (tmp_path / "leader-epoch-checkpoint.tmp").write_text("garbage")
    (tmp_path / "00000000000000000100-0000000001.checkpoint.part").write_bytes(b"x")
    (tmp_path / index_file_name(0)).write_bytes(b"\xff" * 13)
    (tmp_path / index_file_name(9999)).write_bytes(b"")  # no segment of its own
    with FileLog.open(tmp_path, segment_bytes=300, index_interval_bytes=100) as log:
        assert read_all(log) == b"".join(written)
        for i, b in enumerate(written):
            assert log.read(2 * i + 1, 1) == b
    names = set(os.listdir(tmp_path))
    assert "leader-epoch-checkpoint.tmp" not in names
    assert not any(n.endswith(".part") for n in names)
    assert index_file_name(9999) not in names
    assert (tmp_path / index_file_name(0)).read_bytes() == good_index


def test_stale_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        fill(log, 2, epoch=1)
        fill(log, 2, epoch=3)
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text("0\n1\n1 0\n")
    with FileLog.open(tmp_path) as log:
        assert log.epoch_entries() == [(1, 0), (3, 4)]
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n1 0\n3 4\n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0\n",
        "1\n0\n",
        "0\n2\n1 0\n",
        "0\n1\n1\n",
        "0\n1\nx 0\n",
        "0\n2\n3 0\n1 5\n",
        "0\n1\n1 0",
    ],
)
def test_bad_epoch_checkpoint_is_a_clear_error(tmp_path: Path, text: str) -> None:
    with FileLog.open(tmp_path) as log:
        fill(log, 1)
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text(text)
    with pytest.raises(CheckpointFormatError, match=LEADER_EPOCH_CHECKPOINT):
        FileLog.open(tmp_path)


def test_bad_recovery_point_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        fill(log, 1)
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\n__cluster_metadata 0 abc\n")
    with pytest.raises(CheckpointFormatError, match="recovery-point-checkpoint.*line 3"):
        FileLog.open(tmp_path)


def test_missing_flushed_data_refuses_to_open(tmp_path: Path) -> None:
    with FileLog.open(tmp_path) as log:
        written = fill(log, 3)
    seg = tmp_path / segment_file_name(0)
    seg.write_bytes(seg.read_bytes()[: len(written[0])])  # a clean cut below the recovery point
    with pytest.raises(CorruptBatchError, match=r"00000000000000000000\.log at offset 2"):
        FileLog.open(tmp_path)


def test_fsync_failure_is_fatal_and_never_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = FileLog.open(tmp_path)
    fill(log, 2)
    calls = []
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(LogFatalError, match="fsync"):
        log.flush()
    assert len(calls) == 1
    monkeypatch.setattr(os, "fsync", real_fsync)
    # The log refuses every further use, even though fsync works again.
    with pytest.raises(LogFatalError):
        log.flush()
    with pytest.raises(LogFatalError):
        log.append(batch(4, 1))
    with pytest.raises(LogFatalError):
        log.read(0, 100)
    with pytest.raises(LogFatalError):
        log.truncate_to(0)
    assert len(calls) == 1
    log.close()  # closing a failed log writes nothing and does not raise


def test_disk_full_is_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FileLog.open(tmp_path)
    fill(log, 1)

    def full(fd: int, data: bytes, pos: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(LogFatalError, match="disk full"):
        log.append(batch(2, 1))
    monkeypatch.undo()
    with pytest.raises(LogFatalError):
        log.append(batch(2, 1))
    log.close()


def test_checkpoint_write_failure_is_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FileLog.open(tmp_path)
    fill(log, 1)

    def broken(path: object, data: bytes, *, sync_dir: bool = True) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log_module, "write_atomic", broken)
    with pytest.raises(LogFatalError, match="disk full"):
        log.flush()
    log.close()


def test_open_logs_a_warning_for_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FileLog.open(tmp_path) as log:
        fill(log, 2)
        log.flush()
        fill(log, 1)
        log.close(flush=False)
    seg = tmp_path / segment_file_name(0)
    seg.write_bytes(seg.read_bytes()[:-3])
    with caplog.at_level(logging.WARNING), FileLog.open(tmp_path) as log:
        assert log.end_offset == 4
    assert any(
        "torn tail at offset 4" in r.getMessage() and segment_file_name(0) in r.getMessage()
        for r in caplog.records
    )


def test_closed_log_refuses_use(tmp_path: Path) -> None:
    log = FileLog.open(tmp_path)
    log.close()
    log.close()  # idempotent
    assert log.closed
    with pytest.raises(ValueError, match="closed"):
        log.append(batch(0, 1))


def test_epoch_cache_unit() -> None:
    c = LeaderEpochCache()
    assert c.assign(1, 0) and not c.assign(1, 5)
    assert c.assign(3, 10)
    with pytest.raises(ValueError):
        c.assign(2, 20)
    with pytest.raises(ValueError):
        c.assign(4, 5)
    assert c.end_offset_for(2, 50) == (1, 10)
    assert c.epoch_for_offset(9) == 1 and c.epoch_for_offset(10) == 3
    assert c.truncate_from_start(12) and c.entries() == [(3, 12)]
    c2 = LeaderEpochCache([(1, 0), (3, 10), (5, 20)])
    assert c2.truncate_from_start(10) and c2.entries() == [(3, 10), (5, 20)]
    assert c2.truncate_from_end(20) and c2.entries() == [(3, 10)]
    assert not c2.truncate_from_end(11)
    assert LeaderEpochCache.parse("x", c2.serialize().decode()) == c2


def rp_on_disk(directory: Path) -> int:
    return int((directory / RECOVERY_POINT_CHECKPOINT).read_text().split()[-1])


def test_a_durable_append_costs_one_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flush fsyncs the segment only; the recovery point follows every interval bytes."""
    log = FileLog.open(tmp_path, recovery_point_interval_bytes=1000)
    fill(log, 1)
    log.flush()  # the first flush: the epoch cache changed, so its checkpoint too
    calls: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    size = len(batch(0, 1, 2, 40))
    written = len(batch(0, 1, 2))  # the first batch counts toward the interval too
    while written + size < 1000:
        fill(log, 1, width=40)
        written += size
        calls.clear()
        log.flush()
        assert len(calls) == 1  # the segment, nothing else
        assert log.flushed_offset == log.end_offset
    assert rp_on_disk(tmp_path) == 0  # behind the flushed offset: a lower bound
    fill(log, 1, width=40)
    calls.clear()
    log.flush()  # the interval is reached: tmp file + directory fsyncs as well
    assert len(calls) == 3
    assert rp_on_disk(tmp_path) == log.end_offset
    log.close()


def test_interval_zero_checkpoints_every_flush(tmp_path: Path) -> None:
    with FileLog.open(tmp_path, recovery_point_interval_bytes=0) as log:
        for _ in range(3):
            fill(log, 1)
            log.flush()
            assert rp_on_disk(tmp_path) == log.end_offset
    with pytest.raises(ValueError, match="recovery_point_interval_bytes"):
        FileLog.open(tmp_path, recovery_point_interval_bytes=-1)


def test_checkpoint_and_close_write_the_recovery_point(tmp_path: Path) -> None:
    log = FileLog.open(tmp_path)
    fill(log, 3)
    log.flush()
    assert rp_on_disk(tmp_path) == 0
    log.checkpoint()
    assert rp_on_disk(tmp_path) == 6
    fill(log, 1)
    log.close()
    assert rp_on_disk(tmp_path) == 8


def test_damage_above_a_lagging_recovery_point_is_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Flushed but not yet covered by the checkpoint: recovery truncates, it does not refuse."""
    log = FileLog.open(tmp_path)
    written = fill(log, 2)
    log.checkpoint()
    fill(log, 2)
    log.flush()
    log.close(flush=False)
    assert rp_on_disk(tmp_path) == 4
    seg = tmp_path / segment_file_name(0)
    data = bytearray(seg.read_bytes())
    data[len(written[0]) + len(written[1]) + 3] ^= 0x01  # inside the batch at offset 4
    seg.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), FileLog.open(tmp_path) as log:
        assert log.end_offset == 4
    assert any("torn tail at offset 4" in r.getMessage() for r in caplog.records)
    # Below the recovery point the same damage refuses to open.
    data = bytearray(seg.read_bytes())
    data[len(written[0]) + 3] ^= 0x01  # inside the batch at offset 2
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptBatchError, match=r"00000000000000000000\.log at offset 2"):
        FileLog.open(tmp_path)


def test_a_zeroed_batch_before_the_offset_fails_the_read_instead_of_spinning(
    tmp_path: Path,
) -> None:
    # One index entry for the whole segment, so reading the third batch scans
    # from position 0 across the second, which is zeroed in place.
    log = FileLog.open(tmp_path, index_interval_bytes=1 << 20)
    written = fill(log, 3)
    log.flush()
    second_at = len(written[0])
    seg_file = sorted(tmp_path.glob("*.log"))[0]
    with open(seg_file, "r+b") as f:
        f.seek(second_at)
        f.write(bytes(len(written[1])))
    log._read_hints.clear()  # noqa: SLF001 - force the scan from the index entry
    with pytest.raises(OSError, match="batch length 0"):
        log.read(4, 1 << 20)
    log.close()
