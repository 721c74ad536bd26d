"""Decode one segment or snapshot file into Arrow record batches (no Spark here).

This is the work of one Spark input partition, kept Spark-free so that it can be
unit tested and timed on its own. Every batch is verified (both checksums, and
contiguous offsets in a segment), so a corrupt file raises an error naming the file
and the offset: a history built from a partial log is worse than no history.

Besides the columns of DESIGN 1.6's `records` table (offset, base_offset, epoch,
append_time_ms, control, type, fields as JSON text) each row carries typed columns
for the fields that the history tables need (broker id and epoch, fence and
shutdown changes, topic and partition ids, leader, ISR, replicas, epochs). The
reader pulls them straight out of the decoded msgpack array, so Spark never has to
parse the JSON text again: that saves a `from_json` over every record.

Why several Arrow batches per chunk: most typed columns are null for most record
types. Rows are grouped by kind (partition, broker, other) and each kind's batch
fills only its own columns, the others become `pa.nulls(n)` (no per-row work).
Row order inside a file is therefore not offset order; every consumer orders by
`offset` explicitly.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from metadata_log.batch import (
    HEADER,
    HEADER_CRC,
    HEADER_SIZE,
    MAGIC,
    MAX_BATCH_BYTES,
    BatchHeader,
    iter_headers,
)
from metadata_log.errors import IncompleteBatchError, MetadataLogError, RecordDecodeError
from metadata_log.records import (
    _DATA_CODECS,
    record_fields,
    record_from_wire,
)

SOURCE_SEGMENT = "segment"
SOURCE_SNAPSHOT = "snapshot"

# How many records go into one group of Arrow batches: large enough to amortise
# pyarrow's per-call cost, small enough to keep a task's memory flat.
CHUNK_RECORDS = 65_536

_I32 = pa.int32()
_I64 = pa.int64()
_STR = pa.string()
_BOOL = pa.bool_()
# Spark expects its own Arrow schema exactly: nullable fields, list items named "element".
_I32_LIST = pa.list_(pa.field("element", pa.int32()))

BASE_FIELDS: list[pa.Field] = [
    pa.field("offset", _I64),
    pa.field("base_offset", _I64),
    pa.field("epoch", _I32),
    pa.field("append_time_ms", _I64),
    pa.field("control", _BOOL),
    pa.field("type", _STR),
    pa.field("fields", _STR),
    pa.field("source", _STR),
    # The snapshot's end offset for rows read from a snapshot file (whose in-file
    # offsets start at 0); null for segment rows.
    pa.field("snapshot_end_offset", _I64),
]
# Derived, not read from the tuple: a NoOp flag next to `control`, computed per
# Arrow batch (vectorised) rather than per row.
NOOP_FIELD = pa.field("noop", _BOOL)
# Typed columns of partition and topic records.
PARTITION_FIELDS: list[pa.Field] = [
    pa.field("topic_id", _STR),
    pa.field("topic_name", _STR),
    pa.field("partition_id", _I32),
    pa.field("leader", _I32),  # PartitionChangeRecord keeps -2 (unchanged) here
    pa.field("isr", _I32_LIST),  # null: unchanged
    pa.field("replicas", _I32_LIST),
    pa.field("removing_replicas", _I32_LIST),
    pa.field("adding_replicas", _I32_LIST),
    pa.field("leader_recovery_state", _I32),  # -1: unchanged
    pa.field("leader_epoch", _I32),  # PartitionRecord only
    pa.field("partition_epoch", _I32),  # PartitionRecord only
]
# Typed columns of broker records. `fenced`: 1 fenced, -1 unfenced, 0 unchanged;
# `shutdown`: 1 entered controlled shutdown, -1 not in it (a registration), 0 unchanged.
BROKER_FIELDS: list[pa.Field] = [
    pa.field("broker_id", _I32),
    pa.field("broker_epoch", _I64),
    pa.field("fenced", _I32),
    pa.field("shutdown", _I32),
    pa.field("incarnation_id", _STR),
    pa.field("rack", _STR),
]
ARROW_SCHEMA = pa.schema([*BASE_FIELDS, NOOP_FIELD, *PARTITION_FIELDS, *BROKER_FIELDS])
N_BASE = len(BASE_FIELDS)
_TYPE_COLUMN = [f.name for f in BASE_FIELDS].index("type")


def spark_ddl() -> str:
    """The same schema as a Spark DDL string (the data source's schema())."""
    names = {
        _I32: "INT",
        _I64: "BIGINT",
        _STR: "STRING",
        _BOOL: "BOOLEAN",
        _I32_LIST: "ARRAY<INT>",
    }
    return ", ".join(f"{f.name} {names[f.type]}" for f in ARROW_SCHEMA)


@dataclass(frozen=True, slots=True)
class LogFile:
    """One file to read: what a Spark input partition carries."""

    path: str
    source: str  # SOURCE_SEGMENT or SOURCE_SNAPSHOT
    base_offset: int  # a segment's base offset (from its name); 0 for a snapshot
    # The next segment's base offset: this segment must end exactly there (no gap).
    next_base_offset: int | None = None
    last_segment: bool = False  # only the last segment may end in a torn batch
    snapshot_end_offset: int | None = None
    upto_offset: int | None = None  # read only offsets <= this (pruning)


# Per data-record type id: its class name, field names and the extractor of the
# typed columns. Kinds: 0 other, 1 partition/topic, 2 broker.
_KIND_OTHER, _KIND_PARTITION, _KIND_BROKER = 0, 1, 2


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _partition_cols(t: int, r: Any) -> tuple[Any, ...]:
    # (topic_id, topic_name, partition_id, leader, isr, replicas, removing, adding,
    #  leader_recovery_state, leader_epoch, partition_epoch)
    if t == 5:  # PartitionChangeRecord
        return (
            r.topic_id,
            None,
            r.partition_id,
            r.leader,
            r.isr,
            r.replicas,
            r.removing_replicas,
            r.adding_replicas,
            r.leader_recovery_state,
            None,
            None,
        )
    if t == 3:  # PartitionRecord
        return (
            r.topic_id,
            None,
            r.partition_id,
            r.leader,
            r.isr,
            r.replicas,
            r.removing_replicas,
            r.adding_replicas,
            r.leader_recovery_state,
            r.leader_epoch,
            r.partition_epoch,
        )
    if t == 2:  # TopicRecord
        return (r.topic_id, r.name, None, None, None, None, None, None, None, None, None)
    # RemoveTopicRecord
    return (r.topic_id, None, None, None, None, None, None, None, None, None, None)


def _broker_cols(t: int, r: Any) -> tuple[Any, ...]:
    # (broker_id, broker_epoch, fenced, shutdown, incarnation_id, rack)
    if t == 0:  # RegisterBrokerRecord: a whole new registration
        return (
            r.broker_id,
            r.broker_epoch,
            1 if r.fenced else -1,
            1 if r.in_controlled_shutdown else -1,
            r.incarnation_id,
            r.rack,
        )
    if t == 7:  # FenceBrokerRecord
        return (r.id, r.epoch, 1, 0, None, None)
    if t == 8:  # UnfenceBrokerRecord
        return (r.id, r.epoch, -1, 0, None, None)
    if t == 17:  # BrokerRegistrationChangeRecord
        return (r.broker_id, r.broker_epoch, r.fenced, r.in_controlled_shutdown, None, None)
    # UnregisterBrokerRecord
    return (r.broker_id, r.broker_epoch, 0, 0, None, None)


_KIND: dict[int, int] = {0: 2, 1: 2, 7: 2, 8: 2, 17: 2, 2: 1, 3: 1, 5: 1, 9: 1}
_EXTRACT: dict[int, Callable[[int, Any], tuple[Any, ...]]] = {
    _KIND_PARTITION: _partition_cols,
    _KIND_BROKER: _broker_cols,
}


class _Chunk:
    """Rows of one chunk, grouped by kind, turned into Arrow batches."""

    __slots__ = ("rows", "n")

    def __init__(self) -> None:
        self.rows: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]] = (
            [],
            [],
            [],
        )
        self.n = 0

    def batches(self) -> Iterator[pa.RecordBatch]:
        for kind, rows in enumerate(self.rows):
            if rows:
                yield _to_arrow(kind, rows)


