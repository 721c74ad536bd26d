"""Controllers and scripted broker lifecycles in the deterministic simulator, many seeds.

See tests/sim/controller_sim.py for what runs and which invariants are checked.

    make test                          200 seeds (SIM_CONTROLLER_SEEDS defaults to 200)
    SIM_CONTROLLER_SEEDS=5000 make sim many more, over min(2, CPUs) worker processes
    SIM_SEED=N make sim                replay one seed (SIM_TRACE=1: keep an event trace)
    SIM_FIRST_SEED=K, SIM_WORKERS=1    as in tests/sim/test_sim.py

Seeds run in chunks (one test each); a failing chunk lists every failing seed with
its replay command. The last test checks that the runs exercised what they are
meant to (fences, unfences, controlled shutdowns, failovers, transactions, ...).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator

import pytest

from tests.sim.controller_sim import run_seed
from tests.sim.simulator import InvariantViolation

CHUNK = 50
REPLAY = os.environ.get("SIM_SEED")
SEEDS = int(os.environ.get("SIM_CONTROLLER_SEEDS", "200"))
FIRST = int(os.environ.get("SIM_FIRST_SEED", "0"))
WORKERS = int(os.environ.get("SIM_WORKERS", str(min(2, os.cpu_count() or 1))))
TRACE = os.environ.get("SIM_TRACE") == "1"

# Run statistics that must be non-zero over the seeds: each names something the
# scenarios are meant to reach (see ControllerSimulation._count calls).
EVIDENCE = (
    "registered",
    "unfenced",
    "stale_fence",  # a session fence by the active controller
    "controlled_shutdown_done",
    "err:DUPLICATE_BROKER_REGISTRATION",
    "err:STALE_BROKER_EPOCH",
    "deactivation",  # an active controller lost leadership: uncommitted replays reverted
    "timed_out",  # a command waited past its deadline (a heartbeat's contact still counted)
    "txn",  # a result too large for one batch written as a metadata transaction
    "ctl_snapshot_load",  # a controller loaded its image from a snapshot
    "snapshot_load",  # a follower installed the leader's snapshot
    "alter_partition:ok",
    "unclean_election",
    "admin:ok",
)

_seen: dict[str, int] = {}
_runs = [0]


def _run(seed: int) -> tuple[int, dict[str, int] | None, str | None]:
    try:
        return seed, run_seed(seed).stats, None
    except InvariantViolation as e:
        return seed, None, str(e)
    except Exception as e:  # anything else is a failure of that seed too
        return seed, None, f"seed {seed}: {type(e).__name__}: {e} (replay with SIM_SEED={seed})"


@pytest.fixture(scope="module")
def pool() -> Iterator[multiprocessing.pool.Pool | None]:
    if WORKERS <= 1 or REPLAY is not None:
        yield None
        return
    with multiprocessing.get_context("fork").Pool(WORKERS) as p:
        yield p


def _chunks() -> list[range]:
    if REPLAY is not None:
        return [range(int(REPLAY), int(REPLAY) + 1)]
    return [range(s, min(s + CHUNK, FIRST + SEEDS)) for s in range(FIRST, FIRST + SEEDS, CHUNK)]


def _check(results: list[tuple[int, dict[str, int] | None, str | None]]) -> None:
    failures = []
    for _seed, stats, error in results:
        _runs[0] += 1
        if error is not None:
            failures.append(error)
        else:
            assert stats is not None
            for k, v in stats.items():
                _seen[k] = _seen.get(k, 0) + v
    if failures:
        lines = [f.split("\n", 1)[0] for f in failures]
        pytest.fail(
            f"{len(failures)} seed(s) failed:\n"
            + "\n".join(lines)
            + "\n\nfirst failure in full:\n"
            + failures[0],
            pytrace=False,
        )


@pytest.mark.parametrize("seeds", _chunks(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_controller_simulation(seeds: range, pool) -> None:
    if REPLAY is not None:
        seed = seeds.start
        print(f"replaying SIM_SEED={seed}")
        try:
            result = run_seed(seed, trace=TRACE)
        except InvariantViolation as e:
            pytest.fail(str(e), pytrace=False)
        print(result)
        return
    if pool is None:
        _check([_run(s) for s in seeds])
    else:
        _check(pool.map(_run, seeds, chunksize=5))


@pytest.mark.skipif(REPLAY is not None, reason="replaying one seed")
def test_every_scenario_was_exercised(pool) -> None:
    if _runs[0] < 4 * CHUNK:  # run on its own: draw the default seeds here
        chunk = range(FIRST, FIRST + 4 * CHUNK)
        _check(pool.map(_run, chunk, chunksize=5) if pool is not None else [_run(s) for s in chunk])
    missing = [key for key in EVIDENCE if _seen.get(key, 0) == 0]
    assert not missing, f"never reached in {_runs[0]} seeds: {missing}"
