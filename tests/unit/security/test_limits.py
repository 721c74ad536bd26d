"""Limits (issue 8): 413 for oversized bodies on every route and both encodings, topic
limits (POLICY_VIOLATION), a stalled or idle client is disconnected within
connections.max.idle.ms while others are served. Connection limits on a real
listener (issue 25; the decisions are tested in test_connection_quotas.py): at
max.connections a newcomer closes the oldest half-open connection, per-IP limits
and overrides from other loopback addresses, the creation rate delays, the
request-head deadline (plaintext and TLS), and /metrics shows them."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import aiohttp
import msgpack
import pytest

from kraft.security.certs import generate
from kraft.server.limits import GuardedSite
from tests.unit.security.harness import call, ctx, register_unfenced, start_single

pytestmark = pytest.mark.timeout(60)

LIMITS = [
    "max.request.bytes=4096",
    "connections.max.idle.ms=500",
    "max.connections=20",
    "max.partitions.per.topic=8",
    "max.topics=2",
]


@pytest.fixture
async def node(tmp_path):
    n = await start_single(tmp_path / "c1", LIMITS)
    yield n
    await n.stop(1.0)


@pytest.mark.parametrize(
    "path",
    ["/v1/topics", "/v1/brokers/register", "/v1/brokers/heartbeat", "/raft/fetch", "/raft/vote"],
)
async def test_oversized_bodies_get_413(node, path: str) -> None:
    before = (node.controller.image.offset, node.log.end_offset)
    big = {"name": "x" * 10_000}
    async with aiohttp.ClientSession() as s:
        for as_msgpack in (False, True):
            st, err = await call(s, "POST", node.url + path, big, as_msgpack=as_msgpack)
            assert st == 413, (st, err)
            assert err["error_code"] == "REQUEST_TOO_LARGE"
            assert "4096" in err["message"]

        # chunked, without a Content-Length
        async def gen():
            for _ in range(10):
                yield b"x" * 1000

        async with s.post(
            node.url + path, data=gen(), headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 413
            assert (await r.json())["error_code"] == "REQUEST_TOO_LARGE"
        # the listener goes on
        st, _ = await call(s, "GET", node.url + "/healthz")
        assert st == 200
    assert (node.controller.image.offset, node.log.end_offset) == before


async def test_topic_limits_are_policy_violations(node) -> None:
    async with aiohttp.ClientSession() as s:
        url = node.url + "/v1/topics"
        st, err = await call(
            s, "POST", url, {"name": "big", "partitions": 10**9, "replication_factor": 1}
        )
        assert st == 400 and err["error_code"] == "POLICY_VIOLATION"
        assert "max.partitions.per.topic is 8" in err["message"]
        st, err = await call(s, "POST", url, {"name": "big", "assignments": [[1]] * 9})
        assert st == 400 and err["error_code"] == "POLICY_VIOLATION"
        # an unfenced broker, so that topics can be placed
        await register_unfenced(s, node, 4)
        for name in ("a", "b"):
            st, out = await call(s, "POST", url, {"name": name, "assignments": [[4]] * 8})
            assert st == 201, out
        st, err = await call(s, "POST", url, {"name": "c", "assignments": [[4]]})
        assert st == 400 and "max.topics is 2" in err["message"]
        st, err = await call(s, "POST", node.url + "/v1/topics/a/partitions", {"count": 9})
        assert st == 400 and err["error_code"] == "POLICY_VIOLATION"


async def _read_until_closed(reader: asyncio.StreamReader, timeout: float) -> bytes:
    out = b""
    while True:
        chunk = await asyncio.wait_for(reader.read(4096), timeout)
        if not chunk:
            return out
        out += chunk


async def test_stalled_and_idle_clients_are_disconnected_and_others_served(node) -> None:
    host, port = node.listen
    t0 = time.monotonic()
    # 1: a partial request head, then silence
    r1, w1 = await asyncio.open_connection(host, port)
    w1.write(b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Le")
    # 2: a complete head promising a body that never comes
    r2, w2 = await asyncio.open_connection(host, port)
    w2.write(
        b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"broker_id"'
    )
    # 3: connected, says nothing
    r3, w3 = await asyncio.open_connection(host, port)
    # meanwhile others are served
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            st, _ = await call(s, "GET", node.url + "/v1/quorum")
            assert st == 200
    tail1 = await _closed_by_server(r1, 5)
    tail2 = await _closed_by_server(r2, 5)
    tail3 = await _closed_by_server(r3, 5)
    elapsed = time.monotonic() - t0
    assert elapsed < 5, elapsed  # closed by the server (0.5 s idle bound), not by us
    assert tail1 == b"" and tail3 == b""
    assert tail2.startswith(b"HTTP/1.1 408") and b"REQUEST_TIMED_OUT" in tail2
    for w in (w1, w2, w3):
        w.close()
    async with aiohttp.ClientSession() as s:
        st, _ = await call(s, "GET", node.url + "/healthz")
        assert st == 200


async def test_a_stalled_msgpack_body_gets_its_408_in_msgpack(node) -> None:
    """The 408 of a body that never came was JSON whatever the client spoke."""
    host, port = node.listen
    for path in (b"/v1/brokers/heartbeat", b"/v1/topics"):  # the front, then aiohttp
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
            b"Content-Length: 100\r\n\r\n\x82"
        )
        tail = await _closed_by_server(reader, 5)
        writer.close()
        head, _, body = tail.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), (path, tail)
        assert b"Content-Type: application/msgpack" in head, (path, head)
        assert msgpack.unpackb(body)["error_code"] == "REQUEST_TIMED_OUT", path


HALF_HEAD = b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Le"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


async def _closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """What arrived before the server closed (a reset counts as closed)."""
    try:
        return await _read_until_closed(reader, timeout)
    except ConnectionResetError:
        return b""


async def _connect(node, source: str = "127.0.0.1"):
    host, port = node.listen
    return await asyncio.open_connection(host, port, local_addr=(source, 0))


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(HEALTHZ)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))
    await asyncio.wait_for(reader.readexactly(length), 5)
    return head


async def _refused(node, source: str) -> bool:
    """Connected and then reset or closed unanswered (the reset may come so soon
    that the connect itself fails)."""
    try:
        r, w = await _connect(node, source)
        w.write(HEALTHZ)
        return await _closed_by_server(r, 5) == b""
    except ConnectionResetError:
        return True


def _site(node) -> GuardedSite:
    (site,) = node._runner.sites
    return site


async def _metrics(node) -> str:
    async with aiohttp.ClientSession() as s, s.get(node.url + "/metrics") as r:
        return await r.text()


async def _until(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_at_max_connections_a_newcomer_closes_the_oldest_half_open_connection(
    tmp_path,
) -> None:
    """max.connections=20: one keep-alive client that completed a request, 19
    half-sent heads; each newcomer is served and the oldest half-open one is reset."""
    node = await start_single(tmp_path / "c", ["max.connections=20"])
    try:
        await _newcomers_evict_half_open(node)
    finally:
        await node.stop(1.0)


async def _newcomers_evict_half_open(node) -> None:
    established = await _connect(node)
    assert (await _get(*established)).startswith(b"HTTP/1.1 200")
    half_open = []
    for i in range(19):
        r, w = await _connect(node, f"127.0.0.{2 + i % 3}")
        w.write(HALF_HEAD)
        half_open.append((r, w))
    await _until(lambda: _site(node).quotas.open_count == 20)
    newcomers = []
    for k in range(3):  # (each stays open: closing it would free a slot)
        newcomers.append(await _connect(node, "127.0.0.9"))
        assert (await _get(*newcomers[-1])).startswith(b"HTTP/1.1 200")
        assert await _closed_by_server(half_open[k][0], 5) == b""  # evicted, oldest first
    assert (await _get(*established)).startswith(b"HTTP/1.1 200")  # never evicted
    q = _site(node).quotas
    assert q.evicted["max.connections"] == 3 and q.refused["max.connections"] == 0
    text = await _metrics(node)  # (its own connection is a newcomer too)
    assert 'kraft_server_connections_evicted_total{reason="max.connections"} 4.0' in text
    assert 'kraft_server_connection_limit{limit="max.connections"} 20.0' in text
    assert re.search(r"kafka_server_socket_server_metrics_connection_count \d+", text)
    for _, w in [established, *half_open, *newcomers]:
        w.close()


async def test_front_and_handed_over_connections_are_counted_from_accept_to_close(
    tmp_path,
) -> None:
    """The heartbeat front's connections and those it hands to aiohttp count alike:
    established after their first request, gone from the counts once closed."""
    node = await start_single(tmp_path / "c")
    try:
        site = _site(node)
        front = await _connect(node, "127.0.0.2")
        body = msgpack.packb({"broker_id": 9, "broker_epoch": 1, "current_metadata_offset": 0})
        front[1].write(
            b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/msgpack\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        head = await asyncio.wait_for(front[0].readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 ")  # answered by the front (no such broker)
        handed = await _connect(node, "127.0.0.2")
        assert (await _get(*handed)).startswith(b"HTTP/1.1 200")  # aiohttp's, after hand-over
        silent = await _connect(node, "127.0.0.2")
        await _until(lambda: site.quotas.open_count == 3)
        assert node.heartbeat_fronts is not None and node.heartbeat_fronts.handed_over >= 1
        established = sorted(c for c in site._tracked if site._established(c))
        assert len(established) == 2 and len(site._tracked) == 3
        for _, w in (front, handed, silent):
            w.close()
        await _until(lambda: site.quotas.open_count == 0 and not site._tracked)
        assert site.quotas.connections_of("127.0.0.2") == 0
    finally:
        await node.stop(1.0)


async def test_when_every_connection_completed_a_request_a_newcomer_is_refused(tmp_path) -> None:
    node = await start_single(tmp_path / "c", ["max.connections=5"])
    try:
        held = [await _connect(node, "127.0.0.2") for _ in range(5)]
        for conn in held:
            await _get(*conn)
        assert await _refused(node, "127.0.0.3")
        assert _site(node).quotas.refused["max.connections"] == 1
        held[0][1].close()
        await _until(lambda: _site(node).quotas.open_count == 4)
        assert (await _get(*await _connect(node, "127.0.0.3"))).startswith(b"HTTP/1.1 200")
    finally:
        await node.stop(1.0)


async def test_per_ip_limits_and_overrides_and_the_voters_host_is_exempt(tmp_path) -> None:
    node = await start_single(
        tmp_path / "c",
        ["max.connections.per.ip=3", "max.connections.per.ip.overrides=127.0.0.3:5"],
    )
    try:
        for source, allowed in [("127.0.0.2", 3), ("127.0.0.3", 5), ("127.0.0.1", 12)]:
            conns = [await _connect(node, source) for _ in range(allowed)]
            for conn in conns:
                assert (await _get(*conn)).startswith(b"HTTP/1.1 200")
            if source != "127.0.0.1":  # 127.0.0.1 is the voter's host: no per-IP limit
                assert await _refused(node, source)
        q = _site(node).quotas
        assert q.refused["max.connections.per.ip"] == 2
        text = await _metrics(node)
        assert 'kraft_server_connections_refused_total{reason="max.connections.per.ip"} 2.0' in text
    finally:
        await node.stop(1.0)


async def test_over_the_creation_rate_a_connection_waits_then_is_served(tmp_path) -> None:
    node = await start_single(tmp_path / "c", ["max.connection.creation.rate=1"])
    try:
        first = await _connect(node, "127.0.0.2")
        second = await _connect(node, "127.0.0.2")
        await _until(lambda: _site(node).quotas.waiting_count == 1)
        assert (await _get(*first)).startswith(b"HTTP/1.1 200")
        assert (await _get(*second)).startswith(b"HTTP/1.1 200")  # a token came
        assert _site(node).quotas.refused["max.connection.creation.rate"] == 0
        voter = [await _connect(node) for _ in range(5)]  # 127.0.0.1: not throttled
        await _until(lambda: _site(node).quotas.waiting_count == 0)
        for conn in voter:
            assert (await _get(*conn)).startswith(b"HTTP/1.1 200")
    finally:
        await node.stop(1.0)


async def test_a_request_head_must_arrive_within_the_head_timeout(tmp_path) -> None:
    node = await start_single(tmp_path / "c", ["connections.request.head.timeout.ms=300"])
    try:
        t0 = time.monotonic()
        silent = await _connect(node, "127.0.0.2")
        half = await _connect(node, "127.0.0.2")
        half[1].write(HALF_HEAD)
        done = await _connect(node, "127.0.0.2")
        await _get(*done)
        assert await _closed_by_server(silent[0], 5) == b""
        assert await _closed_by_server(half[0], 5) == b""
        assert time.monotonic() - t0 < 5  # the server closed them (idle is 60 s)
        await _until(lambda: _site(node).quotas.evicted["connections.request.head.timeout.ms"] == 2)
        # the connection that completed a request is kept past the deadline
        await asyncio.sleep(0.6)
        assert (await _get(*done)).startswith(b"HTTP/1.1 200")
    finally:
        await node.stop(1.0)


async def test_a_stalled_tls_handshake_is_closed_at_the_head_timeout(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    generate(certs, [1], [], admin=False)
    node = await start_single(
        tmp_path / "c",
        ["connections.request.head.timeout.ms=300"],
        config_file=certs / "controller-1.properties",
    )
    try:
        t0 = time.monotonic()
        r, w = await _connect(node, "127.0.0.2")
        w.write(b"\x16\x03\x01\x00")  # the start of a ClientHello, then nothing
        assert await _closed_by_server(r, 5) == b""
        assert time.monotonic() - t0 < 5
        await _until(lambda: _site(node).quotas.open_count == 0)
        async with aiohttp.ClientSession() as s:  # a real TLS client is served
            st, _ = await call(s, "GET", node.url + "/healthz", ssl_ctx=ctx(certs))
            assert st == 200
    finally:
        await node.stop(1.0)


async def test_tls_handshakes_wait_in_line_and_stalled_ones_do_not_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six handshakes under way at most, two starting at one moment: 4 stalled
    ClientHellos (under way until their head deadline, 20 s) and then 12 mTLS clients
    connecting together. The stalled ones hold 4 of the 6, the clients take turns
    for the other 2 and every client is served long before that deadline."""
    monkeypatch.setattr("kraft.server.limits.MAX_HANDSHAKES", 6)
    monkeypatch.setattr("kraft.server.limits.HANDSHAKE_BURST", 2)
    certs = tmp_path / "certs"
    generate(certs, [1], [4], admin=False)
    node = await start_single(
        tmp_path / "c",
        ["connections.request.head.timeout.ms=20000"],
        config_file=certs / "controller-1.properties",
    )
    try:
        site = _site(node)
        assert site.quotas.config.max_handshakes == 6
        assert site.quotas.config.handshake_burst == 2
        stalled = []
        for _ in range(4):
            r, w = await _connect(node, "127.0.0.2")
            w.write(b"\x16\x03\x01\x00")  # the start of a ClientHello, then nothing
            stalled.append((r, w))
        await _until(lambda: site.quotas.open_count == 4)
        peak = 0

        def watch() -> None:
            nonlocal peak
            peak = max(peak, site.quotas.handshaking_count)

        host, port = node.listen
        client_ctx = ctx(certs, "broker-4")

        async def one() -> bytes:
            r, w = await asyncio.open_connection(
                host, port, ssl=client_ctx, server_hostname="localhost", local_addr=("127.0.0.3", 0)
            )
            watch()
            try:
                return await _get(r, w)
            finally:
                w.close()

        heads = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(12))), 15)
        assert all(h.startswith(b"HTTP/1.1 200") for h in heads)
        # served while the stalled ones were still there, still under way
        assert site.quotas.evicted["connections.request.head.timeout.ms"] == 0
        assert site.quotas.connections_of("127.0.0.2") == 4
        assert peak <= 6 and site.quotas.queued_count == 0
        assert site.quotas.handshaking_count == 4
        # a TLS connection keeps a 32 KiB read buffer, not asyncio's 256 KiB
        r, w = await asyncio.open_connection(
            host, port, ssl=client_ctx, server_hostname="localhost", local_addr=("127.0.0.3", 0)
        )
        assert (await _get(r, w)).startswith(b"HTTP/1.1 200")
        (served,) = [t.transport for t in site._tracked.values() if t.transport is not None]
        assert len(served._ssl_protocol._ssl_buffer) == 32 * 1024
        w.close()
        for _, w in stalled:
            w.close()
        await _until(lambda: site.quotas.open_count == 0)
    finally:
        await node.stop(1.0)


async def test_malformed_msgpack_and_json_are_400_not_500(node) -> None:
    async with aiohttp.ClientSession() as s:
        for ct, raw in [
            ("application/msgpack", b"\xc1\xc1"),
            ("application/msgpack", msgpack.packb([1, 2])[:1]),
            ("application/json", b'{"a":'),
            ("application/json", b"\xff\xfe"),
        ]:
            for path in ("/v1/brokers/heartbeat", "/raft/fetch"):
                async with s.post(node.url + path, data=raw, headers={"Content-Type": ct}) as r:
                    assert r.status == 400, (path, ct, raw, r.status)
