"""KIP-853 voter changes over HTTP: `POST /v1/quorum/voters`, `DELETE /v1/quorum/voters/{id}`.

AddVoter body: ``{node_id, directory_id, url}`` (``endpoint`` is accepted for
``url``); RemoveVoter: the id in the path and ``directory_id`` in the query or
body. Both optionally take ``timeout_ms`` (default 30 s): how long the leader
waits for its preconditions (an offset of its epoch committed, the new voter
caught up) and then for the VotersRecord to commit. Only the Raft leader
accepts them; other nodes answer NOT_CONTROLLER with the leader's id and URL.

Errors: 409 CONCURRENT_VOTER_CHANGE (another change is not committed yet: one at
a time), 409 DUPLICATE_VOTER, 404 VOTER_NOT_FOUND, 400 INVALID_REQUEST, 504
REQUEST_TIMED_OUT (the new voter did not catch up, or the change did not commit,
in time; the message says which), 503 NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Container
from typing import Any

from aiohttp import web

from kraft.controller.errors import ApiError, not_controller
from kraft.controller.requests import INT32_MAX, parse_int
from kraft.raft.errors import (
    CONCURRENT_VOTER_CHANGE,
    DUPLICATE_VOTER,
    INVALID_VOTER_CHANGE,
    VOTER_NOT_FOUND,
    NotLeaderError,
    ReconfigError,
)
from kraft.raft_shell.driver import RaftClient
from kraft.security.server_security import authorize_admin
from kraft.server.api_spec import routes_from_spec
from kraft.server.http_codec import read_body, reply

DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 300_000

_PASS_THROUGH = {CONCURRENT_VOTER_CHANGE, DUPLICATE_VOTER, VOTER_NOT_FOUND, INVALID_VOTER_CHANGE}


def _field(body: dict[str, Any], name: str, kind: type, required: bool = True) -> Any:
    v = body.get(name)
    if v is None:
        if required:
            raise ApiError("INVALID_REQUEST", f"missing field {name!r}")
        return None
    if type(v) is not kind:
        raise ApiError("INVALID_REQUEST", f"field {name!r} must be a {kind.__name__}")
    return v


def _node_id(node_id: int) -> int:
    """A node id is Kafka's int32, never negative (-1 is "no node")."""
    if not 0 <= node_id <= INT32_MAX:
        raise ApiError("INVALID_REQUEST", f"node id {node_id} must be in 0..{INT32_MAX}")
    return node_id


def _timeout_s(value: Any) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_MS / 1000
    if type(value) is not int or not 0 < value <= MAX_TIMEOUT_MS:
        raise ApiError("INVALID_REQUEST", f"timeout_ms must be an integer in 1..{MAX_TIMEOUT_MS}")
    return value / 1000


def _to_api_error(e: Exception, raft: RaftClient) -> ApiError:
    if isinstance(e, NotLeaderError):
        return not_controller(e.leader_id, raft.leader_url(e.leader_id))
    if isinstance(e, ReconfigError):
        if e.code in _PASS_THROUGH:
            return ApiError(e.code, str(e))
        # LEADER_NOT_READY / VOTER_NOT_CAUGHT_UP that did not clear in time.
        return ApiError("REQUEST_TIMED_OUT", f"{e} (gave up waiting: {e.code})", cause=e.code)
    if isinstance(e, TimeoutError):
        return ApiError("REQUEST_TIMED_OUT", str(e) or "the voter change did not commit in time")
    raise e


# How long one look at a new voter's URL may take, and the pause between looks
# while it does not answer yet (it may still be starting: the change's own
# timeout bounds the whole wait, as it bounds the wait for it to catch up).
PROBE_TIMEOUT_S = 3.0
PROBE_RETRY_S = 0.5

# GET URL/v1/quorum with this controller's client security: the JSON, or an
# OSError/TimeoutError/ValueError saying why there is none.
ProbeVoter = Callable[[str, float], Awaitable[dict[str, Any]]]


