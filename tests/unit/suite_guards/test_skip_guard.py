"""The suite fails when a test skips for a reason that is not on the allow-list."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.skip_guard import ALLOWED_SKIP_REASONS

ROOT = Path(__file__).resolve().parents[3]

ALLOWED = next(iter(ALLOWED_SKIP_REASONS))


def _run(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester._monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_inner=body)
    return pytester.runpytest_subprocess("-p", "tests.skip_guard", "-q", "-p", "no:cacheprovider")


def test_a_skip_for_a_missing_tool_fails_the_run_and_names_the_test(pytester) -> None:
    r = _run(
        pytester,
        """
import pytest

def test_runs():
    pass

def test_needs_a_tool():
    pytest.skip("needs a tool that is not installed")  # allow-listed: the guard's own test input
""",
    )
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(
        [
            "*skipped without an allowed reason*",
            "*test_needs_a_tool: needs a tool that is not installed",
        ]
    )


def test_an_allowed_skip_passes(pytester) -> None:
    r = _run(
        pytester,
        f"""
import pytest

def test_runs():
    pass

def test_by_design():
    pytest.skip({ALLOWED!r})  # allow-listed: the guard's own test input
""",
    )
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()


def test_a_module_level_skip_fails_the_run_too(pytester) -> None:
    r = _run(
        pytester,
        """
import pytest

pytest.skip("Spark tests need Java", allow_module_level=True)  # allow-listed: the guard's own test input

def test_never_runs():
    pass
""",
    )
    assert r.ret == pytest.ExitCode.TESTS_FAILED, r.stdout.str()
