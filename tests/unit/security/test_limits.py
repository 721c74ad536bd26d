"""Limits (issue 8): 413 for oversized bodies on every route and both encodings, topic
limits (POLICY_VIOLATION), a stalled or idle client is disconnected within
connections.max.idle.ms while others are served, max.connections is enforced."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import msgpack
import pytest

from tests.unit.security.harness import call, register_unfenced, start_single

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
    tail1 = await _read_until_closed(r1, 5)
    tail2 = await _read_until_closed(r2, 5)
    tail3 = await _read_until_closed(r3, 5)
    elapsed = time.monotonic() - t0
    assert elapsed < 5, elapsed  # closed by the server (0.5 s idle bound), not by us
    assert tail1 == b"" and tail3 == b""
    assert tail2.startswith(b"HTTP/1.1 408") and b"REQUEST_TIMED_OUT" in tail2
    for w in (w1, w2, w3):
        w.close()
    async with aiohttp.ClientSession() as s:
        st, _ = await call(s, "GET", node.url + "/healthz")
        assert st == 200


async def test_max_connections(node) -> None:
    host, port = node.listen
    held = [await asyncio.open_connection(host, port) for _ in range(20)]
    await asyncio.sleep(0.05)
    r, w = await asyncio.open_connection(host, port)
    w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await _read_until_closed(r, 5) == b""  # closed at once, no answer
    for _, hw in held:
        hw.close()
    await asyncio.sleep(0.1)
    async with aiohttp.ClientSession() as s:
        st, _ = await call(s, "GET", node.url + "/healthz")
        assert st == 200


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
