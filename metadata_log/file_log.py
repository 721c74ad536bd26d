"""The segmented file log of ``__cluster_metadata`` (DESIGN 1.5).

A directory holds the log as segment files named by their base offset
(``00000000000000000000.log``), each a run of whole batches (metadata_log.batch)
with contiguous offsets, plus:

- ``NNN.index``: the sparse offset index of a segment (advisory: rebuilt and
  rewritten on open, so it is never fsynced);
- ``leader-epoch-checkpoint``: the leader-epoch cache (metadata_log.epoch_cache);
- ``recovery-point-checkpoint``: the first offset that is *not* known to be
  flushed; every batch below it was fsynced.

The formats are in docs/log-format.md.

Durability model. `append` only writes (page cache); `flush` fsyncs the dirty
segments and the directory when a segment was created or removed, and rewrites
the leader-epoch checkpoint when it changed. The recovery-point checkpoint is
rewritten (tmp file, fsync, rename, directory fsync: three more fsyncs) only
once `recovery_point_interval_bytes` of flushed data accumulated since the last
one, and on `checkpoint`, `close` and every structural change, as Kafka writes
it periodically rather than per flush: it is a lower bound of what is flushed,
which is all recovery needs, and per-flush it would quadruple the fsyncs of a
durable append. A caller that fsyncs the segments itself, off this thread
(kraft.raft_shell.file_log_adapter), gets the same rule in three steps:
`checkpoints_due` (what a flush of everything appended so far must rewrite, as
file contents), `write_checkpoint_files` (any thread, after that fsync) and
`checkpoints_written` (back on the owner's thread). Structural operations (`truncate_to`, `delete_segments_below`,
`reset`) are rare and are durable on return: they flush first, so that after any
of them nothing is unflushed. A failed fsync or a write error (ENOSPC included)
raises `LogFatalError` and poisons the log: every later call raises it again and
nothing is retried, because after a failed fsync the kernel may have dropped the
dirty pages and a retry could falsely succeed.

Recovery on open. Every segment is scanned and every batch verified (header CRC,
records CRC, contiguous offsets, non-decreasing epochs). A bad or incomplete
batch whose expected offset is at or above the recovery point is a torn tail: the
log is truncated there (later segments deleted) with a warning. Below the
recovery point the data was acknowledged as durable, so damage there is
corruption and opening fails with `CorruptBatchError` naming file and offset.
After recovery the whole log is fsynced and the recovery point moved to the end.

Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from metadata_log.batch import (
    HEADER_SIZE,
    BatchHeader,
    parse_header,
    verify_records,
)
from metadata_log.checkpoints import (
    TMP_SUFFIX,
    CheckpointFormatError,
    format_checkpoint,
    fsync_dir,
    parse_int,
    read_checkpoint,
    write_atomic,
)
from metadata_log.epoch_cache import LeaderEpochCache
from metadata_log.errors import (
    CorruptBatchError,
    IncompleteBatchError,
    LogFatalError,
    OffsetOutOfRangeError,
)
from metadata_log.snapshot import PART_SUFFIX

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-checkpoint"
RECOVERY_POINT_VERSION = 0
# Kafka's recovery-point-checkpoint lists "topic partition offset" lines.
PARTITION_NAME = "__cluster_metadata"
PARTITION_ID = 0

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_INDEX_RE = re.compile(r"^(\d{20})\.index$")

# Index entry: offset relative to the segment base, file position (both uint32).
INDEX_ENTRY = struct.Struct(">II")
_MAX_SEGMENT_BYTES = 2**31 - 1
_BASE_LEN = struct.Struct(">qi")  # base_offset, length: the start of every header
_COUNT = struct.Struct(">i")
_COUNT_AT = 27  # record_count's position in the header (see batch.py)
_MAX_READ_HINTS = 16  # readers followed at once (followers, observers, delivery)


def _recovery_point_text(offset: int) -> bytes:
    return format_checkpoint(RECOVERY_POINT_VERSION, [(PARTITION_NAME, PARTITION_ID, offset)])


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


class CheckpointWrite(NamedTuple):
    """Checkpoint files due once everything appended so far is fsynced.

    Made by `FileLog.checkpoints_due` on the log's thread; `write_checkpoint_files`
    may write it from any thread (it only touches the files it names); then
    `FileLog.checkpoints_written` records it as on disk.
    """

    files: tuple[tuple[str, bytes], ...]  # (file name, contents), in writing order
    recovery_point: int | None  # the offset the recovery-point file says, if rewritten
    epochs: tuple[tuple[int, int], ...] | None  # the epoch entries, if rewritten
    appended: int  # FileLog's appended-bytes count the recovery point covers


def write_checkpoint_files(directory: Path, due: CheckpointWrite) -> None:
    """Write `due`'s files atomically and durably (any thread); raises OSError."""
    for name, data in due.files:
        write_atomic(directory / name, data)


