"""Generated body decoders: one Python function per (record, version), built with exec.

`message.struct_reader` walks a list of reader closures per field; this module
writes the same walk out as straight-line code (fixed-width runs in one unpack,
UUIDs and strings inlined, tagged fields dispatched by `if tag == ...`), which is
what `metadata_log.records` does for the native msgpack records. It is the hot
path of `records.decode_value`; the closures stay the reference: the tests check
both give the same fields for every record type and version, and on any failure
the caller decodes again with the reference, whose error names the problem. So
this code only has to fail, not to explain.

Fixed-width fields and arrays of them (replicas, isr, leader), tagged or not, are
read inline; rarer shapes (arrays of structs or strings, bytes, nested structs,
other tagged values) by the reference's own field readers, called from the
generated code. `compile_tuple` writes the same decoder returning chosen fields as
a tuple (record_serde.native_values: a partition record's native fields without a
dict); it fails where the dict decoder would keep more (an unknown tag).
"""

from __future__ import annotations

import struct
from typing import Any

from metadata_log.kafka import message
from metadata_log.kafka.message import (
    FIXED_CHARS,
    UUID_CACHE_SIZE,
    UUID_TEXT_CACHE,
    MessageError,
    field_reader,
    in_range,
    read_uvarint,
    uuid_text,
)

Reader = message.Reader


class _Fail(MessageError):
    """The generated decoder gave up; the reference decoder says why."""


def _fail() -> None:
    raise _Fail("record body does not match its schema")


def _uuid_new(raw: bytes) -> str:
    if len(UUID_TEXT_CACHE) >= UUID_CACHE_SIZE:
        UUID_TEXT_CACHE.clear()
    text = UUID_TEXT_CACHE[raw] = uuid_text(raw)
    return text


_VARINT = """\
{i}n = buf[pos]
{i}if n < 0x80:
{i}    pos += 1
{i}else:
{i}    n, pos = _uv(buf, pos)
"""


