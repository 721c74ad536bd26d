"""HTTP bodies: msgpack (`application/msgpack`) or JSON, and Kafka-named error replies.

The request's Content-Type says how to read it; the reply uses the Accept header,
else the request's type, else JSON (so `curl` works). A malformed body is an
INVALID_REQUEST (400), a body over the limit REQUEST_TOO_LARGE (413), never a 500.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
from aiohttp import web

from kraft.controller.errors import ApiError

MSGPACK = "application/msgpack"
JSON = "application/json"


def wants_msgpack(accept: str, content_type: str) -> bool:
    """Reply in msgpack? The Accept header decides, else the request's content type."""
    if MSGPACK in accept or "application/x-msgpack" in accept:
        return True
    if JSON in accept:
        return False
    return content_type in (MSGPACK, "application/x-msgpack")


def _wants_msgpack(request: web.Request) -> bool:
    return wants_msgpack(request.headers.get("Accept", ""), request.content_type)


def decode_body(raw: bytes, content_type: str) -> Any:
    """A request body by its content type (msgpack, else JSON), or INVALID_REQUEST."""
    if not raw:
        return {}
    if content_type in (MSGPACK, "application/x-msgpack"):
        try:
            return msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several types for garbage
            raise ApiError("INVALID_REQUEST", f"body is not valid msgpack: {e}") from None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError("INVALID_REQUEST", f"body is not valid JSON: {e}") from None


def encode_reply(body: Any, as_msgpack: bool) -> bytes:
    return msgpack.packb(body, use_bin_type=True) if as_msgpack else json.dumps(body).encode()


async def read_body(request: web.Request) -> Any:
    """The decoded body, or ApiError naming what is wrong with it."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large(request) from None
    return decode_body(raw, request.content_type)


def too_large(request: web.Request) -> ApiError:
    """413 naming the limit (aiohttp's exception does not carry it in every version)."""
    limit = getattr(request, "_client_max_size", None)
    return ApiError(
        "REQUEST_TOO_LARGE",
        f"request body exceeds max.request.bytes ({limit} bytes)"
        if limit
        else "request body exceeds max.request.bytes",
    )


def reply(request: web.Request, body: Any, status: int = 200) -> web.Response:
    if _wants_msgpack(request):
        return web.Response(body=encode_reply(body, True), status=status, content_type=MSGPACK)
    return web.Response(text=json.dumps(body), status=status, content_type=JSON)


def error_reply(request: web.Request, err: ApiError) -> web.Response:
    return reply(request, err.to_body(), err.status)


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """ApiError -> its status and body; aiohttp's own 4xx get the same body shape."""
    try:
        return await handler(request)
    except ApiError as e:
        return error_reply(request, e)
    except web.HTTPRequestEntityTooLarge:
        return error_reply(request, too_large(request))
    except web.HTTPNotFound:
        return reply(
            request,
            {"error_code": "NOT_FOUND", "message": f"no route {request.method} {request.path}"},
            404,
        )
    except web.HTTPMethodNotAllowed as e:
        return reply(
            request,
            {
                "error_code": "METHOD_NOT_ALLOWED",
                "message": f"{request.method} not allowed on {request.path}; use {sorted(e.allowed_methods)}",
            },
            405,
        )
