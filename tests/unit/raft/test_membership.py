"""KIP-853 membership changes on whole simulated quorums (tests/sim, no random faults).

Grow 1 -> 3 -> 5 voters while writes continue, remove the leader, replace a
voter whose disk was wiped, refuse a second change while one is pending, and
the voter set's life in the log (bootstrap record, truncation fallback,
snapshots). The simulator checks its invariants after every event (one leader
per epoch across all voter sets, committed data never lost or changed, ...).
"""

from __future__ import annotations

import pytest

from kraft.raft.describe import describe_quorum
from kraft.raft.errors import (
    CONCURRENT_VOTER_CHANGE,
    DUPLICATE_VOTER,
    INVALID_VOTER_CHANGE,
    LEADER_NOT_READY,
    VOTER_NOT_CAUGHT_UP,
    VOTER_NOT_FOUND,
    ReconfigError,
)
from kraft.raft.state import Leader
from kraft.raft.voters import Voter, VoterSet, VoterSetHistory
from tests.sim.simulator import Simulation
from tests.unit.raft.test_scenarios import commit, converged

URL = "sim://{}"


def leader_of(sim: Simulation, voters: frozenset[int], timeout_ms: int = 10_000) -> int:
    """Wait for a leader whose voter set is `voters`, followed by all of them."""

    def agreed() -> int | None:
        lid = sim.leader()
        if lid is None or sim.core(lid).voters != voters:
            return None
        c = sim.core(lid)
        for v in voters:
            o = sim.nodes[v].core
            if o is None or o.epoch != c.epoch or o.leader_id != lid:
                return None
        return lid

    assert sim.run_until_true(lambda: agreed() is not None, timeout_ms), sim.describe_nodes()
    lid = agreed()
    assert lid is not None
    return lid


def add(sim: Simulation, nid: int, timeout_ms: int = 5_000) -> None:
    """AddVoter on the leader, retrying while it is not ready; wait until it commits."""
    deadline = sim.now + timeout_ms
    while True:
        lid = sim.leader()
        assert lid is not None
        try:
            off = sim.core(lid).add_voter(
                nid, sim.nodes[nid].directory_id, URL.format(nid), sim.now
            )
            break
        except ReconfigError as e:
            assert e.retriable, e
            assert sim.now < deadline, f"add {nid}: {e}"
            sim.run_for(50)
    sim._after(sim.nodes[lid])
    assert sim.run_until_true(lambda: sim.committed_end > off, timeout_ms), sim.describe_nodes()


def remove(sim: Simulation, nid: int, timeout_ms: int = 5_000) -> None:
    lid = sim.leader()
    assert lid is not None
    v = sim.core(lid).voter_set.get(nid)
    assert v is not None
    off = sim.core(lid).remove_voter(nid, v.directory_id, sim.now)
    sim._after(sim.nodes[lid])
    assert sim.run_until_true(lambda: sim.committed_end > off, timeout_ms), sim.describe_nodes()


def settled(sim: Simulation, timeout_ms: int = 5_000) -> None:
    """Wait until no voter change is pending and every running node knows every
    voter's directory id (the leader records them after a static bootstrap)."""

    def ok() -> bool:
        lid = sim.leader()
        if lid is None or sim.core(lid).pending_voter_change is not None:
            return False
        return all(all(v.directory_id for v in n.core.voter_set) for n in sim.running() if n.core)

    assert sim.run_until_true(ok, timeout_ms), sim.describe_nodes()


def new_sim(n_voters: int, n_spares: int, seed: int = 7) -> Simulation:
    return Simulation(seed, n_voters=n_voters, n_spares=n_spares, membership=True)


def test_voter_history_uses_the_newest_set_and_falls_back_on_truncation() -> None:
    a = VoterSet.of([Voter(1, "", "u1")])
    b = a.with_voter(Voter(2, "d2", "u2"))
    h = VoterSetHistory(a)
    assert h.latest == a and not h.from_log
    h.add(5, b)
    assert h.latest == b and h.latest_offset == 5 and h.from_log
    assert h.at(5) == a and h.at(6) == b
    assert h.truncate_from(5) and h.latest == a
    h.add(7, b)
    h.reset_to_snapshot(10, a.without(1).with_voter(Voter(3, "d3", "u3")))
    assert h.latest.ids == {3} and h.latest_offset == 9
    with pytest.raises(ValueError):
        VoterSet.of([Voter(1, "", ""), Voter(1, "x", "")])


