"""Fleet: K broker agents in one process (K = 1 for a plain `broker-agent`).

The agents share one aiohttp session (one connection pool) and one metadata
follower: a single Raft observer (node id = the first broker id) whose image
every agent reads, as K real brokers would each hold the same committed image.
A status line is printed every few seconds (agents per state, heartbeat p50/p99
of the window, errors, metadata offset, ISR changes, and the tasks that died with
an exception nobody handled: the loop's exception handler counts and logs them).
The agents' requests wait at send gates, in priority order, for the shared
connections (send_gate.py); heartbeats go over pipelined connections
(heartbeat_channel.py). An optional status
listener (`--status-port`) serves `GET /status` (`?agents=0` without the
per-agent list), `GET /heartbeats?since=N` (latency p50/p90/p99/max of the
heartbeats answered after the first N, for benchmarks) and `GET /v1/metadata`
(the image the agents see); it is an addition for tests, benchmarks and
operators, not part of DESIGN 1.2.

Shutdown: `shutdown()` (SIGTERM/SIGINT) starts a controlled shutdown of every
agent; each is bounded by its timeout; then the follower stops, background tasks
are cancelled and the session closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

import aiohttp
from aiohttp import web

from broker_agent.agent import (
    AgentSettings,
    AgentStats,
    BrokerAgent,
    count_task_death,
    percentile,
)
from broker_agent.follower import MetadataFollower, wait_event
from broker_agent.heartbeat_channel import HeartbeatChannel
from broker_agent.lifecycle import BrokerState
from broker_agent.send_gate import SendGate
from kraft.raft.config import RaftConfig
from kraft.security.client_security import NONE, ClientSecurity

log = logging.getLogger("broker_agent.fleet")

# Agents start spread over count * RAMP_MS_PER_AGENT (10 s for 2,000): a start costs
# a registration (a commit), a catch-up and an unfence, so a fleet that starts at
# once is a burst of writes no real cluster sees.
RAMP_MS_PER_AGENT = 5

# Heartbeats in flight per heartbeat connection (heartbeat_channel.py pipelines
# them). A heartbeat's answer waits for the commit of every record pending before
# it, so in a storm (registrations and unfences committing all the time) one per
# connection capped the fleet near 50 connections / ~10 ms = 5,000 heartbeats/s,
# the whole budget of 10,000 running brokers, and brokers still starting waited
# their turn: 10,000 agents took 65 s to be RUNNING. Pipelined, the heartbeats on
# a connection are answered together at the next commit.
PIPELINE_DEPTH = 8


@dataclass(frozen=True, slots=True)
class FleetSpec:
    first_id: int
    count: int
    controllers: tuple[str, ...]
    settings: AgentSettings
    raft: RaftConfig = RaftConfig()
    cluster_id: str | None = None
    seed: int = 0
    status_interval_s: float = 5.0
    ramp_ms: int | None = None  # spread agent starts over this long (None: RAMP_MS_PER_AGENT each)
    max_connections: int = 100  # below the controllers' listen backlog; half for heartbeats
    status_port: int | None = None
    status_host: str = "127.0.0.1"
    # broker id -> its TLS context and credential (issue 8; empty: plaintext, no credential)
    security: dict[int, ClientSecurity] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"--count must be at least 1, got {self.count}")
        if self.first_id < 0:
            raise ValueError(f"broker ids must be >= 0, got {self.first_id}")
        if not self.controllers:
            raise ValueError("--controllers needs at least one URL")
        for url in self.controllers:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"controller URL {url!r} must start with http:// or https://")


class Fleet:
    def __init__(
        self,
        spec: FleetSpec,
        out: TextIO | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.spec = spec
        self.out = out if out is not None else sys.stdout
        self.clock = clock
        self.stats = AgentStats()
        self.agents: list[BrokerAgent] = []
        self.follower: MetadataFollower | None = None
        self._session: aiohttp.ClientSession | None = None
        self.gates: dict[str, SendGate] = {}
        self.channel: HeartbeatChannel | None = None
        self._stopping = asyncio.Event()
        self._signals = 0
        self._last_errors = 0
        self._last_status = time.monotonic()
        self.exit_code = 0

    # ---------------------------------------------------------------- views

    def counts(self) -> dict[str, int]:
        c = Counter(a.state.value for a in self.agents)
        return {s.value: c.get(s.value, 0) for s in BrokerState}

    def status(self, agents: bool = True) -> dict[str, Any]:
        f = self.follower
        return {
            "agents": [a.status() for a in self.agents] if agents else None,
            "counts": self.counts(),
            "unfenced": sum(1 for a in self.agents if a.lifecycle and not a.lifecycle.is_fenced),
            "follower": None if f is None else f.status(),
            "heartbeats": self.stats.heartbeats,
            "errors": self.stats.errors,
            "error_codes": dict(self.stats.error_codes),
            "task_exceptions": self.stats.task_exceptions,
            "send_queue": {k: g.queued for k, g in self.gates.items()},
        }

    def status_line(self) -> str:
        now = time.monotonic()
        window = self.stats.take_window()
        elapsed = max(now - self._last_status, 1e-9)
        self._last_status = now
        p50, p99 = percentile(window, 0.50), percentile(window, 0.99)
        counts = self.counts()
        states = " ".join(f"{k}={v}" for k, v in counts.items() if v)
        new_errors = self.stats.errors - self._last_errors
        self._last_errors = self.stats.errors
        f = self.follower
        if f is None or f.quorum is None:
            waited = None if f is None else f.discovering_ms
            meta = (
                "metadata offset=? (discovering)"
                if waited is None or waited < 1000
                else f"metadata offset=? (discovering for {waited // 1000} s)"
            )
        else:
            meta = f"metadata offset={f.committed_offset} caught_up={f.caught_up}"
        expansions = sum(a.isr.expansions for a in self.agents)
        shrinks = sum(a.isr.shrinks for a in self.agents)
        lat = (
            "heartbeat p50=- p99=-" if p99 is None else f"heartbeat p50={p50:.1f}ms p99={p99:.1f}ms"
        )
        who = (
            f"broker {self.spec.first_id}"
            if self.spec.count == 1
            else f"fleet {self.spec.first_id}..{self.spec.first_id + self.spec.count - 1}"
        )
        return (
            f"{who}: {states} | {lat} ({len(window) / elapsed:.0f}/s) | "
            f"errors={self.stats.errors} (+{new_errors}) | {meta} | isr +{expansions}/-{shrinks}"
            f" | task exceptions={self.stats.task_exceptions}"
        )

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: a task that died with nobody awaiting it
        (or another error only the loop saw) is counted and logged with its traceback."""
        count_task_death(self.stats, str(context.get("message")), context.get("exception"))

    # ---------------------------------------------------------------- running

    def shutdown(self) -> None:
        """First signal: controlled shutdown of every agent. Second: stop waiting."""
        self._signals += 1
        if self._signals == 1:
            log.info(
                "controlled shutdown requested",
                extra={"event": "shutdown_requested", "agents": len(self.agents)},
            )
            for a in self.agents:
                a.shutdown()
        else:
            log.warning("second signal: exiting without waiting", extra={"event": "forced_exit"})
        self._stopping.set()

    async def run(self) -> int:
        spec = self.spec
        # Heartbeats get half of max_connections as a pool of their own (the
        # controllers answer heartbeat-only connections in a lean front).
        heartbeat_limit = max(1, spec.max_connections // 2)
        limit = max(1, spec.max_connections - heartbeat_limit)
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
        heartbeat_connector = aiohttp.TCPConnector(limit=heartbeat_limit, limit_per_host=0)
        # Lean pipelined heartbeats, unless each agent presents its own credential.
        self.channel = None if spec.security else HeartbeatChannel(heartbeat_limit)
        depth = 1 if self.channel is None else PIPELINE_DEPTH
        # requests wait at these, in priority order, rather than in the pools
        self.gates = {
            "heartbeat": SendGate(heartbeat_limit * depth),
            "register": SendGate(limit),
        }
        clock_kw: dict[str, Any] = {} if self.clock is None else {"clock": self.clock}
        loop = asyncio.get_running_loop()
        previous_handler = loop.get_exception_handler()
        loop.set_exception_handler(self._loop_exception)
        try:
            return await self._run(spec, connector, heartbeat_connector, clock_kw)
        finally:
            loop.set_exception_handler(previous_handler)

    async def _run(
        self,
        spec: FleetSpec,
        connector: aiohttp.TCPConnector,
        heartbeat_connector: aiohttp.TCPConnector,
        clock_kw: dict[str, Any],
    ) -> int:
        tasks: list[asyncio.Task[Any]] = []
        runner: web.AppRunner | None = None
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            aiohttp.ClientSession(connector=heartbeat_connector) as heartbeat_session,
        ):
            self._session = session
            self.follower = MetadataFollower(
                spec.first_id,
                list(spec.controllers),
                session,
                cluster_id=spec.cluster_id,
                raft_config=spec.raft,
                security=spec.security.get(spec.first_id, NONE),
                alternates=[
                    (b, spec.security.get(b, NONE))
                    for b in range(spec.first_id + 1, spec.first_id + spec.count)
                ],
                rng=random.Random(f"follower:{spec.seed}:{spec.first_id}"),
                **clock_kw,
            )
            for i in range(spec.count):
                bid = spec.first_id + i
                settings = spec.settings
                if spec.count > 1:
                    settings = _with_port(settings, settings.listener_port + i)
                agent = BrokerAgent(
                    bid,
                    list(spec.controllers),
                    session,
                    self.follower,
                    settings,
                    stats=self.stats,
                    isr_rng=random.Random(f"isr:{spec.seed}:{bid}"),
                    security=spec.security.get(bid, NONE),
                    heartbeat_session=heartbeat_session,
                    gates=self.gates,
                    heartbeat_channel=self.channel,
                    **clock_kw,
                )
                agent.rng = random.Random(f"lifecycle:{spec.seed}:{bid}:{agent.incarnation_id}")
                self.agents.append(agent)
            try:
                if spec.status_port is not None:
                    runner = await self._start_status_server()
                follower_task = asyncio.create_task(self.follower.run())
                tasks.append(follower_task)
                tasks.append(asyncio.create_task(self._watch_follower(follower_task)))
                status_task = asyncio.create_task(self._status_loop())
                tasks.append(status_task)
                ramp = spec.ramp_ms if spec.ramp_ms is not None else RAMP_MS_PER_AGENT * spec.count
                if spec.count == 1:
                    ramp = 0
                start_rng = random.Random(f"ramp:{spec.seed}")
                agent_tasks = [
                    asyncio.create_task(self._run_agent(a, start_rng.uniform(0, ramp) / 1000))
                    for a in self.agents
                ]
                tasks.extend(agent_tasks)
                done_all = asyncio.gather(*agent_tasks, return_exceptions=True)
                stop_wait = asyncio.create_task(self._wait_forced())
                tasks.append(stop_wait)
                await asyncio.wait({done_all, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                codes = [a.exit_code for a in self.agents if a.exit_code is not None]
                self.exit_code = max([self.exit_code, *codes])
                print(self.status_line(), file=self.out, flush=True)
            finally:
                for a in self.agents:
                    a.stop()  # a forced exit (second signal) or an error: stop at once
                if self.follower is not None:
                    self.follower.stop()
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await t
                if runner is not None:
                    await runner.cleanup()
                if self.channel is not None:
                    self.channel.close()
        return self.exit_code

    async def _watch_follower(self, task: asyncio.Task[None]) -> None:
        """The metadata follower ending on its own freezes every agent's image (and
        the offset its heartbeats report, which other brokers' controlled shutdowns
        wait for). A Kafka broker whose Raft client fails stops; so does the fleet:
        a controlled shutdown of every agent, then exit code 1."""
        await asyncio.wait({task})  # not `await task`: cancelling this must not cancel it
        follower = self.follower
        if follower is None or follower.stopped:
            return
        exc = None if task.cancelled() else task.exception()
        reason = follower.failure or (
            f"{type(exc).__name__}: {exc}" if exc is not None else "it ended (see above)"
        )
        log.error(
            "the metadata follower stopped: shutting the brokers down: %s",
            reason,
            exc_info=exc,
            extra={"event": "follower_stopped", "error": reason},
        )
        self.exit_code = max(self.exit_code, 1)
        if not self._signals:
            self.shutdown()

    async def _wait_forced(self) -> None:
        while self._signals < 2:
            await self._stopping.wait()
            self._stopping.clear()

    async def _run_agent(self, agent: BrokerAgent, delay_s: float) -> int:
        if delay_s > 0:
            # a shutdown during the ramp ends the wait early
            await wait_event(self._stopping, delay_s)
        if self._signals:
            agent.shutdown()
        try:
            code = await agent.run()
        except Exception:
            log.exception(
                "agent crashed", extra={"event": "agent_crash", "broker_id": agent.broker_id}
            )
            agent.exit_code = 1
            return 1
        if code:
            log.error(
                "agent stopped",
                extra={
                    "event": "agent_exit",
                    "broker_id": agent.broker_id,
                    "exit_code": code,
                    "reason": agent.lifecycle.fatal if agent.lifecycle else None,
                },
            )
        return code

    async def _status_loop(self) -> None:
        interval = self.spec.status_interval_s
        if interval <= 0:
            return
        while True:
            await asyncio.sleep(interval)
            print(self.status_line(), file=self.out, flush=True)

    async def _start_status_server(self) -> web.AppRunner:
        async def status(request: web.Request) -> web.Response:
            # ?agents=0 leaves out the per-agent list (large for a big fleet)
            return web.json_response(self.status(request.query.get("agents", "1") != "0"))

        async def heartbeats(request: web.Request) -> web.Response:
            try:
                since = int(request.query.get("since", "0"))
            except ValueError:
                return web.json_response(
                    {"error_code": "INVALID_REQUEST", "message": "since: not an integer"},
                    status=400,
                )
            return web.json_response(self.stats.since(since))

        async def metadata(request: web.Request) -> web.Response:
            f = self.follower
            if f is None:
                return web.json_response({"error_code": "NOT_READY"}, status=503)
            return web.Response(text=json.dumps(f.image.to_dict()), content_type="application/json")

        app = web.Application()
        app.add_routes(
            [
                web.get("/status", status),
                web.get("/heartbeats", heartbeats),
                web.get("/v1/metadata", metadata),
            ]
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.spec.status_host, self.spec.status_port)
        await site.start()
        return runner


def _with_port(settings: AgentSettings, port: int) -> AgentSettings:
    return replace(settings, listener_port=min(port, 65535))
