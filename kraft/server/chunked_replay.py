"""ChunkedReplay: records replayed a bounded slice per step, on every controller.

One mechanism for the two paths that replay large changes: the active controller
replaying what it just appended, and a standby replaying committed batches. A
fence of a broker in every ISR is a million PartitionChangeRecords in a metadata
transaction whose end record applies them all; replayed at once, that stopped
the process's event loop for seconds, past the Raft fetch timeout, and the
quorum elected a new leader (issue 26). Here each `step()` replays at most
`chunk` records, those a transaction's end applies included
(QuorumController.replay_in_steps), and the shell lets the loop run between
steps (`drain`), so fetches, votes and heartbeats are served meanwhile.

A standby staging an open transaction's records (not applying its end) waits
after each slice about as long as the slice took (`STAGING_PAUSE`), until it is
STAGING_BACKLOG batches behind the commit: the commit of a large change waits
for the leader generating it and the followers' log appends, not for their
staging. The three controllers of a 2-core machine shared it evenly (~0.6 core
each, /proc sampled every 0.1 s), so at 2M partitions the leader generated 4.9 s
of CPU (fence_apply_bench) in about 10 s; with the pause it had ~0.9 core until
the standbys were 16 batches behind, and the fence committed in 8.9 s instead of
10.5 s (docs/big-fence.md). The staging deferred (at most 16 batches, ~0.8 s of
a standby's CPU) is done after the commit.

Until `idle`, the controller's image is mid-change: nothing else may replay into
it, and readers wait (the shells check `idle`).

`GcPause`: the cyclic garbage collector is off while a large change is generated
and replayed, then what it built is frozen (kraft.server.node.freeze_heap's
reasoning): each new PartitionRegistration is a tracked object, and the full
collections a million of them trigger walked them all, half of the replay's time
(300k partitions: 1.73 s with, 0.87 s without; the longest slice 78 ms, 9 ms).
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from kraft.controller.quorum_controller import QuorumController
from metadata_log.records import Record

# Records replayed between two yields to the event loop (a few ms of work).
REPLAY_CHUNK = 2048
# Loop iterations handed over between two slices. Answering a Raft fetch takes
# about four (the request read, its handler, the driver's cycle, the answer's
# write); with one iteration a slice, each fetch waited for four slices, and at
# 80 ms a slice the followers' fetch timeout passed on a healthy leader.
IO_TURNS = 4
# A standby staging an open transaction waits this share of each slice's time
# after it, unless more than STAGING_BACKLOG committed batches wait (it catches
# up then: the deferred work, and the standby's applied time, stay bounded).
STAGING_PAUSE = 1.0
STAGING_BACKLOG = 16

Records = Sequence[Record] | Callable[[], Sequence[Record]]


class ChunkedReplay:
    """A queue of (base offset, records, append time) replayed `chunk` records a step.

    Records may be given as a function returning them (a committed batch decodes
    only when its turn comes). Pure but for `drain`, the shells' loop over `step`
    (asyncio, and the loop's clock for the staging pause)."""

    def __init__(
        self,
        controller: QuorumController,
        chunk: int = REPLAY_CHUNK,
        staging_pause: float = STAGING_PAUSE,
        staging_backlog: int = STAGING_BACKLOG,
    ) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if staging_pause < 0:
            raise ValueError(f"staging_pause must be >= 0, got {staging_pause}")
        self.controller = controller
        self.chunk = chunk
        self.staging_pause = staging_pause
        self.staging_backlog = staging_backlog
        self._queue: deque[tuple[int, Records, int, int]] = deque()  # + the last offset
        self._steps: Iterator[int] | None = None
        self._steps_last = -1  # the last offset of the batch in progress
        self.last_offset = -1  # the last offset added

    @property
    def idle(self) -> bool:
        return self._steps is None and not self._queue

    def __len__(self) -> int:
        """Batches not yet wholly replayed (the one in progress included)."""
        return len(self._queue) + (self._steps is not None)

    def add(self, base_offset: int, records: Records, append_time_ms: int, count: int) -> None:
        """Queue `count` records from `base_offset`, replayed after those queued before."""
        if count < 1:
            return
        self.last_offset = base_offset + count - 1
        self._queue.append((base_offset, records, append_time_ms, self.last_offset))

    @property
    def staging(self) -> bool:
        """The last step queued (and staged) records of an open transaction, and
        no more than `staging_backlog` batches wait: work that may wait for the
        commit of the rest (not the end of a transaction, nor a backlog)."""
        image = self.controller.image
        return (
            image.in_transaction and not image.applying and len(self._queue) <= self.staging_backlog
        )

    def step(self) -> bool:
        """Replay the next slice; True when nothing is left."""
        if self._steps is None:
            if not self._queue:
                return True
            base, records, append_time_ms, self._steps_last = self._queue.popleft()
            recs = records() if callable(records) else records
            self._steps = self.controller.replay_in_steps(base, recs, append_time_ms, self.chunk)
        if next(self._steps, None) is not None:
            return False  # a slice replayed, more of this batch to come
        self._steps = None  # the batch's last slice replayed
        return not self._queue

    def finish_now(self) -> None:
        """Replay everything queued, without yielding (activation, losing leadership)."""
        while not self.step():
            pass

    def drop_through(self, offset: int) -> None:
        """Forget the batches that end at or before `offset`: a snapshot to that offset
        replaces the image (the batch in progress too: its image is gone)."""
        if self._steps is not None and self._steps_last <= offset:
            self._steps.close()  # leaves the discarded image's half-applied state
            self._steps = None
        while self._queue and self._queue[0][3] <= offset:
            self._queue.popleft()

    async def drain(self) -> None:
        """Replay everything queued, letting the event loop run between slices; a
        slice staging an open transaction is followed by a pause of `staging_pause`
        times its duration (the loop runs meanwhile: fetches, votes). Timed by the
        loop's clock: the simulator's (tests/dsim) stands still while a slice runs,
        so there no pause is taken and its runs stay deterministic."""
        clock = asyncio.get_running_loop().time
        while True:
            started = clock()
            if self.step():
                return
            pause = (clock() - started) * self.staging_pause
            if pause > 0 and self.staging:
                await asyncio.sleep(pause)
            else:
                await io_turns()


async def io_turns() -> None:
    """Let the event loop run IO_TURNS iterations: Raft's and the network's work
    ahead of the next slice of controller work."""
    for _ in range(IO_TURNS):
        await asyncio.sleep(0)


class GcPause:
    """Pauses the cyclic garbage collector while large changes are in progress
    (nested: the active and standby paths of one process may overlap at a
    failover). On the last `resume` it is enabled again, if it was before, and
    everything alive is frozen out of its reach: the image a change built is
    long-lived and acyclic (refcounting frees what replay replaces)."""

    def __init__(self) -> None:
        self._depth = 0
        self._was_enabled = True

    def pause(self) -> None:
        if self._depth == 0:
            self._was_enabled = gc.isenabled()
            gc.disable()
        self._depth += 1

    def resume(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._was_enabled:
            gc.freeze()
            gc.enable()


GC_PAUSE = GcPause()  # one per process: the collector is process-wide
