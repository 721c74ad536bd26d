"""HeartbeatChannel: a fleet's heartbeats over lean pipelined HTTP/1.1 connections.

Why: one fleet process plays 10,000 brokers, 5,000 heartbeats a second at Kafka's
default 2 s interval, and aiohttp's client machinery (request and response
objects, a timeout context and a task per request) was most of the fleet's CPU:
a 10,000-agent storm held the fleet at a full core with ~2,500 heartbeats/s
answered, so a third of the agents never got their turn. The controllers answer
heartbeat-only connections in a lean front (kraft/server/heartbeat_front.py),
which answers pipelined requests in order; this is its client side: each
connection writes a prebuilt request head plus the msgpack body and parses the
answers' status line, Content-Length and body, in order.

Bounds: a request waits at most `timeout_ms` for its answer; past it the
connection is closed and every request on it fails with TimeoutError (its
answers can no longer be matched to requests). A connect is bounded the same
way. A refused connect, a reset or an answer the channel cannot frame fail the
requests with OSError (the agent counts both as NETWORK). At most `connections`
connections per controller; a request takes the one with the fewest waiting.

Plaintext without credentials only: a fleet whose agents each present their own
credential or client certificate (issue 8) sends its heartbeats through aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import msgpack

HEARTBEAT_PATH = "/v1/brokers/heartbeat"
MSGPACK = "application/msgpack"
MAX_HEAD_BYTES = 8192


def decode_body(raw: bytes) -> Any:
    """An answer's body: {} if empty, None if neither msgpack nor JSON (an error
    page, garbage): the agent's one decoding rule, aiohttp's answers and ours."""
    if not raw:
        return {}
    try:
        return msgpack.unpackb(raw, raw=False)
    except Exception:  # noqa: BLE001 - msgpack raises several types; an error page may be JSON
        pass
    try:
        return json.loads(raw)
    except ValueError:  # UnicodeDecodeError is one
        return None


class ChannelError(OSError):
    """The connection failed or sent something that is not an HTTP/1.1 answer."""


class _Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        # (future of (status, body bytes), deadline in loop time), in request order
        self._pending: deque[tuple[asyncio.Future[tuple[int, bytes]], float]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ChannelError(f"connection lost: {exc or 'closed by the controller'}"))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while self._pending:
            answer = self._parse()
            if answer is None:
                break
            fut, _ = self._pending.popleft()
            if not fut.done():
                fut.set_result(answer)
            self._arm()
        if self._buf and not self._pending and not self.closed:
            self._fail(ChannelError("an answer nobody asked for"))

    # ------------------------------------------------------------ requests

    def send(self, data: bytes, timeout_s: float) -> asyncio.Future[tuple[int, bytes]]:
        fut: asyncio.Future[tuple[int, bytes]] = self.loop.create_future()
        if self.closed or self.transport is None:
            fut.set_exception(ChannelError("connection closed"))
            return fut
        self._pending.append((fut, self.loop.time() + timeout_s))
        self.transport.write(data)
        if len(self._pending) == 1:
            self._arm()
        return fut

    def _arm(self) -> None:
        """One timer, at the oldest waiting request's deadline."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending:
            self._timer = self.loop.call_at(self._pending[0][1], self._expired)

    def _expired(self) -> None:
        self._timer = None
        if self._pending and self._pending[0][1] <= self.loop.time():
            self._fail(TimeoutError("no answer in time"))
        else:
            self._arm()

    def _fail(self, exc: Exception) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.closed = True
        while self._pending:
            fut, _ = self._pending.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def _parse(self) -> tuple[int, bytes] | None:
        """The next complete answer in the buffer, or None if it is not all here.
        Raises nothing: an answer that cannot be framed closes the connection."""
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._fail(ChannelError("answer head too long"))
            return None
        lines = bytes(buf[:end]).split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        length: int | None = None
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value) if value.strip().isdigit() else None
            elif name == b"connection":
                close = value.strip().lower() == b"close"
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1.") or length is None:
            self._fail(ChannelError(f"cannot frame the answer {lines[0][:80]!r}"))
            return None
        if not status_line[1].isdigit():
            self._fail(ChannelError(f"bad status line {lines[0][:80]!r}"))
            return None
        start = end + 4
        if len(buf) < start + length:
            return None
        body = bytes(buf[start : start + length])
        del buf[: start + length]
        if close:
            self.closed = True  # answered; later requests go to a new connection
            if self.transport is not None:
                self.transport.close()
        return int(status_line[1]), body


class HeartbeatChannel:
    """Heartbeats to the controllers over at most `connections` connections each."""

    def __init__(self, connections: int) -> None:
        self.connections = max(1, connections)
        self._pools: dict[tuple[str, int], list[_Connection]] = {}
        self._connecting: dict[tuple[str, int], list[asyncio.Future[_Connection]]] = {}
        self._heads: dict[tuple[str, int], bytes] = {}
        self.sent = 0
        self.connects = 0

    async def post(self, url: str, body: Any, timeout_ms: int) -> tuple[int, Any]:
        """POST a heartbeat body to the controller at `url` (its base URL);
        (status, decoded body) as broker_agent.agent.post_msgpack."""
        key = _address(url)
        timeout_s = timeout_ms / 1000
        payload = msgpack.packb(body, use_bin_type=True)
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = (
                f"POST {HEARTBEAT_PATH} HTTP/1.1\r\nHost: {key[0]}:{key[1]}\r\n"
                f"Content-Type: {MSGPACK}\r\nAccept: {MSGPACK}\r\n"
                f"Content-Length: "
            ).encode()
        async with asyncio.timeout(timeout_s):
            conn = await self._connection(key)
        fut = conn.send(head + str(len(payload)).encode() + b"\r\n\r\n" + payload, timeout_s)
        self.sent += 1
        status, raw = await fut
        return status, decode_body(raw)

    async def _connection(self, key: tuple[str, int]) -> _Connection:
        pool = self._pools.setdefault(key, [])
        if any(c.closed for c in pool):
            pool[:] = [c for c in pool if not c.closed]
        best = min(pool, key=lambda c: c.waiting, default=None)
        connecting = self._connecting.setdefault(key, [])
        if best is not None and (
            best.waiting == 0 or len(pool) + len(connecting) >= self.connections
        ):
            return best
        if len(pool) + len(connecting) >= self.connections:
            return await asyncio.shield(connecting[0])  # every slot is still connecting
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_Connection] = loop.create_future()
        connecting.append(fut)
        self.connects += 1
        try:
            _, conn = await loop.create_connection(lambda: _Connection(loop), key[0], key[1])
        except BaseException as e:
            fut.set_exception(ChannelError(f"connect to {key[0]}:{key[1]}: {e}"))
            fut.exception()  # retrieved: the waiters (if any) get it too
            raise
        finally:
            connecting.remove(fut)
        pool.append(conn)
        fut.set_result(conn)
        return conn

    def close(self) -> None:
        for pool in self._pools.values():
            for c in pool:
                with contextlib.suppress(Exception):
                    c._fail(ChannelError("channel closed"))
        self._pools.clear()


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"no host in {url!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