class _Segment:
    """One open segment file and its in-memory sparse index."""

    __slots__ = (
        "base",
        "path",
        "fd",
        "size",
        "end",
        "idx_offsets",
        "idx_positions",
        "last_indexed_pos",
        "index_written",
        "flushed_size",
        "dirty",
        "durable",
    )

    def __init__(self, base: int, path: Path, fd: int) -> None:
        self.base = base
        self.path = path
        self.fd = fd
        self.size = 0
        self.end = base  # next offset after the segment's last batch
        # The first batch (position 0) is always indexed so bisection never misses.
        self.idx_offsets: list[int] = []
        self.idx_positions: list[int] = []
        self.last_indexed_pos = -1
        self.index_written = 0  # entries already in the .index file
        self.flushed_size = 0  # bytes known fsynced
        self.dirty = False  # bytes written since the last fsync
        self.durable = False  # the directory entry was fsynced

    @property
    def index_path(self) -> Path:
        return self.path.with_name(index_file_name(self.base))

    def note_batch(self, pos: int, base_offset: int, interval: int) -> None:
        """Index the batch at `pos` if `interval` bytes passed since the last entry."""
        if self.last_indexed_pos < 0 or pos - self.last_indexed_pos >= interval:
            self.idx_offsets.append(base_offset)
            self.idx_positions.append(pos)
            self.last_indexed_pos = pos

    def index_bytes(self, start: int = 0) -> bytes:
        return b"".join(
            INDEX_ENTRY.pack(o - self.base, p)
            for o, p in zip(self.idx_offsets[start:], self.idx_positions[start:], strict=True)
        )

    def truncate_index(self, size: int) -> None:
        i = bisect.bisect_left(self.idx_positions, size)
        del self.idx_offsets[i:]
        del self.idx_positions[i:]
        self.last_indexed_pos = self.idx_positions[-1] if self.idx_positions else -1
        self.index_written = min(self.index_written, i)


class _ScannedSegment(NamedTuple):
    """What recovery learnt from one segment: where it ends, and whether it was cut."""

    end: int
    torn: bool


def _verified_batch(data: bytes, pos: int, path: str, expect: int, last_epoch: int) -> BatchHeader:
    """The header of the batch at `pos`, verified: checksums, the offset the log
    continues at, and a leader epoch that never goes back. Raises CorruptBatchError
    or IncompleteBatchError."""
    header = parse_header(data, pos, path, expect)
    if header.base_offset != expect:
        raise CorruptBatchError(
            path, expect, pos, f"batch starts at offset {header.base_offset}, expected {expect}"
        )
    verify_records(data, pos, header, path)
    if header.leader_epoch < last_epoch:
        raise CorruptBatchError(
            path, expect, pos, f"leader epoch {header.leader_epoch} after epoch {last_epoch}"
        )
    return header


def _recovered_epoch_cache(
    checkpoint_cache: LeaderEpochCache | None, scanned_epochs: list[tuple[int, int]], start: int
) -> LeaderEpochCache:
    """The epoch cache: scanned epochs, preceded by what only the checkpoint knows
    (epochs at the log start without a batch of their own, e.g. a snapshot's)."""
    cache = LeaderEpochCache()
    if checkpoint_cache is not None:
        prefix = LeaderEpochCache([e for e in checkpoint_cache.entries() if e[1] <= start])
        prefix.truncate_from_start(start)
        first_epoch = scanned_epochs[0][0] if scanned_epochs else None
        for epoch, off in prefix.entries():
            if first_epoch is None or epoch <= first_epoch:
                cache.assign(epoch, off)
    for epoch, off in scanned_epochs:
        cache.assign(epoch, off)
    return cache


