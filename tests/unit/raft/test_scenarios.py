"""Kafka's Raft scenarios on whole simulated quorums (tests/sim, no random faults).

Every run also checks the simulator's invariants after each event (one leader
per epoch, epochs and high watermarks never going back, identical committed
prefixes, committed data durable on a majority).
"""

from __future__ import annotations

from kraft.raft.config import RaftConfig
from kraft.raft.state import Follower, Resigned
from tests.sim.simulator import Simulation

CONFIG = RaftConfig()
FETCH_TIMEOUT = CONFIG.fetch_timeout_ms
T = CONFIG.election_timeout_ms


def agreed_leader(sim: Simulation, among: list[int] | None = None) -> int | None:
    """The leader every running voter in `among` follows, in one epoch."""
    ids = among if among is not None else sim.voter_ids
    up = [i for i in ids if sim.nodes[i].up]
    lid = None
    for i in up:
        c = sim.core(i)
        if c.is_leader:
            lid = i
    if lid is None:
        return None
    epoch = sim.core(lid).epoch
    if all(sim.core(i).epoch == epoch and sim.core(i).leader_id == lid for i in up):
        return lid
    return None


def wait_leader(sim: Simulation, timeout_ms: int, among: list[int] | None = None) -> int:
    assert sim.run_until_true(lambda: agreed_leader(sim, among) is not None, timeout_ms), (
        sim.describe_nodes()
    )
    lid = agreed_leader(sim, among)
    assert lid is not None
    return lid


def commit(sim: Simulation, leader: int, n: int = 1, timeout_ms: int = 2_000) -> int:
    """Propose n single-record batches on `leader`; wait for them to commit there."""
    last = -1
    for _ in range(n):
        res = sim.propose(1, leader)
        assert res is not None, f"n{leader} is not leading"
        last = res[1]
    assert sim.run_until_true(lambda: sim.core(leader).high_watermark > last, timeout_ms), (
        sim.describe_nodes()
    )
    return last + 1


def converged(sim: Simulation, offset: int, timeout_ms: int = 10_000) -> None:
    assert sim.run_until_true(
        lambda: all(n.up and n.applied >= offset for n in sim.nodes.values()), timeout_ms
    ), sim.describe_nodes()


def logs_equal_up_to(sim: Simulation, offset: int) -> None:
    """Every node's log holds the same batches below `offset` (where it has them)."""
    for n in sim.nodes.values():
        for h, b in n.log.batches():
            if h.next_offset <= offset:
                assert sim.committed_batch[h.base_offset] == b


def test_initial_election():
    sim = Simulation(1, n_voters=3, n_observers=1)
    leader = wait_leader(sim, 3_000)  # the integration goal: within 3 s
    assert sim.now <= 2 * T + 500
    c = sim.core(leader)
    assert c.epoch == 1 and c.state_name == "leader"
    # The LeaderChangeMessage commits, and observers learn the leader too.
    converged(sim, 1, 1_000)
    obs = sim.core(100)
    assert obs.state_name == "observer" and obs.leader_id == leader


def test_new_leader_after_the_old_one_dies():
    sim = Simulation(2, n_voters=3, n_observers=1)
    old = wait_leader(sim, 3_000)
    end = commit(sim, old, 5)
    sim.crash(old)
    killed = sim.now
    others = [i for i in sim.voter_ids if i != old]
    new = wait_leader(sim, FETCH_TIMEOUT + 3 * T, others)
    # The fetch timeout, then a pre-vote and a vote.
    assert sim.now - killed <= FETCH_TIMEOUT + 2 * T + 100
    assert new != old and sim.core(new).epoch == 2
    end = commit(sim, new, 3)
    # The old leader comes back as a follower with the same committed log.
    sim.start(old)
    assert isinstance(sim.core(old).state, Resigned)
    converged(sim, end)
    assert isinstance(sim.core(old).state, Follower) and sim.core(old).leader_id == new
    logs_equal_up_to(sim, end)


def test_new_leader_after_the_old_one_is_partitioned_away():
    sim = Simulation(3, n_voters=3, n_observers=1)
    old = wait_leader(sim, 3_000)
    commit(sim, old, 3)
    others = [i for i in sim.nodes if i != old]
    sim.partition([old], others)
    t0 = sim.now
    new = wait_leader(sim, FETCH_TIMEOUT + 3 * T, [i for i in sim.voter_ids if i != old])
    assert new != old
    end = commit(sim, new, 3)
    # The isolated leader cannot commit: check quorum makes it resign after
    # 1.5 fetch timeouts without a majority.
    assert sim.run_until_true(lambda: not sim.core(old).is_leader, 2 * FETCH_TIMEOUT)
    assert sim.now - t0 <= CONFIG.check_quorum_timeout_ms + 10
    assert sim.core(old).high_watermark < end
    sim.heal()
    converged(sim, end)
    assert sim.core(old).leader_id == new


def test_five_voters_split_two_three_majority_commits_minority_catches_up():
    sim = Simulation(4, n_voters=5, n_observers=1)
    leader = wait_leader(sim, 3_000)
    base = commit(sim, leader, 2)
    # Put the leader on the minority side with one other voter.
    minority = [leader, next(i for i in sim.voter_ids if i != leader)]
    majority = [i for i in sim.nodes if i not in minority]
    sim.partition(minority, majority)
    new = wait_leader(sim, FETCH_TIMEOUT + 4 * T, [i for i in majority if i in sim.voter_ids])
    assert new in majority
    end = base
    for _ in range(5):
        end = commit(sim, new, 4)  # the majority side keeps committing
    # The old leader may still take writes until it resigns: they never commit.
    stale = sim.propose(3, leader) if sim.core(leader).is_leader else None
    sim.run_for(CONFIG.check_quorum_timeout_ms)
    for i in minority:
        assert sim.core(i).high_watermark <= base
        assert not sim.core(i).is_leader
    sim.heal()
    converged(sim, end)
    logs_equal_up_to(sim, end)
    if stale is not None:
        # The minority's uncommitted batches were truncated away.
        assert all(
            sim.committed_batch.get(h.base_offset) == b
            for h, b in sim.nodes[leader].log.batches()
            if h.next_offset <= end
        )


