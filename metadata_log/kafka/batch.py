"""Kafka record batches (magic 2, "record batch v2"): header, CRC-32C, codecs, records.

Layout (big-endian), as Kafka's DefaultRecordBatch writes it::

    0  base_offset             int64
    8  batch_length            int32   bytes after this field
    12 partition_leader_epoch  int32
    16 magic                   int8    = 2 (the native format has 1 at the same place)
    17 crc                     uint32  CRC-32C of bytes 21.. (attributes to the end)
    21 attributes              int16   bits 0-2 codec, 3 timestamp type,
                                       4 transactional, 5 control
    23 last_offset_delta       int32
    27 base_timestamp          int64
    35 max_timestamp           int64
    43 producer_id             int64
    51 producer_epoch          int16
    53 base_sequence           int32
    57 record_count            int32
    61 records (compressed as a whole when the codec is not none)

Each record: varint length, int8 attributes, varlong timestamp delta, varint
offset delta, varint key length + key, varint value length + value, varint
header count + headers (zig-zag varints, -1 = null).

The CRC is computed with the `crc32c` package; gzip with the standard library;
snappy (Kafka writes xerial's framing), lz4 (frame format) and zstd with
`cramjam`. A codec whose library is missing is a `KafkaCodecError`, not a crash.

Decompression is bounded: a batch's records may take at most
MAX_DECOMPRESSED_BYTES once uncompressed, and the codecs write into a buffer of
that size (a 32 KB zstd batch can otherwise unpack to gigabytes). Every path
that reads a compressed Kafka batch goes through `records_section`.

A batch is checked as Kafka's LogValidator.validateBatch checks one: at least one
record, last_offset_delta + 1 == record_count, and the records' offset deltas
are 0, 1, ... in order (a KRaft log is never compacted, so there is no hole).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import crc32c

from metadata_log.batch import MAX_BATCH_BYTES  # one corruption bound for both formats
from metadata_log.errors import CorruptBatchError, IncompleteBatchError, MetadataLogError

# The most bytes one batch's records may take once decompressed. KRaft's
# controller writes batches of at most 8 MiB (KafkaRaftClient's
# MAX_BATCH_SIZE_BYTES), so the stored-batch bound is ample and keeps a
# decompression bomb's memory to one bound.
MAX_DECOMPRESSED_BYTES = MAX_BATCH_BYTES

MAGIC = 2
MAGIC_POSITION = 16
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: what batch_length does not count
CRC_START = 21

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08  # record timestamps are the batch's max_timestamp
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class KafkaCodecError(MetadataLogError):
    """A batch compressed with a codec that is unknown or whose library is not installed."""

    def __init__(self, path: str, offset: int, position: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.position = position
        super().__init__(
            f"cannot read batch in {path} at offset {offset} (file position {position}): {reason}"
        )


class KafkaBatchHeader(NamedTuple):
    """A batch header and where it is. A NamedTuple rather than a frozen dataclass:
    KRaft writes most records (NoOps) one per batch, and building a 14-field frozen
    dataclass cost more than checking the batch's CRC."""

    position: int
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def codec(self) -> str:
        return CODEC_NAMES.get(self.attributes & ATTR_CODEC_MASK, "unknown")

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class KafkaRawRecord:
    """One record of a batch, undecoded: offset, timestamp, key and value bytes."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


_make_header = KafkaBatchHeader._make


def parse_header(buf: bytes | memoryview, pos: int, path: str) -> KafkaBatchHeader:
    """Parse and verify (CRC-32C) the batch at `pos`.

    IncompleteBatchError when the data ends inside the batch, CorruptBatchError
    when a complete batch is wrong; both name the file, offset and position.
    """
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        offset = struct.unpack_from(">q", buf, pos)[0] if avail >= 8 else -1
        raise IncompleteBatchError(
            path, offset, pos, f"{avail} bytes of a {HEADER_SIZE}-byte header"
        )
    h = _make_header((pos, *HEADER.unpack_from(buf, pos)))
    if h.magic != MAGIC:
        raise CorruptBatchError(path, h.base_offset, pos, f"unknown magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.size > MAX_BATCH_BYTES:
        raise CorruptBatchError(
            path, h.base_offset, pos, f"impossible batch length {h.batch_length}"
        )
    if avail < h.size:
        raise IncompleteBatchError(path, h.base_offset, pos, f"{avail} of {h.size} bytes present")
    computed = crc32c.crc32c(buf[pos + CRC_START : pos + h.size])
    if computed != h.crc:
        raise CorruptBatchError(
            path,
            h.base_offset,
            pos,
            f"CRC-32C mismatch: stored {h.crc:#010x}, computed {computed:#010x}",
        )
    check_counts(h, path)
    return h


def check_counts(h: KafkaBatchHeader, path: str) -> None:
    """Kafka's LogValidator.validateBatch: a record count of at least one and an
    offset range that holds exactly that many records."""
    if h.record_count < 1 or h.last_offset_delta != h.record_count - 1:
        raise CorruptBatchError(
            path,
            h.base_offset,
            h.position,
            f"record count {h.record_count}, last delta {h.last_offset_delta}",
        )


def bad_delta(path: str, h: KafkaBatchHeader, index: int, delta: int) -> CorruptBatchError:
    """The error for a record whose offset delta is not its place in the batch."""
    return CorruptBatchError(
        path,
        h.base_offset + index,
        h.position,
        f"record {index} of the batch has offset delta {delta}, not {index}",
    )


def decompress(codec: int, data: bytes, path: str, h: KafkaBatchHeader) -> bytes:
    """The records section of a batch, uncompressed, refused past MAX_DECOMPRESSED_BYTES."""
    if codec == 0:
        return data
    if codec == 1:
        return _gzip(data, path, h)
    name = CODEC_NAMES.get(codec)
    if name is None:
        raise KafkaCodecError(path, h.base_offset, h.position, f"unknown compression codec {codec}")
    try:
        import cramjam
    except ImportError:
        raise KafkaCodecError(
            path,
            h.base_offset,
            h.position,
            f"the batch is {name}-compressed and the cramjam package is not installed "
            "(pip install cramjam)",
        ) from None
    if codec == 2:
        return _snappy(cramjam, data, path, h)
    into = cramjam.lz4.decompress_into if codec == 3 else cramjam.zstd.decompress_into
    # Into a buffer one byte over the bound: numpy's empty array is only given
    # memory as it is written, and a frame that fills it is too big. (Imported
    # here: reading an uncompressed log, dump-log's case, need not load numpy.)
    import numpy as np

    out = np.empty(MAX_DECOMPRESSED_BYTES + 1, np.uint8)
    try:
        n = into(data, out)
    except cramjam.DecompressionError as e:
        if "whole buffer" in str(e):  # cramjam: the output did not fit
            raise _too_big(path, h) from None
        raise
    if n > MAX_DECOMPRESSED_BYTES:
        raise _too_big(path, h)
    return out[:n].tobytes()


def _too_big(path: str, h: KafkaBatchHeader) -> CorruptBatchError:
    return CorruptBatchError(
        path,
        h.base_offset,
        h.position,
        f"the {h.codec} records decompress to more than {MAX_DECOMPRESSED_BYTES} bytes "
        "(the bound on one batch)",
    )


def _gzip(data: bytes, path: str, h: KafkaBatchHeader) -> bytes:
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    out = d.decompress(data, MAX_DECOMPRESSED_BYTES + 1)
    if len(out) > MAX_DECOMPRESSED_BYTES:
        raise _too_big(path, h)
    if not d.eof:
        raise zlib.error("incomplete or truncated stream")
    return out


def _snappy(cramjam: Any, data: bytes, path: str, h: KafkaBatchHeader) -> bytes:
    """Kafka's snappy is xerial's stream framing (8-byte magic, 2 ints, then
    length-prefixed raw blocks); a bare raw block is accepted too. Each raw
    block declares its uncompressed length: checked before it is decompressed."""
    if not data.startswith(_XERIAL_MAGIC):
        blocks = [data]
    else:
        blocks = []
        pos = 16
        while pos < len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            blocks.append(data[pos : pos + n])
            pos += n
    out = []
    total = 0
    for block in blocks:
        total += cramjam.snappy.decompress_raw_len(block)
        if total > MAX_DECOMPRESSED_BYTES:
            raise _too_big(path, h)
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
    return b"".join(out)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint (Kafka's readVarint/readVarlong)."""
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def records_section(buf: bytes | memoryview, h: KafkaBatchHeader, path: str) -> bytes:
    """The batch's records bytes, decompressed."""
    data = bytes(buf[h.position + HEADER_SIZE : h.position + h.size])
    try:
        return decompress(h.attributes & ATTR_CODEC_MASK, data, path, h)
    except (KafkaCodecError, CorruptBatchError):
        raise
    except MemoryError:  # str(MemoryError()) is empty: say what ran out
        raise MetadataLogError(
            f"cannot read batch in {path} at offset {h.base_offset} (file position "
            f"{h.position}): out of memory decompressing its {h.codec} records "
            f"(at most {MAX_DECOMPRESSED_BYTES} bytes)"
        ) from None
    except Exception as e:  # zlib.error, cramjam's DecompressionError, struct.error
        raise CorruptBatchError(
            path, h.base_offset, h.position, f"{h.codec} data does not decompress: {e}"
        ) from None


