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
3. frames the records of every other uncompressed data batch with numpy
   (`_HotRows.add_framed`): one Python pass finds where each record starts (a
   record's place depends on the length of the one before; a batch of one record
   needs no pass), then attributes, timestamp and offset deltas, the null key,
   the value's length and the header count of all records are read at once;
4. decodes each distinct record value once per file (`_Values`: a busy log
   repeats its partition changes, an ISR shrinking and expanding back, and a
   PartitionChangeRecord has no epoch to tell them apart), PartitionRecords and
   PartitionChangeRecords straight to their native fields
   (metadata_log.kafka.record_serde.native_values: generated decoders that give
   a tuple, no fields dict; the PartitionChangeRecords met first in a chunk are
   read together by numpy, metadata_log.kafka.columnar);
5. turns the partition records of a chunk into Arrow columns and their fields
   JSON at once, by the native vectorised path's `_hot_columns` (codebooks for
   topic ids and replica lists, Arrow compute for the text); the rest (a few per
   thousand) is built record by record.

A batch the framing refuses (compressed, control, a key, headers, a record of
8 KiB or more, a value that does not decode) is read by metadata_log.kafka's
reader, as before; anything unusual in the file (a torn tail, a bad CRC, a gap,
another magic, a snapshot) takes the per-record path for the whole file, which
raises the precise error (file, offset, position) or reads it as it always did.
The paths are tested equal (tests/spark/test_decode_kafka_fast.py: generated and
real Kafka logs, and any framing by hypothesis).
"""

from __future__ import annotations

import base64
import gc
import itertools
import json
import mmap
import os
import struct
import traceback
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from metadata_log.errors import IncompleteBatchError, MetadataLogError
from metadata_log.kafka.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    KafkaBatchHeader,
    parse_header,
)
from metadata_log.kafka.columnar import PARTITION_CHANGE, partition_changes
from metadata_log.kafka.message import read_uvarint as _uv
from metadata_log.kafka.reader import decoded_records, iter_native_batches, native_records
from metadata_log.kafka.record_serde import (
    NATIVE_FIELDS,
    UnmodelledKafkaRecord,
    decode_value,
    native_values,
    to_native,
)
from metadata_log.open_file import open_log_file
from metadata_log.records import Record, record_fields
from metadata_log.snapshot import SnapshotOrder
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


def read_kafka_file(
    f: LogFile, chunk_records: int, torn: list[int] | None = None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record of a Kafka segment or .checkpoint (read-only),
    with the native path's checks: contiguous offsets from the segment's base
    offset, no gap before the next segment, a torn batch only at the end of the
    last one (its [position, bytes] then go into `torn`)."""
    path = Path(f.path)
    with open_log_file(path) as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            yield from _per_record(f, chunk_records, torn)  # the same checks (a gap)
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            plan = None if f.source == SOURCE_SNAPSHOT else _plan(f, data)
            if plan is None:
                yield from _per_record(f, chunk_records, torn)
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
    counts = headers["record_count"]
    if ((counts < 1) | (headers["last_offset_delta"] != counts - 1)).any():
        return None  # metadata_log.kafka.batch.check_counts refuses it
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
    h = plan.headers
    counts = np.where(plan.noop, 1, h["record_count"].astype(np.int64))[: plan.keep]
    # chunks of whole batches of about chunk_records records
    bounds = np.searchsorted(
        np.cumsum(counts), np.arange(chunk_records, counts.sum(), chunk_records)
    )
    edges = [0, *sorted(set((bounds + 1).tolist()) - {0}), plan.keep]
    u8 = np.frombuffer(data, np.uint8)
    try:
        yield from _chunks(f, data, u8, plan, edges)
    except BaseException as e:
        # The file's map can only be closed once no array holds it: the frames of
        # the traceback (their locals hold `u8`) let go of it, the error stays.
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        del u8
    stopped = plan.keep < len(plan.positions)
    if f.next_base_offset is not None and plan.next_offset != f.next_base_offset and not stopped:
        raise MetadataLogError(
            f"gap in the log: {f.path} ends at offset {plan.next_offset} but the next "
            f"segment starts at offset {f.next_base_offset}"
        )


