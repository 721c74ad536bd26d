"""ControllerService (the event-queue shell) over a fake Raft writer and a fake clock.

Replies wait for commit; the queue is bounded; a command that waited past its
deadline is REQUEST_TIMED_OUT while its heartbeat contact still counts (Kafka bug
15019); heartbeats jump the bulk work; a NoOp goes out every
metadata.max.idle.interval.ms; a new leader aborts a transaction its predecessor
left open; losing leadership reverts and fails what waits with NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kraft.controller.batching import EncodedBatch
from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import ControllerResult, QuorumController
from kraft.controller.requests import BrokerHeartbeatRequest
from kraft.server import controller_service
from kraft.server.controller_service import REPLAY_CHUNK, ControllerService
from kraft.server.routes import ControllerBackend
from metadata_log.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    NoOpRecord,
    TopicRecord,
)
from tests.unit.controller.harness import Harness

pytestmark = pytest.mark.timeout(30)


class FakeWriter:
    """The Raft leader as the service sees it: offsets, appends, a settable commit."""

    def __init__(self, next_offset: int) -> None:
        self._next = next_offset
        self.committed = next_offset - 1
        self.appended: list[tuple[int, int]] = []  # (first, last)
        self.leader = True

    def next_offset(self) -> int:
        return self._next

    def append(self, batches: list[EncodedBatch], now_ms: int) -> int:
        n = sum(b.record_count for b in batches)
        first = self._next
        self._next += n
        self.appended.append((first, self._next - 1))
        return self._next - 1

    def committed_offset(self) -> int:
        return self.committed

    def leader_hint(self) -> tuple[int | None, str | None]:
        return (None, None) if self.leader else (2, "http://127.0.0.1:9002")


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000
        self.timer_reads = 0  # reads by the service's timer task

    def __call__(self) -> int:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop
            task = None
        if task is not None and task.get_name() == "controller-timers":
            self.timer_reads += 1
        return self.ms

    async def timer_passes(self, n: int = 2) -> None:
        """Wait until the timer task has looked at the clock on `n` passes more (it
        reads it twice a pass), so that an absence is a real one: the timer ran and
        did nothing, not "it has not run yet"."""
        target = self.timer_reads + 2 * n
        for _ in range(1_000):  # bounded: 10 s of real time
            if self.timer_reads >= target:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the timer task did not run {n} passes")


def replayed(c: QuorumController) -> list[Any]:
    """Record every record the controller replays."""
    seen: list[Any] = []
    orig = c.replay

    def spy(record: Any, offset: int) -> None:
        seen.append(record)
        orig(record, offset)

    c.replay = spy  # type: ignore[method-assign]
    return seen


def make(h: Harness, **kw: Any) -> tuple[ControllerService, FakeWriter, Clock]:
    """A service over the harness's controller, active, its log committed."""
    writer = FakeWriter(h.next_offset)
    clock = Clock()
    h.c.deactivate(h.next_offset - 1)  # the harness activated it; the service does now
    svc = ControllerService(h.c, writer, clock=clock, **kw)
    svc.on_became_leader()
    return svc, writer, clock


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_reply_waits_for_commit() -> None:
    h = Harness()
    h.unfenced_broker(1)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    svc.start()
    try:
        hb = BrokerHeartbeatRequest(1, h.c.image.brokers[1].broker_epoch, 0, False, True)
        task = asyncio.ensure_future(
            svc.write("heartbeat", lambda c, now, off: c.heartbeat(hb, now), priority=True)
        )
        await settle()
        assert writer.appended and not task.done()  # appended and replayed, not committed
        assert h.c.image.brokers[1].fenced  # want_shutdown without leaderships: SHUTDOWN_NOW
        svc.on_committed(writer.appended[-1][1] - 1)
        await settle()
        assert not task.done()
        svc.on_committed(writer.appended[-1][1])
        reply = await asyncio.wait_for(task, 1)
        assert reply["should_shut_down"]
    finally:
        await svc.stop()


