"""ControllerService: the asyncio shell around the pure QuorumController.

One event-queue task serializes every command (Kafka's QuorumController event
queue). The queue is bounded; heartbeats go in a priority lane so bulk work never
starves them (one that finds the priority lane empty runs at once, the order the
queue would give it); every command has a deadline, and one that waited past it is
answered REQUEST_TIMED_OUT (a heartbeat's contact was already counted on arrival,
Kafka bug 15019). A command's records are appended to the Raft log and replayed
at once (the active controller runs ahead of the commit), and the reply goes out
only when they are committed; a command that writes nothing still waits for every
record pending before it. Deferred events (the fence check at the stalest
broker's session expiry, the NoOp every metadata.max.idle.interval.ms) go through
the same queue.

Large writes (issue 26: a fence of a broker in a million ISRs) never hold the
loop: their records are generated and encoded a slice at a time, appended as a
metadata transaction batch by batch, and replayed by the ChunkedReplay standbys
use too, with Raft's work run between slices (chunked_replay.IO_TURNS). Nothing
else runs against the controller meanwhile, except heartbeats that change
nothing and read nothing uncommitted (QuorumController.heartbeat_at_once): a
broker's session outlives the longest fence.

The log side is a `MetadataWriter`: the Raft driver as leader (append batches of
the current epoch, learn the commit offset). The service is the HTTP routes'
backend itself (kraft.server.routes.ControllerBackend): the quorum's view and the
committed log come from a `QuorumReader`, /metrics from the node's metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kraft.clock import mono_ms, wall_ms
from kraft.controller.batching import EncodedBatch, RecordEncoder, pack, to_batches
from kraft.controller.errors import ApiError, not_controller
from kraft.controller.quorum_controller import ControllerResult, QuorumController
from kraft.raft.errors import NotLeaderError
from kraft.server.chunked_replay import GC_PAUSE, REPLAY_CHUNK, ChunkedReplay, io_turns
from kraft.server.metrics import ControllerMetrics
from metadata_log.batch import HEADER_SIZE
from metadata_log.image import MetadataImage
from metadata_log.records import (
    METADATA_VERSION_FEATURE,
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    MetadataRecord,
)

log = logging.getLogger("kraft.controller")

# A command: (controller, now_ms, next_offset) -> its records and reply.
Generate = Callable[[QuorumController, int, int], ControllerResult]


class MetadataWriter(Protocol):
    """What the controller needs from Raft while it is the leader."""

    def next_offset(self) -> int:
        """The offset the next appended record will get."""
        ...

    def append(self, batches: list[EncodedBatch], now_ms: int) -> int:
        """Append batches in the current leader epoch; returns the last offset.
        Raises NotLeaderError when not the leader of an epoch ready for writes."""
        ...

    def committed_offset(self) -> int:
        """The last committed offset (high watermark - 1)."""
        ...

    def leader_hint(self) -> tuple[int | None, str | None]:
        """(leader id, leader URL) if known."""
        ...


class QuorumReader(Protocol):
    """The node's Raft as the HTTP API shows it (GET /v1/quorum, the console)."""

    def describe(self) -> dict[str, Any]:
        """The quorum's state (DESIGN 1.2, GET /v1/quorum)."""
        ...

    def read_committed(self, from_offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """(whole batches from the one holding from_offset, high watermark, log start);
        max_bytes 0 reads nothing (only the two offsets)."""
        ...


@dataclass
class _Event:
    name: str
    generate: Generate
    deadline_ms: int
    future: asyncio.Future[Any]
    enqueued_ms: int  # by the service's clock
    # the service's own event (`_deferred`): a large write's reply gets its
    # committed_at/appended_at for the log line; never a client's reply
    timed: bool = False


# Undo entries dropped per loop turn once committed (~1 ms of work).
JOURNAL_TRIM_PER_TURN = 8192

# One batch fits one Raft fetch (RaftConfig.fetch_max_bytes) and decodes on a
# standby in about 30 ms: a larger result is a metadata transaction of such batches.
MAX_BATCH_BYTES = 1024 * 1024


@dataclass
class _LargeWrite:
    """A command's write too large for one turn of the loop: its records are first
    generated and encoded a slice at a time (`more`), then replayed by the
    ChunkedReplay; its reply waits for both the commit and the end of the replay.

    Once the generated records outgrow one batch the write is a metadata
    transaction (KIP-868): its full batches are appended as they fill, so the
    followers replicate while the rest is generated, and the End record follows
    the last. Records are replayed after the whole write is appended (a lost
    leadership replays what was appended, then reverts what did not commit)."""

    encoder: RecordEncoder
    records: list[MetadataRecord]  # generated, not yet appended
    encoded: list[bytes]  # their encodings
    append_time_ms: int  # wall clock: the image's last append time, as on standbys
    future: asyncio.Future[Any] | None = None
    reply: Any = None
    started: float = 0.0
    # records still to generate (ControllerResult.more); appended once exhausted
    more: Iterator[MetadataRecord | None] | None = None
    last: int = -1  # the last offset, once all is appended
    size: int = 0  # bytes of `encoded`
    in_transaction: bool = False  # the BeginTransactionRecord is appended
    committed_at: float | None = None  # perf_counter when the high watermark passed `last`
    appended_at: float | None = None  # perf_counter when it was appended
    timed: bool = False  # _Event.timed: the reply gets the two times above


class ControllerService:
    def __init__(
        self,
        controller: QuorumController,
        writer: MetadataWriter,
        *,
        queue_size: int = 10_000,
        request_timeout_ms: int = 30_000,
        max_idle_interval_ms: int = 500,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        clock: Callable[[], int] = mono_ms,
        timestamp: Callable[[], int] = wall_ms,
        on_event_time: Callable[[str, float], None] | None = None,
        on_commit_latency: Callable[[float], None] | None = None,
        on_fence_committed: Callable[[int, int, float], None] | None = None,
        quorum: QuorumReader | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        """`metrics`: the node's; its histograms hear the event-queue times, commit
        latencies and fence commits unless the on_* callbacks are given."""
        self.controller = controller
        self.writer = writer
        self.quorum = quorum
        self.metrics = metrics
        if metrics is not None:
            if on_event_time is None:
                on_event_time = lambda _name, ms: metrics.event_queue_time.observe(ms)  # noqa: E731
            on_commit_latency = on_commit_latency or metrics.commit_latency.observe
            on_fence_committed = on_fence_committed or metrics.fence_committed
        self.queue_size = queue_size
        self.request_timeout_ms = request_timeout_ms
        self.max_idle_interval_ms = max_idle_interval_ms
        self.max_batch_bytes = max_batch_bytes
        # Sessions, deadlines and the idle NoOp run on `clock` (monotonic); only the
        # image's append time, a timestamp, reads `timestamp` (wall clock).
        self.clock = clock
        self.timestamp = timestamp
        self._on_event_time = on_event_time
        self._on_commit_latency = on_commit_latency
        # (broker id, records, ms from the fence decision until its records committed)
        self._on_fence_committed = on_fence_committed
        # Invariant: only the event task pops these; both are bounded by queue_size.
        self._priority: deque[_Event] = deque()
        self._normal: deque[_Event] = deque()
        self._wakeup = asyncio.Event()
        # (last offset, future, start time) of replies waiting for commit, in offset order
        self._waiting: deque[tuple[int, asyncio.Future[Any], Any, float]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._last_write_ms = 0
        # A large write (a fence of a broker in a million ISRs) is generated and
        # encoded in slices, appended at once and replayed REPLAY_CHUNK records at a
        # time (the ChunkedReplay standbys use too), yielding to the loop in between
        # so Raft keeps serving fetches (a loop stopped for longer than the
        # followers' fetch timeout loses the leadership). Until it is done no other
        # event runs and no reply or read sees the image.
        self._replayer = ChunkedReplay(controller, REPLAY_CHUNK)
        # the journal is trimmed to here in bounded turns (_trim_journal)
        self._committed_to = -1
        self._trim_handle: asyncio.Handle | None = None
        self._replay: _LargeWrite | None = None
        self._replay_idle = asyncio.Event()
        self._replay_idle.set()
        # preferred-leader balancing (auto.leader.rebalance.enable), every
        # leader.imbalance.check.interval.seconds of the controller's config
        self._balance_task: asyncio.Task[None] | None = None
        self.balance_batches = 0  # committed preferred-leader batches (tests, benchmarks)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller-event-queue")
        self._timer_task = asyncio.create_task(self._timers(), name="controller-timers")
        config = self.controller.config
        if config.auto_leader_rebalance_enable:
            self._balance_task = asyncio.create_task(
                self._balance_leaders(config.leader_imbalance_check_interval_seconds),
                name="controller-leader-balancer",
            )

    async def stop(self) -> None:
        if self._trim_handle is not None:
            self._trim_handle.cancel()
            self._trim_handle = None
        tasks = (self._task, self._timer_task, self._balance_task)
        for t in tasks:
            if t is not None:
                t.cancel()
        for t in tasks:
            if t is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        self._fail_all(ApiError("NOT_CONTROLLER", "the controller is shutting down"))

    @property
    def active(self) -> bool:
        return self.controller.active

    @property
    def in_large_transaction(self) -> bool:
        """A large write, grown into a metadata transaction, is being generated,
        appended or replayed (the node keeps a snapshot writer from competing)."""
        w = self._replay
        return w is not None and w.in_transaction

    def _not_controller(self) -> ApiError:
        return not_controller(*self.writer.leader_hint())

    # ---------------------------------------------------------------- leadership

    def on_became_leader(self) -> None:
        """Called once the whole committed log is replayed and the epoch can take writes."""
        now = self.clock()
        self.controller.activate(now)
        records: list[MetadataRecord] = []
        if self.controller.image.in_transaction:
            # the previous leader died mid-transaction: it will never end
            records.append(AbortTransactionRecord("controller failover"))
        records += self.controller.bootstrap_records()
        if records:
            self._append_and_replay(ControllerResult(tuple(records)), now)
        log.info(
            "controller activated",
            extra={"event": "controller_activated", "offset": self.controller.image.offset},
        )
        self._wakeup.set()

    def on_lost_leadership(self) -> None:
        committed = self.writer.committed_offset()
        if self._replay is not None:
            # Everything appended is replayed, so that the revert below leaves exactly
            # the committed records (some of the appended ones may have committed).
            self._finish_replay_now()
        if self.controller.active:
            self.controller.deactivate(committed)
            log.info(
                "controller deactivated",
                extra={"event": "controller_deactivated", "committed_offset": committed},
            )
        self._fail_all(self._not_controller())

    def _fail_all(self, err: ApiError) -> None:
        for q in (self._priority, self._normal):
            while q:
                ev = q.popleft()
                if not ev.future.done():
                    ev.future.set_exception(err)
        while self._waiting:
            _, fut, _, _ = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(err)
        if self._replay is not None:
            fut = self._replay.future
            if fut is not None and not fut.done():
                fut.set_exception(err)
            self._no_large_write()

    def on_committed(self, committed_offset: int) -> None:
        """The high watermark moved: answer the replies whose records committed."""
        self._committed_to = committed_offset
        if self._trim_handle is None:  # else the trimming under way goes on to here
            self._trim_journal()
        now = time.perf_counter()
        r = self._replay
        if r is not None and 0 <= r.last <= committed_offset and r.committed_at is None:
            r.committed_at = now  # committed before the active controller replayed it all
        while self._waiting and self._waiting[0][0] <= committed_offset:
            _, fut, value, started = self._waiting.popleft()
            if not fut.done():
                fut.set_result(value)
            if self._on_commit_latency is not None:
                self._on_commit_latency((now - started) * 1000)

    # ---------------------------------------------------------------- API

    def _trim_journal(self) -> None:
        """Drop the committed records' undo entries, JOURNAL_TRIM_PER_TURN a loop turn:
        a large change commits while the active controller replays it, and the undo
        entries of a million partition changes, dropped at the next commit, held the
        loop for 0.3 s (heartbeats, fetches)."""
        self._trim_handle = None
        if self.controller.on_commit(self._committed_to, JOURNAL_TRIM_PER_TURN):
            return
        self._trim_handle = asyncio.get_running_loop().call_soon(self._trim_journal)

    def submit(
        self, name: str, generate: Generate, *, priority: bool = False
    ) -> asyncio.Future[Any]:
        """Queue a command; its future gets the reply once the records are committed.

        Raises ApiError at once (NOT_CONTROLLER, a full queue). The future is often
        already done: a heartbeat that changes nothing is answered without waiting.
        The caller bounds its wait (`write` does; the heartbeat fast path has a timer)."""
        if not self.controller.active:
            raise self._not_controller()
        lane = self._priority if priority else self._normal
        if len(lane) >= self.queue_size:
            raise ApiError(
                "REQUEST_TIMED_OUT", f"the controller's event queue is full ({self.queue_size})"
            )
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        now = self.clock()
        ev = _Event(name, generate, now + self.request_timeout_ms, fut, now)
        if priority and self._answer_at_once(ev, now, self.writer.committed_offset()):
            return fut
        task = self._task
        if priority and not self._priority and self._replay is None and task and not task.done():
            # Nothing is queued ahead of a priority event (the event task serves the
            # priority lane first and runs each event synchronously), so running it
            # here is the order the queue would give, without the hop through the
            # event task: a heartbeat that changes nothing is answered at once, still
            # serialized with every fence decision.
            self._run_one_guarded(ev)
            if self._replay is not None:
                self._wakeup.set()  # the event task finishes a large replay
        else:
            lane.append(ev)
            self._wakeup.set()
        return fut

    def timed_out(self, name: str) -> ApiError:
        """The error of a command whose reply did not come within the request timeout."""
        return ApiError(
            "REQUEST_TIMED_OUT", f"{name} did not commit within {self.request_timeout_ms} ms"
        )

    @property
    def reply_timeout_s(self) -> float:
        """How long a caller waits for a submitted command's reply: its deadline + 1 s."""
        return self.request_timeout_ms / 1000 + 1

    async def write(self, name: str, generate: Generate, *, priority: bool = False) -> Any:
        """Queue a command; its reply once its records are committed."""
        return await self.wait_reply(name, self.submit(name, generate, priority=priority))

    async def barrier(self) -> None:
        """Wait until every record appended so far is committed."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._wait_for(self.writer.next_offset() - 1, fut, None, time.perf_counter())
        await asyncio.wait_for(fut, self.request_timeout_ms / 1000)
        # the records may commit before the active controller has replayed them all
        await asyncio.wait_for(self._replay_idle.wait(), self.request_timeout_ms / 1000)

    async def read_image(self, standby: bool = False) -> MetadataImage:
        if not self.controller.active:
            if standby:
                # A standby's image holds only committed records; while a large
                # transaction's end is applied in slices it is half of a change.
                # the loop's clock, as asyncio.wait_for's bounds below: monotonic on a
                # real loop, virtual in the simulator (a fake `clock` may not move)
                loop = asyncio.get_running_loop()
                give_up = loop.time() + self.request_timeout_ms / 1000
                while self.controller.image.applying:
                    if loop.time() > give_up:
                        raise self.timed_out("a standby read")
                    await asyncio.sleep(0.005)
                return self.controller.image
            raise self._not_controller()
        await self.barrier()
        return self.controller.image

    async def wait_reply(self, name: str, fut: asyncio.Future[Any]) -> Any:
        """The reply of a submitted command, waited for at most `reply_timeout_s`."""
        if fut.done():
            return fut.result()  # nothing pending before it, or an error
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.reply_timeout_s)
        except TimeoutError:
            raise self.timed_out(name) from None

    def note_heartbeat_contact(self, broker_id: int, broker_epoch: int) -> None:
        """A no-op unless active (QuorumController.note_heartbeat_contact)."""
        self.controller.note_heartbeat_contact(broker_id, broker_epoch, self.clock())

    # ---------------------------------------------------------------- views

    def quorum_view(self) -> dict[str, Any]:
        if self.quorum is None:
            raise ApiError("UNKNOWN_SERVER_ERROR", "this service was given no quorum to describe")
        return self.quorum.describe()

    def metrics_text(self) -> tuple[bytes, str]:
        if self.metrics is None:
            raise ApiError("UNKNOWN_SERVER_ERROR", "this service was given no metrics")
        return self.metrics.render()

    def reassignments(self) -> list[dict[str, Any]]:
        """The ongoing reassignments (the controller's index, no scan of the image)."""
        return self.controller.list_partition_reassignments()

    def console_controller(self) -> tuple[QuorumController, int]:
        """The web console's read (kraft.console.ui_routes.ConsoleSource): the
        controller and the service clock's now, read after read_image."""
        return self.controller, self.clock()

    def read_committed_log(self, from_offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        if self.quorum is None:
            raise ApiError("UNKNOWN_SERVER_ERROR", "this service was given no log to read")
        return self.quorum.read_committed(from_offset, max_bytes)

    # ---------------------------------------------------------------- event loop

    def _wait_for(self, offset: int, fut: asyncio.Future[Any], value: Any, started: float) -> None:
        if offset <= self.writer.committed_offset():
            if not fut.done():
                fut.set_result(value)
            return
        self._waiting.append((offset, fut, value, started))

    def _append_and_replay(
        self, result: ControllerResult, now_ms: int, *, chunked: bool = False
    ) -> int:
        """Append the result's records and replay them at their offsets; returns the
        last offset. `chunked`: a large result's replay is only started here and
        finished by the event task (`_continue_replay`)."""
        # Record versions are capped by the cluster's metadata.version (rolling upgrades).
        mv = self.controller.image.features.get(METADATA_VERSION_FEATURE)
        plan = to_batches(result.records, self.max_batch_bytes, metadata_version=mv)
        base = self.writer.next_offset()
        last = self.writer.append(plan.batches, now_ms)
        self._last_write_ms = now_ms
        stamp = self.timestamp()
        # replay exactly what was appended, at the offsets Raft assigned
        self._replayer.add(base, plan.records, stamp, len(plan.records))
        if chunked and len(plan.records) > REPLAY_CHUNK:
            self._replayer.step()
            self._start_large_write(_LargeWrite(RecordEncoder(mv), [], [], stamp, last=last))
            return last
        self._replayer.finish_now()
        assert self.controller.image.offset == last, (self.controller.image.offset, last)
        return last

    def _generate_step(self, w: _LargeWrite) -> None:
        """Draw and encode the next records of a result still being generated,
        appending the full batches of a transaction; once all are there, append the
        rest (a write that cannot be appended, this node no longer leading, fails
        NOT_CONTROLLER)."""
        assert w.more is not None
        part: list[MetadataRecord] = []
        exhausted = True
        for r in w.more:
            if r is None:  # a turn of work without a record: this step is over
                exhausted = False
                break
            part.append(r)
            if len(part) == REPLAY_CHUNK:
                exhausted = False
                break
        encoded = w.encoder.encode(part)
        w.records += part
        w.encoded += encoded
        w.size += sum(map(len, encoded))
        room = self.max_batch_bytes - HEADER_SIZE
        try:
            if not exhausted:
                if w.size > 2 * room:
                    self._append_full_batches(w, room)
                return
            w.more = None
            if not w.in_transaction:
                plan = to_batches(
                    w.records,
                    self.max_batch_bytes,
                    metadata_version=w.encoder.metadata_version,
                    encoded=w.encoded,
                )
                batches, records = plan.batches, plan.records
            else:
                end = EndTransactionRecord()
                records = [*w.records, end]
                batches = pack([*w.encoded, *w.encoder.encode([end])], self.max_batch_bytes)
            w.records, w.encoded, w.size = [], [], 0
            if records:
                w.last = self._append(w, batches, records)
            w.appended_at = time.perf_counter()
        except NotLeaderError:
            self._drop_generating(w)
            return
        if not records:
            self._end_large_write(w)

    def _append_full_batches(self, w: _LargeWrite, room: int) -> None:
        """Append what fills whole batches, as a transaction's (begun by the first)."""
        records, encoded = w.records, w.encoded
        if not w.in_transaction:
            begin = BeginTransactionRecord("")
            records = [begin, *records]
            encoded = [*w.encoder.encode([begin]), *encoded]
            w.in_transaction = True
        # keep back the last (partly filled) batch's records for the next call
        batches = pack(encoded, self.max_batch_bytes)
        keep = batches[-1].record_count
        n = len(records) - keep
        self._append(w, batches[:-1], records[:n])
        w.records, w.encoded = records[n:], encoded[n:]
        w.size = sum(map(len, w.encoded))

    def _append(self, w: _LargeWrite, batches: list[EncodedBatch], records: list[Any]) -> int:
        """Append a large write's batches (NotLeaderError: not any more) and queue
        their replay; returns the last offset."""
        base = self.writer.next_offset()
        now = self.clock()
        last = self.writer.append(batches, now)
        self._last_write_ms = now
        self._replayer.add(base, records, w.append_time_ms, len(records))
        return last

    def _start_large_write(self, w: _LargeWrite) -> None:
        self._replay = w
        self._replay_idle.clear()
        GC_PAUSE.pause()

    def _no_large_write(self) -> None:
        if self._replay is not None:
            self._replay = None
            self._replay_idle.set()
            GC_PAUSE.resume()

    def _drop_generating(self, w: _LargeWrite) -> None:
        """A write that could not be appended whole: its reply fails NOT_CONTROLLER.
        What of it was appended is replayed (its offsets are in this node's log);
        losing leadership then reverts what did not commit, and the next leader
        aborts the open transaction."""
        if w.future is not None and not w.future.done():
            w.future.set_exception(self._not_controller())
        self._replayer.finish_now()
        self._no_large_write()

    def _replay_step(self, w: _LargeWrite) -> bool:
        """Generate or replay the next slice of a large write; True when it is over."""
        if w.more is not None:
            self._generate_step(w)
        elif self._replayer.step():
            self._end_large_write(w)
        return self._replay is not w

    def _end_large_write(self, w: _LargeWrite) -> None:
        """Every record of the write is replayed: its reply waits for the commit."""
        last = self.writer.next_offset() - 1 if w.last < 0 else w.last
        assert self.controller.image.offset == last, (self.controller.image.offset, last)
        self._no_large_write()
        if w.timed and isinstance(w.reply, dict):
            if w.committed_at is not None:
                w.reply["committed_at"] = w.committed_at
            if w.appended_at is not None:
                w.reply["appended_at"] = w.appended_at
        if w.future is not None:
            self._wait_for(last, w.future, w.reply, w.started)

    def _answer_at_once(self, ev: _Event, now: int, committed: int) -> bool:
        """Answer a heartbeat that changes nothing and reads nothing uncommitted
        without waiting for the queue or for unrelated uncommitted records
        (QuorumController.heartbeat_at_once): a large write holds the queue, and its
        commit, for seconds, and the broker's session must outlive a fence of a
        million partitions. False: it goes through the queue."""
        at_once = getattr(ev.generate, "at_once", None)
        if at_once is None or ev.future.done() or not self.controller.active:
            return False
        try:
            reply = at_once(self.controller, now, committed)
        except ApiError:
            return False
        if reply is None:
            return False
        ev.future.set_result(reply)
        return True

    def _answer_queued_at_once(self) -> None:
        """The heartbeats queued before a large write began, answered between its slices."""
        if not self._priority:
            return
        now, committed = self.clock(), self.writer.committed_offset()
        self._priority = deque(
            ev for ev in self._priority if not self._answer_at_once(ev, now, committed)
        )

    async def _continue_replay(self) -> None:
        w = self._replay
        while w is not None and self._replay is w and not self._replay_step(w):
            self._answer_queued_at_once()
            await io_turns()  # Raft fetches, heartbeat arrivals (contact noted)

    def _finish_replay_now(self) -> None:
        w = self._replay
        if w is not None and w.more is not None:
            self._drop_generating(w)  # not all of it is in the log
            return
        self._replayer.finish_now()
        if w is not None:
            self._end_large_write(w)

    def _run_one(self, ev: _Event) -> None:
        now = self.clock()
        if self._on_event_time is not None:
            self._on_event_time(ev.name, max(0, now - ev.enqueued_ms))
        if now > ev.deadline_ms:
            ev.future.set_exception(
                ApiError(
                    "REQUEST_TIMED_OUT",
                    f"{ev.name} waited {now - ev.enqueued_ms} ms in the event queue",
                )
            )
            return
        if not self.controller.active:
            ev.future.set_exception(self._not_controller())
            return
        started = time.perf_counter()
        try:
            result = ev.generate(self.controller, now, self.writer.next_offset())
            if result.more is not None:
                # generated, appended and replayed in steps by the event task
                encoder = RecordEncoder(
                    self.controller.image.features.get(METADATA_VERSION_FEATURE)
                )
                self._start_large_write(_LargeWrite(
                    encoder, list(result.records), encoder.encode(result.records),
                    self.timestamp(), ev.future, result.reply, started, more=result.more,
                    timed=ev.timed,
                ))  # fmt: skip
                return
            last = (
                self._append_and_replay(result, now, chunked=True)
                if result.records
                else self.writer.next_offset() - 1
            )
        except ApiError as e:
            ev.future.set_exception(e)
            return
        except NotLeaderError:
            ev.future.set_exception(self._not_controller())
            return
        pending = self._replay
        if pending is not None:
            # answered once replayed (and committed), by _end_large_write
            pending.future, pending.reply, pending.started = ev.future, result.reply, started
            pending.timed = ev.timed
            return
        self._wait_for(last, ev.future, result.reply, started)

    def _run_one_guarded(self, ev: _Event) -> None:
        """_run_one, where an unexpected exception (a bug) fails that one command
        with UNKNOWN_SERVER_ERROR instead of ending the event task: a dead event
        task would leave every later write waiting for its deadline."""
        try:
            self._run_one(ev)
        except Exception as e:  # noqa: BLE001 - see the docstring
            log.error(
                "%s failed: %s: %s",
                ev.name,
                type(e).__name__,
                e,
                exc_info=True,
                extra={"event": "command_failed", "command": ev.name},
            )
            if not ev.future.done():
                ev.future.set_exception(
                    ApiError("UNKNOWN_SERVER_ERROR", f"{ev.name} failed: {type(e).__name__}: {e}")
                )

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            budget = 256  # yield to the loop regularly so I/O (fetches, heartbeats) flows
            while (self._priority or self._normal) and budget > 0:
                if self._replay is not None:
                    await self._continue_replay()
                    continue
                ev = self._priority.popleft() if self._priority else self._normal.popleft()
                if not ev.future.done():
                    self._run_one_guarded(ev)
                budget -= 1
            if self._replay is not None:
                await self._continue_replay()
            if self._priority or self._normal:
                self._wakeup.set()
                await asyncio.sleep(0)

    # ---------------------------------------------------------------- timers

    def _deferred(
        self,
        name: str,
        fn: Callable[[QuorumController, int], ControllerResult | None],
        on_committed: Callable[[Any, float], None] | None = None,
    ) -> None:
        """Queue a deferred event; nobody waits for its reply. `on_committed(reply,
        ran_at)` hears when its records are committed and replayed (ran_at: the
        perf_counter when the event ran)."""
        ran_at: list[float] = []

        def generate(c: QuorumController, now: int, off: int) -> ControllerResult:
            ran_at.append(time.perf_counter())
            return fn(c, now) or ControllerResult(())

        def done(f: asyncio.Future[Any]) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            if on_committed is not None and ran_at:
                on_committed(f.result(), ran_at[0])

        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(done)
        now = self.clock()
        self._priority.append(
            _Event(name, generate, now + self.request_timeout_ms, fut, now, timed=True)
        )
        self._wakeup.set()

    def _fence_committed(self, reply: Any, ran_at: float) -> None:
        if not reply:
            return  # the check found nobody stale
        now = time.perf_counter()
        # A large fence can commit before the active controller has replayed it all.
        commit_ms = round((reply.get("committed_at", now) - ran_at) * 1000, 1)
        log.info(
            "fence committed",
            extra={
                "event": "broker_fence_committed",
                "broker_id": reply["fenced_broker"],
                "records": reply["records"],
                "ms_since_decision": commit_ms,
                "appended_ms_since_decision": round(
                    (reply.get("appended_at", now) - ran_at) * 1000, 1
                ),
                "replayed_ms_since_decision": round((now - ran_at) * 1000, 1),
            },
        )
        if self._on_fence_committed is not None:
            self._on_fence_committed(reply["fenced_broker"], reply["records"], commit_ms)

    async def _timers(self) -> None:
        """Fence checks and NoOps, as deferred events through the queue."""
        while True:
            now = self.clock()
            wake = now + 100
            if self.controller.active:
                check = self.controller.next_fence_check_ms()
                if check is not None and check <= now:
                    self._deferred("fence-stale-broker", _fence_one, self._fence_committed)
                    await self._drained()
                    continue
                if check is not None:
                    wake = min(wake, check)
                if self.max_idle_interval_ms > 0:
                    due = self._last_write_ms + self.max_idle_interval_ms
                    if due <= now:
                        self._last_write_ms = now
                        self._deferred("noop", lambda c, t: c.noop())
                        due = now + self.max_idle_interval_ms
                    wake = min(wake, due)
            await asyncio.sleep(max(0.001, (wake - self.clock()) / 1000))

    async def _balance_leaders(self, interval_s: float) -> None:
        """Kafka's maybeBalancePartitionLeaders: every check interval the active
        controller elects preferred leaders, one bounded batch per event in the
        normal lane (heartbeats and fences go first), each batch committed before the
        next is decided, and again at once while a batch left imbalanced partitions.
        A check that elected anything logs one `leader_balance` line (batches,
        elections, ms from the first decision to the last commit)."""
        while True:
            await asyncio.sleep(interval_s)
            if self.controller.active:
                await self._balance_check()

    async def _balance_check(self) -> None:
        elections: list[int] = []  # elections of each committed batch
        started = time.perf_counter()
        for _ in range(MAX_BALANCE_BATCHES_PER_CHECK):
            if not self.controller.active:
                break
            try:
                fut = self.submit("balance-partition-leaders", _balance_batch)
                # retrieved even when this task is cancelled first (stop fails it)
                fut.add_done_callback(lambda f: f.cancelled() or f.exception())
                reply = await asyncio.wait_for(asyncio.shield(fut), self.reply_timeout_s)
            except (ApiError, TimeoutError) as e:
                # lost the leadership or overloaded: the next check tries again
                log.info(
                    "leader balancing deferred",
                    extra={"event": "leader_balance_deferred", "reason": str(e)},
                )
                break
            if not reply:
                break  # nothing is imbalanced
            if reply.get("elections"):
                elections.append(reply["elections"])
                self.balance_batches += 1
            if not reply.get("more"):
                break  # the round is over: the rest waits for the next interval
        if elections:
            log.info(
                "preferred leaders elected",
                extra={
                    "event": "leader_balance",
                    "batches": len(elections),
                    "elections": sum(elections),
                    "decision_to_commit_ms": round((time.perf_counter() - started) * 1000, 1),
                    "imbalanced_left": self.controller.imbalanced_partition_count(),
                },
            )

    async def _drained(self) -> None:
        """Let the queued fence run (and replay) before looking for the next stale broker."""
        for _ in range(100):
            if not self._priority:
                return
            await asyncio.sleep(0.001)


# A check elects at most this many batches (leader.imbalance.max.elections.per.batch
# partitions each) before it waits for the next interval: bounded work per check.
MAX_BALANCE_BATCHES_PER_CHECK = 10_000


def _balance_batch(c: QuorumController, now: int, off: int) -> ControllerResult:
    """One bounded batch of preferred-leader elections (cause REBALANCE); its reply
    says `elections` and whether the round has `more` (None: nothing imbalanced)."""
    return c.maybe_balance_partition_leaders(now) or ControllerResult(())


def _fence_one(c: QuorumController, now: int) -> ControllerResult | None:
    result = c.maybe_fence_stale_broker(now)
    if result is None or result.more is None:
        return result
    log.info(
        "fencing broker",
        extra={"event": "broker_fenced", "broker_id": result.reply["fenced_broker"]},
    )
    reply = {**result.reply, "records": len(result.records)}
    more = result.more

    def counted() -> Iterator[MetadataRecord | None]:
        for rec in more:
            if rec is not None:
                reply["records"] += 1
            yield rec

    return ControllerResult(result.records, reply, more=counted())
