"""Decode one Kafka-format segment or snapshot into the same Arrow rows as a native one.

A Kafka file (record batch v2, metadata_log.kafka) is read read-only and every
record becomes the row the native reader would build for the native record it
means (`spark_replay.decode`'s schema), so the same replay computes the same
tables from either format.

Why there are two paths. A busy KRaft log is mostly NoOpRecords, each alone in
its own batch (the active controller writes one every 500 ms). Read record by
record, each costs a header parse, a CRC, a record decode and a row tuple in
Python. The vectorised path therefore:

1. walks the batch boundaries in one tight loop (a batch's position depends on
   the previous batch's length), then reads every header field with numpy at
   once, checks magic and contiguous offsets for all batches, and the CRC-32C of
   each batch (one C call each);
2. recognises the batches that hold exactly one NoOpRecord v0 (the 11 record
   bytes KRaft writes for it, compared as one numpy array) and turns them into
   Arrow columns without a Python object per record;
3. decodes every other batch with metadata_log.kafka's reader; of its records,
   PartitionChangeRecords and PartitionRecords (nearly all the rest of a real
   log) are gathered per chunk and turned into Arrow columns and their fields
   JSON at once, by the native vectorised path's `_hot_columns` (codebooks for
   topic ids and replica lists, Arrow compute for the text); the rest (a few per
   thousand) is built record by record, as before.

Anything unusual (a torn tail, a bad CRC, a gap, another magic, a snapshot)
takes the per-record path for the whole file, which raises the precise error
(file, offset, position) or reads it as it always did. The two paths are tested
equal (tests/spark/test_decode_kafka_fast.py).
"""

from __future__ import annotations

import base64
import gc
import itertools
import json
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from metadata_log.errors import MetadataLogError
from metadata_log.kafka.batch import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC, parse_header
from metadata_log.kafka.reader import decoded_records, iter_native_batches, native_records
from metadata_log.kafka.record_serde import NATIVE_FIELDS, UnmodelledKafkaRecord, to_native
from metadata_log.records import Record, record_fields
from spark_replay.decode import (
    _BOOL,
    _EXTRACT,
    _I32,
    _I64,
    _KIND,
    _KIND_OTHER,
    _PCR,
    _PR,
    _STR,
    ARROW_SCHEMA,
    BROKER_FIELDS,
    PARTITION_FIELDS,
    SOURCE_SNAPSHOT,
    LogFile,
    _Codebook,
    _dumps,
    _Hot,
    _hot_columns,
    _Rows,
)


def _json_default(v: Any) -> Any:
    # Kafka's `bytes` fields (SCRAM salts, delegation token hmacs): base64, as dump-log.
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


_unmodelled_dumps = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, default=_json_default
).encode

# Every header field of a batch, big-endian and packed: numpy reads them all at once.
_HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("record_count", ">i4"),
    ]
)
assert _HEADER_DTYPE.itemsize == HEADER_SIZE

# One NoOpRecord v0 alone in a batch, as KRaft writes it: record length 10 (zig-zag
# 20), attributes 0, timestamp delta 0, offset delta 0, null key (-1: 1), value
# length 4 (8), the value (frame version 1, api key 20, version 0, no tagged
# fields), no headers.
NOOP_RECORD = bytes([20, 0, 0, 0, 1, 8, 1, 20, 0, 0, 0])
_NOOP_LENGTH = HEADER_SIZE - LOG_OVERHEAD + len(NOOP_RECORD)  # batch_length: 60
_SPAN = HEADER_SIZE + len(NOOP_RECORD)  # the bytes compared per batch
_NOOP = np.frombuffer(NOOP_RECORD, np.uint8)
_LEN = struct.Struct(">i").unpack_from
# The hot record types by Kafka's name, each as a native record of the latest
# version (every field; metadata_log.kafka.record_serde.NATIVE_FIELDS gives them).
_HOT_BY_NAME = {"PartitionChangeRecord": _PCR, "PartitionRecord": _PR}
assert set(_HOT_BY_NAME) <= set(NATIVE_FIELDS)


