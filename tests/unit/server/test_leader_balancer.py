"""The controller shell's preferred-leader balancing (auto.leader.rebalance.enable):
every leader.imbalance.check.interval.seconds the active controller elects
preferred leaders in bounded batches through the event queue, each committed
before the next, until the round is done; the task stops with the service."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kraft.controller.quorum_controller import ControllerResult
from kraft.server.controller_service import ControllerService
from metadata_log.records import PartitionChangeRecord
from tests.unit.controller.harness import Harness
from tests.unit.server.test_controller_service import FakeWriter, make

pytestmark = pytest.mark.timeout(30)


def imbalanced_cluster(partitions: int, **config: object) -> Harness:
    """Brokers 1-3 and a topic led by 1 whose preferred replica is 2: the replicas
    reordered (a reassignment that changes only the order moves no leader)."""
    h = Harness()
    h.c.config = dataclasses.replace(h.c.config, **config)  # type: ignore[misc]
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    topic_id = h.create_topic("t", [[1, 2, 3]] * partitions)
    h.apply(
        ControllerResult(
            tuple(PartitionChangeRecord(topic_id, p, replicas=(2, 1, 3)) for p in range(partitions))
        )
    )
    assert h.c.imbalanced_partition_count() == partitions
    return h


async def committing(svc: ControllerService, writer: FakeWriter) -> None:
    """The quorum: commit whatever is appended."""
    while True:
        if writer.committed < writer.next_offset() - 1:
            writer.committed = writer.next_offset() - 1
            svc.on_committed(writer.committed)
        await asyncio.sleep(0.001)


async def run_until(predicate, svc: ControllerService, writer: FakeWriter, limit_s: float) -> bool:  # noqa: ANN001
    commit = asyncio.ensure_future(committing(svc, writer))
    try:
        for _ in range(int(limit_s / 0.01)):
            if predicate():
                return True
            await asyncio.sleep(0.01)
        return predicate()
    finally:
        commit.cancel()


async def test_the_active_controller_gives_every_partition_back_to_its_preferred_leader() -> None:
    h = imbalanced_cluster(
        25,
        leader_imbalance_check_interval_seconds=0.05,
        leader_imbalance_max_elections_per_batch=10,
    )
    svc, writer, _ = make(h, max_idle_interval_ms=0)
    svc.start()
    try:
        done = await run_until(
            lambda: h.c.imbalanced_partition_count() == 0 and svc.balance_batches >= 3,
            svc,
            writer,
            10,
        )
        assert done, (h.c.imbalanced_partition_count(), svc.balance_batches)
        assert all(h.partition("t", p).leader == 2 for p in range(25))
        # bounded batches of at most 10 elections, each its own committed write
        assert max(b - a + 1 for a, b in writer.appended) <= 10
    finally:
        await svc.stop()
    assert svc._balance_task is not None and svc._balance_task.done()


async def test_nothing_is_elected_with_auto_leader_rebalance_off() -> None:
    h = imbalanced_cluster(
        3, auto_leader_rebalance_enable=False, leader_imbalance_check_interval_seconds=0.01
    )
    svc, writer, _ = make(h, max_idle_interval_ms=0)
    svc.start()
    try:
        assert svc._balance_task is None
        await run_until(lambda: False, svc, writer, 0.2)
        assert h.c.imbalanced_partition_count() == 3 and writer.appended == []
    finally:
        await svc.stop()
