"""What keeps a slow, stuck, greedy or hostile client from exhausting a controller's listener.

- Connections (kraft.server.connection_quotas decides, GuardedSite acts): the
  listener accepts every TCP connection at once (so the kernel's backlog never
  fills and an honest SYN is never dropped behind a flood), then admits, delays
  or refuses it before any transport, TLS or HTTP work is spent on it:
  `max.connections` (at the limit the oldest connection that has not completed a
  request head is closed for the newcomer), `max.connections.per.ip` (+
  overrides), `max.connection.creation.rate` (over it a connection waits for a
  token, hosts taking turns), `connections.request.head.timeout.ms` (the TLS
  handshake and the first request head must arrive this soon). The voters' hosts
  are exempt from the per-IP limit and the rate and have reserved room. Every
  refusal and eviction is counted (`/metrics`) and logged at most once a second
  with counts. A refused connection is reset (no TIME_WAIT is left behind).
- `connections.max.idle.ms`: aiohttp's keep-alive timer closes a connection that is
  idle this long after its last response; the body middleware bounds the body's
  arrival by the same time (408 and close).
- `max.request.bytes`: aiohttp's client_max_size; the body middleware turns it
  into 413 REQUEST_TOO_LARGE for every route, JSON and msgpack alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import itertools
import logging
import resource
import socket
import ssl
import struct
from asyncio import sslproto
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from kraft.server.connection_quotas import (
    EVICTION_REASONS,
    REFUSAL_REASONS,
    UNLIMITED,
    ConnectionQuotaConfig,
    ConnectionQuotas,
    QuotaActions,
)

if TYPE_CHECKING:
    from kraft.server.heartbeat_front import HeartbeatFronts
    from kraft.server.metrics import ControllerMetrics

log = logging.getLogger("kraft.server.limits")

ACCEPT_BATCH = 256  # accepts per readiness callback: bounded, so one flood cannot hold the loop
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST, leaves no TIME_WAIT
_VOTER_REFRESH_S = 10.0
# The TLS handshake line (kraft.server.connection_quotas): an mTLS handshake costs
# ~0.7-1.4 ms of the loop's CPU (OpenSSL 3.0), so starts are a token bucket: at
# most 32 at one moment (~32 ms of work ready in one loop turn, Raft's and the
# heartbeats' callbacks never queued behind seconds of it) and 500 a second, the
# listener's max.connection.creation.rate default (a fleet admitted at that rate
# never waits long in line). At most 512 under way: a handshake's wall time is
# mostly its peer's lag, so this bounds what a burst of completing handshakes
# costs, not the start rate (512 / 1 s of lag still starts 500 a second).
MAX_HANDSHAKES = 512
HANDSHAKE_RATE = 500
HANDSHAKE_BURST = 32


def _reset(sock: Any) -> None:
    """Close a socket (or an asyncio TransportSocket's) with a reset."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)


def peer_ip(address: Any) -> str:
    """The peer's IP text as the limits key it: an IPv4-mapped IPv6 address is IPv4."""
    host = str(address[0]).split("%", 1)[0]
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host


def raise_open_files_limit(needed: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards `needed` (up to the hard limit):
    a listener at max.connections, its waiting connections and the Raft and log
    files need that many descriptors. Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed or soft == resource.RLIM_INFINITY:
        return soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        log.warning(
            "open files limit %d is below the %d the connection limits need: raise the "
            "hard limit (ulimit -Hn) or lower max.connections",
            target,
            needed,
            extra={"event": "open_files_limit", "limit": target, "needed": needed},
        )
    return target


class _Tracked(asyncio.Protocol):
    """The protocol the transport sees: it forwards to the real one (the heartbeat
    front, or aiohttp's handler once the front hands over) with bound methods, so a
    request pays no extra call, and tells the listener when the connection is lost."""

    def __init__(self, site: GuardedSite, conn_id: int, inner: asyncio.BaseProtocol) -> None:
        self._site = site
        self.conn_id = conn_id
        self.transport: asyncio.BaseTransport | None = None
        self.switch_to(inner)

    def switch_to(self, inner: asyncio.BaseProtocol) -> None:
        """Forward to `inner` from now on (the heartbeat front's hand-over)."""
        self.inner = inner
        self.data_received = inner.data_received  # type: ignore[attr-defined,method-assign]
        self.eof_received = inner.eof_received  # type: ignore[attr-defined,method-assign]
        self.pause_writing = inner.pause_writing  # type: ignore[method-assign]
        self.resume_writing = inner.resume_writing  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._site._lost(self.conn_id)
        self.inner.connection_lost(exc)

    def requests(self) -> int:
        """Request heads completed on this connection: the front's count, or aiohttp's
        (RequestHandler counts every parsed head, in its private _request_count)."""
        inner = self.inner
        count = getattr(inner, "completed_requests", None)
        if count is None:
            count = getattr(inner, "_request_count", 0)
        return count


class _SSLProtocol(sslproto.SSLProtocol):
    """asyncio's server-side TLS protocol, reading into 32 KiB (two TLS records)
    rather than its 256 KiB (`max_size`, allocated per connection and kept)."""

    max_size = 32 * 1024


class _LimitLog:
    """Refusals and evictions, logged at most once a second with their counts."""

    def __init__(self, loop: asyncio.AbstractEventLoop, site: GuardedSite) -> None:
        self._loop = loop
        self._site = site
        self._counts: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None

    def note(self, what: str) -> None:
        self._counts[what] = self._counts.get(what, 0) + 1
        if self._timer is None:
            self._timer = self._loop.call_later(1.0, self.flush)

    def flush(self) -> None:
        self._timer = None
        if not self._counts:
            return
        counts, self._counts = self._counts, {}
        q = self._site.quotas
        text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        log.warning(
            "connection limits in the last second: %s (open %d/%d, waiting %d)",
            text,
            q.open_count,
            q.config.max_connections,
            q.waiting_count,
            extra={
                "event": "connection_limits",
                "counts": counts,
                "open": q.open_count,
                "waiting": q.waiting_count,
                "max_connections": q.config.max_connections,
            },
        )

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()


class _Listening:
    """What aiohttp's BaseSite expects of `_server`: sockets, close()."""

    def __init__(self, sockets: list[socket.socket], on_close: Callable[[], None]) -> None:
        self.sockets = sockets
        self._on_close = on_close

    def close(self) -> None:
        self._on_close()

    async def wait_closed(self) -> None:
        return None


class GuardedSite(web.BaseSite):
    """A TCP (or TLS) site that accepts connections itself to apply the connection
    limits before a transport exists; it counts the heartbeat front's connections
    and aiohttp's alike."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 1000,
        quotas: ConnectionQuotaConfig | None = None,
        voter_urls: Callable[[], Iterable[str]] | None = None,
        metrics: ControllerMetrics | None = None,
        handshake_timeout_s: float | None = None,
        backlog: int = 1024,
        fronts: HeartbeatFronts | None = None,
    ) -> None:
        """`quotas` (default: only `max_connections`, no other limit) are the
        connection limits; `voter_urls` gives the voters' URLs (their hosts are
        protected); `fronts`, if given (kraft.server.heartbeat_front.HeartbeatFronts),
        makes each new connection's protocol and hands non-heartbeat connections to
        aiohttp; `metrics` exports the limits. The TLS handshake is bounded by the
        head timeout (and by `handshake_timeout_s` if that is shorter)."""
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._fronts = fronts
        self._host = host
        self._port = port
        self._config = quotas or ConnectionQuotaConfig(max_connections=max_connections)
        if ssl_context is not None and self._config.max_handshakes == UNLIMITED:
            self._config = dataclasses.replace(
                self._config,
                max_handshakes=MAX_HANDSHAKES,
                handshake_rate=HANDSHAKE_RATE,
                handshake_burst=HANDSHAKE_BURST,
            )
        self._voter_urls = voter_urls
        self._metrics = metrics
        self._handshake_timeout_s = min(
            self._config.request_head_timeout_ms / 1000,
            handshake_timeout_s if handshake_timeout_s is not None else float("inf"),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self.quotas: ConnectionQuotas = ConnectionQuotas(self._config, 0, self._established)
        self._ids = itertools.count(1)
        self._raw: dict[int, socket.socket] = {}  # accepted, not yet given a transport
        self._starting: dict[int, asyncio.Task[Any]] = {}  # handshake under way
        self._tracked: dict[int, _Tracked] = {}  # protocol made
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._sockets: list[socket.socket] = []
        self._limit_log: _LimitLog | None = None
        self._voters_checked = float("-inf")
        self._resolved: dict[str, frozenset[str]] = {}
        self._resolving: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    # ------------------------------------------------------------ start, stop

    async def start(self) -> None:
        await super().start()
        loop = self._loop = asyncio.get_running_loop()
        self.quotas = ConnectionQuotas(self._config, self._now_ms(), self._established)
        self._limit_log = _LimitLog(loop, self)
        c = self._config
        # open + waiting + reserved room + the node's own files and peer connections
        raise_open_files_limit(2 * c.max_connections + 512)
        self._refresh_voters()
        for task in list(self._resolving.values()):  # names resolved before serving
            await asyncio.wait([task], timeout=5.0)
        infos = await loop.getaddrinfo(
            self._host or None,
            self._port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
        seen = set()
        try:
            for family, kind, proto, _, address in infos:
                if (family, address) in seen:
                    continue
                seen.add((family, address))
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(self._backlog)
                sock.setblocking(False)
        except OSError:
            for sock in self._sockets:
                sock.close()
            self._sockets = []
            raise
        for sock in self._sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)
        self._server = _Listening(self._sockets, self._close_listening)  # type: ignore[assignment]
        if self._metrics is not None:
            self._metrics.watch_connections(self.connection_stats)

    def _close_listening(self) -> None:
        if self._closed:
            return
        self._closed = True
        assert self._loop is not None
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._resolving.values():
            task.cancel()
        for sock in self._raw.values():  # waiting for a token: never served
            _reset(sock)
            sock.close()
        self._raw.clear()
        for task in self._starting.values():
            task.cancel()
        if self._limit_log is not None:
            self._limit_log.close()
        if self._metrics is not None:
            self._metrics.unwatch_connections()

    async def stop(self) -> None:
        await super().stop()
        if self._fronts is not None:
            self._fronts.close_all()

    # ------------------------------------------------------------ accept

    def _now_ms(self) -> int:
        loop = self._loop or asyncio.get_running_loop()
        return int(loop.time() * 1000)

    def _accept(self, lsock: socket.socket) -> None:
        quotas = self.quotas
        now_ms = self._now_ms()
        if now_ms - self._voters_checked >= _VOTER_REFRESH_S * 1000:
            self._refresh_voters()
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = lsock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                # Out of descriptors (EMFILE) or buffers: the socket stays readable,
                # so stop accepting for a second rather than spin, as asyncio does.
                log.error(
                    "accept failed: %s; not accepting for 1 s",
                    e,
                    extra={"event": "accept_failed", "errno": e.errno},
                )
                assert self._loop is not None
                self._loop.remove_reader(lsock.fileno())
                self._loop.call_later(1.0, self._resume_accepting, lsock)
                break
            sock.setblocking(False)
            conn_id = next(self._ids)
            self._raw[conn_id] = sock
            self._apply(quotas.on_accept(conn_id, peer_ip(address), now_ms))
        self._arm()

    def _resume_accepting(self, lsock: socket.socket) -> None:
        if not self._closed and self._loop is not None:
            self._loop.add_reader(lsock.fileno(), self._accept, lsock)

    def _apply(self, actions: QuotaActions) -> None:
        if not actions:
            return
        assert self._limit_log is not None
        for conn_id, reason in actions.refuse:
            self._close_raw(conn_id)
            self._limit_log.note(f"refused ({reason})")
        for conn_id, reason in actions.evict:
            if not self._close_raw(conn_id):  # (admitted by this same batch)
                self._evict(conn_id)
            self._limit_log.note(f"evicted ({reason})")
        for conn_id in actions.admit:
            if conn_id in self._raw:
                self._start(conn_id)

    def _close_raw(self, conn_id: int) -> bool:
        sock = self._raw.pop(conn_id, None)
        if sock is None:
            return False
        _reset(sock)
        sock.close()
        return True

    def _start(self, conn_id: int) -> None:
        """Give an admitted connection its transport (and TLS handshake)."""
        assert self._loop is not None
        sock = self._raw.pop(conn_id)
        if self._ssl_context is not None:
            task = self._loop.create_task(self._start_tls(conn_id, sock))
        else:
            task = self._loop.create_task(
                self._loop.connect_accepted_socket(lambda: self._protocol(conn_id), sock)
            )
        self._starting[conn_id] = task
        task.add_done_callback(lambda t: self._started(conn_id, sock, t))

    async def _start_tls(self, conn_id: int, sock: socket.socket) -> None:
        """What `connect_accepted_socket(ssl=...)` does, with asyncio's SSL protocol
        reading into a 32 KiB buffer instead of 256 KiB: each TLS connection keeps its
        buffer, and 10,000 brokers' connections held 2.5 GiB of them (issue 25)."""
        loop = self._loop
        assert loop is not None and self._ssl_context is not None
        timeout_s = self._handshake_timeout_s
        handshaken = loop.create_future()
        ssl_protocol = _SSLProtocol(
            loop,
            self._protocol(conn_id),
            self._ssl_context,
            handshaken,
            server_side=True,
            ssl_handshake_timeout=timeout_s,
            ssl_shutdown_timeout=min(timeout_s, 5.0),
        )
        raw: asyncio.BaseTransport | None = None
        try:
            raw, _ = await loop.connect_accepted_socket(lambda: ssl_protocol, sock)
            await handshaken  # the handshake's timeout and failures end it, as in asyncio
        except BaseException:
            if raw is not None:
                raw.abort()  # type: ignore[attr-defined]
            else:
                sock.close()
            raise

    def _protocol(self, conn_id: int) -> _Tracked:
        server = self._runner.server
        assert server is not None
        inner = self._fronts() if self._fronts is not None else server()
        tracked = _Tracked(self, conn_id, inner)
        self._tracked[conn_id] = tracked
        return tracked

    def _started(self, conn_id: int, sock: socket.socket, task: asyncio.Task[Any]) -> None:
        self._starting.pop(conn_id, None)
        if task.cancelled() or task.exception() is not None:
            # A failed or timed-out TLS handshake, an eviction during it, or the peer
            # gone: asyncio closed the transport it made (if it got that far).
            tracked = self._tracked.get(conn_id)
            if tracked is None or tracked.transport is None:
                self._tracked.pop(conn_id, None)
                if tracked is None:
                    sock.close()  # the coroutine never ran: nobody else owns it
                self._apply_soon(self.quotas.on_closed(conn_id, self._now_ms()))
            return
        # handshake done: its slot goes to the next in line
        self._apply_soon(self.quotas.on_ready(conn_id, self._now_ms()))

    def _lost(self, conn_id: int) -> None:
        self._tracked.pop(conn_id, None)
        self._apply_soon(self.quotas.on_closed(conn_id, self._now_ms()))

    def _apply_soon(self, actions: QuotaActions) -> None:
        """Actions that follow a connection's event (a slot freed for the next in
        line); none once the listener is closed (its waiting sockets are gone)."""
        if actions and not self._closed:
            self._apply(actions)
            self._arm()

    def _evict(self, conn_id: int) -> None:
        tracked = self._tracked.get(conn_id)
        if tracked is not None and tracked.transport is not None:
            transport = tracked.transport
            sock = transport.get_extra_info("socket")
            if sock is not None:
                _reset(sock)
            transport.abort()  # type: ignore[attr-defined]
            return
        task = self._starting.get(conn_id)
        if task is not None:
            task.cancel()  # asyncio aborts a transport still in its TLS handshake

    def _established(self, conn_id: int) -> bool:
        tracked = self._tracked.get(conn_id)
        return tracked is not None and tracked.transport is not None and tracked.requests() > 0

    # ------------------------------------------------------------ timers

    def _arm(self) -> None:
        """One timer, at the core's next deadline."""
        if self._closed:
            return
        at = self.quotas.next_deadline_ms()
        if at == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            assert self._loop is not None
            self._timer = self._loop.call_at(at / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._apply(self.quotas.poll(self._now_ms()))
        self._arm()

    # ------------------------------------------------------------ voters' hosts

    def _refresh_voters(self) -> None:
        """The voters' hosts as IPs: literals at once, names resolved in the
        background (a voter added at run time, KIP-853, is picked up here)."""
        if self._voter_urls is None:
            return
        self._voters_checked = self._now_ms()
        ips: set[str] = set()
        for url in self._voter_urls():
            host = urlsplit(url if "//" in url else "//" + url).hostname
            if not host:
                continue
            try:
                ips.add(str(ipaddress.ip_address(host)))
                continue
            except ValueError:
                pass
            resolved = self._resolved.get(host)
            if resolved is not None:
                ips |= resolved
            elif host not in self._resolving and self._loop is not None:
                self._resolving[host] = self._loop.create_task(self._resolve(host))
        self.quotas.set_protected_hosts(ips)

    async def _resolve(self, host: str) -> None:
        assert self._loop is not None
        try:
            infos = await asyncio.wait_for(
                self._loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), 5.0
            )
            self._resolved[host] = frozenset(peer_ip(info[4]) for info in infos)
        except (OSError, TimeoutError) as e:
            log.warning(
                "cannot resolve voter host %s: %s (not protected until it resolves)",
                host,
                e,
                extra={"event": "voter_host_unresolved", "host": host},
            )
        finally:
            self._resolving.pop(host, None)
        self._voters_checked = float("-inf")  # apply it at the next accept

    # ------------------------------------------------------------ metrics

    def connection_stats(self) -> dict[str, Any]:
        q = self.quotas
        c = self._config
        return {
            "open": q.open_count,
            "waiting": q.waiting_count,
            "handshake_queued": q.queued_count,
            "handshaking": q.handshaking_count,
            "admitted": q.admitted,
            "refused": dict(q.refused),
            "evicted": dict(q.evicted),
            "limits": {
                "max.connections": c.max_connections,
                "max.connections.per.ip": c.max_connections_per_ip,
                "max.connection.creation.rate": c.max_connection_creation_rate,
                "connections.request.head.timeout.ms": c.request_head_timeout_ms,
            },
        }


__all__ = [
    "ConnectionQuotaConfig",
    "EVICTION_REASONS",
    "REFUSAL_REASONS",
    "GuardedSite",
    "body_middleware",
    "peer_ip",
    "raise_open_files_limit",
]


def body_middleware(read_timeout_s: float) -> Any:
    """Read every body up front: at most max.request.bytes (413), within the idle
    bound (408 and close). Handlers then read the cached body."""
    from kraft.server.http_codec import reply, too_large

    @web.middleware
    async def read_body_first(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.body_exists:
            try:
                async with asyncio.timeout(read_timeout_s):  # no extra task per request
                    await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise too_large(request) from None
            except ConnectionError:
                # The client hung up before its body was whole: nobody to answer,
                # and no server error (aiohttp would log one with a traceback).
                log.info(
                    "client closed the connection before its request body arrived",
                    extra={"event": "request_body_abandoned", "path": request.path},
                )
                if request.transport is not None:
                    request.transport.close()
                return web.Response(status=400)
            except TimeoutError:
                resp = reply(
                    request,
                    {
                        "error_code": "REQUEST_TIMED_OUT",
                        "message": f"the request body did not arrive within {read_timeout_s:g} s",
                    },
                    408,
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
