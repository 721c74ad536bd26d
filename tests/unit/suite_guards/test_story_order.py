"""Under a random order, a story module's steps keep their file order, and every
other module's tests are still shuffled (so the random run proves something)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

STEPS = 8


def _module(story: bool) -> str:
    mark = "pytestmark = pytest.mark.story\n" if story else ""
    steps = "".join(f"\ndef test_step_{i}():\n    DONE.append({i})\n" for i in range(STEPS))
    check = (
        "\ndef test_zz_order():\n"
        f"    if {story}:\n"
        f"        assert DONE == list(range({STEPS})), DONE\n"
        "    print('ORDER', DONE)\n"
    )
    return f"import pytest\n{mark}DONE = []\n{steps}{check}"


def _run(pytester: pytest.Pytester, story: bool, seed: int) -> pytest.RunResult:
    pytester._monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini("[pytest]\nmarkers =\n    story: steps in file order\n")
    pytester.makepyfile(test_inner=_module(story))
    return pytester.runpytest_subprocess(
        "-p", "tests.story_order", "-p", "randomly", f"--randomly-seed={seed}",
        "-p", "no:cacheprovider", "-q", "-s",
    )  # fmt: skip


def test_story_steps_run_in_file_order_under_any_seed(pytester: pytest.Pytester) -> None:
    for seed in (1, 2, 3):
        r = _run(pytester, story=True, seed=seed)
        assert r.ret == pytest.ExitCode.OK, r.stdout.str()


def test_other_modules_are_still_shuffled(pytester: pytest.Pytester) -> None:
    orders = set()
    for seed in (1, 2, 3):
        r = _run(pytester, story=False, seed=seed)
        assert r.ret == pytest.ExitCode.OK, r.stdout.str()
        line = next(x for x in r.stdout.lines if "ORDER" in x)
        orders.add(line[line.index("ORDER") :])
    assert len(orders) > 1 or orders != {f"ORDER {list(range(STEPS))}"}, orders
