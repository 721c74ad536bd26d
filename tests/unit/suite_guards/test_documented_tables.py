"""The Spark tables of the contract (DESIGN 1.6) have at least the columns it
lists, and their enumerated values are the ones the replay writes.

`spark_replay.tables` is the one definition of the history tables' columns (Spark
and the one-process replay both write from it; tests/spark compares what they
write), and `decode.BASE_FIELDS` the records table's.
"""

from __future__ import annotations

import re

from spark_replay.decode import BASE_FIELDS
from spark_replay.segment_replay import CAUSES
from spark_replay.tables import TABLE_COLUMNS
from tests.design_doc import DESIGN, section


def documented_tables(text: str) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Per table of DESIGN 1.6's table: its columns, and the values a column
    enumerates in parentheses (`state (`FENCED`, ...)`)."""
    part = section(text, "### 1.6 Spark replay output")
    out: dict[str, tuple[list[str], dict[str, list[str]]]] = {}
    for line in part.splitlines():
        m = re.match(r"^\| `(\w+)` \| [^|]+ \| (.+) \|$", line)
        if m is None:
            continue
        cell = m.group(2)
        values = {
            col: re.findall(r"`(\w+)`", inner)
            for col, inner in re.findall(r"(\w+) \(([^)]*)\)", cell)
        }
        columns = [c.strip().split(" ")[0] for c in re.sub(r"\([^)]*\)", "", cell).split(",")]
        out[m.group(1)] = (columns, values)
    return out


def test_every_documented_column_is_written() -> None:
    tables = documented_tables(DESIGN.read_text())
    assert set(tables) == {"records", *TABLE_COLUMNS}, sorted(tables)
    written = {"records": tuple(f.name for f in BASE_FIELDS), **TABLE_COLUMNS}
    for name, (columns, _) in tables.items():
        missing = [c for c in columns if c not in written[name]]
        assert not missing, f"{name}: DESIGN 1.6 lists {missing}, not written"


def test_the_documented_causes_are_the_replays() -> None:
    _, values = documented_tables(DESIGN.read_text())["leader_elections"]
    assert sorted(values["cause"]) == sorted(CAUSES.to_pylist())
    assert values["election_type"] == ["ISR", "ELR", "UNCLEAN"]


def test_a_table_row_is_read_as_columns_and_values() -> None:
    text = (
        "### 1.6 Spark replay output\n| table | per | columns |\n|---|---|---|\n"
        "| `t` | row | a, b (`X`, `Y`; null when none), c |\n## Part 2\n| `u` | r | d |\n"
    )
    assert documented_tables(text) == {"t": (["a", "b", "c"], {"b": ["X", "Y"]})}
