"""Generate metadata_log/kafka/schemas.py from Apache Kafka's JSON message schemas.

Usage::

    python tools/gen_kafka_schemas.py --source "apache/kafka@COMMIT" SCHEMA_DIR [SCHEMA_DIR ...] \
        > metadata_log/kafka/schemas.py

Each SCHEMA_DIR is a local copy of apache/kafka's
``metadata/src/main/resources/common/metadata`` (the metadata records) or
``clients/src/main/resources/common/message`` (only the KRaft control records
are taken from it). The output is data, not code: for each record its name,
api key (or control record type), valid versions and fields, each field with its
snake_case name, type, version range, nullable range, tag and default. The
decoder (`metadata_log.kafka.message`) and the tests' encoder read these tables.

Schemas are JSON with // comments; we keep only the facts the wire format needs
(`about` texts, entity types and map keys are dropped).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from pprint import pformat
from typing import Any

# Control record type ids (ControlRecordType in Kafka) of the KRaft control records.
CONTROL_TYPES = {
    "LeaderChangeMessage": 2,
    "SnapshotHeaderRecord": 3,
    "SnapshotFooterRecord": 4,
    "KRaftVersionRecord": 5,
    "VotersRecord": 6,
}


def snake(name: str) -> str:
    """Kafka's CamelCase field name in snake_case (KRaftVersion -> kraft_version)."""
    name = name.replace("KRaft", "Kraft")
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def version_range(spec: str | None) -> tuple[int, int | None] | None:
    """'0+' -> (0, None); '1-3' -> (1, 3); '2' -> (2, 2); 'none'/None -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return (int(spec[:-1]), None)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def default_of(field: dict[str, Any]) -> Any:
    """The field's default as a Python value (a tagged field equal to it is not written)."""
    ftype = field["type"]
    raw = field.get("default")
    if raw == "null":
        return None
    if ftype.startswith("[]"):
        return ()
    if ftype in ("int8", "int16", "int32", "int64", "uint16"):
        return int(raw, 0) if raw is not None else 0
    if ftype == "float64":
        return float(raw) if raw is not None else 0.0
    if ftype == "bool":
        return raw == "true" if raw is not None else False
    if ftype == "string":
        return raw if raw is not None else ""
    if ftype == "bytes":
        return b""
    if ftype == "uuid":
        return "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID
    return None  # a struct: no default


def convert_fields(fields: list[dict[str, Any]], structs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        ftype = f["type"]
        elem = ftype[2:] if ftype.startswith("[]") else ftype
        entry: dict[str, Any] = {
            "name": snake(f["name"]),
            "kafka_name": f["name"],
            "type": ftype,
            "versions": version_range(f["versions"]),
            "nullable": version_range(f.get("nullableVersions")),
            "tag": int(f["tag"]) if "tag" in f else None,
            "tagged": version_range(f.get("taggedVersions")),
            "default": default_of(f),
        }
        children = f.get("fields") or (structs[elem]["fields"] if elem in structs else None)
        if children is not None:
            entry["fields"] = convert_fields(children, structs)
        out.append(entry)
    return out


def load(path: Path) -> dict[str, Any]:
    text = "\n".join(
        line for line in path.read_text().splitlines() if not line.strip().startswith("//")
    )
    return json.loads(text)


def convert(schema: dict[str, Any]) -> dict[str, Any]:
    structs = {s["name"]: s for s in schema.get("commonStructs", [])}
    lo, hi = version_range(schema["validVersions"])  # type: ignore[misc]
    flexible = version_range(schema["flexibleVersions"])
    if flexible != (0, None):
        raise SystemExit(f"{schema['name']}: only flexible-from-0 schemas are expected")
    return {
        "name": schema["name"],
        "versions": (lo, hi),
        "fields": convert_fields(schema["fields"], structs),
    }


def main(dirs: list[str], source: str) -> str:
    metadata: dict[int, Any] = {}
    control: dict[int, Any] = {}
    sources = []
    for d in dirs:
        for path in sorted(Path(d).glob("*.json")):
            schema = load(path)
            if schema.get("type") == "metadata":
                metadata[int(schema["apiKey"])] = convert(schema)
                sources.append(path.name)
            elif schema["name"] in CONTROL_TYPES:
                control[CONTROL_TYPES[schema["name"]]] = convert(schema)
                sources.append(path.name)
    return (
        '"""Kafka metadata and KRaft control record schemas, as data.\n\n'
        "GENERATED by tools/gen_kafka_schemas.py from Apache Kafka's JSON schema files\n"
        f"of {source}\n"
        f"({', '.join(sorted(sources))}); do not edit by hand.\n\n"
        "Field entries: name (snake_case), kafka_name, type, versions (lo, hi or None),\n"
        "nullable (version range or None), tag and tagged (version range) for tagged\n"
        "fields, default, and fields for structs.\n"
        '"""\n\n'
        "from typing import Any\n\n"
        f"METADATA_SCHEMAS: dict[int, Any] = {pformat(dict(sorted(metadata.items())), width=100, sort_dicts=False)}\n\n"
        f"CONTROL_SCHEMAS: dict[int, Any] = {pformat(dict(sorted(control.items())), width=100, sort_dicts=False)}\n"
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--source":
        raise SystemExit(__doc__)
    sys.stdout.write(main(args[2:], args[1]))
