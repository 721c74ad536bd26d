"""RaftClient over real loopback HTTP: election, commits, listeners, restarts, hand-over."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from kraft.raft.errors import NotLeaderError
from kraft.raft.messages import (
    NONE,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.state import ElectionState
from kraft.raft_shell.driver import RaftClient
from kraft.raft_shell.file_log_adapter import FileReplicatedLog, FlushJob
from kraft.raft_shell.transport import TransportError
from metadata_log.records import NoOpRecord
from tests.unit.raft_shell.raft_harness import FAST, Quorum

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


# Followers that would wait a minute for a silent leader before electing themselves.
PATIENT = dataclasses.replace(FAST, fetch_timeout_ms=60_000)


async def test_graceful_resign_hands_over_through_end_quorum_epoch(tmp_path):
    q = Quorum(tmp_path, config=PATIENT)
    await q.start()
    try:
        leader = await q.wait_leader(timeout=30)
        old = leader.node_id
        epoch = leader.client.core.epoch
        await leader.stop(graceful=True)
        # The wait ends far below the fetch timeout, so the new leader was elected
        # because EndQuorumEpoch asked for it, not because the old one fell silent.
        new = await q.wait_leader(exclude=old, timeout=30)
        assert PATIENT.fetch_timeout_ms > 30_000
        assert new.client.core.epoch > epoch
    finally:
        await q.stop()


class _OrderedStore:
    """A quorum-state store that logs each write (slowly: a real fsync takes time)."""

    def __init__(self, events: list[tuple]) -> None:
        self.events = events
        self.state = ElectionState()

    def read(self) -> ElectionState:
        return self.state

    def write(self, state: ElectionState) -> None:
        time.sleep(0.02)  # in the worker thread: nothing may leave meanwhile
        self.events.append(("persist", state))
        self.state = state


class _GrantingPeers:
    """Peers that grant every (pre-)vote and acknowledge everything else; logs each send."""

    def __init__(self, events: list[tuple]) -> None:
        self.events = events

    async def send(self, destination, request, timeout_s):
        if isinstance(request, VoteRequest):
            self.events.append(("send", "pre-vote" if request.pre_vote else "vote"))
            return VoteResponse(
                NONE, True, -1, request.candidate_epoch - request.pre_vote, request.pre_vote
            )
        if isinstance(request, BeginQuorumEpochRequest):
            self.events.append(("send", "begin-quorum-epoch"))
            return BeginQuorumEpochResponse(NONE, request.leader_id, request.leader_epoch)
        await asyncio.sleep(timeout_s)  # fetches etc.: no answer
        raise TransportError("timed out")

    async def close(self) -> None:
        pass


async def test_shell_persists_the_quorum_state_before_sending_what_depends_on_it(tmp_path):
    # A vote grant: the answer leaves only after the quorum-state file holds the vote.
    events: list[tuple] = []
    urls = {1: "http://127.0.0.1:9", 2: "http://127.0.0.1:9", 3: "http://127.0.0.1:9"}
    log = FileReplicatedLog.open(tmp_path / "voter" / "__cluster_metadata-0")
    client = RaftClient(
        2, urls, "c", log, _OrderedStore(events), FAST, transport=_GrantingPeers(events)
    )
    await client.start()
    try:
        resp = await client.handle_inbound(VoteRequest("c", 1, 7, 0, 0))
        events.append(("answered", resp.vote_granted))
        assert events[:2] == [("persist", ElectionState(7, None, 1)), ("answered", True)]
        # A pre-vote grant persists nothing.
        resp = await client.handle_inbound(VoteRequest("c", 3, 9, 0, 0, pre_vote=True))
        assert resp.vote_granted and len([e for e in events if e[0] == "persist"]) == 1
    finally:
        await client.shutdown(0.5)
        log.close()

    # An election: the candidate's own vote is durable before it asks for votes,
    # and its leadership before BeginQuorumEpoch leaves.
    events = []
    log = FileReplicatedLog.open(tmp_path / "candidate" / "__cluster_metadata-0")
    client = RaftClient(
        1, urls, "c", log, _OrderedStore(events), FAST, transport=_GrantingPeers(events)
    )
    await client.start()
    try:
        deadline = time.monotonic() + 5
        while ("send", "begin-quorum-epoch") not in events:
            assert time.monotonic() < deadline, events
            await asyncio.sleep(0.01)
        first_vote = events.index(("send", "vote"))
        first_begin = events.index(("send", "begin-quorum-epoch"))
        assert ("persist", ElectionState(1, None, 1)) in events[:first_vote]
        assert ("persist", ElectionState(1, 1, 1)) in events[first_vote:first_begin]
        # Pre-votes were asked before anything was persisted.
        assert events.index(("send", "pre-vote")) < events.index(
            ("persist", ElectionState(1, None, 1))
        )
    finally:
        await client.shutdown(0.5)
        log.close()


async def test_the_leader_sends_its_fetch_answers_before_its_flush_thread_starts(tmp_path):
    # The flush thread takes the GIL as it starts; answers sent meanwhile waited
    # for it. So the answers an append completes go out first.
    events: list[str] = []

    class TracedJob(FlushJob):
        __slots__ = ()

        def run(self) -> None:
            events.append("flush")
            super().run()

    q = Quorum(tmp_path)
    await q.start()
    try:
        leader = await q.wait_leader()
        c = leader.client
        inner_handle, inner_prepare = c.handle_inbound, c.log.prepare_flush

        async def spy(request):
            resp = await inner_handle(request)
            if isinstance(resp, FetchResponse) and resp.records:
                events.append("answer")
            return resp

        def prepare():
            job = inner_prepare()
            if job is None:
                return None
            return TracedJob(**{f.name: getattr(job, f.name) for f in dataclasses.fields(job)})

        c.handle_inbound, c.log.prepare_flush = spy, prepare
        for _ in range(2):  # the second round's parked fetches all came through the spy
            await q.wait(lambda: len(c.core._purgatory) == 2, what="both followers parked")
            events.clear()
            last = c.append_records([NoOpRecord()])
            await asyncio.wait_for(c.wait_committed(last), 3)
        # The two followers are a majority: the commit need not wait for the
        # leader's own flush, whose thread may start after it on a loaded machine.
        await q.wait(lambda: "flush" in events, what="the leader's flush thread ran")
        assert events[:3] == ["answer", "answer", "flush"], events
    finally:
        await q.stop()


async def test_an_inbound_request_the_core_never_answers_times_out(tmp_path):
    urls = {1: "http://127.0.0.1:9", 2: "http://127.0.0.1:9", 3: "http://127.0.0.1:9"}
    log = FileReplicatedLog.open(tmp_path / "n" / "__cluster_metadata-0")
    client = RaftClient(2, urls, "c", log, _OrderedStore([]), FAST, transport=_GrantingPeers([]))
    await client.start()
    try:
        client._push = lambda item: None  # the request is lost on its way to the core
        t0 = time.monotonic()
        pending = asyncio.ensure_future(client.handle_inbound(VoteRequest("c", 1, 7, 0, 0)))
        # bounded only so that a hang fails the test instead of stalling the suite
        done, _ = await asyncio.wait({pending}, timeout=60)
        assert pending in done, "the unanswered request never timed out"
        with pytest.raises(TimeoutError):
            pending.result()
        assert time.monotonic() - t0 >= FAST.request_timeout_ms / 1000
    finally:
        await client.shutdown(0.5)
        log.close()


async def test_handing_over_a_long_committed_log_lets_the_event_loop_run(tmp_path, monkeypatch):
    # Delivery is chunked so that catching up does not stall the loop: other tasks
    # (the HTTP API, fetch answers) run between the chunks.
    q = Quorum(tmp_path, n=1)
    await q.start()
    node = q.nodes[1]
    try:
        c = (await q.wait_leader()).client
        for _ in range(20):
            await asyncio.wait_for(c.wait_committed(c.append_records([NoOpRecord()])), 3)
    finally:
        await q.stop()
    monkeypatch.setattr("kraft.raft_shell.driver.DELIVERY_CHUNK_BYTES", 1)  # one batch a cycle
    monkeypatch.setattr("kraft.raft_shell.driver.DRIVER_YIELD_AFTER_S", 0.0)  # yield every time
    passes = 0

    async def ticker() -> None:
        nonlocal passes
        while True:
            passes += 1
            await asyncio.sleep(0)

    seen: list[int] = []
    tick = asyncio.create_task(ticker())
    try:
        await node.start()
        inner = node.listener.handle_commit
        node.client.listener.handle_commit = lambda batch: (seen.append(passes), inner(batch))
        await q.wait(lambda: len(seen) >= 20, what="the log handed over again")
        assert all(a < b for a, b in zip(seen, seen[1:], strict=False)), seen
    finally:
        tick.cancel()
        await q.stop()