def read_kafka_file(f: LogFile, chunk_records: int) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record of a Kafka segment or .checkpoint (read-only),
    with the native path's checks: contiguous offsets from the segment's base
    offset, no gap before the next segment, a torn batch only at the end of the
    last one."""
    path = Path(f.path)
    with path.open("rb") as fh:
        if path.stat().st_size == 0:
            yield from _per_record(f, chunk_records)  # the same checks (a gap) as before
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            plan = None if f.source == SOURCE_SNAPSHOT else _plan(f, data)
            if plan is None:
                yield from _per_record(f, chunk_records)
                return
            # millions of small tuples that hold no cycles: see decode.read_file
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                yield from _vectorised(f, data, plan, chunk_records)
            finally:
                if was_enabled:
                    gc.enable()


# ----------------------------------------------------------------------------- vectorised


class _Plan:
    """The verified batches of one segment: positions, headers, which are NoOps."""

    __slots__ = ("positions", "headers", "noop", "keep", "next_offset")

    def __init__(
        self,
        positions: np.ndarray,
        headers: np.ndarray,
        noop: np.ndarray,
        keep: int,
        next_offset: int,
    ) -> None:
        self.positions = positions
        self.headers = headers
        self.noop = noop
        self.keep = keep  # batches [0, keep) start at or below upto_offset
        self.next_offset = next_offset  # the offset after the file's last batch


def _plan(f: LogFile, data: Any) -> _Plan | None:
    """Batch boundaries, headers and NoOp batches of a whole segment, every batch
    verified; None when anything is unusual (the per-record path then decides)."""
    n = len(data)
    positions: list[int] = []
    pos = 0
    while n - pos >= HEADER_SIZE:
        length = _LEN(data, pos + 8)[0]
        end = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > n:
            return None
        positions.append(pos)
        pos = end
    if pos != n or not positions:
        return None  # a torn tail (or junk): the per-record path's rules apply
    spans = [data[p : p + _SPAN] for p in positions]
    if len(spans[-1]) < _SPAN:
        spans[-1] = spans[-1].ljust(_SPAN, b"\0")  # the file's last batch is shorter
    raw = np.frombuffer(b"".join(spans), np.uint8).reshape(len(positions), _SPAN)
    headers = raw[:, :HEADER_SIZE].copy().view(_HEADER_DTYPE).ravel()
    if (headers["magic"] != MAGIC).any():
        return None
    starts = np.asarray(positions, np.int64)
    ends = starts + LOG_OVERHEAD + headers["batch_length"].astype(np.int64)
    view = memoryview(data)
    crc = crc32c.crc32c
    try:
        ranges = zip((starts + CRC_START).tolist(), ends.tolist(), strict=True)
        crcs = [crc(view[s:e]) for s, e in ranges]
    finally:
        view.release()
    if (np.asarray(crcs, np.uint32) != headers["crc"]).any():
        return None
    base = headers["base_offset"].astype(np.int64)
    following = base + headers["last_offset_delta"].astype(np.int64) + 1
    if base[0] != f.base_offset or (base[1:] != following[:-1]).any():
        return None
    noop = (
        (headers["batch_length"] == _NOOP_LENGTH)
        & (headers["attributes"] == 0)
        & (headers["record_count"] == 1)
        & (headers["last_offset_delta"] == 0)
        & (raw[:, HEADER_SIZE:] == _NOOP).all(axis=1)
    )
    keep = len(positions)
    if f.upto_offset is not None:
        keep = int(np.searchsorted(base, f.upto_offset, side="right"))
    return _Plan(starts, headers, noop, keep, int(following[-1]))


def _vectorised(f: LogFile, data: Any, plan: _Plan, chunk_records: int) -> Iterator[pa.RecordBatch]:
    name, upto = f.path, f.upto_offset
    tail = (f.source, f.snapshot_end_offset)
    h = plan.headers
    counts = np.where(plan.noop, 1, h["record_count"].astype(np.int64))[: plan.keep]
    # chunks of whole batches of about chunk_records records
    bounds = np.searchsorted(
        np.cumsum(counts), np.arange(chunk_records, counts.sum(), chunk_records)
    )
    edges = [0, *sorted(set((bounds + 1).tolist()) - {0}), plan.keep]
    positions = plan.positions.tolist()
    books = {kind: _Codebook(kind) for kind in ("str", "list", "opt_list")}
    for i0, i1 in itertools.pairwise(edges):
        if i1 <= i0:
            continue
        idx = np.arange(i0, i1)
        noops = idx[plan.noop[i0:i1]]
        if len(noops):
            yield _noop_batch(h, noops, f)
        out = _Rows()
        hot = _HotRows()
        for i in idx[~plan.noop[i0:i1]].tolist():
            hdr = parse_header(data, positions[i], name)
            if hdr.control:
                _add_rows(out, hdr, native_records(data, hdr, name), upto, tail)
            else:
                hot.add(out, hdr, decoded_records(data, hdr, name), upto, tail)
        yield from hot.batches(out, books, f)
        yield from out.batches()
    stopped = plan.keep < len(positions)
    if f.next_base_offset is not None and plan.next_offset != f.next_base_offset and not stopped:
        raise MetadataLogError(
            f"gap in the log: {f.path} ends at offset {plan.next_offset} but the next "
            f"segment starts at offset {f.next_base_offset}"
        )


def _noop_batch(h: np.ndarray, idx: np.ndarray, f: LogFile) -> pa.RecordBatch:
    """The rows of NoOp batches `idx` (one record each, at the batch's base offset
    and timestamp), as the per-record path builds them."""
    n = len(idx)
    offsets = h["base_offset"][idx].astype(np.int64)
    arrays = [
        pa.array(offsets, _I64),
        pa.array(offsets, _I64),
        pa.array(h["leader_epoch"][idx].astype(np.int32), _I32),
        pa.array(h["base_timestamp"][idx].astype(np.int64), _I64),
        pa.repeat(pa.scalar(False, _BOOL), n),
        pa.repeat(pa.scalar("NoOpRecord", _STR), n),
        pa.repeat(pa.scalar("{}", _STR), n),
        pa.repeat(pa.scalar(f.source, _STR), n),
        pa.repeat(pa.scalar(f.snapshot_end_offset, _I64), n),
        pa.repeat(pa.scalar(True, _BOOL), n),
    ]
    arrays += [pa.nulls(n, fl.type) for fl in (*PARTITION_FIELDS, *BROKER_FIELDS)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class _HotRows:
    """PartitionChangeRecords and PartitionRecords of data batches, gathered to be
    turned into Arrow columns at once (the native vectorised path's `_hot_columns`:
    codebooks for topic ids and replica lists, the fields JSON by Arrow compute);
    every other record goes to the per-record rows."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        # type id -> (offset, base, epoch, timestamp) per row, wire-like tuples, records
        self.rows: dict[int, tuple[list[tuple[int, ...]], list[tuple[Any, ...]], list[Any]]] = {
            spec.type_id: ([], [], []) for spec in _HOT_BY_NAME.values()
        }

    def add(
        self,
        out: _Rows,
        h: Any,
        decoded: list[tuple[int, int, str, int, int, dict[str, Any]]],
        upto: int | None,
        tail: tuple[Any, ...],
    ) -> None:
        """A data batch's records (metadata_log.kafka's decoded view: a hot record's
        native fields are taken from it without building the record)."""
        base, epoch = h.base_offset, h.leader_epoch
        for offset, ts, name, api_key, version, fields in decoded:
            if upto is not None and offset > upto:
                continue
            spec = _HOT_BY_NAME.get(name)
            if spec is None:
                rec = to_native(name, api_key, version, fields)
                _add_row(out, offset, base, epoch, ts, False, rec, tail)
            else:
                at, wires, recs = self.rows[spec.type_id]
                at.append((offset, base, epoch, ts))
                wires.append((0, 0, *NATIVE_FIELDS[name](fields)))
                recs.append((name, api_key, version, fields))

    def batches(
        self, out: _Rows, books: dict[str, _Codebook], f: LogFile
    ) -> Iterator[pa.RecordBatch]:
        for spec in _HOT_BY_NAME.values():
            at, wires, recs = self.rows[spec.type_id]
            if not at:
                continue
            typed = _hot_columns(spec, wires, books, check_types=True)
            if typed is None:  # something unusual: these rows record by record
                tail = (f.source, f.snapshot_end_offset)
                for (offset, base, epoch, ts), rec in zip(at, recs, strict=True):
                    _add_row(out, offset, base, epoch, ts, False, to_native(*rec), tail)
                continue
            yield _hot_batch(spec, at, typed, f)


