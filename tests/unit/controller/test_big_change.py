"""Issue 26: a change of many partitions is replayed in bounded slices everywhere.

- MetadataImage/QuorumController.replay_in_steps equal one replay of the same
  records (a large transaction's end applied a slice at a time, journal and revert
  included), and no slice applies more than twice the step;
- ChunkedReplay (the one mechanism of the active and standby paths) over batches
  that split a transaction: the same image as replaying them at once;
- the fence is one method, its records generated lazily, and what it generates
  equals the builder-based rule on a seeded cluster;
- heartbeat_at_once answers exactly what heartbeat() would, and only when nothing
  changes and nothing uncommitted is read; the service answers such a heartbeat
  while a large write holds its queue.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from kraft.controller.batching import to_batches
from kraft.controller.partition_change import PartitionChangeBuilder, isr_without
from kraft.controller.quorum_controller import ControllerResult, QuorumController
from kraft.controller.requests import BrokerHeartbeatRequest
from kraft.server.chunked_replay import ChunkedReplay
from kraft.server.routes import heartbeat_command
from metadata_log.records import EndTransactionRecord, FenceBrokerRecord, PartitionChangeRecord
from tests.unit.server.test_controller_service import make, settle

from .harness import Harness

pytestmark = pytest.mark.timeout(60)


def cluster(partitions: int = 300, seed: int = 5) -> Harness:
    """Brokers 1-4 unfenced, `partitions` partitions of RF 3 over them (seeded)."""
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2, 3, 4):
        h.unfenced_broker(b)
    rng = random.Random(seed)
    for t in range(3):
        h.create_topic(f"t{t}", [rng.sample([1, 2, 3, 4], 3) for _ in range(partitions // 3)])
    return h


def fence_records(h: Harness, broker: int, now: int) -> list[Any]:
    """The stale `broker`'s fence, drawn to the end (the others heartbeat at `now`)."""
    for b in (1, 2, 3, 4):
        if b != broker:
            h.heartbeat(b, now)
    res = h.c.maybe_fence_stale_broker(now + 1000)
    assert res is not None and res.more is not None and res.records == ()
    return list(res.drained().records)


def test_the_fence_generates_what_the_builder_rule_gives() -> None:
    h = cluster()
    image = h.c.image
    records = fence_records(h, 1, 500)
    assert type(records[-1]) is FenceBrokerRecord and records[-1].id == 1
    want = []
    for topic_id in sorted(image.topics):
        for pid, p in sorted(image.topics[topic_id].partitions.items()):
            if 1 not in p.isr and p.leader != 1:
                continue
            rec = (
                PartitionChangeBuilder(p, topic_id, pid, lambda b: b not in (1,))
                .set_target_isr(isr_without(p.isr, 1))
                .build()
            )
            if rec is not None:
                want.append(rec)
    assert records[:-1] == want and len(want) > 100


def replayed_image(h: Harness, records: list[Any], step: int | None, batch_bytes: int) -> Any:
    """A copy of `h`'s controller replaying `records` as batches (a transaction if
    they exceed one), stepwise when `step` is given; returns (image dict, max slice)."""
    c = QuorumController(h.config, random.Random(1))
    c.replay_batch(0, [r for _, r in h.log])
    plan = to_batches(records, batch_bytes)
    assert len(plan.batches) > 1  # a transaction of several batches
    base = len(h.log)
    biggest = 0
    if step is None:
        c.replay_batch(base, plan.records)
    else:
        r = ChunkedReplay(c, step)
        off = base
        for b in plan.batches:
            r.add(off, plan.records[off - base : off - base + b.record_count], 0, b.record_count)
            off += b.record_count
        work = [0]  # records replayed plus partition changes applied
        real_replay, index = c.replay, c.image.listener

        class Counting:
            def partition_changed(self, *args: Any) -> None:
                work[0] += 1
                index.partition_changed(*args)

        def counting(rec: Any, o: int) -> None:
            work[0] += 1
            real_replay(rec, o)

        c.replay = counting  # type: ignore[method-assign]
        c.image.listener = Counting()
        while True:
            before = work[0]
            done = r.step()
            biggest = max(biggest, work[0] - before)
            if done:
                break
        assert r.idle
    return c.image.to_dict(), biggest


def test_chunked_replay_of_a_transaction_equals_one_replay() -> None:
    h = cluster()
    records = fence_records(h, 2, 500)
    once, _ = replayed_image(h, records, None, 2048)
    stepped, biggest = replayed_image(h, records, 16, 2048)
    assert stepped == once
    # a step replays up to 16 records, or applies 16 of an end's (after up to 15 records)
    assert 0 < biggest <= 2 * 16


