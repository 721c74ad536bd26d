"""The records of the contract (DESIGN 1.4) are the ones `metadata_log.records`
encodes: every record type under its Kafka api key (the control records under
their control type), with every field it has, and no field it lacks."""

from __future__ import annotations

import re
from dataclasses import fields

from metadata_log.records import ALL_RECORD_TYPES, CONTROL_RECORD_TYPES
from tests.design_doc import DESIGN, section


def documented_records(text: str) -> dict[str, tuple[int | None, bool, str]]:
    """Record name -> (its id, or None where the row gives none; whether it is a
        control record; the text of its fields) from DESIGN 1.4's table. A row of
        several records lists their ids with commas and their fields with " / "; a
    parenthesis is a remark, not a name."""
    part = section(text, "### 1.4 Metadata records")
    out: dict[str, tuple[int | None, bool, str]] = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or not re.match(r"^(control)?[ \d,]*$", cells[0]) or not cells[0]:
            continue
        control = cells[0].startswith("control")
        ids = [int(i) for i in re.findall(r"\d+", cells[0])]
        names = [n.strip() for n in re.sub(r"\([^)]*\)", "", cells[1]).split(",")]
        # records at the end of a row without a part of their own have no fields
        parts = [p.strip() for p in cells[2].split(" / ")]
        parts += [""] * (len(names) - len(parts))
        for i, name in enumerate(names):
            out[name] = (ids[i] if len(ids) == len(names) else None, control, parts[i])
    return out


def test_every_record_is_documented_with_its_id_and_fields() -> None:
    documented = documented_records(DESIGN.read_text())
    problems = []
    for cls in ALL_RECORD_TYPES:
        name = cls.__name__
        if name not in documented:
            problems.append(f"{name}: not in DESIGN 1.4")
            continue
        rid, control, text = documented[name]
        if control != (cls in CONTROL_RECORD_TYPES):
            problems.append(f"{name}: control is {cls in CONTROL_RECORD_TYPES} in the code")
        if rid is not None and rid != cls.TYPE:
            problems.append(f"{name}: id {rid} in DESIGN 1.4, {cls.TYPE} in the code")
        names = {f.name for f in fields(cls)}
        # remarks in parentheses and an element's fields in braces are not its own
        words = set(re.findall(r"\b[a-z][a-z_]*\b", re.sub(r"\([^)]*\)|\{[^}]*\}", "", text)))
        problems += [f"{name}: field {f} not documented" for f in sorted(names - words)]
        problems += [
            f"{name}: DESIGN 1.4 names {w}, not a field"
            for w in sorted(w for w in words - names if "_" in w)
        ]
    unknown = set(documented) - {c.__name__ for c in ALL_RECORD_TYPES}
    assert not problems and not unknown, (problems, sorted(unknown))


def test_a_row_of_several_records_splits_ids_and_fields() -> None:
    text = (
        "### 1.4 Metadata records\n| id | record | fields |\n|---|---|---|\n"
        "| 23, 24 | BeginX, EndX | name / — |\n"
        "| control | Header, Footer (KIP-0) | last_time (ms) |\n"
        "### 1.5 Files\n"
    )
    assert documented_records(text) == {
        "BeginX": (23, False, "name"),
        "EndX": (24, False, "—"),
        "Header": (None, True, "last_time (ms)"),
        "Footer": (None, True, ""),
    }
