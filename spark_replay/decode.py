"""Decode one segment or snapshot file into Arrow record batches (no Spark here).

This is the work of one Spark task, kept Spark-free so that it can be unit tested
and timed on its own. Every batch is verified (both checksums, and contiguous
offsets in a segment), so a corrupt file raises an error naming the file and the
offset: a history built from a partial log is worse than no history.

Besides the columns of DESIGN 1.6's `records` table (offset, base_offset, epoch,
append_time_ms, control, type, fields as JSON text) each row carries typed columns
for the fields that the history tables need (broker id and epoch, fence and
shutdown changes, topic and partition ids, leader, ISR, replicas, epochs), so
Spark never has to parse the JSON text again.

Why it is vectorised, and how. A controller log is mostly tiny batches (about two
records each) of PartitionChangeRecords, so any per-batch or per-record Python
code dominates. The reader therefore:

1. finds batch boundaries with one tight loop (a batch's position depends on the
   previous batch's length, so this one step is sequential), then reads and checks
   every header field with numpy at once: header CRC (table-driven CRC-32 run over
   all headers in lockstep), magic, length, count, contiguous offsets; the records
   CRC is one `zlib.crc32` per batch;
2. rewrites, in a private copy of the file, each 39-byte batch header into msgpack
   framing: 34 bytes become a msgpack ``bin8`` filler (the first batch of a chunk
   also gets the chunk's outer array header there) and the last 5 an array header
   holding the batch's record count. One `msgpack.unpackb` call then decodes a
   whole chunk of batches into ``(filler, records-of-batch, ...)``, checked
   against the headers' record counts;
3. classifies records with numpy (type id, version, arity) and turns the hot
   types (PartitionChangeRecord, PartitionRecord, NoOpRecord) into Arrow columns
   with C-level transposition (`zip(*rows)`), C-level type checks
   (`set(map(type, column))`) and Arrow compute for the JSON text. Everything
   else (a few percent of a real log) takes metadata_log's full per-record
   validation, as does any chunk where the fast path sees anything unusual: the
   slow path then raises the precise error (file, offset, reason).

Rows of one chunk are grouped by kind (PartitionChangeRecord, PartitionRecord,
NoOp, then other records), one Arrow batch per group, so row order inside a file
is not offset order; every consumer orders by `offset` explicitly.
"""

from __future__ import annotations

import gc
import itertools
import json
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_log.batch import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_BATCH_BYTES,
    BatchHeader,
    iter_headers,
)
from metadata_log.errors import IncompleteBatchError, MetadataLogError, RecordDecodeError
from metadata_log.open_file import open_log_file
from metadata_log.records import (
    _DATA_CODECS,
    FIELD_COUNTS,
    record_fields,
    record_from_wire,
)

SOURCE_SEGMENT = "segment"
SOURCE_SNAPSHOT = "snapshot"
# The on-disk format of a log's files: this project's (batch magic 1, msgpack
# records) or Apache Kafka's (record batch v2, magic 2; metadata_log.kafka).
FORMAT_KRAFT = "kraft"
FORMAT_KAFKA = "kafka"

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
# Derived: a NoOp flag next to `control`.
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
    # KIP-966 (the records' eligible_leader_replicas / last_known_elr, version 1);
    # a PartitionRecord v0 has empty lists, a PartitionChangeRecord v0 null (unchanged)
    pa.field("elr", _I32_LIST),
    pa.field("last_known_elr", _I32_LIST),
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
    fmt: str = FORMAT_KRAFT  # FORMAT_KRAFT or FORMAT_KAFKA


