"""Connection quotas (issue 25), the pure core: eviction at max.connections,
max.connections.per.ip and its overrides, max.connection.creation.rate (delay with
hosts taking turns), the request-head deadline and the voters' protected room. Fake
clock, fake `established` predicate; a seeded random walk checks the invariants."""

from __future__ import annotations

import random

import pytest

from kraft.config import CONTROLLER_KEYS, ConfigError, load_config
from kraft.server.connection_quotas import (
    CREATION_RATE,
    HEAD_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    ROOM_PER_VOTER,
    UNLIMITED,
    ConnectionQuotaConfig,
    ConnectionQuotas,
    QuotaActions,
    QuotaConfigError,
    parse_per_ip_overrides,
)

VOTER = "10.0.0.1"


class Harness:
    """A ConnectionQuotas with a fake clock; `established` is a set the test fills."""

    def __init__(self, **config: object) -> None:
        self.now = 1_000
        self.established: set[int] = set()
        self.q = ConnectionQuotas(
            ConnectionQuotaConfig(**config),  # type: ignore[arg-type]
            self.now,
            self.established.__contains__,
            protected_hosts=[VOTER],
        )
        self.ids = iter(range(1, 1_000_000))
        self.open: set[int] = set()  # what the shell would hold

    def connect(self, ip: str) -> tuple[int, QuotaActions]:
        conn_id = next(self.ids)
        return conn_id, self.apply(self.q.on_accept(conn_id, ip, self.now))

    def apply(self, actions: QuotaActions) -> QuotaActions:
        # (one poll may admit a waiting connection and then evict it for the next)
        self.open.update(actions.admit)
        for conn_id, _ in actions.evict:
            assert conn_id in self.open
            self.open.discard(conn_id)
        return actions

    def tick(self, ms: int) -> QuotaActions:
        self.now += ms
        return self.apply(self.q.poll(self.now))


# ------------------------------------------------------------ max.connections


def test_at_the_limit_a_newcomer_evicts_the_oldest_connection_without_a_request() -> None:
    h = Harness(max_connections=3)
    a, _ = h.connect("1.1.1.1")
    b, _ = h.connect("1.1.1.2")
    c, _ = h.connect("1.1.1.3")
    h.established.add(a)  # a completed a request: never evicted for a newcomer
    d, out = h.connect("1.1.1.4")
    assert out.admit == (d,) and out.evict == ((b, MAX_CONNECTIONS),)
    e, out = h.connect("1.1.1.5")
    assert out.evict == ((c, MAX_CONNECTIONS),)
    assert h.open == {a, d, e} and h.q.open_count == 3
    assert h.q.evicted[MAX_CONNECTIONS] == 2 and h.q.refused[MAX_CONNECTIONS] == 0


def test_when_every_connection_is_established_a_newcomer_is_refused() -> None:
    h = Harness(max_connections=2)
    a, _ = h.connect("1.1.1.1")
    b, _ = h.connect("1.1.1.2")
    h.established |= {a, b}
    c, out = h.connect("1.1.1.3")
    assert out == QuotaActions(refuse=((c, MAX_CONNECTIONS),))
    assert h.q.refused[MAX_CONNECTIONS] == 1 and h.q.connections_of("1.1.1.3") == 0
    h.q.on_closed(a)
    d, out = h.connect("1.1.1.3")
    assert out.admit == (d,) and not out.evict


def test_a_voters_host_goes_over_the_limit_by_its_reserved_room_only() -> None:
    h = Harness(max_connections=2)
    for _ in range(2):
        conn_id, _ = h.connect("1.1.1.1")
        h.established.add(conn_id)
    room = ROOM_PER_VOTER  # one voter
    for _ in range(room):
        conn_id, out = h.connect(VOTER)
        assert out.admit == (conn_id,)
        h.established.add(conn_id)
    conn_id, out = h.connect(VOTER)
    assert out.refuse == ((conn_id, MAX_CONNECTIONS),)
    assert h.q.open_count == 2 + room
    _, out = h.connect("1.1.1.2")  # anyone else: refused, the room is not theirs
    assert out.refuse and out.refuse[0][1] == MAX_CONNECTIONS


# ------------------------------------------------------------ max.connections.per.ip