def test_back_to_back_leader_failures():
    sim = Simulation(5, n_voters=5, n_observers=1)
    first = wait_leader(sim, 3_000)
    end = commit(sim, first, 2)
    sim.crash(first)
    second = wait_leader(sim, FETCH_TIMEOUT + 4 * T, [i for i in sim.voter_ids if i != first])
    end = commit(sim, second, 2)
    sim.crash(second)
    third = wait_leader(
        sim, FETCH_TIMEOUT + 4 * T, [i for i in sim.voter_ids if i not in (first, second)]
    )
    assert len({first, second, third}) == 3
    assert sim.core(third).epoch >= 3
    end = commit(sim, third, 2)
    sim.start(first)
    sim.start(second)
    converged(sim, end)
    logs_equal_up_to(sim, end)


def test_all_nodes_killed_and_restarted():
    sim = Simulation(6, n_voters=3, n_observers=2)
    leader = wait_leader(sim, 3_000)
    end = commit(sim, leader, 10)
    sim.run_for(50)  # let the followers flush what they fetched
    epoch = sim.core(leader).epoch
    for i in sim.nodes:
        sim.crash(i)
    sim.run_for(1_000)
    for i in sim.nodes:
        sim.start(i)
    assert isinstance(sim.core(leader).state, Resigned)
    new = wait_leader(sim, FETCH_TIMEOUT + 4 * T)
    assert sim.core(new).epoch > epoch
    end = commit(sim, new, 1)
    converged(sim, end)
    # Nothing committed before the restart was lost (checked batch by batch).
    logs_equal_up_to(sim, end)


def test_disk_wiped_while_a_new_leader_is_elected_loses_no_commit():
    sim = Simulation(7, n_voters=5, n_observers=1)
    leader = wait_leader(sim, 3_000)
    end = commit(sim, leader, 20)
    sim.run_for(100)  # every voter has it flushed
    victim = next(i for i in sim.voter_ids if i != leader)
    # The leader dies and, during the election, a follower's disk is replaced.
    sim.crash(leader)
    sim.run_for(FETCH_TIMEOUT // 2)
    assert sim._wipe_is_safe(victim)
    sim.crash(victim, wipe=True)
    sim.start(victim)
    assert sim.nodes[victim].log.end_offset == 0
    new = wait_leader(sim, FETCH_TIMEOUT + 4 * T, [i for i in sim.voter_ids if i != leader])
    assert new not in (leader, victim)
    end = commit(sim, new, 2)
    sim.start(leader)
    converged(sim, end)
    logs_equal_up_to(sim, end)


def test_partitioned_node_rejoining_does_not_unseat_a_healthy_leader():
    sim = Simulation(8, n_voters=3, n_observers=1)
    leader = wait_leader(sim, 3_000)
    epoch = sim.core(leader).epoch
    loner = next(i for i in sim.voter_ids if i != leader)
    sim.partition([loner], [i for i in sim.nodes if i != loner])
    end = commit(sim, leader, 3)
    sim.run_for(10 * FETCH_TIMEOUT)  # it times out again and again, pre-voting
    assert sim.core(loner).epoch == epoch  # pre-votes change no epoch
    assert sim.core(loner).state_name in ("prospective", "follower")
    sim.heal()
    converged(sim, end)
    sim.run_for(3 * FETCH_TIMEOUT)
    assert sim.core(leader).is_leader and sim.core(leader).epoch == epoch
    assert sim.core(loner).leader_id == leader
    assert max(sim.leaders) == epoch  # nobody was elected in a later epoch


def test_graceful_resignation_hands_over_faster_than_a_kill():
    def failover(graceful: bool, seed: int) -> int:
        sim = Simulation(seed, n_voters=3)
        leader = wait_leader(sim, 3_000)
        commit(sim, leader, 2)
        t0 = sim.now
        if graceful:
            sim.resign(leader)
            sim.run_for(20)  # EndQuorumEpoch leaves before the process exits
        sim.crash(leader)
        others = [i for i in sim.voter_ids if i != leader]
        new = wait_leader(sim, FETCH_TIMEOUT + 4 * T, others)
        commit(sim, new, 1)
        return sim.now - t0

    for seed in range(5):
        graceful, killed = failover(True, seed), failover(False, seed)
        assert graceful < 200 < FETCH_TIMEOUT <= killed


def test_observer_behind_a_trimmed_log_loads_a_snapshot():
    sim = Simulation(9, n_voters=3, n_observers=1, config=RaftConfig(snapshot_chunk_bytes=64))
    leader = wait_leader(sim, 3_000)
    sim.crash(100)
    end = commit(sim, leader, 30)
    sim.run_for(100)
    for i in sim.voter_ids:
        assert sim.snapshot(i) is not None  # every voter trims its log
    end = commit(sim, leader, 2)
    sim.start(100)
    converged(sim, end)
    assert sim.stats.get("snapshot_load", 0) >= 1
    assert sim.nodes[100].log.start_offset > 0


def test_single_voter_quorum_commits_alone():
    sim = Simulation(10, n_voters=1, n_observers=1)
    leader = wait_leader(sim, 3_000)
    end = commit(sim, leader, 5)
    converged(sim, end)
    sim.run_for(60_000)
    assert sim.core(leader).is_leader and sim.core(leader).epoch == 1