def _chunks(
    f: LogFile, data: Any, u8: np.ndarray, plan: _Plan, edges: list[int]
) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of each chunk of whole batches [edges[k], edges[k + 1])."""
    name, upto = f.path, f.upto_offset
    tail = (f.source, f.snapshot_end_offset)
    h = plan.headers
    positions = plan.positions.tolist()
    books = {kind: _Codebook(kind) for kind in ("str", "list", "opt_list")}
    values = _Values()
    for i0, i1 in itertools.pairwise(edges):
        if i1 <= i0:
            continue
        idx = np.arange(i0, i1)
        noops = idx[plan.noop[i0:i1]]
        if len(noops):
            yield _noop_batch(h, noops, f)
        out = _Rows()
        hot = _HotRows()
        rest = idx[~plan.noop[i0:i1]]
        plain = rest[(h["attributes"][rest] & (ATTR_CONTROL | ATTR_CODEC_MASK)) == 0]
        if len(plain):
            done = hot.add_framed(out, data, u8, plan, plain, values, upto, tail)
            rest = np.setdiff1d(rest, plain[done], assume_unique=True)
        for i, *batch in zip(rest.tolist(), *(h[k][rest].tolist() for k in _PLAIN), strict=True):
            pos = positions[i]
            if hot.add_plain(out, data, pos, batch, values, upto, tail):
                continue
            hdr = parse_header(data, pos, name)
            if hdr.control:
                _add_rows(out, hdr, native_records(data, hdr, name), upto, tail)
            else:
                hot.add(out, hdr, decoded_records(data, hdr, name), upto, tail)
        yield from hot.batches(out, books, f)
        yield from out.batches()


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

    __slots__ = ("rows", "blocks")

    def __init__(self) -> None:
        # type id -> (offset, base, epoch, timestamp) per row, wire-like tuples, records
        self.rows: dict[int, tuple[list[tuple[int, ...]], list[tuple[Any, ...]], list[Any]]] = {
            spec.type_id: ([], [], []) for spec in _HOT_BY_NAME.values()
        }
        # type id -> add_framed's (offset, base, epoch, timestamp) rows as (n, 4)
        # arrays, which come before the rows' tuples (add_framed runs first)
        self.blocks: dict[int, list[np.ndarray]] = {
            spec.type_id: [] for spec in _HOT_BY_NAME.values()
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

    def add_framed(
        self,
        out: _Rows,
        data: Any,
        u8: np.ndarray,
        plan: _Plan,
        idx: np.ndarray,
        values: _Values,
        upto: int | None,
        tail: tuple[Any, ...],
    ) -> np.ndarray:
        """The records of the uncompressed data batches `idx`, framed by numpy:
        which batches were added (the others are left to add_plain and the
        reference reader, whole).

        A Python pass finds where each record starts (its length varint: a
        record's place depends on the one before); numpy then reads every
        record's framing at once from `u8` (the file's bytes): attributes,
        timestamp and offset deltas (varints of up to 3 bytes), a null key, the
        value's length, no headers, lengths that end exactly at the record's end.
        The values are sliced and decoded once per distinct value (`_Values`).
        A batch with anything else in any record is not added."""
        h = plan.headers[idx]
        first = plan.positions[idx] + HEADER_SIZE
        last = plan.positions[idx] + LOG_OVERHEAD + h["batch_length"].astype(np.int64)
        ok = np.ones(len(idx), bool)
        # A batch of one record (most of them): the record fills the batch, its
        # length varint (1 or 2 bytes) is read by numpy.
        one = np.flatnonzero(h["record_count"] == 1)
        b0 = u8[np.minimum(first[one], len(u8) - 1)].astype(np.int64)
        b1 = u8[np.minimum(first[one] + 1, len(u8) - 1)].astype(np.int64)
        two = b0 >= 0x80
        n = np.where(two, (b0 & 0x7F) | (b1 << 7), b0)
        q1 = first[one] + 1 + two
        framed = ((~two | (b1 < 0x80)) & ((n & 1) == 0)) & (q1 + (n >> 1) == last[one])
        ok[one[~framed]] = False
        one = one[framed]
        # Batches of several records: where each starts depends on the one before.
        many = np.flatnonzero(h["record_count"] != 1)
        starts = first[many].tolist()
        ends = last[many].tolist()
        counts = h["record_count"][many].tolist()
        rec_batch: list[int] = []
        rec_index: list[int] = []  # each record's place in its batch: its offset delta
        rec_start: list[int] = []  # where each record starts, after its length
        rec_end: list[int] = []
        add_start, add_end = rec_start.append, rec_end.append
        for j, p, end, count in zip(many.tolist(), starts, ends, counts, strict=True):
            mark = len(rec_start)
            for _ in range(count):
                if p + 1 >= end:
                    break  # lengths that run past the batch (the reference says so)
                n = data[p]
                if n < 0x80:
                    p += 1
                elif data[p + 1] < 0x80:
                    n = (n & 0x7F) | (data[p + 1] << 7)
                    p += 2
                else:
                    break  # a record of 8 KiB or more: add_plain reads it
                if n & 1:
                    break  # a negative length
                add_start(p)
                p += n >> 1
                add_end(p)
            if len(rec_start) - mark != count or p != end:
                ok[j] = False
                del rec_start[mark:], rec_end[mark:]
                continue
            rec_batch += [j] * count
            rec_index += range(count)
        q = np.concatenate([q1[framed], np.asarray(rec_start, np.int64)])
        if not len(q):
            return ok
        r_end = np.concatenate([last[one], np.asarray(rec_end, np.int64)])
        rb = np.concatenate([one, np.asarray(rec_batch, np.int64)])
        place = np.concatenate([np.zeros(len(one), np.int64), np.asarray(rec_index, np.int64)])
        # the first _FRAME bytes of each record (past the file's end: zeros, never
        # used, as every byte used is checked to lie before the record's end)
        g = u8[np.minimum(q[:, None] + np.arange(_FRAME), len(u8) - 1)].astype(np.int64)
        rows = np.arange(len(q))
        good = np.ones(len(q), bool)
        col = np.ones(len(q), np.int64)  # after the attributes byte
        ts_delta, col = _np_varint(g, rows, col, good)
        delta, col = _np_varint(g, rows, col, good)
        good &= delta == place  # offset deltas 0, 1, ... (the reference names any other)
        good &= g[rows, col] == 1  # a null key (-1, zig-zag 1)
        nv, col = _np_varint(g, rows, col + 1, good, zigzag=False)
        good &= (nv & 1) == 0  # not a null value
        v_start = q + col
        v_end = v_start + (nv >> 1)
        good &= v_end + 1 == r_end
        good &= u8[np.minimum(v_end, len(u8) - 1)] == 0  # no headers
        ok[rb[~good]] = False
        take = np.flatnonzero(ok[rb])
        get = values.known.get
        vals = [
            data[a:b] for a, b in zip(v_start[take].tolist(), v_end[take].tolist(), strict=True)
        ]
        entries = list(map(get, vals))
        if None in entries:  # values met for the first time in this file
            values.decode_many([v for v, e in zip(vals, entries, strict=True) if e is None])
            entries = [get(v) if e is None else e for v, e in zip(vals, entries, strict=True)]
            base = h["base_offset"].astype(np.int64)
            failed = []
            for k in [k for k, e in enumerate(entries) if e is None]:
                value = vals[k]
                e = get(value)  # met earlier in this chunk
                if e is None:
                    r = take[k]
                    try:
                        e = values.decode(value, int(base[rb[r]] + delta[r]))
                    except (ValueError, MetadataLogError):
                        failed.append(rb[r])
                entries[k] = e
            if failed:
                ok[failed] = False
                kept = ok[rb[take]]
                entries = list(itertools.compress(entries, kept.tolist()))
                take = take[kept]
        b = rb[take]
        hb = h[b]
        bases = hb["base_offset"].astype(np.int64)
        offsets = bases + delta[take]
        log_append = (hb["attributes"] & ATTR_LOG_APPEND_TIME) != 0
        ts = np.where(
            log_append, hb["max_timestamp"], hb["base_timestamp"] + ts_delta[take]
        ).astype(np.int64)
        epochs = hb["leader_epoch"].astype(np.int64)
        tids = np.fromiter(map(_FIRST, entries), np.int64, len(entries))
        keep = np.ones(len(take), bool) if upto is None else offsets <= upto
        for tid in np.unique(tids[keep]).tolist():
            sel = keep & (tids == tid)
            picked = list(itertools.compress(entries, sel.tolist()))
            if tid:  # a hot type: its rows go to columns at once
                at, wires, recs = self.rows[tid]
                assert not at, "add_framed comes first"
                self.blocks[tid].append(
                    np.stack([offsets[sel], bases[sel], epochs[sel], ts[sel]], axis=1)
                )
                wires.extend(map(_SECOND, picked))
                recs.extend(map(_THIRD, picked))
                continue
            o, bs = offsets[sel].tolist(), bases[sel].tolist()
            e, t = epochs[sel].tolist(), ts[sel].tolist()
            for offset, base, epoch, t1, entry in zip(o, bs, e, t, picked, strict=True):
                _add_row(out, offset, base, epoch, t1, False, entry[3], tail)
        return ok

    def add_plain(
        self,
        out: _Rows,
        data: Any,
        pos: int,
        batch: list[int],
        values: _Values,
        upto: int | None,
        tail: tuple[Any, ...],
    ) -> bool:
        """The records of an uncompressed data batch (its header verified by the
        plan, `batch` its _PLAIN fields), straight from the file's bytes: no header
        or record objects, each distinct record value decoded once. False, with
        nothing added, when the batch is compressed, a control batch or anything
        is unusual: the caller then reads it with the reference reader, which
        decodes it or names the problem."""
        length, attrs, count, base, epoch, base_ts, max_ts = batch
        if attrs & (ATTR_CONTROL | ATTR_CODEC_MASK):
            return False
        walked = values.walk(data, pos + HEADER_SIZE, pos + LOG_OVERHEAD + length, count, base)
        if walked is None:
            return False
        log_append = attrs & ATTR_LOG_APPEND_TIME
        rows = self.rows
        for delta, ts_delta, (tid, wire, rec, native) in walked:
            offset = base + delta
            if upto is not None and offset > upto:
                continue
            ts = max_ts if log_append else base_ts + ts_delta
            if native is None:
                at, wires, recs = rows[tid]
                at.append((offset, base, epoch, ts))
                wires.append(wire)
                recs.append(rec)
            else:
                _add_row(out, offset, base, epoch, ts, False, native, tail)
        return True

    def batches(
        self, out: _Rows, books: dict[str, _Codebook], f: LogFile
    ) -> Iterator[pa.RecordBatch]:
        for spec in _HOT_BY_NAME.values():
            at, wires, recs = self.rows[spec.type_id]
            if not wires:
                continue
            cols = np.concatenate(
                [*self.blocks[spec.type_id], np.array(at, np.int64).reshape(-1, 4)]
            )
            # No type checks: Kafka's decoders give ints (struct) and tuples of ints.
            typed = _hot_columns(spec, wires, books, check_types=False)
            if typed is None:  # something unusual: these rows record by record
                tail = (f.source, f.snapshot_end_offset)
                for (offset, base, epoch, ts), rec in zip(cols.tolist(), recs, strict=True):
                    if type(rec) is bytes:  # the value, decoded by native_values
                        rec = decode_value(None, rec, offset, False)
                    _add_row(out, offset, base, epoch, ts, False, to_native(*rec), tail)
                continue
            yield _hot_batch(spec, cols, typed, f)


_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
_PCR_KEY = bytes([PARTITION_CHANGE])  # a PartitionChangeRecord value's api key byte
# The bytes of a record's framing read by numpy: attributes (1), timestamp and
# offset deltas (up to 3 each), key length (1), value length (up to 3).
_FRAME = 11


def _np_varint(
    g: np.ndarray, rows: np.ndarray, col: np.ndarray, good: np.ndarray, zigzag: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The varint at column `col` of each row of `g` (up to 3 bytes; a longer one
    clears `good`), zig-zag decoded unless told; and the column after it."""
    b0, b1, b2 = (
        g[rows, col],
        g[rows, np.minimum(col + 1, _FRAME - 1)],
        g[rows, np.minimum(col + 2, _FRAME - 1)],
    )
    more0 = b0 >= 0x80
    more1 = more0 & (b1 >= 0x80)
    good &= ~(more1 & (b2 >= 0x80)) & (col + 1 + more0 + more1 <= _FRAME)
    n = (b0 & 0x7F) | np.where(more0, (b1 & 0x7F) << 7, 0) | np.where(more1, b2 << 14, 0)
    if zigzag:
        n = (n >> 1) ^ -(n & 1)
    return n, col + 1 + more0 + more1


