"""Each quorum state's timers and polling, in one place per state type.

`RaftCore.tick`, `next_wake_ms` and `_poll` used to be three isinstance ladders
that had to agree about every deadline; now each asks the role of the current
state (`role_of(state)`) the same questions:

  deadlines(core, s)      the times this state's timers fire (next_wake_ms)
  on_deadline(core, s)    what the state does when one has come (tick)
  poll(core, s)           what it sends unprompted: BeginQuorumEpoch (leader),
                          EndQuorumEpoch (resigned), votes (prospective,
                          candidate), a Fetch or FetchSnapshot (follower, observer)

A role is a stateless object; its state's data lives in kraft.raft.state and
its transitions are the named functions of kraft.raft.transitions (Kafka keeps
one class per state, QuorumState.java the transitions). The core passes itself,
so a role reads what the core knows and acts only through the transitions and
the core's send helper.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kraft.raft import transitions
from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    RaftRequest,
    VoteRequest,
)
from kraft.raft.state import (
    Candidate,
    Follower,
    Leader,
    Prospective,
    QuorumState,
    Resigned,
    Unattached,
)
from kraft.raft.voters import UNKNOWN_DIRECTORY

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
            transitions.become_resigned(core, ())

    def poll(self, core: RaftCore, s: Leader) -> None:
        resend(core, s, BeginQuorumEpochRequest(core.cluster_id, core.node_id, s.epoch))


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
                transitions.become_unattached(core, s.epoch)
        elif now >= s.election_deadline_ms:
            transitions.become_prospective(core)

    def poll(self, core: RaftCore, s: Resigned) -> None:
        req = EndQuorumEpochRequest(core.cluster_id, core.node_id, s.epoch, s.preferred_successors)
        resend(core, s, req)


class FetchingRole(Role[S]):
    """A state that fetches (a follower from its leader, an observer from whoever
    may know the leader): one Fetch (or FetchSnapshot) in flight at a time."""

    def wants_fetch(self, core: RaftCore, s: S) -> bool:
        return True

    def fetch_target(self, core: RaftCore, s: S) -> int | None:
        """Whom to fetch from now: None, nobody to ask."""
        raise NotImplementedError

    def fetch_deadlines(self, core: RaftCore, s: S) -> Iterable[int]:
        log = core.log
        if (
            core._fetch_correlation is None
            and self.wants_fetch(core, s)
            and log.flushed_offset >= log.end_offset
        ):
            # (While the log waits for its flush, on_flushed sends the fetch: a
            # timer then would only make the shell spin.)
            yield core._fetch_backoff_until

    def poll(self, core: RaftCore, s: S) -> None:
        if not self.wants_fetch(core, s) or core._fetch_correlation is not None:
            return
        if core._now < core._fetch_backoff_until:
            return
        log = core.log
        if log.flushed_offset < log.end_offset:
            return  # fetch_offset reports durable data only: wait for on_flushed
        destination = self.fetch_target(core, s)
        if destination is None:
            return
        cfg = core.config
        sf = core._snapshot_fetch
        if sf is not None:
            req: RaftRequest = FetchSnapshotRequest(
                core.cluster_id,
                core.node_id,
                s.epoch,
                sf.snapshot_id,
                len(sf.data),
                cfg.snapshot_chunk_bytes,
                core.is_voter,
                core.directory_id,
            )
        else:
            req = FetchRequest(
                core.cluster_id,
                core.node_id,
                core.is_voter,
                s.epoch,
                log.end_offset,
                core._last_epoch(),
                cfg.fetch_max_wait_ms,
                cfg.fetch_max_bytes,
                core.high_watermark,
                core.directory_id,
            )
        timeout = cfg.fetch_max_wait_ms + cfg.request_timeout_ms
        core._fetch_correlation = core._send(destination, req, core._now + timeout)


class FollowerRole(FetchingRole[Follower]):
    def deadlines(self, core: RaftCore, s: Follower) -> Iterable[int]:
        yield s.fetch_deadline_ms
        yield from self.fetch_deadlines(core, s)

    def on_deadline(self, core: RaftCore, s: Follower) -> None:
        if core._now >= s.fetch_deadline_ms:
            if core._can_campaign():
                transitions.become_prospective(core)
            else:
                transitions.become_unattached(core, s.epoch)

    def fetch_target(self, core: RaftCore, s: Follower) -> int | None:
        return s.leader_id


class UnattachedRole(FetchingRole[Unattached]):
    def deadlines(self, core: RaftCore, s: Unattached) -> Iterable[int]:
        if s.election_deadline_ms is not None:
            yield s.election_deadline_ms
        yield from self.fetch_deadlines(core, s)

    def on_deadline(self, core: RaftCore, s: Unattached) -> None:
        deadline = s.election_deadline_ms
        if deadline is not None and core._now >= deadline and core._can_campaign():
            transitions.become_prospective(core)

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
            transitions.become_follower(core, s.epoch, s.leader_id)
        else:
            transitions.become_prospective(core)

    def poll(self, core: RaftCore, s: Prospective | Candidate) -> None:
        if s.next_send_ms:
            send_votes(core, s)


def send_votes(core: RaftCore, s: Prospective | Candidate) -> None:
    """(Pre-)vote requests to every voter that has not answered and has none in
    flight. A failed request is retried after the backoff (the peer may just be
    starting), so one lost message does not cost a whole election timeout."""
    pre_vote = isinstance(s, Prospective)
    req = VoteRequest(
        core.cluster_id,
        core.node_id,
        s.epoch + 1 if pre_vote else s.epoch,
        core._last_epoch(),
        core.log.end_offset,
        pre_vote=pre_vote,
    )
    busy = {inf.destination for inf in core._inflight.values() if inf.state is s}
    for v in sorted(core.voters - {core.node_id}):
        if v in s.granted or v in s.rejected or v in busy:
            continue
        if core._now < s.next_send_ms.get(v, 0):
            continue
        # Never later than the election deadline, when the state is replaced.
        s.next_send_ms[v] = s.election_deadline_ms
        voter = core.voter_set.get(v)
        d = voter.directory_id if voter is not None else UNKNOWN_DIRECTORY
        out = dataclasses.replace(req, voter_directory_id=d) if d else req
        core._send(v, out, core._now + core.config.election_timeout_ms)


def resend(core: RaftCore, s: Leader | Resigned, req: RaftRequest) -> None:
    """Send `req` to each unacknowledged voter with no request in flight to it."""
    busy = {
        inf.destination
        for inf in core._inflight.values()
        if inf.state is s and type(inf.request) is type(req)
    }
    timeout = core.config.request_timeout_ms
    for v in sorted(s.unacked):
        if v not in busy and core._now >= s.next_send_ms.get(v, 0):
            s.next_send_ms[v] = core._now + timeout
            core._send(v, req, core._now + timeout)


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
