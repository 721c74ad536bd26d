"""Running a simulator's seeds under pytest: chunks, a worker pool, one failure report.

Every seed suite shares it — tests/sim/test_sim.py (the Raft core's quorum),
test_figure8_sim.py and tests/dsim/test_dsim.py (the deployed controllers with
their brokers) — so they read the same environment and report failures the same
way:

    SIM_SEED=N        replay one seed in this process (SIM_TRACE=1 keeps an event trace)
    SIM_FIRST_SEED=K  start the range at K instead of 0
    SIM_WORKERS=1     run in this process (default: min(2, CPUs) forked workers)

Seeds run in chunks of CHUNK (one test each); a failing chunk lists every failing
seed with its replay command. A suite also adds up each run's statistics
(`seen`), so that a last test can check that the seeds reached what they are
meant to; that test calls `run_all`, so it sees the whole seed budget in any test order.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest

from tests.sim.simulator import InvariantViolation

CHUNK = 50
REPLAY = os.environ.get("SIM_SEED")
FIRST = int(os.environ.get("SIM_FIRST_SEED", "0"))
WORKERS = int(os.environ.get("SIM_WORKERS", str(min(2, os.cpu_count() or 1))))
TRACE = os.environ.get("SIM_TRACE") == "1"

Result = tuple[int, "dict[str, int] | None", "str | None"]


def _run(run_seed: Callable[[int], Any], seed: int) -> Result:
    """One seed in a worker: its statistics, or the failure as text (pickled back)."""
    try:
        return seed, run_seed(seed).stats, None
    except InvariantViolation as e:
        return seed, None, str(e)
    except Exception as e:  # anything else is a failure of that seed too
        return seed, None, f"seed {seed}: {type(e).__name__}: {e} (replay with SIM_SEED={seed})"


@contextmanager
def worker_pool() -> Iterator[multiprocessing.pool.Pool | None]:
    """Forked workers, or None when running in this process (one worker, or a replay)."""
    if WORKERS <= 1 or REPLAY is not None:
        yield None
        return
    with multiprocessing.get_context("fork").Pool(WORKERS) as p:
        yield p


class SeedSuite:
    """The seeds of one simulator: `run_seed(seed, trace=False)` must return an
    object with `.stats` and raise InvariantViolation on a broken invariant.

    Each seed runs at most once per process and its result is kept, so the tests
    may run in any order (pytest-randomly): a chunk whose seeds an earlier test
    already ran reports their failures from the cache, and `run_all` gives the
    evidence tests the whole seed budget whichever test came first."""

    def __init__(self, run_seed: Callable[..., Any], seeds: int) -> None:
        self.run_seed = run_seed
        self.seeds = seeds
        self.seen: dict[str, int] = {}  # run statistics added up over the seeds run
        # seed -> its failure text, or None when it passed; each seed's stats are in
        # `seen` exactly once (invariant: len(results) == runs)
        self.results: dict[int, str | None] = {}

    @property
    def runs(self) -> int:
        """Seeds run so far in this process."""
        return len(self.results)

    def chunks(self) -> list[range]:
        if REPLAY is not None:
            return [range(int(REPLAY), int(REPLAY) + 1)]
        end = FIRST + self.seeds
        return [range(s, min(s + CHUNK, end)) for s in range(FIRST, end, CHUNK)]

    def run(self, seeds: range, pool: multiprocessing.pool.Pool | None) -> None:
        """Run `seeds` (or replay SIM_SEED) and fail the test with every failing seed."""
        if REPLAY is not None:
            seed = seeds.start
            print(f"replaying SIM_SEED={seed}")
            try:
                result = self.run_seed(seed, trace=TRACE)
            except InvariantViolation as e:
                pytest.fail(str(e), pytrace=False)
            print(result)
            return
        self._run_missing(seeds, pool)
        self._fail_on([self.results[s] for s in seeds if self.results[s] is not None])

    def run_all(self, pool: multiprocessing.pool.Pool | None) -> None:
        """Make sure every seed of the budget has run (failures are the chunks' to report)."""
        for chunk in self.chunks():
            self._run_missing(chunk, pool)

    def _run_missing(self, seeds: range, pool: multiprocessing.pool.Pool | None) -> None:
        todo = [s for s in seeds if s not in self.results]
        one = partial(_run, self.run_seed)
        results = pool.map(one, todo, chunksize=5) if pool is not None else map(one, todo)
        for seed, stats, error in results:
            self.results[seed] = error
            if error is None:
                assert stats is not None
                for k, v in stats.items():
                    self.seen[k] = self.seen.get(k, 0) + v

    @staticmethod
    def _fail_on(failures: list[str]) -> None:
        if failures:
            lines = [f.split("\n", 1)[0] for f in failures]
            pytest.fail(
                f"{len(failures)} seed(s) failed:\n"
                + "\n".join(lines)
                + "\n\nfirst failure in full:\n"
                + failures[0],
                pytrace=False,
            )
