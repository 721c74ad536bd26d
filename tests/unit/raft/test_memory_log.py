"""MemoryLog, the simulator's disk: FileLog's semantics plus crash and wipe."""

from __future__ import annotations

import pytest

from kraft.raft.memory_log import MemoryLog
from metadata_log.errors import OffsetOutOfRangeError
from metadata_log.snapshot import SnapshotId
from tests.unit.raft.helpers import batch, build_log


def test_append_read_and_epochs():
    log = build_log([(1, 0, 3), (3, 3, 5)], flush=False)
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (0, 5, 0)
    assert log.latest_epoch == 3
    assert log.end_offset_for_epoch(2) == (1, 3)
    assert log.read(5, 100) == b""
    assert log.read(3, 1) == batch(3, 3)  # at least one batch
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    with pytest.raises(ValueError):
        log.append(batch(5, 2))  # an epoch going back


def test_flush_up_to_an_offset_and_crash_loses_the_rest():
    log = build_log([(1, 0, 6)], flush=False)
    log.flush(4)
    assert log.flushed_offset == 4
    log.crash()
    assert log.end_offset == 4 and log.latest_epoch == 1


def test_truncate_is_durable_and_drops_whole_batches():
    log = MemoryLog()
    log.append(batch(0, 1, count=3))
    log.append(batch(3, 2, count=3))
    assert log.truncate_to(4) == 3
    assert log.flushed_offset == 3 and log.epoch_entries() == [(1, 0)]


def test_emptied_trimmed_log_reports_the_snapshot_epoch():
    log = build_log([(1, 0, 3), (3, 3, 6), (4, 6, 8)])
    log.create_snapshot(SnapshotId(6, 3), b"s")
    assert log.delete_segments_below(6) == 6
    assert log.epoch_entries() == [(4, 6)]
    log.truncate_to(6)
    assert (log.start_offset, log.end_offset, log.latest_epoch) == (6, 6, 3)
    log.append(batch(6, 3))  # the snapshot's epoch may continue


def test_crash_after_trimming_past_the_flushed_offset_keeps_a_consistent_log():
    log = build_log([(1, 0, 6)], flush=False)
    log.create_snapshot(SnapshotId(4, 1), b"s")
    log.delete_segments_below(4)
    log.crash()
    assert (log.start_offset, log.end_offset) == (4, 4)
    assert log.flushed_offset == 4


def test_install_snapshot_resets_and_wipe_forgets_everything():
    log = build_log([(1, 0, 3)])
    log.install_snapshot(SnapshotId(10, 2), b"data")
    assert (log.start_offset, log.end_offset, log.latest_epoch) == (10, 10, 2)
    assert log.end_offset_for_epoch(2) == (2, 10)
    assert log.read_snapshot_chunk(SnapshotId(10, 2), 1, 2) == (b"at", 4)
    log.wipe()
    assert (log.start_offset, log.end_offset, log.latest_snapshot_id()) == (0, 0, None)


def test_creating_a_snapshot_id_that_exists_keeps_the_first_bytes():
    # A follower may be fetching it in chunks: new bytes under the same id would
    # splice two files (found by simulator seed 8305: a checksum mismatch).
    log = build_log([(1, 0, 5)])
    sid = SnapshotId(5, 1)
    log.create_snapshot(sid, b"first")
    log.create_snapshot(sid, b"second, longer")
    assert log.read_snapshot_chunk(sid, 0, 100) == (b"first", 5)