def test_stepped_end_reverts_like_a_replayed_one() -> None:
    """The active controller journals; a stepped end reverts to the same state."""
    h = cluster(60)
    c = h.c
    before = c.image.to_dict()
    records = fence_records(h, 3, 500)
    plan = to_batches(records, 512)
    base = len(h.log)
    assert type(plan.records[-1]) is EndTransactionRecord
    steps = c.replay_in_steps(base, plan.records, 0, 4)
    n = sum(1 for _ in steps)
    assert n > 3 and c.image.offset == base + len(plan.records) - 1
    assert not c.image.in_transaction and not c.index.in_isr.get(3)
    c.deactivate(base - 1)
    assert c.image.to_dict() == before and c.index.in_isr.get(3)


def test_replay_refuses_while_an_end_is_applied() -> None:
    h = cluster(60)
    records = fence_records(h, 3, 500)
    plan = to_batches(records, 512)
    base = len(h.log)
    steps = h.c.replay_in_steps(base, plan.records, 0, 4)
    for _ in range(len(plan.records) // 4 + 2):  # into the end record's slices
        next(steps)
    assert h.c.image._applying
    with pytest.raises(Exception, match="transaction's end"):
        h.c.image.replay(EndTransactionRecord(), base + len(plan.records) + 5)
    for _ in steps:
        pass
    assert not h.c.image._applying and not h.c.image.in_transaction


def test_chunked_replay_drops_what_a_snapshot_covers() -> None:
    h = cluster(30)
    r = ChunkedReplay(h.c, 4)
    r.add(100, [PartitionChangeRecord("x", 0)] * 3, 0, 3)
    r.add(103, [PartitionChangeRecord("x", 0)] * 3, 0, 3)
    r.drop_through(102)
    assert len(r) == 1 and r.last_offset == 105
    r.drop_through(105)
    assert r.idle


def standby_batches(
    h: Harness, broker: int
) -> tuple[QuorumController, list[tuple[int, list[Any]]]]:
    """A standby copy of `h`'s controller and `broker`'s fence as committed batches
    (a transaction of several), each (base offset, records)."""
    c = QuorumController(h.config, random.Random(1))
    c.replay_batch(0, [r for _, r in h.log])
    plan = to_batches(fence_records(h, broker, 500), 512)
    out, off = [], len(h.log)
    for b in plan.batches:
        out.append((off, plan.records[off - len(h.log) : off - len(h.log) + b.record_count]))
        off += b.record_count
    assert len(out) > 4 and type(out[-1][1][-1]) is EndTransactionRecord
    return c, out


def test_staging_is_an_open_transaction_within_the_backlog() -> None:
    """`staging` (the standby may pause after the slice): records of an open
    transaction queued, at most `staging_backlog` batches waiting; not a backlog,
    nor the end's slices, nor anything outside a transaction."""
    h = cluster(120)
    c, batches = standby_batches(h, 2)
    r = ChunkedReplay(c, 8, staging_backlog=2)
    assert not r.staging  # no transaction yet
    *body, (end_base, end_recs) = batches
    seen = []
    for base, recs in body:
        r.add(base, recs, 0, len(recs))
    for _ in range(3):  # a backlog: every batch but one waits
        r.step()
        seen.append(r.staging)
    while len(r) > 1:
        r.step()
    r.step()
    seen.append(r.staging)  # caught up, the transaction open
    assert seen[0] is False and seen[-1] is True and c.image.in_transaction
    r.add(end_base, end_recs, 0, len(end_recs))
    applying = []
    while not r.step():
        applying.append((c.image.applying, r.staging))
    assert (True, False) in applying and all(not s for a, s in applying if a)
    assert not c.image.in_transaction and not r.staging


async def test_a_standby_pauses_only_after_staging_slices(monkeypatch) -> None:
    """drain: after a slice staging an open transaction, a pause of about the
    slice's time; after the end's slices only the loop's turns (sleep(0))."""
    from kraft.server import chunked_replay

    h = cluster(120)
    c, batches = standby_batches(h, 3)
    real_sleep = asyncio.sleep
    pauses: list[tuple[float, bool]] = []

    async def sleep(delay: float) -> None:
        pauses.append((delay, c.image.applying))
        await real_sleep(0)

    monkeypatch.setattr(chunked_replay.asyncio, "sleep", sleep)
    r = ChunkedReplay(c, 8)
    for base, recs in batches:
        r.add(base, recs, 0, len(recs))
    await r.drain()
    assert r.idle and not c.image.in_transaction
    staged = [d for d, applying in pauses if d > 0]
    assert staged and all(not applying for d, applying in pauses if d > 0)
    assert any(applying and d == 0 for d, applying in pauses)  # the end: turns only
    r0 = ChunkedReplay(c, 8, staging_pause=0)
    assert r0.staging_pause == 0
    with pytest.raises(ValueError, match="staging_pause"):
        ChunkedReplay(c, 8, staging_pause=-1)


def hb_req(h: Harness, b: int, **kw: Any) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        b,
        h.c.image.brokers[b].broker_epoch,
        kw.get("offset", h.next_offset),
        kw.get("want_fence", False),
        kw.get("want_shutdown", False),
    )


