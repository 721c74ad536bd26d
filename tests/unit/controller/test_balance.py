"""Automatic preferred-leader balancing (Kafka's maybeBalancePartitionLeaders).

As Kafka's ReplicationControlManagerTest.testBalancePartitionLeaders, in our own
words: a broker that comes back leads nothing until a balancing batch gives its
preferred partitions back; batches are bounded and say when more is left; the
imbalance count (preferredreplicaimbalancecount) is kept by replay and always
equals a scan of the image, also across a failover's revert.
"""

from __future__ import annotations

import random

from kraft.controller.balance import KEYS_PER_BATCH, sorted_keys
from kraft.controller.quorum_controller import ControllerConfig, ControllerResult, QuorumController
from tests.unit.controller.harness import Harness


def scan(c: QuorumController) -> int:
    """The imbalance count the slow way: every partition of the image."""
    return sum(
        1
        for t in c.image.topics.values()
        for p in t.partitions.values()
        if p.leader != p.replicas[0]
    )


def with_batch(h: Harness, n: int) -> None:
    cfg = h.c.config
    h.c.config = ControllerConfig(
        **{**cfg.__dict__, "leader_imbalance_max_elections_per_batch": n}  # type: ignore[arg-type]
    )


def returned(h: Harness, topics: int = 10) -> Harness:
    """Brokers 1-3; topics t0..t{n-1} of one partition each, preferred replica
    cycling 1, 2, 3; broker 1 fenced and unfenced again: it leads nothing."""
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    for i in range(topics):
        r = [1 + (i + k) % 3 for k in range(3)]
        h.create_topic(f"t{i}", [r])
    h.fence(1)
    h.heartbeat(1, 0)  # unfenced: back in no ISR it lost... until its leader adds it
    for i in range(topics):
        p = h.partition(f"t{i}", 0)
        if 1 not in p.isr:
            h.alter_isr(f"t{i}", 0, [*p.isr, 1])
    return h


def test_a_returning_broker_leads_nothing_until_a_balancing_batch() -> None:
    h = returned(Harness(session_timeout_ms=1000))
    led_by_1 = [i for i in range(10) if h.partition(f"t{i}", 0).leader == 1]
    assert led_by_1 == []
    assert h.c.imbalanced_partition_count() == 4  # t0, t3, t6, t9 prefer broker 1
    result = h.apply(h.c.maybe_balance_partition_leaders(0))
    assert result.reply == {"elections": 4, "more": False, "imbalanced": 4}
    assert [i for i in range(10) if h.partition(f"t{i}", 0).leader == 1] == [0, 3, 6, 9]
    assert h.c.imbalanced_partition_count() == 0
    assert h.c.maybe_balance_partition_leaders(0) is None  # nothing imbalanced


def test_batches_are_bounded_and_say_when_more_is_left() -> None:
    h = returned(Harness(session_timeout_ms=1000))
    with_batch(h, 3)
    first = h.apply(h.c.maybe_balance_partition_leaders(0))
    assert (len(first.records), first.reply["more"]) == (3, True)
    assert h.c.imbalanced_partition_count() == 1
    second = h.apply(h.c.maybe_balance_partition_leaders(0))
    assert (len(second.records), second.reply["more"]) == (1, False)
    assert h.c.imbalanced_partition_count() == 0


def test_a_preferred_replica_that_cannot_lead_is_left_alone() -> None:
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    h.fence(1)
    assert h.c.imbalanced_partition_count() == 1
    result = h.c.maybe_balance_partition_leaders(0)
    assert result is not None and result.records == () and not result.reply["more"]
    # the next round looks again: still nothing to do while 1 is fenced
    assert h.c.maybe_balance_partition_leaders(0).records == ()


def test_a_preferred_replica_out_of_the_isr_is_not_elected() -> None:
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("t", [[1, 2]])
    h.fence(1)
    h.heartbeat(1, 0)  # unfenced, but not in the ISR until its leader adds it
    assert h.partition("t", 0).isr == (2,)
    assert h.c.maybe_balance_partition_leaders(0).records == ()
    h.alter_isr("t", 0, [2, 1])
    assert len(h.apply(h.c.maybe_balance_partition_leaders(0)).records) == 1
    assert h.partition("t", 0).leader == 1


