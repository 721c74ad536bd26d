"""The quorum's named transitions (Kafka's QuorumState): where this node starts and
how it enters each state.

Each transition persists what must be durable first (the ElectionState goes into
the next Ready before any message of it), replaces the state object (so replies
meant for the old one are recognised as stale) and starts what the new state
does at once (votes, BeginQuorumEpoch, EndQuorumEpoch). The core calls them from
its RPC handlers, its roles (kraft.raft.roles) from their deadlines. Two more
decide which transition an event calls for: `maybe_learn` (a newer epoch or a
newly known leader in any answer) and `voters_changed` (the set in force moved).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kraft.raft import roles  # a module import: roles imports this module too
from kraft.raft.messages import NO_LEADER
from kraft.raft.state import (
    Candidate,
    ElectionState,
    Follower,
    Leader,
    Prospective,
    QuorumState,
    ReplicaState,
    Resigned,
    Unattached,
)
from metadata_log.batch import encode_batch
from metadata_log.records import KRaftVersionRecord, LeaderChangeMessage, Record

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore


def initial_state(core: RaftCore, es: ElectionState) -> QuorumState:
    log_epoch = core.log.latest_epoch
    if log_epoch > es.leader_epoch:
        # The log holds an epoch the quorum-state file never recorded (the file
        # was lost or restored from an older copy). As Kafka's
        # QuorumState.initialize does, start Unattached in the log's epoch with
        # no vote, and write that down: the epoch must never go back.
        core._persist(ElectionState(log_epoch, None, None))
        deadline = core._election_timeout() if core._can_campaign() else None
        if core.is_voter and core.voters == {core.node_id}:
            deadline = core._now
        return Unattached(log_epoch, None, deadline)
    epoch = es.leader_epoch
    if not core._can_campaign():
        # Not a voter by its own log, yet it may have voted in this epoch (a voter
        # its log does not show yet, KIP-853) and candidates still ask it: the
        # vote is kept, or it could vote twice in one epoch after a restart.
        if es.leader_id is not None and es.leader_id != core.node_id:
            return Follower(
                epoch, es.leader_id, es.voted_id, core._now + core.config.fetch_timeout_ms
            )
        return Unattached(epoch, es.voted_id, None)
    if es.leader_id == core.node_id:
        # A restarted leader does not know what it committed: it resigns its
        # epoch (refusing votes in it) and lets the others elect.
        others = core.voters - {core.node_id}
        deadline = core._now if not others else core._election_timeout()
        return Resigned(epoch, deadline, (), unacked=set(others))
    if es.leader_id is not None:
        return Follower(epoch, es.leader_id, es.voted_id, core._now + core.config.fetch_timeout_ms)
    # Voted for itself before a crash: it stays out of this epoch (its vote is
    # spent) and campaigns again in a later one after the election timeout.
    deadline = core._now if core.voters == {core.node_id} else core._election_timeout()
    return Unattached(epoch, es.voted_id, deadline)


def become_unattached(core: RaftCore, epoch: int, voted_id: int | None = None) -> None:
    if voted_id is None and core._election.leader_epoch == epoch:
        # the same epoch (a follower whose leader went silent, a removed leader
        # handing over): a vote cast in it stays cast, in the file and the state
        voted_id = core._election.voted_id
    deadline = core._election_timeout() if core._can_campaign() else None
    core._persist(ElectionState(epoch, None, voted_id))
    core._set_state(Unattached(epoch, voted_id, deadline))


def become_follower(core: RaftCore, epoch: int, leader_id: int) -> None:
    voted = core._election.voted_id if core._election.leader_epoch == epoch else None
    core._persist(ElectionState(epoch, leader_id, voted))
    core._set_state(Follower(epoch, leader_id, voted, core._now + core.config.fetch_timeout_ms))


def become_prospective(core: RaftCore) -> None:
    s = core.state
    leader = s.leader_id if isinstance(s, Follower) else None
    voted = core._election.voted_id if core._election.leader_epoch == s.epoch else None
    p = Prospective(s.epoch, leader, voted, core._election_timeout())
    core._set_state(p)
    _start_election(core, p, become_candidate)


def become_candidate(core: RaftCore) -> None:
    epoch = core.epoch + 1
    core._persist(ElectionState(epoch, None, core.node_id))
    c = Candidate(epoch, core._election_timeout())
    core._set_state(c)
    _start_election(core, c, become_leader)


def _start_election(
    core: RaftCore, s: Prospective | Candidate, on_majority: Callable[[RaftCore], None]
) -> None:
    """Grant itself; if that is a majority already (a single voter) go on at once,
    else ask the other voters."""
    s.granted.add(core.node_id)
    if len(s.granted & core.voters) >= core._majority():
        on_majority(core)
    else:
        roles.send_votes(core, s)


def become_leader(core: RaftCore) -> None:
    s = core.state
    assert isinstance(s, Candidate)
    epoch = s.epoch
    core._persist(ElectionState(epoch, core.node_id, core.node_id))
    others = core.voters - {core.node_id}
    leader = Leader(
        epoch,
        core.log.end_offset,
        {v: ReplicaState(v) for v in sorted(core.voters)},
        {},
        core._now + core.config.check_quorum_timeout_ms,
        unacked=set(others),
        granting_voters=tuple(sorted(s.granted)),
    )
    core._set_state(leader)
    # The first batch of every epoch: the HW can only advance once an offset
    # of this epoch (this one) is on a majority (Raft's commit rule).
    records: list[Record] = [
        LeaderChangeMessage(core.node_id, tuple(sorted(core.voters)), leader.granting_voters)
    ]
    base = core.log.end_offset
    # KIP-853: the first leader writes the bootstrap voter set into the log.
    bootstrap = core._membership.bootstrap_to_write()
    if bootstrap is not None:
        records += [KRaftVersionRecord(1), bootstrap.to_record()]
    batch = encode_batch(base, epoch, core._now + core.wall_offset_ms, records, control=True)
    core.log.append(batch)
    if bootstrap is not None:
        core._membership.history.add(base + 2, bootstrap)
        voters_changed(core)
    roles.role_of(leader).poll(core, leader)  # BeginQuorumEpoch to the voters
    core._maybe_advance_hw()


def become_resigned(core: RaftCore, successors: tuple[int, ...]) -> None:
    others = set(core.voters - {core.node_id})
    r = Resigned(core.epoch, core._election_timeout(), successors, unacked=others)
    core._set_state(r)
    roles.role_of(r).poll(core, r)  # EndQuorumEpoch to the voters


def maybe_learn(core: RaftCore, epoch: int, leader_id: int) -> bool:
    """Kafka's maybeHandleCommonResponse: move to a newer epoch or a newly known leader.

    Returns True when the state changed.
    """
    if epoch > core.epoch:
        if leader_id != NO_LEADER and leader_id != core.node_id:
            become_follower(core, epoch, leader_id)
        else:
            become_unattached(core, epoch)
        return True
    s = core.state
    if (
        epoch == core.epoch
        and leader_id != NO_LEADER
        and leader_id != core.node_id
        and isinstance(s, Unattached | Prospective | Candidate)
    ):
        if isinstance(s, Prospective) and s.leader_id == leader_id:
            # The leader we lost contact with: voters that still name it may
            # have lost it too (their pre-votes say). Going back to it now
            # would stop the election that replaces a dead leader; the
            # election timeout takes us back to it if it is alive.
            return False
        become_follower(core, epoch, leader_id)
        return True
    return False


def voters_changed(core: RaftCore) -> None:
    """Put the newest voter set in force (after an append, truncation or snapshot)."""
    if not core._membership.refresh():
        return
    match getattr(core, "state", None):
        case Leader() as s:
            core._membership.move_replicas(s)
            # The new set gets a whole check-quorum period (a single voter's
            # deadline is never refreshed: growing from one voter must not
            # resign at once).
            s.check_quorum_deadline_ms = core._now + core.config.check_quorum_timeout_ms
            core._maybe_advance_hw()
        case Prospective() | Candidate() as s if not core._can_campaign():
            # No longer a voter: out of the election (a candidate's vote is spent).
            voted = core._election.voted_id if core._election.leader_epoch == s.epoch else None
            core._set_state(Unattached(s.epoch, voted, None))
        case Unattached() as s if core._can_campaign():
            if s.election_deadline_ms is None:
                s.election_deadline_ms = core._election_timeout()
        case Unattached() as s:
            s.election_deadline_ms = None
