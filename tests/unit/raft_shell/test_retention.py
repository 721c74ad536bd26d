"""Retention of the metadata log, as Kafka's KafkaMetadataLog.maybeClean.

The decision (`retention_cut`) is pure and takes the time as an argument, so the
age rule runs on a fake clock; `FileReplicatedLog.clean_retention` applies it to
segments and snapshot files. An audit found the whole log below the newest
snapshot deleted as soon as either limit was passed (with 30000 bytes of
retention a 30 KB log went to 0 bytes; with 20 s of retention segments written
seconds earlier went too): these tests pin the oldest-first, one-snapshot-at-a-
time behaviour.
"""

from __future__ import annotations

from pathlib import Path

from kraft.raft_shell.file_log_adapter import (
    FileReplicatedLog,
    RetainedSnapshot,
    RetentionCut,
    retention_cut,
)
from metadata_log.batch import encode_batch
from metadata_log.records import PartitionChangeRecord
from metadata_log.snapshot import SnapshotId, list_snapshots, write_snapshot

OFF = -1

# Five segments of 8 KiB, offsets 100 apart, the last (active) one half full.
SEGMENTS = [(0, 100, 8192), (100, 200, 8192), (200, 300, 8192), (300, 400, 8192), (400, 450, 4096)]
LOG_BYTES = 4 * 8192 + 4096


def snap(end: int, size: int = 1000, log_time: int | None = 0) -> RetainedSnapshot:
    return RetainedSnapshot(SnapshotId(end, 1), size, log_time)


# ------------------------------------------------------------- the decision


def test_size_retention_deletes_the_oldest_snapshot_and_the_segments_below_the_next():
    snapshots = [snap(150), snap(250), snap(350)]
    # 36864 + 3000 bytes against 30000: one step (drop S150, start at S250) is enough.
    cut = retention_cut(SEGMENTS, snapshots, 30_000, OFF, now_ms=0)
    assert cut == RetentionCut(SnapshotId(250, 1), 200)
    # What stays is under the limit and is more than nothing.
    assert 0 < LOG_BYTES - 2 * 8192 + 2000 <= 30_000


def test_size_retention_is_idle_while_the_log_and_snapshots_fit():
    snapshots = [snap(150), snap(250), snap(350)]
    assert retention_cut(SEGMENTS, snapshots, LOG_BYTES + 3000, OFF, now_ms=0) is None
    assert retention_cut(SEGMENTS, snapshots, LOG_BYTES + 2999, OFF, now_ms=0) == RetentionCut(
        SnapshotId(250, 1), 200
    )


def test_size_retention_never_passes_the_newest_snapshot_nor_cuts_the_active_segment():
    snapshots = [snap(150), snap(250), snap(450)]  # the newest covers the whole log
    cut = retention_cut(SEGMENTS, snapshots, 0, OFF, now_ms=0)
    # Every segment wholly below 450 goes, the active one (base 400) stays: no roll.
    assert cut == RetentionCut(SnapshotId(450, 1), 400)
    assert retention_cut(SEGMENTS, [snap(450)], 0, OFF, now_ms=0) is None  # one snapshot


def test_age_retention_deletes_only_snapshots_older_than_retention_ms_on_a_fake_clock():
    snapshots = [snap(150, log_time=1_000), snap(250, log_time=25_000), snap(350, log_time=29_000)]
    now = 20_000
    assert retention_cut(SEGMENTS, snapshots, OFF, 20_000, now) is None
    now = 21_001  # S150's last batch is now more than 20 s old
    assert retention_cut(SEGMENTS, snapshots, OFF, 20_000, now) == RetentionCut(
        SnapshotId(250, 1), 200
    )
    now = 45_001  # S250 is too; S350 is the newest and stays whatever its age
    assert retention_cut(SEGMENTS, snapshots, OFF, 20_000, now) == RetentionCut(
        SnapshotId(350, 1), 300
    )
    assert retention_cut(SEGMENTS, snapshots, OFF, 20_000, 10**12) == RetentionCut(
        SnapshotId(350, 1), 300
    )


def test_age_retention_keeps_a_snapshot_whose_time_cannot_be_read():
    snapshots = [snap(150, log_time=None), snap(250, log_time=0)]
    assert retention_cut(SEGMENTS, snapshots, OFF, 1, now_ms=10**9) is None


def test_size_runs_first_then_age_from_where_size_stopped():
    snapshots = [snap(150, log_time=0), snap(250, log_time=0), snap(350, log_time=50_000)]
    cut = retention_cut(SEGMENTS, snapshots, 30_000, 20_000, now_ms=60_000)
    assert cut == RetentionCut(SnapshotId(350, 1), 300)


def test_no_limits_delete_nothing():
    snapshots = [snap(150, log_time=0), snap(250, log_time=0), snap(350, log_time=0)]
    assert retention_cut(SEGMENTS, snapshots, OFF, OFF, now_ms=10**12) is None


def test_a_snapshot_ending_below_the_log_start_goes_without_moving_the_log():
    segments = SEGMENTS[2:]  # the log starts at 200
    snapshots = [snap(150), snap(250), snap(350)]
    assert retention_cut(segments, snapshots, OFF, OFF, now_ms=0) == RetentionCut(
        SnapshotId(250, 1), 200
    )


# ------------------------------------------------------------- on the files


def batch(base: int, n: int, append_time_ms: int) -> bytes:
    recs = [PartitionChangeRecord("t" * 40, base + i, isr=(1, 2, 3)) for i in range(n)]
    return encode_batch(base, 1, append_time_ms, recs)


