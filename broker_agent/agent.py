"""BrokerAgent: the asyncio/aiohttp shell around the pure BrokerLifecycle and IsrManager.

It owns the clock and the HTTP session: it feeds the lifecycle ticks, answers and
errors, sends what the lifecycle asks (one request in flight, each with a
timeout), and reads a metadata follower (a Raft observer, see follower.py) whose
committed offset goes into every heartbeat and whose image drives the ISR
manager's AlterPartition requests. The cluster id comes from the follower's
quorum discovery. Fleet mode (fleet.py) runs many agents over one shared session
(connection pool) and one shared follower.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import msgpack

from broker_agent import clean_shutdown
from broker_agent.follower import wait_event
from broker_agent.heartbeat_channel import HEARTBEAT_PATH, MSGPACK, HeartbeatChannel, decode_body
from broker_agent.isr import AlterSend, IsrConfig, IsrManager
from broker_agent.lifecycle import (
    INVALID_RESPONSE,
    NETWORK,
    UNEXPECTED_ERROR,
    Backoff,
    BrokerLifecycle,
    BrokerState,
    LifecycleConfig,
    Output,
    Send,
)
from broker_agent.send_gate import CATCHING_UP, KEEP_SESSION, RECOVERING, REGISTER, SendGate
from kraft.clock import mono_ms
from kraft.config import default_of
from kraft.security.client_security import NONE, ClientSecurity
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
)

log = logging.getLogger("broker_agent")

PATHS = {"register": "/v1/brokers/register", "heartbeat": HEARTBEAT_PATH}
ALTER_PATH = "/v1/partitions/alter"
# Controller URLs an agent may learn from NOT_CONTROLLER hints, beyond those given
# (a quorum's voters and a few replacements; a bound whatever the answers say).
MAX_LEARNED_CONTROLLERS = 8


class MetadataSource(Protocol):
    """The agent's view of the metadata log (a Raft observer, follower.MetadataFollower)."""

    @property
    def committed_offset(self) -> int: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def cluster_id(self) -> str | None: ...

    def led_by(self, broker_id: int) -> frozenset[tuple[str, int]]: ...

    def leads_any(self, broker_id: int) -> bool: ...

    def subscribe(self, fn: Callable[[int], None]) -> None: ...

    async def wait_cluster_id(self, timeout_s: float) -> str | None: ...


HISTORY = 400_000  # heartbeat latencies kept for `since()` (200 s of a 2,000-agent fleet)


