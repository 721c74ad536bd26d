"""A wall-clock step is no event: timers, deadlines and sessions run on the monotonic clock.

Three ControllerNodes and a fleet of three broker agents run in this process. The
wall clock (`time.time`) is then stepped an hour forward and an hour back, as an NTP
step or an operator's `date -s` would. Neither may start an election or fence a
broker: Kafka, too, keeps its timers on a monotonic clock.
"""

from __future__ import annotations

import asyncio
import io
import time

import pytest

from broker_agent.agent import AgentSettings
from broker_agent.fleet import Fleet, FleetSpec
from kraft.raft.config import RaftConfig
from tests.unit.server.test_node import Cluster

pytestmark = pytest.mark.timeout(90)

BROKERS = (4, 5, 6)  # ids 1-3 are the controllers'
SESSION_MS = 1500  # test_node.FAST's broker.session.timeout.ms


async def until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


def fast_fleet(cluster: Cluster, brokers: tuple[int, ...]) -> FleetSpec:
    """A fleet of `brokers` (consecutive ids) against an in-process Cluster, on
    test_node.FAST's timings."""
    return FleetSpec(
        first_id=brokers[0],
        count=len(brokers),
        controllers=tuple(cluster.urls.values()),
        settings=AgentSettings(heartbeat_interval_ms=200, request_timeout_ms=750),
        raft=RaftConfig(
            election_timeout_ms=150,
            fetch_timeout_ms=300,
            fetch_max_wait_ms=100,
            request_timeout_ms=300,
        ),
        cluster_id=cluster.cluster_id,
        ramp_ms=0,
        status_interval_s=3600.0,
    )


def _unfenced(node) -> set[int]:
    return {b for b, reg in node.controller.image.brokers.items() if not reg.fenced}


def _views(cluster: Cluster) -> dict[int, tuple[int, int | None]]:
    """Each node's (epoch, leader id)."""
    out = {}
    for i, n in cluster.nodes.items():
        le = n.raft.leader_and_epoch
        out[i] = (le.epoch, le.leader_id)
    return out


@pytest.mark.parametrize("step_s", [3600, -3600])
async def test_a_wall_clock_step_starts_no_election_and_fences_no_broker(
    tmp_path, monkeypatch, step_s
) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start_all()
    fleet = Fleet(fast_fleet(cluster, BROKERS), out=io.StringIO())
    fleet_task = asyncio.create_task(fleet.run())
    try:
        leader = await cluster.leader(timeout=10)
        await until(lambda: _unfenced(leader) == set(BROKERS), 20, "three unfenced brokers")
        # every node has caught up with the same leader before the step
        await until(lambda: len(set(_views(cluster).values())) == 1, 10, "one view of the leader")
        before = _views(cluster)
        fences_before = leader.metrics.fences._value.get()

        real_time = time.time
        monkeypatch.setattr(time, "time", lambda: real_time() + step_s)
        # Two sessions and many election timeouts pass on the monotonic clock.
        await asyncio.sleep(2 * SESSION_MS / 1000)
        # The idle NoOps written meanwhile carry the stepped wall clock: timestamps
        # follow the calendar, timers do not. (The image keeps the largest stamp, so
        # only a forward step shows.)
        if step_s > 0:
            stamp = leader.controller.image.last_append_time_ms
            assert abs(stamp - (real_time() + step_s) * 1000) < 60_000, stamp
        monkeypatch.setattr(time, "time", real_time)
        await asyncio.sleep(2 * SESSION_MS / 1000)

        assert _views(cluster) == before, "the wall-clock step changed the Raft leader or epoch"
        assert leader.controller.active
        assert leader.metrics.fences._value.get() == fences_before, "a broker was fenced"
        for i, n in cluster.nodes.items():
            assert _unfenced(n) == set(BROKERS), f"node {i} sees a fenced broker"
    finally:
        fleet.shutdown()
        try:
            await asyncio.wait_for(fleet_task, 15)
        finally:
            await cluster.stop_all()