async def check_voter_url(
    probe: ProbeVoter, node_id: int, directory_id: str, url: str, timeout_s: float
) -> None:
    """KIP-853's leader contacts a new voter before adding it (ApiVersions): the
    node answering at `url` must be `node_id` with `directory_id`, or every later
    election would dial the wrong node (or nobody). Raises ApiError: 400 for
    another node there, 504 REQUEST_TIMED_OUT when nothing answers in time."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout_s
    while True:
        left = deadline - loop.time()
        try:
            q = await probe(url, max(0.1, min(PROBE_TIMEOUT_S, left)))
        except (OSError, TimeoutError, ValueError) as e:
            if loop.time() + PROBE_RETRY_S >= deadline:
                why = str(e) or type(e).__name__
                raise ApiError(
                    "REQUEST_TIMED_OUT",
                    f"nothing answered GET {url}/v1/quorum as node {node_id} in "
                    f"{loop.time() - started:.1f} s of tries (timeout {timeout_s:g} s; {why}): "
                    "is that the new controller's listener?",
                ) from None
            await asyncio.sleep(PROBE_RETRY_S)
            continue
        if q.get("node_id") != node_id or q.get("directory_id") != directory_id:
            raise ApiError(
                "INVALID_REQUEST",
                f"{url} is node {q.get('node_id')} with directory {q.get('directory_id')}, "
                f"not node {node_id} with directory {directory_id}: give the new "
                "controller's own URL",
            )
        return


def build_quorum_routes(
    raft: RaftClient,
    broker_ids: Callable[[], Container[int]] = frozenset,
    probe: ProbeVoter | None = None,
) -> list[web.RouteDef]:
    """`broker_ids()`: the ids registered as brokers (a controller may not take one:
    controllers and brokers share one id namespace, as in Kafka). `probe`: how to
    ask a new voter's URL who answers there (None: not asked, as in tests of the
    rules alone)."""

    def leader_or_hint() -> None:
        core = raft.core
        if core is None or not core.is_leader:
            le = raft.leader_and_epoch
            raise not_controller(le.leader_id, raft.leader_url(le.leader_id))

    async def add_voter(request: web.Request) -> web.Response:
        authorize_admin(request, "change the controller quorum")
        body = await read_body(request)
        if not isinstance(body, dict):
            raise ApiError("INVALID_REQUEST", "the body must be an object")
        node_id = _node_id(_field(body, "node_id", int))
        directory_id = _field(body, "directory_id", str)
        url = body.get("url", body.get("endpoint"))
        if type(url) is not str or not url.startswith(("http://", "https://")):
            raise ApiError("INVALID_REQUEST", "field 'url' must be the voter's http(s):// URL")
        timeout_s = _timeout_s(body.get("timeout_ms"))
        leader_or_hint()
        if node_id in broker_ids():
            raise ApiError(
                "INVALID_REQUEST",
                f"node id {node_id} is a registered broker's; controllers and brokers share "
                "one id namespace: give the controller another --node-id",
            )
        if probe is not None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            await check_voter_url(probe, node_id, directory_id, url.rstrip("/"), timeout_s)
            timeout_s = max(0.1, timeout_s - (loop.time() - started))
        try:
            offset = await raft.add_voter(node_id, directory_id, url, timeout_s)
        except (NotLeaderError, ReconfigError, TimeoutError) as e:
            raise _to_api_error(e, raft) from None
        return reply(request, {"offset": offset, "voters": _voters(raft)})

    async def remove_voter(request: web.Request) -> web.Response:
        authorize_admin(request, "change the controller quorum")
        node_id = _node_id(parse_int(request.match_info["id"], "the voter id"))
        body: Any = {}
        if request.body_exists:
            body = await read_body(request)
            if not isinstance(body, dict):
                raise ApiError("INVALID_REQUEST", "the body must be an object")
        directory_id = request.query.get("directory_id", body.get("directory_id"))
        if type(directory_id) is not str or not directory_id:
            raise ApiError(
                "INVALID_REQUEST",
                "directory_id is required (the voter's, from kraft quorum describe --replication)",
            )
        timeout_raw = request.query.get("timeout_ms", body.get("timeout_ms"))
        if isinstance(timeout_raw, str):
            timeout_raw = parse_int(timeout_raw, "timeout_ms")
        timeout_s = _timeout_s(timeout_raw)
        leader_or_hint()
        try:
            offset = await raft.remove_voter(node_id, directory_id, timeout_s)
        except (NotLeaderError, ReconfigError, TimeoutError) as e:
            raise _to_api_error(e, raft) from None
        return reply(request, {"offset": offset, "voters": _voters(raft)})

    return routes_from_spec({"add_voter": add_voter, "remove_voter": remove_voter})


def _voters(raft: RaftClient) -> list[dict[str, Any]]:
    core = raft.core
    if core is None:
        return []
    return [
        {"node_id": v.node_id, "directory_id": v.directory_id, "url": v.url} for v in core.voter_set
    ]