class FileLog:
    """The segmented, checksummed, crash-recovering metadata log. Use `FileLog.open`."""

    def __init__(
        self,
        directory: Path,
        segment_bytes: int,
        index_interval_bytes: int,
        logger: logging.Logger,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.log = logger
        self._segments: list[_Segment] = []
        self._bases: list[int] = []  # segment base offsets, for bisection
        self._end_offset = 0
        self._flushed_offset = 0
        self._cache = LeaderEpochCache()
        self._cache_on_disk: list[tuple[int, int]] | None = None
        self._recovery_point_on_disk: int | None = None
        self.recovery_point_interval_bytes = 0
        # Bytes ever appended, and how many of them the recovery point on disk
        # covers: the difference is the flushed data it is behind, once flushed.
        self._appended_bytes = 0
        self._recovery_point_mark = 0
        self._dir_dirty = False
        self._failed: str | None = None
        self._closed = False
        # Where recent reads ended: next offset -> (segment, position). Several
        # readers follow the log at once (each follower's fetches, the leader's own
        # delivery), so one hint per reader keeps a sequential read at one pread.
        # Cleared by every structural change (truncation, deletion, roll-back).
        self._read_hints: dict[int, tuple[_Segment, int]] = {}

    # ================================================================== opening

    @classmethod
    def open(
        cls,
        directory: str | Path,
        *,
        segment_bytes: int = 8 * 1024 * 1024,
        index_interval_bytes: int = 4096,
        recovery_point_interval_bytes: int = 1024 * 1024,
        logger: logging.Logger | None = None,
    ) -> FileLog:
        """Open (creating if missing) and recover the log in `directory`.

        `recovery_point_interval_bytes`: flushed bytes between two rewrites of the
        recovery-point checkpoint (0: at every flush).
        """
        if recovery_point_interval_bytes < 0:
            raise ValueError("recovery_point_interval_bytes must not be negative")
        if not 0 < segment_bytes <= _MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be in 1..{_MAX_SEGMENT_BYTES}")
        if index_interval_bytes <= 0:
            raise ValueError("index_interval_bytes must be positive")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        log = cls(path, segment_bytes, index_interval_bytes, logger or logging.getLogger(__name__))
        log.recovery_point_interval_bytes = recovery_point_interval_bytes
        try:
            log._recover()
        except BaseException:
            log._close_fds()
            raise
        return log

    def _recover(self) -> None:
        """Recovery (the job of Kafka's LogLoader): strays out, checkpoints read, every segment
        verified batch by batch from the start; a torn tail above the recovery point
        is cut, damage below it refuses to open. Then the epoch cache is rebuilt and
        the survivors made durable, so that the recovery point is the end."""
        self._delete_strays()
        recovery_point = self._read_recovery_point()
        checkpoint_cache = self._read_epoch_checkpoint()
        bases = self._segment_bases(recovery_point)
        start = bases[0]
        rp = start if recovery_point is None else max(recovery_point, start)
        if recovery_point is not None:
            self._recovery_point_on_disk = recovery_point
        scanned_epochs = self._scan_segments(bases, rp)
        self._drop_empty_segments()
        self._bases = [s.base for s in self._segments]
        self._end_offset = self._segments[-1].end
        if self._end_offset < rp:
            last = self._segments[-1]
            raise CorruptBatchError(
                str(last.path),
                self._end_offset,
                last.size,
                f"the log ends at offset {self._end_offset}, below the recovery point {rp}",
            )
        self._cache = _recovered_epoch_cache(checkpoint_cache, scanned_epochs, start)
        self._cache_on_disk = checkpoint_cache.entries() if checkpoint_cache is not None else None
        for seg in self._segments:
            self._sync_index_file(seg)
        # Whatever survived (it may sit in the page cache only, after a process
        # crash) is made durable now, so that the recovery point is the end.
        for seg in self._segments:
            seg.dirty = True
        self.checkpoint()

    def _read_recovery_point(self) -> int | None:
        """The recovery-point checkpoint's offset (None: no checkpoint file)."""
        path = self.directory / RECOVERY_POINT_CHECKPOINT
        rows = read_checkpoint(path, version=RECOVERY_POINT_VERSION, fields=3)
        if rows is None:
            return None
        if len(rows) != 1:
            raise CheckpointFormatError(path, 2, f"expected 1 entry, found {len(rows)}")
        return parse_int(path, 3, rows[0][2], "offset")

    def _read_epoch_checkpoint(self) -> LeaderEpochCache | None:
        """The leader-epoch checkpoint as written (None: no checkpoint file)."""
        path = self.directory / LEADER_EPOCH_CHECKPOINT
        try:
            text = path.read_bytes().decode("ascii")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise CheckpointFormatError(path, 1, "not ASCII text") from None
        return LeaderEpochCache.parse(path, text)

    def _segment_bases(self, recovery_point: int | None) -> list[int]:
        """The segment files' base offsets in order; an empty directory gets its first
        (empty) segment, unless the recovery point says data was there."""
        d = self.directory
        bases = sorted(int(m.group(1)) for p in d.iterdir() if (m := _SEGMENT_RE.match(p.name)))
        if bases:
            return bases
        if recovery_point:
            raise CorruptBatchError(
                str(d), 0, 0, f"no segment files, but the recovery point is {recovery_point}"
            )
        (d / segment_file_name(0)).touch()
        self._dir_dirty = True
        return [0]

    def _scan_segments(self, bases: list[int], rp: int) -> list[tuple[int, int]]:
        """Open and verify every segment in order, cutting a torn tail (segments from
        a gap on, or the rest of a segment from a bad batch on) above the recovery
        point `rp`; returns (epoch, start offset) of each epoch change seen."""
        d = self.directory
        scanned_epochs: list[tuple[int, int]] = []
        expect = bases[0]
        cut_from: int | None = None  # index of the first segment to delete
        for n, base in enumerate(bases):
            if base != expect:
                # A gap or overlap between segments: only a crash in the middle of
                # a structural change leaves one, and only above the recovery point.
                reason = f"segment starts at offset {base}, the log continues at {expect}"
                if expect < rp:
                    raise CorruptBatchError(str(d / segment_file_name(base)), expect, 0, reason)
                self.log.warning(
                    "log %s: torn tail: %s; deleting segments from %s",
                    d,
                    reason,
                    segment_file_name(base),
                )
                cut_from = n
                break
            seg = self._scan_segment(base, rp, scanned_epochs)
            expect = seg.end
            if seg.torn:
                cut_from = n + 1
                break
        if cut_from is not None:
            for base in reversed(bases[cut_from:]):
                self._unlink(d / segment_file_name(base))
                self._unlink(d / index_file_name(base))
            self._dir_dirty = True
        return scanned_epochs

    def _scan_segment(
        self, base: int, rp: int, scanned_epochs: list[tuple[int, int]]
    ) -> _ScannedSegment:
        """Open the segment at `base`, verify its batches and index them; a bad batch
        above the recovery point truncates the segment there (torn), below it is an
        error. Appends the epoch changes it sees to `scanned_epochs`."""
        seg_path = self.directory / segment_file_name(base)
        data = seg_path.read_bytes()
        seg = _Segment(base, seg_path, os.open(seg_path, os.O_RDWR))
        seg.durable = True
        self._segments.append(seg)
        last_epoch = scanned_epochs[-1][0] if scanned_epochs else -1
        pos, expect, torn = 0, base, False
        while pos < len(data):
            try:
                header = _verified_batch(data, pos, str(seg_path), expect, last_epoch)
            except (CorruptBatchError, IncompleteBatchError) as e:
                if expect < rp:
                    if isinstance(e, CorruptBatchError):
                        raise
                    raise CorruptBatchError(
                        str(seg_path),
                        expect,
                        pos,
                        f"incomplete batch below the recovery point {rp}: {e}",
                    ) from None
                self.log.warning(
                    "log %s: torn tail at offset %d in %s (position %d): %s; truncating",
                    self.directory,
                    expect,
                    seg_path.name,
                    pos,
                    e,
                )
                self._ftruncate(seg, pos)
                torn = True
                break
            seg.note_batch(pos, expect, self.index_interval_bytes)
            if header.leader_epoch > last_epoch:
                scanned_epochs.append((header.leader_epoch, expect))
                last_epoch = header.leader_epoch
            pos += header.length
            expect = header.next_offset
        seg.size = pos
        seg.end = expect
        return _ScannedSegment(expect, torn)

    def _drop_empty_segments(self) -> None:
        """An empty segment followed by another one holds nothing: drop it so that
        bisection over base offsets never sees two segments with one base."""
        kept = []
        for i, seg in enumerate(self._segments):
            if seg.size == 0 and i < len(self._segments) - 1:
                os.close(seg.fd)
                self._unlink(seg.path)
                self._unlink(seg.index_path)
                self._dir_dirty = True
            else:
                kept.append(seg)
        self._segments = kept

    def _delete_strays(self) -> None:
        """Remove leftovers of interrupted writes: *.part snapshots, *.tmp checkpoints."""
        removed = False
        for p in self.directory.iterdir():
            if p.name.endswith(PART_SUFFIX) or p.name.endswith(TMP_SUFFIX):
                self.log.info("log %s: deleting stray file %s", self.directory, p.name)
                p.unlink(missing_ok=True)
                removed = True
            elif (m := _INDEX_RE.match(p.name)) and not (
                self.directory / segment_file_name(int(m.group(1)))
            ).exists():
                p.unlink(missing_ok=True)
                removed = True
        if removed:
            self._dir_dirty = True

    def _sync_index_file(self, seg: _Segment) -> None:
        """Rewrite the segment's .index file when it differs from the rebuilt index."""
        want = seg.index_bytes()
        try:
            have = seg.index_path.read_bytes()
        except FileNotFoundError:
            have = None
        if have != want:
            if have is not None:
                self.log.info("log %s: rebuilt index %s", self.directory, seg.index_path.name)
            seg.index_path.write_bytes(want)
        seg.index_written = len(seg.idx_offsets)

    # =============================================================== properties

    @property
    def start_offset(self) -> int:
        return self._segments[0].base

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def latest_epoch(self) -> int:
        latest = self._cache.latest_epoch
        return 0 if latest is None else latest

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (epoch, start offset), ascending."""
        return self._cache.entries()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, its end offset), or (-1, -1) (Kafka semantics)."""
        return self._cache.end_offset_for(epoch, self._end_offset)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    def segment_spans(self) -> list[tuple[int, int, int]]:
        """(base offset, end offset, size in bytes) of every segment, oldest first."""
        return [(s.base, s.end, s.size) for s in self._segments]

    def durable_sizes(self) -> dict[str, int]:
        """Segment file name -> bytes known to survive a crash.

        A segment whose creation was not yet made durable (directory fsync) is
        absent: a crash may lose the whole file. Used by crash tests.
        """
        return {s.path.name: s.flushed_size for s in self._segments if s.durable}

    # ================================================================= writing

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise LogFatalError(
                f"log {self.directory} is unusable after an earlier failure: {self._failed}"
            )
        if self._closed:
            raise ValueError(f"log {self.directory} is closed")

    def _fatal(self, what: str, e: OSError) -> LogFatalError:
        """Poison the log: after a failed fsync or write nothing is retried."""
        reason = "disk full" if e.errno == errno.ENOSPC else "I/O error"
        self._failed = f"{what}: {reason} ({e})"
        self.log.error("log %s: fatal: %s", self.directory, self._failed)
        return LogFatalError(f"log {self.directory}: {self._failed}")

    def append(self, batch: bytes) -> BatchHeader:
        """Append one encoded batch at the end of the log (no fsync)."""
        self._check_usable()
        header = parse_header(batch, 0, "<appended batch>", self._end_offset)
        verify_records(batch, 0, header, "<appended batch>")
        if header.length != len(batch):
            raise ValueError(
                f"append takes exactly one batch: {len(batch)} bytes given, "
                f"the batch is {header.length}"
            )
        if header.base_offset != self._end_offset:
            raise ValueError(
                f"batch base offset {header.base_offset} is not the log end offset "
                f"{self._end_offset}"
            )
        latest = self.latest_epoch
        if header.leader_epoch < latest:
            raise ValueError(
                f"batch leader epoch {header.leader_epoch} is below the log's latest epoch {latest}"
            )
        seg = self._segments[-1]
        if seg.size > 0 and seg.size + len(batch) > self.segment_bytes:
            seg = self._roll()
        pos = seg.size
        try:
            written = os.pwrite(seg.fd, batch, pos)
            while written < len(batch):
                written += os.pwrite(seg.fd, batch[written:], pos + written)
        except OSError as e:
            raise self._fatal(f"write to {seg.path}", e) from e
        seg.note_batch(pos, header.base_offset, self.index_interval_bytes)
        seg.size = pos + len(batch)
        seg.end = header.next_offset
        seg.dirty = True
        self._appended_bytes += len(batch)
        self._end_offset = header.next_offset
        self._cache.assign(header.leader_epoch, header.base_offset)
        return header

    def _roll(self) -> _Segment:
        """Start a new segment at the end offset."""
        old = self._segments[-1]
        self._write_pending_index(old)
        base = self._end_offset
        path = self.directory / segment_file_name(base)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise self._fatal(f"create {path}", e) from e
        seg = _Segment(base, path, fd)
        self._segments.append(seg)
        self._bases.append(base)
        self._dir_dirty = True
        try:
            self._unlink(seg.index_path)
        except OSError as e:
            raise self._fatal(f"remove {seg.index_path}", e) from e
        return seg

    def _write_pending_index(self, seg: _Segment) -> None:
        """Append index entries not yet in the .index file (advisory, never fsynced)."""
        if seg.index_written == len(seg.idx_offsets):
            return
        data = seg.index_bytes(seg.index_written)
        try:
            with open(seg.index_path, "r+b" if seg.index_path.exists() else "wb") as f:
                f.seek(seg.index_written * INDEX_ENTRY.size)
                f.truncate()
                f.write(data)
        except OSError as e:
            raise self._fatal(f"write {seg.index_path}", e) from e
        seg.index_written = len(seg.idx_offsets)

    def flush(self) -> None:
        """fsync what was appended (and the checkpoints when due). Raises LogFatalError."""
        self._check_usable()
        self._sync_data()
        self._write_checkpoints()

    def checkpoint(self) -> None:
        """`flush`, then make the recovery-point checkpoint say the whole log is flushed."""
        self._check_usable()
        self._sync_data()
        self._write_checkpoints(force=True)

    def _sync_data(self) -> None:
        for seg in self._segments:
            if seg.dirty:
                try:
                    os.fsync(seg.fd)
                except OSError as e:
                    raise self._fatal(f"fsync {seg.path}", e) from e
                seg.dirty = False
            seg.flushed_size = seg.size
        if self._dir_dirty:
            try:
                fsync_dir(self.directory)
            except OSError as e:
                raise self._fatal(f"fsync directory {self.directory}", e) from e
            self._dir_dirty = False
        for seg in self._segments:
            seg.durable = True
        self._flushed_offset = self._end_offset

    def _write_checkpoints(self, force: bool = False) -> None:
        due = self.checkpoints_due(force=force)
        if due is not None:
            for name, data in due.files:
                self._write_file(name, data)
            self.checkpoints_written(due)

    def checkpoints_due(self, *, force: bool = False) -> CheckpointWrite | None:
        """What a flush of everything appended so far must rewrite once its fsync is
        done: the leader-epoch checkpoint when an epoch changed since the one on
        disk, the recovery-point checkpoint (at the end offset) once
        `recovery_point_interval_bytes` were appended since the one on disk (or
        `force`); None when nothing is due."""
        self._check_usable()
        files: list[tuple[str, bytes]] = []
        entries = self._cache.entries()
        epochs = None
        if entries != self._cache_on_disk:
            epochs = tuple(entries)
            files.append((LEADER_EPOCH_CHECKPOINT, self._cache.serialize()))
        rp = None
        behind = self._appended_bytes - self._recovery_point_mark
        if self._end_offset != self._recovery_point_on_disk and (
            force or behind >= self.recovery_point_interval_bytes
        ):
            rp = self._end_offset
            files.append((RECOVERY_POINT_CHECKPOINT, _recovery_point_text(rp)))
        if not files:
            return None
        return CheckpointWrite(tuple(files), rp, epochs, self._appended_bytes)

    def checkpoints_written(self, due: CheckpointWrite) -> None:
        """Record that `due` (from `checkpoints_due`) is on disk."""
        if due.epochs is not None:
            self._cache_on_disk = list(due.epochs)
        if due.recovery_point is not None:
            self._recovery_point_on_disk = due.recovery_point
            self._recovery_point_mark = due.appended

    def _write_recovery_point(self, offset: int) -> None:
        self._write_file(RECOVERY_POINT_CHECKPOINT, _recovery_point_text(offset))
        self._recovery_point_on_disk = offset
        self._recovery_point_mark = self._appended_bytes

    def _write_file(self, name: str, data: bytes) -> None:
        try:
            write_atomic(self.directory / name, data)
        except OSError as e:
            raise self._fatal(f"write {name}", e) from e

    # ================================================================= reading

    def read(self, from_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one containing `from_offset`, up to `max_bytes`.

        At least one batch is returned even when it is larger than `max_bytes`;
        b"" at the end offset. Batches come from one segment per call.
        """
        self._check_usable()
        if from_offset < self._segments[0].base or from_offset > self._end_offset:
            raise OffsetOutOfRangeError(from_offset, self._segments[0].base, self._end_offset)
        if from_offset == self._end_offset:
            return b""
        hint = self._read_hints.get(from_offset)
        if hint is not None and hint[0].end > from_offset:
            seg, pos = hint
        else:
            seg = self._segments[bisect.bisect_right(self._bases, from_offset) - 1]
            i = bisect.bisect_right(seg.idx_offsets, from_offset) - 1
            pos = self._scan_to(seg, seg.idx_positions[i], from_offset)
        want = min(max(max_bytes, HEADER_SIZE), seg.size - pos)
        buf = os.pread(seg.fd, want, pos)
        base, length = _BASE_LEN.unpack_from(buf, 0)
        if length > len(buf):
            # The first batch is larger than max_bytes: it is returned whole anyway.
            buf = os.pread(seg.fd, length, pos)
            total = length
            next_offset = base + _COUNT.unpack_from(buf, _COUNT_AT)[0]
        else:
            total = 0
            n = len(buf)
            while total + HEADER_SIZE <= n:
                base, length = _BASE_LEN.unpack_from(buf, total)
                if total + length > n:
                    break
                next_offset = base + _COUNT.unpack_from(buf, total + _COUNT_AT)[0]
                total += length
            if total < n:
                buf = buf[:total]
        # The hint for from_offset stays: other readers (e.g. the other follower)
        # usually read from the same offset next.
        hints = self._read_hints
        if next_offset not in hints and len(hints) >= _MAX_READ_HINTS:
            del hints[next(iter(hints))]  # the oldest
        hints[next_offset] = (seg, pos + total)
        return buf

    def _scan_to(self, seg: _Segment, pos: int, from_offset: int) -> int:
        """The position of the batch holding `from_offset`, scanning from `pos` (an
        index entry at or before it). The batch starts within about one index
        interval of the entry: its headers are read in one pread, not one each."""
        chunk = b""
        at = pos  # file position of chunk[0]
        while True:
            off = pos - at
            if off + HEADER_SIZE > len(chunk):
                at = pos
                off = 0
                chunk = os.pread(
                    seg.fd, min(self.index_interval_bytes + HEADER_SIZE, seg.size - pos), pos
                )
                if len(chunk) < HEADER_SIZE:
                    # The segment ends before the batch the index promises.
                    raise OSError(
                        errno.EIO,
                        f"{seg.path.name}: no batch holding offset {from_offset} at {pos}",
                    )
            base, length = _BASE_LEN.unpack_from(chunk, off)
            (count,) = _COUNT.unpack_from(chunk, off + _COUNT_AT)
            if base + count > from_offset:
                return pos
            if length < HEADER_SIZE:
                # Zeroed or torn bytes where a batch should be: stepping by 0
                # would spin this loop for ever (found by the deployed simulator,
                # seed 104), so the read fails and names the place instead.
                raise OSError(
                    errno.EIO,
                    f"{seg.path.name}: batch length {length} at {pos} looking for offset {from_offset}",
                )
            pos += length

    # ======================================================= structural changes

    def _delete_segment_files(self, segments: Iterable[_Segment]) -> None:
        """Close and unlink each segment and its index, in the order given; a failed
        unlink is fatal (the log no longer knows what is on disk)."""
        for seg in segments:
            os.close(seg.fd)
            try:
                self._unlink(seg.path)
                self._unlink(seg.index_path)
            except OSError as e:
                raise self._fatal(f"delete {seg.path}", e) from e

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= `offset`; returns the new end offset.

        A batch containing `offset` goes whole. An offset at or below the start
        offset empties the log (which keeps its start offset). Durable on return.
        """
        self._check_usable()
        start = self._segments[0].base
        if offset >= self._end_offset or self._end_offset == start:
            return self._end_offset  # nothing to remove (an empty log keeps its epochs)
        self._sync_data()
        # What the epoch cache keeps if the log is emptied: the epochs at the log
        # start that own no batch (a reset's). A log that does not start at 0
        # continues from a snapshot, so it always keeps an epoch for its start
        # (the epoch in effect there), or a follower would forget which epoch its
        # last offset belongs to.
        first_epoch = self._cache.epoch_for_offset(start)
        at_start = [(e, o) for e, o in self._cache.entries() if o == start]
        prefix = [(e, o) for e, o in at_start if first_epoch is not None and e < first_epoch]
        if not prefix and start > 0 and at_start:
            prefix = at_start[-1:]
        # Find the new end: the base of the batch holding `offset`.
        if offset <= start:
            new_end, cut_seg, cut_pos = start, 0, 0
        else:
            cut_seg = bisect.bisect_right(self._bases, offset) - 1
            seg = self._segments[cut_seg]
            i = bisect.bisect_right(seg.idx_offsets, offset) - 1
            pos = seg.idx_positions[i]
            while True:
                head = os.pread(seg.fd, HEADER_SIZE, pos)
                base, length = _BASE_LEN.unpack_from(head, 0)
                (count,) = _COUNT.unpack_from(head, _COUNT_AT)
                if base + count > offset:
                    break
                pos += length
            new_end, cut_pos = base, pos
            if cut_pos == 0 and cut_seg > 0:
                # The whole segment goes; the previous one becomes active.
                cut_seg -= 1
                cut_pos = self._segments[cut_seg].size
        # The recovery point must be lowered before the data it covers goes away.
        # (Everything below it was just fsynced, so new_end is a valid recovery point.)
        self._write_recovery_point(new_end)
        doomed = self._segments[cut_seg + 1 :]
        self._delete_segment_files(reversed(doomed))
        del self._segments[cut_seg + 1 :]
        del self._bases[cut_seg + 1 :]
        seg = self._segments[cut_seg]
        if cut_pos < seg.size:
            self._ftruncate(seg, cut_pos)
            try:
                os.fsync(seg.fd)
            except OSError as e:
                raise self._fatal(f"fsync {seg.path}", e) from e
            seg.truncate_index(cut_pos)
            self._rewrite_index(seg)
        seg.size = seg.flushed_size = cut_pos
        seg.end = new_end
        seg.dirty = False
        if doomed:
            try:
                fsync_dir(self.directory)
            except OSError as e:
                raise self._fatal(f"fsync directory {self.directory}", e) from e
        self._end_offset = self._flushed_offset = new_end
        self._read_hints.clear()
        self._cache.truncate_from_end(new_end)
        if new_end == start:
            self._cache = LeaderEpochCache(prefix)
        self._write_checkpoints(force=True)
        return new_end

    def _rewrite_index(self, seg: _Segment) -> None:
        try:
            seg.index_path.write_bytes(seg.index_bytes())
        except OSError as e:
            raise self._fatal(f"write {seg.index_path}", e) from e
        seg.index_written = len(seg.idx_offsets)

    def _ftruncate(self, seg: _Segment, size: int) -> None:
        try:
            os.ftruncate(seg.fd, size)
        except OSError as e:
            raise self._fatal(f"truncate {seg.path}", e) from e

    def _unlink(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def delete_segments_below(self, offset: int) -> int:
        """Delete the segments lying wholly below `offset`; returns the new start offset.

        Used after a snapshot at end offset `offset`. When `offset` reaches the log
        end the active segment is rolled first, so a fully covered log is trimmed
        to one empty segment at the end offset. Durable on return.
        """
        self._check_usable()
        offset = min(offset, self._end_offset)
        if offset <= self._segments[0].base:
            return self._segments[0].base
        self._sync_data()
        if offset == self._end_offset and self._segments[-1].size > 0:
            self._roll()
            self._sync_data()
        n = 0
        while n < len(self._segments) - 1 and self._segments[n].end <= offset:
            n += 1
        if n == 0:
            return self._segments[0].base
        self._delete_segment_files(self._segments[:n])
        del self._segments[:n]
        del self._bases[:n]
        self._dir_dirty = True
        self._read_hints.clear()
        self._sync_data()
        new_start = self._segments[0].base
        self._cache.truncate_from_start(new_start)
        self._write_checkpoints(force=True)
        return new_start

    def reset(self, offset: int, epoch: int) -> None:
        """Drop everything: an empty log at `offset` whose epoch cache holds (epoch, offset).

        For a follower that loaded a snapshot beyond its log. Snapshot files in
        the directory are kept. Durable on return.
        """
        self._check_usable()
        if offset < 0 or epoch < 0:
            raise ValueError(f"reset to offset {offset}, epoch {epoch}: must not be negative")
        # Order matters for a crash in the middle: first a recovery point that
        # promises nothing, then delete segments newest first (what is left is a
        # contiguous prefix), then the new epoch cache, then the new segment.
        self._write_recovery_point(0)
        for seg in reversed(self._segments):
            os.close(seg.fd)
            try:
                self._unlink(seg.path)
                self._unlink(seg.index_path)
            except OSError as e:
                raise self._fatal(f"delete {seg.path}", e) from e
        self._segments = []
        self._bases = []
        self._cache = LeaderEpochCache([(epoch, offset)])
        self._write_file(LEADER_EPOCH_CHECKPOINT, self._cache.serialize())
        self._cache_on_disk = self._cache.entries()
        path = self.directory / segment_file_name(offset)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise self._fatal(f"create {path}", e) from e
        self._segments = [_Segment(offset, path, fd)]
        self._bases = [offset]
        self._end_offset = offset
        self._read_hints.clear()
        self._dir_dirty = True
        self._sync_data()
        self._write_checkpoints(force=True)

    # ================================================================= closing

    def close(self, flush: bool = True) -> None:
        """Close the log; by default flush first (a clean shutdown).

        `flush=False` closes the files without writing anything, as a crash would.
        """
        if self._closed:
            return
        try:
            if flush and self._failed is None:
                self.checkpoint()
                for seg in self._segments:
                    self._write_pending_index(seg)
        finally:
            self._close_fds()
            self._closed = True

    def _close_fds(self) -> None:
        for seg in self._segments:
            with contextlib.suppress(OSError):
                os.close(seg.fd)
        self._read_hints.clear()

    def __enter__(self) -> FileLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # On an exception, still close cleanly unless the disk itself failed.
        self.close(flush=exc_type is None)

    def __repr__(self) -> str:
        return (
            f"FileLog({str(self.directory)!r}, start={self.start_offset}, end={self._end_offset}, "
            f"flushed={self._flushed_offset}, segments={len(self._segments)})"
        )