# The header fields add_plain needs, in its order.
_PLAIN = (
    "batch_length",
    "attributes",
    "record_count",
    "base_offset",
    "leader_epoch",
    "base_timestamp",
    "max_timestamp",
)
# Decoded values kept per file: a busy log repeats its partition changes (an ISR
# shrinks and expands back; a PartitionChangeRecord has no epoch to tell them
# apart), so most values are met before. The bound keeps a file's memory flat.
_MAX_VALUES = 1 << 16
# A decoded value: (hot type id, native wire tuple, (name, api key, version,
# fields) or the value's bytes) for the hot types, (0, None, None, native record)
# for the rest.
_Entry = tuple[int, Any, Any, Any]


class _Values:
    """Walks an uncompressed batch's records over the file's bytes, and decodes
    each record value once per file (the bytes are the key: decoding is a pure
    function of them, metadata_log.kafka.record_serde.decode_value)."""

    __slots__ = ("known",)

    def __init__(self) -> None:
        self.known: dict[bytes, _Entry] = {}

    def walk(
        self, data: Any, p: int, end: int, count: int, base: int
    ) -> list[tuple[int, int, _Entry]] | None:
        """(offset delta, timestamp delta, decoded value) of each of the `count`
        records in data[p:end]; None unless every record is a plain data record
        (null key, no headers, offset deltas 0, 1, ..., lengths that add up to
        exactly `end`) whose value decodes: the reference reader then takes the
        batch."""
        out = []
        get = self.known.get
        # The one- and two-byte varints are read inline, _uv only past them: this loop
        # runs once per record, and a call per varint would be paid four times a record.
        try:
            for i in range(count):
                # record length, attributes, timestamp delta, offset delta (zig-zag)
                n = data[p]
                if n < 0x80:
                    p += 1
                elif data[p + 1] < 0x80:  # 64 bytes or more: a two-byte length
                    n = (n & 0x7F) | (data[p + 1] << 7)
                    p += 2
                else:
                    n, p = _uv(data, p)
                rec_end = p + ((n >> 1) ^ -(n & 1))
                p += 1
                n = data[p]
                if n < 0x80:
                    p += 1
                elif data[p + 1] < 0x80:
                    n = (n & 0x7F) | (data[p + 1] << 7)
                    p += 2
                else:
                    n, p = _uv(data, p)
                ts_delta = (n >> 1) ^ -(n & 1)
                n = data[p]
                if n < 0x80:
                    p += 1
                elif data[p + 1] < 0x80:
                    n = (n & 0x7F) | (data[p + 1] << 7)
                    p += 2
                else:
                    n, p = _uv(data, p)
                delta = (n >> 1) ^ -(n & 1)
                if delta != i or data[p] != 1:  # a delta out of place; a key (-1 is null)
                    return None
                n = data[p + 1]
                if n < 0x80:
                    p += 2
                elif data[p + 2] < 0x80:
                    n = (n & 0x7F) | (data[p + 2] << 7)
                    p += 3
                else:
                    n, p = _uv(data, p + 1)
                v_end = p + (n >> 1)
                # a null value, a length that does not add up, or headers
                if n & 1 or v_end + 1 != rec_end or data[v_end]:
                    return None
                value = data[p:v_end]
                e = get(value)
                if e is None:
                    e = self.decode(value, base + delta)
                out.append((delta, ts_delta, e))
                p = rec_end
        except (IndexError, ValueError, MetadataLogError):
            return None  # ValueError: a varint too long, a body not of its schema
        return out if p == end else None

    def decode_many(self, fresh: list[bytes]) -> None:
        """Keep the PartitionChangeRecords among values met for the first time, read
        together (metadata_log.kafka.columnar); decode() takes the rest."""
        pcr = list({v: None for v in fresh if v[1:2] == _PCR_KEY})
        if not pcr:
            return
        if len(self.known) + len(pcr) > _MAX_VALUES:
            self.known.clear()
        tid = _HOT_BY_NAME["PartitionChangeRecord"].type_id
        known = self.known
        for value, row in zip(pcr, partition_changes(pcr), strict=True):
            if row is not None:
                known[value] = (tid, (0, 0, *row), value, None)

    def decode(self, value: bytes, offset: int) -> _Entry:
        """Decode a value met for the first time (errors name `offset`) and keep it:
        a partition record's native fields straight from its bytes (native_values),
        anything else through decode_value."""
        hot = native_values(value)
        e: _Entry
        if hot is not None:
            e = (_HOT_BY_NAME[hot[0]].type_id, (0, 0, *hot[1]), value, None)
        else:
            name, api_key, version, fields = decode_value(None, value, offset, False)
            spec = _HOT_BY_NAME.get(name)
            if spec is None:
                e = (0, None, None, to_native(name, api_key, version, fields))
            else:
                wire = (0, 0, *NATIVE_FIELDS[name](fields))
                e = (spec.type_id, wire, (name, api_key, version, fields), None)
        if len(self.known) >= _MAX_VALUES:
            self.known.clear()
        self.known[value] = e
        return e


