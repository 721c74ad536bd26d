"""FileReplicatedLog's two-phase flush keeps the checkpoints up to date.

FileLog's rule holds on the path production takes (prepare_flush on the loop,
FlushJob.run in a worker thread, complete_flush on the loop): the recovery point
is rewritten every 1 MiB of flushed data and the leader-epoch checkpoint once a
new epoch's first batch is flushed, by the job, never on the loop thread. An
audit found them rewritten only at open, close and structural changes: after a
kill -9 a corrupt byte in flushed, committed data was cut as a torn tail instead
of refusing to start (DESIGN 1.5).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kraft.raft_shell.file_log_adapter import FileReplicatedLog
from metadata_log.batch import HEADER_SIZE, encode_batch
from metadata_log.epoch_cache import LeaderEpochCache
from metadata_log.errors import CorruptBatchError
from metadata_log.file_log import (
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    FileLog,
    segment_file_name,
)
from metadata_log.records import PartitionChangeRecord

MIB = 1024 * 1024


def batch(base: int, epoch: int = 1, n: int = 20) -> bytes:
    recs = [PartitionChangeRecord("t" * 200, base + i, isr=(1, 2, 3)) for i in range(n)]
    return encode_batch(base, epoch, 1_000, recs)


def append(log: FileReplicatedLog, count: int, epoch: int = 1) -> None:
    for _ in range(count):
        log.append(batch(log.end_offset, epoch))


def flush_in_a_thread(log: FileReplicatedLog) -> None:
    """As the Raft driver does: prepare on this thread, run elsewhere, complete here."""
    job = log.prepare_flush()
    assert job is not None
    worker = threading.Thread(target=job.run)
    worker.start()
    worker.join()
    log.complete_flush(job)


def rp_on_disk(directory: Path) -> int:
    return int((directory / RECOVERY_POINT_CHECKPOINT).read_text().split()[-1])


def epochs_on_disk(directory: Path) -> list[tuple[int, int]]:
    path = directory / LEADER_EPOCH_CHECKPOINT
    return LeaderEpochCache.parse(path, path.read_text()).entries()


def test_flushes_rewrite_the_recovery_point_every_mib_so_a_crash_keeps_it(tmp_path):
    d = tmp_path / "log"
    log = FileReplicatedLog.open(d)
    size = len(batch(0))
    flushed_bytes = 0
    while flushed_bytes < 3 * MIB:
        append(log, 20)
        flush_in_a_thread(log)
        flushed_bytes += 20 * size
        # A lower bound of what is flushed, less than 1 MiB (plus one flush) behind
        # (a batch holds 20 offsets).
        assert log.flushed_offset - rp_on_disk(d) <= (MIB // size + 1 + 20) * 20
    rp = rp_on_disk(d)
    assert rp > 0
    log.close(flush=False)  # kill -9: nothing more is written
    # A flipped byte in flushed data below the recovery point: refuse to start.
    seg = d / segment_file_name(0)
    with open(seg, "r+b") as f:
        f.seek(HEADER_SIZE + 5)
        byte = f.read(1)
        f.seek(HEADER_SIZE + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptBatchError, match="records checksum"):
        FileLog.open(d)


def test_small_flushes_write_no_checkpoint_until_a_mib_is_flushed(tmp_path):
    d = tmp_path / "log"
    log = FileReplicatedLog.open(d)
    append(log, 1)
    flush_in_a_thread(log)  # the first batch of epoch 1: the epoch checkpoint
    assert epochs_on_disk(d) == [(1, 0)]
    append(log, 1)
    job = log.prepare_flush()
    assert job is not None and job.checkpoints is None  # a durable append: one fsync
    job.run()
    log.complete_flush(job)
    assert rp_on_disk(d) == 0
    log.close()


def test_a_new_epochs_first_flushed_batch_rewrites_the_leader_epoch_checkpoint(tmp_path):
    d = tmp_path / "log"
    log = FileReplicatedLog.open(d)
    append(log, 3, epoch=1)
    flush_in_a_thread(log)
    append(log, 2, epoch=4)
    assert epochs_on_disk(d) == [(1, 0)]  # not before the batch is flushed
    flush_in_a_thread(log)
    assert epochs_on_disk(d) == [(1, 0), (4, 60)]
    log.close(flush=False)
    again = FileLog.open(d)
    assert again.epoch_entries() == [(1, 0), (4, 60)]
    again.close()


def test_checkpoint_fsyncs_run_in_the_flush_job_not_on_the_loop_thread(tmp_path, monkeypatch):
    d = tmp_path / "log"
    log = FileReplicatedLog.open(d, recovery_point_interval_bytes=0)
    append(log, 2, epoch=2)
    threads: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        threads.append(threading.get_ident())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    flush_in_a_thread(log)
    monkeypatch.setattr(os, "fsync", real_fsync)
    # segment + two checkpoints (tmp file and directory each)
    assert len(threads) >= 5
    assert threading.get_ident() not in threads
    assert rp_on_disk(d) == log.flushed_offset == 40
    assert epochs_on_disk(d) == [(2, 0)]
    log.close()


def test_a_flush_prepared_before_a_truncation_writes_no_checkpoint(tmp_path):
    d = tmp_path / "log"
    log = FileReplicatedLog.open(d, recovery_point_interval_bytes=0)
    append(log, 5, epoch=1)
    append(log, 5, epoch=2)
    job = log.prepare_flush()
    assert job is not None and job.checkpoints is not None
    assert job.checkpoints.recovery_point == 200
    log.truncate_to(60)  # on the loop while the job waits for its thread
    job.run()
    assert log.complete_flush(job) == 60
    # The truncation's checkpoints stand, not the void job's.
    assert rp_on_disk(d) == 60
    assert epochs_on_disk(d) == [(1, 0)]
    append(log, 1, epoch=3)
    flush_in_a_thread(log)
    assert rp_on_disk(d) == 80 and epochs_on_disk(d) == [(1, 0), (3, 60)]
    log.close(flush=False)
    again = FileLog.open(d)
    assert (again.end_offset, again.epoch_entries()) == (80, [(1, 0), (3, 60)])
    again.close()


def test_a_checkpoint_written_just_before_a_structural_change_is_known_to_the_log(tmp_path):
    d = tmp_path / "log"
    log = FileReplicatedLog.open(d, recovery_point_interval_bytes=0)
    append(log, 3, epoch=1)
    flush_in_a_thread(log)
    append(log, 3, epoch=5)
    job = log.prepare_flush()
    assert job is not None
    job.run()  # wrote epochs [(1, 0), (5, 60)]; complete_flush has not run yet
    assert epochs_on_disk(d) == [(1, 0), (5, 60)]
    log.truncate_to(60)  # epoch 5 goes: its checkpoint must be rewritten now
    assert epochs_on_disk(d) == [(1, 0)]
    assert rp_on_disk(d) == 60
    log.complete_flush(job)
    assert epochs_on_disk(d) == [(1, 0)]
    log.close(flush=False)
    again = FileLog.open(d)
    assert (again.end_offset, again.epoch_entries()) == (60, [(1, 0)])
    again.close()
