"""A broker agent that cannot find its quorum says why (broker_agent.follower).

Stub controllers on 127.0.0.1 answer `GET /v1/quorum` as a misconfigured cluster
would: a refused credential (401), another cluster's id, a body that is not JSON,
an answer later than the discovery timeout; one URL is a closed port. Discovery
names each URL's reason; the follower stays quiet for DISCOVERY_WARN_AFTER_MS of
its (fake) clock, then logs one `quorum_unreachable` warning with those reasons,
at most once per DISCOVERY_WARN_EVERY_MS, and finds the quorum once a controller
answers. Waits are bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from broker_agent.follower import (
    DISCOVERY_WARN_AFTER_MS,
    DISCOVERY_WARN_EVERY_MS,
    MetadataFollower,
    discover_quorum,
)
from kraft.local.cluster import free_ports
from kraft.security.certs import generate
from kraft.security.tls import server_context

CLUSTER = "right-cluster"
VIEW = {"cluster_id": CLUSTER, "node_id": 1, "voters": [{"node_id": 1}]}
WAIT_S = 10.0


class Stubs:
    def __init__(self) -> None:
        self.urls: dict[str, str] = {}  # behaviour -> URL
        self.healthy = False  # the "later" stub answers like a controller once set


@pytest.fixture
async def tls_stub(tmp_path: Path) -> AsyncIterator[str]:
    """A controller stub behind TLS with `kraft certs`' own CA (not trusted here)."""
    generate(tmp_path, [1], [], admin=False)

    async def view(_: web.Request) -> web.Response:
        return web.json_response(VIEW)

    app = web.Application()
    app.router.add_get("/v1/quorum", view)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = server_context(str(tmp_path / "controller-1.pem"), None, "none")
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_a_certificate_or_scheme_problem_is_named_as_one(tls_stub: str) -> None:
    https, http = f"https://{tls_stub}", f"http://{tls_stub}"
    async with aiohttp.ClientSession() as session:
        found = await asyncio.wait_for(discover_quorum(session, [https, http], 2.0), WAIT_S)
    assert found.info is None
    # (a certificate error is also a ValueError: it once read "its answer is not JSON")
    assert "CERTIFICATE_VERIFY_FAILED" in found.problems[https]
    assert "check ssl.truststore.location" in found.problems[https]
    assert found.problems[http].endswith("(is it a TLS listener? use https://)")


@pytest.fixture
async def stubs() -> AsyncIterator[Stubs]:
    st = Stubs()

    async def unauthorized(_: web.Request) -> web.Response:
        body = {"error_code": "UNAUTHORIZED", "message": "no valid credential"}
        return web.json_response(body, status=401)

    async def other_cluster(_: web.Request) -> web.Response:
        return web.json_response({**VIEW, "cluster_id": "other-cluster"})

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(body=b"<html>proxy</html>", content_type="text/html")

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.json_response(VIEW)

    async def later(_: web.Request) -> web.Response:
        if not st.healthy:
            return web.json_response({"error_code": "NOT_READY", "message": "x"}, status=503)
        return web.json_response(VIEW)

    runners = []
    for name, handler in [
        ("unauthorized", unauthorized),
        ("other_cluster", other_cluster),
        ("garbage", garbage),
        ("slow", slow),
        ("later", later),
    ]:
        app = web.Application()
        app.router.add_get("/v1/quorum", handler)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        st.urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}"
        runners.append(runner)
    st.urls["closed"] = f"http://127.0.0.1:{free_ports(1)[0]}"  # nobody listens
    try:
        yield st
    finally:
        for r in runners:
            await r.cleanup()


async def test_discovery_names_each_controllers_problem(stubs: Stubs) -> None:
    u = stubs.urls
    async with aiohttp.ClientSession() as session:
        found = await asyncio.wait_for(
            discover_quorum(session, u.values(), timeout_s=0.3, cluster_id=CLUSTER), WAIT_S
        )
    assert found.info is None
    why = found.problems
    assert set(why) == set(u.values())
    assert why[u["unauthorized"]] == "HTTP 401: UNAUTHORIZED: no valid credential"
    assert "'other-cluster', not 'right-cluster'" in why[u["other_cluster"]]
    assert why[u["garbage"]] == "its answer is not JSON"
    assert why[u["slow"]] == "no answer within 0.3 s"
    assert why[u["later"]] == "HTTP 503: NOT_READY: x"
    assert why[u["closed"]].startswith("ClientConnectorError")


async def test_discovery_finds_the_quorum_past_the_broken_ones(stubs: Stubs) -> None:
    stubs.healthy = True
    async with aiohttp.ClientSession() as session:
        found = await asyncio.wait_for(
            discover_quorum(session, stubs.urls.values(), timeout_s=0.3, cluster_id=CLUSTER),
            WAIT_S,
        )
    assert found.info is not None and found.info.cluster_id == CLUSTER
    assert found.info.urls == {1: stubs.urls["later"]}
    assert stubs.urls["later"] not in found.problems and len(found.problems) == 5


