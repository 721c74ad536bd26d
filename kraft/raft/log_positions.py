"""Positions read off a ReplicatedLog that must account for the snapshot it starts at.

Pure functions of the log (no state of their own): the core asks them for
Kafka's lastFetchedEpoch, for the end of an epoch when a follower's fetch is
validated, and for the id of a snapshot the state machine wants to write. Each
knows the one case a plain epoch-cache lookup gets wrong: a log trimmed to (or
emptied past) a snapshot no longer holds the snapshot's own epoch.
"""

from __future__ import annotations

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