def _to_arrow(kind: int, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    n = len(rows)
    cols = list(zip(*rows, strict=True))
    arrays: list[pa.Array] = [pa.array(cols[i], type=f.type) for i, f in enumerate(BASE_FIELDS)]
    arrays.append(pc.equal(arrays[_TYPE_COLUMN], "NoOpRecord"))
    typed = cols[N_BASE:]
    for group_kind, group in ((_KIND_PARTITION, PARTITION_FIELDS), (_KIND_BROKER, BROKER_FIELDS)):
        if group_kind == kind:
            arrays += [pa.array(typed[i], type=f.type) for i, f in enumerate(group)]
        else:
            arrays += [pa.nulls(n, type=f.type) for f in group]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class _JsonInts(dict):  # type: ignore[type-arg]
    """JSON text of int lists (ISRs, replica lists repeat endlessly): built once each."""

    def __init__(self) -> None:
        super().__init__({None: "null"})

    def __missing__(self, v: tuple[int, ...]) -> str:
        if type(v) is not tuple or not all(type(x) is int for x in v):
            raise ValueError(f"expected a list of integers, got {v!r}")
        out = self[v] = "[" + ",".join(map(str, v)) + "]"
        return out


def _headers(data: bytes, path: str, first: int | None) -> Iterator[tuple[int, BatchHeader]]:
    """metadata_log.batch.iter_headers with its checks inlined for the common case.

    Any batch that is not plainly fine is handed to metadata_log's own
    parse_header/verify_records, so every error (file, offset, reason) is theirs.
    """
    unpack, crc32 = HEADER.unpack_from, zlib.crc32
    hsize, body = HEADER_SIZE, HEADER.size
    end = len(data)
    pos = 0
    expect = first
    while pos < end:
        ok = end - pos >= hsize
        if ok:
            fields = unpack(data, pos)
            length, count = fields[1], fields[6]
            ok = (
                crc32(data[pos : pos + body]) == HEADER_CRC.unpack_from(data, pos + body)[0]
                and fields[3] == MAGIC
                and hsize <= length <= MAX_BATCH_BYTES
                and count > 0
                and pos + length <= end
                and (expect is None or fields[0] == expect)
                and crc32(data[pos + hsize : pos + length]) == fields[7]
            )
        if not ok:
            # the slow path raises the precise error (or accepts, if we were too strict)
            for p, h in iter_headers(data, path, expect, pos):
                yield p, h
                pos, expect = p + h.length, h.next_offset
                break
            continue
        h = BatchHeader(*fields)
        yield pos, h
        expect = fields[0] + count
        pos += length


class _JsonStrings:
    """JSON text of strings seen again and again (topic ids): escaped once."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        self.cache: dict[str, str] = {}

    def __call__(self, s: str) -> str:
        out = self.cache.get(s)
        if out is None:
            if type(s) is not str:
                raise ValueError(f"expected a string, got {s!r}")
            out = self.cache[s] = _dumps(s)
        return out


# Fast paths for the records that make up nearly all of a real log. They check
# the type id, version and arity (an unknown or newer record is still an error
# naming the offset) but not each field's type: the batch CRC already guards the
# bytes, and a wrongly typed value still fails its typed Arrow column. Every other
# record goes through metadata_log's full validation.
_PCR_ARITY = 2 + len(_DATA_CODECS[5].names)
_PR_ARITY = 2 + len(_DATA_CODECS[3].names)
_NOOP_ARITY = 2 + len(_DATA_CODECS[20].names)


_INTS = _JsonInts()


def _row_fast(obj: Any, q: _JsonStrings) -> tuple[str, str, int, tuple[Any, ...]] | None:
    """(type name, fields JSON, kind, typed columns) for a hot record, else None."""
    n = len(obj)
    tid = obj[0]
    ints = _INTS
    if obj[1] != 0:
        return None
    if tid == 5 and n == _PCR_ARITY:
        _, _, topic, pid, isr, leader, replicas, removing, adding, lrs = obj
        text = (
            f'{{"topic_id":{q(topic)},"partition_id":{pid:d},"isr":{ints[isr]},'
            f'"leader":{leader:d},"replicas":{ints[replicas]},'
            f'"removing_replicas":{ints[removing]},"adding_replicas":{ints[adding]},'
            f'"leader_recovery_state":{lrs:d}}}'
        )
        cols = (topic, None, pid, leader, isr, replicas, removing, adding, lrs, None, None)
        return "PartitionChangeRecord", text, _KIND_PARTITION, cols
    if tid == 20 and n == _NOOP_ARITY:
        return "NoOpRecord", "{}", _KIND_OTHER, ()
    if tid == 3 and n == _PR_ARITY:
        _, _, topic, pid, replicas, isr, removing, adding, leader, lrs, le, pe = obj
        text = (
            f'{{"topic_id":{q(topic)},"partition_id":{pid:d},"replicas":{ints[replicas]},'
            f'"isr":{ints[isr]},"removing_replicas":{ints[removing]},'
            f'"adding_replicas":{ints[adding]},"leader":{leader:d},'
            f'"leader_recovery_state":{lrs:d},"leader_epoch":{le:d},"partition_epoch":{pe:d}}}'
        )
        cols = (topic, None, pid, leader, isr, replicas, removing, adding, lrs, le, pe)
        return "PartitionRecord", text, _KIND_PARTITION, cols
    return None


def _row_slow(obj: Any, offset: int, control: bool) -> tuple[str, str, int, tuple[Any, ...]]:
    rec = record_from_wire(obj, offset, control)
    tid = type(rec).TYPE
    text = _dumps(record_fields(rec))
    if control:
        return type(rec).__name__, text, _KIND_OTHER, ()
    kind = _KIND.get(tid, _KIND_OTHER)
    cols = _EXTRACT[kind](tid, rec) if kind else ()
    return type(rec).__name__, text, kind, cols


def read_file(f: LogFile, chunk_records: int = CHUNK_RECORDS) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record of one file (see the module docstring)."""
    path = f.path
    with open(path, "rb") as fh:
        data = fh.read()
    snap = f.source == SOURCE_SNAPSHOT
    source = f.source
    snap_end = f.snapshot_end_offset
    # Pruning applies to segments only: a snapshot is one state, read whole.
    upto = None if snap else f.upto_offset
    # A segment's batches must be contiguous from the offset in its name; a
    # snapshot's in-file offsets are only checked for being verified batches.
    first = None if snap else f.base_offset
    chunk = _Chunk()
    rows = chunk.rows
    next_offset = f.base_offset
    q = _JsonStrings()
    # One unpacker for the whole file: creating one per batch costs more than
    # decoding a typical (small) controller batch.
    unpacker = msgpack.Unpacker(use_list=False, raw=False, strict_map_key=False)
    stopped = False  # stopped before the file's end: pruned, or a torn tail
    try:
        for pos, h in _headers(data, path, first):
            base = h.base_offset
            if upto is not None and base > upto:
                stopped = True
                break
            next_offset = h.next_offset
            epoch, ts, control = h.leader_epoch, h.append_time_ms, h.control
            unpacker.feed(data[pos + HEADER_SIZE : pos + h.length])
            offset = base
            try:
                for obj in unpacker:
                    if upto is not None and offset > upto:
                        offset += 1  # pruned: past the requested offset
                        continue
                    hot = None if control else _row_fast(obj, q)
                    tname, text, kind, cols = hot or _row_slow(obj, offset, control)
                    rows[kind].append(
                        (offset, base, epoch, ts, control, tname, text, source, snap_end, *cols)
                    )
                    offset += 1
            except RecordDecodeError as e:
                raise e.at(path) from None
            except MetadataLogError:
                raise
            except Exception as e:  # msgpack's several exception types for garbage
                raise RecordDecodeError(offset, f"malformed record: {e!r}", path) from None
            if offset != h.next_offset:
                raise RecordDecodeError(
                    base, f"batch declares {h.record_count} records, holds {offset - base}", path
                )
            chunk.n += h.record_count
            if chunk.n >= chunk_records:
                yield from chunk.batches()
                chunk = _Chunk()
                rows = chunk.rows
    except IncompleteBatchError:
        # A batch cut short at the very end of the newest segment is the end of data
        # (a live log may be mid-append); anywhere else it is lost data.
        if not f.last_segment:
            raise
        stopped = True  # the gap check below does not apply to a torn tail
    yield from chunk.batches()
    gap = f.next_base_offset is not None and next_offset != f.next_base_offset
    if gap and not snap and not stopped:
        raise MetadataLogError(
            f"gap in the log: {path} ends at offset {next_offset} but the next segment "
            f"starts at offset {f.next_base_offset}"
        )