async def test_a_command_that_raises_fails_alone_and_the_queue_goes_on() -> None:
    # A bug in one command must not end the event task: every later write would
    # wait for its deadline (a fuzzed request once hung a whole run that way).
    h = Harness()
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    svc.start()
    try:

        def broken(c: QuorumController, now: int, off: int) -> Any:
            raise KeyError("a bug")

        with pytest.raises(ApiError) as e:
            await asyncio.wait_for(svc.write("broken", broken), 1)
        assert e.value.code == "UNKNOWN_SERVER_ERROR" and e.value.status == 500
        assert "KeyError" in e.value.message and not h.c.image.brokers
        task = asyncio.ensure_future(svc.write("noop", lambda c, now, off: c.noop()))
        await settle()
        assert writer.appended and not task.done()
        svc.on_committed(writer.appended[-1][1])
        await asyncio.wait_for(task, 1)
    finally:
        await svc.stop()


async def test_bounded_queue_and_deadline() -> None:
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    svc, writer, clock = make(h, queue_size=2, request_timeout_ms=500, max_idle_interval_ms=0)
    epoch = h.c.image.brokers[1].broker_epoch
    hb = BrokerHeartbeatRequest(1, epoch, writer.next_offset(), False, False)
    # Not started: commands pile up in the queue.
    queued = [
        asyncio.ensure_future(svc.write("noop", lambda c, now, off: c.noop())) for _ in range(2)
    ]
    await settle()
    with pytest.raises(ApiError) as e:
        await svc.write("noop", lambda c, now, off: c.noop())
    assert e.value.code == "REQUEST_TIMED_OUT" and "full" in e.value.message
    # A heartbeat arrives at t=1400 and waits in the queue past its deadline.
    clock.ms = 1_400
    svc.note_heartbeat_contact(1, epoch)
    late = asyncio.ensure_future(
        svc.write("heartbeat", lambda c, now, off: c.heartbeat(hb, now), priority=True)
    )
    await settle()
    clock.ms = 2_100
    svc.start()
    try:
        with pytest.raises(ApiError) as e:
            await asyncio.wait_for(late, 1)
        assert e.value.code == "REQUEST_TIMED_OUT" and e.value.status == 504
        for q in queued:
            with pytest.raises(ApiError):
                await asyncio.wait_for(q, 1)
        # ...but its contact counted: the session runs from 1400, not from 1000.
        assert h.c.maybe_fence_stale_broker(2_300) is None
        assert h.c.maybe_fence_stale_broker(2_400).reply["fenced_broker"] == 1
    finally:
        await svc.stop()


async def test_heartbeats_jump_bulk_work() -> None:
    h = Harness()
    h.unfenced_broker(1)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    order: list[str] = []
    epoch = h.c.image.brokers[1].broker_epoch
    hb = BrokerHeartbeatRequest(1, epoch, writer.next_offset(), False, False)

    def bulk(c: QuorumController, now: int, off: int) -> ControllerResult:
        order.append("bulk")
        return c.noop()

    def beat(c: QuorumController, now: int, off: int) -> ControllerResult:
        order.append("heartbeat")
        return c.heartbeat(hb, now)

    tasks = [asyncio.ensure_future(svc.write("bulk", bulk)) for _ in range(5)]
    tasks.append(asyncio.ensure_future(svc.write("heartbeat", beat, priority=True)))
    await settle()
    svc.start()
    try:
        await settle()
        svc.on_committed(writer.next_offset() - 1)
        await asyncio.wait_for(asyncio.gather(*tasks), 1)
        assert order[0] == "heartbeat" and order.count("bulk") == 5
    finally:
        await svc.stop()


