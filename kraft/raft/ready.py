"""Ready: everything the core wants done, handed to the shell in one piece (etcd's Ready).

The shell handles a Ready in this order:
1. `election_state`: write the quorum-state file durably (tmp + fsync + rename)
   BEFORE sending anything from this Ready: a vote grant or a BeginQuorumEpoch
   in `messages`/`responses` may depend on it.
2. `flush_to`: fsync the log (may run concurrently with 3.), then call
   `core.on_flushed(log.flushed_offset, now)`.
3. send `messages` (requests to peers; answer with `core.handle_response(
   correlation, response, now)` or `core.request_failed(correlation, now)`) and
   `responses` (answers to inbound requests, by the correlation the shell passed
   to `handle_request`).
4. `high_watermark`, `leader_change`, `snapshot_loaded`: tell the state machine
   (kraft.raft_shell.driver does this).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft.raft.messages import RaftRequest, RaftResponse
from kraft.raft.state import ElectionState, LeaderAndEpoch
from metadata_log.snapshot import SnapshotId


@dataclass(frozen=True, slots=True)
class Outbound:
    """A request to send to `destination`; its answer comes back under `correlation`."""

    destination: int
    message: RaftRequest
    correlation: int


@dataclass(slots=True)
class Ready:
    election_state: ElectionState | None = None
    flush_to: int | None = None
    messages: list[Outbound] = field(default_factory=list)
    responses: list[tuple[int, RaftResponse]] = field(default_factory=list)
    high_watermark: int | None = None
    leader_change: LeaderAndEpoch | None = None
    snapshot_loaded: SnapshotId | None = None

    @property
    def empty(self) -> bool:
        return (
            self.election_state is None
            and self.flush_to is None
            and not self.messages
            and not self.responses
            and self.high_watermark is None
            and self.leader_change is None
            and self.snapshot_loaded is None
        )
