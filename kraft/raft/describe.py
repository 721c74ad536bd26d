"""DescribeQuorum: a RaftCore's view of the quorum, shaped as GET /v1/quorum (DESIGN 1.2).

Read-only: it looks at the core's state and changes nothing, so it lives apart
from the core's transitions. Only a leader knows the replicas' progress; any
other node lists the voters it knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kraft.raft.state import Leader, ReplicaState

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore


def describe_quorum(core: RaftCore, now_ms: int) -> dict[str, Any]:
    """`core`'s view of the quorum (DescribeQuorum's timestamps are wall clock)."""
    s = core.state
    out: dict[str, Any] = {
        "cluster_id": core.cluster_id,
        "node_id": core.node_id,
        "state": core.state_name,
        "leader_id": core.leader_id,
        "leader_epoch": core.epoch,
        "high_watermark": core.high_watermark,
        "log_end_offset": core.log.end_offset,
        "voters": [],
        "observers": [],
    }
    if isinstance(s, Leader):
        out["voters"] = [_row(core, r, now_ms, True) for _, r in sorted(s.voter_states.items())]
        out["observers"] = [
            _row(core, r, now_ms, False) for _, r in sorted(s.observer_states.items())
        ]
    else:
        out["voters"] = [
            {"node_id": v.node_id, "directory_id": v.directory_id} for v in core.voter_set
        ]
    out["directory_id"] = core.directory_id
    out["voter_endpoints"] = {str(v.node_id): v.url for v in core.voter_set if v.url}
    return out


def _row(core: RaftCore, r: ReplicaState, now_ms: int, voter_row: bool) -> dict[str, Any]:
    """One replica's progress as the leader sees it (its own row: its log end, now).

    A voter's row names the voter set's directory id; an observer's row the one it
    fetches with, even when its node id is a voter's (a replacement controller on
    a new disk, KIP-853: the id `add-controller` needs is the observer's)."""
    end = core.log.end_offset
    off = core.wall_offset_ms

    def stamp(ms: int) -> int:
        return ms + off if ms >= 0 else ms

    own = r.node_id == core.node_id
    leo = end if own else r.end_offset
    voter = core.voter_set.get(r.node_id)
    d = core.directory_id if own else r.directory_id
    if voter_row and voter is not None and voter.directory_id:
        d = voter.directory_id
    return {
        "node_id": r.node_id,
        "directory_id": d,
        "log_end_offset": leo,
        "lag": max(end - leo, 0) if leo >= 0 else end,
        "last_fetch_timestamp": stamp(now_ms if own else r.last_fetch_ms),
        "last_caught_up_timestamp": stamp(now_ms if own else r.last_caught_up_ms),
    }
