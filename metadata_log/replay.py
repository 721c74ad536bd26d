"""Replay a log directory (newest usable snapshot, then segments) into a MetadataImage.

Reading is strict: every batch is verified and offsets must be contiguous, so a
corrupt or missing piece is an error naming the file and offset, never a
silently partial image. An incomplete batch at the very end of the last segment
is the end of data (a live log may be mid-append).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from metadata_log.batch import decode_records, iter_headers
from metadata_log.errors import IncompleteBatchError, MetadataLogError
from metadata_log.image import MetadataImage
from metadata_log.open_file import open_log_file
from metadata_log.records import Record, SnapshotHeader
from metadata_log.snapshot import SnapshotOrder

METADATA_DIR_NAME = "__cluster_metadata-0"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def metadata_dir(path: str | Path) -> Path:
    """Accept a data dir or its __cluster_metadata-0 folder."""
    p = Path(path)
    if (p / METADATA_DIR_NAME).is_dir():
        return p / METADATA_DIR_NAME
    if p.is_dir():
        return p
    raise MetadataLogError(f"{p} is not a log directory")


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for f in directory.iterdir():
        m = _SEGMENT_RE.match(f.name)
        if m:
            out.append((int(m.group(1)), f))
    return sorted(out)


def snapshot_files(directory: Path) -> list[tuple[int, int, Path]]:
    """(end_offset, epoch, path), oldest first."""
    out = []
    for f in directory.iterdir():
        m = _SNAPSHOT_RE.match(f.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), f))
    return sorted(out)


@dataclass(frozen=True, slots=True)
class LoggedBatch:
    path: Path
    base_offset: int
    leader_epoch: int
    append_time_ms: int
    control: bool
    records: list[Record]


def iter_file_batches(path: Path, *, allow_torn_tail: bool) -> Iterator[LoggedBatch]:
    """Verified, decoded batches of one segment or snapshot file."""
    with open_log_file(path) as f:
        data = f.read()
    name = str(path)
    try:
        for pos, h in iter_headers(data, name):
            yield LoggedBatch(
                path,
                h.base_offset,
                h.leader_epoch,
                h.append_time_ms,
                h.control,
                decode_records(data, pos, h, name),
            )
    except IncompleteBatchError:
        if not allow_torn_tail:
            raise


def read_snapshot_image(path: Path, end_offset: int) -> MetadataImage:
    """Load a snapshot file: header control batch, data batches, footer control batch.

    Each data batch is applied as it is read (2M partitions never sit in one list);
    a file without its footer raises, and the half-built image is dropped."""
    image = MetadataImage()
    header: SnapshotHeader | None = None
    order = SnapshotOrder(path)
    for b in iter_file_batches(path, allow_torn_tail=False):
        if b.control:
            for i, r in enumerate(b.records):
                order.see(b.base_offset + i, type(r).__name__, True)
                if isinstance(r, SnapshotHeader):
                    header = r
        elif b.records:
            # a data batch holds no header or footer: its first record decides
            # for all of it (a million-partition snapshot is not walked twice)
            order.see(b.base_offset, type(b.records[0]).__name__, False)
            image.apply_snapshot_records(b.records, end_offset)
    order.finish()
    assert header is not None  # finish() saw it
    image.offset = end_offset - 1
    image.last_append_time_ms = header.last_contained_log_time
    return image


def replay_log(log_dir: str | Path, upto_offset: int | None = None) -> MetadataImage:
    """The image after replaying every record with offset <= upto_offset (all when None)."""
    directory = metadata_dir(log_dir)
    image = MetadataImage()
    snaps = [s for s in snapshot_files(directory) if upto_offset is None or s[0] - 1 <= upto_offset]
    if snaps:
        end, _epoch, path = snaps[-1]
        image = read_snapshot_image(path, end)
    segments = segment_files(directory)
    for i, (_base, path) in enumerate(segments):
        last = i == len(segments) - 1
        for b in iter_file_batches(path, allow_torn_tail=last):
            if upto_offset is not None and b.base_offset > upto_offset:
                return image
            off = b.base_offset
            for rec in b.records:
                if off > image.offset:
                    if upto_offset is not None and off > upto_offset:
                        return image
                    if off != image.offset + 1:
                        raise MetadataLogError(
                            f"{path}: gap in the log, offset {off} follows {image.offset}"
                        )
                    image.replay(rec, off)
                    image.last_append_time_ms = max(image.last_append_time_ms, b.append_time_ms)
                off += 1
    return image