def test_a_host_over_its_limit_is_refused_and_others_are_not() -> None:
    h = Harness(max_connections_per_ip=2, per_ip_overrides={"2.2.2.2": 4, "3.3.3.3": 0})
    assert [h.connect("1.1.1.1")[1].admit != () for _ in range(3)] == [True, True, False]
    assert h.q.refused[MAX_CONNECTIONS_PER_IP] == 1
    assert sum(bool(h.connect("2.2.2.2")[1].admit) for _ in range(6)) == 4
    assert h.connect("3.3.3.3")[1].refuse[0][1] == MAX_CONNECTIONS_PER_IP
    assert all(h.connect(VOTER)[1].admit for _ in range(10))  # the voters' hosts: exempt
    first = min(c for c in h.open)
    h.q.on_closed(first)  # a 1.1.1.1 connection closes: room for one more
    h.q.on_closed(first)  # idempotent
    assert h.connect("1.1.1.1")[1].admit


def test_per_ip_overrides_parse_kafkas_form() -> None:
    assert parse_per_ip_overrides("") == {}
    assert parse_per_ip_overrides("host1:100, 10.0.0.2:0,[::1]:7,::2:3") == {
        "host1": 100,
        "10.0.0.2": 0,
        "::1": 7,
        "::2": 3,
    }
    for bad, problem in [
        ("host1", "'host1' is not of the form HOST:COUNT"),
        ("host1:x", "'host1:x' is not of the form HOST:COUNT"),
        (":5", "':5' is not of the form HOST:COUNT"),
        ("h:-1", "'h:-1' is not of the form HOST:COUNT"),
        ("h:1,h:2", "host 'h' appears twice"),
    ]:
        with pytest.raises(QuotaConfigError, match=problem):
            parse_per_ip_overrides(bad)
        with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
            load_config(CONTROLLER_KEYS, overrides=[f"max.connections.per.ip.overrides={bad}"])


def test_the_config_registry_holds_the_defaults() -> None:
    cfg = ConnectionQuotaConfig.from_settings(load_config(CONTROLLER_KEYS))
    assert cfg == ConnectionQuotaConfig(
        max_connections=1000,
        max_connections_per_ip=200,
        per_ip_overrides={},
        max_connection_creation_rate=500,
        request_head_timeout_ms=10_000,
    )
    over = load_config(
        CONTROLLER_KEYS,
        overrides=["max.connections.per.ip.overrides=127.0.0.2:5", "max.connections.per.ip=9"],
    )
    cfg = ConnectionQuotaConfig.from_settings(over)
    assert cfg.per_ip_overrides == {"127.0.0.2": 5} and cfg.max_connections_per_ip == 9


# ------------------------------------------------------------ max.connection.creation.rate


def test_over_the_creation_rate_a_connection_waits_for_a_token() -> None:
    h = Harness(max_connection_creation_rate=10)
    admitted = [h.connect("1.1.1.1") for _ in range(12)]
    assert sum(bool(out.admit) for _, out in admitted) == 10  # a full bucket: 1 s worth
    waiting = [conn_id for conn_id, out in admitted if not out]
    assert h.q.waiting_count == 2 and h.q.open_count == 10
    assert h.q.next_deadline_ms() == h.now + 101  # the next token (100 ms at 10/s)
    assert h.tick(50) == QuotaActions()
    out = h.tick(51)
    assert out.admit == (waiting[0],)
    assert h.tick(100).admit == (waiting[1],)
    assert h.q.waiting_count == 0 and h.q.refused[CREATION_RATE] == 0


def test_waiting_hosts_take_turns() -> None:
    """A host with hundreds waiting does not push another host's one connection back."""
    h = Harness(max_connection_creation_rate=10)
    for _ in range(10):
        h.connect("6.6.6.6")  # the bucket is empty now
    flood = [h.connect("6.6.6.6")[0] for _ in range(300)]
    mine, out = h.connect("1.1.1.1")
    assert not out
    other, _ = h.connect("7.7.7.7")
    order: list[int] = []
    for _ in range(5):
        order.extend(h.tick(100).admit)
    assert order == [flood[0], mine, other, flood[1], flood[2]]


def test_a_connection_waits_at_most_the_head_timeout_then_is_refused() -> None:
    h = Harness(max_connection_creation_rate=1, request_head_timeout_ms=500)
    h.connect("1.1.1.1")
    late, _ = h.connect("1.1.1.2")
    assert h.q.connections_of("1.1.1.2") == 1
    out = h.tick(500)
    assert out.refuse == ((late, CREATION_RATE),)
    assert h.q.waiting_count == 0 and h.q.connections_of("1.1.1.2") == 0


