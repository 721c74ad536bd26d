"""A controller with TLS and authentication on, in process: who is refused, and how.

Acceptance (issue 8): a forged register / heartbeat / AlterPartition for another
broker id is UNAUTHORIZED 403, a missing or invalid credential 401; a Vote or
BeginQuorumEpoch from a non-voter is refused, a broker may Fetch as an observer
but not vote; admin operations need the admin credential; mTLS names the
principal; plaintext to the TLS listener fails cleanly while TLS clients go on.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
import pytest

from kraft.raft.messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    VoteRequest,
    to_wire,
)
from kraft.security.certs import generate
from tests.unit.security.harness import call, ctx, register_body, start_single, token

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    generate(out, [1, 2, 9], [4, 5], admin=True)
    return out


@pytest.fixture
async def node(certs, tmp_path):
    n = await start_single(tmp_path / "c1", config_file=certs / "controller-1.properties")
    yield n
    await n.stop(1.0)


async def test_the_listener_speaks_tls_and_reports_https(node, certs) -> None:
    assert node.url.startswith("https://")
    async with aiohttp.ClientSession() as s:
        st, body = await call(s, "GET", node.url + "/healthz", ssl_ctx=ctx(certs))
        assert (st, body) == (200, {"status": "ok"})
        st, body = await call(s, "GET", node.url + "/v1/quorum", ssl_ctx=ctx(certs))
        assert st == 401 and body["error_code"] == "UNAUTHORIZED"
        st, body = await call(
            s, "GET", node.url + "/v1/quorum", headers=token(certs, "broker-4"), ssl_ctx=ctx(certs)
        )
        assert st == 200 and body["state"] == "leader"


async def test_forged_broker_requests_are_refused(node, certs) -> None:
    url, c = node.url, ctx(certs)
    as4 = token(certs, "broker-4")
    async with aiohttp.ClientSession() as s:
        # broker 4 registers as itself: fine
        st, reg = await call(
            s, "POST", url + "/v1/brokers/register", register_body(4, node.cluster_id),
            headers=as4, ssl_ctx=c,
        )  # fmt: skip
        assert st == 200, reg
        epoch = reg["broker_epoch"]
        before = (node.controller.image.offset, node.log.end_offset)
        hb5 = {"broker_id": 5, "broker_epoch": epoch, "current_metadata_offset": 0}
        forged = [
            ("/v1/brokers/register", register_body(5, node.cluster_id)),
            ("/v1/brokers/heartbeat", hb5),
            (
                "/v1/partitions/alter",
                {
                    "broker_id": 5, "broker_epoch": epoch, "topic_id": "x", "partition_id": 0,
                    "leader_epoch": 0, "partition_epoch": 0, "new_isr_with_epochs": [],
                },
            ),
        ]  # fmt: skip
        for path, body in forged:
            for msgpack_body in (False, True):
                st, err = await call(
                    s, "POST", url + path, body, headers=as4, ssl_ctx=c, as_msgpack=msgpack_body
                )
                assert st == 403, (path, st, err)
                assert err["error_code"] == "UNAUTHORIZED"
                assert "may not act as broker 5" in err["message"]
            # no credential: 401; a wrong secret: 401
            st, err = await call(s, "POST", url + path, body, ssl_ctx=c)
            assert (st, err["error_code"]) == (401, "UNAUTHORIZED"), err
            bad = {"Authorization": "Bearer broker-5:not-the-secret"}
            st, err = await call(s, "POST", url + path, body, headers=bad, ssl_ctx=c)
            assert (st, err["error_code"]) == (401, "UNAUTHORIZED"), err
        # nothing was written, and the forged heartbeat did not count as contact for 5
        assert (node.controller.image.offset, node.log.end_offset) == before
        assert 5 not in node.controller.image.brokers
        # broker 4's own heartbeat still works
        hb4 = {"broker_id": 4, "broker_epoch": epoch, "current_metadata_offset": 0}
        st, out = await call(s, "POST", url + "/v1/brokers/heartbeat", hb4, headers=as4, ssl_ctx=c)
        assert st == 200 and "is_fenced" in out


async def test_admin_operations_need_the_admin_credential(node, certs) -> None:
    url, c = node.url, ctx(certs)
    topic = {"name": "t1", "partitions": 1, "replication_factor": 1}
    async with aiohttp.ClientSession() as s:
        st, err = await call(s, "POST", url + "/v1/topics", topic, ssl_ctx=c)
        assert st == 401, err
        st, err = await call(
            s, "POST", url + "/v1/topics", topic, headers=token(certs, "broker-4"), ssl_ctx=c
        )
        assert st == 403 and err["error_code"] == "UNAUTHORIZED" and "super.users" in err["message"]
        for method, path in [
            ("DELETE", "/v1/topics/t1"),
            ("DELETE", "/v1/brokers/4"),
            ("POST", "/v1/elections"),
            ("DELETE", "/v1/quorum/voters/1?directory_id=x"),
        ]:
            st, err = await call(
                s, method, url + path, headers=token(certs, "controller-1"), ssl_ctx=c
            )
            assert st == 403, (path, err)
        # the admin may; over msgpack too
        st, out = await call(
            s, "POST", url + "/v1/topics", {"name": "t0", "assignments": []},
            headers=token(certs, "admin"), ssl_ctx=c,
        )  # fmt: skip
        assert st in (201, 400), out  # reached the controller (empty assignment is invalid)
        st, out = await call(
            s, "DELETE", url + "/v1/topics/nope", headers=token(certs, "admin"), ssl_ctx=c
        )
        assert st == 404 and out["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"


async def _raft(s, node, certs, msg, principal: str) -> tuple[int, dict]:
    return await call(
        s, "POST", f"{node.url}/raft/{msg.ENDPOINT}", to_wire(msg),
        headers=token(certs, principal), ssl_ctx=ctx(certs), as_msgpack=True,
    )  # fmt: skip


async def test_quorum_rpcs_only_from_current_voters(node, certs) -> None:
    cid = node.cluster_id
    epoch = node.raft.core.epoch
    state_before = (node.raft.core.epoch, node.raft.core.state_name, node.log.end_offset)
    vote9 = VoteRequest(cid, 9, epoch + 5, epoch, 10**6)
    begin9 = BeginQuorumEpochRequest(cid, 9, epoch + 5)
    async with aiohttp.ClientSession() as s:
        # controller 9 is a known principal but not a voter
        for msg in (vote9, begin9):
            st, err = await _raft(s, node, certs, msg, "controller-9")
            assert st == 403 and err["error_code"] == "UNAUTHORIZED", err
            assert "not a current voter" in err["message"]
        # a broker cannot vote, nor pose as controller 2
        st, err = await _raft(
            s, node, certs, VoteRequest(cid, 4, epoch + 5, epoch, 10**6), "broker-4"
        )
        assert st == 403 and "not a controller" in err["message"]
        st, err = await _raft(
            s, node, certs, VoteRequest(cid, 1, epoch + 5, epoch, 10**6), "controller-2"
        )
        assert st == 403 and "as node 1" in err["message"]
        # the high-epoch requests changed nothing
        assert (
            node.raft.core.epoch,
            node.raft.core.state_name,
            node.log.end_offset,
        ) == state_before
        # a broker fetches as an observer ...
        fetch = FetchRequest(cid, 4, False, epoch, 0, 0, max_wait_ms=0)
        st, resp = await _raft(s, node, certs, fetch, "broker-4")
        assert st == 200 and resp["type"] == "FetchResponse" and resp["error"] == "NONE", resp
        # ... but not as a voter, nor as another replica
        st, err = await _raft(s, node, certs, FetchRequest(cid, 4, True, epoch, 0, 0), "broker-4")
        assert st == 403 and "only as an observer" in err["message"]
        st, err = await _raft(s, node, certs, FetchRequest(cid, 5, False, epoch, 0, 0), "broker-4")
        assert st == 403
        from metadata_log.snapshot import SnapshotId

        snap = FetchSnapshotRequest(cid, 5, epoch, SnapshotId(1, 1), 0)
        st, err = await _raft(s, node, certs, snap, "broker-4")
        assert st == 403
        # a snapshot download as a voter (it counts for check-quorum) is a voter's
        snap = FetchSnapshotRequest(cid, 4, epoch, SnapshotId(1, 1), 0, replica_is_voter=True)
        st, err = await _raft(s, node, certs, snap, "broker-4")
        assert st == 403 and "only as an observer" in err["message"]


async def test_fetch_max_bytes_is_capped_server_side(certs, tmp_path) -> None:
    node = await start_single(
        tmp_path / "c1", ["replica.fetch.response.max.bytes=4096"],
        config_file=certs / "controller-1.properties",
    )  # fmt: skip
    seen = []
    inner = node.raft.handle_inbound

    async def spy(msg):
        seen.append(msg)
        return await inner(msg)

    node.raft.handle_inbound = spy
    try:
        async with aiohttp.ClientSession() as s:
            fetch = FetchRequest(
                node.cluster_id, 4, False, 0, 0, 0, max_wait_ms=0, max_bytes=1 << 30
            )
            st, _ = await _raft(s, node, certs, fetch, "broker-4")
            assert st == 200
        assert seen[-1].max_bytes == 4096
    finally:
        await node.stop(1.0)


async def test_mtls_names_the_principal_and_required_refuses_certless_clients(
    certs, tmp_path
) -> None:
    node = await start_single(
        tmp_path / "c1", ["ssl.client.auth=required"], config_file=certs / "controller-1.properties"
    )
    try:
        async with aiohttp.ClientSession() as s:
            url = node.url
            # broker 4's certificate and no token: it is broker-4
            st, reg = await call(
                s, "POST", url + "/v1/brokers/register", register_body(4, node.cluster_id),
                ssl_ctx=ctx(certs, "broker-4"),
            )  # fmt: skip
            assert st == 200, reg
            st, err = await call(
                s, "POST", url + "/v1/brokers/register", register_body(5, node.cluster_id),
                ssl_ctx=ctx(certs, "broker-4"),
            )  # fmt: skip
            assert st == 403 and "may not act as broker 5" in err["message"]
            # no client certificate: the handshake itself fails, cleanly
            with pytest.raises(aiohttp.ClientError):
                await call(s, "GET", url + "/v1/quorum", ssl_ctx=ctx(certs))
            # a certificate from another CA is refused too
            other = tmp_path / "other"
            generate(other, [], [4], admin=False)
            with pytest.raises(aiohttp.ClientError):
                await call(s, "GET", url + "/v1/quorum", ssl_ctx=_mixed(certs, other))
            # and the listener still serves good clients
            st, _ = await call(s, "GET", url + "/v1/quorum", ssl_ctx=ctx(certs, "admin"))
            assert st == 200
        # the admin tools without a keystore: the likely cause and the key to check
        from kraft.admin_client import AdminClient, ClientError
        from kraft.security.client_security import ClientSecurity

        sec = ClientSecurity(ssl_context=ctx(certs), headers=token(certs, "admin"))
        async with AdminClient(url, timeout_s=3, max_attempts=1, security=sec) as admin:
            with pytest.raises(ClientError) as e:
                await admin.call("GET", "/v1/quorum", any_node=True)
        assert e.value.code == "NETWORK", e.value
        assert "ssl.client.auth=required" in str(e.value), e.value
        assert "ssl.keystore.location" in str(e.value), e.value
    finally:
        await node.stop(1.0)


def _mixed(certs: Path, other: Path) -> ssl.SSLContext:
    c = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    c.load_cert_chain(str(other / "broker-4.pem"))
    return c


async def test_plaintext_to_the_tls_listener_fails_cleanly(node, certs, caplog) -> None:
    host, port = node.listen
    for _ in range(3):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /v1/quorum HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(1024), 5)
        assert not data.startswith(b"HTTP/1.1 200")  # no plaintext answer
        writer.close()
    # the admin client names the likely cause
    from kraft.admin_client import AdminClient, ClientError

    async with AdminClient(f"http://{host}:{port}", timeout_s=2, max_attempts=1) as client:
        with pytest.raises(ClientError) as e:
            await client.quorum(leader=False)
        assert e.value.code == "NETWORK"
    # TLS clients are still served, and nothing was logged as an error with a traceback
    async with aiohttp.ClientSession() as s:
        st, _ = await call(
            s, "GET", node.url + "/v1/quorum", headers=token(certs, "admin"), ssl_ctx=ctx(certs)
        )
        assert st == 200
    assert not [r for r in caplog.records if r.exc_info and r.levelname in ("ERROR", "CRITICAL")]


async def test_config_errors_name_the_problem(certs, tmp_path) -> None:
    from kraft.config import ConfigError

    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        await start_single(tmp_path / "a", [f"ssl.keystore.location={tmp_path}/missing.pem"])
    with pytest.raises(ConfigError, match="needs a way to authenticate"):
        await start_single(tmp_path / "b", ["authorizer.enable=true"])


async def _raw_heartbeat(
    node, ssl_ctx: ssl.SSLContext, body: bytes, authorization: str | None
) -> tuple[int, str]:
    """One heartbeat on a TLS connection of its own (a broker's heartbeat channel):
    (status, error_code or "NONE")."""
    import msgpack

    host, port = node.listen
    reader, writer = await asyncio.open_connection(host, port, ssl=ssl_ctx)
    try:
        auth = f"Authorization: {authorization}\r\n" if authorization else ""
        writer.write(
            (
                "POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\n"
                "Content-Type: application/msgpack\r\nAccept: application/msgpack\r\n"
                f"{auth}Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        reply = msgpack.unpackb(await reader.readexactly(length))
        return int(head.split()[1]), reply.get("error_code", "NONE")
    finally:
        writer.close()


@pytest.mark.parametrize("front", [True, False])
async def test_heartbeats_on_their_own_connection_are_checked_alike_with_and_without_the_front(
    certs, tmp_path, front
) -> None:
    import msgpack

    overrides = [] if front else ["controller.heartbeat.front.enable=false"]
    node = await start_single(
        tmp_path / "c1", overrides, config_file=certs / "controller-1.properties"
    )
    try:
        as4 = token(certs, "broker-4")["Authorization"]
        async with aiohttp.ClientSession() as s:
            st, reg = await call(
                s, "POST", node.url + "/v1/brokers/register", register_body(4, node.cluster_id),
                headers={"Authorization": as4}, ssl_ctx=ctx(certs),
            )  # fmt: skip
            assert st == 200, reg

        def hb(broker_id: int) -> bytes:
            return msgpack.packb(
                {
                    "broker_id": broker_id,
                    "broker_epoch": reg["broker_epoch"],
                    "current_metadata_offset": 0,
                }
            )

        cases = [
            (ctx(certs), hb(4), None),  # no credential
            (ctx(certs), b"\xc1", None),  # no credential, bad body: 401 comes first
            (ctx(certs), hb(4), "Bearer broker-4:wrong"),  # invalid token
            (ctx(certs), hb(5), as4),  # broker 4 speaking for broker 5
            (ctx(certs), b"\xc1", as4),  # authenticated, bad body
            (ctx(certs), hb(4), as4),  # broker 4 for itself
            (ctx(certs, "broker-4"), hb(4), None),  # its client certificate
            (ctx(certs, "broker-5"), hb(4), None),  # another broker's certificate
        ]
        got = [await _raw_heartbeat(node, c, body, auth) for c, body, auth in cases]
        fronts = node.heartbeat_fronts
        assert (fronts.answered if fronts else None) == (len(cases) if front else None)
    finally:
        await node.stop(1.0)
    # the aiohttp route's answers (front off) and the front's are these, case by case
    assert got == [
        (401, "UNAUTHORIZED"),
        (401, "UNAUTHORIZED"),
        (401, "UNAUTHORIZED"),
        (403, "UNAUTHORIZED"),
        (400, "INVALID_REQUEST"),
        (200, "NONE"),
        (200, "NONE"),
        (403, "UNAUTHORIZED"),
    ]


async def test_a_failed_heartbeat_authentication_is_answered_and_the_connection_closed(
    node, certs
) -> None:
    """As Kafka after a failed authentication (issue 25, hostile clients): the heartbeat
    front answers 401 and closes, so a forger must reconnect (and new connections are
    rate limited); a valid heartbeat connection stays open."""
    import msgpack

    host, port = node.url.removeprefix("https://").rsplit(":", 1)
    body = msgpack.packb({"broker_id": 4, "broker_epoch": 1, "current_metadata_offset": 0})

    async def heartbeat(auth: str, path: str = "/v1/brokers/heartbeat") -> tuple[bytes, bool]:
        r, w = await asyncio.open_connection(host, int(port), ssl=ctx(certs), server_hostname=host)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/msgpack\r\nAccept: application/msgpack\r\n"
            f"Authorization: {auth}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        w.write(head.encode() + body)
        status = await asyncio.wait_for(r.readline(), 5)
        await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
        try:
            rest = await asyncio.wait_for(r.read(4096), 1.0)
            rest += await asyncio.wait_for(r.read(4096), 1.0) if rest else b""
            closed = rest == b"" or (await asyncio.wait_for(r.read(1), 1.0)) == b""
        except TimeoutError:
            closed = False
        w.close()
        return status, closed

    status, closed = await heartbeat("Bearer broker-4:forged")
    assert status.startswith(b"HTTP/1.1 401") and closed
    # a query string hands the connection to aiohttp: the same answer, closed too
    status, closed = await heartbeat("Bearer broker-4:forged", "/v1/brokers/heartbeat?x=1")
    assert status.startswith(b"HTTP/1.1 401") and closed
    status, closed = await heartbeat(token(certs, "broker-4")["Authorization"])
    assert not status.startswith(b"HTTP/1.1 401") and not closed


async def test_a_secret_that_is_not_utf8_is_an_invalid_credential(node, certs) -> None:
    """Header bytes that are not UTF-8 reached the hash as surrogates: a 500 with a
    logged traceback for any unauthenticated client, on a route and on the front."""
    host, port = node.url.removeprefix("https://").rsplit(":", 1)
    for request in (
        b"GET /v1/quorum HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin:\xff\xfe\r\n\r\n",
        b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer broker-4:\xff\xfe\r\nContent-Length: 2\r\n\r\n{}",
    ):
        r, w = await asyncio.open_connection(host, int(port), ssl=ctx(certs), server_hostname=host)
        w.write(request)
        status = await asyncio.wait_for(r.readline(), 5)
        w.close()
        assert status.startswith(b"HTTP/1.1 401"), (request[:30], status)


async def test_the_console_answers_a_throttled_check_429_not_a_password_prompt(
    certs, tmp_path
) -> None:
    """Over authentication.max.verification.rate, /ui turned the retriable 429 into a
    401 with a Basic challenge: a browser would ask for the password again."""
    import base64

    n = await start_single(
        tmp_path / "c1",
        ["authentication.max.verification.rate=1"],
        config_file=certs / "controller-1.properties",
    )
    try:
        seen: list[tuple[int, str | None, str]] = []
        async with aiohttp.ClientSession() as s:
            for i in range(6):
                basic = base64.b64encode(f"admin:forged-{i}".encode()).decode()
                async with s.get(
                    n.url + "/ui/api/session",
                    headers={"Authorization": f"Basic {basic}"},
                    ssl=ctx(certs),
                ) as r:
                    body = await r.json(content_type=None)
                    seen.append((r.status, r.headers.get("WWW-Authenticate"), body["error_code"]))
        throttled = [x for x in seen if x[2] == "THROTTLING_QUOTA_EXCEEDED"]
        assert throttled, seen
        assert all(status == 429 and challenge is None for status, challenge, _ in throttled), seen
        assert all(x[0] == 401 and x[1] for x in seen if x[2] == "UNAUTHORIZED"), seen
    finally:
        await n.stop(1.0)
