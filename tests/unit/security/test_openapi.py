"""GET /v1/openapi.json and the API table: one source for the routes, the description
and the fuzzer."""

from __future__ import annotations

import aiohttp

from kraft.raft.messages import REQUEST_TYPES
from kraft.server.api_spec import ENDPOINTS
from kraft.server.raft_routes import _BY_ENDPOINT
from tests.unit.security.harness import call, start_single


async def test_openapi_describes_exactly_the_served_routes(tmp_path) -> None:
    node = await start_single(tmp_path / "c1")
    try:
        async with aiohttp.ClientSession() as s:
            st, doc = await call(s, "GET", node.url + "/v1/openapi.json")
        assert st == 200 and doc["openapi"].startswith("3.")
        documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
        assert documented == {(e.method, e.path) for e in ENDPOINTS}
        served = {
            (r.method, r.resource.canonical)
            for r in node._runner.app.router.routes()  # type: ignore[union-attr]
            # the web console (kraft.console): a page and its own views, not the API
            if r.method != "HEAD" and not r.resource.canonical.startswith("/ui")
        }
        raft = {("POST", f"/raft/{cls.ENDPOINT}") for cls in REQUEST_TYPES}
        assert served == (documented - raft) | {("POST", "/raft/{endpoint}")}
        assert set(_BY_ENDPOINT) == {p.removeprefix("/raft/") for _, p in raft}
        # every body has a schema the fuzzer reads; Raft bodies list their required fields
        fetch = doc["paths"]["/raft/fetch"]["post"]["requestBody"]["content"]
        assert set(fetch) == {"application/msgpack"}
        assert "replica_id" in fetch["application/msgpack"]["schema"]["required"]
        assert doc["paths"]["/v1/topics"]["post"]["x-kraft-auth"] == "admin"
        assert doc["paths"]["/v1/brokers/heartbeat"]["post"]["x-kraft-auth"] == "broker"
    finally:
        await node.stop(1.0)