def test_waiting_is_bounded_by_max_connections() -> None:
    h = Harness(max_connections=5, max_connection_creation_rate=1)
    h.connect("1.1.1.1")
    for i in range(5):
        assert not h.connect(f"2.2.2.{i}")[1]
    conn_id, out = h.connect("3.3.3.3")
    assert out.refuse == ((conn_id, CREATION_RATE),)


def test_a_connection_gone_while_waiting_gives_its_turn_away() -> None:
    h = Harness(max_connection_creation_rate=1)
    h.connect("1.1.1.1")
    gone, _ = h.connect("2.2.2.2")
    kept, _ = h.connect("3.3.3.3")
    h.q.on_closed(gone)
    assert h.q.connections_of("2.2.2.2") == 0
    assert h.tick(1000).admit == (kept,)


def test_voters_hosts_are_not_throttled() -> None:
    h = Harness(max_connection_creation_rate=1)
    h.connect("1.1.1.1")
    assert not h.connect("1.1.1.2")[1]
    assert all(h.connect(VOTER)[1].admit for _ in range(20))


# ------------------------------------------------------------ head deadline


def test_a_connection_without_a_request_head_is_closed_at_the_deadline() -> None:
    h = Harness(request_head_timeout_ms=10_000)
    a, _ = h.connect("1.1.1.1")
    h.tick(4_000)
    b, _ = h.connect("1.1.1.1")
    h.established.add(a)
    c, _ = h.connect("1.1.1.1")
    assert h.q.next_deadline_ms() == 1_000 + 10_000
    assert h.tick(5_999) == QuotaActions()
    assert h.tick(1) == QuotaActions()  # a's deadline: it is established, kept
    assert h.q.next_deadline_ms() == 5_000 + 10_000
    out = h.tick(4_000)
    assert out.evict == ((b, HEAD_TIMEOUT), (c, HEAD_TIMEOUT))
    assert h.open == {a} and h.q.evicted[HEAD_TIMEOUT] == 2
    assert h.q.next_deadline_ms() is None


def test_unlimited_defaults_only_bound_the_total() -> None:
    h = Harness(max_connections=3)
    assert h.q.config.max_connections_per_ip == UNLIMITED
    assert all(h.connect("1.1.1.1")[1].admit for _ in range(50))
    assert h.q.open_count == 3 and h.q.evicted[MAX_CONNECTIONS] == 47


# ------------------------------------------------------------ invariants


@pytest.mark.parametrize("seed", range(20))
def test_random_walks_keep_counts_and_limits(seed: int) -> None:
    """Connections arrive from a few hosts (a voter's among them), complete requests,
    close, and time passes: the counts always equal a recount, the limits hold, and
    an established connection is never evicted for a newcomer."""
    rng = random.Random(seed)
    h = Harness(
        max_connections=rng.randint(3, 12),
        max_connections_per_ip=rng.randint(1, 6),
        per_ip_overrides={"1.1.1.1": rng.randint(0, 8)},
        max_connection_creation_rate=rng.randint(1, 30),
        request_head_timeout_ms=rng.randint(100, 2000),
    )
    hosts = ["1.1.1.1", "2.2.2.2", "3.3.3.3", VOTER]
    ip_of: dict[int, str] = {}
    waiting: set[int] = set()
    for _ in range(600):
        r = rng.random()
        if r < 0.45:
            ip = rng.choice(hosts)
            conn_id, out = h.connect(ip)
            ip_of[conn_id] = ip
            if not out:
                waiting.add(conn_id)
        elif r < 0.65 and h.open:
            h.established.add(rng.choice(sorted(h.open)))
        elif r < 0.8 and (h.open or waiting):
            gone = rng.choice(sorted(h.open | waiting))
            h.q.on_closed(gone)
            h.open.discard(gone)
            waiting.discard(gone)
            out = QuotaActions()
        else:
            out = h.tick(rng.randint(1, 300))
        for conn_id, reason in out.evict:
            assert conn_id not in h.established or reason != MAX_CONNECTIONS
        waiting -= set(out.admit) | {c for c, _ in out.refuse}
        assert h.open.isdisjoint(waiting)
        assert h.q.open_count == len(h.open)
        assert h.q.waiting_count == len(waiting)
        for ip in hosts:
            held = sum(1 for c in h.open | waiting if ip_of[c] == ip)
            assert h.q.connections_of(ip) == held
            if ip != VOTER and held:
                assert held <= h.q.limit_of(ip)
        assert h.q.open_count <= h.q.config.max_connections + h.q.room
        non_voter = sum(1 for c in h.open if ip_of[c] != VOTER)
        assert non_voter <= h.q.config.max_connections


