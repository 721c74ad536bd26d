"""Turn a controller result's records into batch payloads, atomically.

A result that fits in one batch (8 MiB by default) is one batch: Raft commits a
batch all or nothing. A larger one becomes a metadata transaction (KIP-868):
BeginTransactionRecord, the records over as many batches as needed, then
EndTransactionRecord; replay applies it only at the end record, and a leader
that fails mid-way leaves a transaction that the next leader aborts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgpack

from metadata_log.batch import HEADER_SIZE
from metadata_log.records import (
    _CODEC_BY_CLASS,
    FIELD_COUNTS,
    SUPPORTED_VERSION,
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    MetadataRecord,
    encode_record,
    record_version,
)

DEFAULT_MAX_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A records section ready for metadata_log.batch.encode_payload."""

    payload: bytes
    record_count: int


@dataclass(frozen=True, slots=True)
class BatchPlan:
    batches: list[EncodedBatch]
    records: list[MetadataRecord]  # exactly what the batches hold, markers included


class RecordEncoder:
    """Encodes records at the versions `metadata_version` (the image's level) allows
    (the highest this code writes when None), exactly as `encode_record`: one
    encoder per record class, built once (a fence of a big broker is a million
    records of one class). A class whose version carries every field, none
    nested, is packed from one attrgetter call: a third of encode_record's time.
    A shell encodes a large result a slice at a time with it."""

    def __init__(self, metadata_version: int | None = None) -> None:
        self.metadata_version = metadata_version
        self._encoders: dict[type, Callable[[Any], bytes]] = {}

    def _encoder(self, cls: type[MetadataRecord]) -> Callable[[Any], bytes]:
        mv = self.metadata_version
        v = SUPPORTED_VERSION[cls] if mv is None else record_version(cls, mv)
        codec = _CODEC_BY_CLASS.get(cls)
        if (
            codec is None
            or codec.nested
            or FIELD_COUNTS[cls][v] != len(codec.names)
            or len(codec.names) < 2  # attrgetter of one name is no tuple
        ):
            return lambda r: encode_record(r, v)
        get = attrgetter(*codec.names)
        type_id = cls.TYPE
        packb = msgpack.Packer(use_bin_type=True).pack
        return lambda r: packb([type_id, v, *get(r)])

    def encode(self, records: Iterable[MetadataRecord]) -> list[bytes]:
        encoders = self._encoders
        out = []
        for r in records:
            f = encoders.get(type(r))
            if f is None:
                f = encoders[type(r)] = self._encoder(type(r))
            out.append(f(r))
        return out


def to_batches(
    records: Sequence[MetadataRecord],
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    name: str = "",
    metadata_version: int | None = None,
    encoded: Sequence[bytes] | None = None,
) -> BatchPlan:
    """`metadata_version` (the image's level) caps the record versions written.
    `encoded`: the records already encoded (RecordEncoder, same metadata_version)."""
    if not records:
        return BatchPlan([], [])
    mv = metadata_version
    if encoded is None:
        encoded = RecordEncoder(mv).encode(records)
    elif len(encoded) != len(records):
        raise ValueError(f"{len(encoded)} encoded records for {len(records)} records")
    room = max_batch_bytes - HEADER_SIZE
    if sum(len(e) for e in encoded) <= room:
        return BatchPlan([EncodedBatch(b"".join(encoded), len(encoded))], list(records))
    begin, end = BeginTransactionRecord(name), EndTransactionRecord()
    written = [begin, *records, end]
    encoded = [
        encode_record(begin, metadata_version=mv),
        *encoded,
        encode_record(end, metadata_version=mv),
    ]
    out = pack(encoded, max_batch_bytes)
    return BatchPlan(out, written)


def pack(encoded: Sequence[bytes], max_batch_bytes: int) -> list[EncodedBatch]:
    """Encoded records, in order, into as few batches of at most max_batch_bytes as
    they fill (a record larger than a batch is an error)."""
    room = max_batch_bytes - HEADER_SIZE
    out: list[EncodedBatch] = []
    current: list[bytes] = []
    size = 0
    for e in encoded:
        if len(e) > room:
            raise ValueError(
                f"one record of {len(e)} bytes exceeds the batch limit of {max_batch_bytes}"
            )
        if current and size + len(e) > room:
            out.append(EncodedBatch(b"".join(current), len(current)))
            current, size = [], 0
        current.append(e)
        size += len(e)
    if current:
        out.append(EncodedBatch(b"".join(current), len(current)))
    return out


def abort_record(reason: str) -> AbortTransactionRecord:
    """What a new leader writes when the log ends inside an unfinished transaction."""
    return AbortTransactionRecord(reason)
