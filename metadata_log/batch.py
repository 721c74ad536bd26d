"""Record batches: the unit that is appended, replicated, checksummed and read.

Layout (big-endian, see docs/log-format.md)::

    0  base_offset      int64
    8  length           int32   whole batch in bytes, header included
    12 leader_epoch     int32
    16 magic            int8    = 1
    17 attributes       int16   bit 0: control batch
    19 append_time_ms   int64
    27 record_count     int32
    31 records_crc      uint32  CRC-32 of the records section
    35 header_crc       uint32  CRC-32 of bytes 0..35
    39 records          record_count msgpack arrays, back to back

The header checksum covers the length field, so a flipped bit anywhere in a
batch (header or records) is detected. Offsets of the records are
base_offset + i.
"""

from __future__ import annotations

import gc
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import msgpack

from metadata_log.errors import CorruptBatchError, IncompleteBatchError, RecordDecodeError
from metadata_log.records import Record, encode_record, records_from_wire

MAGIC = 1
ATTR_CONTROL = 0x1
HEADER = struct.Struct(">qiibhqiI")  # everything before header_crc
HEADER_CRC = struct.Struct(">I")
HEADER_SIZE = HEADER.size + HEADER_CRC.size  # 39
_BASE_OFFSET = struct.Struct(">q")
# A batch larger than this is corrupt, not merely big (guards a garbage length).
MAX_BATCH_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    attributes: int
    append_time_ms: int
    record_count: int
    records_crc: int

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded batch."""

    base_offset: int
    leader_epoch: int
    append_time_ms: int
    records: tuple[Record, ...]
    control: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    def encode(self) -> bytes:
        return encode_batch(
            self.base_offset, self.leader_epoch, self.append_time_ms, self.records, self.control
        )


def encode_payload(
    base_offset: int,
    leader_epoch: int,
    append_time_ms: int,
    payload: bytes,
    record_count: int,
    control: bool = False,
) -> bytes:
    """A batch around an already encoded records section."""
    if record_count <= 0:
        raise ValueError("a batch holds at least one record")
    length = HEADER_SIZE + len(payload)
    if length > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {length} bytes exceeds {MAX_BATCH_BYTES}")
    head = HEADER.pack(
        base_offset,
        length,
        leader_epoch,
        MAGIC,
        ATTR_CONTROL if control else 0,
        append_time_ms,
        record_count,
        zlib.crc32(payload),
    )
    return head + HEADER_CRC.pack(zlib.crc32(head)) + payload


def encode_batch(
    base_offset: int,
    leader_epoch: int,
    append_time_ms: int,
    records: Sequence[Record],
    control: bool = False,
) -> bytes:
    payload = b"".join([encode_record(r) for r in records])
    return encode_payload(base_offset, leader_epoch, append_time_ms, payload, len(records), control)


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The same batch at a new base offset (the leader assigns offsets on append)."""
    head = _BASE_OFFSET.pack(base_offset) + batch[8 : HEADER.size]
    return head + HEADER_CRC.pack(zlib.crc32(head)) + batch[HEADER_SIZE:]


def parse_header(buf: bytes | memoryview, pos: int, path: str, expect_offset: int) -> BatchHeader:
    """Parse and verify the header at `pos`.

    Raises IncompleteBatchError when the buffer ends inside the batch, and
    CorruptBatchError when a complete header fails its checksum or is impossible.
    `expect_offset` is where the batch should start; errors name it.
    """
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise IncompleteBatchError(
            path, expect_offset, pos, f"{avail} bytes of a {HEADER_SIZE}-byte header"
        )
    fields = HEADER.unpack_from(buf, pos)
    (crc,) = HEADER_CRC.unpack_from(buf, pos + HEADER.size)
    if zlib.crc32(buf[pos : pos + HEADER.size]) != crc:
        # A torn write can leave a header that is complete but garbage only if the
        # data after it is missing too; the caller decides with the recovery point.
        raise CorruptBatchError(path, expect_offset, pos, "header checksum mismatch")
    header = BatchHeader(*fields)
    if header.magic != MAGIC:
        raise CorruptBatchError(path, expect_offset, pos, f"unknown magic {header.magic}")
    if header.length < HEADER_SIZE or header.length > MAX_BATCH_BYTES:
        raise CorruptBatchError(path, expect_offset, pos, f"impossible length {header.length}")
    if header.record_count <= 0:
        raise CorruptBatchError(path, expect_offset, pos, f"record count {header.record_count}")
    if avail < header.length:
        raise IncompleteBatchError(
            path, header.base_offset, pos, f"{avail} of {header.length} bytes present"
        )
    return header