def _hot_batch(
    spec: _Hot, at: list[tuple[int, ...]], typed: dict[str, pa.Array], f: LogFile
) -> pa.RecordBatch:
    n = len(at)
    cols = np.array(at, np.int64).T
    arrays = [
        pa.array(cols[0], _I64),
        pa.array(cols[1], _I64),
        pa.array(cols[2].astype(np.int32), _I32),
        pa.array(cols[3], _I64),
        pa.repeat(pa.scalar(False, _BOOL), n),
        pa.repeat(pa.scalar(spec.name, _STR), n),
        typed["fields"],
        pa.repeat(pa.scalar(f.source, _STR), n),
        pa.repeat(pa.scalar(f.snapshot_end_offset, _I64), n),
        pa.repeat(pa.scalar(False, _BOOL), n),
    ]
    for fl in PARTITION_FIELDS:
        a = typed.get(fl.name)
        arrays.append(a if a is not None else pa.nulls(n, fl.type))
    arrays += [pa.nulls(n, fl.type) for fl in BROKER_FIELDS]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


# ----------------------------------------------------------------------------- per record


def _add_rows(
    out: _Rows,
    h: Any,
    natives: list[tuple[int, int, Record | UnmodelledKafkaRecord]],
    upto: int | None,
    tail: tuple[Any, ...],
) -> None:
    """One batch's rows: the native record's name, its fields as JSON and the typed
    columns; an UnmodelledKafkaRecord under Kafka's name with all its fields."""
    control, base, epoch = h.control, h.base_offset, h.leader_epoch
    for offset, ts, rec in natives:
        if upto is None or offset <= upto:
            _add_row(out, offset, base, epoch, ts, control, rec, tail)


