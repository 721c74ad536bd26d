"""Issue 26 in the simulator: a very large change costs no election.

Three voters at the fast test timeouts (election 500 ms, fetch 1 s), a slow disk
(flushes of 20-250 ms) and a slow CPU (applying a committed record costs 6 us, and
the node's shell handles nothing meanwhile: CpuParams). The leader proposes a
change of 1M records in 35 batches, as a fence of a broker in every ISR is. The
invariant: no election while the leader is alive and its links are up: the epoch
never moves and no node ever becomes a candidate or prospective.

Applied in slices of 2,048 records with the node's pending events in between
(kraft's ChunkedReplay), that holds on every seed; applied a batch at once (the
shell before issue 26) the same change costs elections, so the scenario can tell.
"""

from __future__ import annotations

import pytest

from kraft.raft.config import RaftConfig
from tests.sim.simulator import CpuParams, DiskParams, Simulation

FAST = RaftConfig(election_timeout_ms=500, fetch_timeout_ms=1000, request_timeout_ms=1000)
RECORDS, BATCHES = 1_000_000, 35


def run(seed: int, slice_records: int | None) -> tuple[Simulation, int, set[str]]:
    """(the simulation, the leader's epoch before the change, states seen after it)."""
    sim = Simulation(
        seed,
        config=FAST,
        disk=DiskParams(min_flush_ms=20, max_flush_ms=250),
        cpu=CpuParams(apply_us=6.0, slice_records=slice_records),
    )
    assert sim.run_until_true(lambda: sim.leader() is not None, 10_000)
    sim.run_for(1_000)
    leader = sim.leader()
    assert leader is not None
    epoch = sim.core(leader).epoch
    per = RECORDS // BATCHES
    for _ in range(BATCHES):
        proposed = sim.propose(per, leader)
        assert proposed is not None
    sim.cpu.transaction_end = proposed[1] + 1  # the change is one transaction
    seen: set[str] = set()
    end = sim.now + 30_000
    while sim._events and sim._events[0][0] <= end:
        sim.step()
        for n in sim.running():
            if n.core is not None:
                seen.add(n.core.state_name)
    return sim, epoch, seen


@pytest.mark.parametrize("seed", [1, 2])
def test_a_change_of_a_million_records_costs_no_election(seed: int) -> None:
    sim, epoch, seen = run(seed, 2048)
    leader = sim.leader()
    assert leader is not None and sim.core(leader).epoch == epoch
    assert not seen & {"candidate", "prospective", "unattached"}, seen
    # all of it committed and applied everywhere
    end = sim.core(leader).high_watermark
    assert end >= RECORDS // BATCHES * BATCHES and all(n.applied == end for n in sim.running())
    assert sim.stats.get("apply_slice", 0) >= 3 * RECORDS // 2048


def test_applied_at_once_the_same_change_costs_elections() -> None:
    """The scenario can fail: without slices the followers' loops stop for seconds."""
    sim, epoch, seen = run(1, None)
    epochs = {n.core.epoch for n in sim.running() if n.core is not None}
    assert max(epochs) > epoch or seen & {"candidate", "prospective"}, (epochs, seen)
