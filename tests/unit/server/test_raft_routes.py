"""/raft/* over HTTP: malformed bodies are 400 with a clear error, a foreign cluster 409."""

from __future__ import annotations

import aiohttp
import msgpack
import pytest

from kraft.raft.messages import FetchRequest, VoteRequest, to_wire
from kraft.raft_shell.transport import HttpTransport, TransportError, decode
from tests.unit.raft_shell.raft_harness import Quorum

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def quorum(tmp_path):
    q = Quorum(tmp_path, n=1)
    await q.start()
    await q.wait_leader()
    yield q
    await q.stop()


async def post(url: str, body: bytes, ctype: str = "application/msgpack"):
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, data=body, headers={"Content-Type": ctype, "Accept": "application/json"}) as r,
    ):
        return r.status, await r.json(content_type=None)


@pytest.mark.parametrize(
    ("endpoint", "body", "needle"),
    [
        ("vote", b"\xc1garbage", "msgpack"),
        ("vote", msgpack.packb([1, 2]), "map"),
        ("vote", msgpack.packb({"type": "VoteRequest", "cluster_id": "x"}), "candidate_id"),
        ("fetch", msgpack.packb({"type": "VoteRequest"}), "FetchRequest"),
        (
            "fetch",
            msgpack.packb(
                {
                    "cluster_id": "test-cluster",
                    "replica_id": "one",
                    "replica_is_voter": False,
                    "replica_epoch": 0,
                    "fetch_offset": 0,
                    "last_fetched_epoch": 0,
                }
            ),
            "replica_id",
        ),
        ("nonsense", msgpack.packb({}), "unknown Raft endpoint"),
    ],
)
async def test_malformed_bodies_are_400(quorum, endpoint, body, needle):
    url = quorum.urls[1] + f"/raft/{endpoint}"
    status, payload = await post(url, body)
    assert status == 400, payload
    assert payload["error_code"] == "INVALID_REQUEST"
    assert needle in payload["message"]


async def test_wrong_cluster_is_409_with_raft_body(quorum):
    req = VoteRequest("other-cluster", 9, 5, 0, 0)
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            quorum.urls[1] + "/raft/vote",
            data=msgpack.packb(to_wire(req)),
            headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
        ) as r,
    ):
        assert r.status == 409
        body = await r.read()
    obj = msgpack.unpackb(body)
    assert obj["error_code"] == "INCONSISTENT_CLUSTER_ID"
    resp = decode(body)
    assert resp.error == "INCONSISTENT_CLUSTER_ID"


async def test_transport_round_trip_and_failures(quorum):
    t = HttpTransport({1: quorum.urls[1], 2: "http://127.0.0.1:1"})
    try:
        resp = await t.send(1, FetchRequest("test-cluster", 50, False, 1, 0, 0, 0), 2.0)
        assert resp.error == "NONE"
        assert resp.leader_id == 1
        with pytest.raises(TransportError):
            await t.send(2, FetchRequest("test-cluster", 50, False, 1, 0, 0, 0), 1.0)
        with pytest.raises(TransportError):
            await t.send(7, FetchRequest("test-cluster", 50, False, 1, 0, 0, 0), 1.0)
    finally:
        await t.close()