async def test_heartbeat_runs_at_once_when_nothing_is_ahead_of_it() -> None:
    """A heartbeat that finds the priority lane empty is answered without a hop
    through the event task (nothing pending: no suspension at all); one that finds
    a fence queued waits behind it, as the queue orders them."""
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    h.unfenced_broker(2)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    seen = replayed(h.c)
    epochs = {b: h.c.image.brokers[b].broker_epoch for b in (1, 2)}
    order: list[str] = []

    def beat(b: int) -> Any:
        def gen(c: QuorumController, now: int, off: int) -> ControllerResult:
            order.append(f"heartbeat-{b}")
            req = BrokerHeartbeatRequest(b, epochs[b], writer.next_offset(), False, False)
            return c.heartbeat(req, now)

        return gen

    svc.start()
    try:
        coro = svc.write("heartbeat", beat(1), priority=True)
        with pytest.raises(StopIteration) as done:
            coro.send(None)  # completes without ever suspending
        assert done.value.value["is_fenced"] is False and order == ["heartbeat-1"]
        # Broker 2's session expired at 2000; a fence is queued (deferred event) and
        # broker 2's late heartbeat arrives behind it: the fence runs first.
        clock.ms = 2_000
        svc.note_heartbeat_contact(1, epochs[1])
        svc._deferred("fence-stale-broker", lambda c, now: c.maybe_fence_stale_broker(now))
        late = asyncio.ensure_future(svc.write("heartbeat", beat(2), priority=True))
        await settle()
        svc.on_committed(writer.next_offset() - 1)
        reply = await asyncio.wait_for(late, 1)
        # fenced first, then unfenced by its heartbeat
        assert [type(r).__name__ for r in seen] == ["FenceBrokerRecord", "UnfenceBrokerRecord"]
        assert reply["is_fenced"] is False and order[-1] == "heartbeat-2"
    finally:
        await svc.stop()


async def test_fence_commit_time_is_reported_once_committed() -> None:
    """The timer fences the stale broker; the hook hears of it only at commit."""
    h = Harness(session_timeout_ms=1000)
    h.unfenced_broker(1)
    heard: list[tuple[int, int, float]] = []
    svc, writer, clock = make(
        h, max_idle_interval_ms=0, on_fence_committed=lambda b, n, ms: heard.append((b, n, ms))
    )
    clock.ms = 2_000  # broker 1's session (from activation at 1000) expires now
    svc.start()
    try:
        for _ in range(200):  # bounded: 2 s of real time
            if h.c.image.brokers[1].fenced:
                break
            await asyncio.sleep(0.01)
        assert h.c.image.brokers[1].fenced and heard == []  # replayed, not committed
        svc.on_committed(writer.next_offset() - 1)
        await settle()
        assert [(b, n) for b, n, _ in heard] == [(1, 1)] and heard[0][2] >= 0
    finally:
        await svc.stop()


async def test_noop_every_idle_interval() -> None:
    h = Harness()
    svc, writer, clock = make(h, max_idle_interval_ms=500)
    seen = replayed(h.c)
    svc.start()
    try:

        def count() -> int:
            return sum(isinstance(r, NoOpRecord) for r in seen)

        async def until(n: int) -> None:
            for _ in range(500):  # bounded: 5 s of real time
                if count() >= n:
                    return
                await asyncio.sleep(0.01)

        await clock.timer_passes()
        noops = count()
        for _ in range(3):
            clock.ms += 499
            await clock.timer_passes()
            assert count() == noops  # the fake clock stands still: not due yet
            clock.ms += 1
            await until(noops + 1)
            await clock.timer_passes()
            assert count() == noops + 1  # exactly one per interval
            noops += 1
        # a write in between pushes the next NoOp back
        clock.ms += 300
        task = asyncio.ensure_future(svc.write("noop", lambda c, now, off: c.noop()))
        await until(noops + 1)
        clock.ms += 300  # 300 ms after that write: no idle NoOp yet
        await clock.timer_passes()
        assert count() == noops + 1
        svc.on_committed(writer.next_offset() - 1)
        await asyncio.wait_for(task, 1)
    finally:
        await svc.stop()


async def test_new_leader_aborts_open_transaction() -> None:
    h = Harness()
    # The previous leader died mid-transaction: its begin and first records committed.
    base = h.next_offset
    h.c.deactivate(base - 1)
    h.c.replay(BeginTransactionRecord("big"), base)
    h.c.replay(TopicRecord("half", "AAAAAAAAAAAAAAAAAAAAAA"), base + 1)
    assert h.c.image.in_transaction
    writer = FakeWriter(base + 2)
    seen = replayed(h.c)
    svc = ControllerService(h.c, writer, clock=Clock(), max_idle_interval_ms=0)
    svc.on_became_leader()
    assert isinstance(seen[0], AbortTransactionRecord)
    assert not h.c.image.in_transaction and h.c.image.topic_by_name("half") is None


