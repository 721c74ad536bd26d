"""The leader's view of its replicas' progress (Kafka's LeaderState, etcd's tracker/).

Fed by fetches: which replica counts toward the high watermark (a voter by its
key, KIP-853), how far each has fetched and when it was last caught up (for
AddVoter and DescribeQuorum), and whether a majority fetched within the check-
quorum period. The high watermark itself stays in the core, which owns it.
"""

from __future__ import annotations

from kraft.raft.membership import Membership
from kraft.raft.messages import FetchRequest, FetchSnapshotRequest
from kraft.raft.state import Leader, ReplicaState


def update_replica(
    s: Leader,
    membership: Membership,
    req: FetchRequest | FetchSnapshotRequest,
    end_offset: int | None,
    now_ms: int,
    log_end_offset: int,
    check_quorum_timeout_ms: int,
) -> ReplicaState | None:
    """Account a fetch from `req.replica_id` (`end_offset`: its validated fetch offset,
    None for a diverging fetch); the replica's state, or None for the leader itself."""
    rid = req.replica_id
    if rid == membership.node_id:
        return None
    # Only the leader's current voters count toward the high watermark, by
    # voter key (KIP-853): the same id with another directory id (a wiped
    # disk) is an observer. A voter whose directory id is not known yet (a
    # static bootstrap) counts when it says it is a voter.
    voter = membership.voter_set.get(rid)
    if voter is None:
        counts = False
    elif voter.directory_id:
        counts = voter.directory_id == req.replica_directory_id
    else:
        counts = req.replica_is_voter
    table = s.voter_states if counts else s.observer_states
    replica = table.get(rid)
    if replica is None or (counts and replica.directory_id != req.replica_directory_id):
        replica = table[rid] = ReplicaState(rid, directory_id=req.replica_directory_id)
    elif replica.directory_id != req.replica_directory_id:
        # Another incarnation of this id (a wiped disk): its progress starts over.
        replica = table[rid] = ReplicaState(rid, directory_id=req.replica_directory_id)
    replica.last_fetch_ms = now_ms
    if end_offset is not None:
        replica.end_offset = end_offset
        if end_offset >= log_end_offset:
            replica.last_caught_up_ms = now_ms
        elif 0 < replica.last_fetch_leader_end <= end_offset:
            # it reached where the leader was at its previous fetch: a replica
            # that keeps up with a busy leader is never at its very end
            replica.last_caught_up_ms = max(replica.last_caught_up_ms, replica.last_fetch_valid_ms)
        replica.last_fetch_leader_end = log_end_offset
        replica.last_fetch_valid_ms = now_ms
    if counts:
        s.unacked.discard(rid)  # a fetch acknowledges BeginQuorumEpoch
        s.fetched_since_check.add(rid)
        me = {membership.node_id} if membership.is_voter else set()
        if len(s.fetched_since_check | me) >= membership.majority:
            s.check_quorum_deadline_ms = now_ms + check_quorum_timeout_ms
            s.fetched_since_check.clear()
    return replica


def preferred_successors(s: Leader, node_id: int) -> tuple[int, ...]:
    """The other voters ordered by how far they have fetched (EndQuorumEpoch's
    preferred successors: the best placed campaigns first)."""
    others = [r for v, r in s.voter_states.items() if v != node_id]
    others.sort(key=lambda r: (-r.end_offset, -r.last_fetch_ms, r.node_id))
    return tuple(r.node_id for r in others)