async def test_without_a_cluster_id_the_cluster_most_controllers_name_is_taken(
    stubs: Stubs,
) -> None:
    """A wrong URL in --controllers (another cluster's controller, listed first): its
    cluster id was taken and the right cluster's voters merged in; registration was
    then refused INCONSISTENT_CLUSTER_ID and the agent exited."""
    stubs.healthy = True
    u = stubs.urls
    urls = [u["other_cluster"], u["later"], u["slow"]]
    async with aiohttp.ClientSession() as session:
        found = await asyncio.wait_for(discover_quorum(session, urls, timeout_s=2.0), WAIT_S)
    assert found.info is not None and found.info.cluster_id == CLUSTER
    assert found.problems == {
        u["other_cluster"]: "it belongs to cluster 'other-cluster', not 'right-cluster' "
        "(most controllers' answer)"
    }


class FakeClock:
    """Each reading advances 2 s: discovery's minutes pass in a few rounds."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 2000
        return self.now


async def test_the_follower_warns_after_a_while_with_the_reasons_then_discovers(
    stubs: Stubs,
) -> None:
    clock = FakeClock()
    warnings: list[tuple[int, dict[str, Any]]] = []

    class Spy(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "event", None) == "quorum_unreachable":
                warnings.append((clock.now, dict(record.__dict__)))
                if len(warnings) == 2:
                    stubs.healthy = True

    spy = Spy()
    logging.getLogger("broker_agent.follower").addHandler(spy)
    try:
        async with aiohttp.ClientSession() as session:
            follower = MetadataFollower(
                7,
                [stubs.urls["closed"], stubs.urls["unauthorized"], stubs.urls["later"]],
                session,
                cluster_id=CLUSTER,
                rng=random.Random(1),
                clock=clock,
                discovery_timeout_s=0.3,
                max_discovery_backoff_s=0.01,
            )
            await asyncio.wait_for(follower._discover(), WAIT_S)
    finally:
        logging.getLogger("broker_agent.follower").removeHandler(spy)
    assert follower.quorum is not None and follower.quorum.cluster_id == CLUSTER
    assert follower.discovering_ms is None
    assert len(warnings) == 2, warnings
    (t1, first), (t2, _) = warnings
    # quiet for the first DISCOVERY_WARN_AFTER_MS, then once per DISCOVERY_WARN_EVERY_MS
    assert DISCOVERY_WARN_AFTER_MS <= first["waited_s"] * 1000 < DISCOVERY_WARN_AFTER_MS + 4000
    assert DISCOVERY_WARN_EVERY_MS <= t2 - t1 < DISCOVERY_WARN_EVERY_MS + 6000
    assert first["levelname"] == "WARNING"
    problems = first["problems"]
    assert f"{stubs.urls['unauthorized']}: HTTP 401: UNAUTHORIZED" in problems
    assert f"{stubs.urls['closed']}: ClientConnectorError" in problems
    assert f"{stubs.urls['later']}: HTTP 503" in problems
    json.dumps(problems)  # a plain string field for --log-format json


async def test_the_observer_never_takes_a_voter_s_id() -> None:
    """A fleet starting at a controller's id ran its metadata observer as that voter:
    unattached, then prospective (pre-votes to the quorum), before it settled. It now
    fetches as the fleet's first id that is no voter's, with that id's credential;
    with none left it does not start."""
    import aiohttp

    from broker_agent.follower import MetadataFollower
    from kraft.security.client_security import ClientSecurity

    four = ClientSecurity(token="broker-4:x")
    async with aiohttp.ClientSession() as session:
        fleet = MetadataFollower(
            2, ["http://127.0.0.1:1"], session,
            alternates=[(3, ClientSecurity()), (4, four)],
        )  # fmt: skip
        assert fleet._observer_id((1, 2, 3))
        assert (fleet.node_id, fleet.security) == (4, four)
        alone = MetadataFollower(2, ["http://127.0.0.1:1"], session)
        assert not alone._observer_id((1, 2, 3))
        fine = MetadataFollower(7, ["http://127.0.0.1:1"], session)
        assert fine._observer_id((1, 2, 3)) and fine.node_id == 7


def test_an_agent_warns_while_the_quorum_it_found_has_no_leader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """quorum_unreachable was only ever logged before the first discovery: every
    controller killed for a minute later showed in nothing but the status lines."""
    import logging

    from broker_agent.follower import LeaderWatch

    watch = LeaderWatch()
    events = lambda: [getattr(r, "event", None) for r in caplog.records]  # noqa: E731
    with caplog.at_level(logging.INFO, logger="broker_agent"):
        watch.check(1, 0)
        watch.check(None, 1_000)  # the leader is lost
        watch.check(None, 10_999)
        assert events() == []
        watch.check(-1, 11_000)  # 10 s without one
        assert events() == ["quorum_unreachable"]
        watch.check(None, 40_999)
        watch.check(None, 41_000)  # then every 30 s
        assert events() == ["quorum_unreachable"] * 2
        assert caplog.records[-1].waited_s == 40
        watch.check(2, 45_000)
        assert events()[-1] == "quorum_reachable"
        watch.check(None, 50_000)  # a new loss counts from its own start
        watch.check(None, 59_999)
        assert events().count("quorum_unreachable") == 2
