"""In-process Raft quorums for shell tests: RaftClients on real loopback HTTP servers.

Each node has its own data directory, aiohttp server and RaftClient, all in the
test's event loop. Nodes can be stopped (gracefully or as a crash: no resign, log
closed without flush) and started again on the same directory and port.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from kraft.local.cluster import free_ports
from kraft.raft.config import RaftConfig
from kraft.raft.state import LeaderAndEpoch
from kraft.raft_shell.driver import CommittedBatch, RaftClient
from kraft.raft_shell.file_log_adapter import FileReplicatedLog
from kraft.raft_shell.quorum_state import QuorumStateFile
from kraft.server.http_codec import error_middleware
from kraft.server.raft_routes import build_raft_routes
from metadata_log.snapshot import SnapshotId

FAST = RaftConfig(
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    fetch_max_wait_ms=100,
    request_timeout_ms=300,
    retry_backoff_ms=20,
)


class RecordingListener:
    """Keeps what the client hands over: committed batches, snapshots, leader changes."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, int, bool, bytes]] = []
        self.snapshots: list[SnapshotId] = []
        self.leaders: list[LeaderAndEpoch] = []

    def handle_load_snapshot(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.snapshots.append(snapshot_id)
        self.batches = [b for b in self.batches if b[1] >= snapshot_id.end_offset]

    def handle_commit(self, batch: CommittedBatch) -> None:
        if self.batches:
            assert batch.base_offset == self.batches[-1][1] + 1, (batch, self.batches[-1])
        raw = batch._buf[batch._pos : batch._pos + batch.header.length]  # noqa: SLF001
        self.batches.append((batch.base_offset, batch.last_offset, batch.epoch, batch.control, raw))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)


class Node:
    def __init__(
        self, node_id: int, root: Path, urls: dict[int, str], port: int, config: RaftConfig
    ):
        self.node_id = node_id
        self.dir = root / f"node-{node_id}"
        self.urls = urls
        self.port = port
        self.config = config
        self.client: RaftClient | None = None
        self.listener = RecordingListener()
        self.runner: web.AppRunner | None = None
        self.log: FileReplicatedLog | None = None

    async def start(self) -> None:
        self.listener = RecordingListener()
        self.log = FileReplicatedLog.open(self.dir / "__cluster_metadata-0")
        self.client = RaftClient(
            self.node_id,
            self.urls,
            "test-cluster",
            self.log,
            QuorumStateFile(self.dir),
            self.config,
            rng=random.Random(self.node_id * 7919 + int(time.time())),
        )
        self.client.register_listener(self.listener)
        app = web.Application(middlewares=[error_middleware])
        app.add_routes(build_raft_routes(self.client))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        await self.client.start()

    async def stop(self, graceful: bool = True) -> None:
        assert self.client is not None and self.runner is not None and self.log is not None
        if graceful:
            await self.client.shutdown(2.0)
        else:
            self.client._stopping = True  # noqa: SLF001 - a crash: no resign
            await self.client.shutdown(0.0)
        await self.runner.cleanup()
        self.log.close(flush=graceful)
        self.client = None

    @property
    def running(self) -> bool:
        return self.client is not None

    def describe(self) -> dict[str, Any]:
        assert self.client is not None
        return self.client.describe()


class Quorum:
    def __init__(self, root: Path, n: int = 3, config: RaftConfig = FAST) -> None:
        ports = free_ports(n)
        self.urls = {i + 1: f"http://127.0.0.1:{p}" for i, p in enumerate(ports)}
        self.nodes = {i + 1: Node(i + 1, root, self.urls, p, config) for i, p in enumerate(ports)}

    async def start(self) -> None:
        await asyncio.gather(*(n.start() for n in self.nodes.values()))

    async def stop(self) -> None:
        for n in self.nodes.values():
            if n.running:
                await n.stop()

    def leader(self) -> Node | None:
        best = None
        for n in self.nodes.values():
            if (
                n.running
                and n.client.is_leader  # type: ignore[union-attr]
                and (best is None or n.client.core.epoch > best.client.core.epoch)  # type: ignore[union-attr]
            ):
                best = n
        return best

    async def wait_leader(self, timeout: float = 5.0, exclude: int | None = None) -> Node:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ld = self.leader()
            if ld is not None and ld.node_id != exclude:
                return ld
            await asyncio.sleep(0.01)
        raise AssertionError("no leader elected in time")

    async def wait(self, fn: Any, timeout: float = 5.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = fn()
            if v:
                return v
            await asyncio.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}")