def _hot_batch(
    spec: _Hot, at: np.ndarray, typed: dict[str, pa.Array], f: LogFile
) -> pa.RecordBatch:
    """The rows of hot records: `at` their (offset, base, epoch, timestamp) rows."""
    n = len(at)
    cols = at.T
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


def _until_torn(
    path: Path, allow_torn_tail: bool, torn: list[int] | None
) -> Iterator[tuple[KafkaBatchHeader, list[Any]]]:
    """iter_native_batches, noting a torn tail's [position, bytes] in `torn`."""
    batches = iter_native_batches(path)
    try:
        yield from batches
    except IncompleteBatchError as e:
        if not allow_torn_tail:
            raise
        if torn is not None:
            torn[:] = [e.position, path.stat().st_size - e.position]
    finally:
        batches.close()


def _per_record(
    f: LogFile, chunk_records: int, torn: list[int] | None = None
) -> Iterator[pa.RecordBatch]:
    """Every batch through metadata_log.kafka's reader, record by record: the
    reference, and the path that names the file, offset and position of any error."""
    snap = f.source == SOURCE_SNAPSHOT
    upto = None if snap else f.upto_offset
    expect: int | None = None if snap else f.base_offset
    tail = (f.source, f.snapshot_end_offset)
    out = _Rows()
    stopped = False
    # a snapshot's records in their order; its missing footer is history's to say
    order = SnapshotOrder(f.path) if snap else None
    batches = _until_torn(Path(f.path), f.last_segment and not snap, torn)
    for h, natives in batches:
        if order is not None:
            for offset, _ts, rec in natives:
                name = rec.name if isinstance(rec, UnmodelledKafkaRecord) else type(rec).__name__
                order.see(offset, name, h.control)
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