@dataclass
class AgentStats:
    """Shared by the agents of a fleet: heartbeat latencies of the current window
    (the status line) and of the last HISTORY heartbeats (`since`, for benchmarks)."""

    window: deque[float] = field(default_factory=lambda: deque(maxlen=50_000))
    history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    heartbeats: int = 0
    errors: int = 0
    redirects: int = 0
    alter_partitions: int = 0
    # failed requests by "kind:code" (register:REQUEST_TIMED_OUT, heartbeat:NETWORK,
    # alter:UNEXPECTED_ERROR, ...): why a storm's registrations were refused
    error_codes: Counter[str] = field(default_factory=Counter)
    # tasks that ended with an exception nobody handled (goal: 0); see count_task_death
    task_exceptions: int = 0

    def count_error(self, kind: str, code: str) -> None:
        self.errors += 1
        self.error_codes[f"{kind}:{code}"] += 1

    def record(self, ms: float) -> None:
        self.window.append(ms)
        self.history.append(ms)
        self.heartbeats += 1

    def take_window(self) -> list[float]:
        out = list(self.window)
        self.window.clear()
        return out

    def since(self, heartbeats: int) -> dict[str, Any]:
        """Latency figures of the heartbeats after the first `heartbeats` answered
        ones (a total read earlier). `complete` is False when some of them have
        already left the history."""
        wanted = max(0, self.heartbeats - max(0, heartbeats))
        kept = min(wanted, len(self.history))
        values = list(self.history)[len(self.history) - kept :] if kept else []
        return {
            "heartbeats": self.heartbeats,
            "count": kept,
            "complete": kept == wanted,
            "p50_ms": percentile(values, 0.50),
            "p90_ms": percentile(values, 0.90),
            "p99_ms": percentile(values, 0.99),
            "max_ms": max(values) if values else None,
            "errors": self.errors,
            "error_codes": dict(self.error_codes),
            "redirects": self.redirects,
            "alter_partitions": self.alter_partitions,
            "task_exceptions": self.task_exceptions,
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    data = sorted(values)
    return data[min(len(data) - 1, int(q * len(data)))]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    heartbeat_interval_ms: int = default_of("broker.heartbeat.interval.ms")
    # register / heartbeat: skip a silent controller after this (the CLI uses half
    # of broker.session.timeout.ms, as Kafka does)
    request_timeout_ms: int = 4500
    controlled_shutdown_timeout_ms: int = default_of("controlled.shutdown.timeout.ms")
    rack: str | None = None
    host: str = "127.0.0.1"
    listener_port: int = 9092
    isr: IsrConfig = IsrConfig()  # AlterPartition: its request_timeout_ms is request.timeout.ms
    # Where the KIP-966 clean shutdown file lives (`{id}`: the broker id); None:
    # none is kept, and every registration says the last shutdown was unclean.
    data_dir: str | None = None


MSGPACK_HEADERS = {"Content-Type": MSGPACK, "Accept": MSGPACK}


@functools.lru_cache(maxsize=64)
def client_timeout(timeout_ms: int) -> aiohttp.ClientTimeout:
    """One (immutable) ClientTimeout per value: a fleet sends ~1,000 requests a second."""
    return aiohttp.ClientTimeout(total=timeout_ms / 1000)


async def post_msgpack(
    session: aiohttp.ClientSession,
    url: str,
    body: Any,
    timeout_ms: int,
    headers: dict[str, str] = MSGPACK_HEADERS,
    ssl: Any = True,
) -> tuple[int, Any]:
    """POST a msgpack body; (status, decoded body). An empty body decodes as {};
    one that is neither msgpack nor JSON (an error page, garbage) as None. Raises
    on transport errors."""
    async with session.post(
        url,
        data=msgpack.packb(body, use_bin_type=True),
        headers=headers,
        timeout=client_timeout(timeout_ms),
        ssl=ssl,
    ) as resp:
        raw = await resp.read()
        return resp.status, decode_body(raw)


def error_code(status: int, body: Any) -> str:
    """The error name of a failed answer: the controller's `error_code`, else one
    from the HTTP status; INVALID_RESPONSE for a success body that is not a map."""
    if isinstance(body, dict) and isinstance(body.get("error_code"), str):
        return body["error_code"]
    if status >= 400:
        return f"HTTP_{status}"
    return INVALID_RESPONSE


def count_task_death(stats: AgentStats, what: str, exc: BaseException | None) -> None:
    """A task ended with an exception nobody handled: counted (the fleet's status
    line shows it) and logged once with its traceback."""
    stats.task_exceptions += 1
    log.error(
        "task died: %s",
        what,
        exc_info=exc,
        extra={"event": "task_exception", "task_exceptions": stats.task_exceptions},
    )


def send_priority(lc: BrokerLifecycle, send: Send) -> int:
    """A request's place at a fleet's send gate (send_gate.py)."""
    if send.kind == "register":
        return REGISTER
    if not lc.is_fenced:
        return KEEP_SESSION
    return RECOVERING if lc.state is BrokerState.RECOVERY else CATCHING_UP


# Transport failures: the controller could not be reached or did not answer in time.
TRANSPORT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)


