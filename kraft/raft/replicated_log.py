"""`ReplicatedLog`: what the Raft core needs from a log (Kafka's ReplicatedLog).

It is metadata_log.file_log.FileLog's API plus snapshot hooks. The core calls
append / truncate_to / read directly, as KafkaRaftClient does, but never
`flush()`: durability goes through Ready.flush_to -> the shell -> on_flushed, so
that the cost of fsync is the shell's (a thread, batching) and the core only
counts what it was told is durable.

Contract details the core relies on:
- offsets of a batch are base_offset .. base_offset + record_count - 1; batches
  are contiguous from start_offset to end_offset;
- truncate_to and install_snapshot are durable on return (FileLog fsyncs both),
  and leave flushed_offset == end_offset;
- end_offset_for_epoch(e) answers (largest known epoch <= e, where it ended) or
  (-1, -1), Kafka's semantics; the epoch a snapshot reset the log to is known;
- latest_epoch is the epoch of the last batch (or of the snapshot the log was
  reset to), 0 for an empty log. A log trimmed to a snapshot and then emptied
  by truncate_to reports the snapshot's epoch (that of offset start - 1), so a
  follower can append batches of that epoch again. (The core does not rely on
  latest_epoch for an emptied log: it asks latest_snapshot_id.)
"""

from __future__ import annotations

from typing import Protocol

from metadata_log.batch import BatchHeader
from metadata_log.snapshot import SnapshotId


class ReplicatedLog(Protocol):
    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int: ...

    def append(self, batch: bytes) -> BatchHeader:
        """Append one batch whose base offset is end_offset (no fsync)."""
        ...

    def read(self, from_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding from_offset (at least one); b"" at the end."""
        ...

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= offset (durably); returns the new end."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...

    def epoch_entries(self) -> list[tuple[int, int]]: ...

    # ------------------------------------------------------------- snapshots

    def latest_snapshot_id(self) -> SnapshotId | None: ...

    def read_snapshot_chunk(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int]:
        """(bytes at position, total size); KeyError if the snapshot is unknown."""
        ...

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Store a snapshot fetched from the leader durably and reset the log to its end."""
        ...