def verify_records(buf: bytes | memoryview, pos: int, header: BatchHeader, path: str) -> None:
    if zlib.crc32(buf[pos + HEADER_SIZE : pos + header.length]) != header.records_crc:
        raise CorruptBatchError(path, header.base_offset, pos, "records checksum mismatch")


def iter_headers(
    buf: bytes | memoryview, path: str, first_offset: int | None = None, pos: int = 0
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each verified batch (both checksums) in `buf`.

    Stops at the end of the buffer; raises on a bad or incomplete batch. When
    `first_offset` is given, offsets must be contiguous from it.
    """
    expect = first_offset
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos, path, expect if expect is not None else -1)
        if expect is not None and header.base_offset != expect:
            raise CorruptBatchError(
                path, expect, pos, f"batch starts at offset {header.base_offset}, expected {expect}"
            )
        verify_records(buf, pos, header, path)
        yield pos, header
        expect = header.next_offset
        pos += header.length


def decode_records(
    buf: bytes | memoryview, pos: int, header: BatchHeader, path: str = "<batch>"
) -> list[Record]:
    """Decode the records of a verified batch."""
    unpacker = msgpack.Unpacker(use_list=False, raw=False, strict_map_key=False)
    unpacker.feed(buf[pos + HEADER_SIZE : pos + header.length])
    # Decoding allocates thousands of tuples and records that form no cycles; the
    # cycle collector would otherwise rescan them (and everything the caller keeps)
    # every 700 allocations, which costs a third of the read rate when decoded
    # records are kept (replay, Spark). Pausing it for one batch is safe; it runs
    # at the next allocation after.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        out = records_from_wire(unpacker, header.base_offset, header.control)
    except RecordDecodeError as e:
        raise e.at(path) from None
    except Exception as e:  # msgpack's several exception types for garbage
        # The records before the bad one decoded: count them to name its offset.
        good = _count_good(buf[pos + HEADER_SIZE : pos + header.length])
        raise RecordDecodeError(
            header.base_offset + good, f"not valid msgpack: {e}", path
        ) from None
    finally:
        if paused:
            gc.enable()
    if len(out) != header.record_count:
        raise RecordDecodeError(
            header.base_offset,
            f"batch declares {header.record_count} records, holds {len(out)}",
            path,
        )
    return out


def _count_good(section: bytes | memoryview) -> int:
    """How many msgpack objects decode from the start of `section` (error reporting only)."""
    unpacker = msgpack.Unpacker(use_list=False, raw=False, strict_map_key=False)
    unpacker.feed(section)
    n = 0
    try:
        for _ in unpacker:
            n += 1
    except Exception:  # msgpack's several exception types for garbage
        pass
    return n


def decode_batches(
    buf: bytes | memoryview, path: str = "<buffer>", first_offset: int | None = None
) -> list[RecordBatch]:
    """Verify and decode every batch in `buf` (which must end on a batch boundary)."""
    out = []
    for pos, h in iter_headers(buf, path, first_offset):
        out.append(
            RecordBatch(
                h.base_offset,
                h.leader_epoch,
                h.append_time_ms,
                tuple(decode_records(buf, pos, h, path)),
                h.control,
            )
        )
    return out


def concat(batches: Iterable[bytes]) -> bytes:
    return b"".join(batches)
