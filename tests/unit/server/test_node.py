"""ControllerNode in process: three nodes on loopback HTTP, hot standbys, snapshots, restart."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import aiohttp
import pytest

from kraft.config import CONTROLLER_KEYS, load_config
from kraft.server import controller_service
from kraft.server import node as node_module
from kraft.server.node import (
    ControllerNode,
    FormatError,
    NodeSettings,
    derive_cluster_id,
    format_or_check,
)
from tests.unit.raft_shell.raft_harness import free_ports

pytestmark = pytest.mark.timeout(90)

FAST = [
    "controller.quorum.election.timeout.ms=150",
    "controller.quorum.fetch.timeout.ms=300",
    "controller.quorum.fetch.max.wait.ms=100",
    "controller.quorum.request.timeout.ms=300",
    "broker.session.timeout.ms=1500",
    "broker.heartbeat.interval.ms=200",
    "metadata.max.idle.interval.ms=100",
]


class Cluster:
    def __init__(self, root, extra: list[str] = ()) -> None:
        ports = free_ports(3)
        self.voters = {i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)}
        self.urls = {i: f"http://127.0.0.1:{p}" for i, (_, p) in self.voters.items()}
        self.root = root
        self.extra = list(extra)
        self.nodes: dict[int, ControllerNode | None] = {1: None, 2: None, 3: None}
        self.cluster_id = derive_cluster_id(self.voters)

    def settings(self, i: int) -> NodeSettings:
        cfg = load_config(CONTROLLER_KEYS, None, FAST + self.extra)
        return NodeSettings(i, self.voters, self.root / f"c{i}", config=cfg)

    async def start(self, i: int) -> ControllerNode:
        node = ControllerNode(self.settings(i))
        await node.start()
        self.nodes[i] = node
        return node

    async def stop(self, i: int) -> None:
        node = self.nodes[i]
        if node is not None:
            await node.stop(2.0)
            self.nodes[i] = None

    async def start_all(self) -> None:
        await asyncio.gather(*(self.start(i) for i in self.nodes))

    async def stop_all(self) -> None:
        for i in self.nodes:
            await self.stop(i)

    async def leader(self, timeout: float = 5.0, exclude: int | None = None) -> ControllerNode:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, n in self.nodes.items():
                if n is not None and i != exclude and n.controller.active:
                    return n
            await asyncio.sleep(0.01)
        raise AssertionError("no active controller")


async def call(session, method, url, body=None):
    async with session.request(method, url, json=body) as r:
        return r.status, await r.json(content_type=None)


def snapshotting(bytes_between: int) -> list[str]:
    """Overrides: a snapshot every `bytes_between` record bytes, no log kept behind
    the snapshots, and small segments so that the log is trimmed."""
    return [
        f"metadata.log.max.record.bytes.between.snapshots={bytes_between}",
        "metadata.max.retention.bytes=0",
        "metadata.log.segment.bytes=4096",
    ]


async def register(session, url: str, broker_id: int, cluster_id: str) -> dict:
    """Registers `broker_id` at the controller at `url`; the 200 reply's body."""
    st, body = await call(
        session, "POST", url + "/v1/brokers/register", register_body(broker_id, cluster_id)
    )
    assert st == 200, body
    return body


def register_body(broker_id: int, cluster_id: str, incarnation: str | None = None) -> dict:
    return {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": incarnation or str(uuid.uuid4()),
        "listeners": [
            {"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": "PLAINTEXT"}
        ],
        "rack": None,
        "features": [],
    }


def test_format_and_check(tmp_path):
    cid = derive_cluster_id({1: ("h", 1), 2: ("h", 2)})
    assert len(cid) == 22
    assert cid == derive_cluster_id({2: ("h", 2), 1: ("h", 1)})
    assert format_or_check(tmp_path, 1, cid, False) == cid
    text = (tmp_path / "meta.properties").read_text()
    assert f"cluster.id={cid}" in text and "node.id=1" in text
    assert format_or_check(tmp_path, 1, "other", False) == cid  # the directory's id wins
    with pytest.raises(FormatError, match="node 1, not node 2"):
        format_or_check(tmp_path, 2, cid, False)
    with pytest.raises(FormatError, match="cluster"):
        format_or_check(tmp_path, 1, "other", True)


CHUNK = 64  # records replayed per loop pass, small here so that a small topic spans chunks


