"""Snapshots of the metadata image: ``{end_offset:020d}-{epoch:010d}.checkpoint`` files.

A snapshot at (end offset N, epoch E) holds the state of the log up to and
including offset N - 1, written as ordinary batches (metadata_log.batch) whose
offsets start at 0 inside the file, as Kafka's snapshots do:

    batch 0        control batch [SnapshotHeader(last_contained_log_time)], followed by
                   KRaftVersionRecord and VotersRecord when the snapshot carries the
                   voter set (KIP-853: a node that loads it knows the voters)
    batches 1..k   data batches (the image as records, `records_per_batch` each)
    last batch     control batch [SnapshotFooter]

Every batch carries the snapshot's epoch E as its leader epoch. A snapshot is
written to ``NAME.part``, fsynced, renamed to ``NAME`` and the directory fsynced,
so a ``.checkpoint`` file is always complete; a crash leaves at most a ``.part``
file, which FileLog.open deletes. Reading verifies the header, every checksum,
contiguous offsets and the footer before any record is handed out: a damaged
snapshot is a CorruptBatchError naming the file and offset, never a partial image.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from metadata_log.batch import (
    HEADER,
    HEADER_SIZE,
    BatchHeader,
    RecordBatch,
    decode_records,
    encode_batch,
    parse_header,
    verify_records,
)
from metadata_log.checkpoints import fsync_dir
from metadata_log.errors import (
    CorruptBatchError,
    IncompleteBatchError,
    MetadataLogError,
    RecordDecodeError,
)
from metadata_log.records import (
    KRaftVersionRecord,
    MetadataRecord,
    Record,
    SnapshotFooter,
    SnapshotHeader,
    VotersRecord,
    is_control,
)

SNAPSHOT_SUFFIX = ".checkpoint"
PART_SUFFIX = ".part"
_NAME_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot's identity: the log end offset it covers and the epoch of that offset."""

    end_offset: int
    epoch: int

    def __post_init__(self) -> None:
        if self.end_offset < 0 or self.epoch < 0:
            raise ValueError(f"snapshot id {self.end_offset}-{self.epoch} must not be negative")

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"

    @classmethod
    def from_file_name(cls, name: str) -> SnapshotId:
        m = _NAME_RE.match(name)
        if m is None:
            raise ValueError(
                f"{name!r} is not a snapshot file name (<20 digits>-<10 digits>.checkpoint)"
            )
        return cls(int(m.group(1)), int(m.group(2)))


def snapshot_path(directory: str | Path, snapshot_id: SnapshotId) -> Path:
    return Path(directory) / snapshot_id.file_name


