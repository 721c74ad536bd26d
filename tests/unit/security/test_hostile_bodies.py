"""Bodies that are well-formed JSON or msgpack but no request's value: each is a 400
INVALID_REQUEST (or INVALID_CONFIG) that names the problem, never a 500, and leaves
the log as it was. Each case here was a 500, or was stored, before.

- JSON nested thousands deep (RecursionError), on a route and on the heartbeat
  front; an integer wider than 64 bits or past Python's digit limit; a lone UTF-16
  surrogate escape, which no UTF-8 record can hold;
- ids and epochs past Kafka's wire types (a broker id of 2**31 was registered, and
  then refused by the Raft fetch); an incarnation id that is not a UUID;
- an admin body with a field it does not have (a typo fell back to the default);
- a topic config number Kafka's ConfigDef refuses ("1_000", 40 digits);
- a client that hangs up mid-body (aiohttp logged an ERROR with a traceback);
- DELETE /v1/quorum/voters/{id} with its body (it was never read).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import msgpack
import pytest

from tests.unit.security.harness import call, register_body, start_single

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def node(tmp_path):
    n = await start_single(tmp_path / "c1", [])
    yield n
    await n.stop(1.0)


def _state(node: Any) -> tuple[int, int]:
    return node.controller.image.offset, node.log.end_offset


async def _raw(
    s: aiohttp.ClientSession, url: str, data: bytes, ctype: str = "application/json"
) -> tuple[int, Any]:
    async with s.post(url, data=data, headers={"Content-Type": ctype}) as r:
        raw = await r.read()
        if r.content_type == "application/msgpack":
            return r.status, msgpack.unpackb(raw, raw=False)
        return r.status, await r.json(content_type=None)


def _invalid(status: int, body: Any, *words: str) -> None:
    assert status == 400, (status, body)
    assert body["error_code"] == "INVALID_REQUEST", body
    for w in words:
        assert w in body["message"], body


async def test_deep_json_is_a_400_on_a_route_and_on_the_heartbeat_front(node) -> None:
    deep = b"[" * 5000 + b"]" * 5000
    before = _state(node)
    for path in ("/v1/topics", "/v1/brokers/register", "/v1/brokers/heartbeat"):
        # a session of its own: the heartbeat is the connection's first request,
        # which the heartbeat front answers itself
        async with aiohttp.ClientSession() as s:
            status, body = await _raw(s, node.url + path, deep)
        _invalid(status, body, "nests too deeply")
    assert _state(node) == before


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'"rack": "\\ud800"', ("lone UTF-16 surrogate",)),
        (b'"broker_id": 18446744073709551616', ("exceeds 64 bits",)),
        (b'"broker_id": ' + b"9" * 5000, ("not valid JSON", "digits")),
        (
            b'"features": [{"name": "f", "min_supported_version": 0, '
            b'"max_supported_version": 1000000000000000000000000000000}]',
            ("exceeds 64 bits",),
        ),
    ],
    ids=["lone-surrogate", "int-past-64-bits", "int-past-digit-limit", "feature-version"],
)
async def test_json_values_no_record_can_hold_are_400(
    node, raw: bytes, words: tuple[str, ...]
) -> None:
    body = register_body(30, node.cluster_id)
    head = (
        f'{{"cluster_id": "{body["cluster_id"]}", "incarnation_id": "{body["incarnation_id"]}"'
    ).encode()
    if not raw.startswith(b'"broker_id"'):
        head += b', "broker_id": 30'
    before = _state(node)
    async with aiohttp.ClientSession() as s:
        status, reply = await _raw(s, node.url + "/v1/brokers/register", head + b", " + raw + b"}")
    _invalid(status, reply, *words)
    assert _state(node) == before and 30 not in node.controller.image.brokers


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("broker_id", 2**31, ("broker_id", "0..2147483647")),
        ("broker_id", 2**63, ("broker_id", "0..2147483647")),
        ("incarnation_id", "not-a-uuid", ("incarnation_id", "a UUID string")),
        ("previous_broker_epoch", 2**63, ("previous_broker_epoch",)),
        (
            "features",
            [{"name": "f", "min_supported_version": 0, "max_supported_version": 2**15}],
            ("max_supported_version", "0..32767"),
        ),
    ],
)
async def test_register_values_past_kafka_s_wire_types_are_400(
    node, field: str, value: Any, words: tuple[str, ...]
) -> None:
    body = {**register_body(31, node.cluster_id), field: value}
    before = _state(node)
    async with aiohttp.ClientSession() as s:
        for as_msgpack in (True, False):
            status, reply = await call(
                s, "POST", node.url + "/v1/brokers/register", body, as_msgpack=as_msgpack
            )
            _invalid(status, reply, *words)
    assert _state(node) == before and not node.controller.image.brokers


async def test_an_admin_body_with_a_field_it_does_not_have_is_400(node) -> None:
    before = _state(node)
    async with aiohttp.ClientSession() as s:
        typo = {"name": "orders", "partitions": 1, "replicaton_factor": 1}
        status, reply = await call(s, "POST", node.url + "/v1/topics", typo)
        _invalid(status, reply, "unknown field 'replicaton_factor'")
        status, reply = await call(
            s, "POST", node.url + "/v1/elections", {"topic": "t", "partition": 0, "kind": "x"}
        )
        _invalid(status, reply, "unknown field 'kind'")
        plan = {"version": 1, "partition": [{"topic": "t", "partition": 0, "replicas": [1]}]}
        status, reply = await call(s, "POST", node.url + "/v1/partitions/reassignments", plan)
        _invalid(status, reply, "unknown field 'partition'")
    assert _state(node) == before and not node.controller.image.topics


@pytest.mark.parametrize("value", ["1_000", "9" * 40, "12x", ""])
async def test_a_config_number_kafka_refuses_is_invalid_config(node, value: str) -> None:
    body = {"name": "t", "assignments": [[1]], "configs": {"retention.ms": value}}
    before = _state(node)
    async with aiohttp.ClientSession() as s:
        status, reply = await call(s, "POST", node.url + "/v1/topics", body)
    assert status == 400 and reply["error_code"] == "INVALID_CONFIG", reply
    assert "retention.ms" in reply["message"]
    assert _state(node) == before


async def test_a_client_that_hangs_up_mid_body_is_no_server_error(node, caplog) -> None:
    port = int(node.url.rsplit(":", 1)[1])
    with caplog.at_level(logging.INFO):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"na'
        )
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        for _ in range(200):  # bounded: 2 s
            if any(getattr(r, "event", None) == "request_body_abandoned" for r in caplog.records):
                break
            await asyncio.sleep(0.01)
    assert any(getattr(r, "event", None) == "request_body_abandoned" for r in caplog.records)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_remove_voter_reads_its_body(node) -> None:
    """The doc's directory_id in the body was never read: "directory_id is required"."""
    async with aiohttp.ClientSession() as s:
        status, reply = await call(
            s, "DELETE", node.url + "/v1/quorum/voters/9", {"directory_id": "abc"}
        )
        assert status != 400 or "directory_id is required" not in reply["message"], reply
        assert reply["error_code"] == "VOTER_NOT_FOUND", reply
        async with s.delete(
            node.url + "/v1/quorum/voters/9",
            data=b"\xc1",
            headers={"Content-Type": "application/msgpack"},
        ) as r:
            garbage = msgpack.unpackb(await r.read(), raw=False)
        _invalid(r.status, garbage, "not valid msgpack")
        status, reply = await call(
            s,
            "POST",
            node.url + "/v1/quorum/voters",
            {"node_id": -7, "directory_id": "abc", "url": "http://127.0.0.1:1"},
        )
        _invalid(status, reply, "node id -7 must be in 0..2147483647")
        # path and query integers are decimal digits (int() would take "9_0")
        status, reply = await call(
            s, "DELETE", node.url + "/v1/quorum/voters/9_0", {"directory_id": "abc"}
        )
        _invalid(status, reply, "the voter id must be an integer")
        status, reply = await call(
            s, "DELETE", node.url + "/v1/quorum/voters/9?directory_id=abc&timeout_ms=%201"
        )
        _invalid(status, reply, "timeout_ms must be an integer")


