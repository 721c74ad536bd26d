"""RaftClient over real loopback HTTP: election, commits, listeners, restarts, hand-over."""

from __future__ import annotations

import asyncio
import time

import pytest

from kraft.raft.client import NotLeaderError
from metadata_log.records import NoOpRecord
from tests.unit.server.raft_harness import Quorum

pytestmark = pytest.mark.timeout(60)


async def test_elects_and_commits(tmp_path):
    q = Quorum(tmp_path)
    await q.start()
    try:
        leader = await q.wait_leader()
        last = leader.client.append_records([NoOpRecord(), NoOpRecord()])
        await asyncio.wait_for(leader.client.wait_committed(last), 3)
        # every node's listener gets the same committed batches
        await q.wait(
            lambda: all(
                n.listener.batches and n.listener.batches[-1][1] >= last for n in q.nodes.values()
            ),
            what="all listeners caught up",
        )
        views = [[b for b in n.listener.batches if b[1] <= last] for n in q.nodes.values()]
        assert views[0] == views[1] == views[2]
        assert views[0][0][0] == 0
        # followers refuse writes
        follower = next(n for n in q.nodes.values() if n is not leader)
        with pytest.raises(NotLeaderError):
            follower.client.append_records([NoOpRecord()])
        d = leader.describe()
        assert d["state"] == "leader" and d["leader_id"] == leader.node_id
        assert {v["node_id"] for v in d["voters"]} == {1, 2, 3}
    finally:
        await q.stop()


async def test_many_concurrent_writers(tmp_path):
    q = Quorum(tmp_path)
    await q.start()
    try:
        leader = await q.wait_leader()
        c = leader.client

        async def writer(i: int) -> int:
            n = 0
            for _ in range(50):
                await c.append_and_wait([[NoOpRecord()] * 3])
                n += 3
            return n

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(writer(i) for i in range(20)))
        dt = time.perf_counter() - t0
        assert sum(counts) == 3000
        assert dt < 20
    finally:
        await q.stop()


async def test_crash_and_restart_rejoins(tmp_path):
    q = Quorum(tmp_path)
    await q.start()
    try:
        leader = await q.wait_leader()
        last = leader.client.append_records([NoOpRecord()])
        await leader.client.wait_committed(last)
        old = leader.node_id
        await leader.stop(graceful=False)
        new = await q.wait_leader(exclude=old)
        last2 = new.client.append_records([NoOpRecord()])
        await asyncio.wait_for(new.client.wait_committed(last2), 3)
        await q.nodes[old].start()
        node = q.nodes[old]
        await q.wait(
            lambda: node.listener.batches and node.listener.batches[-1][1] >= last2,
            what="restarted node catches up",
        )
        assert node.client.core.state_name in ("follower",)
        mine = [b for b in node.listener.batches if b[1] <= last2]
        theirs = [b for b in new.listener.batches if b[1] <= last2]
        assert mine == theirs
    finally:
        await q.stop()


async def test_graceful_resign_hands_over_fast(tmp_path):
    q = Quorum(tmp_path)
    await q.start()
    try:
        leader = await q.wait_leader()
        old = leader.node_id
        epoch = leader.client.core.epoch
        t0 = time.monotonic()
        await leader.stop(graceful=True)
        new = await q.wait_leader(exclude=old, timeout=3)
        took = time.monotonic() - t0
        assert new.client.core.epoch > epoch
        # well under a fetch timeout (300 ms) + election
        assert took < 0.6, took
    finally:
        await q.stop()
