"""Turn a controller result's records into batch payloads, atomically.

A result that fits in one batch (8 MiB by default) is one batch: Raft commits a
batch all or nothing. A larger one becomes a metadata transaction (KIP-868):
BeginTransactionRecord, the records over as many batches as needed, then
EndTransactionRecord; replay applies it only at the end record, and a leader
that fails mid-way leaves a transaction that the next leader aborts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metadata_log.batch import HEADER_SIZE
from metadata_log.records import (
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


def to_batches(
    records: Sequence[MetadataRecord],
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    name: str = "",
    metadata_version: int | None = None,
) -> BatchPlan:
    """`metadata_version` (the image's level) caps the record versions written."""
    if not records:
        return BatchPlan([], [])
    mv = metadata_version
    # The version each record class is written at, looked up once per class (a
    # fence of a big broker is 100k records of one class).
    versions: dict[type, int] = {}
    encoded = []
    for r in records:
        if mv is None:
            encoded.append(encode_record(r))
            continue
        t = type(r)
        v = versions.get(t)
        if v is None:
            v = versions[t] = record_version(t, mv)
        encoded.append(encode_record(r, v))
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
    out.append(EncodedBatch(b"".join(current), len(current)))
    return BatchPlan(out, written)


def abort_record(reason: str) -> AbortTransactionRecord:
    """What a new leader writes when the log ends inside an unfinished transaction."""
    return AbortTransactionRecord(reason)