class BrokerAgent:
    def __init__(
        self,
        broker_id: int,
        controllers: list[str],
        session: aiohttp.ClientSession,
        metadata: MetadataSource,
        settings: AgentSettings | None = None,
        *,
        rng: random.Random | None = None,
        isr_rng: random.Random | None = None,
        stats: AgentStats | None = None,
        clock: Callable[[], int] = mono_ms,
        on_state_change: Callable[[int, BrokerState, BrokerState, str], None] | None = None,
        security: ClientSecurity = NONE,
        heartbeat_session: aiohttp.ClientSession | None = None,
        gates: dict[str, SendGate] | None = None,
        heartbeat_channel: HeartbeatChannel | None = None,
    ) -> None:
        self.broker_id = broker_id
        # TLS and this broker's own credential (issue 8): the controllers bind it to broker_id.
        self._headers = security.headers_with(MSGPACK_HEADERS)  # current across reloads
        self._ssl = security.ssl
        self.controllers = [c.rstrip("/") for c in controllers]
        self._given_controllers = len(self.controllers)
        if not self.controllers:
            raise ValueError("at least one controller URL is needed")
        self.session = session
        # Heartbeats on connections of their own (Kafka's broker has a heartbeat
        # channel of its own): the controller answers such a connection in its lean
        # front (kraft/server/heartbeat_front.py) instead of aiohttp's machinery.
        self.heartbeat_session = heartbeat_session or session
        # A fleet's shared connections: per request kind, the gate a request waits
        # at before it goes out (send_gate.py); none: straight to the session.
        self.gates = gates or {}
        # A fleet's lean pipelined heartbeat connections (heartbeat_channel.py).
        self.heartbeat_channel = heartbeat_channel
        self.metadata = metadata
        self.settings = settings or AgentSettings()
        self.clock = clock
        self.rng = rng or random.Random()
        self.stats = stats or AgentStats()
        self.incarnation_id = str(uuid.uuid4())  # fresh per process start
        self._on_state_change = on_state_change
        self.lifecycle: BrokerLifecycle | None = None
        self.isr = IsrManager(broker_id, self.settings.isr, isr_rng or random.Random(broker_id))
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.exit_code: int | None = None
        self._shutdown_requested = False
        self._stopped = False
        self.errors = 0
        metadata.subscribe(self._on_metadata)

    # ---------------------------------------------------------------- views

    @property
    def state(self) -> BrokerState:
        return BrokerState.STARTING if self.lifecycle is None else self.lifecycle.state

    def controller_index(self, url: str | None) -> int | None:
        """The index of a controller URL a NOT_CONTROLLER answer names. One the agent
        was not given (its list named only standbys, or a controller added since,
        KIP-853) is learned: left out, it stayed unreachable and registration never
        ended. At most MAX_LEARNED_CONTROLLERS are learned."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return None
        url = url.rstrip("/")
        if url in self.controllers:
            return self.controllers.index(url)
        if len(self.controllers) >= self._given_controllers + MAX_LEARNED_CONTROLLERS:
            return None
        self.controllers.append(url)
        if self.lifecycle is not None:
            self.lifecycle.selector.grow(len(self.controllers))
        log.info(
            "learned the active controller's URL from a NOT_CONTROLLER answer",
            extra={"event": "controller_learned", "broker_id": self.broker_id, "url": url},
        )
        return len(self.controllers) - 1

    def status(self) -> dict[str, Any]:
        lc = self.lifecycle
        return {
            "broker_id": self.broker_id,
            "state": self.state.value,
            "broker_epoch": -1 if lc is None else lc.broker_epoch,
            "fenced": True if lc is None else lc.is_fenced,
            "metadata_offset": self.metadata.committed_offset,
            "incarnation_id": self.incarnation_id,
            "controller": None if lc is None else self.controllers[lc.selector.current],
            "errors": self.errors,
            "isr_expansions": self.isr.expansions,
            "isr_shrinks": self.isr.shrinks,
            # led partitions whose high watermark is held by the strict min ISR rule
            "under_min_isr": self.isr.under_min_isr,
            "leads": len(self.metadata.led_by(self.broker_id)),
        }

    # ---------------------------------------------------------------- plumbing

    def _spawn(self, coro: Any) -> None:
        t = asyncio.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Task[None]) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and (exc := t.exception()) is not None:
            # _send and _send_alter handle their own errors: this is a bug in that
            # handling. The lifecycle's request deadline still frees the request.
            count_task_death(self.stats, f"broker {self.broker_id}: {t.get_coro()}", exc)

    def _on_metadata(self, offset: int) -> None:
        # Called for every agent of a fleet after every committed batch: keep it
        # cheap and wake the agent only when it has something to do now.
        lc = self.lifecycle
        if lc is None:
            return
        state = lc.state
        if state is BrokerState.STARTING:
            # the image just reached our registration: heartbeat at once (the run
            # loop reports later offsets with the next heartbeat anyway)
            if lc.registered and lc.metadata_offset < lc.broker_epoch <= offset:
                lc.set_metadata_offset(offset, self.clock())
                self._wake.set()
        elif state is BrokerState.RUNNING and self.metadata.leads_any(self.broker_id):
            self._wake.set()  # ISR decisions follow the leader's image

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
                    "broker_epoch": self.lifecycle.broker_epoch if self.lifecycle else -1,
                },
            )
            if self._on_state_change is not None:
                self._on_state_change(self.broker_id, change.old, change.new, change.reason)
        for send in out.sends:
            self._spawn(self._send(send))
        if out.exit_code is not None and self.exit_code is None:
            self.exit_code = out.exit_code
        self._wake.set()

    async def _send(self, send: Send) -> None:
        """Send one lifecycle request and hand its outcome to the lifecycle. Every
        outcome reaches it: an answer, an error answer, a transport failure, a body
        that is not a reply, and an exception of our own (logged with its traceback)."""
        lc = self.lifecycle
        assert lc is not None
        try:
            await self._exchange(lc, send)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self._unexpected(send.kind, exc)
            self._apply(lc.on_error(send.request_id, UNEXPECTED_ERROR, self.clock()))

    def _unexpected(self, kind: str, exc: BaseException) -> None:
        self.errors += 1
        self.stats.count_error(kind, UNEXPECTED_ERROR)
        log.error(
            "%s failed unexpectedly: %s: %s",
            kind,
            type(exc).__name__,
            exc,
            exc_info=exc,
            extra={"event": "agent_unexpected_error", "broker_id": self.broker_id, "kind": kind},
        )

    async def _exchange(self, lc: BrokerLifecycle, send: Send) -> None:
        url = self.controllers[send.controller] + PATHS[send.kind]
        session = self.heartbeat_session if send.kind == "heartbeat" else self.session
        started = time.perf_counter()  # latency as the broker sees it: the gate's wait too
        gate = self.gates.get(send.kind)
        if gate is not None:
            await gate.acquire(send_priority(lc, send))
        try:
            if not lc.waiting_for(send.request_id):
                return  # the lifecycle gave up on it while it waited at the gate
            lc.on_sent(send.request_id, self.clock())
            channel = self.heartbeat_channel
            if channel is not None and send.kind == "heartbeat":
                status, body = await channel.post(url, send.body, send.timeout_ms)
            else:
                status, body = await post_msgpack(
                    session, url, send.body, send.timeout_ms, self._headers, self._ssl
                )
        except TRANSPORT_ERRORS:
            self.errors += 1
            self.stats.count_error(send.kind, NETWORK)
            self._apply(lc.on_error(send.request_id, NETWORK, self.clock()))
            return
        finally:
            if gate is not None:
                gate.release()
        if status >= 400 or not isinstance(body, dict):
            code = error_code(status, body)
            hint = self.controller_index(body.get("leader_url")) if isinstance(body, dict) else None
            if code == "NOT_CONTROLLER" and hint is not None:
                self.stats.redirects += 1  # a redirect to the active controller, not a failure
            else:
                self.errors += 1
                self.stats.count_error(send.kind, code)
            if send.kind == "register" and code != "NOT_CONTROLLER":
                log.warning(
                    "registration refused: %s",
                    code,
                    extra={
                        "event": "register_error",
                        "broker_id": self.broker_id,
                        "error_code": code,
                        "http_status": status,
                        "reason": body.get("message") if isinstance(body, dict) else None,
                        "controller": self.controllers[send.controller],
                    },
                )
            self._apply(lc.on_error(send.request_id, code, self.clock(), hint))
            return
        if send.kind == "heartbeat":
            self.stats.record((time.perf_counter() - started) * 1000)
        elif send.kind == "register":
            log.info(
                "registered",
                extra={
                    "event": "registered",
                    "broker_id": self.broker_id,
                    "broker_epoch": body.get("broker_epoch"),
                    "incarnation_id": self.incarnation_id,
                },
            )
        self._apply(lc.on_response(send.request_id, body, self.clock()))

    async def _send_alter(self, send: AlterSend) -> None:
        """One AlterPartition; like _send, every outcome reaches the ISR manager."""
        lc = self.lifecycle
        assert lc is not None
        try:
            await self._exchange_alter(lc, send)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: logged, retried
            self._unexpected("alter", exc)
            self.isr.on_error(send.request_id, UNEXPECTED_ERROR, self.clock())
        self._wake.set()

    async def _exchange_alter(self, lc: BrokerLifecycle, send: AlterSend) -> None:
        url = self.controllers[lc.selector.current] + ALTER_PATH
        try:
            status, body = await post_msgpack(
                self.session, url, send.body, send.timeout_ms, self._headers, self._ssl
            )
        except TRANSPORT_ERRORS:
            self.isr.on_error(send.request_id, NETWORK, self.clock())
            self.stats.count_error("alter", NETWORK)
            return
        now = self.clock()
        if status >= 400 or not isinstance(body, dict):
            code = error_code(status, body)
            if code == "NOT_CONTROLLER" and isinstance(body, dict):
                hint = self.controller_index(body.get("leader_url"))
                if hint is not None:
                    lc.selector.on_hint(hint)
            self.isr.on_error(send.request_id, code, now)
            self.stats.count_error("alter", code)
            log.info(
                "AlterPartition refused",
                extra={
                    "event": "alter_partition_error",
                    "broker_id": self.broker_id,
                    "topic_id": send.key[0],
                    "partition_id": send.key[1],
                    "error_code": code,
                },
            )
        else:
            self.isr.on_response(send.request_id, body, now)
            self.stats.alter_partitions += 1
            log.info(
                "ISR changed",
                extra={
                    "event": "isr_" + send.reason,
                    "broker_id": self.broker_id,
                    "topic_id": send.key[0],
                    "partition_id": send.key[1],
                    "isr": body.get("isr"),
                    "partition_epoch": body.get("partition_epoch"),
                },
            )

    def _poll_isr(self, now: int) -> int | None:
        lc = self.lifecycle
        assert lc is not None
        led = self.metadata.led_by(self.broker_id)
        if not led and self.isr.in_flight == 0:
            return None
        running = lc.state is BrokerState.RUNNING and not lc.is_fenced
        for send in self.isr.poll(self.metadata.image, led, lc.broker_epoch, running, now):
            self._spawn(self._send_alter(send))
        return self.isr.next_wake_ms() if led or self.isr.in_flight else None

    # ---------------------------------------------------------------- running

    async def run(self) -> int:
        """Drive the lifecycle until it exits (controlled shutdown, timeout or a fatal error)."""
        try:
            cluster_id = None
            while cluster_id is None and not self._shutdown_requested and not self._stopped:
                cluster_id = await self.metadata.wait_cluster_id(1.0)
            if cluster_id is None:
                return 0  # asked to stop before we ever found the quorum
            self._start_lifecycle(cluster_id)
            if self._shutdown_requested:
                self.shutdown()
            lc = self.lifecycle
            assert lc is not None
            # A bug in one step is logged with its traceback and the step is tried
            # again after a bounded backoff: the agent keeps its session if it can.
            step_backoff = Backoff(100, 5_000, 0.2, self.rng)
            while self.exit_code is None and not self._stopped:
                try:
                    delay = self._step(lc)
                    step_backoff.reset()
                except Exception as exc:  # noqa: BLE001 - see above
                    self._unexpected("step", exc)
                    self._wake.clear()  # the backoff holds even if the failed step woke us
                    delay = step_backoff.next_delay_ms() / 1000
                if self.exit_code is not None:
                    break
                await wait_event(self._wake, min(delay, 5.0))
            self._persist_clean_shutdown(lc)
        finally:
            for t in list(self._tasks):
                t.cancel()
            for t in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        return self.exit_code or 0

    def _step(self, lc: BrokerLifecycle) -> float:
        """One turn of the run loop: feed the lifecycle and the ISR manager the time
        and the metadata offset, send what they ask; seconds until the next turn."""
        now = self.clock()
        lc.set_metadata_offset(self.metadata.committed_offset, now)
        self._apply(lc.tick(now))
        if self.exit_code is not None:
            return 0.0
        wake = lc.next_wake_ms()
        isr_wake = self._poll_isr(now)
        if isr_wake is not None:
            wake = min(wake, isr_wake)
        self._wake.clear()
        return max(0.0, (wake - self.clock()) / 1000)

    def _data_dir(self) -> str | None:
        d = self.settings.data_dir
        return None if d is None else d.replace("{id}", str(self.broker_id))

    def _persist_clean_shutdown(self, lc: BrokerLifecycle) -> None:
        """KIP-966: after a granted controlled shutdown, keep the broker epoch so the
        next start registers with it (a crash leaves no file: -1)."""
        directory = self._data_dir()
        if directory is None or not lc.clean_shutdown or lc.broker_epoch < 0:
            return
        try:
            clean_shutdown.write(directory, lc.broker_epoch)
        except OSError as e:
            # the shutdown itself was clean; the next start will read as unclean
            log.error(
                "cannot write the clean shutdown file in %s: %s",
                directory,
                e,
                extra={"event": "clean_shutdown_write_failed", "broker_id": self.broker_id},
            )
            return
        log.info(
            "clean shutdown recorded",
            extra={
                "event": "clean_shutdown",
                "broker_id": self.broker_id,
                "broker_epoch": lc.broker_epoch,
            },
        )

    def _start_lifecycle(self, cluster_id: str) -> None:
        s = self.settings
        directory = self._data_dir()
        previous = clean_shutdown.NO_EPOCH if directory is None else clean_shutdown.take(directory)
        config = LifecycleConfig(
            broker_id=self.broker_id,
            cluster_id=cluster_id,
            incarnation_id=self.incarnation_id,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            request_timeout_ms=s.request_timeout_ms,
            # at the gate for at most one request timeout (a heartbeat: the gate's
            # wait and the controller's answer together fit in the session)
            queue_timeout_ms=s.request_timeout_ms if self.gates else 0,
            controlled_shutdown_timeout_ms=s.controlled_shutdown_timeout_ms,
            listeners=(
                {
                    "name": "PLAINTEXT",
                    "host": s.host,
                    "port": s.listener_port,
                    "security_protocol": "PLAINTEXT",
                },
            ),
            rack=s.rack,
            features=(
                {
                    "name": METADATA_VERSION_FEATURE,
                    "min_supported_version": 1,
                    "max_supported_version": LATEST_METADATA_VERSION,
                },
                # KIP-966: this agent follows the ELR rules (clean shutdown file,
                # previous_broker_epoch), so the controller may finalize them
                {
                    "name": ELIGIBLE_LEADER_REPLICAS_FEATURE,
                    "min_supported_version": 0,
                    "max_supported_version": 1,
                },
            ),
            previous_broker_epoch=previous,
        )
        self.lifecycle = BrokerLifecycle(config, len(self.controllers), self.rng, self.clock())

    def stop(self) -> None:
        """Stop at once, without a controlled shutdown (a second signal, teardown)."""
        self._stopped = True
        self._wake.set()

    def shutdown(self) -> None:
        """SIGTERM/SIGINT: start a controlled shutdown (bounded by its timeout)."""
        self._shutdown_requested = True
        if self.lifecycle is not None:
            self._apply(self.lifecycle.begin_shutdown(self.clock()))
        self._wake.set()
