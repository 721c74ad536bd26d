"""RaftClient: the asyncio driver of the pure RaftCore, and the state-machine interface.

One task (`_drive`) owns the core: every call into it happens there, so the core
needs no locks. Work reaches that task through a deque and an asyncio.Event:
inbound RPCs (from the aiohttp routes), answers and failures of our own requests,
flush completions, proposals and resign. Each cycle:

1. proposals queued since the last cycle are appended (coalesced into as few
   batches as possible, Kafka's BatchAccumulator: records of one call always stay
   in one batch, so a call is atomic);
2. inbound messages are handed to the core; a finished fsync is reported
   (`on_flushed`); `tick` runs when the core's wake time has come;
3. the core's Ready is handled in kraft.raft.ready's order: the quorum-state file
   is written durably *before* anything of the same Ready is sent; an fsync is
   started in a worker thread (one at a time; appends continue meanwhile and
   ride the next one: group commit); requests go out concurrently, each with a
   timeout, and their answers come back through the deque; responses resolve
   the inbound requests' futures;
4. committed batches are handed to the listener in order, then leadership
   changes. Leadership is announced to the listener only once it has received
   everything up to the epoch's first offset (Kafka's "claim"), so a new active
   controller starts from the whole committed log.

State-machine interface (issue 3, item 5) — `RaftListener`:
  handle_load_snapshot(snapshot_id, path)   the state is that snapshot (start-up,
                                            or a follower that fell behind the
                                            leader's log start)
  handle_commit(batch)                      every committed batch, in offset order,
                                            on every node (the leader's own too)
  handle_leader_change(leader_and_epoch)    a new leader or epoch; leader_id ==
                                            this node means "you may write now"
And on the leader: `append(batches)` appends atomically and returns the last
offset at once; `wait_committed(offset)` resolves when it commits (or raises
NotLeaderError if leadership is lost first, when the outcome is unknown).

Voter set changes (KIP-853): `add_voter` / `remove_voter` run the core's
AddVoter / RemoveVoter in the driver task, retry (bounded) while the leader is
not ready or the new voter is still catching up, and resolve once the
VotersRecord commits. Peers are addressed through the core's view of the voter
set (and, for a node started with --bootstrap-controllers, the bootstrap URLs
under negative ids until the log names the voters).

Every background task is cancelled by `shutdown()`, which first resigns a
leadership (EndQuorumEpoch to the voters, bounded wait) so that a successor is
elected at once instead of after a fetch timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kraft.clock import mono_ms, wall_ms
from kraft.raft.config import RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.errors import NotLeaderError, ReconfigError
from kraft.raft.messages import (
    INCONSISTENT_CLUSTER_ID,
    FetchRequest,
    RaftRequest,
    RaftResponse,
    VoteRequest,
)
from kraft.raft.ready import Outbound, Ready
from kraft.raft.replicated_log import ReplicatedLog
from kraft.raft.state import ElectionState, LeaderAndEpoch, Resigned
from kraft.raft.voters import UNKNOWN_DIRECTORY, Voter, VoterSet
from kraft.raft_shell.transport import HttpTransport, TransportError
from metadata_log.batch import HEADER_SIZE, BatchHeader, decode_records, encode_batch, parse_header
from metadata_log.records import Record
from metadata_log.snapshot import SnapshotId

log = logging.getLogger("kraft.raft")

# Proposals are merged into batches of up to this many bytes (a bigger single
# proposal is its own batch): big enough to amortize per-batch costs, small enough
# that one batch fits a default Fetch.
MERGE_LIMIT_BYTES = 512 * 1024
# A peer of another cluster is named in the log at most this often.
FOREIGN_NODE_WARN_MS = 60_000
# Committed data handed to the listener per driver cycle, so that catching up a
# long log does not stall the event loop (the next cycle continues).
DELIVERY_CHUNK_BYTES = 4 * 1024 * 1024
# The longest the driver runs cycles back to back before it lets the loop run.
DRIVER_YIELD_AFTER_S = 0.002


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class RaftFatalError(Exception):
    """The node cannot go on (a failed fsync, a broken safety check): it must stop."""


class CommittedBatch:
    """One committed batch as the listener sees it; records are decoded on demand
    (the active controller already replayed its own and only needs the offsets)."""

    __slots__ = ("header", "_buf", "_pos", "_records")

    def __init__(self, header: BatchHeader, buf: bytes, pos: int) -> None:
        self.header = header
        self._buf = buf
        self._pos = pos
        self._records: list[Record] | None = None

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def epoch(self) -> int:
        return self.header.leader_epoch

    @property
    def append_time_ms(self) -> int:
        return self.header.append_time_ms

    @property
    def control(self) -> bool:
        return self.header.control

    @property
    def size_bytes(self) -> int:
        return self.header.length

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            self._records = decode_records(self._buf, self._pos, self.header, "<committed batch>")
        return self._records

    def __repr__(self) -> str:
        h = self.header
        return f"CommittedBatch({h.base_offset}..{h.last_offset}, epoch={h.leader_epoch})"


class ClientLog(ReplicatedLog, Protocol):
    """What RaftClient needs from its log: the core's ReplicatedLog plus the
    two-phase flush (kraft.raft_shell.file_log_adapter) and where a snapshot lives."""

    def prepare_flush(self) -> Any:
        """A job with `run()` (called in a worker thread) and `done`, or None."""
        ...

    def complete_flush(self, job: Any) -> int:
        """Account a finished job; returns the flushed offset (LogFatalError if it failed)."""
        ...

    def snapshot_file(self, snapshot_id: SnapshotId) -> Path: ...


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState: ...

    def write(self, state: ElectionState) -> None: ...


class RaftListener(Protocol):
    """What the state machine implements (Kafka's RaftClient.Listener)."""

    def handle_load_snapshot(self, snapshot_id: SnapshotId, path: Path) -> None: ...

    def handle_commit(self, batch: CommittedBatch) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


# Items of the driver's inbox: work for the one task that owns the core.


@dataclass(frozen=True, slots=True)
class InboundRequest:
    """An RPC from a peer; `reply` resolves with the core's response."""

    request: RaftRequest
    reply: asyncio.Future[RaftResponse]


@dataclass(frozen=True, slots=True)
class PeerResponse:
    """The answer to one of our requests (`correlation` is the core's)."""

    correlation: int
    response: RaftResponse


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """One of our requests got no answer (refused, timed out, HTTP error)."""

    correlation: int


@dataclass(frozen=True, slots=True)
class Resign:
    """Give up leadership (graceful shutdown)."""


@dataclass(frozen=True, slots=True)
class CoreCall:
    """Run fn(core, now) in the driver task; `result` resolves with its value."""

    fn: Callable[[RaftCore, int], Any]
    result: asyncio.Future[Any]


InboxItem = InboundRequest | PeerResponse | RequestFailed | Resign | CoreCall


def _payload_of(entry: Any) -> tuple[bytes, int]:
    """(records section, count) of an EncodedBatch-like, a (bytes, count) pair or records."""
    if isinstance(entry, tuple):
        payload, count = entry
    elif hasattr(entry, "payload"):
        payload, count = entry.payload, entry.record_count
    else:  # a sequence of records
        records = list(entry)
        batch = encode_batch(0, 0, 0, records)
        payload, count = batch[HEADER_SIZE:], len(records)
    if count <= 0:
        raise ValueError("a batch holds at least one record")
    return (payload if type(payload) is bytes else bytes(payload)), count


class RaftClient:
    def __init__(
        self,
        node_id: int,
        voters: dict[int, str] | None,
        cluster_id: str,
        log_: ClientLog,
        quorum_state: QuorumStateStore,
        config: RaftConfig | None = None,
        *,
        transport: HttpTransport | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], int] = mono_ms,
        timestamp: Callable[[], int] = wall_ms,
        directory_id: str = UNKNOWN_DIRECTORY,
        bootstrap_servers: Sequence[str] = (),
    ) -> None:
        """`voters`: the static voter set, id -> base URL (None: none, the node was
        started with `bootstrap_servers` and learns the voters from the log). A node
        that is not a voter is an observer. `directory_id`: from meta.properties.
        `clock` drives every timer (monotonic); `timestamp` only stamps the batches
        this node appends (wall clock)."""
        self.node_id = node_id
        self.voter_urls = dict(voters or {})
        self.directory_id = directory_id
        # Bootstrap servers get negative ids (as Kafka's bootstrap nodes do).
        self.bootstrap_urls = {-(i + 1): u.rstrip("/") for i, u in enumerate(bootstrap_servers)}
        if not self.voter_urls and not self.bootstrap_urls:
            raise ValueError("give the voters or bootstrap servers")
        self.cluster_id = cluster_id
        self.log = log_
        self.quorum_state = quorum_state
        self.config = config or RaftConfig()
        self.transport = transport or HttpTransport(self.voter_urls)
        for bid, url in self.bootstrap_urls.items():
            self._set_peer(bid, url)
        self.clock = clock
        self.timestamp = timestamp
        self._rng = rng or random.Random()
        self.core: RaftCore | None = None
        self.listener: RaftListener | None = None
        self._inbox: deque[InboxItem] = deque()
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._inbound: dict[int, asyncio.Future[RaftResponse]] = {}
        self._next_inbound = 0
        # Proposals not yet handed to the core: (payload, count).
        self._pending: list[tuple[bytes, int]] = []
        self._pending_records = 0
        # (last offset, future) of wait_committed callers, in offset order.
        self._commit_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._flush_job: Any = None  # the in-flight flush job (one at a time)
        self._flush_future: asyncio.Future[None] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="raft-fsync")
        self._delivered = 0  # next offset to hand to the listener
        self._claimed_epoch: int | None = None
        self._reported: LeaderAndEpoch | None = None
        self._last_logged: tuple[str, int, int | None] | None = None
        self._stopping = False
        # peer -> when (mono_ms) its next INCONSISTENT_CLUSTER_ID warning may be logged
        self._foreign_warned: dict[int, int] = {}
        self.failed: asyncio.Future[BaseException] | None = None
        self.fatal_error: BaseException | None = None
        # Counters for metrics.
        self.elections_started = 0
        self.leader_changes = 0
        self.on_state_change: Callable[[str, int, int | None], None] | None = None

    # ================================================================ lifecycle

    def register_listener(self, listener: RaftListener) -> None:
        if self._task is not None:
            raise RuntimeError("register the listener before start()")
        self.listener = listener

    async def start(self, started_ms: int | None = None) -> None:
        """Read the quorum-state file and the log, load the newest snapshot into the
        listener, and start driving the core.

        `started_ms`: when this node started waiting for a leader (e.g. the process
        start), from which its first election / fetch timeout counts; default now.
        Start-up work (imports, log recovery) then does not add to the time a fresh
        quorum takes to elect its first leader.
        """
        loop = asyncio.get_running_loop()
        self.failed = loop.create_future()
        election = self.quorum_state.read()
        now = self.clock()
        if started_ms is not None:
            now = min(now, max(started_ms, now - self.config.election_timeout_ms))
        static = (
            VoterSet.of(Voter(i, UNKNOWN_DIRECTORY, u) for i, u in self.voter_urls.items())
            if self.voter_urls
            else None
        )
        self.core = RaftCore(
            self.node_id,
            static,
            self.cluster_id,
            self.log,
            election,
            self.config,
            self._rng,
            now,
            directory_id=self.directory_id,
            bootstrap_servers=tuple(self.bootstrap_urls),
        )
        self.core.wall_offset_ms = self.timestamp() - now
        self._voters_version = -1
        snap = self.log.latest_snapshot_id()
        self._delivered = self.log.start_offset
        if snap is not None and snap.end_offset > self._delivered:
            self._delivered = snap.end_offset
        if snap is not None and self.listener is not None:
            self.listener.handle_load_snapshot(snap, self.log.snapshot_file(snap))
        log.info(
            "raft client started",
            extra={
                "event": "raft_started",
                "node_id": self.node_id,
                "epoch": election.leader_epoch,
                "leader_id": election.leader_id,
                "voted_id": election.voted_id,
                "log_start_offset": self.log.start_offset,
                "log_end_offset": self.log.end_offset,
                "snapshot": None if snap is None else snap.file_name,
            },
        )
        self._task = asyncio.create_task(self._drive(), name=f"raft-driver-{self.node_id}")

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Resign a leadership (EndQuorumEpoch, bounded wait for the voters' acks),
        then stop every task and close the transport. The log stays open (the
        owner closes it)."""
        core = self.core
        if (
            core is not None
            and self._task is not None
            and not self._task.done()
            and core.is_leader
            and len(core.voters) > 1
        ):
            self._push(Resign())
            # the loop's clock, as asyncio's own timeouts: monotonic on a real loop,
            # virtual in the simulator (a fake `clock` may never move while we sleep)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while loop.time() < deadline and not self._task.done():
                s = core.state
                if isinstance(s, Resigned) and not s.unacked:
                    break
                if not isinstance(s, Resigned) and not core.is_leader and s.epoch > 0:
                    break  # someone else already took over
                await asyncio.sleep(0.005)
        self._stopping = True
        await self._cancel_tasks()
        # An fsync in flight finishes (bounded by the disk) before the log closes.
        if self._flush_future is not None and not self._flush_future.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._flush_future), timeout_s)
        self._executor.shutdown(wait=False)
        await self.transport.close()
        err = NotLeaderError(None, core.epoch if core else 0)
        self._fail_waiters(err)
        for fut in self._inbound.values():
            if not fut.done():
                fut.set_exception(RaftFatalError("the Raft client stopped"))
        self._inbound.clear()

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in (self._task, *self._sends) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._sends.clear()
        if self._timer is not None:
            self._timer.cancel()

    # ================================================================ public API

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark if self.core else 0

    @property
    def delivered_offset(self) -> int:
        """The next offset the listener will receive (all below it were handed over)."""
        return self._delivered

    @property
    def is_leader(self) -> bool:
        """True while this node leads an epoch it has claimed (writes are accepted)."""
        core = self.core
        return (
            core is not None
            and self._claimed_epoch is not None
            and core.is_leader
            and core.epoch == self._claimed_epoch
            and not self._stopping
        )

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.core.leader_and_epoch if self.core else LeaderAndEpoch(None, 0)

    def leader_url(self, leader_id: int | None) -> str | None:
        if leader_id is None:
            return None
        url = self.core.endpoint(leader_id) if self.core is not None else None
        return url or self.voter_urls.get(leader_id)

    # ------------------------------------------------------- voter set changes

    async def _call(self, fn: Callable[[RaftCore, int], Any]) -> Any:
        """Run fn(core, now) in the driver task (the only one that touches the core)."""
        if self._task is None or self._task.done():
            raise RaftFatalError("the Raft client is not running")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._push(CoreCall(fn, fut))
        return await fut

    async def _change_voters(self, fn: Callable[[RaftCore, int], int], timeout_s: float) -> int:
        """A voter change: retried while its condition may clear (bounded by
        timeout_s), then awaited until its VotersRecord commits. Raises
        ReconfigError (the last refusal), NotLeaderError or TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        backoff = 0.05
        while True:
            try:
                offset: int = await self._call(fn)
                break
            except ReconfigError as e:
                if not e.retriable or loop.time() + backoff > deadline:
                    raise
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)
        remaining = max(deadline - loop.time(), 0.001)
        core = self.core
        assert core is not None
        epoch = core.epoch
        while core.high_watermark <= offset:
            if not core.is_leader or core.epoch != epoch:
                # A leader that removed itself resigns right after the commit:
                # the high watermark tells whether it got there.
                if core.high_watermark > offset:
                    break
                le = core.leader_and_epoch
                raise NotLeaderError(le.leader_id, le.epoch)
            if loop.time() >= deadline:
                raise TimeoutError(
                    f"the voter change at offset {offset} did not commit within "
                    f"{remaining:.1f}s (high watermark {core.high_watermark})"
                )
            await asyncio.sleep(0.02)
        return offset

    async def add_voter(
        self, node_id: int, directory_id: str, url: str, timeout_s: float = 30.0
    ) -> int:
        """AddVoter on this (leader) node; returns the VotersRecord's offset once committed."""
        return await self._change_voters(
            lambda core, now: core.add_voter(node_id, directory_id, url.rstrip("/"), now),
            timeout_s,
        )

    async def remove_voter(self, node_id: int, directory_id: str, timeout_s: float = 30.0) -> int:
        """RemoveVoter on this (leader) node; returns the VotersRecord's offset once committed."""
        return await self._change_voters(
            lambda core, now: core.remove_voter(node_id, directory_id, now), timeout_s
        )

    def next_offset(self) -> int:
        """The offset the next appended record gets (on the leader)."""
        assert self.core is not None
        return self.core.log.end_offset + self._pending_records

    def append(self, batches: Sequence[Any]) -> int:
        """Append atomically as the leader; returns the last offset at once.

        `batches`: EncodedBatch-likes (payload, record_count), (bytes, count) pairs
        or lists of records; each entry stays whole in one Raft batch. Raises
        NotLeaderError unless this node leads a claimed epoch.
        """
        if not self.is_leader:
            le = self.leader_and_epoch
            raise NotLeaderError(le.leader_id, le.epoch)
        if not batches:
            raise ValueError("nothing to append")
        entries = [_payload_of(b) for b in batches]
        for payload, count in entries:
            self._pending.append((payload, count))
            self._pending_records += count
        self._wake.set()
        return self.next_offset() - 1

    def append_records(self, records: Sequence[Record]) -> int:
        """Append `records` as one batch; returns the last offset."""
        return self.append([list(records)])

    def wait_committed(self, offset: int) -> asyncio.Future[None]:
        """A future resolved once `offset` is committed and handed to the listener."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if offset < self._delivered:
            fut.set_result(None)
        elif not self.is_leader:
            le = self.leader_and_epoch
            fut.set_exception(NotLeaderError(le.leader_id, le.epoch))
        else:
            self._commit_waiters.append((offset, fut))
        return fut

    async def append_and_wait(self, batches: Sequence[Any]) -> int:
        last = self.append(batches)
        await self.wait_committed(last)
        return last

    async def handle_inbound(self, request: RaftRequest) -> RaftResponse:
        """An RPC from a peer (the /raft/* routes); its answer once the core gives it."""
        if self._task is None or self._task.done():
            raise RaftFatalError("the Raft client is not running")
        fut: asyncio.Future[RaftResponse] = asyncio.get_running_loop().create_future()
        self._push(InboundRequest(request, fut))
        if isinstance(request, FetchRequest):
            timeout = (
                min(request.max_wait_ms, self.config.fetch_max_wait_ms)
                + self.config.request_timeout_ms
            ) / 1000
        else:
            timeout = self.config.request_timeout_ms / 1000
        # A timer on the future itself rather than asyncio.wait_for, whose waiter
        # adds a loop iteration between the core's answer and its sending.
        timer = asyncio.get_running_loop().call_later(timeout, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()

    def describe(self) -> dict[str, Any]:
        """GET /v1/quorum: the core's view (DESIGN 1.2) plus the leader's URL."""
        assert self.core is not None
        now = self.clock()
        self.core.wall_offset_ms = self.timestamp() - now
        view = self.core.describe(now)
        view["leader_url"] = self.leader_url(view.get("leader_id"))
        view["log_start_offset"] = self.log.start_offset
        view["flushed_offset"] = self.log.flushed_offset
        return view

    # ================================================================ the driver

    def _push(self, item: InboxItem) -> None:
        self._inbox.append(item)
        self._wake.set()

    def _arm_timer(self, wake_ms: int) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time() + max(0.0, (wake_ms - self.clock()) / 1000)
        if self._timer is not None:
            if abs(self._timer_at - at) < 0.0005:
                return  # already armed for (about) then
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._wake.set()

    async def _drive(self) -> None:
        core = self.core
        assert core is not None
        try:
            await self._handle_ready()
            wake = self._wake
            loop = asyncio.get_running_loop()
            held_since = loop.time()
            while True:
                if not wake.is_set():
                    await wake.wait()
                    held_since = loop.time()
                elif loop.time() - held_since >= DRIVER_YIELD_AFTER_S:
                    # Back-to-back cycles (e.g. handing over a long committed log)
                    # would hold the loop: Event.wait() on a set event does not
                    # suspend. Yield now and then; not every cycle, which measurably
                    # slowed a low-load commit.
                    await asyncio.sleep(0)
                    held_since = loop.time()
                wake.clear()
                await self._cycle()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - a fatal error stops the node
            self.fatal_error = e
            log.error(
                "raft driver failed: %s",
                e,
                extra={"event": "raft_fatal", "error": f"{type(e).__name__}: {e}"},
                exc_info=not isinstance(e, OSError),
            )
            self._fail_waiters(NotLeaderError(None, core.epoch))
            if self.failed is not None and not self.failed.done():
                self.failed.set_result(e)

    async def _cycle(self) -> None:
        core = self.core
        assert core is not None
        now = self.clock()
        core.wall_offset_ms = self.timestamp() - now  # batch stamps only
        if self._pending:
            self._propose(now)
        inbox = self._inbox
        while inbox:
            match inbox.popleft():
                case InboundRequest(request, reply):
                    corr = self._next_inbound
                    self._next_inbound += 1
                    self._inbound[corr] = reply
                    core.handle_request(request, now, corr)
                case PeerResponse(correlation, response):
                    core.handle_response(correlation, response, now)
                case RequestFailed(correlation):
                    core.request_failed(correlation, now)
                case Resign():
                    core.resign(now)
                case CoreCall(fn, fut):
                    try:
                        result = fn(core, now)
                    except (ReconfigError, NotLeaderError, ValueError) as e:
                        if not fut.done():
                            fut.set_exception(e)
                    else:
                        if not fut.done():
                            fut.set_result(result)
        job = self._flush_job
        if job is not None and job.done:
            self._flush_job = None
            flushed = self.log.complete_flush(job)  # raises LogFatalError: fatal
            core.on_flushed(flushed, now)
        if now >= core.next_wake_ms():
            core.tick(now)
        await self._handle_ready()

    def _propose(self, now: int) -> None:
        """Hand queued proposals to the core, merged into few batches."""
        core = self.core
        assert core is not None
        merged: list[tuple[bytes, int]] = []
        parts: list[bytes] = []
        size = count = 0
        for payload, n in self._pending:
            if parts and size + len(payload) > MERGE_LIMIT_BYTES:
                merged.append((b"".join(parts), count))
                parts, size, count = [], 0, 0
            parts.append(payload)
            size += len(payload)
            count += n
        if parts:
            merged.append((parts[0] if len(parts) == 1 else b"".join(parts), count))
        self._pending.clear()
        self._pending_records = 0
        # Appends are only accepted while this node leads a claimed epoch and the
        # core changes state only inside this task, so it still leads here.
        core.propose(merged, now)

    async def _handle_ready(self) -> None:
        core = self.core
        assert core is not None
        # Nothing calls into the core while this runs (only _cycle does), so one
        # Ready per cycle holds everything.
        r = core.ready()
        if not r.empty:
            await self._apply_ready(r)
        self._deliver_commits()
        self._leadership()
        self._maybe_flush()
        self._log_state()
        wake = core.next_wake_ms()
        now = self.clock()
        if wake <= now:
            # The core wants a tick it cannot act on yet (e.g. a fetch waits for a
            # flush): poll gently instead of spinning.
            wake = now + 2
        self._arm_timer(wake)
        if self._delivered < min(core.high_watermark, self.log.end_offset):
            self._wake.set()  # more committed data to hand over

    async def _apply_ready(self, r: Ready) -> None:
        if r.election_state is not None:
            # Durable before anything of this Ready leaves (a vote grant or a
            # BeginQuorumEpoch may depend on it). A failure is fatal.
            await asyncio.to_thread(self.quorum_state.write, r.election_state)
        for out in r.messages:
            self._spawn_send(out)
        inbound = self._inbound
        for corr, resp in r.responses:
            fut = inbound.pop(corr, None)
            if fut is not None and not fut.done():
                fut.set_result(resp)
        if r.snapshot_loaded is not None:
            sid = r.snapshot_loaded
            self._delivered = max(self._delivered, sid.end_offset)
            log.info(
                "snapshot loaded from the leader",
                extra={"event": "snapshot_installed", "snapshot": sid.file_name},
            )
            if self.listener is not None:
                self.listener.handle_load_snapshot(sid, self.log.snapshot_file(sid))
        if r.leader_change is not None:
            self.leader_changes += 1

    # ----------------------------------------------------------------- sending

    def _set_peer(self, node_id: int, url: str) -> None:
        peers = getattr(self.transport, "peers", None)  # a test transport may have none
        if peers is not None:
            peers[node_id] = url.rstrip("/")

    def _spawn_send(self, out: Outbound) -> None:
        core = self.core
        if core is not None and out.destination >= 0:
            # The voter set (or a leader's answer) says where each node listens.
            url = core.endpoint(out.destination)
            if url:
                self._set_peer(out.destination, url)
        task = asyncio.create_task(self._send(out))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _send(self, out: Outbound) -> None:
        req = out.message
        cfg = self.config
        if isinstance(req, FetchRequest):
            timeout_ms = req.max_wait_ms + cfg.request_timeout_ms
        elif isinstance(req, VoteRequest):
            timeout_ms = cfg.election_timeout_ms
        else:
            timeout_ms = cfg.request_timeout_ms
        try:
            resp = await self.transport.send(out.destination, req, timeout_ms / 1000)
        except TransportError as e:
            log.debug("raft request to %s failed: %s", out.destination, e)
            self._push(RequestFailed(out.correlation))
            return
        if resp.error == INCONSISTENT_CLUSTER_ID:
            # Configured into our voters but of another cluster: the core ignores its
            # answers (their epoch is not ours); the operator must hear of it.
            now = mono_ms()
            if now >= self._foreign_warned.get(out.destination, 0):
                self._foreign_warned[out.destination] = now + FOREIGN_NODE_WARN_MS
                log.warning(
                    "node %s answered INCONSISTENT_CLUSTER_ID: it runs with another "
                    "cluster id than this node's %s; its answers are ignored",
                    out.destination,
                    self.cluster_id,
                    extra={"event": "inconsistent_cluster_id", "peer": out.destination},
                )
        self._push(PeerResponse(out.correlation, resp))

    # ----------------------------------------------------------------- flushing

    def _maybe_flush(self) -> None:
        """One fsync at a time, in the worker thread; appends meanwhile ride the next."""
        if self._flush_job is not None or self._stopping:
            return
        job = self.log.prepare_flush()
        if job is None:
            return
        self._flush_job = job
        # Handed to the thread once the loop has run what is ready now, so the
        # fetch answers this cycle completed are sent first: the thread takes the
        # GIL as it starts, and a send() meanwhile waited for it (profiled at low
        # load: a response's send took 157 us with the thread starting, 43 without).
        asyncio.get_running_loop().call_soon(self._start_flush, job)

    def _start_flush(self, job: Any) -> None:
        try:
            fut = asyncio.get_running_loop().run_in_executor(self._executor, job.run)
        except RuntimeError:
            # Shut down meanwhile (the executor is closed): flush here, as the
            # owner closes the log next.
            job.run()
            self._wake.set()
            return
        self._flush_future = fut
        fut.add_done_callback(lambda _f: self._wake.set())

    # ----------------------------------------------------------------- delivery

    def _deliver_commits(self) -> None:
        """Hand committed batches to the listener, in order, then resolve waiters."""
        core = self.core
        assert core is not None
        limit = min(core.high_watermark, self.log.end_offset)
        budget = DELIVERY_CHUNK_BYTES
        listener = self.listener
        while self._delivered < limit and budget > 0:
            data = self.log.read(self._delivered, min(budget, 1 << 20))
            if not data:
                break
            pos = 0
            n = len(data)
            progressed = False
            while pos < n:
                h = parse_header(data, pos, "<log>", self._delivered)
                if h.next_offset > limit:
                    break  # not wholly committed yet
                if h.base_offset != self._delivered:
                    raise RaftFatalError(
                        f"log read at {self._delivered} returned a batch at {h.base_offset}"
                    )
                # Counted as handed over before the call, so the listener sees its
                # own batch as committed (e.g. committed_offset() == last_offset).
                self._delivered = h.next_offset
                if listener is not None:
                    listener.handle_commit(CommittedBatch(h, data, pos))
                budget -= h.length
                pos += h.length
                progressed = True
            if not progressed:
                break
        waiters = self._commit_waiters
        while waiters and waiters[0][0] < self._delivered:
            _, fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, err: Exception) -> None:
        while self._commit_waiters:
            _, fut = self._commit_waiters.popleft()
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        self._pending_records = 0

    # ---------------------------------------------------------------- leadership

    def _leadership(self) -> None:
        """Tell the listener about leader changes; claim a won epoch once the listener
        has every batch up to its first offset."""
        core = self.core
        assert core is not None
        le = core.leader_and_epoch
        if self._claimed_epoch is not None and not (
            core.is_leader and core.epoch == self._claimed_epoch
        ):
            self._claimed_epoch = None
            self._fail_waiters(NotLeaderError(le.leader_id, le.epoch))
        if core.is_leader:
            if self._claimed_epoch != core.epoch:
                start = core.epoch_start_offset
                # Everything in the log, not just the epoch's first batch: the core
                # may have appended a VotersRecord of its own (the directory ids of
                # a static bootstrap, KIP-853) that the listener must see first.
                if (
                    start is not None
                    and self._delivered > start
                    and self._delivered >= self.log.end_offset
                ):
                    self._claimed_epoch = core.epoch
                    self._report(le)
            return
        if le != self._reported:
            self._report(le)

    def _report(self, le: LeaderAndEpoch) -> None:
        self._reported = le
        log.info(
            "leader change",
            extra={
                "event": "leader_change",
                "leader_id": le.leader_id,
                "epoch": le.epoch,
                "self": le.leader_id == self.node_id,
            },
        )
        if self.listener is not None:
            self.listener.handle_leader_change(le)

    def _log_state(self) -> None:
        core = self.core
        assert core is not None
        key = (core.state_name, core.epoch, core.leader_id)
        if key != self._last_logged:
            if core.state_name == "candidate":
                self.elections_started += 1
            self._last_logged = key
            log.info(
                "raft state %s, epoch %d, leader %s",
                key[0],
                key[1],
                key[2],
                extra={
                    "event": "raft_state",
                    "state": key[0],
                    "epoch": key[1],
                    "leader_id": key[2],
                    "high_watermark": core.high_watermark,
                    "log_end_offset": self.log.end_offset,
                },
            )
            if self.on_state_change is not None:
                self.on_state_change(*key)
