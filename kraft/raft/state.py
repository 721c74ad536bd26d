"""Quorum states (Kafka's QuorumState) and the persisted ElectionState.

One object per state; a transition replaces it. Each holds only what its state
needs (votes collected, replica progress, timers), so a stale callback can
recognise that the state it was meant for is gone (`is` comparison).

The core's bookkeeping records sit at the end: a request in flight (tied to the
state that sent it), a parked long-poll Fetch, a snapshot download.

ElectionState is what the ``quorum-state`` file holds: leader_epoch, leader_id,
voted_id. It is written (tmp + fsync + rename, by the shell) before a vote is
granted or an epoch begins; a pre-vote changes nothing and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kraft.raft.messages import NO_LEADER, FetchRequest, RaftRequest
from metadata_log.snapshot import SnapshotId


@dataclass(frozen=True, slots=True)
class ElectionState:
    leader_epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The quorum-state file's JSON object (DESIGN 1.5); -1 stands for none."""
        return {
            "leader_epoch": self.leader_epoch,
            "leader_id": NO_LEADER if self.leader_id is None else self.leader_id,
            "voted_id": NO_LEADER if self.voted_id is None else self.voted_id,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ElectionState:
        epoch, leader, voted = obj["leader_epoch"], obj["leader_id"], obj["voted_id"]
        if not all(type(v) is int for v in (epoch, leader, voted)) or epoch < 0:
            raise ValueError(f"malformed quorum state {obj!r}")
        return cls(epoch, None if leader < 0 else leader, None if voted < 0 else voted)


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """Who leads which epoch, as listeners are told (leader_id None: unknown)."""

    leader_id: int | None
    epoch: int


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one replica's progress (for the HW and describe-quorum)."""

    node_id: int
    end_offset: int = -1  # last validated fetch offset; -1 before its first fetch
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    directory_id: str = ""  # from its fetches (KIP-853); "" until it fetched
    # The leader's log end offset and the time at its last validated fetch: a
    # fetch that reaches that end shows the replica caught up as of then (Kafka's
    # ReplicaState.updateFollowerState), even when the leader appended since.
    last_fetch_leader_end: int = -1
    last_fetch_valid_ms: int = -1


@dataclass(slots=True)
class Unattached:
    """No known leader in `epoch`; a voter may hold a vote (voted_id).

    Observers live here while they look for the leader (no election timer).
    """

    epoch: int
    voted_id: int | None
    election_deadline_ms: int | None
    name: str = "unattached"


@dataclass(slots=True)
class Prospective:
    """KIP-996: asking for pre-votes for epoch + 1 without changing anything durable."""

    epoch: int
    leader_id: int | None  # the leader we lost contact with, if any
    voted_id: int | None
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    # A voter whose request failed is asked again after the retry backoff.
    next_send_ms: dict[int, int] = field(default_factory=dict)
    name: str = "prospective"


@dataclass(slots=True)
class Candidate:
    epoch: int
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    next_send_ms: dict[int, int] = field(default_factory=dict)
    name: str = "candidate"


@dataclass(slots=True)
class Leader:
    epoch: int
    epoch_start_offset: int  # offset of this epoch's LeaderChangeMessage
    voter_states: dict[int, ReplicaState]
    observer_states: dict[int, ReplicaState]
    check_quorum_deadline_ms: int
    fetched_since_check: set[int] = field(default_factory=set)
    # Voters that have not acknowledged BeginQuorumEpoch (nor fetched) yet.
    unacked: set[int] = field(default_factory=set)
    next_send_ms: dict[int, int] = field(default_factory=dict)
    granting_voters: tuple[int, ...] = ()
    # When parked fetches are answered to announce a high watermark that moved
    # (None: nothing to announce). New data before then answers them sooner.
    hw_announce_ms: int | None = None
    name: str = "leader"


@dataclass(slots=True)
class Follower:
    epoch: int
    leader_id: int
    voted_id: int | None
    fetch_deadline_ms: int  # no contact with the leader by then: Prospective
    # Set by EndQuorumEpoch: the leader said it is leaving, so pre-votes may be granted.
    leader_resigned: bool = False
    # Whether the leader has been heard from (a fetch answered, BeginQuorumEpoch)
    # in this state. A follower that only read the leader from its quorum-state
    # file after a restart has no evidence the leader is alive, so it may grant
    # pre-votes (Kafka's FollowerState.hasFetchedFromLeader).
    leader_contacted: bool = False
    name: str = "follower"


@dataclass(slots=True)
class Resigned:
    """A leader that gave up its epoch (graceful shutdown, check quorum, restart)."""

    epoch: int
    election_deadline_ms: int
    preferred_successors: tuple[int, ...]
    unacked: set[int] = field(default_factory=set)
    next_send_ms: dict[int, int] = field(default_factory=dict)
    name: str = "resigned"


QuorumState = Unattached | Prospective | Candidate | Leader | Follower | Resigned


@dataclass(slots=True)
class InFlight:
    """A request of ours awaiting its answer (the core's bookkeeping)."""

    destination: int
    request: RaftRequest
    deadline_ms: int
    state: QuorumState  # the state that sent it: a reply to a stale state is ignored


@dataclass(slots=True)
class ParkedFetch:
    """A leader's long-polling Fetch, parked in the purgatory."""

    correlation: int
    request: FetchRequest


@dataclass(slots=True)
class SnapshotFetch:
    """A follower's snapshot download in progress (FetchSnapshot chunks so far)."""

    snapshot_id: SnapshotId
    leader_id: int
    epoch: int
    data: bytearray
