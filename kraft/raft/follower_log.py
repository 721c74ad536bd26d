"""What a follower (or observer) does to its log with a leader's answer.

The core's Fetch and FetchSnapshot response handlers check that an answer is
current (the awaited correlation, the leader and epoch being followed); this
module then applies it: truncate where the leader says the logs diverge,
append the batches (a VotersRecord among them is in force at once, KIP-853),
follow the leader's high watermark, install a downloaded snapshot. Kafka's
KafkaRaftClient does the same in handleFetchResponse / appendAsFollower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraft.raft import log_positions, transitions
from kraft.raft.errors import TruncationBelowHighWatermarkError
from kraft.raft.membership import Membership
from kraft.raft.messages import DivergingEpoch
from kraft.raft.state import SnapshotFetch
from metadata_log.batch import iter_headers

if TYPE_CHECKING:
    from kraft.raft.core import RaftCore


def truncate_diverging(core: RaftCore, d: DivergingEpoch) -> None:
    """Drop what the leader's log does not hold (never below the high watermark:
    that would lose committed data, a broken safety property)."""
    log = core.log
    target = log_positions.truncation_offset(log, d)
    if target < core.high_watermark:
        raise TruncationBelowHighWatermarkError(
            f"node {core.node_id}: truncation to {target} below HW {core.high_watermark}"
        )
    log.truncate_to(target)
    core._flush_requested = min(core._flush_requested, log.end_offset)
    if core._membership.history.truncate_from(log.end_offset):
        transitions.voters_changed(core)  # back to the previous voter set


def append_fetched(core: RaftCore, records: bytes) -> bool:
    """Append a Fetch answer's batches; False (nothing appended) when they do not
    start where our log ends (a stale answer)."""
    log = core.log
    first = True
    voters = False
    for pos, header in iter_headers(records, "<fetch response>"):
        if first and header.base_offset != log.end_offset:
            return False  # not where our log ends (a stale answer): ignore
        first = False
        log.append(records[pos : pos + header.length])
        if header.control and core._membership.note_control_batch(records, pos, header):
            voters = True
    if voters:
        transitions.voters_changed(core)  # in force as soon as appended
    return True


def follow_high_watermark(core: RaftCore, leader_hw: int) -> None:
    """The leader's high watermark, as far as our log reaches; it never goes back."""
    hw = min(leader_hw, core.log.end_offset)
    if hw > core.high_watermark:
        core.high_watermark = hw


def install_snapshot(core: RaftCore, sf: SnapshotFetch) -> None:
    """A whole snapshot downloaded: it replaces the log below its end, brings its
    voter set, and is committed data (the high watermark moves to its end)."""
    log = core.log
    log.install_snapshot(sf.snapshot_id, bytes(sf.data))
    core._flush_requested = min(core._flush_requested, log.end_offset)
    core._snapshot_fetch = None
    core._membership.history.reset_to_snapshot(
        sf.snapshot_id.end_offset, Membership.read_snapshot_voters(log, sf.snapshot_id)
    )
    transitions.voters_changed(core)
    if sf.snapshot_id.end_offset > core.high_watermark:
        core.high_watermark = sf.snapshot_id.end_offset
    core._snapshot_loaded = sf.snapshot_id
