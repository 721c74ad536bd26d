"""`kraft dump-log`: batch headers and decoded records of segments and snapshots.

Like `kafka-dump-log --cluster-metadata-decoder`. Reads this project's native
format (batch magic 1, msgpack records) and Apache Kafka's own (record batch v2,
magic 2, Kafka's metadata records), chosen batch by batch by the magic byte,
which both formats keep at byte 16 (`--format auto`, the default); `--format
kafka` or `kraft` accepts only one. Kafka records are shown with Kafka's record
names and snake_case field names, in the same JSON shape as native ones.

An incomplete batch at the very end of the last segment is the end of data (a
live log may be mid-append); a complete batch that fails its checksum, or a
record that cannot be decoded, is an error naming the file and offset. Files are
opened read-only (a Kafka controller's live log must never be written by this
tool).

A dump shows a damaged log as far as it can, so the holes are said where they
are and the dump goes on: offsets missing between segments or between batches,
a segment whose name is not its first batch's offset, segments that overlap, a
log that starts after its newest snapshot, a leader epoch lower than the one
before it, a torn batch that is not at the end of the last segment, a snapshot
that is torn, has no SnapshotFooter or data after it (a snapshot is written
whole, then renamed). Any of them makes the exit status 1, with a last line on stderr that
names the first and counts the rest: the log is not whole.
"""

from __future__ import annotations

import base64
import errno
import json
import mmap
import os
import stat
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from metadata_log import batch as native
from metadata_log.errors import CorruptBatchError, IncompleteBatchError, MetadataLogError
from metadata_log.kafka import batch as kafka
from metadata_log.kafka.reader import decode_batch
from metadata_log.open_file import open_log_file
from metadata_log.records import record_fields, record_type_name
from metadata_log.replay import metadata_dir, segment_files, snapshot_files
from metadata_log.snapshot import SnapshotOrder

FORMATS = ("auto", "kafka", "kraft")
# Files Kafka keeps beside the log: not batches, so passed over (named in text mode).
_OTHER_SUFFIXES = (
    ".index",
    ".timeindex",
    ".txnindex",
    ".snapshot",
    ".deleted",
    ".cleaned",
    ".swap",
)
_OTHER_NAMES = ("leader-epoch-checkpoint", "partition.metadata", "quorum-state", "meta.properties")


def is_other_file(path: Path) -> bool:
    """A file of a Kafka log folder that holds no record batches."""
    return path.name in _OTHER_NAMES or path.name.endswith(_OTHER_SUFFIXES)


_FOOTERS = ("SnapshotFooter", "SnapshotFooterRecord")  # native, Kafka


def files_to_dump(target: Path) -> tuple[list[Path], list[Path]]:
    """(files to dump, other files passed over): a file as given, or a directory's
    snapshots then segments in offset order."""
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        raise MetadataLogError(f"{target}: no such file or directory") from None
    except OSError as e:  # ELOOP is not "missing": say what it is
        loop = " (a symlink loop)" if e.errno == errno.ELOOP else ""
        raise MetadataLogError(f"{target}: {e.strerror or e}{loop}") from None
    if not stat.S_ISDIR(mode):  # a FIFO or device: open_log_file names what it is
        return ([], [target]) if is_other_file(target) else ([target], [])
    directory = metadata_dir(target)
    files = [p for _, _, p in snapshot_files(directory)] + [p for _, p in segment_files(directory)]
    if not files:
        raise MetadataLogError(f"{directory}: no .log segments or .checkpoint snapshots")
    shown = set(files)
    others = sorted(p for p in directory.iterdir() if p.is_file() and p not in shown)
    return files, others


