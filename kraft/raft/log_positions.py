"""Positions read off a ReplicatedLog that must account for the snapshot it starts at.

Pure functions of the log (no state of their own): the core asks them for
Kafka's lastFetchedEpoch, whether a follower's fetch position is valid,
diverging or below the log start (validateOffsetAndEpoch), where a follower
truncates, and for the id of a snapshot the state machine wants to write. Each
knows the one case a plain epoch-cache lookup gets wrong: a log trimmed to (or
emptied past) a snapshot no longer holds the snapshot's own epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft.raft.messages import DivergingEpoch
from kraft.raft.replicated_log import ReplicatedLog
from metadata_log.snapshot import SnapshotId


def last_epoch(log: ReplicatedLog) -> int:
    """The epoch of the last offset this node holds (Kafka's lastFetchedEpoch).

    When the log is empty past a snapshot, the last offset is the snapshot's,
    so is its epoch: the log's epoch cache may not say (an emptied log keeps
    the epoch that was in effect at its start, which can be a later one).
    """
    if log.end_offset == log.start_offset:
        snap = log.latest_snapshot_id()
        if snap is not None and snap.end_offset == log.end_offset:
            return snap.epoch
    return log.latest_epoch


def end_offset_for_epoch(log: ReplicatedLog, epoch: int) -> tuple[int, int]:
    """log.end_offset_for_epoch, knowing the epoch of the snapshot the log starts at.

    After the log is trimmed to a snapshot, its epoch cache starts with the
    epoch of the first batch kept: the snapshot's own epoch (that of its last
    offset) is gone from it. A follower that loaded that snapshot fetches with
    it as its last epoch, and must be told it matches, or it would load the
    same snapshot again forever.
    """
    found, end = log.end_offset_for_epoch(epoch)
    snap = log.latest_snapshot_id()
    if snap is not None and snap.end_offset == log.start_offset and found < snap.epoch <= epoch:
        end = log.end_offset
        for e, start in log.epoch_entries():
            if e > snap.epoch:
                end = max(start, snap.end_offset)
                break
        return snap.epoch, end
    return found, end


def snapshot_id_at(log: ReplicatedLog, end_offset: int, high_watermark: int) -> SnapshotId:
    """The id for a snapshot of the state machine up to `end_offset` (exclusive).

    For the state machine, on any node: `end_offset` must be committed (at
    most the high watermark), inside the log, and the end of a batch (an
    offset the state machine has applied up to). The epoch is that of the
    last offset the snapshot contains, as Kafka names snapshots. The caller
    writes the snapshot through its log; the core then serves it to
    followers behind the log start.
    """
    if end_offset > high_watermark:
        raise ValueError(f"snapshot at {end_offset} is past the high watermark {high_watermark}")
    if end_offset <= log.start_offset:
        snap = log.latest_snapshot_id()
        if snap is not None and snap.end_offset == end_offset:
            return snap
        raise ValueError(f"snapshot at {end_offset} is below the log start {log.start_offset}")
    last = end_offset - 1
    epoch = -1
    for e, start in log.epoch_entries():
        if start > last:
            break
        epoch = e
    if epoch < 0:
        raise ValueError(f"no epoch known for offset {last}")
    return SnapshotId(end_offset, epoch)


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """Kafka's ValidOffsetAndEpoch: a follower's fetch position as the leader sees it.

    kind VALID: serve from fetch_offset; DIVERGING: the follower's log differs
    from `diverging` on (it truncates and fetches again); SNAPSHOT: the offset
    is below the log start, so the follower loads the latest snapshot first.
    """

    kind: str
    diverging: DivergingEpoch | None = None


VALID = FetchPosition("VALID")
SNAPSHOT = FetchPosition("SNAPSHOT")


def validate_fetch(log: ReplicatedLog, fetch_offset: int, last_fetched_epoch: int) -> FetchPosition:
    """Kafka's validateOffsetAndEpoch for a Fetch at (fetch_offset, last_fetched_epoch)."""
    start = log.start_offset
    if fetch_offset < start:
        return SNAPSHOT
    if fetch_offset == 0 and last_fetched_epoch == 0:
        return VALID
    epoch, end = end_offset_for_epoch(log, last_fetched_epoch)
    if epoch == last_fetched_epoch and end >= fetch_offset:
        return VALID
    if end < start and start > 0:
        return SNAPSHOT
    return FetchPosition("DIVERGING", DivergingEpoch(epoch, max(end, 0)))


def truncation_offset(log: ReplicatedLog, d: DivergingEpoch) -> int:
    """Where a follower truncates its log when the leader reports it diverging at `d`.

    Our own end of the largest epoch <= the leader's diverging epoch: everything
    after it is in epochs the leader's log does not have there, so it goes. When
    our epoch is the leader's, its end may be past the leader's (uncommitted
    data of a deposed leader): take the smaller. No local epoch that old: the
    whole log goes. (Taking the leader's end offset when the epochs differ can
    keep a batch of a foreign epoch at the end, and the next fetch diverges at
    the same place forever.)
    """
    local_epoch, local_end = end_offset_for_epoch(log, d.epoch)
    target = log.start_offset if local_epoch < 0 else min(d.end_offset, local_end)
    return max(min(target, log.end_offset), log.start_offset)
