"""Who gets a connection on a controller listener: decisions only (Kafka's ConnectionQuotas).

Why: one listener carries Raft, heartbeats and admin. Refusing every connection
beyond `max.connections` let 1,200 half-open connections (each a half-sent
request head, re-opened when closed) lock every newcomer out: an operator, a
restarted broker, a restarted follower controller (issue 25). The rules, with
Kafka's names where Kafka has one:

- `max.connections` (1000): at the limit a newcomer closes the oldest connection
  that has not yet completed a request head ("unestablished") instead of being
  refused; a connection that completed one is established and is never closed
  for a newcomer (KIP-402's spirit: protect the useful connections). Only when
  every connection is established is a newcomer refused.
- `max.connections.per.ip` (+ `max.connections.per.ip.overrides`, Kafka's
  `host:count,host:count`): one host can hold at most this many (open or waiting).
- `max.connection.creation.rate` (KIP-612, per listener and second): a token
  bucket. As in Kafka a connection over the rate is delayed, not refused: it waits
  (accepted, no transport yet) for a token, and the waiting hosts are served
  round-robin, so a host opening thousands of connections does not push another
  host's one connection to the back of a long line. It waits at most the head
  deadline, then is refused.
- `connections.request.head.timeout.ms` (10 s): a connection that has not
  completed a request head (TLS handshake included) this long after it started
  is closed.
- TLS handshakes (a TLS listener): a handshake costs ~1 ms of the event loop's
  CPU, so 10,000 brokers connecting at once held the loop for seconds (issue 25).
  A handshake starts when the listener's handshake bucket has a token
  (`handshake_rate` a second, at most `handshake_burst` at once: KIP-612's token
  bucket, for handshakes) and fewer than `max_handshakes` are under way; others
  wait in line (hosts taking turns, each host's oldest first), up to the head
  timeout. Its head deadline is then counted from the handshake's start, so
  waiting in line never makes a finished handshake worthless. A handshake is
  under way until it ends, fails or its connection closes (a stalled one until
  its head deadline): the start rate bounds the CPU, the count bounds what a
  burst of completing handshakes can cost at once. Why not slots held for a
  fixed time: the line used to free a slot after 250 ms of wall time, and a
  handshake's wall time is mostly the peer's and the loop's lag, not its ~1 ms
  of CPU; under load every handshake lasted 250 ms or more, the line started
  32 / 0.25 s = 128 a second against 500 a second arriving, and the rest of the
  fleet reached its head deadline in line (about 23,600 evictions in two minutes
  of a 10,000-broker mTLS run; tests/unit/security/test_connection_quotas.py
  replays it with a fake clock).
- The voters' hosts (Raft peers, known from the voter set) are exempt from the
  per-IP limit and the creation rate, and when the listener is full of
  established connections they may go over `max.connections` by a reserved room:
  capacity no client can use up. Their connections never wait in the handshake
  line nor take its tokens: Raft is served first.

Pure: connection ids are the shell's ints, time is `now_ms`, and whether a
connection has completed a request is asked of the `established` predicate
lazily, when it matters (at an eviction or its head deadline), so the request
path pays nothing. Only the caller's calls change state.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue

# Reasons, as they appear in metrics labels and logs: the config key that decided.
MAX_CONNECTIONS = "max.connections"
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
CREATION_RATE = "max.connection.creation.rate"
HEAD_TIMEOUT = "connections.request.head.timeout.ms"
REFUSAL_REASONS = (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP, CREATION_RATE)
EVICTION_REASONS = (MAX_CONNECTIONS, HEAD_TIMEOUT)

# Room over max.connections for each voter's host: the Raft transport keeps up to
# 8 connections per peer (kraft.raft_shell.transport), twice that covers a restarted
# peer whose old connections are still being torn down.
ROOM_PER_VOTER = 16


class QuotaConfigError(ValueError):
    """A bad max.connections.per.ip.overrides value, naming the item at fault."""


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """Kafka's `max.connections.per.ip.overrides`: `host:count,host:count` (an IPv6
    address keeps its colons: the count is after the last one)."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise QuotaConfigError(f"item {item!r} is not of the form HOST:COUNT")
        if host in out:
            raise QuotaConfigError(f"host {host!r} appears twice")
        out[host] = int(count)
    return out


