"""The tests' own writer of Kafka's wire format, written apart from the decoder.

It follows Kafka's rules as they read in the protocol guide and the schema
files (metadata_log/kafka/schemas.py holds their facts), not the decoder's code:
a `Sink` appends to a bytearray; flexible versions mean compact lengths
(N + 1, 0 = null), a tagged-field section after every struct, tags in
ascending order, tagged fields at their default left out. The batch writer packs
a record batch v2 field by field, CRC-32C from the attributes on.
"""

from __future__ import annotations

import base64
import gzip
import struct
from typing import Any

import cramjam
import crc32c


class Sink:
    def __init__(self) -> None:
        self.buf = bytearray()

    def raw(self, b: bytes) -> None:
        self.buf += b

    def unsigned_varint(self, n: int) -> None:
        assert n >= 0
        while True:
            low = n & 0x7F
            n >>= 7
            if n:
                self.buf.append(low | 0x80)
            else:
                self.buf.append(low)
                return

    def signed_varint(self, n: int) -> None:
        self.unsigned_varint(2 * n if n >= 0 else -2 * n - 1)

    def compact_length(self, n: int | None) -> None:
        self.unsigned_varint(0 if n is None else n + 1)


def _applies(version: int, spec: Any) -> bool:
    return spec is not None and spec[0] <= version and (spec[1] is None or version <= spec[1])


def write_field(sink: Sink, field: dict[str, Any], version: int, value: Any) -> None:
    kind = field["type"]
    if kind.startswith("[]"):
        if value is None:
            sink.compact_length(None)
            return
        sink.compact_length(len(value))
        inner = dict(field, type=kind[2:])
        for item in value:
            if "fields" in field:
                write_struct(sink, field["fields"], version, item)
            else:
                write_field(sink, inner, version, item)
        return
    fmt = {
        "int8": ">b",
        "int16": ">h",
        "int32": ">i",
        "int64": ">q",
        "uint16": ">H",
        "float64": ">d",
    }
    if kind in fmt:
        sink.raw(struct.pack(fmt[kind], value))
    elif kind == "bool":
        sink.raw(bytes([1 if value else 0]))
    elif kind == "uuid":
        raw = base64.urlsafe_b64decode(value + "==")
        assert len(raw) == 16
        sink.raw(raw)
    elif kind == "string":
        if value is None:
            sink.compact_length(None)
        else:
            data = value.encode("utf-8")
            sink.compact_length(len(data))
            sink.raw(data)
    elif kind == "bytes":
        if value is None:
            sink.compact_length(None)
        else:
            sink.compact_length(len(value))
            sink.raw(value)
    else:
        write_struct(sink, field["fields"], version, value)


def write_struct(
    sink: Sink, fields: list[dict[str, Any]], version: int, value: dict[str, Any]
) -> None:
    tagged = []
    for field in fields:
        if not _applies(version, field["versions"]):
            continue
        v = value[field["name"]]
        if field["tag"] is not None and _applies(version, field["tagged"]):
            if v != field["default"]:
                tagged.append((field["tag"], field, v))
            continue
        write_field(sink, field, version, v)
    sink.unsigned_varint(len(tagged))
    for tag, field, v in sorted(tagged, key=lambda t: t[0]):
        inner = Sink()
        write_field(inner, field, version, v)
        sink.unsigned_varint(tag)
        sink.unsigned_varint(len(inner.buf))
        sink.raw(bytes(inner.buf))


def message_bytes(schema: dict[str, Any], version: int, value: dict[str, Any]) -> bytes:
    sink = Sink()
    write_struct(sink, schema["fields"], version, value)
    return bytes(sink.buf)


def metadata_value(
    api_key: int, schema: dict[str, Any], version: int, value: dict[str, Any]
) -> bytes:
    """A metadata record's value: frame version 1, api key, version, body."""
    sink = Sink()
    sink.unsigned_varint(1)
    sink.unsigned_varint(api_key)
    sink.unsigned_varint(version)
    sink.raw(message_bytes(schema, version, value))
    return bytes(sink.buf)


def control_key(control_type: int) -> bytes:
    return struct.pack(">hh", 0, control_type)


def _records_section(records: list[tuple[bytes | None, bytes]]) -> bytes:
    out = Sink()
    for delta, (key, value) in enumerate(records):
        rec = Sink()
        rec.raw(b"\x00")  # attributes
        rec.signed_varint(0)  # timestamp delta
        rec.signed_varint(delta)
        if key is None:
            rec.signed_varint(-1)
        else:
            rec.signed_varint(len(key))
            rec.raw(key)
        rec.signed_varint(len(value))
        rec.raw(value)
        rec.signed_varint(0)  # no headers
        out.signed_varint(len(rec.buf))
        out.raw(bytes(rec.buf))
    return bytes(out.buf)


def compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "snappy":  # xerial stream framing, one block
        block = bytes(cramjam.snappy.compress_raw(data))
        return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data))
    return data


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch(
    base_offset: int,
    epoch: int,
    timestamp: int,
    records: list[tuple[bytes | None, bytes]],
    *,
    control: bool = False,
    codec: str = "none",
) -> bytes:
    """A record batch v2 holding `records` (key, value), every one at `timestamp`."""
    payload = compress(codec, _records_section(records))
    attributes = CODEC_IDS[codec] | (0x20 if control else 0)
    after_crc = (
        struct.pack(">h", attributes)
        + struct.pack(">i", len(records) - 1)  # last offset delta
        + struct.pack(">qq", timestamp, timestamp)
        + struct.pack(">qhi", -1, -1, -1)  # producer id, epoch, base sequence
        + struct.pack(">i", len(records))
        + payload
    )
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return (
        struct.pack(">qiib", base_offset, batch_length, epoch, 2)
        + struct.pack(">I", crc)
        + after_crc
    )