def test_heartbeat_at_once_answers_what_heartbeat_would() -> None:
    h = cluster(30)
    committed = h.next_offset - 1
    for kw in ({}, {"offset": 0}):
        req = hb_req(h, 2, **kw)
        fast = h.c.heartbeat_at_once(req, 700, committed)
        slow = h.c.heartbeat(req, 700)
        assert fast == slow.reply and slow.records == ()
    # anything that changes state, or reads an uncommitted change, goes to the queue
    assert h.c.heartbeat_at_once(hb_req(h, 2, want_shutdown=True), 700, committed) is None
    assert h.c.heartbeat_at_once(hb_req(h, 2, want_fence=True), 700, committed) is None
    assert h.c.heartbeat_at_once(hb_req(h, 2), 700, committed - 100) is None
    fence_records(h, 1, 500)  # decided: soft state fenced, records not replayed
    assert h.c.heartbeat_at_once(hb_req(h, 1), 700, committed) is None


async def test_a_heartbeat_is_answered_while_a_large_fence_holds_the_queue(monkeypatch) -> None:
    from kraft.server import controller_service

    monkeypatch.setattr(controller_service, "REPLAY_CHUNK", 8)
    h = cluster(90)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    for b in (2, 3, 4):
        svc.note_heartbeat_contact(b, h.c.image.brokers[b].broker_epoch)
    clock.ms = 1_000 + 1_000  # broker 1's session (from activation) expires
    svc.start()
    try:
        for _ in range(2000):  # bounded
            if svc._replay is not None:
                break
            await asyncio.sleep(0)
        assert svc._replay is not None
        fut = svc.submit("broker-heartbeat", heartbeat_command(hb_req(h, 2)), priority=True)
        assert fut.done() and fut.result()["is_fenced"] is False
        assert svc._replay is not None  # answered mid-write, not after it
        queued = svc.submit(
            "broker-heartbeat", heartbeat_command(hb_req(h, 2, want_shutdown=True)), priority=True
        )
        assert not queued.done()
        for _ in range(5000):  # bounded
            if svc._replay is None:
                break
            await asyncio.sleep(0)
        svc.on_committed(writer.next_offset() - 1)
        await settle()
        writer.committed = writer.next_offset() - 1
        svc.on_committed(writer.committed)
        await settle()
        assert queued.done() and queued.result()["in_controlled_shutdown"] is True
    finally:
        await svc.stop()


def test_drained_result_keeps_the_reply() -> None:
    r = ControllerResult((), {"x": 1}, more=iter([FenceBrokerRecord(1, 2)]))
    d = r.drained()
    assert d.records == (FenceBrokerRecord(1, 2),) and d.reply == {"x": 1} and d.more is None


