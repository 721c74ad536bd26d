"""AdminClient: HTTP calls to the controller quorum, following NOT_CONTROLLER hints.

Any controller URL works as a bootstrap: a NOT_CONTROLLER answer names the
active controller (`leader_url`) and the call goes there next. Every call has a
timeout; retries are bounded, with exponential backoff. With a ClientSecurity
(kraft.security.client_security) calls go over TLS and carry the principal's token.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiohttp

from kraft.security.client_security import NONE, ClientSecurity


@dataclass
class ClientError(Exception):
    """An answer with an error body (Kafka's error name) or no answer at all."""

    code: str
    message: str
    status: int = 0
    body: dict[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


RETRIABLE = {"NOT_CONTROLLER", "REQUEST_TIMED_OUT", "NETWORK"}


def _check_url(url: str) -> str:
    """A bootstrap URL an HTTP client can dial, or ValueError naming what is wrong
    (it was retried as a network error for seconds before)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"bootstrap URL {url!r} must start with http:// or https://")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # ValueError: not a number, or out of 0..65535
    except ValueError as e:
        raise ValueError(f"bootstrap URL {url!r} is not a URL: {e}") from None
    if not parts.hostname:
        raise ValueError(f"bootstrap URL {url!r} has no host")
    if port == 0:
        raise ValueError(f"bootstrap URL {url!r}: port 0 is no controller's")
    return url


def _segment(name: str) -> str:
    """A name as one URL path segment: "../brokers/4", "a?b" or "a#b" must reach the
    server as that name (which it refuses), not as another path."""
    return urllib.parse.quote(name, safe="")


class AdminClient:
    def __init__(
        self,
        bootstrap: str | list[str],
        timeout_s: float = 10.0,
        max_attempts: int = 8,
        backoff_s: float = 0.1,
        session: aiohttp.ClientSession | None = None,
        security: ClientSecurity = NONE,
    ) -> None:
        urls = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        self.urls = [_check_url(u.strip()).rstrip("/") for u in urls if u.strip()]
        if not self.urls:
            raise ValueError("no bootstrap URL given")
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._session = session
        self._own_session = session is None
        self._preferred: str | None = None
        self.security = security
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            **security.headers,
        }

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def call_once(self, base: str, method: str, path: str, body: Any = None) -> Any:
        try:
            async with self._sess().request(
                method,
                base + path,
                data=None if body is None else json.dumps(body),
                headers=self._headers,
                timeout=self.timeout,
                ssl=self.security.ssl,
            ) as resp:
                text = await resp.text()
                try:
                    payload = json.loads(text) if text else None
                except json.JSONDecodeError:
                    raise ClientError(
                        "INVALID_RESPONSE", f"{base}: not JSON: {text[:200]!r}", resp.status
                    ) from None
                if resp.status >= 400:
                    p = payload if isinstance(payload, dict) else {}
                    raise ClientError(
                        p.get("error_code", f"HTTP_{resp.status}"),
                        p.get("message", text[:200]),
                        resp.status,
                        p,
                    )
                return payload
        except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as e:
            # Not retried: a certificate that is refused now is refused on the next try.
            raise ClientError(
                "SSL_AUTHENTICATION_FAILED",
                f"{base}: {type(e).__name__}: {e} (TLS: check ssl.truststore.location, "
                "ssl.keystore.location and the certificate's names)",
            ) from None
        except TimeoutError:
            raise ClientError(
                "NETWORK", f"{base}: no answer within {self.timeout.total:g} s (--timeout)"
            ) from None
        except (aiohttp.ClientError, OSError) as e:
            hint = ""
            if base.startswith("http://") and isinstance(e, aiohttp.ServerDisconnectedError):
                hint = " (is it a TLS listener? use https:// and a truststore)"
            elif base.startswith("https://") and (
                isinstance(e, aiohttp.ServerDisconnectedError)
                or isinstance(getattr(e, "os_error", e), ConnectionResetError)
            ):
                # A refused client certificate looks like this: the handshake's alert
                # does not reach the client, the connection just ends. It is retried
                # (a controller stopping ends connections alike), and then told.
                hint = (
                    " (the controller ended the TLS connection without an answer: with "
                    "ssl.client.auth=required it refuses a client without a certificate "
                    "of the cluster's CA; check ssl.keystore.location in --command-config)"
                )
            raise ClientError("NETWORK", f"{base}: {type(e).__name__}: {e}{hint}") from None

    async def call(self, method: str, path: str, body: Any = None, any_node: bool = False) -> Any:
        """Call the active controller (or, with any_node, the first node that answers)."""
        rng = random.Random()
        order = list(self.urls)
        last: ClientError | None = None
        started = time.monotonic()
        for attempt in range(self.max_attempts):
            base = self._preferred or order[attempt % len(order)]
            try:
                return await self.call_once(base, method, path, body)
            except ClientError as e:
                last = e
                if e.code == "NOT_CONTROLLER" and not any_node:
                    hint = (e.body or {}).get("leader_url")
                    self._preferred = hint.rstrip("/") if hint else None
                    if hint:
                        continue  # a fresh hint: no need to wait
                elif e.code not in RETRIABLE:
                    raise
                else:
                    self._preferred = None
            await asyncio.sleep(min(2.0, self.backoff_s * 2**attempt) * (0.8 + 0.4 * rng.random()))
        assert last is not None
        # the last error alone would hide that every controller was tried for a while
        raise ClientError(
            last.code,
            f"{last.message} (gave up after {self.max_attempts} "
            f"attempt{'s' if self.max_attempts != 1 else ''} over "
            f"{time.monotonic() - started:.0f} s)",
            last.status,
            last.body,
        )

    # ------------------------------------------------------------ API helpers

    async def create_topic(self, body: dict[str, Any]) -> Any:
        return await self.call("POST", "/v1/topics", body)

    async def delete_topic(self, name: str) -> Any:
        return await self.call("DELETE", f"/v1/topics/{_segment(name)}")

    async def list_topics(self) -> Any:
        return await self.call("GET", "/v1/topics")

    async def describe_topic(self, name: str) -> Any:
        return await self.call("GET", f"/v1/topics/{_segment(name)}")

    async def add_partitions(self, name: str, count: int) -> Any:
        return await self.call("POST", f"/v1/topics/{_segment(name)}/partitions", {"count": count})

    async def alter_configs(self, name: str, configs: dict[str, str | None]) -> Any:
        return await self.call("POST", f"/v1/topics/{_segment(name)}/configs", {"configs": configs})

    async def brokers(self) -> Any:
        return await self.call("GET", "/v1/brokers")

    async def unregister_broker(self, broker_id: int) -> Any:
        return await self.call("DELETE", f"/v1/brokers/{broker_id}")

    async def elect(self, topic: str, partition: int, kind: str) -> Any:
        return await self.call(
            "POST", "/v1/elections", {"topic": topic, "partition": partition, "type": kind}
        )

    async def alter_partition_reassignments(self, partitions: list[dict[str, Any]]) -> Any:
        """KIP-455: each `{topic, partition, replicas}`; `replicas` None cancels."""
        return await self.call(
            "POST", "/v1/partitions/reassignments", {"version": 1, "partitions": partitions}
        )

    async def list_partition_reassignments(self) -> Any:
        return await self.call("GET", "/v1/partitions/reassignments")

    async def quorum(self, leader: bool = True) -> Any:
        return await self.call("GET", "/v1/quorum", any_node=not leader)

    async def metadata(self) -> Any:
        return await self.call("GET", "/v1/metadata")
