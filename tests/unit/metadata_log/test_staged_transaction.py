"""A transaction's partition changes are merged as they arrive and published at its
end (MetadataImage._stage, issue 26): the same image, the same listener calls and
the same undo journal as applying each record at the end, one by one.

The reference is the first implementation of the rule: the transaction's records
replayed one at a time outside any transaction (what the end record applies).
Seeded cases mix repeated changes of one partition, records that stage nothing,
records that stop staging (a partition or topic record), a change the end must
refuse, stepped ends, reverts inside the transaction and of its end.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from metadata_log.image import MetadataImage, MetadataReplayError, PartitionRegistration
from metadata_log.records import (
    TOPIC_RESOURCE,
    BeginTransactionRecord,
    ConfigRecord,
    EndTransactionRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)

BROKERS = (1, 2, 3, 4, 5)
TOPICS = ("A", "B", "C")


class Calls:
    """A partition listener that records every call (values, in order)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, Any, Any]] = []

    def partition_changed(
        self,
        topic_id: str,
        partition_id: int,
        old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        self.calls.append((topic_id, partition_id, old, new))


class Batched(Calls):
    """A listener that also hears a slice of changes at once (as the controller's
    index does): the calls, flattened, must be the one-by-one calls."""

    def __init__(self) -> None:
        super().__init__()
        self.slices = 0

    def partitions_changed(self, changes: list[tuple[str, int, Any, Any]]) -> None:
        keys = [(c[0], c[1]) for c in changes]
        assert len(set(keys)) == len(keys), "a slice names a partition twice"
        self.slices += 1
        self.calls.extend(changes)


def base_records(rng: random.Random) -> list[Any]:
    out: list[Any] = [RegisterBrokerRecord(b, f"i{b}", 10 + b, fenced=False) for b in BROKERS]
    for tid in TOPICS:
        out.append(TopicRecord(f"t-{tid}", tid))
        for p in range(8):
            r = tuple(rng.sample(BROKERS, 3))
            out.append(PartitionRecord(tid, p, r, r, leader=r[0]))
    return out


def image_of(
    records: list[Any], journal: bool, batched: bool = False
) -> tuple[MetadataImage, Calls]:
    image = MetadataImage()
    for off, rec in enumerate(records):
        image.replay(rec, off)
    calls = Batched() if batched else Calls()
    image.listener = calls
    if journal:
        image.enable_journal()
    return image, calls


def a_change(rng: random.Random, tid: str, pid: int) -> PartitionChangeRecord:
    isr = tuple(sorted(rng.sample(BROKERS, rng.randint(1, 3))))
    return PartitionChangeRecord(
        tid,
        pid,
        isr=isr if rng.random() < 0.8 else None,
        leader=rng.choice([-2, -2, -1, *isr]),
        eligible_leader_replicas=(rng.choice(BROKERS),) if rng.random() < 0.2 else None,
        leader_recovery_state=rng.choice([-1, -1, -1, 0, 1]),
    )


def txn_body(rng: random.Random, n: int) -> list[Any]:
    """Mostly partition changes (some partitions changed twice or more), with
    records that stage nothing and, in some cases, records that stop staging."""
    out: list[Any] = []
    for _ in range(n):
        x = rng.random()
        if x < 0.85:
            out.append(a_change(rng, rng.choice(TOPICS), rng.randrange(8)))
        elif x < 0.9:
            out.append(NoOpRecord())
        elif x < 0.95:
            out.append(ConfigRecord(TOPIC_RESOURCE, "t-A", "k", str(rng.random())))
        elif rng.random() < 0.5:
            # replaces a partition the transaction may have changed already
            tid, pid = rng.choice(TOPICS), rng.randrange(8)
            r = tuple(rng.sample(BROKERS, 3))
            out.append(PartitionRecord(tid, pid, r, r, leader=r[1], leader_epoch=7))
        else:
            out.append(FenceBrokerRecord(5, 15))
    return out


def reference(base: list[Any], begin: int, body: list[Any], journal: bool) -> Any:
    """The body replayed record by record at its offsets, outside a transaction."""
    image, calls = image_of(base, journal)
    image.replay(NoOpRecord(), begin)
    for k, rec in enumerate(body):
        image.replay(rec, begin + 1 + k)
    image.replay(NoOpRecord(), begin + 1 + len(body))
    return image, calls


def staged(
    base: list[Any],
    begin: int,
    body: list[Any],
    journal: bool,
    step: int | None,
    batched: bool = False,
) -> tuple[MetadataImage, Calls]:
    image, calls = image_of(base, journal, batched)
    open_transaction(image, begin, body)
    end = begin + 1 + len(body)
    if step is None:
        image.replay(EndTransactionRecord(), end)
    else:
        for _ in image.replay_in_steps(EndTransactionRecord(), end, step):
            pass
    return image, calls


def open_transaction(image: MetadataImage, begin: int, body: list[Any]) -> None:
    """Begin at `begin`, then the body's records after it (no end)."""
    image.replay(BeginTransactionRecord("t"), begin)
    for k, rec in enumerate(body):
        image.replay(rec, begin + 1 + k)


def same(a: MetadataImage, b: MetadataImage) -> None:
    assert a.to_dict() == b.to_dict()  # field by field, every partition
    assert a == b


@pytest.mark.parametrize("seed", range(40))
def test_a_staged_transaction_equals_its_records_applied_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    base = base_records(rng)
    body = txn_body(rng, rng.randint(1, 60))
    begin = len(base)
    journal = seed % 2 == 0
    want, want_calls = reference(base, begin, body, journal)
    for step, batched in ((None, False), (1, False), (4, True), (1000, True), (None, True)):
        got, got_calls = staged(base, begin, body, journal, step, batched)
        same(got, want)
        assert got_calls.calls == want_calls.calls
        if journal:
            got.revert_to(begin - 1)  # the end and the whole transaction undone
            start, _ = image_of(base, False)
            assert got.to_dict() == start.to_dict() and not got.in_transaction


def test_a_partition_changed_twice_in_a_transaction_merges_from_the_first_change() -> None:
    rng = random.Random(3)
    base = base_records(rng)
    body = [
        PartitionChangeRecord("A", 0, isr=(1, 2), leader=1),
        PartitionChangeRecord("A", 0, leader=2),
        PartitionChangeRecord("A", 0, isr=(2,)),
    ]
    want, _ = reference(base, len(base), body, False)
    got, _ = staged(base, len(base), body, False, None)
    same(got, want)
    p = got.topics["A"].partitions[0]
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((2,), 2, 2, 3)


@pytest.mark.parametrize("seed", range(10))
def test_a_revert_inside_a_staged_transaction_then_new_records_equal_the_kept_ones(
    seed: int,
) -> None:
    rng = random.Random(100 + seed)
    base = base_records(rng)
    begin = len(base)
    body = txn_body(rng, 30)
    image, calls = image_of(base, True)
    open_transaction(image, begin, body)
    keep = rng.randrange(len(body) + 1)
    image.revert_to(begin + keep)  # a new leader truncated the uncommitted rest
    tail = txn_body(rng, 20)
    for k, rec in enumerate(tail):
        image.replay(rec, begin + 1 + keep + k)
    image.replay(EndTransactionRecord(), begin + 1 + keep + len(tail))
    want, want_calls = reference(base, begin, body[:keep] + tail, True)
    same(image, want)
    assert calls.calls == want_calls.calls


def test_a_reverted_end_applied_again_equals_one_end() -> None:
    rng = random.Random(9)
    base = base_records(rng)
    begin = len(base)
    body = txn_body(rng, 40)
    image, _ = image_of(base, True)
    open_transaction(image, begin, body)
    end = begin + 1 + len(body)
    image.replay(EndTransactionRecord(), end)
    image.revert_to(end - 1)  # the end undone: the transaction is open again
    assert image.in_transaction
    image.replay(EndTransactionRecord(), end)
    want, _ = reference(base, begin, body, True)
    same(image, want)


def test_a_change_the_end_refuses_fails_at_its_offset_after_the_ones_before() -> None:
    rng = random.Random(4)
    base = base_records(rng)
    begin = len(base)
    body = [a_change(rng, "A", 1), a_change(rng, "B", 2), PartitionChangeRecord("A", 99)]
    body += [a_change(rng, "C", 3)]
    image, _ = image_of(base, False)
    open_transaction(image, begin, body)
    with pytest.raises(MetadataReplayError, match="unknown partition t-A-99") as e:
        image.replay(EndTransactionRecord(), begin + 1 + len(body))
    assert e.value.offset == begin + 3
    want, _ = image_of(base, False)
    for k, rec in enumerate(body[:2]):
        want.replay(rec, begin + 1 + k)
    assert image.topics["A"].partitions == want.topics["A"].partitions
    assert image.topics["B"].partitions == want.topics["B"].partitions
    assert image.topics["C"].partitions == want.topics["C"].partitions  # not reached


def test_a_copy_of_an_open_transaction_ends_as_the_original() -> None:
    rng = random.Random(12)
    base = base_records(rng)
    begin = len(base)
    body = txn_body(rng, 25)
    image, _ = image_of(base, False)
    open_transaction(image, begin, body)
    other = image.copy()
    end = begin + 1 + len(body)
    image.replay(EndTransactionRecord(), end)
    other.replay(EndTransactionRecord(), end)
    same(image, other)


@pytest.mark.parametrize("seed", range(10))
def test_queueing_a_run_of_records_equals_replaying_them_one_by_one(seed: int) -> None:
    rng = random.Random(200 + seed)
    base = base_records(rng)
    begin = len(base)
    body = txn_body(rng, 50)
    stop_types = frozenset({FenceBrokerRecord})
    one, _ = image_of(base, True)
    run, _ = image_of(base, True)
    for image in (one, run):
        image.replay(BeginTransactionRecord("t"), begin)
    for k, rec in enumerate(body):
        one.replay(rec, begin + 1 + k)
    i = 0
    while i < len(body):  # as QuorumController.replay_batch does
        j = run.queue_in_transaction(body, i, begin + 1, stop_types)
        if j == i:
            assert type(body[i]) in stop_types
            run.replay(body[i], begin + 1 + i)
            j += 1
        i = j
    assert list(run._journal) == list(one._journal)  # type: ignore[arg-type]
    assert run._txn == one._txn and run._txn_new == one._txn_new and run.offset == one.offset
    end = begin + 1 + len(body)
    for image in (one, run):
        image.replay(EndTransactionRecord(), end)
    same(run, one)
    with pytest.raises(MetadataReplayError, match="not after"):
        run.replay(BeginTransactionRecord("u"), end + 1)
        run.queue_in_transaction([NoOpRecord()], 0, end)


def test_queueing_outside_a_transaction_replays_nothing() -> None:
    image, _ = image_of(base_records(random.Random(1)), False)
    offset = image.offset
    assert image.queue_in_transaction([NoOpRecord()], 0, offset + 1) == 0
    assert image.offset == offset
