"""Write native records in Apache Kafka's format: the Kafka side of one story.

`write_kafka_log(native_dir, out_dir)` rewrites a native log folder (segments and
`.checkpoint` snapshots, as `spark_replay.generator` or a controller writes it)
batch for batch at the same offsets, epochs and times, as Kafka would have
written it: record batch v2 with CRC-32C, metadata records framed with their api
key and version, control records with their control key. So the same seeded story
exists in both formats and the two histories can be compared row for row.

Record versions are those a Kafka 3.7 cluster (metadata.version 3.7-IV4)
writes: RegisterBrokerRecord v3, PartitionRecord and PartitionChangeRecord v1
(with KIP-858 directories), BrokerRegistrationChangeRecord v1; the rest v0.
`encode_message` is the production encoder; the tests check it byte for byte
against a separate encoder of their own, and both against the decoder.

CLI: ``python -m metadata_log.kafka.writer NATIVE_DIR OUT_DIR [--compression C]``.
"""

from __future__ import annotations

import argparse
import base64
import struct
import sys
import uuid
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import crc32c

from metadata_log.batch import decode_records, iter_headers
from metadata_log.kafka.batch import ATTR_CONTROL, HEADER, MAGIC
from metadata_log.kafka.message import in_range, uuid_text
from metadata_log.kafka.record_serde import (
    CONTROL_KEY,
    FRAME_VERSION,
    SECURITY_PROTOCOLS,
    ZERO_UUID,
)
from metadata_log.kafka.schemas import CONTROL_SCHEMAS, METADATA_SCHEMAS
from metadata_log.records import Record, is_control
from metadata_log.replay import metadata_dir, segment_files, snapshot_files

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_PROTOCOL_IDS = {name: pid for pid, name in SECURITY_PROTOCOLS.items()}
_SCHEMA_BY_NAME = {s["name"]: (k, s) for k, s in METADATA_SCHEMAS.items()}
_CONTROL_BY_NAME = {s["name"]: (k, s) for k, s in CONTROL_SCHEMAS.items()}
_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "float64": struct.Struct(">d"),
}

# ------------------------------------------------------------------ message encoding


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    """Zig-zag varint/varlong."""
    return uvarint((n << 1) ^ (n >> 63))


def uuid_bytes(text: str) -> bytes:
    """16 bytes of a UUID given in Kafka's base64 form or the dashed/hex form."""
    if len(text) == 22:
        return base64.urlsafe_b64decode(text + "==")
    return uuid.UUID(text).bytes


def _encode_value(field: dict[str, Any], version: int, value: Any) -> bytes:
    ftype: str = field["type"]
    if ftype.startswith("[]"):
        if value is None:
            if not in_range(version, field["nullable"]):
                raise ValueError(f"{field['name']} is not nullable at version {version}")
            return b"\x00"
        element = {**field, "type": ftype[2:], "nullable": None}
        if "fields" in field:
            parts = [encode_struct(field["fields"], version, v) for v in value]
        else:
            parts = [_encode_value(element, version, v) for v in value]
        return uvarint(len(value) + 1) + b"".join(parts)
    if ftype in _FIXED:
        return _FIXED[ftype].pack(value)
    if ftype == "bool":
        return b"\x01" if value else b"\x00"
    if ftype == "uuid":
        return uuid_bytes(value)
    if ftype in ("string", "bytes"):
        if value is None:
            if not in_range(version, field["nullable"]):
                raise ValueError(f"{field['name']} is not nullable at version {version}")
            return b"\x00"
        raw = value.encode("utf-8") if ftype == "string" else bytes(value)
        return uvarint(len(raw) + 1) + raw
    return encode_struct(field["fields"], version, value)


def encode_struct(fields: list[dict[str, Any]], version: int, values: dict[str, Any]) -> bytes:
    """A message or struct body: fields of `version` in order, then tagged fields by tag."""
    out = []
    tags: list[tuple[int, bytes]] = []
    for f in fields:
        if not in_range(version, f["versions"]):
            continue
        value = values.get(f["name"], f["default"])
        if f["tag"] is not None and in_range(version, f["tagged"]):
            if value != f["default"]:  # a tagged field at its default is not written
                tags.append((f["tag"], _encode_value(f, version, value)))
        else:
            out.append(_encode_value(f, version, value))
    out.append(uvarint(len(tags)))
    for tag, data in sorted(tags):
        out.append(uvarint(tag) + uvarint(len(data)) + data)
    return b"".join(out)


