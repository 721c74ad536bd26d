"""The role table: one role per quorum state type, and the timers it reports.

tick and next_wake_ms ask the same role, so a deadline a role reports is one
its on_deadline acts on; these tests pin that for the states with timers.
"""

from __future__ import annotations

import typing

from kraft.raft.messages import BeginQuorumEpochRequest
from kraft.raft.roles import ROLES, role_of
from kraft.raft.state import Follower, Leader, QuorumState, Unattached
from tests.unit.raft.helpers import CLUSTER, build_log, make_core


def test_every_quorum_state_type_has_a_role() -> None:
    assert set(ROLES) == set(typing.get_args(QuorumState))


def test_a_followers_wake_time_is_its_fetch_deadline_and_it_campaigns_then() -> None:
    core = make_core(1, voters=[1, 2, 3], log=build_log([(1, 0, 2)]))
    core.handle_request(BeginQuorumEpochRequest(CLUSTER, 2, 2), 0, 1)
    s = core.state
    assert isinstance(s, Follower)
    assert s.fetch_deadline_ms in list(role_of(s).deadlines(core, s))
    core.tick(s.fetch_deadline_ms - 1)
    assert core.state is s  # not yet
    core.tick(s.fetch_deadline_ms)
    assert core.state.name == "prospective"


def test_an_observer_without_a_leader_has_no_election_timer() -> None:
    core = make_core(4, voters=[1, 2, 3], log=build_log([(1, 0, 2)]))
    s = core.state
    assert isinstance(s, Unattached) and s.election_deadline_ms is None
    assert role_of(s).wants_fetch(core, s)  # it looks for the leader instead


def test_a_single_voter_leader_reports_no_check_quorum_deadline() -> None:
    core = make_core(1, voters=[1], log=build_log([(1, 0, 1)]))
    core.tick(core.next_wake_ms())
    s = core.state
    assert isinstance(s, Leader)
    # Nothing to time: no peer to hear from, nobody to send BeginQuorumEpoch to.
    assert list(role_of(s).deadlines(core, s)) == []
