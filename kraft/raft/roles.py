"""Each quorum state's timers and polling, in one place per state type.

`RaftCore.tick`, `next_wake_ms` and `_poll` used to be three isinstance ladders
that had to agree about every deadline; now each asks the role of the current
state (`role_of(state)`) the same questions:

  deadlines(core, s)      the times this state's timers fire (next_wake_ms)
  on_deadline(core, s)    what the state does when one has come (tick)
  poll(core, s)           what it sends unprompted (BeginQuorumEpoch, votes, ...)
  wants_fetch(core, s)    whether it fetches (followers, observers) ...
  fetch_target(core, s)   ... and from whom

A role is a stateless object; its state's data lives in kraft.raft.state and
its transitions are the core's named `_become_*` methods (Kafka keeps one class
per state, QuorumState.java the transitions). The core passes itself, so a role
reads what the core knows and acts only through the core's methods.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kraft.raft.state import (
    Candidate,
    Follower,
    Leader,
    Prospective,
    QuorumState,
    Resigned,
    Unattached,
)

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore

S = TypeVar("S", bound=QuorumState)


class Role(Generic[S]):
    """The default: no timers, nothing to send, no fetching."""

    def deadlines(self, core: RaftCore, s: S) -> Iterable[int]:
        return ()

    def on_deadline(self, core: RaftCore, s: S) -> None:
        return None

    def poll(self, core: RaftCore, s: S) -> None:
        return None

    def wants_fetch(self, core: RaftCore, s: S) -> bool:
        return False

    def fetch_target(self, core: RaftCore, s: S) -> int | None:
        """Whom to fetch from now (wants_fetch only): None, nobody to ask."""
        return None


class LeaderRole(Role[Leader]):
    def deadlines(self, core: RaftCore, s: Leader) -> Iterable[int]:
        if core.voters != {core.node_id}:
            yield s.check_quorum_deadline_ms
        d = core._purgatory.next_deadline_ms()
        if d is not None:
            yield d
        if s.hw_announce_ms is not None:
            yield s.hw_announce_ms
        yield from (s.next_send_ms.get(v, 0) for v in s.unacked)

    def on_deadline(self, core: RaftCore, s: Leader) -> None:
        now = core._now
        if s.hw_announce_ms is not None and now >= s.hw_announce_ms:
            core._announce_hw(s)
        for parked in core._purgatory.expire(now):
            core._respond(parked.correlation, core._fetch_data(s, parked.request))
        if core.voters != {core.node_id} and now >= s.check_quorum_deadline_ms:
            # A majority has not fetched for 1.5 fetch timeouts: we may be
            # partitioned away; stop accepting writes that cannot commit.
            core._become_resigned(())

    def poll(self, core: RaftCore, s: Leader) -> None:
        core._send_begin_quorum(s)


class ResignedRole(Role[Resigned]):
    def deadlines(self, core: RaftCore, s: Resigned) -> Iterable[int]:
        yield s.election_deadline_ms
        yield from (s.next_send_ms.get(v, 0) for v in s.unacked)

    def on_deadline(self, core: RaftCore, s: Resigned) -> None:
        now = core._now
        if not core._can_campaign():
            # A leader that removed itself (or was removed) hands over, then
            # follows the new leader as an observer.
            if now >= s.election_deadline_ms or not s.unacked:
                core._become_unattached(s.epoch)
        elif now >= s.election_deadline_ms:
            core._become_prospective()

    def poll(self, core: RaftCore, s: Resigned) -> None:
        core._send_end_quorum(s)


class FollowerRole(Role[Follower]):
    def deadlines(self, core: RaftCore, s: Follower) -> Iterable[int]:
        return (s.fetch_deadline_ms,)

    def on_deadline(self, core: RaftCore, s: Follower) -> None:
        if core._now >= s.fetch_deadline_ms:
            if core._can_campaign():
                core._become_prospective()
            else:
                core._become_unattached(s.epoch)

    def wants_fetch(self, core: RaftCore, s: Follower) -> bool:
        return True

    def fetch_target(self, core: RaftCore, s: Follower) -> int | None:
        return s.leader_id


class UnattachedRole(Role[Unattached]):
    def deadlines(self, core: RaftCore, s: Unattached) -> Iterable[int]:
        return () if s.election_deadline_ms is None else (s.election_deadline_ms,)

    def on_deadline(self, core: RaftCore, s: Unattached) -> None:
        deadline = s.election_deadline_ms
        if deadline is not None and core._now >= deadline and core._can_campaign():
            core._become_prospective()

    def wants_fetch(self, core: RaftCore, s: Unattached) -> bool:
        return not core.is_voter  # an observer looking for the leader

    def fetch_target(self, core: RaftCore, s: Unattached) -> int | None:
        # An observer without a leader asks the voters in turn (or, before it
        # knows any, the --bootstrap-controllers); any answer names the leader.
        others = sorted(core.voters - {core.node_id}) or list(core._membership.bootstrap_servers)
        if not others:
            return None
        return others[core._bootstrap_index % len(others)]


class ElectionRole(Role[Prospective | Candidate]):
    """Prospective (pre-vote) and Candidate: ask the voters until the election
    deadline; a failed request is asked again after the backoff."""

    def deadlines(self, core: RaftCore, s: Prospective | Candidate) -> Iterable[int]:
        yield s.election_deadline_ms
        yield from (
            t for v, t in s.next_send_ms.items() if v not in s.granted and v not in s.rejected
        )

    def on_deadline(self, core: RaftCore, s: Prospective | Candidate) -> None:
        if core._now < s.election_deadline_ms or not core._can_campaign():
            return
        if isinstance(s, Prospective) and s.leader_id is not None:
            # Lost the pre-vote: back to the leader we knew (KIP-996), to
            # fetch from it again; a dead one times out once more.
            core._become_follower(s.epoch, s.leader_id)
        else:
            core._become_prospective()

    def poll(self, core: RaftCore, s: Prospective | Candidate) -> None:
        if s.next_send_ms:
            core._send_votes()


_ELECTION = ElectionRole()
ROLES: dict[type, Role[Any]] = {
    Leader: LeaderRole(),
    Resigned: ResignedRole(),
    Follower: FollowerRole(),
    Unattached: UnattachedRole(),
    Prospective: _ELECTION,
    Candidate: _ELECTION,
}


def role_of(s: QuorumState) -> Role[Any]:
    return ROLES[type(s)]