class RecordingWriter:
    """FakeWriter keeping the appended payloads (to decode what was written)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.batches: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def append(self, batches: list[Any], now_ms: int) -> int:
        last = self.inner.append(batches, now_ms)
        self.batches += batches
        return last


async def _streamed_fence(monkeypatch, lose_at_append: int | None) -> tuple[Harness, Any, Any]:
    from kraft.server import controller_service

    monkeypatch.setattr(controller_service, "REPLAY_CHUNK", 8)
    h = cluster(150)
    before = h.c.image.to_dict()
    svc, writer, clock = make(h, max_idle_interval_ms=0, max_batch_bytes=400)
    rec = RecordingWriter(writer)
    svc.writer = rec
    for b in (2, 3, 4):
        svc.note_heartbeat_contact(b, h.c.image.brokers[b].broker_epoch)
    clock.ms = 2_000
    svc.start()
    try:
        appends_while_generating = 0
        for _ in range(20_000):  # bounded
            w = svc._replay
            if w is not None and w.more is not None:
                appends_while_generating = len(writer.appended)
                if lose_at_append is not None and len(writer.appended) >= lose_at_append:
                    writer.leader = False
                    svc.on_lost_leadership()
                    break
            if h.c.image.brokers[1].fenced:
                break
            await asyncio.sleep(0)
        assert appends_while_generating >= 2  # full batches went out while generating
        return h, rec, before
    finally:
        await svc.stop()


async def test_a_large_fence_streams_its_transaction(monkeypatch) -> None:
    from metadata_log.batch import decode_records, encode_payload, parse_header
    from metadata_log.records import BeginTransactionRecord

    h, rec, _ = await _streamed_fence(monkeypatch, None)
    written = []
    for b in rec.batches:
        raw = encode_payload(0, 0, 0, b.payload, b.record_count)
        written += decode_records(raw, 0, parse_header(raw, 0, "t", 0), "t")
    assert type(written[0]) is BeginTransactionRecord
    assert type(written[-1]) is EndTransactionRecord
    assert type(written[-2]) is FenceBrokerRecord
    want = cluster(150)
    expected = fence_records(want, 1, 1_500)
    assert written[1:-1] == expected
    want.apply(ControllerResult(tuple(expected)))
    assert h.c.image.state_equals(want.c.image)


async def test_losing_leadership_mid_stream_reverts_to_the_committed_state(monkeypatch) -> None:
    h, _, before = await _streamed_fence(monkeypatch, 2)
    assert not h.c.active and h.c.image.to_dict() == before


async def test_a_standby_read_waits_for_a_transaction_applied_in_slices() -> None:
    h = cluster(60)
    records = fence_records(h, 3, 500)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    svc.on_lost_leadership()  # a standby now
    plan = to_batches(records, 512)
    steps = h.c.replay_in_steps(len(h.log), plan.records, 0, 4)
    while not h.c.image.applying:
        next(steps)
    read = asyncio.ensure_future(svc.read_image(standby=True))
    await settle()
    assert not read.done()  # half of the fence is not shown
    for _ in steps:
        pass
    image = await asyncio.wait_for(read, 1)
    assert image.brokers[3].fenced and not image.applying


def test_the_index_counts_the_offline_partitions_as_the_image_does() -> None:
    """The /metrics gauge reads len(index.leaderless) instead of counting the image."""
    h = cluster(90)
    assert len(h.c.index.leaderless) == h.c.image.offline_partition_count() == 0
    # fenced one by one: a partition's last ISR member stays, leaderless
    for b, now in ((1, 500), (2, 1_000), (3, 1_500)):
        h.apply(ControllerResult(tuple(fence_records(h, b, now))))
    offline = h.c.image.offline_partition_count()
    assert offline > 0 and len(h.c.index.leaderless) == offline


def test_the_fence_yields_turns_while_it_groups_its_keys(monkeypatch) -> None:
    """Grouping two million keys is seconds: the generator yields None (a turn without
    a record) every KEYS_PER_TURN keys, before its first record."""
    from kraft.controller import quorum_controller

    monkeypatch.setattr(quorum_controller, "KEYS_PER_TURN", 8)
    h = cluster(90)
    for b in (2, 3, 4):
        h.heartbeat(b, 500)
    res = h.c.maybe_fence_stale_broker(1_500)
    assert res is not None and res.more is not None
    items = list(res.more)
    first_record = next(i for i, r in enumerate(items) if r is not None)
    keys = len(h.c.index.in_isr[1] | h.c.index.led_by.get(1, set()))
    assert first_record == items.count(None) == keys // 8 > 3


def test_partition_changes_ask_only_of_the_brokers_their_partitions_name(monkeypatch) -> None:
    """Whether a broker may lead is asked once per broker a change meets, not of every
    registered broker: a dict over the whole fleet made each unfence O(brokers), and
    10,000 brokers' unfences held the loop (heartbeat p50 0.3 -> 4-10 ms)."""
    h = cluster(30)
    for b in range(100, 600):  # a fleet that holds no replica
        h.unfenced_broker(b)
    h.heartbeat(1, 0, want_fence=True)
    assert h.c.image.brokers[1].fenced
    asked: list[int] = []
    rule = QuorumController._acceptable

    def counted(self: QuorumController, broker_id: int) -> bool:
        asked.append(broker_id)
        return rule(self, broker_id)

    monkeypatch.setattr(QuorumController, "_acceptable", counted)
    h.heartbeat(1, 10)  # the unfence: elections where broker 1 may lead
    assert not h.c.image.brokers[1].fenced
    assert set(asked) <= {1, 2, 3, 4}
    asked.clear()
    for b in (1, 3, 4, *range(100, 600)):
        h.heartbeat(b, 500)
    fence = h.c.maybe_fence_stale_broker(1_500)  # broker 2: in a third of the ISRs
    assert fence is not None and len(fence.drained().records) > 10
    assert asked and set(asked) <= {1, 3, 4}
    assert len(asked) == len(set(asked))  # once per broker, not per replica