def test_first_leader_writes_the_bootstrap_voter_set_and_learns_directory_ids() -> None:
    sim = Simulation(3, n_voters=3)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    end = commit(sim, lid, 3)
    converged(sim, end)
    # The bootstrap set (directory ids unknown) went into the log; then the
    # leader recorded each voter's directory id as their fetches told it.
    assert sim.run_until_true(
        lambda: all(v.directory_id for v in sim.committed_voter_set), 5_000
    ), sim.committed_voters
    for v in sim.committed_voter_set:
        assert v.directory_id == sim.nodes[v.node_id].directory_id
        assert v.url == URL.format(v.node_id)
    for nid in (1, 2, 3):
        assert sim.core(nid).voter_set == sim.committed_voter_set


def test_grow_from_one_to_three_to_five_voters_while_writes_continue() -> None:
    sim = new_sim(1, 4)
    lid = leader_of(sim, frozenset({1}))
    end = commit(sim, lid, 5)
    # Long enough for a stale check-quorum deadline (a single voter never
    # refreshes it) to be in the past when the second voter arrives.
    sim.run_for(5_000)
    epoch = sim.core(lid).epoch
    voters = {1}
    for nid in (2, 3, 4, 5):
        end = commit(sim, sim.leader() or lid, 2)
        add(sim, nid)
        voters.add(nid)
        lid = leader_of(sim, frozenset(voters))
        end = commit(sim, lid, 2)  # writes go on, committed by the bigger quorum
    converged(sim, end)
    assert sim.core(lid).voters == {1, 2, 3, 4, 5}
    # The leader kept its epoch the whole time: no change cost an election.
    assert sim.leader() == lid and sim.core(lid).epoch == epoch
    # A majority of the five is now needed: with two down writes still commit...
    down = [n for n in (5, 4, 3, 2) if n != lid]
    sim.crash(down[0])
    sim.crash(down[1])
    commit(sim, lid, 3)
    # ...with three down they do not.
    sim.crash(down[2])
    res = sim.propose(1, lid)
    assert res is not None
    sim.run_for(3_000)
    assert sim.committed_end <= res[1]


def test_remove_the_leader_it_leads_until_the_change_commits_then_resigns() -> None:
    sim = new_sim(3, 0)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    end = commit(sim, lid, 3)
    settled(sim)
    old = sim.core(lid)
    off = old.remove_voter(lid, old.voter_set.get(lid).directory_id, sim.now)  # type: ignore[union-attr]
    # Still the leader (not counting itself) until the change commits.
    assert old.is_leader and not old.is_voter
    sim._after(sim.nodes[lid])
    rest = frozenset({1, 2, 3} - {lid})
    assert sim.run_until_true(lambda: sim.leader() not in (None, lid), 10_000)
    new = leader_of(sim, rest, 10_000)
    assert new != lid and sim.committed_end > off
    end = commit(sim, new, 3)
    converged(sim, end)
    # The removed leader follows as an observer and never campaigns again.
    assert sim.core(lid).state_name == "observer"
    sim.run_for(10_000)
    assert sim.core(lid).state_name == "observer"
    assert sim.leader() == new


