"""GET /ui and the console's views on a real one-voter controller (in-process, ~1 s):
the page and its files, the bounded cluster view, the feed, and the authorizer's
Basic challenge."""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp
import yarl

from kraft.security.credentials import hash_secret
from tests.unit.security.harness import start_single


async def test_the_page_its_files_and_views_are_served_from_the_package(tmp_path: Path) -> None:
    node = await start_single(tmp_path / "c1")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(node.url + "/ui") as r:
                assert r.status == 200 and r.content_type == "text/html"
                assert '<script type="module" src="/ui/js/app.js">' in await r.text()
                etag = r.headers["ETag"]
            async with s.get(node.url + "/ui", headers={"If-None-Match": etag}) as r:
                assert r.status == 304
            async with s.get(node.url + "/ui/vendor/uplot/uPlot.esm.js") as r:
                assert r.status == 200 and r.content_type == "text/javascript"
            # only the package's own files: an escaped ../ names none of them
            escape = yarl.URL(node.url + "/ui/js/..%2F..%2F..%2Fserver.py", encoded=True)
            async with s.get(escape) as r:
                assert r.status == 404
            async with s.post(
                node.url + "/v1/topics",
                json={"name": "t", "partitions": 3, "replication_factor": 1},
            ) as r:
                assert r.status == 400  # no broker: the topic is refused, nothing changes
            async with s.get(node.url + "/ui/api/session") as r:
                assert await r.json() == {
                    "authorizer": False,
                    "principal": None,
                    "super_user": True,
                }
            async with s.get(node.url + "/ui/api/cluster?limit=5") as r:
                view = await r.json()
            assert view["active"] is True and view["brokers"]["total"] == 0
            async with s.get(node.url + "/ui/api/cluster?limit=0") as r:
                assert r.status == 400 and "limit" in (await r.json())["message"]
            # Python's int() would take these: the API does not
            for bad in ("limit=1_000", "limit=%205", "limit=%D9%A5"):
                async with s.get(node.url + f"/ui/api/cluster?{bad}") as r:
                    assert r.status == 400, bad
                    assert "limit must be an integer" in (await r.json())["message"]
            async with s.get(node.url + "/ui/api/changes?after=1_0") as r:
                assert r.status == 400 and "after" in (await r.json())["message"]
            async with s.get(node.url + "/ui/api/changes") as r:
                feed = await r.json()
            assert feed["next_after"] == feed["high_watermark"] - 1
            assert any(c["kind"] == "feature" for c in feed["changes"])
            async with s.get(node.url + f"/ui/api/changes?after={feed['next_after']}") as r:
                assert (await r.json())["changes"] == []
    finally:
        await node.stop(1.0)


async def test_with_the_authorizer_on_the_console_challenges_a_browser(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.properties"
    creds.write_text(f"admin={hash_secret('a')}\nviewer={hash_secret('v')}\n")
    node = await start_single(
        tmp_path / "c1",
        ["authorizer.enable=true", f"authentication.credentials.file={creds}"],
    )
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(node.url + "/ui") as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"].startswith("Basic realm=")
                assert (await r.json())["error_code"] == "UNAUTHORIZED"
            async with s.get(node.url + "/v1/topics") as r:
                assert r.status == 401 and "WWW-Authenticate" not in r.headers  # API unchanged
            viewer = {"Authorization": "Basic " + base64.b64encode(b"viewer:v").decode()}
            async with s.get(node.url + "/ui", headers=viewer) as r:
                assert r.status == 200
            async with s.get(node.url + "/ui/api/session", headers=viewer) as r:
                assert await r.json() == {
                    "authorizer": True,
                    "principal": "viewer",
                    "super_user": False,
                }
            async with s.get(
                node.url + "/ui/api/session", headers={"Authorization": "Bearer admin:a"}
            ) as r:
                assert (await r.json())["super_user"] is True
    finally:
        await node.stop(1.0)