def list_snapshots(directory: str | Path) -> list[SnapshotId]:
    """The complete snapshots in `directory`, oldest first (``.part`` files are ignored)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    ids = [
        SnapshotId(int(m.group(1)), int(m.group(2)))
        for p in d.iterdir()
        if (m := _NAME_RE.match(p.name))
    ]
    return sorted(ids)


def latest_snapshot(directory: str | Path) -> SnapshotId | None:
    ids = list_snapshots(directory)
    return ids[-1] if ids else None


def delete_snapshots_before(directory: str | Path, snapshot_id: SnapshotId) -> list[SnapshotId]:
    """Delete every snapshot older than `snapshot_id`; returns the deleted ids."""
    doomed = [s for s in list_snapshots(directory) if s < snapshot_id]
    for s in doomed:
        snapshot_path(directory, s).unlink(missing_ok=True)
    if doomed:
        fsync_dir(directory)
    return doomed


# ------------------------------------------------------------------------ writing


def _write_durably(directory: str | Path, snapshot_id: SnapshotId, chunks: Iterable[bytes]) -> Path:
    """Write `chunks` to NAME.part, fsync, rename to NAME, fsync the directory."""
    final = snapshot_path(directory, snapshot_id)
    part = final.with_name(final.name + PART_SUFFIX)
    try:
        with open(part, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, final)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return final


def _batches(
    snapshot_id: SnapshotId,
    records: Iterable[Record],
    last_contained_log_time: int,
    append_time_ms: int,
    records_per_batch: int,
    voters: VotersRecord | None = None,
) -> Iterator[bytes]:
    epoch = snapshot_id.epoch
    offset = 0
    head: list[Record] = [SnapshotHeader(last_contained_log_time)]
    if voters is not None:
        head += [KRaftVersionRecord(1), voters]
    yield encode_batch(offset, epoch, append_time_ms, head, True)
    offset += len(head)
    pending: list[Record] = []
    for rec in records:
        if is_control(rec):
            raise ValueError(f"a snapshot holds data records only, not {type(rec).__name__}")
        pending.append(rec)
        if len(pending) >= records_per_batch:
            yield encode_batch(offset, epoch, append_time_ms, pending)
            offset += len(pending)
            pending = []
    if pending:
        yield encode_batch(offset, epoch, append_time_ms, pending)
        offset += len(pending)
    yield encode_batch(offset, epoch, append_time_ms, [SnapshotFooter()], True)


def write_snapshot(
    directory: str | Path,
    snapshot_id: SnapshotId,
    records: Iterable[Record],
    *,
    last_contained_log_time: int,
    append_time_ms: int,
    records_per_batch: int = 2000,
    voters: VotersRecord | None = None,
) -> Path:
    """Write a snapshot of `records` (streamed, batch by batch); returns its path.

    `voters`: the voter set in force at the snapshot's end offset, stored in its
    first control batch."""
    if records_per_batch <= 0:
        raise ValueError("records_per_batch must be positive")
    Path(directory).mkdir(parents=True, exist_ok=True)
    return _write_durably(
        directory,
        snapshot_id,
        _batches(
            snapshot_id, records, last_contained_log_time, append_time_ms, records_per_batch, voters
        ),
    )


def write_snapshot_bytes(directory: str | Path, snapshot_id: SnapshotId, data: bytes) -> Path:
    """Install a snapshot received whole (FetchSnapshot): verified first, then written atomically."""
    name = str(snapshot_path(directory, snapshot_id))
    _verify(data, name)
    # Decode every record too: a follower never installs a snapshot it cannot load.
    for _batch in _iter_batches(data, name):
        pass
    Path(directory).mkdir(parents=True, exist_ok=True)
    return _write_durably(directory, snapshot_id, [data])


# ------------------------------------------------------------------------ reading


def _verify(data: bytes | memoryview, path: str) -> SnapshotHeader:
    """Check the whole snapshot's structure and checksums without decoding data records.

    Returns the SnapshotHeader. Raises CorruptBatchError naming the file and offset.
    """
    pos = 0
    expect = 0
    headers: list[tuple[int, BatchHeader]] = []
    while pos < len(data):
        try:
            h = parse_header(data, pos, path, expect)
        except IncompleteBatchError as e:
            # A snapshot is renamed into place only when complete: a short one is damaged.
            raise CorruptBatchError(path, expect, pos, f"truncated snapshot: {e}") from None
        if h.base_offset != expect:
            raise CorruptBatchError(
                path, expect, pos, f"batch starts at offset {h.base_offset}, expected {expect}"
            )
        verify_records(data, pos, h, path)
        headers.append((pos, h))
        pos += h.length
        expect = h.next_offset
    if not headers:
        raise CorruptBatchError(path, 0, 0, "empty snapshot: no SnapshotHeader")
    first_pos, first = headers[0]
    first_recs = decode_records(data, first_pos, first, path) if first.control else []
    if (
        not first_recs
        or not isinstance(first_recs[0], SnapshotHeader)
        or not all(isinstance(r, KRaftVersionRecord | VotersRecord) for r in first_recs[1:])
    ):
        raise CorruptBatchError(
            path, 0, 0, "the first batch is not a control batch [SnapshotHeader, voters?]"
        )
    last_pos, last = headers[-1]
    last_recs = decode_records(data, last_pos, last, path) if last.control else []
    if len(headers) < 2 or len(last_recs) != 1 or not isinstance(last_recs[0], SnapshotFooter):
        raise CorruptBatchError(
            path,
            last.base_offset,
            last_pos,
            "the last batch is not a control batch [SnapshotFooter]",
        )
    for pos, h in headers[1:-1]:
        if h.control:
            raise CorruptBatchError(
                path, h.base_offset, pos, "control batch inside the snapshot's data"
            )
    return first_recs[0]


def _iter_batches(data: bytes | memoryview, path: str) -> Iterator[RecordBatch]:
    """Decode every batch of verified snapshot data (control batches included)."""
    pos = 0
    while pos < len(data):
        h = parse_header(data, pos, path, -1)
        yield RecordBatch(
            h.base_offset,
            h.leader_epoch,
            h.append_time_ms,
            tuple(decode_records(data, pos, h, path)),
            h.control,
        )
        pos += h.length


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A verified snapshot file (header, checksums and footer checked on load)."""

    path: Path
    snapshot_id: SnapshotId
    header: SnapshotHeader
    _data: bytes

    def batches(self) -> Iterator[RecordBatch]:
        """Every batch, control batches (header, footer) included."""
        return _iter_batches(self._data, str(self.path))

    def records(self) -> Iterator[MetadataRecord]:
        """The data records, in order (the header and footer are left out)."""
        for batch in _iter_batches(self._data, str(self.path)):
            if not batch.control:
                yield from batch.records  # type: ignore[misc]

    @property
    def size_bytes(self) -> int:
        return len(self._data)

    def voters(self) -> VotersRecord | None:
        """The voter set the snapshot carries (None: written without one)."""
        return snapshot_voters(self._data)