class _Builder:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_uv": read_uvarint,
            "_fail": _fail,
            "_uuid_get": UUID_TEXT_CACHE.get,
            "_uuid_new": _uuid_new,
            "_struct": struct,
        }
        self.k = 0

    def const(self, value: Any) -> str:
        self.k += 1
        name = f"_c{self.k}"
        self.ns[name] = value
        return name

    def fixed_array(self, f: dict[str, Any], version: int, v: str, indent: str) -> list[str]:
        """Inline code reading the compact array `f` of fixed-width elements into `v`
        (one unpack, the unpacker cached per element count)."""
        char = FIXED_CHARS[f["type"][2:]]
        size = struct.calcsize(char)
        cache = self.const({})
        null = f"{v} = None" if in_range(version, f["nullable"]) else "_fail()"
        i = indent
        return [
            _VARINT.format(i=i).rstrip("\n"),
            f"{i}if n:",
            f"{i}    n -= 1",
            f"{i}    e = pos + n * {size}",
            f"{i}    if e > size: _fail()",
            f"{i}    u = {cache}.get(n)",
            f"{i}    if u is None:",
            f"{i}        u = {cache}[n] = _struct.Struct('>' + str(n) + {char!r}).unpack_from",
            f"{i}    {v} = u(buf, pos)",
            f"{i}    pos = e",
            f"{i}else:",
            f"{i}    {null}",
        ]

    def skip_uuid_array(self, f: dict[str, Any], version: int, indent: str) -> list[str]:
        """Inline code passing over the compact array of uuids `f`, checked as the
        reference reads it (its length; any 16 bytes are a uuid), not decoded."""
        null = "pass" if in_range(version, f["nullable"]) else "_fail()"
        i = indent
        return [
            _VARINT.format(i=i).rstrip("\n"),
            f"{i}if n:",
            f"{i}    pos += (n - 1) * 16",
            f"{i}    if pos > size: _fail()",
            f"{i}else:",
            f"{i}    {null}",
        ]

    def struct(
        self, fields: list[dict[str, Any]], version: int, returns: list[str] | None = None
    ) -> str:
        """Define the decoder of a struct at `version` in the namespace; return its name.

        With `returns`, the decoder gives a tuple of those fields (None for a field
        the version does not have) instead of the dict, and fails on a tag the
        schema does not know (the dict keeps it under _unknown_tagged_fields)."""
        present = [f for f in fields if in_range(version, f["versions"])]
        lines: list[str] = []
        var = {f["name"]: f"v{i}" for i, f in enumerate(present)}
        run: list[dict[str, Any]] = []

        def close_run() -> None:
            if not run:
                return
            st = struct.Struct(">" + "".join(FIXED_CHARS[f["type"]] for f in run))
            unpack = self.const(st.unpack_from)
            names = ", ".join(var[f["name"]] for f in run) + ","
            lines.append(f"    if pos + {st.size} > size: _fail()")
            lines.append(f"    {names} = {unpack}(buf, pos)")
            lines.append(f"    pos += {st.size}")
            run.clear()

        tagged = []
        for f in present:
            if f["tag"] is not None and in_range(version, f["tagged"]):
                tagged.append(f)
                continue
            if f["type"] in FIXED_CHARS:
                run.append(f)
                continue
            close_run()
            v = var[f["name"]]
            if returns is not None and f["name"] not in returns and f["type"] == "[]uuid":
                lines += self.skip_uuid_array(f, version, "    ")
            elif f["type"].startswith("[]") and f["type"][2:] in FIXED_CHARS:
                lines += self.fixed_array(f, version, v, "    ")
            elif f["type"] == "uuid":
                lines += [
                    "    raw = buf[pos:pos + 16]",
                    "    if len(raw) != 16: _fail()",
                    f"    {v} = _uuid_get(raw) or _uuid_new(raw)",
                    "    pos += 16",
                ]
            elif f["type"] == "string":
                nullable = in_range(version, f["nullable"])
                lines.append(_VARINT.format(i="    ").rstrip("\n"))
                lines += [
                    "    if n:",
                    "        e = pos + n - 1",
                    "        if e > size: _fail()",
                    f"        {v} = buf[pos:e].decode('utf-8')",
                    "        pos = e",
                    "    else:",
                    f"        {v} = None" if nullable else "        _fail()",
                ]
            else:
                reader = self.const(field_reader(f, version))
                lines.append(f"    {v}, pos = {reader}(buf, pos)")
        close_run()
        # The tagged-field section.
        lines.append(_VARINT.format(i="    ").rstrip("\n"))
        for f in tagged:
            lines.append(f"    {var[f['name']]} = {self.const(f['default'])}")
        lines.append("    unknown = None")
        lines.append("    for _ in range(n):")
        lines.append(_VARINT.format(i="        ").rstrip("\n").replace("n = buf", "tag = buf", 1)
                     .replace("if n <", "if tag <", 1).replace("n, pos", "tag, pos", 1))  # fmt: skip
        lines.append(_VARINT.format(i="        ").rstrip("\n"))
        lines.append("        end = pos + n")
        lines.append("        if end > size: _fail()")
        keyword = "if"
        for f in tagged:
            lines.append(f"        {keyword} tag == {f['tag']}:")
            v = var[f["name"]]
            if f["type"].startswith("[]") and f["type"][2:] in FIXED_CHARS:
                lines += self.fixed_array(f, version, v, "            ")
                lines.append("            if pos != end: _fail()")
            elif f["type"] in FIXED_CHARS and f["type"] != "bool":
                st = struct.Struct(">" + FIXED_CHARS[f["type"]])
                lines.append(f"            if end - pos != {st.size}: _fail()")
                lines.append(f"            {v}, = {self.const(st.unpack_from)}(buf, pos)")
            elif returns is not None and f["name"] not in returns and f["type"] == "[]uuid":
                lines += self.skip_uuid_array(f, version, "            ")
                lines.append("            if pos != end: _fail()")
            else:
                reader = self.const(field_reader(f, version))
                lines.append(f"            {var[f['name']]}, used = {reader}(buf, pos)")
                lines.append("            if used != end: _fail()")
            keyword = "elif"
        if tagged:
            lines.append("        else:")
            indent = "            "
        else:
            indent = "        "
        if returns is None:
            lines.append(f"{indent}if unknown is None: unknown = {{}}")
            lines.append(f"{indent}unknown[tag] = bytes(buf[pos:end]).hex()")
        else:
            lines.append(f"{indent}_fail()")
        lines.append("        pos = end")
        if returns is None:
            items = ", ".join(f"{f['name']!r}: {var[f['name']]}" for f in present)
            lines.append(f"    out = {{{items}}}")
            lines.append("    if unknown: out['_unknown_tagged_fields'] = unknown")
            lines.append("    return out, pos")
        else:
            items = "".join(f"{var.get(name, 'None')}, " for name in returns)
            lines.append(f"    return ({items}), pos")
        self.k += 1
        name = f"_struct{self.k}"
        # `size`: the body's length, looked up once
        src = f"def {name}(buf, pos):\n    size = len(buf)\n" + "\n".join(lines) + "\n"
        exec(compile(src, f"<kafka decoder {name}>", "exec"), self.ns)  # noqa: S102
        return name


def compile_message(schema: dict[str, Any], version: int) -> Reader:
    """The generated body decoder of `schema` at `version`: (buf, pos) -> (fields, pos)."""
    builder = _Builder()
    name = builder.struct(schema["fields"], version)
    return builder.ns[name]  # type: ignore[no-any-return]


def compile_tuple(schema: dict[str, Any], version: int, names: list[str]) -> Reader:
    """A generated body decoder that gives the top-level fields `names` as a tuple
    (None for a field the version does not have): (buf, pos) -> (values, pos).
    For the records read by the million: no dict per record. It fails (MessageError)
    on anything the dict decoder would keep or explain, an unknown tag included."""
    builder = _Builder()
    name = builder.struct(schema["fields"], version, returns=names)
    return builder.ns[name]  # type: ignore[no-any-return]
