"""HttpTransport: Raft RPCs to peers as `POST /raft/<endpoint>` with msgpack bodies.

One shared aiohttp ClientSession (keep-alive connections per peer) and a
timeout on every request. A request either yields the peer's RaftResponse or
raises TransportError: connection refused, timeout, an HTTP error without a
Raft body, or a body that is not the expected response. Retries are not made
here: the core decides (it backs off and resends, bounded by its timers), so a
lost request is reported once and quickly.

With security configured (kraft.security.client_security), requests go over TLS (https
peer URLs, verified against the truststore, the node's keystore presented for
mTLS) and carry the node's Authorization header.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
import msgpack

from kraft.raft.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    RaftRequest,
    RaftResponse,
    WireFormatError,
    message_from_wire,
    to_wire,
)
from kraft.security.client_security import NONE, ClientSecurity

MSGPACK = "application/msgpack"
# The response class of each request class (they share the endpoint name).
_RESPONSE_FOR = {req: resp for req, resp in zip(REQUEST_TYPES, RESPONSE_TYPES, strict=True)}


class TransportError(Exception):
    """A request that got no usable answer."""


def encode(message: RaftRequest | RaftResponse) -> bytes:
    return msgpack.packb(to_wire(message), use_bin_type=True)


def decode(body: bytes) -> RaftRequest | RaftResponse:
    """Raises WireFormatError for anything that is not a well-formed Raft message."""
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types for garbage
        raise WireFormatError(f"body is not valid msgpack: {e}") from None
    return message_from_wire(obj)


class HttpTransport:
    def __init__(
        self,
        peers: Mapping[int, str],
        *,
        connect_timeout_s: float = 1.0,
        max_connections_per_peer: int = 8,
        security: ClientSecurity = NONE,
    ) -> None:
        """`peers`: node id -> base URL (``http://host:port`` or ``https://``)."""
        self.peers = {k: v.rstrip("/") for k, v in peers.items()}
        self._connect_timeout_s = connect_timeout_s
        self._max_per_host = max_connections_per_peer
        self._session: aiohttp.ClientSession | None = None
        self._ssl = security.ssl
        # the token part stays current across credential reloads (kraft.security.reload)
        self._headers = security.headers_with({"Content-Type": MSGPACK, "Accept": MSGPACK})

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=0, limit_per_host=self._max_per_host, enable_cleanup_closed=True
            )
            self._session = aiohttp.ClientSession(
                connector=connector, skip_auto_headers=("User-Agent",)
            )
        return self._session

    async def send(self, destination: int, request: RaftRequest, timeout_s: float) -> RaftResponse:
        """One RPC with a total timeout; the response or TransportError."""
        base = self.peers.get(destination)
        if base is None:
            raise TransportError(f"no address for node {destination}")
        url = f"{base}/raft/{request.ENDPOINT}"
        timeout = aiohttp.ClientTimeout(
            total=timeout_s, sock_connect=min(self._connect_timeout_s, timeout_s)
        )
        try:
            async with self._sess().post(
                url,
                data=encode(request),
                headers=self._headers,
                timeout=timeout,
                ssl=self._ssl,
            ) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError as e:
            raise TransportError(f"{url}: timed out after {timeout_s:.3f}s") from e
        except (aiohttp.ClientError, OSError) as e:
            raise TransportError(f"{url}: {type(e).__name__}: {e}") from e
        # A Raft-level error (e.g. INCONSISTENT_CLUSTER_ID, answered 409) still has a
        # Raft body; anything else without one is a transport failure.
        try:
            msg = decode(body)
        except WireFormatError as e:
            raise TransportError(f"{url}: HTTP {status}: {e}") from None
        want = _RESPONSE_FOR[type(request)]
        if type(msg) is not want:
            raise TransportError(f"{url}: expected {want.__name__}, got {type(msg).__name__}")
        return msg  # type: ignore[return-value]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