async def test_a_write_from_another_site_s_page_is_refused(node) -> None:
    """CSRF: a text/plain POST needs no preflight, so a page of another site could
    make a browser that holds the console's credential create a topic. A write with
    another origin is now 403; the console's own origin, and no Origin (CLI, agents,
    curl), go through; reads are not affected."""
    body = b'{"name": "csrf", "partitions": 1, "replication_factor": 1}'
    host = node.url.removeprefix("http://")
    async with aiohttp.ClientSession() as s:
        # the node has no broker: a write that gets through is judged by the
        # controller (INVALID_REPLICATION_FACTOR), a refused one never reaches it
        for origin, want in (
            ("https://evil.example", "UNAUTHORIZED"),
            (f"http://{host}", "INVALID_REPLICATION_FACTOR"),
            (None, "INVALID_REPLICATION_FACTOR"),
        ):
            headers = {"Content-Type": "text/plain"}
            if origin is not None:
                headers["Origin"] = origin
            async with s.post(node.url + "/v1/topics", data=body, headers=headers) as r:
                reply = await r.json(content_type=None)
                assert reply["error_code"] == want, (origin, r.status, reply)
            if want == "UNAUTHORIZED":
                assert r.status == 403
                assert "another origin (https://evil.example)" in reply["message"], reply
        async with s.get(node.url + "/v1/topics", headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 200