@dataclass(frozen=True)
class ConnectionQuotaConfig:
    max_connections: int = 1000
    max_connections_per_ip: int = UNLIMITED
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = UNLIMITED  # per second, for the listener
    request_head_timeout_ms: int = 10_000
    max_handshakes: int = UNLIMITED  # TLS handshakes under way at once
    handshake_rate: int = UNLIMITED  # TLS handshakes started per second
    handshake_burst: int = 32  # the handshake bucket's size: starts at one moment

    @classmethod
    def from_settings(cls, settings: Any) -> ConnectionQuotaConfig:
        """From a kraft.config.Config or NodeSettings; a key it lacks takes the
        registry's default."""
        from kraft.config import KEYS

        def get(name: str) -> Any:
            value = settings.get(name)
            return KEYS[name].default if value is None else value

        return cls(
            max_connections=get("max.connections"),
            max_connections_per_ip=get("max.connections.per.ip"),
            per_ip_overrides=parse_per_ip_overrides(get("max.connections.per.ip.overrides")),
            max_connection_creation_rate=get("max.connection.creation.rate"),
            request_head_timeout_ms=get("connections.request.head.timeout.ms"),
        )


@dataclass(frozen=True)
class QuotaActions:
    """What the shell must do now: give these ids a transport, close these
    (already accepted) connections, refuse these waiting or new ones."""

    admit: tuple[int, ...] = ()
    evict: tuple[tuple[int, str], ...] = ()
    refuse: tuple[tuple[int, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.admit or self.evict or self.refuse)


_NOTHING = QuotaActions()


@dataclass
class _Conn:
    ip: str
    since_ms: int  # started (open), admitted (queued for a slot) or accepted (waiting)
    protected: bool


class ConnectionQuotas:
    """The listener's connections: open (admitted) and waiting for a creation token."""

    def __init__(
        self,
        config: ConnectionQuotaConfig,
        now_ms: int,
        established: Callable[[int], bool],
        protected_hosts: Iterable[str] = (),
    ) -> None:
        self.config = config
        self._established = established
        self._protected: frozenset[str] = frozenset()
        self.set_protected_hosts(protected_hosts)
        self._open: dict[int, _Conn] = {}
        # Open connections not yet known to be established (queued for a handshake
        # slot or started), by since_ms, oldest first.
        self._unestablished: OrderedDict[int, None] = OrderedDict()
        self._queued: dict[int, None] = {}  # open, not started
        # the line for handshake slots: per host, oldest first; hosts take turns
        self._line_by_ip: dict[str, deque[int]] = {}
        self._line_turns: deque[str] = deque()
        self._slots: set[int] = set()  # non-voters' handshakes under way
        # the handshake line exists on a TLS listener only (a bound or a rate given)
        self._line = config.max_handshakes < UNLIMITED or config.handshake_rate < UNLIMITED
        self._hs_rate = max(1, config.handshake_rate)
        self._hs_burst = float(max(1, config.handshake_burst))
        self._hs_tokens = self._hs_burst  # a full bucket
        self._hs_refilled_ms = now_ms
        self._waiting: OrderedDict[int, _Conn] = OrderedDict()  # oldest first
        self._waiting_by_ip: dict[str, deque[int]] = {}
        self._turns: deque[str] = deque()  # hosts with waiting connections, round-robin
        self._per_ip: dict[str, int] = {}  # open + waiting, per host
        self._rate = max(1, config.max_connection_creation_rate)
        self._tokens = float(self._rate)  # a full bucket: one second's worth
        self._refilled_ms = now_ms
        self._last_ms = now_ms  # the latest time this core was told
        self.refused = dict.fromkeys(REFUSAL_REASONS, 0)
        self.evicted = dict.fromkeys(EVICTION_REASONS, 0)
        self.admitted = 0

    # ------------------------------------------------------------ views

    @property
    def open_count(self) -> int:
        return len(self._open)

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    @property
    def queued_count(self) -> int:
        """Open connections waiting for a handshake slot."""
        return len(self._queued)

    @property
    def handshaking_count(self) -> int:
        """Non-voters' handshakes under way."""
        return len(self._slots)

    @property
    def room(self) -> int:
        """How far voters' hosts may go over max.connections."""
        return ROOM_PER_VOTER * len(self._protected)

    def connections_of(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)

    def limit_of(self, ip: str) -> int:
        return self.config.per_ip_overrides.get(ip, self.config.max_connections_per_ip)

    def is_protected(self, ip: str) -> bool:
        return ip in self._protected

    def set_protected_hosts(self, hosts: Iterable[str]) -> None:
        """The voters' addresses (IP text, as the shell sees peers)."""
        self._protected = frozenset(hosts)

    def next_deadline_ms(self) -> int | None:
        """When `poll` has something to do: a head deadline, a waiting connection's
        deadline, or the next creation token for a waiting connection."""
        timeout = self.config.request_head_timeout_ms
        times = []
        if self._unestablished:
            first = next(iter(self._unestablished))
            times.append(self._open[first].since_ms + timeout)
        if self._waiting:
            first_waiting = next(iter(self._waiting.values()))
            times.append(first_waiting.since_ms + timeout)
            missing = max(0.0, 1.0 - self._tokens)
            times.append(self._refilled_ms + int(missing * 1000 / self._rate) + 1)
        if self._queued and len(self._slots) < self.config.max_handshakes:
            # the next handshake token (a full slot count waits for an end instead)
            missing = max(0.0, 1.0 - self._hs_tokens)
            times.append(self._hs_refilled_ms + math.ceil(missing * 1000 / self._hs_rate))
        return min(times) if times else None

    # ------------------------------------------------------------ events

    def on_accept(self, conn_id: int, ip: str, now_ms: int) -> QuotaActions:
        """A new TCP connection from `ip`: admit it, make it wait, or refuse it."""
        self._last_ms = max(self._last_ms, now_ms)
        protected = ip in self._protected
        if not protected and self.connections_of(ip) >= self.limit_of(ip):
            self.refused[MAX_CONNECTIONS_PER_IP] += 1
            return QuotaActions(refuse=((conn_id, MAX_CONNECTIONS_PER_IP),))
        if protected:  # Raft peers: never throttled
            return self._admit(conn_id, _Conn(ip, now_ms, True), now_ms)
        self._refill(now_ms)
        if not self._waiting and self._tokens >= 1.0:
            self._tokens -= 1.0
            return self._admit(conn_id, _Conn(ip, now_ms, False), now_ms)
        if len(self._waiting) >= self.config.max_connections:
            self.refused[CREATION_RATE] += 1
            return QuotaActions(refuse=((conn_id, CREATION_RATE),))
        self._wait(conn_id, ip, now_ms)
        return _NOTHING

    def on_ready(self, conn_id: int, now_ms: int) -> QuotaActions:
        """Its transport is ready (the TLS handshake completed): its slot goes to the
        next in line."""
        if conn_id not in self._slots:
            return _NOTHING
        self._slots.discard(conn_id)
        return self._start_queued(now_ms)

    def on_closed(self, conn_id: int, now_ms: int | None = None) -> QuotaActions:
        """The connection is gone (closed by either side, or refused). Idempotent.
        Its handshake slot, if it held one, goes to the next in line (started at
        `now_ms`; without it, at the last time this core was told)."""
        conn = self._open.pop(conn_id, None)
        if conn is not None:
            self._unestablished.pop(conn_id, None)
            self._unqueue(conn_id)
        else:
            conn = self._waiting.pop(conn_id, None)  # its per-host queue entry goes lazily
        if conn is not None:
            self._forget(conn.ip)
        if conn_id not in self._slots:
            return _NOTHING
        self._slots.discard(conn_id)
        return self._start_queued(self._last_ms if now_ms is None else now_ms)

    def poll(self, now_ms: int) -> QuotaActions:
        """Head deadlines, waiting connections' deadlines, tokens for the waiting,
        handshake slots for the queued."""
        self._last_ms = max(self._last_ms, now_ms)
        evict: list[tuple[int, str]] = []
        refuse: list[tuple[int, str]] = []
        admit: list[int] = []
        timeout = self.config.request_head_timeout_ms
        while self._unestablished:
            conn_id = next(iter(self._unestablished))
            if self._open[conn_id].since_ms + timeout > now_ms:
                break
            del self._unestablished[conn_id]
            if not self._established(conn_id):
                self._drop_open(conn_id)
                self.evicted[HEAD_TIMEOUT] += 1
                evict.append((conn_id, HEAD_TIMEOUT))
        if self._queued:  # handshake tokens came since
            admit.extend(self._start_queued(now_ms).admit)
        while self._waiting:
            conn_id, conn = next(iter(self._waiting.items()))
            if conn.since_ms + timeout > now_ms:
                break
            self.on_closed(conn_id)
            self.refused[CREATION_RATE] += 1
            refuse.append((conn_id, CREATION_RATE))
        self._refill(now_ms)
        while self._waiting and self._tokens >= 1.0:
            conn_id = self._next_waiting()
            conn = self._waiting.pop(conn_id)
            self._tokens -= 1.0
            out = self._admit(conn_id, _Conn(conn.ip, now_ms, False), now_ms, counted=True)
            admit.extend(out.admit)
            evict.extend(out.evict)
            refuse.extend(out.refuse)
        if not (admit or evict or refuse):
            return _NOTHING
        return QuotaActions(tuple(admit), tuple(evict), tuple(refuse))

    # ------------------------------------------------------------ internals

    def _admit(self, conn_id: int, conn: _Conn, now_ms: int, counted: bool = False) -> QuotaActions:
        """Give it a slot: a free one, unestablished connections', or (a voter's host
        only) the reserved room, which nobody else ever takes: a newcomer from
        elsewhere brings the count under max.connections. `counted`: its host
        already counts it."""
        limit = self.config.max_connections
        evict: list[tuple[int, str]] = []
        while len(self._open) >= limit:
            victim = self._oldest_unestablished()
            if victim is not None:
                self._drop_open(victim)
                self.evicted[MAX_CONNECTIONS] += 1
                evict.append((victim, MAX_CONNECTIONS))
                if conn.protected:
                    break
            elif conn.protected and len(self._open) < limit + self.room:
                break
            else:
                if counted:
                    self._forget(conn.ip)
                self.refused[MAX_CONNECTIONS] += 1
                return QuotaActions(evict=tuple(evict), refuse=((conn_id, MAX_CONNECTIONS),))
        self._open[conn_id] = conn
        self._unestablished[conn_id] = None
        if not counted:
            self._per_ip[conn.ip] = self._per_ip.get(conn.ip, 0) + 1
        self.admitted += 1
        if not conn.protected and (self._queued or not self._free_slot(now_ms)):
            self._queue(conn_id, conn.ip)  # its turn comes with a free slot
            return QuotaActions(evict=tuple(evict))
        self._take_slot(conn_id, conn, now_ms)
        return QuotaActions(admit=(conn_id,), evict=tuple(evict))

    def _take_slot(self, conn_id: int, conn: _Conn, now_ms: int) -> None:
        """It starts now: its head deadline counts from here (a connection that
        waited in line has lost nothing); a voter's takes no token and no slot."""
        if conn.since_ms != now_ms and conn_id in self._unestablished:
            conn.since_ms = now_ms
            self._unestablished.move_to_end(conn_id)  # since_ms order holds
        if not conn.protected and self._line:
            self._slots.add(conn_id)
            if self.config.handshake_rate < UNLIMITED:
                self._hs_tokens -= 1.0

    def _free_slot(self, now_ms: int) -> bool:
        """May a handshake start at `now_ms`: a token in the handshake bucket and
        fewer than max_handshakes under way?"""
        if not self._line:
            return True
        if len(self._slots) >= self.config.max_handshakes:
            return False
        if now_ms > self._hs_refilled_ms:
            self._hs_tokens = min(
                self._hs_burst,
                self._hs_tokens + (now_ms - self._hs_refilled_ms) * self._hs_rate / 1000,
            )
            self._hs_refilled_ms = now_ms
        return self._hs_tokens >= 1.0 or self.config.handshake_rate >= UNLIMITED

    def _queue(self, conn_id: int, ip: str) -> None:
        self._queued[conn_id] = None
        line = self._line_by_ip.get(ip)
        if line is None:
            line = self._line_by_ip[ip] = deque()
            self._line_turns.append(ip)
        line.append(conn_id)

    def _unqueue(self, conn_id: int) -> None:
        """Out of the line (its host's entry goes lazily, or all at once when the line
        is empty)."""
        if conn_id in self._queued and self._queued.pop(conn_id) is None and not self._queued:
            self._line_by_ip.clear()
            self._line_turns.clear()

    def _next_in_line(self) -> int:
        """The next host's oldest queued connection, hosts taking turns: a host that
        floods the line with stalled handshakes (each under way until its head
        deadline) does not push another host's one connection back."""
        while True:
            ip = self._line_turns.popleft()
            line = self._line_by_ip[ip]
            while line and line[0] not in self._queued:
                line.popleft()  # gone while in line
            if not line:
                del self._line_by_ip[ip]
                continue
            conn_id = line.popleft()
            if line:
                self._line_turns.append(ip)
            else:
                del self._line_by_ip[ip]
            return conn_id

    def _start_queued(self, now_ms: int) -> QuotaActions:
        """Start queued connections, hosts taking turns, while slots are free."""
        self._last_ms = max(self._last_ms, now_ms)
        now_ms = self._last_ms  # since_ms never goes back: the deadline order holds
        admit: list[int] = []
        while self._queued and self._free_slot(now_ms):
            conn_id = self._next_in_line()
            del self._queued[conn_id]
            self._take_slot(conn_id, self._open[conn_id], now_ms)
            admit.append(conn_id)
        return QuotaActions(admit=tuple(admit)) if admit else _NOTHING

    def _oldest_unestablished(self) -> int | None:
        while self._unestablished:
            conn_id, _ = self._unestablished.popitem(last=False)
            if not self._established(conn_id):
                return conn_id
        return None

    def _drop_open(self, conn_id: int) -> None:
        conn = self._open.pop(conn_id)
        self._unqueue(conn_id)
        self._slots.discard(conn_id)
        self._forget(conn.ip)

    def _forget(self, ip: str) -> None:
        n = self._per_ip[ip] - 1
        if n:
            self._per_ip[ip] = n
        else:
            del self._per_ip[ip]

    def _wait(self, conn_id: int, ip: str, now_ms: int) -> None:
        self._waiting[conn_id] = _Conn(ip, now_ms, False)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        queue = self._waiting_by_ip.get(ip)
        if queue is None:
            queue = self._waiting_by_ip[ip] = deque()
            self._turns.append(ip)
        queue.append(conn_id)

    def _next_waiting(self) -> int:
        """The next host's oldest waiting connection, hosts taking turns."""
        while True:
            ip = self._turns.popleft()
            queue = self._waiting_by_ip[ip]
            while queue and queue[0] not in self._waiting:
                queue.popleft()  # gone while waiting
            if not queue:
                del self._waiting_by_ip[ip]
                continue
            conn_id = queue.popleft()
            if queue:  # (it may hold only connections gone since: skipped next turn)
                self._turns.append(ip)
            else:
                del self._waiting_by_ip[ip]
            return conn_id

    def _refill(self, now_ms: int) -> None:
        if now_ms > self._refilled_ms:
            rate = self._rate
            self._tokens = min(
                float(rate), self._tokens + (now_ms - self._refilled_ms) * rate / 1000
            )
            self._refilled_ms = now_ms
