"""controller_bench's load generator follows the leader per connection (issue 25).

The generator once moved every connection to another controller when any one
failed, so each eviction of one mTLS connection sent all 10,000 brokers through the
handshake line again. Two fake controllers on 127.0.0.1 (asyncio servers that
speak just enough HTTP/1.1): A answers NOT_CONTROLLER naming B; B answers 200 but
drops broker 3's connection once. Every connection must follow the hint to B, and
only broker 3's connection may move again after its failure (with a backoff)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import msgpack

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "controller_bench.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("controller_bench_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class FakeController:
    """Answers heartbeats; records, per accepted connection, the brokers it carried."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer  # (broker_id, connection index) -> (status, body) | None
        self.connections: list[list[int]] = []
        self.server: asyncio.AbstractServer | None = None
        self.accepted_at: list[float] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        carried: list[int] = []
        self.connections.append(carried)
        self.accepted_at.append(time.monotonic())
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = msgpack.unpackb(await r.readexactly(length))
                carried.append(body["broker_id"])
                reply = self.answer(body["broker_id"], len(self.connections))
                if reply is None:  # drop the connection, no answer
                    w.transport.abort()
                    return
                status, payload = reply
                data = msgpack.packb(payload)
                w.write(
                    f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            w.close()


async def test_one_failed_connection_moves_alone_and_hints_are_followed() -> None:
    bench = _bench()
    dropped: list[float] = []

    def leader(bid: int, _conn: int) -> tuple[int, dict[str, Any]] | None:
        if bid == 3 and not dropped:
            dropped.append(time.monotonic())
            return None
        return 200, {"error_code": "NONE"}

    a = FakeController(lambda bid, _c: (503, {"error_code": "NOT_CONTROLLER", "leader_id": 2}))
    b = FakeController(leader)
    urls = {1: await a.start(), 2: await b.start()}
    brokers = bench.Brokers(None, urls[1], "c", 0.2, urls=urls)
    brokers.epochs = {bid: 1 for bid in range(4)}
    tasks = [asyncio.create_task(brokers.connection_loop(k, [0, 1, 2, 3], 4)) for k in range(4)]
    try:

        def served_after_drop() -> set[int]:
            return {bid for conn in b.connections[4:] for bid in conn}

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            dropped and 3 in served_after_drop() and len(brokers.last_ok) == 4
        ):
            await asyncio.sleep(0.05)
    finally:
        brokers.stop = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in (a, b):
            assert c.server is not None
            c.server.close()
    assert dropped and 3 in served_after_drop(), "broker 3 never came back"
    # every connection started at A and followed its hint to B once
    assert sorted(conn[0] for conn in a.connections[:4]) == [0, 1, 2, 3]
    at_b = [conn[0] for conn in b.connections]
    for bid in (0, 1, 2):  # untouched by broker 3's failure: one connection each
        assert at_b.count(bid) == 1, b.connections
    # broker 3 alone moved on (to A, the next), was sent back by the hint, and waited
    # its backoff (100 ms -20%) before reconnecting
    assert at_b.count(3) == 2 and [c[0] for c in a.connections[4:]] == [3]
    assert a.accepted_at[4] - dropped[0] >= 0.08
    assert brokers.error_codes["connection"] == 1
