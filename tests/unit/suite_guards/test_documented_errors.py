"""The error codes a controller answers with (`kraft.controller.errors.HTTP_STATUS`,
which ApiError refuses to go beyond) are DESIGN 1.2's error table, with their
statuses: a code the table lacks reaches a client undocumented."""

from __future__ import annotations

from kraft.controller.errors import HTTP_STATUS
from tests.design_doc import DESIGN, contract_errors


def documented_errors(text: str) -> dict[str, set[int]]:
    """Error code -> the statuses DESIGN 1.2's table gives it."""
    out: dict[str, set[int]] = {}
    for status, code in contract_errors(text):
        out.setdefault(code, set()).add(status)
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