@dataclass
class FileStats:
    """What the driver needs to know about one file, gathered while decoding it.

    The job collects these (a few hundred bytes per file) instead of querying the
    records table again for offsets, times, record counts, snapshot headers and
    transaction markers.
    """

    path: str
    source: str
    snapshot_end_offset: int | None
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    first_time_ms: int | None = None
    last_time_ms: int | None = None
    max_epoch: int | None = None
    by_type: dict[str, int] = field(default_factory=dict)
    # Rows of the few record types the summary and the history need on the driver:
    # (offset, type, append_time_ms, epoch, fields JSON).
    markers: list[tuple[int, str, int, int, str]] = field(default_factory=list)
    # The records stage's task: (start, end, CPU s) (replay_job.stage_profile).
    task_span: tuple[float, float, float] | None = None
    # [file position, bytes] of the incomplete batch that ended the newest segment
    # (read as the end of data, as Kafka's recovery does; the driver says so)
    torn_tail: list[int] | None = None
    # A segment's leader epochs, for the driver's check that they never go back
    # (Kafka's batch CRC does not cover the epoch): the first (the highest is
    # max_epoch), and [offset, epoch, highest before] of its first record below an
    # earlier epoch.
    first_epoch: int | None = None
    epoch_back: list[int] | None = None
    _epoch_rows: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        self.records += n
        offs = batch.column(0)
        times = batch.column(3)
        o = pc.min_max(offs)
        t = pc.min_max(times)
        self.first_offset = _min(self.first_offset, o["min"].as_py())
        self.last_offset = _max(self.last_offset, o["max"].as_py())
        self.first_time_ms = _min(self.first_time_ms, t["min"].as_py())
        self.last_time_ms = _max(self.last_time_ms, t["max"].as_py())
        self.max_epoch = _max(self.max_epoch, pc.max(batch.column(2)).as_py())
        if self.source == SOURCE_SEGMENT:
            # kept until finish(): a chunk's rows may come grouped by record type
            # (Kafka's fast path), so only the whole file is in offset order
            self._epoch_rows.append(
                (
                    offs.to_numpy(zero_copy_only=False).astype(np.int64),
                    batch.column(2).to_numpy(zero_copy_only=False).astype(np.int64),
                )
            )
        types = batch.column(5)
        counts = pc.value_counts(types)
        for name, c in zip(
            counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
        ):
            self.by_type[name] = self.by_type.get(name, 0) + c
        if any(name in MARKER_TYPES for name in counts.field("values").to_pylist()):
            sel = batch.filter(pc.is_in(types, value_set=_MARKER_SET))
            for o, t, ts, ep, fj in zip(
                sel.column(0).to_pylist(),
                sel.column(5).to_pylist(),
                sel.column(3).to_pylist(),
                sel.column(2).to_pylist(),
                sel.column(6).to_pylist(),
                strict=True,
            ):
                self.markers.append((o, t, ts, ep, fj))

    def finish(self) -> None:
        """Once the file is read: its first epoch, and its first step back."""
        rows, self._epoch_rows = self._epoch_rows, []
        if not rows:
            return
        offs = np.concatenate([o for o, _ in rows])
        order = np.argsort(offs, kind="stable")
        offs = offs[order]
        ep = np.concatenate([e for _, e in rows])[order]
        top = np.maximum.accumulate(ep)
        back = np.flatnonzero(ep[1:] < top[:-1])
        self.first_epoch = int(ep[0])
        if len(back):
            i = int(back[0]) + 1
            self.epoch_back = [int(offs[i]), int(ep[i]), int(top[i - 1])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source": self.source,
            "snapshot_end_offset": self.snapshot_end_offset,
            "records": self.records,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "first_time_ms": self.first_time_ms,
            "last_time_ms": self.last_time_ms,
            "max_epoch": self.max_epoch,
            "by_type": self.by_type,
            "markers": self.markers,
            "torn_tail": self.torn_tail,
            "first_epoch": self.first_epoch,
            "epoch_back": self.epoch_back,
        }


# Record types whose rows FileStats keeps (about one record in a thousand):
# transactions (the history applies them at their end), snapshot headers (the
# time a snapshot's state is as of), and what the summary counts (broker state
# changes, controller leader changes).
MARKER_TYPES = frozenset(
    {
        "BeginTransactionRecord",
        "EndTransactionRecord",
        "AbortTransactionRecord",
        "SnapshotHeader",
        "LeaderChangeMessage",
        "RegisterBrokerRecord",
        "UnregisterBrokerRecord",
        "FenceBrokerRecord",
        "UnfenceBrokerRecord",
        "BrokerRegistrationChangeRecord",
    }
)
_MARKER_SET = pa.array(sorted(MARKER_TYPES), _STR)


def _min(a: int | None, b: int) -> int:
    return b if a is None or b < a else a


def _max(a: int | None, b: int) -> int:
    return b if a is None or b > a else a


# ----------------------------------------------------------------------------- slow path
# Per-record code for the records the vectorised path does not handle (and for
# any chunk it refuses): metadata_log's full validation, errors naming the offset.

_KIND_OTHER, _KIND_PARTITION, _KIND_BROKER = 0, 1, 2

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _partition_cols(t: int, r: Any) -> tuple[Any, ...]:
    # (topic_id, topic_name, partition_id, leader, isr, replicas, removing, adding,
    #  elr, last_known_elr, leader_recovery_state, leader_epoch, partition_epoch)
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
            r.eligible_leader_replicas,
            r.last_known_elr,
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
            r.eligible_leader_replicas,
            r.last_known_elr,
            r.leader_recovery_state,
            r.leader_epoch,
            r.partition_epoch,
        )
    if t == 2:  # TopicRecord
        return (r.topic_id, r.name, *(None,) * 11)
    # RemoveTopicRecord
    return (r.topic_id, *(None,) * 12)


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


def _row_slow(obj: Any, offset: int, control: bool) -> tuple[str, str, int, tuple[Any, ...]]:
    """(type name, fields JSON, kind, typed columns) of one record, fully validated."""
    rec = record_from_wire(obj, offset, control)
    tid = type(rec).TYPE
    text = _dumps(record_fields(rec))
    if control:
        return type(rec).__name__, text, _KIND_OTHER, ()
    kind = _KIND.get(tid, _KIND_OTHER)
    cols = _EXTRACT[kind](tid, rec) if kind else ()
    return type(rec).__name__, text, kind, cols