def test_replace_a_voter_whose_disk_was_wiped_without_losing_a_committed_record() -> None:
    sim = new_sim(3, 0)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    commit(sim, lid, 3)
    settled(sim)
    victim = next(n for n in (1, 2, 3) if n != lid)
    old_dir = sim.nodes[victim].directory_id
    committed = dict(sim.committed_batch)
    sim.crash(victim, wipe=True)
    assert sim.nodes[victim].directory_id != old_dir
    sim.start(victim)
    # The wiped node is a new replica: an observer, not the old voter.
    sim.run_for(2_000)
    assert not sim.core(victim).is_voter
    assert sim.core(lid).voter_set.get(victim).directory_id == old_dir  # type: ignore[union-attr]
    # describe --replication: the voter row keeps the old key, the observer row
    # names the new disk's id (the one `add-controller` needs; it showed the old one)
    d = describe_quorum(sim.core(lid), sim.now)
    assert [r["directory_id"] for r in d["voters"] if r["node_id"] == victim] == [old_dir]
    new_dir = sim.nodes[victim].directory_id
    assert [r["directory_id"] for r in d["observers"] if r["node_id"] == victim] == [new_dir]
    # Its old key cannot be removed under another directory id...
    with pytest.raises(ReconfigError) as e:
        sim.core(lid).remove_voter(victim, "not-its-directory", sim.now)
    assert e.value.code == VOTER_NOT_FOUND
    # ...nor the new one added while the old one is a voter.
    with pytest.raises(ReconfigError) as e:
        sim.core(lid).add_voter(victim, sim.nodes[victim].directory_id, URL.format(victim), sim.now)
    assert e.value.code == DUPLICATE_VOTER
    remove(sim, victim)
    add(sim, victim)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    assert sim.core(lid).voter_set.get(victim).directory_id == sim.nodes[victim].directory_id  # type: ignore[union-attr]
    end = commit(sim, lid, 3)
    converged(sim, end)
    # Every record committed before the wipe is still there, at its offset.
    for off, batch in committed.items():
        assert sim.committed_batch[off] == batch
    node = sim.nodes[victim]
    assert node.applied >= end


def test_one_change_at_a_time_and_only_once_the_leader_committed_in_its_epoch() -> None:
    sim = new_sim(3, 2)
    # The moment a leader is elected it has committed nothing of its epoch.
    assert sim.run_until_true(lambda: sim.leader() is not None, 10_000)
    lid = sim.leader()
    assert lid is not None
    c = sim.core(lid)
    s = c.state
    assert isinstance(s, Leader) and c.high_watermark <= s.epoch_start_offset
    with pytest.raises(ReconfigError) as e:
        c.remove_voter(2 if lid != 2 else 3, "", sim.now)
    assert e.value.code == LEADER_NOT_READY and e.value.retriable
    lid = leader_of(sim, frozenset({1, 2, 3}))
    c = sim.core(lid)
    commit(sim, lid, 2)
    # Wait for the leader's own directory-id update to commit too.
    settled(sim)
    sim.run_for(1_000)  # the spares catch up
    off = c.add_voter(4, sim.nodes[4].directory_id, URL.format(4), sim.now)
    with pytest.raises(ReconfigError) as e:
        c.add_voter(5, sim.nodes[5].directory_id, URL.format(5), sim.now)
    assert e.value.code == CONCURRENT_VOTER_CHANGE
    assert f"offset {off}" in str(e.value)
    sim._after(sim.nodes[lid])
    assert sim.run_until_true(lambda: sim.committed_end > off, 5_000)
    # Committed: the next change is accepted.
    add(sim, 5)
    assert sim.core(sim.leader() or lid).voters == {1, 2, 3, 4, 5}


def test_a_new_voter_must_be_fetching_and_caught_up() -> None:
    sim = new_sim(3, 1)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    commit(sim, lid, 2)
    c = sim.core(lid)
    settled(sim)
    sim.run_for(1_000)  # the spares catch up
    # Unknown directory id: not the replica that fetches.
    with pytest.raises(ReconfigError) as e:
        c.add_voter(4, "some-other-directory", URL.format(4), sim.now)
    assert e.value.code == VOTER_NOT_CAUGHT_UP and "not fetching" in str(e.value)
    # A spare that is down stops being caught up after the fetch timeout.
    sim.crash(4)
    sim.run_for(sim.config.fetch_timeout_ms + 500)
    commit(sim, lid, 2)
    with pytest.raises(ReconfigError) as e:
        c.add_voter(4, sim.nodes[4].directory_id, URL.format(4), sim.now)
    assert e.value.code == VOTER_NOT_CAUGHT_UP and e.value.retriable
    sim.start(4)
    add(sim, 4)


