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

import os

import pytest

from tests.sim.controller_sim import run_seed
from tests.sim.seeds import CHUNK, FIRST, REPLAY, SeedSuite

SUITE = SeedSuite(run_seed, int(os.environ.get("SIM_CONTROLLER_SEEDS", "200")))

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
    # issue 19: KIP-455 reassignments, leader balancing, KIP-966 ELR
    "reassign:ok",
    "reassign:INVALID_REPLICA_ASSIGNMENT",
    "cancel:ok",
    "cancel:NO_REASSIGNMENT_IN_PROGRESS",
    "reassignment_done",  # completed (every adding replica joined the ISR) or cancelled
    "rebalance_election",
    "rebalance_more",  # a balancing batch hit its bound and the next ran at once
    "elr_kept",  # an ISR below min ISR kept its removed members eligible
    "elr_election",  # a clean election from the ELR
    "last_known_leader_election",
    "unclean_shutdown_leaves_elr",
)


@pytest.mark.parametrize("seeds", SUITE.chunks(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_controller_simulation(seeds: range, pool) -> None:
    SUITE.run(seeds, pool)


@pytest.mark.skipif(REPLAY is not None, reason="replaying one seed")  # allow-listed: SIM_SEED
def test_every_scenario_was_exercised(pool) -> None:
    if SUITE.runs < 4 * CHUNK:  # run on its own: draw the default seeds here
        SUITE.run(range(FIRST, FIRST + 4 * CHUNK), pool)
    missing = [key for key in EVIDENCE if SUITE.seen.get(key, 0) == 0]
    assert not missing, f"never reached in {SUITE.runs} seeds: {missing}"