def test_balancing_off_does_nothing() -> None:
    h = returned(Harness(session_timeout_ms=1000))
    cfg = h.c.config
    h.c.config = ControllerConfig(**{**cfg.__dict__, "auto_leader_rebalance_enable": False})  # type: ignore[arg-type]
    assert h.c.maybe_balance_partition_leaders(0) is None
    assert h.c.imbalanced_partition_count() == 4  # the metric is still kept


def test_a_batch_looks_at_a_bounded_number_of_partitions() -> None:
    """Many partitions whose preferred replica is fenced: a batch stops after
    KEYS_PER_BATCH of them, says more, and the round ends on a later batch."""
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2):
        h.unfenced_broker(b)
    h.create_topic("big", [[1, 2]] * (KEYS_PER_BATCH + 10))
    h.fence(1)
    first = h.c.maybe_balance_partition_leaders(0)
    assert first.records == () and first.reply["more"]
    second = h.c.maybe_balance_partition_leaders(0)
    assert second.records == () and not second.reply["more"]


def test_the_imbalance_count_is_kept_by_replay_and_equals_a_scan() -> None:
    """A seeded run of fences, unfences, ISR changes, elections, reassignments and
    balancing batches; after each step the count equals a scan of the image, on
    the active controller and on a standby replaying the same log."""
    from kraft.controller.requests import (
        AlterPartitionReassignmentsRequest,
        ElectLeadersRequest,
        ReassignmentTarget,
    )

    rng = random.Random(7)
    h = Harness(session_timeout_ms=1000)
    for b in range(1, 6):
        h.unfenced_broker(b)
    for i in range(6):
        h.create_topic(f"t{i}", [rng.sample(range(1, 6), 3) for _ in range(4)])
    standby = QuorumController(h.config, random.Random(0))
    fed = 0
    for _step in range(300):
        what = rng.random()
        b = rng.randint(1, 5)
        name, pid = f"t{rng.randrange(6)}", rng.randrange(4)
        p = h.partition(name, pid)
        try:
            if what < 0.2 and not h.c.image.brokers[b].fenced:
                h.fence(b)
            elif what < 0.4:
                h.heartbeat(b, 0)
            elif what < 0.6 and p.leader >= 0:
                isr = [r for r in p.replicas if r == p.leader or rng.random() < 0.6]
                isr = [r for r in isr if not h.c.image.brokers[r].fenced or r in p.isr]
                h.alter_isr(name, pid, isr)
            elif what < 0.7:
                h.apply(h.c.elect_leaders(ElectLeadersRequest(name, pid, "preferred"), 0))
            elif what < 0.8:
                target = tuple(rng.sample(range(1, 6), 3))
                req = AlterPartitionReassignmentsRequest((ReassignmentTarget(name, pid, target),))
                h.apply(h.c.alter_partition_reassignments(req, 0))
            else:
                h.apply(h.c.maybe_balance_partition_leaders(0) or ControllerResult(()))
        except Exception as e:  # a refused command writes nothing
            assert type(e).__name__ == "ApiError", e
        assert h.c.imbalanced_partition_count() == scan(h.c)
        for off, rec in h.log[fed:]:
            standby.replay(rec, off)
        fed = len(h.log)
        assert standby.imbalanced_partition_count() == scan(standby) == scan(h.c)
        assert standby.index.reassigning == h.c.index.reassigning


def test_a_failover_revert_restores_the_count() -> None:
    h = returned(Harness(session_timeout_ms=1000))
    committed = h.next_offset - 1
    h.c.on_commit(committed)
    h.apply(h.c.maybe_balance_partition_leaders(0))
    assert h.c.imbalanced_partition_count() == 0
    h.c.deactivate(committed)  # the batch never committed
    assert h.c.imbalanced_partition_count() == 4 == scan(h.c)


def test_sorted_keys_orders_by_topic_then_partition() -> None:
    keys = {("b", 2), ("a", 10), ("b", 0), ("a", 9)}
    assert sorted_keys(keys) == [("a", 9), ("a", 10), ("b", 0), ("b", 2)]
