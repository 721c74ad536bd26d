"""Reading the contract's tables out of docs/DESIGN.md, for the tests that hold the
code to them (one reader per table, so two tests never read one table two ways)."""

from __future__ import annotations

import re
from pathlib import Path

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "DESIGN.md"


def section(text: str, heading: str) -> str:
    """The part of a Markdown `text` under the heading line `heading` (its `#`s
    included): up to the next heading of its level or above, or the end. Its
    subsections (more `#`s) are part of it; a `#` line in a fenced code block (a
    shell comment) is no heading."""
    lines = text[text.index(heading + "\n") :].split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    fenced = False
    for i, line in enumerate(lines[1:], 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            return "\n".join(lines[:i])
    return "\n".join(lines)


def contract_errors(text: str | None = None) -> list[tuple[int, str]]:
    """(HTTP status, error code) of every row of DESIGN 1.2's error table (`401 /
    403`: one pair for each). A code is a word of capitals in backticks outside the
    remarks in parentheses (which may quote a setting or a character, as `_`)."""
    if text is None:
        text = DESIGN.read_text()
    table = text[text.index("| status | error codes |") :]
    out: list[tuple[int, str]] = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        status_cell, codes_cell = line.split("|")[1:3]
        codes = re.findall(r"`([A-Z][A-Z_]+)`", re.sub(r"\([^)]*\)", "", codes_cell))
        for status in re.findall(r"\d{3}", status_cell):
            out += [(int(status), code) for code in codes]
    return out
