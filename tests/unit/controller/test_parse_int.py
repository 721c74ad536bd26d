"""An integer from a path or a query string (`requests.parse_int`): ASCII
decimal digits within a range, as Kafka's tools read one; Python's own int()
takes more than that."""

from __future__ import annotations

import pytest

from kraft.controller.errors import ApiError
from kraft.controller.requests import INT64_MAX, parse_int


@pytest.mark.parametrize("text", ["0", "7", "-1", "+3", str(INT64_MAX), str(-INT64_MAX - 1)])
def test_decimal_integers_are_read(text: str) -> None:
    assert parse_int(text, "x") == int(text)


@pytest.mark.parametrize(
    "text",
    ["", " 5", "5 ", "5\n", "1_000", "\u0665", "0x10", "1e3", "5.0", "--1", "9" * 20, "abc"],
)
def test_anything_else_is_refused_by_name(text: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_int(text, "query parameter limit")
    assert e.value.code == "INVALID_REQUEST"
    assert e.value.message.startswith("query parameter limit must be an integer")


def test_the_range_is_checked_and_named() -> None:
    assert parse_int("10", "limit", 1, 10) == 10
    for text in ("0", "11", str(INT64_MAX)):
        with pytest.raises(ApiError, match=r"limit must be in \[1, 10\], got"):
            parse_int(text, "limit", 1, 10)
