"""A lean HTTP/1.1 front for broker heartbeats, ahead of aiohttp on the same listener.

Why: a controller must answer 10,000 brokers heartbeating every 2 s (5,000
requests/s) on a share of one core, and aiohttp's request machinery alone costs
75-110 us of CPU per request on the project's 2-core machine
(benchmarks/http_floor.py); the whole heartbeat through aiohttp measured ~230 us,
so one controller topped out near 4,400 heartbeats/s with p99 in the hundreds of
ms. A broker sends its heartbeats over a connection of its own (as Kafka's broker
has a heartbeat channel of its own), so the front answers `POST
/v1/brokers/heartbeat` itself with the route's exact semantics: the same body
decoding, request parsing, contact noted on arrival, command through the event
queue, errors and reply encoding (kraft.server.routes / http_codec).

The first request that is anything else hands the connection, with every byte
buffered so far, to aiohttp's RequestHandler for good: another path or method, a
query string, HTTP/1.0, `Connection` other than keep-alive, chunked bodies,
`Expect`, `Upgrade`, a repeated or malformed header, a head over 8 KiB or a body
over max.request.bytes. aiohttp then answers exactly as it would have. The
heartbeat itself takes the route's own path, one function
(kraft.server.routes.submit_heartbeat): with the authorizer on, the principal
first (401, then the connection closes), then the body, then the broker id's
check (403), then contact noted and the command queued.

Requests on one connection are answered in order: while one waits for its
commit, the next wait in the buffer (reading pauses if they pile up). A connection idle for connections.max.idle.ms (no
complete request since its last reply) is closed, as aiohttp's keep-alive does;
one whose body stalled gets 408 REQUEST_TIMED_OUT first, as the body middleware
answers.
"""

from __future__ import annotations

import asyncio
import http
import logging
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from aiohttp.http import SERVER_SOFTWARE

from kraft.controller.errors import ApiError
from kraft.security.server_security import Authenticator, ServerSecurity
from kraft.server.http_codec import JSON, MSGPACK, decode_body, encode_reply, wants_msgpack
from kraft.server.routes import HEARTBEAT, HEARTBEAT_PATH, ControllerBackend, submit_heartbeat

log = logging.getLogger("kraft.server.heartbeat_front")

PATH = HEARTBEAT_PATH.encode()
MAX_HEAD_BYTES = 8192  # aiohttp's own limit on a request line / header
_SERVER = SERVER_SOFTWARE.encode()
# Headers whose presence means aiohttp must handle the request (framing or upgrade).
_HAND_OVER_HEADERS = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


class _Date:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def __call__(self) -> bytes:
        now = int(time.time())  # timestamp: the HTTP Date header
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True).encode()
        return self._value


class HeartbeatFronts:
    """The open front connections of one listener, closed when it stops. The
    listener (kraft.server.limits.GuardedSite) counts them against its connection
    limits like aiohttp's, from accept until closed, across the hand-over."""

    def __init__(
        self,
        service: ControllerBackend,
        aiohttp_factory: Callable[[], asyncio.BaseProtocol],
        *,
        max_body_bytes: int,
        idle_timeout_s: float,
        security: ServerSecurity | None = None,
    ) -> None:
        self.service = service
        # With the authorizer on: who sends each heartbeat, and may it speak for the broker.
        self.authorizer = security.authorizer if security is not None else None
        self.authenticator = Authenticator(security) if self.authorizer is not None else None
        self.aiohttp_factory = aiohttp_factory
        self.max_body_bytes = max_body_bytes
        self.idle_timeout_s = idle_timeout_s
        self.open: set[HeartbeatFront] = set()
        self.answered = 0  # heartbeats the front answered itself
        self.handed_over = 0  # connections given to aiohttp
        self.date = _Date()

    def __call__(self) -> HeartbeatFront:
        return HeartbeatFront(self)

    def close_all(self) -> None:
        for front in list(self.open):
            front.close()