# ------------------------------------------------------------ TLS handshake slots


class Slots(Harness):
    """A TLS listener's core: `started` is what the shell would give a transport
    (a handshake under way), `queued` what waits in line for a slot."""

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.started: list[int] = []

    def apply(self, actions: QuotaActions) -> QuotaActions:
        self.started.extend(actions.admit)
        for conn_id, _ in actions.evict:
            self.open.discard(conn_id)
        self.open.update(actions.admit)
        return actions

    def accept(self, ip: str = "1.1.1.1") -> int:
        conn_id = next(self.ids)
        self.apply(self.q.on_accept(conn_id, ip, self.now))
        return conn_id


def test_handshakes_beyond_the_bound_wait_in_line_and_start_as_slots_free() -> None:
    h = Slots(max_handshakes=2)
    a, b, c, d = (h.accept() for _ in range(4))
    assert h.started == [a, b] and h.q.queued_count == 2 and h.q.open_count == 4
    assert h.q.handshaking_count == 2
    assert h.apply(h.q.on_ready(a, h.now)).admit == (c,)  # a's handshake ended
    assert h.apply(h.q.on_closed(b, h.now)).admit == (d,)  # b's failed
    assert h.q.on_ready(a, h.now) == QuotaActions()  # (twice: nothing more)
    assert h.q.queued_count == 0 and h.q.handshaking_count == 2


def test_the_head_deadline_counts_from_the_handshake_start_not_the_wait() -> None:
    """Waiting in line never makes a handshake worthless: a queued connection's head
    deadline starts when its handshake does."""
    h = Slots(max_handshakes=1, request_head_timeout_ms=1_000)
    a = h.accept()
    h.tick(900)
    b = h.accept()  # queued at 1_900
    assert h.started == [a]
    h.tick(50)
    h.apply(h.q.on_ready(a, h.now))  # b starts at 1_950
    assert h.started == [a, b]
    assert h.tick(50).evict == ((a, HEAD_TIMEOUT),)  # a: 1_000 + 1_000
    assert h.tick(949) == QuotaActions()
    assert h.tick(1).evict == ((b, HEAD_TIMEOUT),)  # b: 1_950 + 1_000, not 1_900 + 1_000


def test_a_connection_waits_in_line_at_most_the_head_timeout() -> None:
    h = Slots(max_handshakes=1, request_head_timeout_ms=1_000)
    a, b = h.accept(), h.accept()
    assert h.started == [a] and h.q.queued_count == 1
    out = h.tick(1_000)
    assert set(out.evict) == {(a, HEAD_TIMEOUT), (b, HEAD_TIMEOUT)}
    assert h.q.queued_count == 0 and h.q.open_count == 0 and h.q.connections_of("1.1.1.1") == 0


def test_a_stalled_handshake_is_under_way_until_its_head_deadline() -> None:
    """No slot is given up on a timer: a handshake is under way until it ends, fails or
    its connection closes, so the count bounds what completing handshakes can cost at
    once; a stalled one is closed at its head deadline and the next in line starts."""
    h = Slots(max_handshakes=1, request_head_timeout_ms=1_000)
    a = h.accept()
    h.tick(500)
    b = h.accept()
    assert h.q.next_deadline_ms() == h.now + 500  # a's head deadline, nothing sooner
    assert h.tick(499) == QuotaActions()
    out = h.tick(1)
    assert out.evict == ((a, HEAD_TIMEOUT),) and out.admit == (b,)
    assert h.started == [a, b] and h.q.handshaking_count == 1
    assert h.q.next_deadline_ms() == h.now + 1_000  # b's, from its start