def _add_row(
    out: _Rows,
    offset: int,
    base: int,
    epoch: int,
    ts: int,
    control: bool,
    rec: Record | UnmodelledKafkaRecord,
    tail: tuple[Any, ...],
) -> None:
    rows = out.rows
    if isinstance(rec, UnmodelledKafkaRecord):
        text = _unmodelled_dumps(rec.fields)
        rows[_KIND_OTHER].append((offset, base, epoch, ts, control, rec.name, text, *tail))
    else:
        tid = type(rec).TYPE
        kind = _KIND_OTHER if control else _KIND.get(tid, _KIND_OTHER)
        cols = _EXTRACT[kind](tid, rec) if kind else ()
        row = (offset, base, epoch, ts, control, type(rec).__name__)
        rows[kind].append((*row, _dumps(record_fields(rec)), *tail, *cols))
    out.n += 1


def _per_record(f: LogFile, chunk_records: int) -> Iterator[pa.RecordBatch]:
    """Every batch through metadata_log.kafka's reader, record by record: the
    reference, and the path that names the file, offset and position of any error."""
    snap = f.source == SOURCE_SNAPSHOT
    upto = None if snap else f.upto_offset
    expect: int | None = None if snap else f.base_offset
    tail = (f.source, f.snapshot_end_offset)
    out = _Rows()
    stopped = False
    batches = iter_native_batches(Path(f.path), allow_torn_tail=f.last_segment and not snap)
    for h, natives in batches:
        if upto is not None and h.base_offset > upto:
            stopped = True
            break
        if expect is not None and h.base_offset != expect:
            raise MetadataLogError(
                f"{f.path}: gap in the log at file position {h.position}: batch at offset "
                f"{h.base_offset}, expected offset {expect}"
            )
        if expect is not None:
            expect = h.base_offset + h.last_offset_delta + 1
        _add_rows(out, h, natives, upto, tail)
        if out.n >= chunk_records:
            yield from out.batches()
            out = _Rows()
    batches.close()  # unmaps the file now, also when pruning stopped early
    yield from out.batches()
    gap = f.next_base_offset is not None and expect != f.next_base_offset
    if gap and not snap and not stopped:
        raise MetadataLogError(
            f"gap in the log: {f.path} ends at offset {expect} but the next "
            f"segment starts at offset {f.next_base_offset}"
        )