class HeartbeatFront(asyncio.Protocol):
    """One connection, until it is closed or handed over to aiohttp."""

    def __init__(self, fronts: HeartbeatFronts) -> None:
        self._fronts = fronts
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        # Invariant: at most one request in flight, its future in `_pending`; the
        # requests after it wait in `_buf` (replies go out in request order), and
        # reading pauses only if they pile up past one full request (`_paused`).
        # Reading goes on otherwise, so a client that hangs up is seen at once.
        self._pending: asyncio.Future[Any] | None = None
        self._paused = False
        self._pending_msgpack = False
        self._timeout: asyncio.TimerHandle | None = None
        self._last_reply = self._loop.time()
        self._idle: asyncio.TimerHandle | None = None
        # Complete requests seen: one makes the connection "established" for the
        # listener's limits (never closed to make room for a newcomer).
        self.completed_requests = 0

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._fronts.open.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fronts.open.discard(self)
        self._transport = None
        self._release()
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._pending is None:
            self._serve()
        elif not self._paused and len(self._buf) > MAX_HEAD_BYTES + self._fronts.max_body_bytes:
            assert self._transport is not None
            self._transport.pause_reading()
            self._paused = True

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # ------------------------------------------------------------ requests

    def _serve(self) -> None:
        """Answer every complete request in the buffer, in order, until one waits."""
        buf = self._buf
        while (
            self._pending is None
            and buf
            and self._transport is not None
            and not self._transport.is_closing()
        ):
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._hand_over()
                return
            head = self._heartbeat_head(bytes(buf[:end]))
            if head is None:
                self._hand_over()
                return
            length, content_type, accept, authorization = head
            if length > self._fronts.max_body_bytes:
                self._hand_over()  # aiohttp answers 413 REQUEST_TOO_LARGE
                return
            start = end + 4
            if len(buf) < start + length:
                return  # the rest of the body is on its way
            body = bytes(buf[start : start + length])
            del buf[: start + length]
            self.completed_requests += 1
            self._answer(body, content_type, accept, authorization)

    @staticmethod
    def _heartbeat_head(head: bytes) -> tuple[int, str, str, str | None] | None:
        """(content length, content type, accept, authorization) of a plain heartbeat
        request; None for anything aiohttp should handle."""
        if len(head) > MAX_HEAD_BYTES:
            return None
        lines = head.split(b"\r\n")
        if lines[0] != b"POST " + PATH + b" HTTP/1.1":
            return None
        length: int | None = None
        content_type = accept = ""
        authorization: str | None = None
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                return None  # malformed: aiohttp's 400
            name = name.lower()
            value = value.strip()
            if name == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            elif name == b"content-type":
                # as aiohttp's request.content_type: the media type, lower case
                content_type = value.split(b";", 1)[0].strip().lower().decode("latin-1")
            elif name == b"accept":
                accept = value.decode("latin-1")
            elif name == b"authorization":
                if authorization is not None:
                    return None
                authorization = value.decode("utf-8", "surrogateescape")  # as aiohttp
            elif name == b"connection":
                if value.lower() != b"keep-alive":
                    return None
            elif name in _HAND_OVER_HEADERS:
                return None
        if length is None:
            return None
        return length, content_type, accept, authorization

    def _answer(
        self, body: bytes, content_type: str, accept: str, authorization: str | None
    ) -> None:
        as_msgpack = wants_msgpack(accept, content_type)
        fronts = self._fronts
        service = fronts.service
        refused_credential = False

        def authenticate() -> str | None:
            nonlocal refused_credential
            if fronts.authenticator is None:
                return None
            try:
                return fronts.authenticator.principal(authorization, self._transport)
            except ApiError:
                refused_credential = True
                raise

        try:
            fut = submit_heartbeat(
                service,
                authenticate,
                lambda: decode_body(body, content_type),
                fronts.authorizer,
            )
        except ApiError as e:
            self._reply(e.to_body(), e.status, as_msgpack)
            if refused_credential and self._transport is not None:
                # As Kafka after a failed authentication: answer, then close. A
                # forger must reconnect, and new connections from a host other
                # than the voters' wait for max.connection.creation.rate (issue 25).
                self._transport.close()
            return
        except Exception as e:  # the route would give a 500 too; keep the connection
            log.exception("heartbeat failed", extra={"event": "heartbeat_front_error"})
            self._reply(
                {"error_code": "UNKNOWN_SERVER_ERROR", "message": f"heartbeat failed: {e}"},
                500,
                as_msgpack,
            )
            return
        if fut.done():
            self._finish(fut, as_msgpack)
            return
        # It waits for records pending before it; later requests wait behind it.
        self._pending = fut
        self._pending_msgpack = as_msgpack
        self._timeout = self._loop.call_later(service.reply_timeout_s, self._timed_out)
        fut.add_done_callback(self._committed)

    def _committed(self, fut: asyncio.Future[Any]) -> None:
        if fut is not self._pending:
            return  # timed out or the connection went away
        as_msgpack = self._pending_msgpack
        self._release()
        self._finish(fut, as_msgpack)
        self._resume()

    def _timed_out(self) -> None:
        as_msgpack = self._pending_msgpack
        self._release()
        err = self._fronts.service.timed_out(HEARTBEAT)
        self._reply(err.to_body(), err.status, as_msgpack)
        self._resume()

    def _release(self) -> None:
        if self._pending is not None:
            self._pending.remove_done_callback(self._committed)
            self._pending = None
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None

    def _resume(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            if self._paused:
                self._paused = False
                self._transport.resume_reading()
            self._serve()

    def _finish(self, fut: asyncio.Future[Any], as_msgpack: bool) -> None:
        if fut.cancelled():
            err = self._fronts.service.timed_out(HEARTBEAT)
            self._reply(err.to_body(), err.status, as_msgpack)
            return
        exc = fut.exception()
        if exc is None:
            self._reply(fut.result(), 200, as_msgpack)
        elif isinstance(exc, ApiError):
            self._reply(exc.to_body(), exc.status, as_msgpack)
        else:
            log.error(
                "heartbeat failed: %s",
                exc,
                exc_info=exc,
                extra={"event": "heartbeat_front_error"},
            )
            self._reply(
                {"error_code": "UNKNOWN_SERVER_ERROR", "message": f"heartbeat failed: {exc}"},
                500,
                as_msgpack,
            )

    def _reply(self, body: Any, status: int, as_msgpack: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        payload = encode_reply(body, as_msgpack)
        content_type = MSGPACK if as_msgpack else JSON + "; charset=utf-8"
        head = (
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Date: %s\r\nServer: %s\r\n\r\n"
            % (
                status,
                http.HTTPStatus(status).phrase.encode(),
                content_type.encode(),
                len(payload),
                self._fronts.date(),
                _SERVER,
            )
        )
        transport.write(head + payload)
        self._fronts.answered += 1
        self._last_reply = self._loop.time()

    # ------------------------------------------------------------ hand-over, idle

    def _hand_over(self) -> None:
        """Give the connection and its buffered bytes to aiohttp for good."""
        transport = self._transport
        assert transport is not None and self._pending is None
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self._fronts.open.discard(self)
        self._fronts.handed_over += 1
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._transport = None
        handler = self._fronts.aiohttp_factory()
        wrapper = transport.get_protocol()
        if wrapper is self:
            transport.set_protocol(handler)  # type: ignore[arg-type]
        else:  # the listener's tracking protocol forwards to us: keep it, forward to aiohttp
            wrapper.switch_to(handler)  # type: ignore[attr-defined]
        handler.connection_made(transport)
        data, self._buf = bytes(self._buf), bytearray()
        if data:
            handler.data_received(data)  # type: ignore[attr-defined]

    def _arm_idle(self) -> None:
        self._idle = self._loop.call_at(
            self._last_reply + self._fronts.idle_timeout_s, self._check_idle
        )

    def _check_idle(self) -> None:
        """One timer per idle period rather than one per request."""
        self._idle = None
        if self._transport is None:
            return
        idle_s = self._fronts.idle_timeout_s
        if self._pending is None and self._loop.time() - self._last_reply >= idle_s:
            end = self._buf.find(b"\r\n\r\n")
            if end >= 0:
                # a head whose body never came: 408, as kraft.server.limits' body
                # bound, in the body format the head asked for
                head = self._heartbeat_head(bytes(self._buf[:end]))
                self._reply(
                    {
                        "error_code": "REQUEST_TIMED_OUT",
                        "message": f"the request body did not arrive within {idle_s:g} s",
                    },
                    408,
                    head is not None and wants_msgpack(head[2], head[1]),
                )
            self._transport.close()
            return
        if self._pending is not None:
            self._last_reply = self._loop.time()  # its own timer bounds the wait
        self._arm_idle()
