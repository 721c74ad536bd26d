"""BrokerAgent: the asyncio/aiohttp shell around the pure BrokerLifecycle.

It owns the clock and the HTTP session: it feeds the lifecycle ticks, answers and
errors, sends what the lifecycle asks (one request in flight, each with a
timeout), and keeps a metadata follower (a Raft observer, see follower.py) whose
committed offset goes into every heartbeat. Fleet mode runs many agents over one
shared session (connection pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import msgpack

from broker_agent.lifecycle import BrokerLifecycle, BrokerState, LifecycleConfig, Output, Send

log = logging.getLogger("broker_agent")

PATHS = {"register": "/v1/brokers/register", "heartbeat": "/v1/brokers/heartbeat"}


class MetadataSource(Protocol):
    """The agent's view of the metadata log (a Raft observer)."""

    @property
    def committed_offset(self) -> int: ...


@dataclass
class AgentStats:
    heartbeat_ms: list[float] = field(default_factory=list)
    errors: int = 0

    def record(self, ms: float) -> None:
        self.heartbeat_ms.append(ms)
        if len(self.heartbeat_ms) > 20_000:
            del self.heartbeat_ms[:10_000]


def mono_ms() -> int:
    return int(time.monotonic() * 1000)


class BrokerAgent:
    def __init__(
        self,
        broker_id: int,
        controllers: list[str],
        cluster_id: str,
        session: aiohttp.ClientSession,
        *,
        rack: str | None = None,
        heartbeat_interval_ms: int = 2000,
        request_timeout_ms: int = 2000,
        controlled_shutdown_timeout_ms: int = 30_000,
        listener_port: int = 9092,
        metadata: MetadataSource | None = None,
        rng: random.Random | None = None,
        stats: AgentStats | None = None,
        clock: Callable[[], int] = mono_ms,
        on_state_change: Callable[[int, BrokerState, BrokerState, str], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.controllers = [c.rstrip("/") for c in controllers]
        self.session = session
        self.metadata = metadata
        self.clock = clock
        self.stats = stats or AgentStats()
        self.incarnation_id = str(uuid.uuid4())  # fresh per process start
        self._on_state_change = on_state_change
        config = LifecycleConfig(
            broker_id=broker_id,
            cluster_id=cluster_id,
            incarnation_id=self.incarnation_id,
            heartbeat_interval_ms=heartbeat_interval_ms,
            request_timeout_ms=request_timeout_ms,
            controlled_shutdown_timeout_ms=controlled_shutdown_timeout_ms,
            listeners=(
                {
                    "name": "PLAINTEXT",
                    "host": "127.0.0.1",
                    "port": listener_port,
                    "security_protocol": "PLAINTEXT",
                },
            ),
            rack=rack,
            features=(
                {
                    "name": "metadata.version",
                    "min_supported_version": 1,
                    "max_supported_version": 1,
                },
            ),
        )
        self.lifecycle = BrokerLifecycle(
            config, len(self.controllers), rng or random.Random(), clock()
        )
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.exit_code: int | None = None
        self._done = asyncio.Event()

    @property
    def state(self) -> BrokerState:
        return self.lifecycle.state

    def controller_index(self, url: str | None) -> int | None:
        if url is None:
            return None
        url = url.rstrip("/")
        return self.controllers.index(url) if url in self.controllers else None

    def _apply(self, out: Output) -> None:
        for change in out.changes:
            log.info(
                "broker state change",
                extra={
                    "event": "broker_state",
                    "broker_id": self.broker_id,
                    "old": change.old.value,
                    "new": change.new.value,
                    "reason": change.reason,
                },
            )
            if self._on_state_change is not None:
                self._on_state_change(self.broker_id, change.old, change.new, change.reason)
        for send in out.sends:
            t = asyncio.create_task(self._send(send))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        if out.exit_code is not None and self.exit_code is None:
            self.exit_code = out.exit_code
            self._done.set()
        self._wake.set()

    async def _send(self, send: Send) -> None:
        url = self.controllers[send.controller] + PATHS[send.kind]
        started = time.perf_counter()
        try:
            async with self.session.post(
                url,
                data=msgpack.packb(send.body, use_bin_type=True),
                headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
                timeout=aiohttp.ClientTimeout(total=send.timeout_ms / 1000),
            ) as resp:
                raw = await resp.read()
                try:
                    body = msgpack.unpackb(raw, raw=False) if raw else {}
                except Exception:
                    body = json.loads(raw) if raw[:1] in (b"{", b"[") else {}
                if resp.status >= 400:
                    code = (
                        body.get("error_code", f"HTTP_{resp.status}")
                        if isinstance(body, dict)
                        else "NETWORK"
                    )
                    hint = (
                        self.controller_index(body.get("leader_url"))
                        if isinstance(body, dict)
                        else None
                    )
                    self.stats.errors += 1
                    self._apply(self.lifecycle.on_error(send.request_id, code, self.clock(), hint))
                    return
        except (TimeoutError, aiohttp.ClientError, OSError):
            self.stats.errors += 1
            self._apply(self.lifecycle.on_error(send.request_id, "NETWORK", self.clock()))
            return
        if send.kind == "heartbeat":
            self.stats.record((time.perf_counter() - started) * 1000)
        self._apply(self.lifecycle.on_response(send.request_id, body, self.clock()))

    async def run(self) -> int:
        """Drive the lifecycle until it exits (controlled shutdown or timeout)."""
        try:
            while self.exit_code is None:
                if self.metadata is not None:
                    self.lifecycle.set_metadata_offset(self.metadata.committed_offset)
                self._apply(self.lifecycle.tick(self.clock()))
                if self.exit_code is not None:
                    break
                delay = max(0.0, (self.lifecycle.next_wake_ms() - self.clock()) / 1000)
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=min(delay, 0.5))
        finally:
            for t in list(self._tasks):
                t.cancel()
            for t in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        return self.exit_code or 0

    def shutdown(self) -> None:
        """SIGTERM/SIGINT: start a controlled shutdown."""
        self._apply(self.lifecycle.begin_shutdown(self.clock()))

    def status(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "state": self.state.value,
            "broker_epoch": self.lifecycle.broker_epoch,
            "metadata_offset": self.lifecycle.metadata_offset,
            "incarnation_id": self.incarnation_id,
        }