async def test_a_committed_change_is_forgotten_a_bounded_slice_a_loop_turn(monkeypatch) -> None:
    """The undo entries of committed records are dropped JOURNAL_TRIM_PER_TURN a loop
    turn: a million partition changes' entries, dropped at once, held the loop 0.3 s."""
    from kraft.server import controller_service

    monkeypatch.setattr(controller_service, "JOURNAL_TRIM_PER_TURN", 16)
    h = cluster(150)
    records = fence_records(h, 1, 1_500)
    svc, writer, clock = make(h, max_idle_interval_ms=0)
    base = writer.next_offset()
    last = writer.append(to_batches(records).batches, clock())
    h.c.replay_batch(base, records, 0)
    journal = h.c.image._journal
    assert journal is not None and len(journal) > 100
    sizes = [len(journal)]
    writer.committed = last
    svc.on_committed(last)
    svc.on_committed(last)  # a second commit joins the trimming under way
    for _ in range(1_000):  # bounded
        sizes.append(len(journal))
        if not journal:
            break
        await asyncio.sleep(0)
    assert sizes[-1] == 0
    assert max(a - b for a, b in zip(sizes, sizes[1:], strict=False)) <= 16
    assert h.c.image.brokers[1].fenced
    await svc.stop()


def test_a_standby_frees_a_transactions_records_as_it_applies_them() -> None:
    """Without a journal, each applied slice of a transaction's end is let go at
    once (freed whole at the end, a million records held a standby's loop 0.2 s)."""
    h = cluster(60)
    records = fence_records(h, 3, 500)
    h.c.deactivate(h.next_offset - 1)  # a standby: no journal
    plan = to_batches(records, 512)
    steps = h.c.replay_in_steps(h.next_offset, plan.records, 0, 4)
    while not h.c.image.applying:
        next(steps)
    pending = h.c.image._txn  # the first slice is applied
    assert pending is not None and pending[:4] == [None] * 4
    assert all(e is not None for e in pending[4:])
    next(steps)  # a second slice applied
    assert pending[:8] == [None] * 8 and all(e is not None for e in pending[8:])
    for _ in steps:
        pass
    assert h.c.image.brokers[3].fenced and not h.c.image.in_transaction


def test_a_committed_transactions_records_are_freed_a_bounded_slice_a_call() -> None:
    h = cluster(60)
    records = fence_records(h, 3, 500)
    plan = to_batches(records, 512)
    last = h.next_offset + len(plan.records) - 1
    for _ in h.c.replay_in_steps(h.next_offset, plan.records, 0, 4):
        pass
    assert h.c.image.brokers[3].fenced
    journal = h.c.image._journal
    assert journal is not None
    txn = next(e[3] for e in journal if e[2] == "_txn" and e[3])  # the end's records
    sizes = [len(txn)]
    for _ in range(1_000):  # bounded
        done = h.c.on_commit(last, 8)
        sizes.append(len(txn))
        if done:
            break
    assert done and not journal
    # shrunk 8 a call; its last few went with its journal entry
    assert sizes[-1] <= 8 and max(a - b for a, b in zip(sizes, sizes[1:], strict=False)) <= 8


def test_a_commit_during_a_stepped_end_loses_none_of_its_records() -> None:
    """The active controller's commit often passes a large transaction's end while
    the end is still applied in slices: its records are in use, not freed."""
    h = cluster(60)
    records = fence_records(h, 3, 500)
    once, _ = replayed_image(h, records, None, 512)
    plan = to_batches(records, 512)
    last = h.next_offset + len(plan.records) - 1
    steps = h.c.replay_in_steps(h.next_offset, plan.records, 0, 4)
    while not h.c.image.applying:
        next(steps)
    for _ in range(50):
        h.c.on_commit(last, 8)  # committed mid-apply
    for _ in steps:
        h.c.on_commit(last, 8)
    assert h.c.image.to_dict() == once