async def test_lost_leadership_reverts_and_fails_waiters() -> None:
    h = Harness()
    h.unfenced_broker(1)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    before = h.c.image.to_dict()
    svc.start()
    try:
        hb = BrokerHeartbeatRequest(1, h.c.image.brokers[1].broker_epoch, 0, True, False)
        task = asyncio.ensure_future(
            svc.write("heartbeat", lambda c, now, off: c.heartbeat(hb, now), priority=True)
        )
        await settle()
        assert h.c.image.brokers[1].fenced  # want_fence: fenced, not yet committed
        writer.leader = False
        svc.on_lost_leadership()
        with pytest.raises(ApiError) as e:
            await asyncio.wait_for(task, 1)
        assert e.value.code == "NOT_CONTROLLER"
        assert e.value.to_body()["leader_id"] == 2
        assert e.value.to_body()["leader_url"] == "http://127.0.0.1:9002"
        # in the message too: the console shows the message (it left the URL out)
        assert e.value.message.endswith("the active controller is 2 at http://127.0.0.1:9002")
        assert h.c.image.to_dict() == before and not h.c.active
        with pytest.raises(ApiError) as e:
            await svc.write("noop", lambda c, now, off: c.noop())
        assert e.value.code == "NOT_CONTROLLER"
    finally:
        await svc.stop()


def _big(n: int) -> Any:
    def gen(c: QuorumController, now: int, off: int) -> ControllerResult:
        return ControllerResult(tuple(NoOpRecord() for _ in range(n)), "big done")

    return gen


async def _mid_replay(svc: ControllerService) -> None:
    for _ in range(1000):  # bounded: the event task starts the replay within a few passes
        if svc._replay is not None:
            return
        await asyncio.sleep(0)
    raise AssertionError("the large write never started replaying")


async def test_large_write_replays_in_chunks_and_holds_other_work() -> None:
    """A large write is appended at once and replayed a chunk per loop pass: a
    heartbeat meanwhile waits behind it, a read waits for the whole replay even
    when the records committed first, and the reply comes after both."""
    h = Harness()
    h.unfenced_broker(1)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    epoch = h.c.image.brokers[1].broker_epoch
    n = REPLAY_CHUNK * 3 + 5
    seen_by_heartbeat: list[int] = []

    def beat(c: QuorumController, now: int, off: int) -> ControllerResult:
        seen_by_heartbeat.append(c.image.offset)
        return c.heartbeat(BrokerHeartbeatRequest(1, epoch, off, False, False), now)

    svc.start()
    try:
        big = asyncio.ensure_future(svc.write("big", _big(n)))
        await _mid_replay(svc)
        last = writer.appended[-1][1]
        assert writer.appended[-1][1] - writer.appended[-1][0] + 1 == n  # appended at once
        assert h.c.image.offset < last  # replayed only in part
        beat_task = asyncio.ensure_future(svc.write("heartbeat", beat, priority=True))
        writer.committed = last  # the batch commits before the replay is done
        svc.on_committed(last)
        read = asyncio.ensure_future(svc.read_image())
        await asyncio.sleep(0)
        assert not big.done() and not read.done() and seen_by_heartbeat == []
        image = await asyncio.wait_for(read, 2)
        assert image.offset == last
        assert await asyncio.wait_for(big, 2) == "big done"
        await asyncio.wait_for(beat_task, 2)
        assert seen_by_heartbeat == [last]  # ran only after the whole replay
    finally:
        await svc.stop()


async def test_a_client_reply_of_a_large_write_carries_only_its_own_fields() -> None:
    """The commit and append times a large write records are for the service's own
    log line (a fence's); a client's reply (a re-registration that fences its
    partitions, say) is what the command answered, nothing more."""
    h = Harness()
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    n = REPLAY_CHUNK * 3 + 5

    def gen(c: QuorumController, now: int, off: int) -> ControllerResult:
        return ControllerResult(tuple(NoOpRecord() for _ in range(n)), {"broker_epoch": 7})

    svc.start()
    try:
        big = asyncio.ensure_future(svc.write("register-broker", gen))
        await _mid_replay(svc)
        last = writer.appended[-1][1]
        writer.committed = last  # committed before the replay is done: committed_at is set
        svc.on_committed(last)
        assert await asyncio.wait_for(big, 2) == {"broker_epoch": 7}
    finally:
        await svc.stop()


