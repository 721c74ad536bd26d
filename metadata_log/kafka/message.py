"""Kafka's message serialization (flexible versions), decoded from the schema tables.

Every metadata and KRaft control record schema is flexible from version 0, so
one encoding covers them all: fixed-width big-endian integers, compact strings,
bytes and arrays (unsigned varint length + 1, 0 meaning null), 16-byte UUIDs
(shown as Kafka prints them: URL-safe base64, no padding) and, at the end of
every message and struct, a tagged-field section (count, then tag, size, value
for each). A tagged field that is absent takes its schema default (for
PartitionChangeRecord: leader -2, null lists = "no change").

`message_decoder(schema, version)` builds, once per (record, version), a list
of small reader closures; decoding is then one pass over the body. Errors are
`MessageError` carrying only the reason; the batch reader adds file and offset.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

Reader = Callable[[bytes, int], tuple[Any, int]]


class MessageError(ValueError):
    """A record body that does not match its schema (short, overlong, bad null, ...)."""


def in_range(version: int, vr: tuple[int, int | None] | None) -> bool:
    if vr is None:
        return False
    lo, hi = vr
    return version >= lo and (hi is None or version <= hi)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint, at most 5 bytes (Kafka's readUnsignedVarint)."""
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise MessageError(f"record body ends at byte {pos} inside a varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MessageError("varint longer than 5 bytes")


def uuid_text(raw: bytes) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _fixed(fmt: str) -> Reader:
    st = struct.Struct(fmt)
    size = st.size
    unpack = st.unpack_from

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise MessageError(f"record body ends at byte {len(buf)}, a field needs {size} more")
        return unpack(buf, pos)[0], pos + size

    return read


_FIXED: dict[str, Reader] = {
    "int8": _fixed(">b"),
    "int16": _fixed(">h"),
    "int32": _fixed(">i"),
    "int64": _fixed(">q"),
    "uint16": _fixed(">H"),
    "float64": _fixed(">d"),
}


def _read_bool(buf: bytes, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise MessageError(f"record body ends at byte {pos}, a bool needs 1 more")
    return buf[pos] != 0, pos + 1


# Topic ids repeat in every partition record of a log: their text is cached (base64
# encoding cost 3.6 us a uuid, a tenth of decoding a PartitionChangeRecord).
UUID_TEXT_CACHE: dict[bytes, str] = {}
UUID_CACHE_SIZE = 65536


def _read_uuid(buf: bytes, pos: int) -> tuple[str, int]:
    end = pos + 16
    raw = bytes(buf[pos:end])
    if len(raw) != 16:
        raise MessageError(f"record body ends at byte {len(buf)}, a uuid needs 16 bytes")
    text = UUID_TEXT_CACHE.get(raw)
    if text is None:
        if len(UUID_TEXT_CACHE) >= UUID_CACHE_SIZE:
            UUID_TEXT_CACHE.clear()
        text = UUID_TEXT_CACHE[raw] = uuid_text(raw)
    return text, end


def _sized(nullable: bool, name: str, convert: Callable[[bytes], Any]) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n = buf[pos]  # IndexError past the end: decode_message reports it
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        if n == 0:
            if not nullable:
                raise MessageError(f"{name} is null but not nullable at this version")
            return None, pos
        end = pos + n - 1
        if end > len(buf):
            raise MessageError(f"{name} of {n - 1} bytes runs past the record body")
        return convert(bytes(buf[pos:end])), end

    return read


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MessageError(f"string is not UTF-8: {e}") from None


def _array(element: Reader, nullable: bool, name: str) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n = buf[pos]  # IndexError past the end: decode_message reports it
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        if n == 0:
            if not nullable:
                raise MessageError(f"{name} is null but not nullable at this version")
            return None, pos
        if n - 1 > len(buf) - pos:  # every element takes at least one byte
            raise MessageError(f"{name} declares {n - 1} elements, more than the record body holds")
        out = []
        for _ in range(n - 1):
            v, pos = element(buf, pos)
            out.append(v)
        return tuple(out), pos

    return read


# struct format characters of the fixed-width types (bool: any non-zero byte is true).
FIXED_CHARS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d",
                "bool": "?"}  # fmt: skip


def _fixed_array(char: str, nullable: bool, name: str) -> Reader:
    """An array of fixed-width elements (replicas, isr, ...) in one unpack."""
    size = struct.calcsize(char)
    formats: dict[int, Any] = {}

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n = buf[pos]  # IndexError past the end: decode_message reports it
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        if n == 0:
            if not nullable:
                raise MessageError(f"{name} is null but not nullable at this version")
            return None, pos
        count = n - 1
        end = pos + count * size
        if end > len(buf):
            raise MessageError(f"{name} declares {count} elements, more than the record body holds")
        unpack = formats.get(count)
        if unpack is None:
            unpack = formats[count] = struct.Struct(f">{count}{char}").unpack_from
        return unpack(buf, pos), end

    return read


def _fixed_run(chars: str) -> Reader:
    """Consecutive fixed-width fields in one unpack (their values as a tuple)."""
    st = struct.Struct(">" + chars)
    size = st.size
    unpack = st.unpack_from

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise MessageError(f"record body ends at byte {len(buf)}, fields need {size} bytes")
        return unpack(buf, pos), pos + size

    return read


def field_reader(field: dict[str, Any], version: int) -> Reader:
    """The reader of one field at `version` (structs recurse through struct_reader)."""
    ftype: str = field["type"]
    nullable = in_range(version, field["nullable"])
    name = field["name"]
    if ftype.startswith("[]"):
        elem = ftype[2:]
        if "fields" in field:
            element = struct_reader(field["fields"], version)
        elif elem in FIXED_CHARS:
            return _fixed_array(FIXED_CHARS[elem], nullable, name)
        else:
            element = field_reader({**field, "type": elem, "nullable": None}, version)
        return _array(element, nullable, name)
    if ftype in _FIXED:
        return _FIXED[ftype]
    if ftype == "bool":
        return _read_bool
    if ftype == "uuid":
        return _read_uuid
    if ftype == "string":
        return _sized(nullable, name, _utf8)
    if ftype == "bytes":
        return _sized(nullable, name, bytes)
    if "fields" in field:
        return struct_reader(field["fields"], version)
    raise ValueError(f"field {name}: unknown type {ftype}")


def struct_reader(fields: list[dict[str, Any]], version: int) -> Reader:
    """Reader of a message or struct at `version`: its fields in order, then its tags.

    The result is a dict of every field the version has, snake_case names in
    schema order, absent tagged fields at their default. A tag the schema does
    not know is kept under "_unknown_tagged_fields" (tag -> hex), never dropped.
    """
    present = [f for f in fields if in_range(version, f["versions"])]
    # (names, reader): one name, or a run of fixed-width fields read in one unpack.
    plain: list[tuple[Any, Reader]] = []
    run: list[dict[str, Any]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    defaults: dict[str, Any] = {}

    def close_run() -> None:
        if len(run) == 1:
            plain.append((run[0]["name"], field_reader(run[0], version)))
        elif run:
            chars = "".join(FIXED_CHARS[f["type"]] for f in run)
            plain.append((tuple(f["name"] for f in run), _fixed_run(chars)))
        run.clear()

    for f in present:
        if f["tag"] is not None and in_range(version, f["tagged"]):
            tagged[f["tag"]] = (f["name"], field_reader(f, version))
            defaults[f["name"]] = f["default"]
        elif f["type"] in FIXED_CHARS:
            run.append(f)
        else:
            close_run()
            plain.append((f["name"], field_reader(f, version)))
    close_run()
    # Every result starts as a copy of this: schema order, tagged fields at their
    # defaults (plain fields are all overwritten), so no reordering afterwards.
    template = {f["name"]: defaults.get(f["name"]) for f in present}

    def read(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        out = template.copy()
        for names, reader in plain:
            if type(names) is str:
                out[names], pos = reader(buf, pos)
            else:
                values, pos = reader(buf, pos)
                for name, value in zip(names, values, strict=True):
                    out[name] = value
        count = buf[pos]  # IndexError past the end: decode_message reports it
        if count < 0x80:
            pos += 1
        else:
            count, pos = read_uvarint(buf, pos)
        if count:
            unknown: dict[int, str] = {}
            for _ in range(count):
                tag = buf[pos]
                if tag < 0x80:
                    pos += 1
                else:
                    tag, pos = read_uvarint(buf, pos)
                size = buf[pos]
                if size < 0x80:
                    pos += 1
                else:
                    size, pos = read_uvarint(buf, pos)
                end = pos + size
                if end > len(buf):
                    raise MessageError(
                        f"tagged field {tag} of {size} bytes runs past the record body"
                    )
                known = tagged.get(tag)
                if known is None:
                    unknown[tag] = bytes(buf[pos:end]).hex()
                else:
                    value, used = known[1](buf, pos)
                    if used != end:
                        raise MessageError(
                            f"tagged field {known[0]} holds {size} bytes, its value {used - pos}"
                        )
                    out[known[0]] = value
                pos = end
            if unknown:
                out["_unknown_tagged_fields"] = unknown
        return out, pos

    return read


_DECODERS: dict[tuple[int, int, int], Reader] = {}


def message_decoder(schema: dict[str, Any], version: int) -> Reader:
    """The (cached) reader of `schema`'s body at `version`."""
    key = (id(schema), version, 0)
    reader = _DECODERS.get(key)
    if reader is None:
        reader = _DECODERS[key] = struct_reader(schema["fields"], version)
    return reader


def decode_message(
    schema: dict[str, Any], version: int, body: bytes, start: int = 0
) -> dict[str, Any]:
    """Decode a record body (from `start` to the end) at `version`; trailing bytes are an error."""
    lo, hi = schema["versions"]
    if not lo <= version <= hi:
        raise MessageError(f"{schema['name']} version {version} is not known (knows {lo}-{hi})")
    try:
        value, pos = message_decoder(schema, version)(body, start)
    except (IndexError, struct.error):
        raise MessageError(
            f"record body ends at byte {len(body) - start}, before {schema['name']} v{version} does"
        ) from None
    if pos != len(body):
        raise MessageError(
            f"{schema['name']} v{version} ends at byte {pos - start} "
            f"of a {len(body) - start}-byte record body"
        )
    return value
