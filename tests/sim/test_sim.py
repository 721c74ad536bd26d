"""The deterministic simulation, many seeds (see tests/sim/simulator.py).

    make test                    500 seeds (SIM_SEEDS defaults to 500)
    make sim SIM_SEEDS=20000     many more, over min(2, CPUs) worker processes
    SIM_SEED=N make sim          replay one seed (SIM_TRACE=1: keep an event trace)
    SIM_FIRST_SEED=K, SIM_WORKERS=1   see tests/sim/seeds.py

Seeds run in chunks (one test each); a failing chunk lists every failing seed
with its replay command. Every fault kind is drawn across the seeds, which the
last test checks.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.seeds import REPLAY, SeedSuite
from tests.sim.simulator import FAULT_KINDS, run_seed

SUITE = SeedSuite(run_seed, int(os.environ.get("SIM_SEEDS", "500")))

# What each fault kind leaves in the run statistics when it actually happened.
EVIDENCE = {
    "drop": "drop",
    "duplicate": "duplicate",
    "reorder": "slow",
    "partition": "fault:partition",
    "asymmetric": "fault:asymmetric",
    "crash": "fault:crash",
    "wipe": "fault:wipe",
    "flush_stall": "flush_stall",
    "resign": "fault:resign",
    "snapshot": "snapshot_load",
    "membership": "fault:membership",
}
assert set(EVIDENCE) == set(FAULT_KINDS)


@pytest.mark.parametrize("seeds", SUITE.chunks(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_simulation(seeds: range, pool) -> None:
    SUITE.run(seeds, pool)


@pytest.mark.skipif(REPLAY is not None, reason="replaying one seed")  # allow-listed: SIM_SEED
def test_every_fault_kind_was_exercised(pool) -> None:
    SUITE.run_all(pool)  # the whole budget, whichever test ran first
    missing = [kind for kind, key in EVIDENCE.items() if SUITE.seen.get(key, 0) == 0]
    assert not missing, f"fault kinds never exercised in {SUITE.runs} seeds: {missing}"
    # Membership changes (KIP-853) happen in well over a third of the seeds
    # (>= 200 of make test's 500), and a second change while one is pending is
    # refused every time it is tried.
    with_changes = SUITE.seen.get("membership_seed", 0)
    assert with_changes >= 0.4 * SUITE.runs, f"{with_changes} of {SUITE.runs} seeds changed voters"
    assert SUITE.seen.get("reconfig_refused_pending", 0) > 0
