"""`POST /raft/{vote,begin-quorum-epoch,end-quorum-epoch,fetch,fetch-snapshot}`.

Bodies are msgpack maps in kraft.raft.messages' wire form. A body that is not a
well-formed request of the endpoint's type is answered 400 INVALID_REQUEST with a
message naming the problem (never a 500). A well-formed request gets the core's
Raft response with HTTP 200, except a cluster id mismatch, which is answered
409 INCONSISTENT_CLUSTER_ID (DESIGN 1.2) with the Raft response fields in the
body too, so that a Raft peer still reads it as a response.

With the authorizer on, a well-formed request is checked against the sender's
principal (kraft.security.authz): quorum RPCs only from the current voter they
name (the voter set is read live: KIP-853 changes it at run time), fetches only
as oneself, brokers only as observers; otherwise 403 UNAUTHORIZED. A Fetch's or
FetchSnapshot's max_bytes is capped at `replica.fetch.response.max.bytes`.
"""

from __future__ import annotations

import dataclasses

import msgpack
from aiohttp import web

from kraft.controller.errors import ApiError
from kraft.raft.messages import (
    INCONSISTENT_CLUSTER_ID,
    REQUEST_TYPES,
    FetchRequest,
    FetchSnapshotRequest,
    WireFormatError,
    message_from_wire,
    to_wire,
)
from kraft.raft_shell.driver import RaftClient, RaftFatalError
from kraft.security.server_security import authorize_raft
from kraft.server.http_codec import MSGPACK, read_body, reply

_BY_ENDPOINT = {cls.ENDPOINT: cls for cls in REQUEST_TYPES}  # type: ignore[attr-defined]


DEFAULT_FETCH_MAX_BYTES = 10 * 1024 * 1024


def build_raft_routes(
    raft: RaftClient, fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
) -> list[web.RouteDef]:
    async def handle(request: web.Request) -> web.StreamResponse:
        endpoint = request.match_info["endpoint"]
        cls = _BY_ENDPOINT.get(endpoint)
        if cls is None:
            raise ApiError(
                "INVALID_REQUEST",
                f"unknown Raft endpoint {endpoint!r}; one of {sorted(_BY_ENDPOINT)}",
            )
        body = await read_body(request)
        if isinstance(body, dict) and "type" not in body:
            # The endpoint names the type; a client may leave it out.
            body = {**body, "type": cls.__name__}
        try:
            msg = message_from_wire(body)
        except WireFormatError as e:
            raise ApiError("INVALID_REQUEST", f"malformed {cls.__name__}: {e}") from None
        if type(msg) is not cls:
            raise ApiError(
                "INVALID_REQUEST",
                f"POST /raft/{endpoint} takes a {cls.__name__}, not a {type(msg).__name__}",
            )
        core = raft.core
        authorize_raft(request, msg, core.voters if core is not None else frozenset())
        if isinstance(msg, FetchRequest | FetchSnapshotRequest) and msg.max_bytes > fetch_max_bytes:
            msg = dataclasses.replace(msg, max_bytes=fetch_max_bytes)
        try:
            resp = await raft.handle_inbound(msg)
        except TimeoutError:
            raise ApiError("REQUEST_TIMED_OUT", f"Raft {endpoint} got no answer in time") from None
        except RaftFatalError:
            raise ApiError("NOT_CONTROLLER", "this node's Raft client is stopping") from None
        wire = to_wire(resp)
        status = 200
        if resp.error == INCONSISTENT_CLUSTER_ID:
            status = 409
            wire["error_code"] = INCONSISTENT_CLUSTER_ID
            wire["message"] = (
                f"request for cluster {msg.cluster_id!r}; this node is in {raft.cluster_id!r}"
            )
        if MSGPACK in request.headers.get("Accept", MSGPACK) or not _json_ok(wire):
            return web.Response(
                body=msgpack.packb(wire, use_bin_type=True), status=status, content_type=MSGPACK
            )
        return reply(request, wire, status)

    return [web.post("/raft/{endpoint}", handle)]


def _json_ok(wire: dict[str, object]) -> bool:
    """JSON can carry the response only if it holds no bytes (records, chunks)."""
    return not any(isinstance(v, bytes | bytearray) for v in wire.values())