async def test_standbys_replay_and_followers_redirect(tmp_path, monkeypatch):
    monkeypatch.setattr(controller_service, "REPLAY_CHUNK", CHUNK)
    monkeypatch.setattr(node_module, "REPLAY_CHUNK", CHUNK)
    c = Cluster(tmp_path)
    await c.start_all()
    try:
        leader = await c.leader()
        async with aiohttp.ClientSession() as s:
            lurl = c.urls[leader.node_id]
            epoch = (await register(s, lurl, 10, c.cluster_id))["broker_epoch"]
            st, body = await call(
                s,
                "POST",
                lurl + "/v1/brokers/heartbeat",
                {
                    "broker_id": 10,
                    "broker_epoch": epoch,
                    "current_metadata_offset": 10**6,
                    "want_fence": False,
                    "want_shutdown": False,
                },
            )
            assert st == 200 and body["is_fenced"] is False, body
            st, body = await call(
                s,
                "POST",
                lurl + "/v1/topics",
                {"name": "t", "partitions": 3, "replication_factor": 1},
            )
            assert st == 201, body
            follower = next(i for i in (1, 2, 3) if i != leader.node_id)
            st, body = await call(
                s, "POST", c.urls[follower] + "/v1/topics", {"name": "u", "partitions": 1}
            )
            assert st == 503 and body["error_code"] == "NOT_CONTROLLER"
            assert body["leader_id"] == leader.node_id and body["leader_url"] == lurl
            st, q = await call(s, "GET", c.urls[follower] + "/v1/quorum")
            assert st == 200 and q["state"] == "follower" and q["leader_id"] == leader.node_id
            st, q = await call(s, "GET", lurl + "/v1/quorum")
            assert q["state"] == "leader"
            assert {v["node_id"] for v in q["voters"]} == {1, 2, 3}
            assert all("lag" in v and "last_fetch_timestamp" in v for v in q["voters"])
            # one batch of several chunks: replayed a chunk per loop pass by the active
            # controller and by the standbys
            st, body = await call(
                s,
                "POST",
                lurl + "/v1/topics",
                {"name": "big", "partitions": 5 * CHUNK + 3, "replication_factor": 1},
            )
            assert st == 201, body

        # hot standbys hold the same committed image
        async def same() -> bool:
            offs = [n.controller.image.offset for n in c.nodes.values()]
            return len(set(offs)) == 1

        # The leader appends a NoOp every 100 ms: compare the images at a moment
        # when all three are at one offset (cheap check first; no await between it
        # and the copies, so they are taken at that moment).
        deadline = time.monotonic() + 10
        while not await same() and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        images = {i: n.controller.image.to_dict() for i, n in c.nodes.items()}
        topic_views = {i: sorted(t["name"] for t in d["topics"]) for i, d in images.items()}
        assert all(v == ["big", "t"] for v in topic_views.values()), topic_views
        assert images[1] == images[2] == images[3]
    finally:
        await c.stop_all()


async def test_a_large_change_kills_a_forked_snapshot_writer(tmp_path, monkeypatch):
    """Issue 26: a forked snapshot writer still running while a change too large for
    one batch (a metadata transaction) is under way is killed, and the snapshot is
    due again; without one it writes on."""
    from kraft.server.forked_snapshot import fork_writer

    c = Cluster(tmp_path)
    await c.start_all()
    try:
        leader = await c.leader()
        standby = next(n for n in c.nodes.values() if n is not None and n is not leader)
        standby._fork_snapshots = True
        pid = fork_writer(lambda: time.sleep(30))
        task = asyncio.get_running_loop().create_task(standby._snapshot_child(pid))
        standby._snapshot_task = task
        standby._bytes_since_snapshot = 0
        standby._keep_snapshots_off_large_changes()  # nothing large: it writes on
        await asyncio.sleep(0.05)
        assert not task.done()
        big = standby.service
        monkeypatch.setattr(
            type(big), "in_large_transaction", property(lambda s: s is big), raising=True
        )
        standby._keep_snapshots_off_large_changes()
        assert standby._snapshot_task is None
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # killed and reaped
        assert standby._bytes_since_snapshot >= standby.snapshot_bytes  # due again
    finally:
        await c.stop_all()