def test_an_uncommitted_voter_change_is_truncated_and_the_old_set_comes_back() -> None:
    sim = new_sim(3, 0)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    commit(sim, lid, 2)
    c = sim.core(lid)
    settled(sim)
    sim.run_for(1_000)  # the spares catch up
    others = [n for n in (1, 2, 3) if n != lid]
    # The leader is cut off, removes a voter (in force at once, on its log only)...
    sim.partition([lid], others)
    victim = others[0]
    c.remove_voter(victim, c.voter_set.get(victim).directory_id, sim.now)  # type: ignore[union-attr]
    sim._after(sim.nodes[lid])
    assert c.voters == frozenset({1, 2, 3}) - {victim}
    # ...the others elect a new leader and write; on healing the old leader's
    # record is truncated and it falls back to the previous voter set.
    assert sim.run_until_true(lambda: any(sim.core(n).is_leader for n in others), 10_000), (
        sim.describe_nodes()
    )
    new = next(n for n in others if sim.core(n).is_leader)
    end = commit(sim, new, 2)
    sim.heal()
    converged(sim, end)
    assert sim.core(lid).voters == {1, 2, 3}
    assert sim.core(lid).is_voter


def test_a_leader_that_removed_itself_and_crashed_before_the_commit_is_not_a_deadlock() -> None:
    # Two voters {L, y}; L appends its own removal, flushes it, and crashes before y
    # fetched it. L's newest voter set is {y}, so L no longer counts itself a voter;
    # y needs L's vote, but L's log is ahead of y's, so L refuses it. L is still in
    # the last committed set, so it campaigns: y votes for the longer log, L leads
    # until its removal commits, then hands over to y.
    sim = new_sim(3, 0)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    commit(sim, lid, 3)
    settled(sim)
    x, y = sorted({1, 2, 3} - {lid})
    remove(sim, x)
    leader_of(sim, frozenset({lid, y}))
    settled(sim)
    sim.partition([lid], [x, y])
    old = sim.core(lid)
    old.remove_voter(lid, old.voter_set.get(lid).directory_id, sim.now)  # type: ignore[union-attr]
    sim._after(sim.nodes[lid])
    sim.run_for(200)  # flushed on L alone
    assert sim.nodes[lid].core.log.flushed_offset == sim.nodes[lid].core.log.end_offset  # type: ignore[union-attr]
    sim.crash(lid)
    sim.heal()
    sim.start(lid)
    assert not sim.core(lid).is_voter
    # L leads (voters {y}, its own vote not counting) until its removal commits...
    assert sim.run_until_true(lambda: sim.leader() == y, 20_000), sim.describe_nodes()
    assert leader_of(sim, frozenset({y})) == y
    end = commit(sim, y, 2)
    converged(sim, end)
    # ...then it is an observer for good.
    sim.run_for(5_000)
    assert sim.core(lid).state_name == "observer" and sim.leader() == y


def test_a_new_voter_with_another_voter_s_url_is_refused() -> None:
    """The quorum dials a voter at its URL: another voter's would make the new one
    unreachable, and an election that needs it impossible."""
    sim = new_sim(3, 1)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    commit(sim, lid, 2)
    settled(sim)
    sim.run_for(1_000)  # the spare catches up
    other = next(v for v in (1, 2, 3) if v != lid)
    with pytest.raises(ReconfigError) as e:
        sim.core(lid).add_voter(4, sim.nodes[4].directory_id, URL.format(other), sim.now)
    assert e.value.code == INVALID_VOTER_CHANGE and not e.value.retriable
    assert f"{URL.format(other)} is voter {other}'s URL" in str(e.value)
    add(sim, 4)  # its own URL: accepted


def test_removing_a_live_voter_while_another_is_down_is_refused() -> None:
    """Voters {1, 2, 3} with one down: removing the other live follower would leave
    two voters of which one is live, which can neither commit nor elect. Removing
    the one that is down is what the operator may do."""
    sim = new_sim(3, 0)
    lid = leader_of(sim, frozenset({1, 2, 3}))
    commit(sim, lid, 2)
    settled(sim)
    down, live = (v for v in (1, 2, 3) if v != lid)
    sim.crash(down)
    sim.run_for(sim.config.fetch_timeout_ms + 500)
    c = sim.core(lid)
    v = c.voter_set.get(live)
    assert v is not None
    with pytest.raises(ReconfigError) as e:
        c.remove_voter(live, v.directory_id, sim.now)
    assert e.value.code == INVALID_VOTER_CHANGE
    left = sorted({lid, down})
    assert f"removing voter {live} would leave voters {left}, of which only 1 [{lid}]" in str(
        e.value
    )
    assert f"Bring [{down}] back first" in str(e.value)
    assert c.voters == {1, 2, 3}  # nothing appended
    remove(sim, down)
    assert sim.core(sim.leader() or lid).voters == {lid, live}
