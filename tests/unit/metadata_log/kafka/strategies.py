"""Hypothesis strategies for Kafka record values, built from the schema tables."""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import strategies as st

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_UUID = st.binary(min_size=16, max_size=16).map(
    lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")
)


def _applies(version: int, spec: Any) -> bool:
    return spec is not None and spec[0] <= version and (spec[1] is None or version <= spec[1])


def field_values(field: dict[str, Any], version: int) -> st.SearchStrategy[Any]:
    kind = field["type"]
    nullable = _applies(version, field["nullable"])
    if kind.startswith("[]"):
        if "fields" in field:
            element = struct_values(field["fields"], version)
        else:
            element = field_values(dict(field, type=kind[2:], nullable=None, tag=None), version)
        values = st.lists(element, max_size=4).map(tuple)
    elif kind in _INTS:
        lo, hi = _INTS[kind]
        values = st.integers(lo, hi)
    elif kind == "float64":
        values = st.floats(allow_nan=False)
    elif kind == "bool":
        values = st.booleans()
    elif kind == "uuid":
        values = _UUID
    elif kind == "string":
        values = _TEXT
    elif kind == "bytes":
        values = st.binary(max_size=12)
    else:
        return struct_values(field["fields"], version)
    # Defaults get a fair share: a tagged field at its default is left off the wire.
    if field["tag"] is not None and field["default"] is not None:
        values = st.one_of(st.just(field["default"]), values)
    return st.one_of(st.none(), values) if nullable else values


def struct_values(fields: list[dict[str, Any]], version: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {f["name"]: field_values(f, version) for f in fields if _applies(version, f["versions"])}
    )