def raw_records(buf: bytes | memoryview, h: KafkaBatchHeader, path: str) -> list[KafkaRawRecord]:
    """The records of a verified batch (offsets and timestamps made absolute).

    The reference implementation, in Python; `records_of` is the fast path.
    """
    data = records_section(buf, h, path)
    log_append_time = bool(h.attributes & ATTR_LOG_APPEND_TIME)
    out: list[KafkaRawRecord] = []
    pos = 0
    try:
        for _ in range(h.record_count):
            length, pos = _varint(data, pos)
            end = pos + length
            if length <= 0 or end > len(data):
                raise ValueError(f"record length {length} runs past the batch")
            pos += 1  # attributes, unused
            ts_delta, pos = _varint(data, pos)
            off_delta, pos = _varint(data, pos)
            if off_delta != len(out):
                raise bad_delta(path, h, len(out), off_delta)
            key, pos = _bytes(data, pos)
            value, pos = _bytes(data, pos)
            n_headers, pos = _varint(data, pos)
            headers = []
            for _h in range(n_headers):
                hk, pos = _bytes(data, pos)
                hv, pos = _bytes(data, pos)
                headers.append(((hk or b"").decode("utf-8", "replace"), hv))
            if pos != end:
                raise ValueError(f"record declares {length} bytes, holds {length + pos - end}")
            out.append(
                KafkaRawRecord(
                    h.base_offset + off_delta,
                    h.max_timestamp if log_append_time else h.base_timestamp + ts_delta,
                    key,
                    value,
                    tuple(headers),
                )
            )
    except (ValueError, IndexError) as e:
        raise CorruptBatchError(
            path, h.base_offset + len(out), h.position, f"record {len(out)} of the batch: {e}"
        ) from None
    if pos != len(data):
        raise CorruptBatchError(
            path,
            h.base_offset,
            h.position,
            f"{len(data) - pos} bytes after the batch's {h.record_count} records",
        )
    return out


