"""The leader-epoch cache: which epoch started at which offset (Kafka's LeaderEpochFileCache).

A pure in-memory structure, persisted by the log as ``leader-epoch-checkpoint``.
Entries are ``(epoch, start_offset)`` with strictly increasing epochs and
non-decreasing start offsets. Raft's fetch validation asks it "where did epoch E
end?" (`end_offset_for`) to find where a follower's log diverges.

Two entries may share a start offset: the first one then stands for an epoch
that owns no batch in the log, such as the epoch of a snapshot the log was reset
to (`FileLog.reset`); Kafka would drop it, we keep it so that the log still knows
the snapshot's epoch and `end_offset_for` answers that epoch ended where the
next one started.

File format (``leader-epoch-checkpoint``, Kafka's)::

    0                   version
    2                   number of entries
    3 0                 epoch start_offset
    5 1042
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from metadata_log.checkpoints import (
    CheckpointFormatError,
    format_checkpoint,
    parse_checkpoint,
    parse_int,
)

CHECKPOINT_VERSION = 0
UNDEFINED = (-1, -1)


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset, with Kafka's assign / truncate / end-offset semantics."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        # Two parallel lists so that lookups are a bisect, not a scan.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or ():
            self._check_next(epoch, start)
            self._epochs.append(epoch)
            self._starts.append(start)

    def _check_next(self, epoch: int, start: int) -> None:
        if epoch < 0 or start < 0:
            raise ValueError(f"epoch {epoch} / start offset {start} must not be negative")
        if self._epochs and (epoch <= self._epochs[-1] or start < self._starts[-1]):
            raise ValueError(
                f"epoch entry ({epoch}, {start}) does not follow "
                f"({self._epochs[-1]}, {self._starts[-1]})"
            )

    # ------------------------------------------------------------------ queries

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def __len__(self) -> int:
        return len(self._epochs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeaderEpochCache):
            return NotImplemented
        return self._epochs == other._epochs and self._starts == other._starts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries()!r})"

    @property
    def latest(self) -> EpochEntry | None:
        if not self._epochs:
            return None
        return EpochEntry(self._epochs[-1], self._starts[-1])

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in effect at `offset` (the last entry starting at or before it)."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, the offset where that epoch ended).

        An epoch ends where the next higher epoch starts, or at `log_end_offset`
        for the latest one. (-1, -1) when `epoch` is below the first known epoch
        or the cache is empty, as Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
        """
        if epoch < 0 or not self._epochs:
            return UNDEFINED
        i = bisect.bisect_right(self._epochs, epoch)
        if i == 0:
            return UNDEFINED
        found = self._epochs[i - 1]
        end = self._starts[i] if i < len(self._starts) else log_end_offset
        return (found, end)

    # ---------------------------------------------------------------- mutations

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (called for every appended batch).

        A batch of the latest epoch changes nothing. A lower epoch, or a start
        offset before the latest entry's, is a ValueError: the log only grows
        with non-decreasing epochs. Returns whether the cache changed.
        """
        if self._epochs and epoch == self._epochs[-1]:
            if start_offset < self._starts[-1]:
                raise ValueError(
                    f"epoch {epoch} cannot start at {start_offset}: it started at "
                    f"{self._starts[-1]}"
                )
            return False
        self._check_next(epoch, start_offset)
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Forget every epoch that starts at or after `end_offset` (the log was truncated there)."""
        i = bisect.bisect_left(self._starts, end_offset)
        if i == len(self._starts):
            return False
        del self._epochs[i:]
        del self._starts[i:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop earlier epochs.

        The epoch in effect at `start_offset` is kept and moved to start there, as
        Kafka does, so the cache still covers the first offset of the log.
        """
        i = bisect.bisect_left(self._starts, start_offset)  # entries starting before it
        if i == 0:
            return False
        if i < len(self._starts) and self._starts[i] == start_offset:
            # An epoch starts exactly there: the earlier ones simply go.
            del self._epochs[:i]
            del self._starts[:i]
            return True
        keep_epoch = self._epochs[i - 1]
        del self._epochs[:i]
        del self._starts[:i]
        self._epochs.insert(0, keep_epoch)
        self._starts.insert(0, start_offset)
        return True

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()

    # ------------------------------------------------------------ persistence

    def serialize(self) -> bytes:
        return format_checkpoint(CHECKPOINT_VERSION, self.entries())

    @classmethod
    def parse(cls, path: str | Path, text: str) -> LeaderEpochCache:
        rows = parse_checkpoint(path, text, version=CHECKPOINT_VERSION, fields=2)
        entries = [
            (
                parse_int(path, n, epoch, "epoch"),
                parse_int(path, n, start, "start offset"),
            )
            for n, (epoch, start) in enumerate(rows, start=3)
        ]
        try:
            return cls(entries)
        except ValueError as e:
            raise CheckpointFormatError(path, 3, str(e)) from None