def encode_metadata_value(name: str, version: int, fields: dict[str, Any]) -> bytes:
    api_key, schema = _SCHEMA_BY_NAME[name]
    body = encode_struct(schema["fields"], version, fields)
    return uvarint(FRAME_VERSION) + uvarint(api_key) + uvarint(version) + body


def encode_control(name: str, fields: dict[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) of a KRaft control record (written at version 0, as Kafka does)."""
    ctype, schema = _CONTROL_BY_NAME[name]
    return CONTROL_KEY.pack(0, ctype), encode_struct(schema["fields"], 0, fields)


# ------------------------------------------------------------------ batches


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        c = zlib.compressobj(wbits=31)
        return c.compress(data) + c.flush()
    import cramjam

    if codec == 2:  # xerial framing, as Kafka's snappy stream writes it
        block = bytes(cramjam.snappy.compress_raw(data))
        return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def encode_batch(
    base_offset: int,
    leader_epoch: int,
    timestamp: int,
    records: Sequence[tuple[bytes | None, bytes]],
    control: bool = False,
    compression: str = "none",
) -> bytes:
    """A record batch v2 of (key, value) records, all with `timestamp`."""
    body = []
    for i, (key, value) in enumerate(records):
        rec = (
            b"\x00"
            + varint(0)
            + varint(i)
            + (varint(-1) if key is None else varint(len(key)) + key)
            + varint(len(value))
            + value
            + varint(0)
        )
        body.append(varint(len(rec)) + rec)
    codec = CODECS[compression]
    payload = _compress(codec, b"".join(body))
    attributes = codec | (ATTR_CONTROL if control else 0)
    n = len(records)
    head = HEADER.pack(
        base_offset, HEADER.size - 12 + len(payload), leader_epoch, MAGIC, 0,
        attributes, n - 1, timestamp, timestamp, -1, -1, -1, n,
    )  # fmt: skip
    crc = crc32c.crc32c(head[21:] + payload)
    return head[:17] + struct.pack(">I", crc) + head[21:] + payload


# ------------------------------------------------------------------ native -> Kafka


def _voter_fields(v: Any) -> dict[str, Any]:
    host, _, port = v.url.rpartition("/")[2].rpartition(":")
    return {
        "voter_id": v.voter_id,
        "voter_directory_id": uuid_text(uuid_bytes(v.directory_id))
        if v.directory_id
        else ZERO_UUID,
        "endpoints": ({"name": "CONTROLLER", "host": host, "port": int(port or 0)},),
        "kraft_version_feature": {"min_supported_version": 0, "max_supported_version": 1},
    }


def to_kafka(rec: Record) -> tuple[str, int, dict[str, Any]]:
    """(Kafka record name, version, fields) of a native record, the fields as the
    decoder gives them (UUIDs in Kafka's base64 text)."""
    name = type(rec).__name__
    match name:
        case "RegisterBrokerRecord":
            return name, 3, {
                "broker_id": rec.broker_id,
                "incarnation_id": uuid_text(uuid_bytes(rec.incarnation_id)),
                "broker_epoch": rec.broker_epoch,
                "end_points": tuple(
                    {"name": e.name, "host": e.host, "port": e.port,
                     "security_protocol": _PROTOCOL_IDS[e.security_protocol]}
                    for e in rec.endpoints
                ),
                "features": tuple(
                    {"name": f.name, "min_supported_version": f.min_supported_version,
                     "max_supported_version": f.max_supported_version}
                    for f in rec.features
                ),
                "rack": rec.rack,
                "fenced": rec.fenced,
                "in_controlled_shutdown": rec.in_controlled_shutdown,
            }  # fmt: skip
        case "PartitionRecord":
            fields = _fields(rec)
            fields["directories"] = (ZERO_UUID,) * len(rec.replicas)
            return name, *_with_elr(fields, ())
        case "PartitionChangeRecord":
            fields = _fields(rec)
            if rec.replicas is not None:
                fields["directories"] = (ZERO_UUID,) * len(rec.replicas)
            return name, *_with_elr(fields, None)
        case "BrokerRegistrationChangeRecord":
            return name, 1, _fields(rec)
        case "BeginTransactionRecord":
            return name, 0, {"name": rec.name or None}
        case "AbortTransactionRecord":
            return name, 0, {"reason": rec.reason or None}
        case "LeaderChangeMessage":
            return name, 0, {
                "leader_id": rec.leader_id,
                "voters": tuple({"voter_id": v} for v in rec.voters),
                "granting_voters": tuple({"voter_id": v} for v in rec.granting_voters),
            }  # fmt: skip
        case "SnapshotHeader":
            return (
                "SnapshotHeaderRecord",
                0,
                {"last_contained_log_timestamp": rec.last_contained_log_time},
            )
        case "SnapshotFooter":
            return "SnapshotFooterRecord", 0, {}
        case "KRaftVersionRecord":
            return name, 0, {"kraft_version": rec.kraft_version}
        case "VotersRecord":
            return name, 0, {"voters": tuple(_voter_fields(v) for v in rec.voters)}
    return name, 0, _fields(rec)


def _fields(rec: Record) -> dict[str, Any]:
    return {n: getattr(rec, n) for n in rec.__dataclass_fields__}


_ELR_FIELDS = ("eligible_leader_replicas", "last_known_elr")


def _with_elr(fields: dict[str, Any], unset: Any) -> tuple[int, dict[str, Any]]:
    """(version, fields) of a partition record: v1 as a 3.7 cluster writes it, or
    v2 (KIP-966's tagged ELR fields, Kafka 4) when the record carries them."""
    if all(fields[f] == unset for f in _ELR_FIELDS):
        for f in _ELR_FIELDS:
            del fields[f]
        return 1, fields
    return 2, fields


def encode_native_batch(
    base_offset: int,
    leader_epoch: int,
    append_time_ms: int,
    records: Iterable[Record],
    control: bool,
    compression: str = "none",
) -> bytes:
    """One native batch as the Kafka batch that means the same."""
    pairs: list[tuple[bytes | None, bytes]] = []
    for rec in records:
        name, version, fields = to_kafka(rec)
        if is_control(rec):
            pairs.append(encode_control(name, fields))
        else:
            pairs.append((None, encode_metadata_value(name, version, fields)))
    return encode_batch(base_offset, leader_epoch, append_time_ms, pairs, control, compression)


def convert_file(src: Path, dst: Path, compression: str = "none") -> int:
    """Rewrite one native segment or snapshot in Kafka's format; returns its record count."""
    data = src.read_bytes()
    count = 0
    with dst.open("wb") as out:
        for pos, h in iter_headers(data, str(src)):
            records = decode_records(data, pos, h, str(src))
            count += len(records)
            out.write(
                encode_native_batch(
                    h.base_offset, h.leader_epoch, h.append_time_ms, records, h.control, compression
                )
            )
    return count


def write_kafka_log(native_dir: str | Path, out_dir: str | Path, compression: str = "none") -> int:
    """The native log folder `native_dir` rewritten in Kafka's format under
    `out_dir`/__cluster_metadata-0 (file names kept); returns the records written."""
    src = metadata_dir(native_dir)
    dst = Path(out_dir) / "__cluster_metadata-0"
    dst.mkdir(parents=True, exist_ok=True)
    files = [p for _, _, p in snapshot_files(src)] + [p for _, p in segment_files(src)]
    return sum(convert_file(p, dst / p.name, compression) for p in files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metadata_log.kafka.writer",
        description="Rewrite a native metadata log folder in Apache Kafka's format.",
    )
    parser.add_argument("native_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--compression", choices=sorted(CODECS), default="none")
    args = parser.parse_args(argv)
    n = write_kafka_log(args.native_dir, args.out_dir, args.compression)
    print(f"wrote {n} records to {Path(args.out_dir) / '__cluster_metadata-0'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
