"""An in-memory `ReplicatedLog` for the simulator and unit tests.

It keeps FileLog's semantics where the core can tell the difference (whole
batches, Kafka's epoch cache, durable truncation) and models the disk: `flush()`
makes the current end durable, `crash()` forgets every batch past the last
flush, `wipe()` forgets everything. Snapshots are durable when stored.
"""

from __future__ import annotations

import bisect

from metadata_log.batch import BatchHeader, parse_header, verify_records
from metadata_log.epoch_cache import LeaderEpochCache
from metadata_log.errors import OffsetOutOfRangeError
from metadata_log.snapshot import SnapshotId


class MemoryLog:
    """Batches in a list, an epoch cache and a dict of snapshots."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._batches: list[tuple[BatchHeader, bytes]] = []
        self._cache = LeaderEpochCache()
        self._start = 0
        self._end = 0
        self._flushed = 0
        self._snapshots: dict[SnapshotId, bytes] = {}
        # The epoch in effect at start_offset when the log does not start at 0
        # (a snapshot's): kept across truncations, as FileLog keeps it.
        self._start_epoch: int | None = None

    # ------------------------------------------------------------ properties

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def latest_epoch(self) -> int:
        latest = self._cache.latest_epoch
        return 0 if latest is None else latest

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._cache.entries()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._cache.end_offset_for(epoch, self._end)

    # --------------------------------------------------------------- writing

    def append(self, batch: bytes) -> BatchHeader:
        header = parse_header(batch, 0, "<appended batch>", self._end)
        verify_records(batch, 0, header, "<appended batch>")
        if header.length != len(batch):
            raise ValueError("append takes exactly one batch")
        if header.base_offset != self._end:
            raise ValueError(
                f"batch base offset {header.base_offset} is not the log end offset {self._end}"
            )
        if header.leader_epoch < self.latest_epoch:
            raise ValueError(
                f"batch epoch {header.leader_epoch} is below the latest epoch {self.latest_epoch}"
            )
        self._cache.assign(header.leader_epoch, header.base_offset)
        self._bases.append(header.base_offset)
        self._batches.append((header, bytes(batch)))
        self._end = header.next_offset
        return header

    def flush(self, offset: int | None = None) -> None:
        """Make the log durable up to `offset` (default: its end), as an fsync
        that began when the log ended there."""
        target = self._end if offset is None else min(offset, self._end)
        self._flushed = max(self._flushed, target)

    def read(self, from_offset: int, max_bytes: int) -> bytes:
        if from_offset < self._start or from_offset > self._end:
            raise OffsetOutOfRangeError(from_offset, self._start, self._end)
        if from_offset == self._end:
            return b""
        i = bisect.bisect_right(self._bases, from_offset) - 1
        if i < 0:
            i = 0
        out: list[bytes] = []
        size = 0
        while i < len(self._batches):
            data = self._batches[i][1]
            if out and size + len(data) > max_bytes:
                break
            out.append(data)
            size += len(data)
            i += 1
        return b"".join(out)

    def batches(self) -> list[tuple[BatchHeader, bytes]]:
        """Every batch in the log (for checkers)."""
        return list(self._batches)

    def batches_from(self, offset: int) -> list[tuple[BatchHeader, bytes]]:
        """The batches from the one holding `offset` to the end (for checkers)."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return self._batches[i:]

    def truncate_to(self, offset: int) -> int:
        if offset >= self._end:
            return self._end
        i = bisect.bisect_right(self._bases, offset) - 1
        # The batch holding `offset` goes whole (FileLog's rule).
        cut = max(i, 0)
        if i >= 0 and self._batches[i][0].base_offset == offset:
            cut = i
        new_end = self._batches[cut][0].base_offset if cut < len(self._batches) else self._end
        del self._batches[cut:]
        del self._bases[cut:]
        self._end = new_end
        self._truncate_cache(new_end)
        # Durable on return, as FileLog (which fsyncs the prefix first).
        self._flushed = new_end
        return new_end

    def delete_segments_below(self, offset: int) -> int:
        """Drop the batches wholly below `offset` (after a snapshot there)."""
        offset = min(offset, self._end)
        n = 0
        while n < len(self._batches) and self._batches[n][0].next_offset <= offset:
            n += 1
        if n == 0:
            return self._start
        del self._batches[:n]
        del self._bases[:n]
        self._start = self._batches[0][0].base_offset if self._batches else offset
        # What an emptied log reports as its last epoch: that of the last offset
        # before its start (the snapshot's), not that of the first batch kept,
        # which a truncation may remove (a follower must then be able to append
        # batches of the snapshot's epoch again).
        self._start_epoch = self._cache.epoch_for_offset(self._start - 1)
        self._cache.truncate_from_start(self._start)
        # What lies below the start is covered by a durable snapshot.
        self._flushed = max(self._flushed, self._start)
        return self._start

    def _truncate_cache(self, new_end: int) -> None:
        self._cache.truncate_from_end(new_end)
        if len(self._cache) == 0 and self._start_epoch is not None:
            self._cache = LeaderEpochCache([(self._start_epoch, self._start)])

    def reset(self, offset: int, epoch: int) -> None:
        self._batches.clear()
        self._bases.clear()
        self._cache = LeaderEpochCache([(epoch, offset)])
        self._start_epoch = epoch
        self._start = self._end = self._flushed = offset

    # ------------------------------------------------------------- snapshots

    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    def snapshot_ids(self) -> list[SnapshotId]:
        return sorted(self._snapshots)

    def snapshot_data(self, snapshot_id: SnapshotId) -> bytes:
        return self._snapshots[snapshot_id]

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """A snapshot this node took of its own committed state (durable at once).

        An id that exists is kept as it is (Kafka's createNewSnapshot): a follower
        may be fetching it in chunks, and new bytes under the same id (another
        append time, say) would splice two files into a corrupt one."""
        if snapshot_id not in self._snapshots:
            self._snapshots[snapshot_id] = bytes(data)

    def read_snapshot_chunk(
        self, snapshot_id: SnapshotId, position: int, max_bytes: int
    ) -> tuple[bytes, int]:
        data = self._snapshots[snapshot_id]
        return data[position : position + max_bytes], len(data)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._snapshots[snapshot_id] = bytes(data)
        self.reset(snapshot_id.end_offset, snapshot_id.epoch)

    # ---------------------------------------------------------------- faults

    def crash(self) -> None:
        """Power loss: every batch past the last flush is gone (snapshots stay)."""
        self._flushed = max(self._flushed, self._start)
        if self._flushed < self._end:
            i = bisect.bisect_left(self._bases, self._flushed)
            del self._batches[i:]
            del self._bases[i:]
            self._end = self._flushed
            self._truncate_cache(self._end)

    def wipe(self) -> None:
        """A replaced disk: nothing survives."""
        MemoryLog.__init__(self)  # (not a subclass's __init__)
