"""The broker lifecycle as a pure state machine (Kafka's BrokerLifecycleManager).

States: STARTING (registering, catching up with the metadata log) -> RECOVERY
(caught up, waiting to be unfenced) -> RUNNING -> PENDING_CONTROLLED_SHUTDOWN
(heartbeats carry want_shutdown) -> SHUTTING_DOWN. A RUNNING broker that the
controller fenced goes back to RECOVERY; STALE_BROKER_EPOCH (the controller lost
or replaced our registration) goes back to STARTING and registers again.

The machine takes events and `now_ms`, and hands back what to send (one request
in flight at a time) and when to wake. It picks the controller itself:
NOT_CONTROLLER hints first, else round-robin over the list, with bounded
exponential backoff and jitter from the seeded rng it is given (a hint is followed
at once, but at most once per controller between answers, so stale hints cannot
make it spin). A registration refused for a reason no retry can fix (a controller's
node id, a refused credential, a cluster id that every controller in the list
refuses) ends the machine with exit code 1. No I/O, no clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kraft.config import default_of

# Registration errors that no retry can fix (DESIGN 1.2: INVALID_REQUEST for a
# controller's node id or a malformed request, a refused credential).
FATAL_REGISTRATION_ERRORS = frozenset({"INVALID_REQUEST", "UNAUTHORIZED"})
# A cluster id mismatch is one controller's answer: a URL in the list may be
# another cluster's (a stale entry), and the others ours. Fatal once every
# controller in the list refused the cluster id in a row.
INCONSISTENT_CLUSTER_ID = "INCONSISTENT_CLUSTER_ID"

# Codes the agent itself gives a failed request (no controller sends them): the
# transport failed or timed out; the answer was not a valid reply (not msgpack, or
# a registration without an epoch); the agent's own code raised (a bug, logged with
# its traceback by the shell). Each is retried with backoff like an error answer.
NETWORK = "NETWORK"
INVALID_RESPONSE = "INVALID_RESPONSE"
UNEXPECTED_ERROR = "UNEXPECTED_ERROR"

# Errors after which the next attempt goes to another controller: this one is
# unreachable, overloaded, failing, or not speaking the protocol; or it refuses a
# credential another controller may take (one that has not reloaded a rotation
# yet: a registration refused so is final, anything later moves on).
ROTATE_ON = frozenset(
    {NETWORK, "REQUEST_TIMED_OUT", INVALID_RESPONSE, "UNKNOWN_SERVER_ERROR", "UNAUTHORIZED"}
)


def moves_on(code: str) -> bool:
    """Whether the next attempt after `code` goes to another controller. HTTP_<status>
    is an answer without the protocol's error body: whatever answers at that URL (a
    proxy, another service) is not a controller; asking it again cannot help."""
    return code in ROTATE_ON or code.startswith("HTTP_")


def _is_epoch(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class BrokerState(Enum):
    STARTING = "STARTING"
    RECOVERY = "RECOVERY"
    RUNNING = "RUNNING"
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    broker_id: int
    cluster_id: str
    incarnation_id: str
    heartbeat_interval_ms: int = default_of("broker.heartbeat.interval.ms")
    request_timeout_ms: int = 2000
    controlled_shutdown_timeout_ms: int = default_of("controlled.shutdown.timeout.ms")
    # How long a request may wait for the shell to put it on the wire (a fleet's
    # shared connections, broker_agent/send_gate.py) before its request timeout
    # starts (`on_sent`); a shell that sends at once calls on_sent at once.
    queue_timeout_ms: int = 0
    backoff_initial_ms: int = 100
    backoff_max_ms: int = 5_000
    backoff_jitter: float = 0.2
    # A failed connection (NETWORK) is retried after the backoff plus up to this much
    # more, drawn per broker: a fleet that lost its controller together must not
    # reconnect within the same few ms (+-20% of 100 ms spread 10,000 brokers over
    # 40 ms, a handshake storm on the next controller; issue 25).
    reconnect_jitter_ms: int = 1_000
    listeners: tuple[dict[str, Any], ...] = ()
    rack: str | None = None
    features: tuple[dict[str, Any], ...] = ()
    # KIP-966: the broker epoch this broker had when it last shut down cleanly
    # (read from its clean shutdown file), -1 after an unclean shutdown or none.
    previous_broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Send:
    """Send `body` to controller `controller` (an index into the list) at `path`."""

    request_id: int
    controller: int
    kind: str  # "register" | "heartbeat"
    body: dict[str, Any]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class StateChange:
    old: BrokerState
    new: BrokerState
    reason: str


@dataclass
class Output:
    sends: list[Send] = field(default_factory=list)
    changes: list[StateChange] = field(default_factory=list)
    exit_code: int | None = None


class Backoff:
    """Exponential backoff with jitter, bounded: initial * 2^n capped at max."""

    def __init__(self, initial_ms: int, max_ms: int, jitter: float, rng: random.Random) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.jitter = jitter
        self.rng = rng
        self.attempts = 0

    def next_delay_ms(self) -> int:
        base = min(self.max_ms, self.initial_ms * (2 ** min(self.attempts, 30)))
        self.attempts += 1
        spread = base * self.jitter
        return int(min(self.max_ms, max(0.0, base + self.rng.uniform(-spread, spread))))

    def reset(self) -> None:
        self.attempts = 0


class ControllerSelector:
    """Which controller to ask: the hinted leader if known, else round-robin."""

    def __init__(self, count: int, rng: random.Random) -> None:
        if count < 1:
            raise ValueError("at least one controller address is needed")
        self.count = count
        self.current = rng.randrange(count)

    def on_hint(self, index: int | None) -> None:
        if index is not None and 0 <= index < self.count:
            self.current = index
        else:
            self.rotate()

    def rotate(self) -> None:
        self.current = (self.current + 1) % self.count

    def grow(self, count: int) -> None:
        """Controllers learned since (a NOT_CONTROLLER hint naming one the agent was
        not given): they join the round."""
        if count > self.count:
            self.count = count


class BrokerLifecycle:
    def __init__(
        self, config: LifecycleConfig, controllers: int, rng: random.Random, now_ms: int
    ) -> None:
        self.config = config
        self.rng = rng
        self.state = BrokerState.STARTING
        self.broker_epoch = -1
        self.metadata_offset = -1
        self.is_fenced = True
        self.selector = ControllerSelector(controllers, rng)
        self.backoff = Backoff(
            config.backoff_initial_ms, config.backoff_max_ms, config.backoff_jitter, rng
        )
        self._in_flight: Send | None = None
        self._in_flight_deadline = 0
        self._in_flight_sent = False
        self._next_send_ms = now_ms  # register at once
        self._next_request_id = 1
        self._shutdown_deadline_ms: int | None = None
        self._hint_hops = 0  # hints followed at once since the last answer
        # Registrations refused INCONSISTENT_CLUSTER_ID in a row (by distinct
        # controllers, as each refusal moves on to the next).
        self._cluster_refusals = 0
        self.errors = 0
        self.fatal: str | None = None
        # Sent with every registration (KIP-966 PreviousBrokerEpoch). After this
        # process registered once, a re-registration (a stale epoch) carries the
        # epoch it had: nothing was lost, so the controller keeps it in the ELRs.
        self.previous_broker_epoch = config.previous_broker_epoch
        # Set when the shutdown was clean: the shell then persists broker_epoch.
        self.clean_shutdown = False

    # ---------------------------------------------------------------- helpers

    def _change(self, out: Output, new: BrokerState, reason: str) -> None:
        if new is not self.state:
            out.changes.append(StateChange(self.state, new, reason))
            self.state = new

    @property
    def registered(self) -> bool:
        return self.broker_epoch >= 0

    def next_wake_ms(self) -> int:
        times = [self._next_send_ms]
        if self._in_flight is not None:
            times = [self._in_flight_deadline]
        if self._shutdown_deadline_ms is not None:
            times.append(self._shutdown_deadline_ms)
        return min(times)

    def _request(self, now_ms: int) -> Send:
        rid = self._next_request_id
        self._next_request_id += 1
        if not self.registered:
            body: dict[str, Any] = {
                "broker_id": self.config.broker_id,
                "cluster_id": self.config.cluster_id,
                "incarnation_id": self.config.incarnation_id,
                "listeners": list(self.config.listeners),
                "rack": self.config.rack,
                "features": list(self.config.features),
                "previous_broker_epoch": self.previous_broker_epoch,
            }
            kind = "register"
        else:
            body = {
                "broker_id": self.config.broker_id,
                "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self.metadata_offset,
                # Until the controller says we caught up, ask to stay fenced (Kafka's
                # readyToUnfence); RECOVERY asks to be unfenced.
                "want_fence": self.state is BrokerState.STARTING,
                "want_shutdown": self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN,
            }
            kind = "heartbeat"
        send = Send(rid, self.selector.current, kind, body, self.config.request_timeout_ms)
        self._in_flight = send
        # without a queue (queue_timeout_ms 0) a request is on the wire at once
        self._in_flight_sent = self.config.queue_timeout_ms == 0
        self._in_flight_deadline = (
            now_ms + self.config.queue_timeout_ms + self.config.request_timeout_ms
        )
        return send

    def waiting_for(self, request_id: int) -> bool:
        """Whether the request is still in flight (not answered, timed out or dropped)."""
        return self._in_flight is not None and self._in_flight.request_id == request_id

    def on_sent(self, request_id: int, now_ms: int) -> None:
        """The shell put the request on the wire: its request timeout starts now."""
        if self.waiting_for(request_id):
            self._in_flight_sent = True
            self._in_flight_deadline = now_ms + self.config.request_timeout_ms

    def _retry_later(self, now_ms: int, reconnect: bool = False) -> None:
        delay = self.backoff.next_delay_ms()
        if reconnect and self.config.reconnect_jitter_ms > 0:
            jitter = int(self.rng.uniform(0, self.config.reconnect_jitter_ms))
            delay = min(self.config.backoff_max_ms, delay + jitter)
        if self.registered:
            # a registered broker must keep its session: never wait longer than an interval
            delay = min(delay, self.config.heartbeat_interval_ms)
        self._next_send_ms = now_ms + delay

    # ---------------------------------------------------------------- events

    def tick(self, now_ms: int) -> Output:
        out = Output()
        if self.state is BrokerState.SHUTTING_DOWN:
            return out
        if self._shutdown_deadline_ms is not None and now_ms >= self._shutdown_deadline_ms:
            self._change(out, BrokerState.SHUTTING_DOWN, "controlled shutdown timed out")
            out.exit_code = 0
            return out
        if self._in_flight is not None and now_ms >= self._in_flight_deadline:
            # the controller did not answer in time: skip it (but a request that never
            # left the shell's queue says nothing about the controller)
            self._in_flight = None
            self.errors += 1
            if self._in_flight_sent:
                self.selector.rotate()
            self._retry_later(now_ms)
        if self._in_flight is None and now_ms >= self._next_send_ms:
            out.sends.append(self._request(now_ms))
        return out

    def set_metadata_offset(self, offset: int, now_ms: int | None = None) -> None:
        """The follower's committed offset. With `now_ms`, a STARTING broker whose
        follower just reached its own registration heartbeats at once instead of
        waiting an interval to learn that it caught up."""
        old = self.metadata_offset
        self.metadata_offset = max(old, offset)
        if (
            now_ms is not None
            and self.state is BrokerState.STARTING
            and self.registered
            and old < self.broker_epoch <= self.metadata_offset
        ):
            self._next_send_ms = min(self._next_send_ms, now_ms)

    def begin_shutdown(self, now_ms: int) -> Output:
        """SIGTERM: controlled shutdown if registered, bounded by its timeout."""
        out = Output()
        if self.state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return out
        if not self.registered or self.is_fenced:
            # nothing leads here yet: no controlled shutdown needed
            self._change(out, BrokerState.SHUTTING_DOWN, "shutdown before being unfenced")
            self.clean_shutdown = self.registered
            out.exit_code = 0
            return out
        self._change(out, BrokerState.PENDING_CONTROLLED_SHUTDOWN, "shutdown requested")
        self._shutdown_deadline_ms = now_ms + self.config.controlled_shutdown_timeout_ms
        self._next_send_ms = now_ms  # tell the controller at once
        out.sends.extend(self.tick(now_ms).sends)
        return out

    def on_response(self, request_id: int, reply: dict[str, Any], now_ms: int) -> Output:
        out = Output()
        if (
            self._in_flight is None
            or self._in_flight.request_id != request_id
            or self.state is BrokerState.SHUTTING_DOWN
        ):
            return out  # a late answer to a request we gave up on
        answered = self._in_flight
        kind = answered.kind
        if (
            not _is_epoch(reply.get("broker_epoch"))
            if kind == "register"
            else type(reply.get("is_fenced")) is not bool
        ):
            # A 2xx answer that is not a registration or a heartbeat's (a proxy's
            # page, a truncated body): an error like any other, retried with
            # backoff elsewhere, not read as "fenced" (which would flip a running
            # broker back to RECOVERY on every such answer).
            return self.on_error(request_id, INVALID_RESPONSE, now_ms)
        self._in_flight = None
        self.backoff.reset()
        self._hint_hops = 0
        self._cluster_refusals = 0
        if kind == "register":
            self.broker_epoch = int(reply["broker_epoch"])
            self.previous_broker_epoch = self.broker_epoch
            self.is_fenced = True
            self._next_send_ms = now_ms  # first heartbeat at once
            return out
        self._next_send_ms = now_ms + self.config.heartbeat_interval_ms
        self.is_fenced = bool(reply.get("is_fenced", True))
        caught_up = bool(reply.get("is_caught_up", False))
        if reply.get("should_shut_down"):
            self._change(out, BrokerState.SHUTTING_DOWN, "controller granted shutdown")
            self.clean_shutdown = True
            out.exit_code = 0
            return out
        if self.state is BrokerState.STARTING and caught_up:
            self._change(out, BrokerState.RECOVERY, "caught up with the metadata log")
            self._next_send_ms = now_ms  # ask to be unfenced without waiting an interval
        elif (
            self.state is BrokerState.STARTING
            and answered.body["current_metadata_offset"] < self.broker_epoch <= self.metadata_offset
        ):
            # we reached our registration while this heartbeat was in flight: tell it now
            self._next_send_ms = now_ms
        if self.state is BrokerState.RECOVERY and not self.is_fenced:
            self._change(out, BrokerState.RUNNING, "unfenced")
        elif self.state is BrokerState.RUNNING and self.is_fenced:
            self._change(out, BrokerState.RECOVERY, "fenced by the controller")
        if self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if not answered.body.get("want_shutdown"):
                self._next_send_ms = now_ms  # sent before SIGTERM: ask to shut down now
            else:
                # keep asking often while shutting down
                self._next_send_ms = now_ms + min(self.config.heartbeat_interval_ms, 500)
        return out

    def on_error(
        self, request_id: int, code: str, now_ms: int, leader_hint: int | None = None
    ) -> Output:
        """An error answer (Kafka error name) or a transport failure ("NETWORK")."""
        out = Output()
        if (
            self._in_flight is None
            or self._in_flight.request_id != request_id
            or self.state is BrokerState.SHUTTING_DOWN
        ):
            return out
        failed = self._in_flight
        self._in_flight = None
        self.errors += 1
        if code == "NOT_CONTROLLER":
            self.selector.on_hint(leader_hint)
            if (
                leader_hint is not None
                and leader_hint != failed.controller
                and self._hint_hops < self.selector.count
            ):
                # A fresh hint: ask the leader at once. Bounded, so that two
                # controllers with stale views cannot bounce us without backoff.
                self._hint_hops += 1
                self._next_send_ms = now_ms
                return out
        elif (
            failed.kind == "register"
            and code == INCONSISTENT_CLUSTER_ID
            and (self._cluster_refusals + 1 < self.selector.count)
        ):
            self._cluster_refusals += 1
            self.selector.rotate()  # that URL serves another cluster: try the next
        elif failed.kind == "register" and (
            code in FATAL_REGISTRATION_ERRORS or code == INCONSISTENT_CLUSTER_ID
        ):
            # A configuration error (wrong cluster everywhere, a controller's node
            # id, a refused credential): retrying cannot help. Exit non-zero with
            # the controller's reason.
            self.fatal = code
            self._change(out, BrokerState.SHUTTING_DOWN, f"registration refused: {code}")
            out.exit_code = 1
            return out
        elif code == "STALE_BROKER_EPOCH":
            self.broker_epoch = -1
            self.is_fenced = True
            if self.state is not BrokerState.PENDING_CONTROLLED_SHUTDOWN:
                self._change(out, BrokerState.STARTING, "stale broker epoch: registering again")
            else:
                # our registration is gone while shutting down: nothing left to move
                self._change(out, BrokerState.SHUTTING_DOWN, "registration lost during shutdown")
                out.exit_code = 0
                return out
        elif moves_on(code):
            self.selector.rotate()
        self._retry_later(now_ms, reconnect=code == NETWORK)
        return out