async def test_snapshots_trim_and_restart_loads_them(tmp_path):
    c = Cluster(tmp_path, snapshotting(2000))
    await c.start_all()
    try:
        leader = await c.leader()

        def snapshotted() -> bool:
            return all(n.snapshots_written > 0 and n.log.start_offset > 0 for n in c.nodes.values())

        # A node trims a segment only once one of its snapshots covers the whole
        # segment, and each node snapshots at its own offsets: one whose snapshots
        # fell just short of a segment's end trims at its next one. So records
        # keep coming (a registration every 0.1 s) until every node has trimmed,
        # instead of waiting ~30 s for NoOps to fill the next snapshot.
        b = 10
        deadline = time.monotonic() + 20
        async with aiohttp.ClientSession() as s:
            lurl = c.urls[leader.node_id]
            while b < 20 or not snapshotted():
                assert time.monotonic() < deadline, [
                    (n.snapshots_written, n.log.start_offset) for n in c.nodes.values()
                ]
                await register(s, lurl, b, c.cluster_id)
                b += 1
                if b >= 20:
                    await asyncio.sleep(0.1)
        follower = next(i for i in (1, 2, 3) if i != leader.node_id)
        # every registration above was answered once committed: the leader's
        # committed offset covers them (the follower's own image may not yet)
        committed = c.nodes[leader.node_id].raft.high_watermark - 1
        await c.stop(follower)
        node = await c.start(follower)
        assert node.log.latest_snapshot_id() is not None
        deadline = time.monotonic() + 10
        while node.controller.image.offset < committed:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        after = node.controller.image.to_dict()
        assert sorted(r["broker_id"] for r in after["brokers"]) == list(range(10, b))
    finally:
        await c.stop_all()


async def test_follower_behind_log_start_installs_leaders_snapshot(tmp_path):
    c = Cluster(tmp_path, snapshotting(1500))
    await c.start_all()
    try:
        leader = await c.leader()
        lagger = next(i for i in (1, 2, 3) if i != leader.node_id)
        lagger_end = c.nodes[lagger].log.end_offset
        await c.stop(lagger)
        async with aiohttp.ClientSession() as s:
            lurl = c.urls[leader.node_id]
            b = 10
            deadline = time.monotonic() + 15
            while leader.log.start_offset <= lagger_end:
                assert time.monotonic() < deadline, "the leader never trimmed its log"
                await register(s, lurl, b, c.cluster_id)
                b += 1
        node = await c.start(lagger)
        deadline = time.monotonic() + 10
        while node.controller.image.offset < leader.controller.image.offset - 5:
            assert time.monotonic() < deadline, (
                node.controller.image.offset,
                leader.controller.image.offset,
            )
            await asyncio.sleep(0.02)
        # it got there through the leader's snapshot (its own log never held those offsets)
        assert node.log.start_offset > lagger_end
        assert node.log.latest_snapshot_id() is not None
        theirs = {b["broker_id"] for b in leader.controller.image.to_dict()["brokers"]}
        deadline = time.monotonic() + 5
        while {b["broker_id"] for b in node.controller.image.to_dict()["brokers"]} != theirs:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    finally:
        await c.stop_all()


async def _raw_heartbeat(url: str, body: dict) -> tuple[int, dict]:
    """A heartbeat on a connection of its own, as a broker's heartbeat channel sends it."""
    import msgpack

    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        payload = msgpack.packb(body)
        writer.write(
            b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack"
            b"\r\nAccept: application/msgpack\r\nContent-Length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        return int(head.split()[1]), msgpack.unpackb(await reader.readexactly(length))
    finally:
        writer.close()


@pytest.mark.parametrize("front", [True, False])
async def test_heartbeats_on_their_own_connection_go_through_the_front(tmp_path, front):
    extra = [] if front else ["controller.heartbeat.front.enable=false"]
    c = Cluster(tmp_path, extra)
    await c.start_all()
    try:
        leader = await c.leader()
        lurl = c.urls[leader.node_id]
        async with aiohttp.ClientSession() as s:
            reg = await register(s, lurl, 7, c.cluster_id)
        hb = {"broker_id": 7, "broker_epoch": reg["broker_epoch"], "current_metadata_offset": 0}
        status, body = await _raw_heartbeat(lurl, hb)
        assert status == 200 and body["is_fenced"] is True, body
        status, body = await _raw_heartbeat(lurl, {**hb, "broker_epoch": 1})
        assert (status, body["error_code"]) == (409, "STALE_BROKER_EPOCH"), body
        other = next(u for i, u in c.urls.items() if i != leader.node_id)
        status, body = await _raw_heartbeat(other, hb)
        assert body["error_code"] == "NOT_CONTROLLER" and body["leader_id"] == leader.node_id
        fronts = leader.heartbeat_fronts
        if front:
            assert fronts is not None and fronts.answered == 2
        else:
            assert fronts is None
    finally:
        await c.stop_all()