def _head_records(data: bytes | memoryview, path: str = "<snapshot>") -> list[Record]:
    """The records of a snapshot's first batch when it is a whole control batch, else
    none. Only that batch is decoded (a snapshot's head may be all that is read)."""
    if len(data) == 0:
        return []
    try:
        h = parse_header(data, 0, path, 0)
    except IncompleteBatchError:
        return []
    if not h.control or len(data) < h.length:
        return []
    return list(decode_records(data, 0, h, path))


def snapshot_voters(data: bytes | memoryview) -> VotersRecord | None:
    """The VotersRecord of a snapshot's first control batch, if it has one."""
    for r in _head_records(data):
        if isinstance(r, VotersRecord):
            return r
    return None


def snapshot_log_time(path: str | Path) -> int | None:
    """A snapshot file's SnapshotHeader.last_contained_log_time, from its first batch
    only (checksums verified); None when the file is missing or that batch is not
    a whole, valid one."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_SIZE)
            if len(data) < HEADER_SIZE:
                return None
            data += f.read(max(0, HEADER.unpack_from(data, 0)[1] - HEADER_SIZE))
        h = parse_header(data, 0, str(path), 0)
        verify_records(data, 0, h, str(path))
        head = _head_records(data, str(path))
    except (OSError, MetadataLogError):
        return None
    first = head[0] if head else None
    return first.last_contained_log_time if isinstance(first, SnapshotHeader) else None


def read_snapshot(path: str | Path) -> Snapshot:
    """Load and verify a snapshot file. Raises CorruptBatchError / RecordDecodeError."""
    p = Path(path)
    snapshot_id = SnapshotId.from_file_name(p.name)
    data = p.read_bytes()
    header = _verify(data, str(p))
    return Snapshot(p, snapshot_id, header, data)


def iter_snapshot_batches(path: str | Path) -> Iterator[RecordBatch]:
    """Every batch of a verified snapshot file, control batches included."""
    return read_snapshot(path).batches()


__all__ = [
    "CorruptBatchError",
    "RecordDecodeError",
    "Snapshot",
    "SnapshotId",
    "delete_snapshots_before",
    "iter_snapshot_batches",
    "latest_snapshot",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "snapshot_voters",
    "write_snapshot",
    "write_snapshot_bytes",
]


_HEADERS = ("SnapshotHeader", "SnapshotHeaderRecord")  # native, Kafka's name
_FOOTERS = ("SnapshotFooter", "SnapshotFooterRecord")


class SnapshotOrder:
    """A snapshot's records in order: SnapshotHeader, the data, SnapshotFooter, then
    nothing (Kafka's RecordsSnapshotReader; a snapshot is written whole, then
    renamed). Every reader of a snapshot, native or Kafka's (the replays, `kraft
    dump-log`, spark_replay's decoder), feeds it each record so that all refuse
    the same files with the same words."""

    __slots__ = ("path", "header", "footer")

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.header = False
        self.footer = False

    def see(self, offset: int, name: str, control: bool) -> None:
        """One record, by its type name (native or Kafka's); raises
        MetadataLogError on data after the footer or data before the header."""
        if self.footer:
            raise MetadataLogError(
                f"{self.path}: data after the snapshot footer at offset {offset}"
            )
        if name in _HEADERS:
            self.header = True
        elif name in _FOOTERS:
            self.footer = True
        elif not control and not self.header:
            raise MetadataLogError(
                f"{self.path}: snapshot data before its header at offset {offset}"
            )

    def finish(self) -> None:
        """At the end of the file: raises unless both header and footer were seen."""
        if not self.header or not self.footer:
            missing = "header" if not self.header else "footer"
            raise MetadataLogError(f"{self.path}: snapshot is missing its {missing}")
