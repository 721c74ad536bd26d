"""What keeps a slow, stuck or greedy client from exhausting a controller's listener.

- `max.connections`: a connection beyond it is closed as soon as it is accepted
  (logged at most once a second), so peers and brokers that are connected keep
  their service.
- `connections.max.idle.ms`: aiohttp's keep-alive timer closes a connection that is
  idle, or that has not delivered a complete request head, this long after its
  last response (or its start); the body middleware bounds the body's arrival by
  the same time (408 and close); the TLS handshake too.
- `max.request.bytes`: aiohttp's client_max_size; the body middleware turns it
  into 413 REQUEST_TOO_LARGE for every route, JSON and msgpack alike.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from kraft.server.heartbeat_front import HeartbeatFronts

log = logging.getLogger("kraft.server.limits")


class _Refused(asyncio.Protocol):
    """A connection over max.connections: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class GuardedSite(web.BaseSite):
    """TCPSite with a connection limit and a bounded TLS handshake."""

    __slots__ = (
        "_host",
        "_port",
        "_max_connections",
        "_handshake_timeout_s",
        "_last_refusal_log",
        "_fronts",
    )

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 1000,
        handshake_timeout_s: float = 10.0,
        backlog: int = 128,
        fronts: HeartbeatFronts | None = None,
    ) -> None:
        """`fronts`, if given (kraft.server.heartbeat_front.HeartbeatFronts), makes
        each new connection's protocol; it hands non-heartbeat connections to aiohttp."""
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._fronts = fronts
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._handshake_timeout_s = handshake_timeout_s
        self._last_refusal_log = 0.0

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    def _factory(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        fronts = self._fronts
        open_fronts = len(fronts.open) if fronts is not None else 0
        if len(server.connections) + open_fronts >= self._max_connections:
            now = time.monotonic()
            if now - self._last_refusal_log >= 1.0:
                self._last_refusal_log = now
                log.warning(
                    "connection refused: max.connections (%d) reached",
                    self._max_connections,
                    extra={"event": "connection_refused", "max_connections": self._max_connections},
                )
            return _Refused()
        return fronts() if fronts is not None else server()

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        kwargs: dict[str, Any] = {}
        if self._ssl_context is not None:
            kwargs["ssl_handshake_timeout"] = self._handshake_timeout_s
        self._server = await loop.create_server(
            self._factory,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            **kwargs,
        )

    async def stop(self) -> None:
        await super().stop()
        if self._fronts is not None:
            self._fronts.close_all()


def body_middleware(read_timeout_s: float) -> Any:
    """Read every body up front: at most max.request.bytes (413), within the idle
    bound (408 and close). Handlers then read the cached body."""
    from kraft.server.http_codec import too_large

    @web.middleware
    async def read_body_first(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.body_exists:
            try:
                async with asyncio.timeout(read_timeout_s):  # no extra task per request
                    await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise too_large(request) from None
            except TimeoutError:
                resp = web.Response(
                    status=408,
                    text=json.dumps(
                        {
                            "error_code": "REQUEST_TIMED_OUT",
                            "message": f"the request body did not arrive within {read_timeout_s:g} s",
                        }
                    ),
                    content_type="application/json",
                )
                # Answer, then close at once: aiohttp would otherwise linger reading
                # the rest of a body that is not coming.
                await resp.prepare(request)
                await resp.write_eof()
                if request.transport is not None:
                    request.transport.close()
                return resp
        return await handler(request)

    return read_body_first
