"""The error codes a controller answers with (`kraft.controller.errors.HTTP_STATUS`,
which ApiError refuses to go beyond) are DESIGN 1.2's error table, with their
statuses: a code the table lacks reaches a client undocumented."""

from __future__ import annotations

import re
from pathlib import Path

from kraft.controller.errors import HTTP_STATUS

DESIGN = Path(__file__).resolve().parents[3] / "docs" / "DESIGN.md"


def documented_errors(text: str) -> dict[str, set[int]]:
    """Error code -> the statuses DESIGN 1.2's table gives it (`401 / 403`: both)."""
    table = text[text.index("| status | error codes |") :]
    out: dict[str, set[int]] = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        status_cell, codes_cell = line.split("|")[1:3]
        statuses = {int(s) for s in re.findall(r"\d{3}", status_cell)}
        # a code is a word of capitals in backticks, outside the remarks in parentheses
        for code in re.findall(r"`([A-Z][A-Z_]+)`", re.sub(r"\([^)]*\)", "", codes_cell)):
            out.setdefault(code, set()).update(statuses)
    return out


def test_the_error_codes_are_the_contracts() -> None:
    documented = documented_errors(DESIGN.read_text())
    undocumented = sorted(set(HTTP_STATUS) - set(documented))
    unknown = sorted(set(documented) - set(HTTP_STATUS))
    wrong = sorted(
        (c, s, documented[c])
        for c, s in HTTP_STATUS.items()
        if c in documented and s not in documented[c]
    )
    assert not undocumented, f"answered, not in DESIGN 1.2: {undocumented}"
    assert not unknown, f"in DESIGN 1.2, never answered: {unknown}"
    assert not wrong, f"status differs from DESIGN 1.2: {wrong}"


def test_a_status_row_is_read() -> None:
    text = (
        "| status | error codes |\n|---|---|\n| 400 | `A_B` (`x.y`, `NOT_A_CODE`), `CC` |\n"
        "| 401 / 403 | `DD` |\n| 504 | `A_B` |\n\nafter\n| 500 | `EE` |\n"
    )
    assert documented_errors(text) == {"A_B": {400, 504}, "CC": {400}, "DD": {401, 403}}