@dataclass(frozen=True, slots=True)
class Row:
    offset: int
    time_ms: int
    type: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch of either format, as dump-log shows it."""

    position: int
    base_offset: int
    last_offset: int
    epoch: int
    control: bool
    header_text: str
    rows: list[Row]


def _native_batch(data: mmap.mmap, pos: int, name: str, expect: int) -> tuple[Batch, int]:
    h = native.parse_header(data, pos, name, expect)
    native.verify_records(data, pos, h, name)
    records = native.decode_records(data, pos, h, name)
    text = (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"epoch: {h.leader_epoch} appendTime: {h.append_time_ms} "
        f"isControl: {str(h.control).lower()} position: {pos} size: {h.length} "
        f"crc: {h.records_crc}"
    )
    rows = [
        Row(h.base_offset + i, h.append_time_ms, record_type_name(r), record_fields(r))
        for i, r in enumerate(records)
    ]
    batch = Batch(pos, h.base_offset, h.last_offset, h.leader_epoch, h.control, text, rows)
    return batch, h.length


def _kafka_batch(
    data: mmap.mmap, pos: int, name: str, skipped: Counter[str] | None
) -> tuple[Batch, int]:
    h = kafka.parse_header(data, pos, name)
    b = decode_batch(data, h, name, skipped)
    text = (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"epoch: {h.leader_epoch} baseTime: {h.base_timestamp} maxTime: {h.max_timestamp} "
        f"producerId: {h.producer_id} isTransactional: {str(h.transactional).lower()} "
        f"isControl: {str(h.control).lower()} position: {pos} size: {h.size} magic: {h.magic} "
        f"compresscodec: {h.codec} crc: {h.crc}"
    )
    rows = [Row(r.offset, r.timestamp, r.name, r.fields) for r in b.records]
    batch = Batch(pos, h.base_offset, h.last_offset, h.leader_epoch, h.control, text, rows)
    return batch, h.size


def iter_file(
    path: Path, fmt: str = "auto", skipped: Counter[str] | None = None
) -> Iterator[Batch | IncompleteBatchError]:
    """Each batch of one file, then the torn-tail error if the data ends inside a batch."""
    with open_log_file(path) as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            name = str(path)
            pos = 0
            end = len(data)
            prev: Batch | None = None
            try:
                while pos < end:
                    if end - pos <= kafka.MAGIC_POSITION:  # not even the magic byte
                        raise IncompleteBatchError(
                            name, -1, pos, f"{end - pos} bytes of a batch header"
                        )
                    magic = data[pos + kafka.MAGIC_POSITION]
                    if magic == native.MAGIC and fmt != "kafka":
                        # Errors name the offset the batch should start at (its
                        # own header may be the damaged part).
                        expect = (
                            prev.last_offset + 1
                            if prev is not None
                            else int.from_bytes(data[pos : pos + 8], "big", signed=True)
                        )
                        batch, size = _native_batch(data, pos, name, expect)
                    elif magic == kafka.MAGIC and fmt != "kraft":
                        batch, size = _kafka_batch(data, pos, name, skipped)
                    else:
                        offset = int.from_bytes(data[pos : pos + 8], "big", signed=True)
                        want = {"auto": "1 (kraft) or 2 (kafka)", "kafka": "2", "kraft": "1"}[fmt]
                        raise CorruptBatchError(
                            name,
                            offset,
                            pos,
                            f"unknown magic {magic} (--format {fmt} reads {want})",
                        )
                    yield batch
                    prev = batch
                    pos += size
            except IncompleteBatchError as e:
                yield e


def _json_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    raise TypeError(f"not JSON-able: {type(v).__name__}")


def _name_offset(path: Path) -> int | None:
    """The offset a file's name gives: a segment's base, a snapshot's end."""
    stem = path.name.split("-", 1)[0].removesuffix(".log").removesuffix(".checkpoint")
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _missing(first: int, end: int) -> str:
    return (
        f"offset {first} is missing"
        if end == first + 1
        else f"offsets {first}-{end - 1} are missing"
    )


class _Holes:
    """What makes the log not whole, said where it is found (in the text dump, or
    on stderr beside the JSON lines, which would otherwise just skip it)."""

    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out, self.as_json = out, as_json
        self.found: list[str] = []

    def say(self, text: str) -> None:
        self.found.append(text)
        if self.as_json:
            self.out.flush()
            print(f"kraft dump-log: warning: {text}", file=sys.stderr)
        else:
            print(f"Warning: {text}", file=self.out)


def _segment_start(
    holes: _Holes, path: Path, b: Batch, expect: int | None, snapshot_end: int
) -> None:
    """Say what is wrong where a segment starts: a name that is not its first
    batch's offset, offsets missing or repeated since the segment before it, a
    log that starts after its newest snapshot."""
    base, start = _name_offset(path), b.base_offset
    if base is not None and base != start:
        holes.say(
            f"{path}: the segment's name says it starts at offset {base}, its first batch "
            f"is at offset {start}: the file is misnamed"
        )
    if expect is None:
        if start > snapshot_end:
            where = f"after the newest snapshot's end {snapshot_end}" if snapshot_end else ""
            holes.say(
                f"{path}: the log starts at offset {start} {where}".rstrip()
                + f": {_missing(snapshot_end, start)}"
            )
    elif start > expect:
        holes.say(
            f"gap in the log: the segment before {path.name} ends at offset {expect - 1}, "
            f"{path.name} starts at {start}: {_missing(expect, start)}"
        )
    elif start < expect:
        holes.say(
            f"{path}: overlapping segments: {path.name} starts at offset {start}, the segment "
            f"before it ends at offset {expect - 1}: the offsets from {start} on are read twice"
        )


