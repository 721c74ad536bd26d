"""Parked long-poll fetches (Kafka's DelayedOperationPurgatory, for one partition).

A Fetch that finds nothing new is parked until the leader's log grows past the
offset it asked for, the high watermark moves, or its max wait runs out. Each
parked operation is keyed by what it waits for (its fetch offset) and by its
deadline.

Data structures (measured by benchmarks/purgatory_bench.py, figures in the
issue note):
- deadlines: a binary heap with lazy deletion. Completed operations leave a
  stale heap entry that is skipped when it surfaces; when stale entries
  outnumber live ones twice over, the heap is rebuilt from the live ones, so
  it stays O(live) however busy the log is. Push and pop are O(log n) C-level
  heapq calls; with 10,000 parked observers a park + complete or park + expire
  costs about as much as in a hierarchical timing wheel (Kafka's, O(1) in
  theory but with Python-level bucket handling and cascading), and both are a
  few microseconds against the tens a fetch costs to decode and answer. The
  shell needs only one timer for the whole core: `next_deadline_ms()`.
- keys: a SortedList of (fetch_offset, op id), so "the log now ends at E" wakes
  exactly the operations waiting below E with one bisect and one slice
  deletion.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from sortedcontainers import SortedList

T = TypeVar("T")


@dataclass(slots=True)
class _Parked(Generic[T]):
    key: int
    deadline_ms: int
    op: T


class Purgatory(Generic[T]):
    def __init__(self) -> None:
        self._ops: dict[int, _Parked[T]] = {}
        self._by_key: SortedList = SortedList()
        self._deadlines: list[tuple[int, int]] = []
        self._stale = 0  # heap entries of operations no longer parked
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[T]:
        return (p.op for p in self._ops.values())

    def park(self, key: int, deadline_ms: int, op: T) -> int:
        """Park `op` until something beyond `key` exists or `deadline_ms`; returns its id."""
        op_id = self._next_id
        self._next_id += 1
        self._ops[op_id] = _Parked(key, deadline_ms, op)
        self._by_key.add((key, op_id))
        heapq.heappush(self._deadlines, (deadline_ms, op_id))
        return op_id

    def _take(self, op_id: int) -> T:
        p = self._ops.pop(op_id)
        self._by_key.remove((p.key, op_id))
        return p.op

    def complete_below(self, end: int) -> list[T]:
        """Take every operation whose key is below `end` (new data exists for it)."""
        stop = self._by_key.bisect_left((end, -1))
        if stop == 0:
            return []
        ids = [op_id for _, op_id in self._by_key.islice(0, stop)]
        del self._by_key[:stop]
        ops = self._ops
        out = [ops.pop(i).op for i in ids]
        self._stale += len(out)
        if self._stale > 1024 and self._stale > 2 * len(ops):
            # Rebuild the heap from the live operations (lazy deletion would
            # otherwise keep one entry per completed fetch for a whole max wait).
            self._deadlines = [(p.deadline_ms, i) for i, p in ops.items()]
            heapq.heapify(self._deadlines)
            self._stale = 0
        return out

    def complete_all(self) -> list[T]:
        ops = [p.op for p in self._ops.values()]
        self._ops.clear()
        self._by_key.clear()
        self._deadlines.clear()
        self._stale = 0
        return ops

    def expire(self, now_ms: int) -> list[T]:
        """Take every operation whose deadline is at or before `now_ms`."""
        out: list[T] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms:
            _, op_id = heapq.heappop(heap)
            if op_id in self._ops:
                out.append(self._take(op_id))
            else:  # completed earlier: a stale entry
                self._stale -= 1
        return out

    def next_deadline_ms(self) -> int | None:
        heap = self._deadlines
        while heap and heap[0][1] not in self._ops:
            heapq.heappop(heap)
            self._stale -= 1
        return heap[0][0] if heap else None
