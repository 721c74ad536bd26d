"""FileReplicatedLog: flushes overlapped with appends, snapshots, trimming."""

from __future__ import annotations

from kraft.raft_shell.file_log_adapter import FileReplicatedLog
from metadata_log.batch import encode_batch
from metadata_log.records import NoOpRecord
from metadata_log.snapshot import SnapshotId, write_snapshot


def batch(base: int, epoch: int = 1, n: int = 1) -> bytes:
    return encode_batch(base, epoch, 0, [NoOpRecord()] * n)


def test_flush_covers_only_what_was_noted(tmp_path):
    log = FileReplicatedLog.open(tmp_path / "log")
    log.append(batch(0))
    job = log.prepare_flush()
    assert job is not None and job.end_offset == 1
    log.append(batch(1))  # during the fsync
    job.run()
    assert log.complete_flush(job) == 1
    assert log.flushed_offset == 1 and log.end_offset == 2
    job2 = log.prepare_flush()
    job2.run()
    assert log.complete_flush(job2) == 2
    assert log.prepare_flush() is None
    log.close()


def test_flush_across_segment_roll_and_truncation(tmp_path):
    log = FileReplicatedLog.open(tmp_path / "log", segment_bytes=4096)
    off = 0
    for _ in range(200):
        log.append(batch(off, n=2))
        off += 2
    assert len(log.file_log.segment_base_offsets()) > 1
    job = log.prepare_flush()
    assert job.sync_dir is not None
    log.truncate_to(100)  # a structural change voids the job
    job.run()
    assert log.complete_flush(job) == 100
    assert log.flushed_offset == log.end_offset == 100
    log.close()
    again = FileReplicatedLog.open(tmp_path / "log", segment_bytes=4096)
    assert again.end_offset == 100
    again.close()


def test_snapshots_chunks_install_and_trim(tmp_path):
    log = FileReplicatedLog.open(tmp_path / "log")
    for i in range(10):
        log.append(batch(i, epoch=2))
    log.flush()
    sid = SnapshotId(6, 2)
    write_snapshot(log.directory, sid, [NoOpRecord()], last_contained_log_time=0, append_time_ms=0)
    log.register_snapshot(sid)
    assert log.latest_snapshot_id() == sid
    assert log.epoch_for_offset(5) == 2
    data, size = log.read_snapshot_chunk(sid, 0, 10)
    assert len(data) == 10 and size > 10
    rest, _ = log.read_snapshot_chunk(sid, 10, 1 << 20)
    whole = data + rest
    assert len(whole) == size
    assert log.delete_segments_below(6) <= 6
    # a second node installs it: its log is reset to the snapshot's end
    other = FileReplicatedLog.open(tmp_path / "other")
    other.install_snapshot(sid, whole)
    assert other.start_offset == other.end_offset == other.flushed_offset == 6
    assert other.latest_epoch == 2
    assert other.latest_snapshot_id() == sid
    other.close()
    log.close()
