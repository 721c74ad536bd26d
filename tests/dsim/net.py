"""SimNetwork: the simulated wire between the nodes and the simulation's clients.

`SimTransport` is what RaftClient gets instead of HttpTransport: the same
`send(destination, request, timeout_s)` contract (the peer's RaftResponse or
TransportError), with every message through the real wire codec (msgpack via
kraft.raft_shell.transport.encode/decode), a seeded delay each way, drops and slow
paths (reordering), partitions (a cut link hangs until the timeout, as a lost
packet does) and dead peers (connection refused, or a timeout). The request is
handed to the live incarnation of the peer's RaftClient (`handle_inbound`, what
the /raft routes call).

`call` is the same for the brokers' and the admin's requests to a controller:
the command runs on the node, in a task owned by that node (a crash kills it).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kraft.raft.messages import RaftRequest, RaftResponse
from kraft.raft_shell.driver import RaftFatalError
from kraft.raft_shell.transport import TransportError, decode, encode
from tests.dsim.loop import OWNER


@dataclass
class NetParams:
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    drop: float = 0.0
    slow: float = 0.0
    slow_max_ms: int = 300
    refused: float = 0.7  # a dead peer refuses at once with this chance, else times out


class SimNetwork:
    def __init__(self, rng: random.Random, params: NetParams) -> None:
        self.rng = rng
        self.p = params
        self.nodes: dict[int, Any] = {}  # node id -> its live incarnation (None: down)
        self.cut: set[tuple[int, int]] = set()  # (src, dst) links that lose everything
        self.stats: dict[str, int] = {}

    def _count(self, k: str) -> None:
        self.stats[k] = self.stats.get(k, 0) + 1

    def delay_s(self) -> float | None:
        """One way's delay in seconds, or None when the message is lost."""
        p = self.p
        if p.drop and self.rng.random() < p.drop:
            self._count("drop")
            return None
        ms = self.rng.randint(p.min_delay_ms, p.max_delay_ms)
        if p.slow and self.rng.random() < p.slow:
            self._count("slow")
            ms += self.rng.randint(0, p.slow_max_ms)
        return ms / 1000

    async def _hop(self, src: int, dst: int) -> None:
        """One way: waits its delay, or forever (the caller's timeout ends it)."""
        d = None if (src, dst) in self.cut else self.delay_s()
        if d is None:
            await asyncio.Future()  # lost: never answered
        await asyncio.sleep(d)

    async def call(
        self, src: int, dst: int, run: Callable[[Any], Awaitable[Any]], timeout_s: float
    ) -> Any:
        """Run `run(node)` on node `dst` as a request from `src`; ConnectionError when
        refused or lost (after the timeout)."""
        try:
            return await asyncio.wait_for(self._call(src, dst, run), timeout_s)
        except TimeoutError:
            raise ConnectionError(f"{src}->{dst}: timed out") from None

    async def _call(self, src: int, dst: int, run: Callable[[Any], Awaitable[Any]]) -> Any:
        await self._hop(src, dst)
        node = self.nodes.get(dst)
        if node is None:
            if self.rng.random() < self.p.refused:
                raise ConnectionError(f"{src}->{dst}: refused")
            await asyncio.Future()
        ctx = contextvars.copy_context()
        ctx.run(OWNER.set, dst)
        task = asyncio.get_running_loop().create_task(run(node), context=ctx)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and not asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise ConnectionError(f"{src}->{dst}: the peer died") from None
            raise
        await self._hop(dst, src)
        return result


class SimTransport:
    """RaftClient's transport for node `src` (HttpTransport's contract)."""

    def __init__(self, net: SimNetwork, src: int) -> None:
        self.net = net
        self.src = src
        self.peers: dict[int, str] = {}

    async def send(self, destination: int, request: RaftRequest, timeout_s: float) -> RaftResponse:
        wire = encode(request)

        async def run(node: Any) -> bytes:
            try:
                resp = await node.raft.handle_inbound(decode(wire))
            except RaftFatalError as e:
                raise ConnectionError(str(e)) from None
            except TimeoutError:
                return b""  # the route's timeout: an HTTP error without a Raft body
            return encode(resp)

        try:
            body = await self.net.call(self.src, destination, run, timeout_s)
        except ConnectionError as e:
            raise TransportError(str(e)) from None
        if not body:
            raise TransportError(f"{self.src}->{destination}: no Raft body")
        msg = decode(body)
        return msg  # type: ignore[return-value]

    async def close(self) -> None:
        pass
