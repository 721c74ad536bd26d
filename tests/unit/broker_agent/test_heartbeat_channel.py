"""HeartbeatChannel against a raw HTTP/1.1 server on 127.0.0.1 whose answers each
test scripts: pipelined answers matched in order, the connection bound, timeouts,
resets and answers that cannot be framed (all OSError or TimeoutError, which the
agent counts as NETWORK)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest

from broker_agent.heartbeat_channel import ChannelError, HeartbeatChannel
from kraft.local.cluster import free_ports

Answer = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    url: str = ""
    connections: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    heads: list[bytes] = field(default_factory=list)
    answer: Answer | None = None


def reply(body: dict[str, Any], status: int = 200) -> bytes:
    raw = msgpack.packb(body)
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/msgpack\r\n"
        f"Content-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


async def echo(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
    w.write(reply({"echo": req["broker_id"]}))


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server(answer=echo)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        srv.connections += 1
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                srv.heads.append(head)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                req = msgpack.unpackb(await r.readexactly(length))
                srv.requests.append(req)
                assert srv.answer is not None
                await srv.answer(req, w)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    s = await asyncio.start_server(handle, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}"
    try:
        yield srv
    finally:
        s.close()


async def test_pipelined_answers_are_matched_to_requests_in_order(server: Server) -> None:
    held: list[tuple[dict[str, Any], asyncio.StreamWriter]] = []

    async def batch(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
        held.append((req, w))
        if len(held) == 5:  # all five are on the one connection: answer them in one write
            w.write(b"".join(reply({"echo": r["broker_id"]}) for r, _ in held))

    server.answer = batch
    ch = HeartbeatChannel(1)
    results = await asyncio.wait_for(
        asyncio.gather(*(ch.post(server.url, {"broker_id": i}, 2000) for i in range(5))), 5
    )
    assert [body["echo"] for _, body in results] == list(range(5))
    assert server.connections == 1 and ch.sent == 5
    assert server.heads[0].startswith(b"POST /v1/brokers/heartbeat HTTP/1.1\r\n")
    ch.close()


async def test_at_most_the_given_connections_per_controller(server: Server) -> None:
    ch = HeartbeatChannel(3)
    results = await asyncio.wait_for(
        asyncio.gather(*(ch.post(server.url, {"broker_id": i}, 2000) for i in range(40))), 5
    )
    assert sorted(b["echo"] for _, b in results) == list(range(40))
    assert 1 <= server.connections <= 3
    ch.close()


async def test_no_answer_in_time_fails_every_request_on_the_connection(server: Server) -> None:
    async def silent(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
        if req["broker_id"] != "after":
            return  # never answered
        await echo(req, w)

    server.answer = silent
    ch = HeartbeatChannel(1)
    outcomes = await asyncio.wait_for(
        asyncio.gather(
            *(ch.post(server.url, {"broker_id": i}, 200) for i in range(3)),
            return_exceptions=True,
        ),
        5,
    )
    assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes
    # the next request gets a new connection (answers could no longer be matched)
    _, body = await asyncio.wait_for(ch.post(server.url, {"broker_id": "after"}, 2000), 5)
    assert body == {"echo": "after"} and server.connections == 2
    ch.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
        b"x" * 9000,  # no end of head within the limit
    ],
    ids=["chunked", "not-http", "bad-status", "endless-head"],
)
async def test_an_answer_that_cannot_be_framed_is_a_connection_error(
    server: Server, answer: bytes
) -> None:
    async def odd(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
        w.write(answer)

    server.answer = odd
    ch = HeartbeatChannel(1)
    with pytest.raises(ChannelError):
        await asyncio.wait_for(ch.post(server.url, {"broker_id": 1}, 2000), 5)
    ch.close()


async def test_a_reset_fails_the_waiting_requests(server: Server) -> None:
    async def reset(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
        w.transport.abort()

    server.answer = reset
    ch = HeartbeatChannel(1)
    with pytest.raises(OSError):
        await asyncio.wait_for(ch.post(server.url, {"broker_id": 1}, 2000), 5)
    ch.close()


async def test_connection_close_answers_then_reconnects(server: Server) -> None:
    async def close_after(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
        raw = msgpack.packb({"echo": req["broker_id"]})
        w.write(
            f"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )

    server.answer = close_after
    ch = HeartbeatChannel(1)
    for i in range(2):
        _, body = await asyncio.wait_for(ch.post(server.url, {"broker_id": i}, 2000), 5)
        assert body == {"echo": i}
    assert server.connections == 2
    ch.close()


async def test_a_refused_connect_is_an_os_error() -> None:
    (port,) = free_ports(1)  # nothing listens there
    ch = HeartbeatChannel(1)
    with pytest.raises(OSError):
        await asyncio.wait_for(ch.post(f"http://127.0.0.1:{port}", {"broker_id": 1}, 2000), 5)
    ch.close()


async def test_error_answers_and_odd_bodies_decode_as_the_agent_expects(server: Server) -> None:
    bodies = iter(
        [
            reply({"error_code": "NOT_CONTROLLER"}, 503),
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\n\r\n<html",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ]
    )

    async def scripted(req: dict[str, Any], w: asyncio.StreamWriter) -> None:
        w.write(next(bodies))

    server.answer = scripted
    ch = HeartbeatChannel(1)
    got = [await asyncio.wait_for(ch.post(server.url, {"broker_id": 1}, 2000), 5) for _ in range(3)]
    assert got == [(503, {"error_code": "NOT_CONTROLLER"}), (502, None), (200, {})]
    ch.close()
