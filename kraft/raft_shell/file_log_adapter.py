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
- **snapshots** in the same directory (``{end:020d}-{epoch:010d}.checkpoint``):
  the newest one's id, chunked reads for FetchSnapshot, installing one fetched
  from the leader (verified, written durably, then the log reset to its end), and
  registering one the state machine wrote of its own committed state, with
  trimming of the segments it covers.

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
from dataclasses import dataclass, field
from pathlib import Path

from metadata_log.batch import BatchHeader
from metadata_log.checkpoints import fsync_dir
from metadata_log.errors import LogFatalError
from metadata_log.file_log import FileLog, segment_file_name
from metadata_log.snapshot import (
    SnapshotId,
    delete_snapshots_before,
    list_snapshots,
    snapshot_path,
    write_snapshot_bytes,
)

log = logging.getLogger("kraft.raft.log")


@dataclass(slots=True)
class FlushJob:
    """One fsync round: run() in a worker thread, then complete_flush() on the loop."""

    end_offset: int
    generation: int
    fds: list[int]
    sync_dir: Path | None
    error: OSError | None = None
    done: bool = field(default=False)

    def run(self) -> None:
        """fsync the noted files (worker thread). Errors are kept for complete_flush."""
        try:
            for fd in self.fds:
                os.fsync(fd)
            if self.sync_dir is not None:
                fsync_dir(self.sync_dir)
        except OSError as e:
            self.error = e
        finally:
            # The descriptors are the job's own (duplicates): the log may close or
            # delete its segments meanwhile without pulling them from under us.
            for fd in self.fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.done = True


class FileReplicatedLog:
    """ReplicatedLog (kraft.raft.replicated_log) over a FileLog directory with its snapshots."""

    def __init__(self, file_log: FileLog) -> None:
        self.file_log = file_log
        self.directory = file_log.directory
        # Everything present at open was fsynced by FileLog's recovery.
        self._flushed = file_log.end_offset
        # Bumped by every structural change: a flush prepared before one is void.
        self._generation = 0
        # Segment files' descriptors for fsync, by base offset (opened once).
        self._sync_fds: dict[int, int] = {}
        # Segment bases whose directory entries are known durable.
        self._durable_bases: set[int] = set(file_log.segment_base_offsets())
        self._snapshots: list[SnapshotId] = list_snapshots(self.directory)
        self._failed: str | None = None

    @classmethod
    def open(
        cls, directory: str | Path, *, segment_bytes: int = 8 * 1024 * 1024
    ) -> FileReplicatedLog:
        return cls(FileLog.open(directory, segment_bytes=segment_bytes, logger=log))

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
        self._generation += 1
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
        return FlushJob(end, self._generation, fds, self.directory if new_bases else None)

    def complete_flush(self, job: FlushJob) -> int:
        """Account a finished FlushJob (loop thread); returns the new flushed offset."""
        if job.error is not None:
            reason = "disk full" if job.error.errno == 28 else "I/O error"
            self._failed = f"fsync of {self.directory} failed: {reason} ({job.error})"
            log.error("log %s: fatal: %s", self.directory, self._failed)
            raise LogFatalError(self._failed)
        if job.generation == self._generation:
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
        delete_snapshots_before(self.directory, snapshot_id)
        self._snapshots = [s for s in self._snapshots if s >= snapshot_id]

    def register_snapshot(self, snapshot_id: SnapshotId, *, keep: int = 2) -> None:
        """A snapshot the state machine wrote (already durable): make it the newest
        and delete all but the `keep` newest."""
        self._add_snapshot(snapshot_id)
        if len(self._snapshots) > keep:
            oldest_kept = self._snapshots[-keep]
            delete_snapshots_before(self.directory, oldest_kept)
            self._snapshots = self._snapshots[-keep:]

    def _add_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            self._snapshots.append(snapshot_id)
            self._snapshots.sort()

    # ---------------------------------------------------------------- closing

    def close(self, flush: bool = True) -> None:
        self._close_sync_fds()
        self.file_log.close(flush=flush and self._failed is None)