@pytest.mark.parametrize("committed", [True, False])
async def test_lost_leadership_during_a_large_replay(committed: bool) -> None:
    """Committed records are all replayed (they will not come again); uncommitted
    ones are reverted and their reply fails NOT_CONTROLLER."""
    h = Harness()
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    before = h.c.image.offset
    svc.start()
    try:
        big = asyncio.ensure_future(svc.write("big", _big(REPLAY_CHUNK * 2 + 1)))
        await _mid_replay(svc)
        last = writer.appended[-1][1]
        if committed:
            writer.committed = last
        writer.leader = False
        svc.on_lost_leadership()
        assert svc._replay is None and not h.c.active
        if committed:
            assert h.c.image.offset == last
            assert await asyncio.wait_for(big, 1) == "big done"
        else:
            assert h.c.image.offset == before
            with pytest.raises(ApiError) as e:
                await asyncio.wait_for(big, 1)
            assert e.value.code == "NOT_CONTROLLER"
    finally:
        await svc.stop()


async def test_large_fence_is_generated_in_steps(monkeypatch) -> None:
    """A fence's partition changes are drawn a chunk per loop pass, then appended in
    one write and replayed: every change, then the FenceBrokerRecord."""
    monkeypatch.setattr(controller_service, "REPLAY_CHUNK", 8)
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2, 3]] * 50)
    heard: list[tuple[int, int, float]] = []
    svc, writer, clock = make(
        h, max_idle_interval_ms=0, on_fence_committed=lambda b, n, ms: heard.append((b, n, ms))
    )
    seen = replayed(h.c)
    for b in (2, 3):
        svc.note_heartbeat_contact(b, h.c.image.brokers[b].broker_epoch)
    clock.ms = 2_000  # broker 1's session (from activation at 1000) expires now
    svc.start()
    try:
        generating = False
        for _ in range(2000):  # bounded
            r = svc._replay
            generating = generating or (r is not None and r.more is not None)
            if h.c.image.brokers[1].fenced:
                break
            await asyncio.sleep(0)
        assert generating and h.c.image.brokers[1].fenced
        assert len(writer.appended) == 1 and writer.appended[0][1] - writer.appended[0][0] == 50
        assert [type(r).__name__ for r in seen] == ["PartitionChangeRecord"] * 50 + [
            "FenceBrokerRecord"
        ]
        assert all(
            p.leader == 2 and 1 not in p.isr
            for p in h.c.image.topic_by_name("t").partitions.values()
        )
        svc.on_committed(writer.next_offset() - 1)
        await settle()
        assert [(b, n) for b, n, _ in heard] == [(1, 51)]
    finally:
        await svc.stop()


async def test_lost_leadership_while_a_fence_is_generated(monkeypatch) -> None:
    monkeypatch.setattr(controller_service, "REPLAY_CHUNK", 8)
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]] * 50)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    before = h.c.image.to_dict()
    svc.note_heartbeat_contact(2, h.c.image.brokers[2].broker_epoch)
    clock.ms = 2_000
    svc.start()
    try:
        for _ in range(2000):  # bounded
            r = svc._replay
            if r is not None and r.more is not None and r.records:
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("the fence never started generating")
        writer.leader = False
        svc.on_lost_leadership()
        assert svc._replay is None and writer.appended == [] and h.c.image.to_dict() == before
    finally:
        await svc.stop()


def test_the_service_is_the_routes_backend_itself() -> None:
    # No adapter between the routes and the service (issue 24): every member of
    # the routes' Protocol is the service's own.
    members = [n for n in vars(ControllerBackend) if not n.startswith("_")]
    assert "submit" in members and "quorum_view" in members
    missing = [n for n in members if not hasattr(ControllerService, n)]
    assert missing == []
