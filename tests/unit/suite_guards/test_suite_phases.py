"""`make test` runs the suite in two runs (Makefile PARALLEL_TESTS, SERIAL_TESTS):
a folder of tests in neither would be left out of CI without a word."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TESTS = REPO / "tests"


def _make_list(name: str) -> list[str]:
    text = (REPO / "Makefile").read_text()
    m = re.search(rf"^{name} := (.+)$", text, re.MULTILINE)
    assert m, f"Makefile has no {name}"
    return m.group(1).split()


def _test_folders() -> set[str]:
    """tests/<folder> for each top folder of tests/ that holds a test file."""
    return {
        f"tests/{p.relative_to(TESTS).parts[0]}"
        for p in TESTS.rglob("test_*.py")
        if len(p.relative_to(TESTS).parts) > 1
    }


def test_every_folder_of_tests_is_in_exactly_one_run() -> None:
    parallel, serial = _make_list("PARALLEL_TESTS"), _make_list("SERIAL_TESTS")
    assert not set(parallel) & set(serial), "a folder in both runs would run twice"
    assert set(parallel) | set(serial) == _test_folders()
    for folder in (*parallel, *serial):
        assert (REPO / folder).is_dir(), folder
    # no test file directly in tests/ (neither run names it)
    assert not list(TESTS.glob("test_*.py"))


def test_make_test_runs_both_and_fails_if_either_fails() -> None:
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\ntest: install\n", 1)[1].split("\n\n", 1)[0]
    assert "-n $(TEST_WORKERS) --dist loadfile $(PARALLEL_TESTS) || rc=$$?" in recipe
    assert "$(SERIAL_TESTS) || rc=" in recipe
    assert recipe.rstrip().endswith("exit $$rc")