class _Rows:
    """Slow-path rows grouped by kind, turned into Arrow batches."""

    __slots__ = ("rows", "n")

    def __init__(self) -> None:
        self.rows: tuple[list[tuple[Any, ...]], ...] = ([], [], [])
        self.n = 0

    def add(
        self, obj: Any, offset: int, base: int, epoch: int, ts: int, control: bool, tail: tuple
    ) -> None:
        tname, text, kind, cols = _row_slow(obj, offset, control)
        self.rows[kind].append((offset, base, epoch, ts, control, tname, text, *tail, *cols))
        self.n += 1

    def batches(self) -> Iterator[pa.RecordBatch]:
        for kind, rows in enumerate(self.rows):
            if rows:
                yield _rows_to_arrow(kind, rows)


def _rows_to_arrow(kind: int, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    n = len(rows)
    cols = list(zip(*rows, strict=True))
    arrays: list[pa.Array] = [pa.array(cols[i], type=f.type) for i, f in enumerate(BASE_FIELDS)]
    arrays.append(pc.equal(arrays[5], "NoOpRecord"))
    typed = cols[N_BASE:]
    for group_kind, group in ((_KIND_PARTITION, PARTITION_FIELDS), (_KIND_BROKER, BROKER_FIELDS)):
        if group_kind == kind:
            arrays += [pa.array(typed[i], type=f.type) for i, f in enumerate(group)]
        else:
            arrays += [pa.nulls(n, type=f.type) for f in group]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


# ----------------------------------------------------------------------------- headers

_LEN = struct.Struct(">i").unpack_from
_H_CRC_SPAN = HEADER.size  # the header CRC covers bytes 0..34


def _crc_table() -> np.ndarray:
    t = np.zeros(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[i] = c
    return t


_CRC_TABLE = _crc_table()


def _header_crcs(h: np.ndarray) -> np.ndarray:
    """zlib CRC-32 of the first 35 bytes of each row of `h`, all rows in lockstep."""
    crc = np.full(len(h), 0xFFFFFFFF, np.uint32)
    table = _CRC_TABLE
    for j in range(_H_CRC_SPAN):
        crc = table[(crc ^ h[:, j]) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


# The header's fields (HEADER + HEADER_CRC), big-endian, as one packed numpy record.
_HEADER_DTYPE = np.dtype(
    [
        ("base", ">i8"),
        ("length", ">i4"),
        ("epoch", ">i4"),
        ("magic", "i1"),
        ("attrs", ">i2"),
        ("time", ">i8"),
        ("count", ">i4"),
        ("records_crc", ">u4"),
        ("header_crc", ">u4"),
    ]
)
assert _HEADER_DTYPE.itemsize == HEADER_SIZE


def _native(a: np.ndarray, dtype: Any = None) -> np.ndarray:
    return a.astype(dtype or a.dtype.newbyteorder("="))


@dataclass
class _Headers:
    """Every batch header of a file that passed all checks, as arrays."""

    pos: np.ndarray  # file position
    length: np.ndarray
    base: np.ndarray  # base offset
    epoch: np.ndarray
    control: np.ndarray  # bool
    time: np.ndarray
    count: np.ndarray


def _scan_headers(data: bytes, first: int | None, upto: int | None) -> tuple[_Headers, int, bool]:
    """The leading run of good batches: (headers, end position, pruned).

    Stops before the first batch that fails any check, and (with `upto`) before
    the first batch that starts after `upto` (then `pruned` is true). What
    follows the run, if anything, is the slow path's to judge (error or torn tail).
    """
    end = len(data)
    starts: list[int] = []
    app = starts.append
    pos = 0
    length = _LEN
    hsize = HEADER_SIZE
    while pos + hsize <= end:
        app(pos)
        n = length(data, pos + 8)[0]
        if n < hsize:
            break
        pos += n
    s = np.array(starts, np.int64)
    nb = len(s)
    if nb == 0:
        empty = np.zeros(0, np.int64)
        return _Headers(empty, empty, empty, empty, empty.astype(bool), empty, empty), 0, False
    raw = np.frombuffer(data, np.uint8)
    # every header's 39 bytes, gathered through a sliding-window view (no index matrix)
    window = np.lib.stride_tricks.as_strided(raw, shape=(end - hsize + 1, hsize), strides=(1, 1))
    h = window[np.minimum(s, end - hsize)]
    fields = h.view(_HEADER_DTYPE).ravel()
    base = _native(fields["base"])
    blen = _native(fields["length"], np.int64)
    epoch = _native(fields["epoch"])
    magic = fields["magic"]
    attrs = _native(fields["attrs"])
    time = _native(fields["time"])
    count = _native(fields["count"], np.int64)
    rcrc = _native(fields["records_crc"])
    hcrc = _native(fields["header_crc"])
    ok = (
        (_header_crcs(h) == hcrc)
        & (magic == MAGIC)
        & (blen >= hsize)
        & (blen <= MAX_BATCH_BYTES)
        & (count > 0)
        & (s + blen <= end)
    )
    if first is not None:
        expect = np.empty(nb, np.int64)
        expect[0] = first
        np.add(base[:-1], count[:-1], out=expect[1:])
        ok &= base == expect
    bad = int(np.argmin(ok)) if not ok.all() else nb
    # The records CRC, one zlib call per batch (C-level map: no Python per batch),
    # only over the run that passed so far.
    if bad:
        view = memoryview(data)
        body = map(slice, (s[:bad] + hsize).tolist(), (s[:bad] + blen[:bad]).tolist())
        got = np.fromiter(map(zlib.crc32, map(view.__getitem__, body)), np.uint32, bad)
        rok = got == rcrc[:bad]
        if not rok.all():
            bad = int(np.argmin(rok))
    n_ok, pruned = bad, False
    if upto is not None:
        after = np.flatnonzero(base[:bad] > upto)
        if len(after):
            n_ok, pruned = int(after[0]), True
    sl = slice(0, n_ok)
    hdr = _Headers(
        pos=s[sl],
        length=blen[sl],
        base=base[sl],
        epoch=epoch[sl].astype(np.int32),
        control=(attrs[sl] & 1).astype(bool),
        time=time[sl],
        count=count[sl],
    )
    stop = int(s[n_ok - 1] + blen[n_ok - 1]) if n_ok else 0
    return hdr, stop, pruned


# ----------------------------------------------------------------------------- fast path

_ITEM0, _ITEM1 = itemgetter(0), itemgetter(1)
_NONE = type(None)


def _unpack(buf: Any) -> Any:
    return msgpack.unpackb(buf, use_list=False, raw=False, strict_map_key=False)


def _frame(
    buf: np.ndarray, hdr: _Headers, chunk_first: np.ndarray, chunk_sizes: np.ndarray
) -> None:
    """Rewrite headers in `buf` (a private copy of the file) into msgpack framing.

    Each 39-byte header becomes ``bin8(32 filler bytes)`` + ``array32(count)``;
    the first batch of each chunk instead starts with the chunk's
    ``array32(2 * batches)`` then ``bin8(27 filler bytes)``. A chunk then unpacks
    in one call into (filler, records of batch 1, filler, records of batch 2, ...).
    """
    p = hdr.pos
    buf[p] = 0xC4
    buf[p + 1] = 32
    buf[p + 34] = 0xDD
    cnt = hdr.count.astype(">u4").view(np.uint8).reshape(-1, 4)
    buf[p[:, None] + np.arange(35, 39)] = cnt
    q = p[chunk_first]
    buf[q] = 0xDD
    outer = (2 * chunk_sizes).astype(">u4").view(np.uint8).reshape(-1, 4)
    buf[q[:, None] + np.arange(1, 5)] = outer
    buf[q + 5] = 0xC4
    buf[q + 6] = 27


def _ints_ok(col: Sequence[Any]) -> bool:
    return set(map(type, col)) <= {int}


def _lists_ok(col: Sequence[Any], optional: bool) -> bool:
    kinds = set(map(type, col))
    if not kinds <= ({tuple, _NONE} if optional else {tuple}):
        return False
    items = itertools.chain.from_iterable(filter(None, col))
    return set(map(type, items)) <= {int}


class _FastDecodeRefused(Exception):
    """The vectorised path saw something it does not handle: use the slow path."""


class _Codebook(dict):  # type: ignore[type-arg]
    """Distinct values of one kind of column -> small int codes.

    Topic ids and replica lists repeat endlessly, so each distinct value is
    validated, converted to Arrow and rendered as JSON once; a column is then
    ``map(codebook.__getitem__, values)`` (C-level dict lookups) and two Arrow
    `take`s. Dict keys compare by value, and ``1 == 1.0 == True`` in Python, so
    a codebook is only used where no float or bool can be among the values (see
    `_ODD_TYPE_BYTES`); a value of the wrong type raises _FastDecodeRefused.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind  # "str", "list" (never null) or "opt_list"
        self.values: list[Any] = []
        self._arrays: tuple[pa.Array, pa.Array] | None = None

    def __missing__(self, v: Any) -> int:
        if self.kind == "str":
            if type(v) is not str:
                raise _FastDecodeRefused
        elif (v is not None or self.kind != "opt_list") and (
            type(v) is not tuple or not all(type(x) is int for x in v)
        ):
            raise _FastDecodeRefused
        code = self[v] = len(self.values)
        self.values.append(v)
        self._arrays = None
        return code

    def arrays(self) -> tuple[pa.Array, pa.Array]:
        """(typed values, JSON text) by code."""
        if self._arrays is None:
            if self.kind == "str":
                typed = pa.array(self.values, _STR)
                text = [_dumps(v) for v in self.values]
            else:
                typed = pa.array(self.values, _I32_LIST)
                text = [
                    "null" if v is None else "[" + ",".join(map(str, v)) + "]" for v in self.values
                ]
            self._arrays = (typed, pa.array(text, _STR))
        return self._arrays

    def encode(self, col: Sequence[Any]) -> tuple[pa.Array, pa.Array]:
        codes = pa.array(np.fromiter(map(self.__getitem__, col), np.int32, len(col)))
        typed, text = self.arrays()
        return typed.take(codes), text.take(codes)


# Leading bytes of msgpack floats (0xca, 0xcb) and booleans (0xc2, 0xc3). A chunk
# without any of these bytes holds no float or bool anywhere, which is what makes
# codebook lookups exact. (Such bytes may also occur inside other values, e.g. an
# integer's payload: then the chunk's columns get explicit type checks instead.)
_ODD_TYPE_BYTES = np.zeros(256, bool)
_ODD_TYPE_BYTES[[0xC2, 0xC3, 0xCA, 0xCB]] = True


@dataclass(frozen=True)
class _Hot:
    """A record type and version with a vectorised path: its wire layout and typed
    columns."""

    type_id: int
    version: int
    name: str
    arity: int  # 2 + the fields this version carries
    # field name -> index in the wire array, in the record's field order
    columns: dict[str, int]
    optional_lists: bool
    # The JSON of the fields this version does not carry (their defaults, as
    # record_fields gives them), which come last in field order.
    trailer: str
    # Typed list columns of fields this version does not carry whose default is
    # an empty list (a PartitionRecord v0's ELR lists): set, not null.
    absent_empty: tuple[str, ...] = ()


def _hot(cls_id: int, version: int, optional_lists: bool) -> _Hot:
    codec = _DATA_CODECS[cls_id]
    n = FIELD_COUNTS[codec.cls][version]
    trailer = "".join(
        f',"{name}":{_dumps(list(d) if type(d) is tuple else d)}' for name, d in codec.defaults[n:]
    )
    return _Hot(
        type_id=cls_id,
        version=version,
        name=codec.cls.__name__,
        arity=2 + n,
        columns={name: 2 + i for i, name in enumerate(codec.names[:n])},
        optional_lists=optional_lists,
        trailer=trailer,
        absent_empty=tuple(
            _COLUMN_OF.get(name, name)
            for name, d in codec.defaults[n:]
            if name in _LIST_FIELDS and d == ()
        ),
    )


def _hot_versions(cls_id: int, optional_lists: bool) -> tuple[_Hot, ...]:
    """Every version of a hot type (a record keeps the version it was written at:
    PartitionChangeRecord v0 has no ELR fields, v1 has them)."""
    versions = sorted(FIELD_COUNTS[_DATA_CODECS[cls_id].cls])
    return tuple(_hot(cls_id, v, optional_lists) for v in versions)


# A record field's typed column, where the names differ.
_COLUMN_OF = {"eligible_leader_replicas": "elr"}
_LIST_FIELDS = (
    "isr",
    "replicas",
    "removing_replicas",
    "adding_replicas",
    "eligible_leader_replicas",
    "last_known_elr",
)
_PCRS = _hot_versions(5, optional_lists=True)  # PartitionChangeRecord
_PRS = _hot_versions(3, optional_lists=False)  # PartitionRecord
_HOT_SPECS = (*_PCRS, *_PRS)
_PCR, _PR = _PCRS[-1], _PRS[-1]  # the latest: every field (a native record's)
_NOOP_ID = 20
_NOOP_ARITY = 2 + len(_DATA_CODECS[_NOOP_ID].names)
_INT_FIELDS = ("partition_id", "leader", "leader_recovery_state", "leader_epoch", "partition_epoch")


def _empty_lists(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(
        pa.array(np.zeros(n + 1, np.int32)), pa.array([], _I32), type=_I32_LIST
    )


def _hot_columns(
    spec: _Hot,
    rows: Sequence[tuple[Any, ...]],
    books: dict[str, _Codebook],
    check_types: bool,
) -> dict[str, pa.Array] | None:
    """Typed Arrow columns and the fields JSON of hot rows.

    None if any value is off: the rows then take the per-record path, which
    names the offending offset. `check_types`: these rows' batches may hold
    floats or bools, so value types are checked before any codebook use.
    Columns that are the same in every row (a PartitionChangeRecord rarely
    touches replicas or reassignments) cost one C-level count and a constant.
    """
    n = len(rows)
    out: dict[str, pa.Array] = {}
    parts: list[Any] = []
    literal = ""  # JSON text shared by every row, not yet in `parts`
    try:
        for k, (name, i) in enumerate(spec.columns.items()):
            col = list(map(itemgetter(i), rows))
            literal += ("{" if k == 0 else ",") + f'"{name}":'
            text: pa.Array | None = None
            if name == "topic_id":
                # a bytes value never equals a str key: no type check needed
                out[name], text = books["str"].encode(col)
            elif name in _LIST_FIELDS:
                column = _COLUMN_OF.get(name, name)
                if spec.optional_lists and col.count(None) == n:
                    out[column], literal = pa.nulls(n, _I32_LIST), literal + "null"
                elif col.count(()) == n:
                    out[column], literal = _empty_lists(n), literal + "[]"
                else:
                    if check_types and not _lists_ok(col, spec.optional_lists):
                        return None
                    book = books["opt_list" if spec.optional_lists else "list"]
                    out[column], text = book.encode(col)
            elif name in _INT_FIELDS:
                if check_types and not _ints_ok(col):
                    return None
                a = out[name] = pa.array(col, _I32)
                if a.null_count:
                    return None
                text = pc.cast(a, _STR)
            else:  # pragma: no cover - a new field in a hot record: extend this reader
                return None
            if text is not None:
                parts += [literal, text]
                literal = ""
    except (_FastDecodeRefused, pa.ArrowException, OverflowError):
        return None
    parts.append(literal + spec.trailer + "}")
    for column in spec.absent_empty:
        out[column] = _empty_lists(n)
    # The fields JSON in the record's own field order, as record_fields gives it.
    out["fields"] = pc.binary_join_element_wise(*parts, "")
    return out


class _Reader:
    """Reads one file: the vectorised path, with the per-record path behind it."""

    def __init__(self, f: LogFile, data: bytes, chunk_records: int) -> None:
        self.f = f
        self.path = f.path
        self.data = data
        self.chunk_records = chunk_records
        self.snap = f.source == SOURCE_SNAPSHOT
        # Pruning applies to segments only: a snapshot is one state, read whole.
        self.upto = None if self.snap else f.upto_offset
        # A segment's batches must be contiguous from the offset in its name; a
        # snapshot's in-file offsets are only checked for being verified batches.
        self.first = None if self.snap else f.base_offset
        self.source = pa.scalar(f.source, _STR)
        self.snap_end = pa.scalar(f.snapshot_end_offset, _I64)
        self.tail = (f.source, f.snapshot_end_offset)
        self.books = {kind: _Codebook(kind) for kind in ("str", "list", "opt_list")}
        self.torn_tail: list[int] | None = None  # [position, bytes] (FileStats.torn_tail)

    # -- the whole file

    def batches(self) -> Iterator[pa.RecordBatch]:
        f = self.f
        hdr, stop, pruned = _scan_headers(self.data, self.first, self.upto)
        next_offset = f.base_offset
        if len(hdr.pos):
            yield from self._fast(hdr)
            next_offset = int(hdr.base[-1] + hdr.count[-1])
        stopped = pruned
        if not pruned and stop < len(self.data):
            # Whatever follows the good run: an error, a torn tail, or something the
            # vectorised checks were stricter about than metadata_log.
            expect = next_offset if self.first is not None else None
            state = {"next": next_offset, "stopped": False}
            yield from self._slow(stop, expect, state)
            next_offset, stopped = state["next"], state["stopped"]
        gap = f.next_base_offset is not None and next_offset != f.next_base_offset
        if gap and not self.snap and not stopped:
            raise MetadataLogError(
                f"gap in the log: {self.path} ends at offset {next_offset} but the next "
                f"segment starts at offset {f.next_base_offset}"
            )

    # -- vectorised

    def _fast(self, hdr: _Headers) -> Iterator[pa.RecordBatch]:
        cum = np.cumsum(hdr.count)
        # chunk boundaries: whole batches, about chunk_records records each
        marks = np.arange(self.chunk_records, int(cum[-1]), self.chunk_records)
        cuts = np.unique(np.searchsorted(cum, marks, side="left") + 1)
        bounds = [0, *[int(c) for c in cuts if 0 < c < len(cum)], len(cum)]
        firsts = np.array(bounds[:-1], np.int64)
        sizes = np.diff(np.array(bounds, np.int64))
        buf = bytearray(self.data)
        arr = np.frombuffer(buf, np.uint8)
        _frame(arr, hdr, firsts, sizes)
        view = memoryview(buf)
        for i0, i1 in itertools.pairwise(bounds):
            a = int(hdr.pos[i0])
            b = int(hdr.pos[i1 - 1] + hdr.length[i1 - 1])
            try:
                yield from self._fast_chunk(view[a:b], hdr, i0, i1)
            except _FastDecodeRefused:
                yield from self._slow_batches(hdr, i0, i1)

    def _fast_chunk(self, buf: Any, hdr: _Headers, i0: int, i1: int) -> Iterator[pa.RecordBatch]:
        nb = i1 - i0
        counts = hdr.count[i0:i1]
        try:
            objs = _unpack(buf)
        except Exception:  # noqa: BLE001 — msgpack's many error types: the slow path names it
            raise _FastDecodeRefused from None
        if type(objs) is not tuple or len(objs) != 2 * nb:
            raise _FastDecodeRefused
        groups = objs[1::2]
        if set(map(type, objs[0::2])) != {bytes} or set(map(type, groups)) != {tuple}:
            raise _FastDecodeRefused
        if not np.array_equal(np.fromiter(map(len, groups), np.int64, nb), counts):
            raise _FastDecodeRefused
        odd_batch = self._odd_batches(hdr, i0, i1)
        flat = list(itertools.chain.from_iterable(groups))
        n = len(flat)
        if set(map(type, flat)) != {tuple}:
            raise _FastDecodeRefused
        arity = np.fromiter(map(len, flat), np.int64, n)
        if arity.min() < 2:
            raise _FastDecodeRefused
        tids = list(map(_ITEM0, flat))
        vers = list(map(_ITEM1, flat))
        if not (_ints_ok(tids) and _ints_ok(vers)):
            raise _FastDecodeRefused
        try:
            tid = np.array(tids, np.int64)
            ver = np.array(vers, np.int64)
        except OverflowError:
            raise _FastDecodeRefused from None
        # per-record header columns
        which = np.repeat(np.arange(nb), counts)
        starts = np.cumsum(counts) - counts
        offsets = hdr.base[i0:i1][which] + (np.arange(n) - starts[which])
        control = hdr.control[i0:i1][which]
        keep = np.ones(n, bool) if self.upto is None else offsets <= self.upto
        data_rec = ~control & keep
        base = hdr.base[i0:i1][which]
        epoch = hdr.epoch[i0:i1][which]
        time = hdr.time[i0:i1][which]
        cols = (offsets, base, epoch, time, control)
        slow = keep.copy()
        noop = np.flatnonzero(data_rec & (ver == 0) & (tid == _NOOP_ID) & (arity == _NOOP_ARITY))
        if len(noop):
            yield self._noop_batch(noop, cols)
            slow[noop] = False
        odd = odd_batch[which]
        for spec in _HOT_SPECS:
            hot = data_rec & (tid == spec.type_id) & (ver == spec.version) & (arity == spec.arity)
            for check_types in (False, True):
                idx = np.flatnonzero(hot & (odd == check_types))
                if not len(idx):
                    continue
                rows = itemgetter(*idx)(flat) if len(idx) > 1 else (flat[idx[0]],)
                typed = _hot_columns(spec, rows, self.books, check_types)
                if typed is None:
                    continue  # something unusual in these rows: the slow path judges them
                yield self._hot_batch(spec, idx, cols, typed)
                slow[idx] = False
        rest = np.flatnonzero(slow)
        if len(rest):
            out = _Rows()
            try:
                for i in rest.tolist():
                    out.add(
                        flat[i],
                        int(offsets[i]),
                        int(base[i]),
                        int(epoch[i]),
                        int(time[i]),
                        bool(control[i]),
                        self.tail,
                    )
            except RecordDecodeError as e:
                raise e.at(self.path) from None
            yield from out.batches()

    def _odd_batches(self, hdr: _Headers, i0: int, i1: int) -> np.ndarray:
        """Per batch: may its records hold a float or a bool (see _ODD_TYPE_BYTES)?

        Judged on the original bytes, headers excluded.
        """
        starts = hdr.pos[i0:i1]
        lo, hi = int(starts[0]), int(starts[-1] + hdr.length[i1 - 1])
        hits = np.flatnonzero(_ODD_TYPE_BYTES[np.frombuffer(self.data, np.uint8, hi - lo, lo)]) + lo
        odd = np.zeros(i1 - i0, bool)
        if len(hits):
            batch = np.searchsorted(starts, hits, side="right") - 1
            in_records = hits - starts[batch] >= HEADER_SIZE
            odd[batch[in_records]] = True
        return odd

    def _base_arrays(self, idx: np.ndarray, cols: tuple[np.ndarray, ...]) -> list[pa.Array]:
        offsets, base, epoch, time, control = cols
        return [
            pa.array(offsets[idx], _I64),
            pa.array(base[idx], _I64),
            pa.array(epoch[idx], _I32),
            pa.array(time[idx], _I64),
            pa.array(control[idx], _BOOL),
        ]

    def _tail_arrays(self, n: int) -> list[pa.Array]:
        return [pa.repeat(self.source, n), pa.repeat(self.snap_end, n)]

    def _noop_batch(self, idx: np.ndarray, cols: tuple[np.ndarray, ...]) -> pa.RecordBatch:
        n = len(idx)
        arrays = self._base_arrays(idx, cols)
        arrays += [pa.repeat(pa.scalar("NoOpRecord", _STR), n), pa.repeat(pa.scalar("{}"), n)]
        arrays += self._tail_arrays(n)
        arrays.append(pa.repeat(pa.scalar(True), n))
        arrays += [pa.nulls(n, f.type) for f in (*PARTITION_FIELDS, *BROKER_FIELDS)]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)

    def _hot_batch(
        self, spec: _Hot, idx: np.ndarray, cols: tuple[np.ndarray, ...], typed: dict[str, pa.Array]
    ) -> pa.RecordBatch:
        n = len(idx)
        arrays = self._base_arrays(idx, cols)
        arrays += [pa.repeat(pa.scalar(spec.name, _STR), n), typed["fields"]]
        arrays += self._tail_arrays(n)
        arrays.append(pa.repeat(pa.scalar(False), n))
        for f in PARTITION_FIELDS:
            a = typed.get(f.name)
            arrays.append(a if a is not None else pa.nulls(n, f.type))
        arrays += [pa.nulls(n, f.type) for f in BROKER_FIELDS]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)

    # -- per record

    def _slow_batches(self, hdr: _Headers, i0: int, i1: int) -> Iterator[pa.RecordBatch]:
        """Batches [i0, i1) (already verified) record by record: precise errors."""
        data = self.data
        out = _Rows()
        unpacker = msgpack.Unpacker(use_list=False, raw=False, strict_map_key=False)
        for i in range(i0, i1):
            pos, length = int(hdr.pos[i]), int(hdr.length[i])
            h = BatchHeader(*HEADER.unpack_from(data, pos))
            unpacker.feed(data[pos + HEADER_SIZE : pos + length])
            self._decode_batch(unpacker, h, out)
        yield from out.batches()

    def _decode_batch(self, unpacker: Any, h: BatchHeader, out: _Rows) -> None:
        base, upto = h.base_offset, self.upto
        offset = base
        try:
            for obj in unpacker:
                if upto is None or offset <= upto:
                    out.add(
                        obj, offset, base, h.leader_epoch, h.append_time_ms, h.control, self.tail
                    )
                offset += 1
        except RecordDecodeError as e:
            raise e.at(self.path) from None
        except MetadataLogError:
            raise
        except Exception as e:  # msgpack's several exception types for garbage
            raise RecordDecodeError(offset, f"malformed record: {e!r}", self.path) from None
        if offset != h.next_offset:
            raise RecordDecodeError(
                base, f"batch declares {h.record_count} records, holds {offset - base}", self.path
            )

    def _slow(
        self, pos: int, expect: int | None, state: dict[str, Any]
    ) -> Iterator[pa.RecordBatch]:
        """From file position `pos` on, batch by batch with metadata_log's checks."""
        data, path, upto = self.data, self.path, self.upto
        out = _Rows()
        unpacker = msgpack.Unpacker(use_list=False, raw=False, strict_map_key=False)
        try:
            for p, h in iter_headers(data, path, expect, pos):
                if upto is not None and h.base_offset > upto:
                    state["stopped"] = True
                    break
                state["next"] = h.next_offset
                unpacker.feed(data[p + HEADER_SIZE : p + h.length])
                self._decode_batch(unpacker, h, out)
                if out.n >= self.chunk_records:
                    yield from out.batches()
                    out = _Rows()
        except IncompleteBatchError as e:
            # A batch cut short at the very end of the newest segment is the end of
            # data (a live log may be mid-append); anywhere else it is lost data.
            if not self.f.last_segment:
                raise
            self.torn_tail = [e.position, len(data) - e.position]
            state["stopped"] = True  # the gap check does not apply to a torn tail
        yield from out.batches()


def read_file(
    f: LogFile, chunk_records: int = CHUNK_RECORDS, stats: FileStats | None = None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record of one file (see the module docstring).

    With `stats`, also gathers the file's FileStats from the batches it yields.
    """
    if f.fmt == FORMAT_KAFKA:
        from spark_replay.decode_kafka import read_kafka_file

        torn: list[int] = []
        for batch in read_kafka_file(f, chunk_records, torn):
            if stats is not None:
                stats.add(batch)
            yield batch
        if stats is not None:
            stats.finish()
            if torn:
                stats.torn_tail = torn
        return
    with open_log_file(f.path) as fh:
        data = fh.read()
    # Decoding creates millions of small tuples that live until their chunk is
    # converted: the cyclic collector would rescan them again and again (measured:
    # it tripled the cost of unpacking). They hold no cycles, so it is off while
    # this file is read.
    was_enabled = gc.isenabled()
    gc.disable()
    reader = _Reader(f, data, chunk_records)
    try:
        for batch in reader.batches():
            if stats is not None:
                stats.add(batch)
            yield batch
        if stats is not None:
            stats.finish()
            stats.torn_tail = reader.torn_tail
    finally:
        if was_enabled:
            gc.enable()


def file_stats(f: LogFile) -> FileStats:
    return FileStats(path=f.path, source=f.source, snapshot_end_offset=f.snapshot_end_offset)


# ----------------------------------------------------------------------------- Kafka format
# A Kafka-format file: spark_replay.decode_kafka (the vectorised NoOp path, and
# metadata_log.kafka's per-record reader behind it) builds the same rows.
