"""`GET /ui`: the web console's static files and its three read-only views.

The page (static/) is served from this package, nothing from outside. It reads
`/v1/quorum` and `/metrics` like any client and writes only through the `/v1`
admin routes (the authorizer decides, as for the CLI). Three views exist for it
because the `/v1` API has no equivalent a browser can poll cheaply:

- `/ui/api/session`: who the request's principal is and whether it is a super user
  (the page hides its action buttons otherwise; the server refuses them anyway);
- `/ui/api/cluster`: brokers and partitions, trouble first and bounded
  (kraft.console.view), with partitions led and time since the last heartbeat;
- `/ui/api/changes?after=N`: the latest state changes of the committed log
  (kraft.console.feed).

All of them read this node's committed state (a standby's too: the page works on
every controller and survives the active controller's death). With
`authorizer.enable=true` every `/ui` path needs the same credential as `/v1`
(kraft.security.server_security answers a browser's first visit with a Basic challenge).
"""

from __future__ import annotations

import hashlib
import mimetypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from kraft.console.feed import MAX_BYTES, changes_since, first_offset
from kraft.console.view import DEFAULT_LIMIT, MAX_LIMIT, ClusterSummary, cluster_view, summarize
from kraft.controller.requests import parse_int
from kraft.server.http_codec import reply
from metadata_log.image import MetadataImage

STATIC_DIR = Path(__file__).with_name("static")
# A summary is rescanned at most this often while the image moves (NoOps move its
# offset every 500 ms): five tabs polling every 2 s then cost one scan every 2 s
# (7 ms at 10,000 brokers and 10,000 partitions), not five. Rows show the live state
# of each broker and partition; only their order and the counts may be 2 s old.
SUMMARY_MAX_AGE_S = 2.0


class ConsoleSource(Protocol):
    """What the console needs from the node (kraft.server.controller_service.ControllerService)."""

    async def read_image(self, standby: bool = False) -> MetadataImage: ...

    def console_controller(self) -> tuple[Any, int]:
        """(the QuorumController, its clock's now in ms); read after read_image."""
        ...

    def read_committed_log(self, from_offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """(whole batches from the one holding from_offset, high watermark, log start);
        max_bytes 0 reads nothing (only the two offsets)."""
        ...


@dataclass(frozen=True, slots=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


def load_static(directory: Path = STATIC_DIR) -> dict[str, StaticFile]:
    """Every file under `directory` by its relative path (read once: a few hundred KB)."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        body = path.read_bytes()
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if path.suffix in (".js", ".mjs"):
            ctype = "text/javascript"  # module scripts need a JavaScript type
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        out[path.relative_to(directory).as_posix()] = StaticFile(body, ctype, etag)
    return out


def _serve(request: web.Request, f: StaticFile) -> web.Response:
    headers = {"ETag": f.etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if request.headers.get("If-None-Match") == f.etag:
        return web.Response(status=304, headers=headers)
    charset = "utf-8" if f.content_type.startswith("text/") else None
    return web.Response(body=f.body, content_type=f.content_type, charset=charset, headers=headers)


MAX_NAMES_SEEN = 200_000  # topic names the feed remembers (a few MB)


def _int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    return default if raw is None else parse_int(raw, f"query parameter {name}", lo, hi)


def build_console_routes(source: ConsoleSource) -> list[web.RouteDef]:
    files = load_static()
    index = files["index.html"]
    cached: list[Any] = [None, 0.0]  # [ClusterSummary, monotonic time it was made]
    # Names of the topics each summary and the feed saw (bounded): the feed
    # still names a topic deleted since, which the image no longer has.
    names_seen: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        return _serve(request, index)

    async def static(request: web.Request) -> web.Response:
        f = files.get(request.match_info["path"])
        if f is None:
            raise web.HTTPNotFound()  # the API's 404 body (error_middleware)
        return _serve(request, f)

    async def session(request: web.Request) -> web.Response:
        from kraft.security.server_security import PRINCIPAL, SECURITY

        sec = request.app.get(SECURITY)
        authorizer = None if sec is None else sec.authorizer
        principal = request.get(PRINCIPAL)
        return reply(
            request,
            {
                "authorizer": authorizer is not None,
                "principal": principal,
                # with the authorizer off every caller may act, as with the CLI
                "super_user": authorizer is None or authorizer.admin(principal, "") is None,
            },
        )

    def _summary(image: MetadataImage) -> ClusterSummary:
        s, made = cached
        now = time.monotonic()
        if s is None or (s.offset != image.offset and now - made >= SUMMARY_MAX_AGE_S):
            s = summarize(image)
            cached[0], cached[1] = s, now
            if len(names_seen) + len(image.topics) > MAX_NAMES_SEEN:
                names_seen.clear()
            names_seen.update((tid, t.name) for tid, t in image.topics.items())
        return s

    async def cluster(request: web.Request) -> web.Response:
        limit = _int_query(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        image = await source.read_image(True)
        controller, now_ms = source.console_controller()
        hb = controller.heartbeats

        def age(broker_id: int) -> int | None:
            s = None if hb is None else hb.state(broker_id)
            return None if s is None else max(0, now_ms - s.last_contact_ms)

        view = cluster_view(image, _summary(image), controller.index.led_by, age, limit)
        view["active"] = hb is not None
        return reply(request, view)

    async def changes(request: web.Request) -> web.Response:
        after = _int_query(request, "after", -1, -1, 2**63 - 1)
        image = await source.read_image(True)
        _summary(image)  # the names of the topics it has (cached)
        _, hw, log_start = source.read_committed_log(0, 0)
        start = first_offset(after, hw, log_start)
        data = b""
        if start < hw:
            data, hw, log_start = source.read_committed_log(start, MAX_BYTES)

        def topic_name(topic_id: str) -> str:
            t = image.topics.get(topic_id)
            return topic_id if t is None else t.name

        if len(names_seen) > MAX_NAMES_SEEN:
            names_seen.clear()
        return reply(request, changes_since(data, start, hw, topic_name, created=names_seen))

    return [
        web.get("/ui", page),
        web.get("/ui/", page),
        web.get("/ui/api/session", session),
        web.get("/ui/api/cluster", cluster),
        web.get("/ui/api/changes", changes),
        web.get("/ui/{path:(?!api/).+}", static),
    ]
