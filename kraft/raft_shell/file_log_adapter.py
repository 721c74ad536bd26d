"""`FileReplicatedLog`: the Raft core's ReplicatedLog over metadata_log's FileLog.

What it adds to FileLog:

- **fsync off the event loop, overlapped with appends.** FileLog.flush() is not
  thread-safe (an append during its fsync would be marked clean without being
  synced). So the flush is split in two: `prepare_flush()` runs on the loop
  thread and notes the end offset and the segment files to sync; `FlushJob.run()`
  fsyncs those files through descriptors of its own (fsync on any descriptor of
  a file flushes the file) in a worker thread while the loop keeps appending;
  `complete_flush()` back on the loop advances `flushed_offset` to the noted end.
  Appends made meanwhile are simply not covered and go in the next flush (group
  commit). The core reads `flushed_offset` from here, so it only ever counts
  what an fsync covered.
- **checkpoints on the same path.** FileLog's rule (the recovery point every
  `recovery_point_interval_bytes`, 1 MiB, of flushed data; the leader-epoch
  checkpoint once a new epoch's first batch is flushed) is noted by
  `prepare_flush` as file contents and written by `FlushJob.run()` in the worker
  thread after its fsyncs, so no checkpoint fsync runs on the loop. After a
  kill -9 the recovery point is then near what was flushed, and damage to flushed,
  committed data refuses the start instead of being cut as a torn tail (DESIGN
  1.5). A lock orders those writes with structural changes, which
  rewrite the checkpoints themselves: a job prepared before one writes nothing.
- **snapshots** in the same directory (``{end:020d}-{epoch:010d}.checkpoint``):
  the newest one's id, chunked reads for FetchSnapshot, installing one fetched
  from the leader (verified, written durably, then the log reset to its end), and
  registering one the state machine wrote of its own committed state.
- **retention** as Kafka's KafkaMetadataLog.maybeClean, at segment granularity:
  `retention_cut` decides (pure, the time is an argument), `clean_retention`
  deletes. Snapshots are kept until retention lets them go, so that the log can
  be trimmed one snapshot at a time, not all the way to the newest one.

Structural changes (truncate_to, reset, delete_segments_below) stay FileLog's:
they are rare, run on the loop thread and are durable on return. A flush that was
in flight across one of them is ignored (its end may no longer exist).

A failed fsync raises LogFatalError from `complete_flush` and the node stops: it
is never retried.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metadata_log.batch import (
    BatchHeader,
)
from metadata_log.checkpoints import fsync_dir
from metadata_log.errors import LogFatalError
from metadata_log.file_log import (
    CheckpointWrite,
    FileLog,
    segment_file_name,
    write_checkpoint_files,
)
from metadata_log.snapshot import (
    SnapshotId,
    delete_snapshots_before,
    list_snapshots,
    snapshot_log_time,
    snapshot_path,
    write_snapshot_bytes,
)

log = logging.getLogger("kraft.raft.log")


class _CheckpointGate:
    """Orders a FlushJob's checkpoint writes (worker thread) with the structural
    changes (loop thread), which write the checkpoints too: a change bumps the
    generation under the lock, and a job writes only under it, only if its
    generation is still current. What a job wrote waits in `written` until the
    loop tells the FileLog (`FileReplicatedLog._account_checkpoints`)."""

    __slots__ = ("lock", "generation", "written")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0
        self.written: list[CheckpointWrite] = []


@dataclass(slots=True)
class FlushJob:
    """One fsync round: run() in a worker thread, then complete_flush() on the loop."""

    end_offset: int
    generation: int
    fds: list[int]
    sync_dir: Path | None
    error: OSError | None = None
    done: bool = field(default=False)
    # Checkpoint files due once the fds are synced (FileLog.checkpoints_due).
    checkpoints: CheckpointWrite | None = None
    directory: Path | None = None
    gate: _CheckpointGate | None = None

    def run(self) -> None:
        """fsync the noted files, then write the checkpoints due (worker thread).
        Errors are kept for complete_flush."""
        try:
            for fd in self.fds:
                os.fsync(fd)
            if self.sync_dir is not None:
                fsync_dir(self.sync_dir)
            self._write_checkpoints()
        except OSError as e:
            self.error = e
        finally:
            # The descriptors are the job's own (duplicates): the log may close or
            # delete its segments meanwhile without pulling them from under us.
            for fd in self.fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.done = True

    def _write_checkpoints(self) -> None:
        due, gate, directory = self.checkpoints, self.gate, self.directory
        if due is None or gate is None or directory is None:
            return
        with gate.lock:
            if gate.generation == self.generation:
                write_checkpoint_files(directory, due)
                gate.written.append(due)


@dataclass(frozen=True, slots=True)
class RetainedSnapshot:
    """What retention weighs of one snapshot: its size, and the append time of the
    last batch it covers (Kafka's lastContainedLogTimestamp; None: unreadable, so
    never old enough)."""

    snapshot_id: SnapshotId
    size_bytes: int
    last_contained_log_time: int | None


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """What retention deletes: every snapshot older than `snapshot`, and every
    segment below `log_start` (a segment base, at or below `snapshot`'s end)."""

    snapshot: SnapshotId
    log_start: int


def retention_cut(
    segments: Sequence[tuple[int, int, int]],
    snapshots: Sequence[RetainedSnapshot],
    retention_bytes: int,
    retention_ms: int,
    now_ms: int,
) -> RetentionCut | None:
    """Kafka's KafkaMetadataLog.maybeClean at segment granularity; None: nothing goes.

    `segments` are (base, end, size) and `snapshots` are oldest first. The
    snapshots are walked from the oldest; the newest always stays. By size
    (`cleanSnapshotsRetentionSize`), while the log and the snapshots still kept
    are larger than `retention_bytes`, and then by age (`cleanSnapshotsRetentionMs`),
    while the oldest kept snapshot's last batch is more than `retention_ms` older
    than `now_ms`: that snapshot goes and the log start moves up to the next one
    (`deleteBeforeSnapshot`), which deletes the segments whose every offset is below
    that snapshot's end. The active segment is never rolled for it. A limit of -1
    is off. A snapshot ending below the log start goes anyway (Kafka drops those on
    open): the log cannot continue it.
    """
    if not segments or not snapshots:
        return None
    newest = len(snapshots) - 1
    kept = 0  # index of the oldest snapshot kept
    while kept < newest and snapshots[kept].snapshot_id.end_offset < segments[0][0]:
        kept += 1
    first = 0  # index of the first segment kept
    if retention_bytes >= 0:
        snapshot_bytes = sum(s.size_bytes for s in snapshots[kept:])
        while kept < newest:
            log_bytes = sum(size for _, _, size in segments[first:])
            if log_bytes + snapshot_bytes <= retention_bytes:
                break
            snapshot_bytes -= snapshots[kept].size_bytes
            kept += 1
            first = _first_segment_kept(segments, first, snapshots[kept].snapshot_id)
    if retention_ms >= 0:
        while kept < newest:
            stamp = snapshots[kept].last_contained_log_time
            if stamp is None or now_ms - stamp <= retention_ms:
                break
            kept += 1
            first = _first_segment_kept(segments, first, snapshots[kept].snapshot_id)
    if kept == 0:
        return None
    return RetentionCut(snapshots[kept].snapshot_id, segments[first][0])


def _first_segment_kept(
    segments: Sequence[tuple[int, int, int]], first: int, log_start: SnapshotId
) -> int:
    """The first segment that holds an offset at or past `log_start`'s end offset
    (the last, active one at the latest)."""
    while first < len(segments) - 1 and segments[first][1] <= log_start.end_offset:
        first += 1
    return first


class FileReplicatedLog:
    """ReplicatedLog (kraft.raft.replicated_log) over a FileLog directory with its snapshots."""

    def __init__(self, file_log: FileLog) -> None:
        self.file_log = file_log
        self.directory = file_log.directory
        # Everything present at open was fsynced by FileLog's recovery.
        self._flushed = file_log.end_offset
        # Its generation is bumped by every structural change: a flush prepared
        # before one is void and writes no checkpoint.
        self._gate = _CheckpointGate()
        # Segment files' descriptors for fsync, by base offset (opened once).
        self._sync_fds: dict[int, int] = {}
        # Segment bases whose directory entries are known durable.
        self._durable_bases: set[int] = set(file_log.segment_base_offsets())
        self._snapshots: list[SnapshotId] = list_snapshots(self.directory)
        # Snapshots are immutable: each one's last contained log time is read once.
        self._snapshot_log_times: dict[SnapshotId, int | None] = {}
        self._failed: str | None = None

    @classmethod
    def open(
        cls,
        directory: str | Path,
        *,
        segment_bytes: int = 8 * 1024 * 1024,
        recovery_point_interval_bytes: int = 1024 * 1024,
    ) -> FileReplicatedLog:
        return cls(
            FileLog.open(
                directory,
                segment_bytes=segment_bytes,
                recovery_point_interval_bytes=recovery_point_interval_bytes,
                logger=log,
            )
        )

    # ------------------------------------------------------------ properties

    @property
    def start_offset(self) -> int:
        return self.file_log.start_offset

    @property
    def end_offset(self) -> int:
        return self.file_log.end_offset

    @property
    def flushed_offset(self) -> int:
        return min(self._flushed, self.file_log.end_offset)

    @property
    def latest_epoch(self) -> int:
        return self.file_log.latest_epoch

    @property
    def size_bytes(self) -> int:
        return self.file_log.size_bytes

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self.file_log.epoch_entries()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.file_log.end_offset_for_epoch(epoch)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch of the batch holding `offset` (0 before any epoch)."""
        entries = self.file_log.epoch_entries()
        i = bisect.bisect_right([o for _, o in entries], offset) - 1
        return entries[i][0] if i >= 0 else 0

    # --------------------------------------------------------------- writing

    def append(self, batch: bytes) -> BatchHeader:
        return self.file_log.append(batch)

    def read(self, from_offset: int, max_bytes: int) -> bytes:
        return self.file_log.read(from_offset, max_bytes)

    def truncate_to(self, offset: int) -> int:
        if offset >= self.file_log.end_offset:
            return self.file_log.end_offset  # nothing to remove
        self._structural_change()
        end = self.file_log.truncate_to(offset)
        # FileLog syncs the kept prefix before cutting: all that is left is durable.
        self._flushed = end
        return end

    def delete_segments_below(self, offset: int) -> int:
        if min(offset, self.file_log.end_offset) <= self.file_log.start_offset:
            return self.file_log.start_offset
        self._structural_change()
        start = self.file_log.delete_segments_below(offset)
        # It syncs everything before deleting anything.
        self._flushed = self.file_log.end_offset
        return start

    def _structural_change(self) -> None:
        with self._gate.lock:
            # A job running now finishes its checkpoint writes first; a later one
            # writes none. FileLog learns what was written before it writes its own.
            self._gate.generation += 1
            self._account_checkpoints()
        self._close_sync_fds()
        # FileLog fsyncs the directory itself in every structural change.
        self._durable_bases = set()

    # --------------------------------------------------------------- flushing

    def prepare_flush(self) -> FlushJob | None:
        """Note what a flush must cover (loop thread); None when all is durable."""
        if self._failed is not None:
            raise LogFatalError(self._failed)
        end = self.file_log.end_offset
        if end <= self._flushed:
            return None
        bases = self.file_log.segment_base_offsets()
        # Segments that may hold unflushed bytes: the one holding the flushed
        # offset and every later one.
        first = max(bisect.bisect_right(bases, self._flushed) - 1, 0)
        fds = []
        for base in bases[first:]:
            fd = self._sync_fds.get(base)
            if fd is None:
                fd = os.open(self.directory / segment_file_name(base), os.O_RDONLY)
                self._sync_fds[base] = fd
            fds.append(os.dup(fd))
        new_bases = set(bases) - self._durable_bases
        gate = self._gate
        return FlushJob(
            end,
            gate.generation,
            fds,
            self.directory if new_bases else None,
            checkpoints=None if self.file_log.closed else self.file_log.checkpoints_due(),
            directory=self.directory,
            gate=gate,
        )

    def complete_flush(self, job: FlushJob) -> int:
        """Account a finished FlushJob (loop thread); returns the new flushed offset."""
        if job.error is not None:
            reason = "disk full" if job.error.errno == 28 else "I/O error"
            self._failed = f"fsync of {self.directory} failed: {reason} ({job.error})"
            log.error("log %s: fatal: %s", self.directory, self._failed)
            raise LogFatalError(self._failed)
        with self._gate.lock:
            self._account_checkpoints()
        if job.generation == self._gate.generation:
            self._flushed = max(self._flushed, job.end_offset)
            if job.sync_dir is not None:
                self._durable_bases |= set(self.file_log.segment_base_offsets())
            self._drop_stale_fds()
        return self.flushed_offset

    def flush(self) -> None:
        """A synchronous flush on the calling thread (start-up, shutdown, tests)."""
        job = self.prepare_flush()
        if job is not None:
            job.run()
            self.complete_flush(job)

    def _account_checkpoints(self) -> None:
        """Tell the FileLog which checkpoints the jobs wrote (loop thread, gate locked)."""
        for due in self._gate.written:
            self.file_log.checkpoints_written(due)
        self._gate.written.clear()

    def _drop_stale_fds(self) -> None:
        live = set(self.file_log.segment_base_offsets())
        for base in [b for b in self._sync_fds if b not in live]:
            os.close(self._sync_fds.pop(base))

    def _close_sync_fds(self) -> None:
        for fd in self._sync_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._sync_fds.clear()

    # -------------------------------------------------------------- snapshots

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def snapshot_ids(self) -> list[SnapshotId]:
        return list(self._snapshots)

    def snapshot_file(self, snapshot_id: SnapshotId) -> Path:
        return snapshot_path(self.directory, snapshot_id)

    def read_snapshot_chunk(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int]:
        """(bytes at position, total size); KeyError if the snapshot is unknown."""
        if snapshot_id not in self._snapshots:
            raise KeyError(snapshot_id)
        path = self.snapshot_file(snapshot_id)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise KeyError(snapshot_id) from None
        try:
            size = os.fstat(fd).st_size
            if position < 0 or position > size:
                return b"", size
            return os.pread(fd, max(0, min(max_bytes, size - position)), position), size
        finally:
            os.close(fd)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """A snapshot fetched from the leader: verified, written durably, then the log
        is reset to its end (everything before it is covered by the snapshot)."""
        write_snapshot_bytes(self.directory, snapshot_id, data)
        self._structural_change()
        self.file_log.reset(snapshot_id.end_offset, snapshot_id.epoch)
        self._flushed = self.file_log.end_offset
        self._durable_bases = set(self.file_log.segment_base_offsets())
        self._add_snapshot(snapshot_id)
        self._delete_snapshots_before(snapshot_id)

    def register_snapshot(self, snapshot_id: SnapshotId, *, keep: int | None = None) -> None:
        """A snapshot the state machine wrote (already durable): make it the newest.

        Older snapshots stay until `clean_retention` lets them go (as in Kafka);
        `keep` deletes all but the `keep` newest at once."""
        self._add_snapshot(snapshot_id)
        if keep is not None and len(self._snapshots) > keep:
            self._delete_snapshots_before(self._snapshots[-keep])

    def clean_retention(
        self, retention_bytes: int, retention_ms: int, now_ms: int
    ) -> RetentionCut | None:
        """Apply `retention_cut` (`metadata.max.retention.bytes` / `.ms`, -1: off) at
        wall time `now_ms`: first the segments (the kept snapshot covers them),
        then the older snapshots. Durable on return; None when nothing went."""
        retained = [
            RetainedSnapshot(s, self._snapshot_size(s), self._snapshot_log_time(s))
            for s in self._snapshots
        ]
        cut = retention_cut(
            self.file_log.segment_spans(), retained, retention_bytes, retention_ms, now_ms
        )
        if cut is None:
            return None
        if cut.log_start > self.start_offset:
            self.delete_segments_below(cut.log_start)
        self._delete_snapshots_before(cut.snapshot)
        return cut

    def _snapshot_size(self, snapshot_id: SnapshotId) -> int:
        try:
            return self.snapshot_file(snapshot_id).stat().st_size
        except FileNotFoundError:
            return 0

    def _snapshot_log_time(self, snapshot_id: SnapshotId) -> int | None:
        if snapshot_id not in self._snapshot_log_times:
            stamp = snapshot_log_time(self.snapshot_file(snapshot_id))
            self._snapshot_log_times[snapshot_id] = stamp
        return self._snapshot_log_times[snapshot_id]

    def _delete_snapshots_before(self, snapshot_id: SnapshotId) -> None:
        delete_snapshots_before(self.directory, snapshot_id)
        self._snapshots = [s for s in self._snapshots if s >= snapshot_id]
        for s in [s for s in self._snapshot_log_times if s < snapshot_id]:
            del self._snapshot_log_times[s]

    def _add_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            self._snapshots.append(snapshot_id)
            self._snapshots.sort()

    # ---------------------------------------------------------------- closing

    def close(self, flush: bool = True) -> None:
        with self._gate.lock:
            self._gate.generation += 1  # no job writes a checkpoint after this
            self._account_checkpoints()
        self._close_sync_fds()
        self.file_log.close(flush=flush and self._failed is None)
