"""The Raft paper's figure 8, as a fault schedule for the Raft simulator.

The classic danger: a new leader finds entries of an older epoch on some
followers, replicates them to a majority and counts them committed before an
entry of its own epoch is on that majority. A node whose log ends in a later
epoch (it led in between, alone) can still be elected by voters that lack the
new leader's epoch, and it truncates the "committed" entries. KRaft's rule, in
RaftCore._maybe_advance_hw, is that the high watermark only moves past the
leader's epoch start offset.

The general seeds (tests/sim/simulator.py's run_seed) reach that interleaving
about once in a thousand seeds. This schedule aims at it: five voters, one batch
per fetch (fetch_max_bytes=1, so followers often hold a prefix), short timeouts,
and rounds of

1. the leader cut off with 0-2 followers while it takes proposals (they reach
   only its side), then crashed;
2. the other side elects a leader that is cut off and crashed as soon as it
   wins, its epoch's first batches on few nodes;
3. the first leader back: it may win again and re-replicate its old entries,
   and be crashed at a random moment of that, while the second comes back;

then the faults stop and the cluster must converge. Every invariant of the
simulator is checked after every event, as in the general seeds.
"""

from __future__ import annotations

import random

from kraft.raft.config import RaftConfig
from tests.sim.simulator import DiskParams, NetParams, SeedResult, Simulation

LIVENESS_BOUND_MS = 30_000


def _wait_leader(sim: Simulation, timeout_ms: int, not_: int | None = None) -> int | None:
    def ok() -> bool:
        lid = sim.leader()
        return lid is not None and lid != not_

    sim.run_until_true(ok, timeout_ms)
    lid = sim.leader()
    return lid if lid != not_ else None


def run_seed(seed: int, trace: bool = False) -> SeedResult:
    rng = random.Random(f"figure8/{seed}")
    sim = Simulation(
        seed,
        n_voters=5,
        net=NetParams(max_delay_ms=rng.choice([1, 3, 8]), drop=rng.choice([0.0, 0.02])),
        disk=DiskParams(max_flush_ms=rng.choice([0, 1, 3])),
        config=RaftConfig(
            fetch_max_bytes=1,
            election_timeout_ms=150,
            fetch_timeout_ms=300,
            fetch_max_wait_ms=rng.choice([20, 100]),
            request_timeout_ms=300,
        ),
        trace=trace,
    )
    voters = list(sim.voter_ids)
    for _ in range(rng.randint(8, 16)):
        first = _wait_leader(sim, 3_000)
        if first is None:
            sim.heal()
            for n in voters:
                if not sim.nodes[n].up:
                    sim.start(n)
            continue
        # 1. the leader and 0-2 followers apart; proposals reach only them
        others = [n for n in voters if n != first]
        rng.shuffle(others)
        k = rng.choice([0, 1, 1, 2])
        sim.partition([first, *others[:k]], others[k:])
        for _ in range(rng.randint(1, 4)):
            sim.propose(rng.randint(1, 3), first)
            sim.run_for(rng.randint(1, 25))
        sim.crash(first)
        sim.heal()
        sim._count("fault:crash")
        # 2. a second leader, cut off and crashed right after it wins
        second = _wait_leader(sim, 3_000, not_=first)
        if second is not None:
            sim.propose(rng.randint(1, 2), second)
            sim.run_for(rng.randint(0, 15))
            sim.partition([second], [n for n in voters if n != second])
            sim.run_for(rng.randint(0, 30))
            sim.crash(second)
            sim.heal()
        # 3. the first back; maybe it leads again, crashed while re-replicating
        sim.start(first)
        third = _wait_leader(sim, 3_000, not_=second)
        if third is not None:
            sim.run_for(rng.randint(0, 40))
            if rng.random() < 0.7:
                sim.crash(third)
                if rng.random() < 0.5:
                    sim.start(third)
        if second is not None:
            sim.start(second)
        sim.run_for(rng.randint(50, 600))
        for n in voters:
            if not sim.nodes[n].up and rng.random() < 0.8:
                sim.start(n)
    # ---- the faults stop: every node up, one more entry committed everywhere
    sim.heal()
    for n in voters:
        if not sim.nodes[n].up:
            sim.start(n)
    healed = sim.now
    deadline = healed + LIVENESS_BOUND_MS
    while True:
        lid = _wait_leader(sim, max(1, deadline - sim.now))
        if lid is None:
            sim.fail(f"no leader {LIVENESS_BOUND_MS} ms after the faults stopped")
        marker = sim.propose(1, lid)
        if marker is not None:
            target = marker[1] + 1
            if sim.run_until_true(
                lambda t=target: all(n.up and n.applied >= t for n in sim.nodes.values()),
                min(3_000, max(1, deadline - sim.now)),
            ):
                break
        if sim.now >= deadline:
            sim.fail("not converged within the bound after the faults stopped")
    return SeedResult(
        seed, 5, 0, ("figure8",), dict(sim.stats), sim.committed_end, sim.now - healed
    )