def filled_log(path: Path, total_bytes: int, *, time_of=lambda offset: 0) -> FileReplicatedLog:
    """A log of 8 KiB segments holding at least `total_bytes`, batch times by offset."""
    log = FileReplicatedLog.open(path, segment_bytes=8192)
    while log.size_bytes < total_bytes:
        off = log.end_offset
        log.append(batch(off, 10, time_of(off)))
    log.flush()
    return log


def add_snapshot(log: FileReplicatedLog, end: int, log_time: int = 0) -> SnapshotId:
    sid = SnapshotId(end, 1)
    write_snapshot(
        log.directory,
        sid,
        [PartitionChangeRecord("s", i, isr=(1,)) for i in range(20)],
        last_contained_log_time=log_time,
        append_time_ms=log_time,
    )
    log.register_snapshot(sid)
    return sid


def snapshot_bytes(log: FileReplicatedLog) -> int:
    return sum(log.snapshot_file(s).stat().st_size for s in log.snapshot_ids())


def test_registering_a_snapshot_keeps_the_older_ones_for_retention(tmp_path):
    log = filled_log(tmp_path / "log", 20_000)
    ids = [add_snapshot(log, end) for end in (50, 100, 150)]
    assert log.snapshot_ids() == ids
    assert list_snapshots(log.directory) == ids
    log.close()


def test_retention_bytes_trims_a_log_over_the_limit_down_to_it_not_to_nothing(tmp_path):
    log = filled_log(tmp_path / "log", 40_000)
    end = log.end_offset
    active_base = log.file_log.segment_base_offsets()[-1]
    ids = [add_snapshot(log, end * k // 5 + 30) for k in (1, 2, 3, 4)]  # mid-segment
    assert log.size_bytes + snapshot_bytes(log) > 30_000
    cut = log.clean_retention(30_000, OFF, now_ms=0)
    assert cut is not None
    # Oldest first, only until log + snapshots fit, the newest snapshot kept.
    assert log.size_bytes + snapshot_bytes(log) <= 30_000
    assert log.size_bytes > 8192
    assert 0 < log.start_offset < cut.snapshot.end_offset < ids[-1].end_offset
    assert log.snapshot_ids() == [s for s in ids if s >= cut.snapshot]
    assert list_snapshots(log.directory) == log.snapshot_ids()
    assert log.file_log.segment_base_offsets()[-1] == active_base  # not rolled
    assert log.end_offset == end
    log.close()
    again = FileReplicatedLog.open(tmp_path / "log", segment_bytes=8192)
    assert (again.start_offset, again.end_offset) == (log.start_offset, end)
    again.close()


def test_retention_ms_deletes_only_expired_snapshots_and_the_log_before_the_next(tmp_path):
    # Batch times grow 100 ms per offset; retention 20 s.
    log = filled_log(tmp_path / "log", 40_000, time_of=lambda off: off * 100)
    end = log.end_offset
    now = end * 100 + 1_000  # the last batch is one second old
    old = add_snapshot(log, end // 4, log_time=(end // 4 - 1) * 100)
    assert now - (end // 4 - 1) * 100 > 20_000
    young = add_snapshot(log, end // 2, log_time=now - 5_000)
    newest = add_snapshot(log, end - 10, log_time=now - 1_000)
    spans = log.file_log.segment_spans()
    kept = [s for s in spans if s[1] > young.end_offset] or spans[-1:]
    assert log.clean_retention(OFF, 20_000, now_ms=now) == RetentionCut(young, kept[0][0])
    # Only the expired snapshot went, with the segments wholly below the next one;
    # the rest of the log, written seconds ago, is all there.
    assert log.snapshot_ids() == [young, newest]
    assert old not in list_snapshots(log.directory)
    assert log.file_log.segment_spans() == kept
    assert 0 < log.start_offset <= young.end_offset and log.end_offset == end
    # 30 s later the young one has expired too: the log starts at the newest.
    later = log.clean_retention(OFF, 20_000, now_ms=now + 30_000)
    assert later is not None and later.snapshot == newest
    assert log.snapshot_ids() == [newest] and 0 < log.start_offset <= newest.end_offset
    assert log.end_offset == end
    log.close()


def test_retention_ms_deletes_nothing_while_the_oldest_snapshot_is_young(tmp_path):
    log = filled_log(tmp_path / "log", 30_000, time_of=lambda off: off * 100)
    end = log.end_offset
    now = end * 100
    add_snapshot(log, end // 2, log_time=now - 10_000)
    add_snapshot(log, end - 10, log_time=now - 1_000)
    # The first batch is far older than 20 s, but no snapshot is: nothing goes.
    assert log.clean_retention(OFF, 20_000, now_ms=now) is None
    assert log.start_offset == 0 and len(log.snapshot_ids()) == 2
    log.close()


def test_a_snapshot_of_the_whole_log_does_not_roll_or_empty_it(tmp_path):
    log = filled_log(tmp_path / "log", 20_000)
    end = log.end_offset
    bases = log.file_log.segment_base_offsets()
    add_snapshot(log, end // 2)
    newest = add_snapshot(log, end)  # covers every offset
    cut = log.clean_retention(0, OFF, now_ms=0)
    assert cut == RetentionCut(newest, bases[-1])
    # Only the active segment is left, with its data: no roll to trim it too.
    assert log.file_log.segment_base_offsets() == bases[-1:]
    assert log.size_bytes > 0 and log.end_offset == end
    assert log.snapshot_ids() == [newest]
    log.close()