def dump(
    target: Path,
    as_json: bool,
    from_offset: int,
    out: TextIO,
    fmt: str = "auto",
    skipped: Counter[str] | None = None,
) -> list[str]:
    """Dump every file; returns what makes the log not whole (empty: it is)."""
    files, others = files_to_dump(target)
    if not as_json and others:
        names = ", ".join(p.name for p in others)
        print(f"Skipping {len(others)} files that hold no record batches: {names}", file=out)
    holes = _Holes(out, as_json)
    whole_dir = not target.is_file()
    segments = [p for p in files if p.suffix == ".log"]
    snapshot_end = max(
        (o for p in files if p.suffix == ".checkpoint" and (o := _name_offset(p)) is not None),
        default=0,
    )
    # The next offset the log must hold: set by the newest snapshot, then by each
    # segment's last batch. None: not known (a single file was given).
    expect: int | None = None
    # Raft's leader epochs never go back along the log; Kafka's batch CRC does not
    # cover the epoch field, so a damaged one shows only as a step back.
    epoch: int | None = None
    for path in files:
        if not as_json:
            print(f"Dumping {path}", file=out)
        snapshot = path.suffix == ".checkpoint"
        # A segment's first batch is checked against its name and the segment
        # before it (the expected offset carries over: a misnamed file is not a gap).
        first = whole_dir and not snapshot
        last_segment = whole_dir and bool(segments) and path == segments[-1]
        footer = False
        order: SnapshotOrder | None = SnapshotOrder(path) if snapshot else None
        for b in iter_file(path, fmt, skipped):
            if isinstance(b, IncompleteBatchError):
                if snapshot or (whole_dir and not last_segment):
                    what = "snapshot" if snapshot else "segment, not the last one,"
                    holes.say(f"{path}: this {what} is torn at position {b.position}: {b}")
                elif not as_json:
                    print(f"End of data at position {b.position}: {b}", file=out)
                else:  # the JSON lines just stop: say why where a reader looks
                    out.flush()
                    print(
                        f"kraft dump-log: warning: {path}: end of data at position "
                        f"{b.position}: {b}",
                        file=sys.stderr,
                    )
                break
            if first:
                first = False
                _segment_start(holes, path, b, expect, snapshot_end)
                expect = b.base_offset
            if not snapshot:
                if expect is not None and b.base_offset != expect:
                    holes.say(
                        f"{path}: gap at position {b.position}: the batch at offset "
                        f"{b.base_offset} follows offset {expect - 1}: "
                        + (
                            _missing(expect, b.base_offset)
                            if b.base_offset > expect
                            else "offsets go back"
                        )
                    )
                expect = b.last_offset + 1
                if epoch is not None and b.epoch < epoch:
                    holes.say(
                        f"{path}: the batch at offset {b.base_offset} (position {b.position}) "
                        f"has leader epoch {b.epoch}, below the {epoch} before it: a log's "
                        "epochs never go back"
                    )
                epoch = max(epoch or 0, b.epoch)
            footer = footer or any(row.type in _FOOTERS for row in b.rows)
            if order is not None:
                try:
                    for row in b.rows:
                        order.see(row.offset, row.type, b.control)
                except MetadataLogError as e:
                    holes.say(str(e))  # the same words as a replay's refusal
                    order = None
            if b.last_offset < from_offset:
                continue
            if not as_json:
                print(b.header_text, file=out)
            for row in b.rows:
                if row.offset < from_offset:
                    continue
                if as_json:
                    line = {
                        "offset": row.offset,
                        "base_offset": b.base_offset,
                        "epoch": b.epoch,
                        "append_time_ms": row.time_ms,
                        "control": b.control,
                        "type": row.type,
                        "fields": row.fields,
                    }
                    out.write(json.dumps(line, separators=(",", ":"), default=_json_value) + "\n")
                else:
                    fields = json.dumps(row.fields, separators=(",", ":"), default=_json_value)
                    print(f"| offset: {row.offset} {row.type} {fields}", file=out)
        else:
            if snapshot and not footer:
                holes.say(f"{path}: the snapshot has no SnapshotFooter: it was not written whole")
    return holes.found


def run(
    target: str,
    as_json: bool = False,
    from_offset: int = 0,
    fmt: str = "auto",
    skip_unknown: bool = False,
) -> int:
    skipped: Counter[str] | None = Counter() if skip_unknown else None
    try:
        holes = dump(Path(target), as_json, from_offset, sys.stdout, fmt, skipped)
    except MetadataLogError as e:
        sys.stdout.flush()
        print(f"kraft dump-log: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except MemoryError:  # str(MemoryError()) is empty: say what ran out
        sys.stdout.flush()
        print(f"kraft dump-log: error: {target}: out of memory", file=sys.stderr)
        return 1
    except OSError as e:  # unreadable file or directory: a user error, not a traceback
        sys.stdout.flush()
        print(f"kraft dump-log: error: {e.filename or target}: {e.strerror or e}", file=sys.stderr)
        return 1
    if skipped:
        sys.stdout.flush()
        detail = ", ".join(f"{name}: {n}" for name, n in sorted(skipped.items()))
        print(
            f"kraft dump-log: skipped {sum(skipped.values())} records of unknown type or version ({detail})",
            file=sys.stderr,
        )
    if holes:
        sys.stdout.flush()
        more = f" (and {len(holes) - 1} more, above)" if len(holes) > 1 else ""
        print(f"kraft dump-log: error: the log is not whole: {holes[0]}{more}", file=sys.stderr)
        return 1
    return 0
