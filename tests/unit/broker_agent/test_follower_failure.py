"""A broker fleet whose metadata follower fails stops instead of running on a frozen
image: a Kafka broker whose Raft client fails stops too. Three ControllerNodes and a
fleet of two agents run in this process; the follower is then made to fail on the
next committed batch (a record it cannot replay)."""

from __future__ import annotations

import asyncio
import contextlib
import io

import pytest

from broker_agent.fleet import Fleet
from metadata_log.image import MetadataReplayError
from tests.unit.server.test_clock_step import fast_fleet, until
from tests.unit.server.test_node import Cluster

pytestmark = pytest.mark.timeout(90)

BROKERS = (4, 5)  # ids 1-3 are the controllers'


def _fenced(node) -> set[int]:
    return {b for b, reg in node.controller.image.brokers.items() if reg.fenced}


async def test_a_failed_metadata_follower_shuts_the_brokers_down(tmp_path, caplog) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start_all()
    fleet = Fleet(fast_fleet(cluster, BROKERS), out=io.StringIO())
    fleet_task = asyncio.create_task(fleet.run())
    try:
        leader = await cluster.leader(timeout=10)
        await until(lambda: _fenced(leader) == set() and len(leader.controller.image.brokers) == 2,
                     20, "two unfenced brokers")  # fmt: skip
        follower = fleet.follower
        assert follower is not None
        frozen_at = follower.committed_offset

        def broken(base_offset, records, append_time_ms):
            raise MetadataReplayError(base_offset, "a record this broker cannot replay")

        follower.applier.apply_batch = broken  # the next committed batch (an idle NoOp)
        # The fleet ends by itself: a controlled shutdown of both agents, exit code 1.
        code = await asyncio.wait_for(asyncio.shield(fleet_task), 45)
        assert code == 1
        assert follower.failure is not None and "cannot replay" in follower.failure
        assert follower.committed_offset == frozen_at
        assert any(getattr(r, "event", None) == "follower_stopped" for r in caplog.records)
        # Both stopped through the controller (granted controlled shutdowns fence).
        await until(lambda: _fenced(leader) == set(BROKERS), 10, "both brokers fenced")
        assert all(a.exit_code == 0 for a in fleet.agents), [a.exit_code for a in fleet.agents]
    finally:
        if not fleet_task.done():
            fleet.shutdown()
            fleet.shutdown()  # second signal: do not wait
            with contextlib.suppress(Exception):
                await asyncio.wait_for(fleet_task, 15)
        await cluster.stop_all()