def test_starts_follow_the_handshake_rate_with_a_burst() -> None:
    """KIP-612's token bucket for handshakes: at most `handshake_burst` start at one
    moment, then `handshake_rate` a second, however fast the handshakes end."""
    h = Slots(handshake_rate=100, handshake_burst=4)
    conns = [h.accept() for _ in range(20)]
    assert h.started == conns[:4] and h.q.queued_count == 16
    for c in conns[:4]:  # ending at once frees no token
        h.apply(h.q.on_ready(c, h.now))
    assert h.started == conns[:4]
    assert h.q.next_deadline_ms() == h.now + 10  # one token per 10 ms
    h.tick(9)
    assert len(h.started) == 4
    h.tick(1)
    assert h.started == conns[:5]
    h.tick(1_000)  # a second's worth of tokens, but the bucket holds 4
    assert h.started == conns[:9]
    until = h.now + 100  # the shell polls at each deadline: a token every 10 ms
    while (at := h.q.next_deadline_ms()) is not None and at <= until:
        h.tick(at - h.now)
    assert h.started == conns[:19]


def test_a_full_count_waits_for_an_end_not_a_token() -> None:
    h = Slots(max_handshakes=2, handshake_rate=1_000, handshake_burst=10)
    a, b, c = h.accept(), h.accept(), h.accept()
    assert h.started == [a, b]
    assert h.q.next_deadline_ms() == h.now + h.q.config.request_head_timeout_ms
    h.tick(500)
    assert h.started == [a, b]
    assert h.apply(h.q.on_ready(b, h.now)).admit == (c,)


def _fleet(quotas: type[ConnectionQuotas], config: ConnectionQuotaConfig, wall_ms: int) -> dict:
    """10,000 brokers from 250 hosts connecting at 500 a second (controller_bench's
    mtls ramp), each handshake lasting `wall_ms` of wall time (the peer's and the
    loop's lag: its CPU is ~1 ms), its first request head 50 ms after; an event-driven
    fake clock, no reconnection. What reached a request head, what was evicted."""
    import heapq

    established: set[int] = set()
    q = quotas(config, 0, established.__contains__)
    events: list[tuple[int, int, str, int]] = [(i * 2, i, "accept", i) for i in range(10_000)]
    heapq.heapify(events)
    seq = 10_000
    evicted = 0

    def apply(actions: QuotaActions, now: int) -> None:
        nonlocal seq, evicted
        for conn_id in actions.admit:
            seq += 1
            heapq.heappush(events, (now + wall_ms, seq, "ready", conn_id))
        evicted += len(actions.evict) + len(actions.refuse)

    last = 0
    while events:
        t, _, kind, conn_id = heapq.heappop(events)
        while (d := q.next_deadline_ms()) is not None and d <= t:
            apply(q.poll(d), d)
        if kind == "accept":
            apply(q.on_accept(conn_id, f"10.1.0.{conn_id % 250}", t), t)
        elif kind == "ready" and q.handshaking_count and conn_id in q._slots:
            apply(q.on_ready(conn_id, t), t)
            seq += 1
            heapq.heappush(events, (t + 50, seq, "head", conn_id))
        elif kind == "head" and conn_id in q._open:
            established.add(conn_id)
            last = t
    return {"established": len(established), "evicted": evicted, "last_ms": last}


@pytest.mark.parametrize("wall_ms", [5, 250, 400, 1_000])
def test_a_10k_fleet_connecting_at_500_a_second_converges_whatever_the_handshake_lag(
    wall_ms: int,
) -> None:
    """Issue 25's mTLS collapse, replayed with a fake clock: the old line freed a slot
    after 250 ms of wall time, so handshakes lasting that long (under load they did:
    the wall time is the peer's lag) started 32 / 0.25 s = 128 a second and 6,160 of
    10,000 brokers reached their head deadline in line (with wall_ms 100: 496). By
    start rate, every broker is served within the ramp, none evicted."""
    config = ConnectionQuotaConfig(
        max_connections=10_400,
        max_connections_per_ip=200,
        max_connection_creation_rate=500,
        max_handshakes=512,
        handshake_rate=500,
        handshake_burst=32,
    )
    out = _fleet(ConnectionQuotas, config, wall_ms)
    assert out["evicted"] == 0
    assert out["established"] == 10_000
    assert out["last_ms"] <= 20_000 + 100 + wall_ms + 50


def test_voters_connections_never_wait_for_a_slot() -> None:
    h = Slots(max_handshakes=1)
    a, b = h.accept(), h.accept()
    v = h.accept(VOTER)
    assert h.started == [a, v] and h.q.queued_count == 1 and b not in h.started
    assert h.q.handshaking_count == 1  # a voter's handshake takes no slot