def _bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(data, pos)
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise ValueError(f"field of {n} bytes runs past the record")
    return data[pos : pos + n], pos + n


def iter_batch_headers(
    buf: bytes | memoryview, path: str, pos: int = 0
) -> Iterator[KafkaBatchHeader]:
    """The header of each verified Kafka batch in `buf` until its end."""
    while pos < len(buf):
        h = parse_header(buf, pos, path)
        yield h
        pos += h.size


# aiokafka's record batch reader (a C extension on the platforms it ships wheels
# for) walks a batch's varint records ~10x faster than raw_records: 0.035-0.077 s
# against 0.61 s for the 100k records of a generated story. It is used for the
# records only: the header and CRC-32C are checked above first, so its errors can
# only be a malformed records section. Without it, raw_records does the job.
try:
    from aiokafka.errors import UnsupportedCodecError as _AioCodecError
    from aiokafka.record.default_records import DefaultRecordBatch as _AioBatch
except ImportError:  # pragma: no cover - aiokafka is a dependency
    _AioBatch = None


def records_of(
    buf: bytes | memoryview, h: KafkaBatchHeader, path: str
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of each record of a verified batch.

    The same as `raw_records` (tested for equality), through aiokafka's reader.
    """
    codec = h.attributes & ATTR_CODEC_MASK
    if _AioBatch is None or codec:
        # Compressed: the reference reader, whose decompression is bounded
        # (aiokafka's is not); Kafka's metadata batches are seldom compressed.
        return [(r.offset, r.timestamp, r.key, r.value) for r in raw_records(buf, h, path)]
    try:
        out = [
            (r.offset, r.timestamp, r.key, r.value)
            for r in _AioBatch(bytes(buf[h.position : h.position + h.size]))
        ]
    except _AioCodecError as e:  # pragma: no cover - only compressed batches
        raise KafkaCodecError(path, h.base_offset, h.position, str(e)) from None
    except Exception as e:  # aiokafka's CorruptRecordException, struct/index errors
        raise CorruptBatchError(path, h.base_offset, h.position, f"records: {e}") from None
    if len(out) != h.record_count:
        raise CorruptBatchError(
            path, h.base_offset, h.position, f"{len(out)} records, header says {h.record_count}"
        )
    for i, r in enumerate(out):
        if r[0] != h.base_offset + i:
            raise bad_delta(path, h, i, r[0] - h.base_offset)
    return out
