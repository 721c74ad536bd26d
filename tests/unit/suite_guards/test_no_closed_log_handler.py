"""A test that runs a CLI's main() in-process leaves no root handler on its closed
capture stream (tests/conftest.py `_root_logging_restored`): the next INFO message
of any library, py4j's included, printed "--- Logging error ---" mid-run."""

from __future__ import annotations

import logging

import pytest

from kraft.logs import setup_logging


def test_a_cli_sets_up_logging_on_the_captured_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("text", "INFO")
    logging.getLogger("kraft.test").info("to the captured stderr")
    assert "to the captured stderr" in capsys.readouterr().err


def test_the_next_test_finds_no_handler_on_a_closed_stream() -> None:
    root = logging.getLogger()
    closed = [h for h in root.handlers if getattr(getattr(h, "stream", None), "closed", False)]
    assert closed == []
    assert root.level == logging.WARNING  # and the root level is Python's default again