def test_at_max_connections_a_queued_connection_is_evicted_like_any_half_open_one() -> None:
    h = Slots(max_connections=3, max_handshakes=1)
    a, b, c = h.accept(), h.accept(), h.accept()
    h.established.add(a)
    d = h.accept()  # evicts b: the oldest without a request
    assert h.q.evicted[MAX_CONNECTIONS] == 1 and b not in h.open
    assert h.q.queued_count == 2  # c and d still in line behind a's slot
    assert h.apply(h.q.on_ready(a, h.now)).admit == (c,)
    assert h.q.open_count == 3 and d not in h.started


@pytest.mark.parametrize("seed", range(10))
def test_random_walks_keep_the_handshake_bound_and_rate(seed: int) -> None:
    """Accepts from a few hosts (a voter's among them), handshakes ending or failing,
    closes and time: non-voter handshakes under way never exceed the bound, starts in
    any window never exceed the burst plus the rate's tokens, the line only waits
    for a token or an end, and every open connection is started or in line."""
    rng = random.Random(seed)
    bound = rng.randint(1, 6)
    rate, burst = rng.randint(5, 100), rng.randint(1, 4)
    h = Slots(
        max_connections=rng.randint(3, 12),
        max_handshakes=bound,
        handshake_rate=rate,
        handshake_burst=burst,
        request_head_timeout_ms=rng.randint(100, 2000),
    )
    hosts = ["1.1.1.1", "2.2.2.2", VOTER]
    ip_of: dict[int, str] = {}
    handshaking: set[int] = set()
    starts: list[int] = []  # non-voters' start times
    for _ in range(800):
        before = set(h.started)
        r = rng.random()
        if r < 0.4:
            ip = rng.choice(hosts)
            conn_id = h.accept(ip)
            ip_of[conn_id] = ip
        elif r < 0.6 and handshaking:
            conn_id = rng.choice(sorted(handshaking))
            h.apply(h.q.on_ready(conn_id, h.now))
            handshaking.discard(conn_id)
        elif r < 0.7 and h.open:
            conn_id = rng.choice(sorted(h.open))
            h.apply(h.q.on_closed(conn_id, h.now))
            h.open.discard(conn_id)
            handshaking.discard(conn_id)
        else:
            h.tick(rng.randint(1, 200))
        for conn_id in set(h.started) - before:
            if ip_of[conn_id] != VOTER:
                handshaking.add(conn_id)
                starts.append(h.now)
        handshaking &= h.open
        assert len(handshaking) == h.q.handshaking_count <= bound
        for t0 in {h.now - 1_000, h.now - 100, h.now}:
            within = sum(1 for t in starts if t0 <= t <= h.now)
            assert within <= burst + (h.now - t0) * rate / 1000
        if h.q.queued_count:
            assert h.q.next_deadline_ms() is not None
        assert h.q.open_count == len(h.open) + h.q.queued_count


def test_hosts_take_turns_in_the_handshake_line() -> None:
    """A host flooding the line (stalled handshakes, each under way until its head
    deadline) does not push another host's one connection to the back."""
    h = Slots(handshake_rate=4, handshake_burst=1)  # a start every 250 ms
    first = h.accept("6.6.6.6")
    flood = [h.accept("6.6.6.6") for _ in range(100)]
    honest = h.accept("1.1.1.1")
    assert h.started == [first] and h.q.queued_count == 101
    h.tick(250)
    assert h.started[-1] == flood[0]
    h.tick(250)
    assert h.started[-1] == honest  # its host's turn, ahead of 99 older ones
    h.tick(250)
    assert h.started[-1] == flood[1]


def test_a_line_emptied_by_closes_and_evictions_starts_afresh() -> None:
    h = Slots(max_handshakes=1, request_head_timeout_ms=1_000)
    h.accept("6.6.6.6")
    queued = [h.accept("6.6.6.6") for _ in range(3)]
    for conn_id in queued:
        h.q.on_closed(conn_id, h.now)
    assert h.q.queued_count == 0
    h.tick(500)
    late = h.accept("7.7.7.7")
    assert h.q.queued_count == 1
    assert h.tick(500).evict == ((1, HEAD_TIMEOUT),)  # the first's deadline; `late` starts
    assert h.started[-1] == late
