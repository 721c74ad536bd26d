"""HTTP bodies: msgpack (`application/msgpack`) or JSON, and Kafka-named error replies.

The request's Content-Type says how to read it; the reply uses the Accept header,
else the request's type, else JSON (so `curl` works). A malformed body is an
INVALID_REQUEST (400), a body over the limit REQUEST_TOO_LARGE (413), never a 500.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

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
            why = str(e) or type(e).__name__  # some carry no message
            raise ApiError("INVALID_REQUEST", f"body is not valid msgpack: {why}") from None
    try:
        body = json.loads(raw, parse_int=_json_int)
    except RecursionError:
        raise ApiError("INVALID_REQUEST", "body is not valid JSON: it nests too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
        raise ApiError("INVALID_REQUEST", f"body is not valid JSON: {e}") from None
    if _SURROGATE_ESCAPE.search(raw) is not None:
        # A lone \ud800 escape decodes to a str that no UTF-8 record can hold
        # (msgpack bodies cannot carry one: their strings are strict UTF-8).
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ApiError(
                "INVALID_REQUEST",
                "body is not valid JSON: a string holds a lone UTF-16 surrogate escape",
            ) from None
    return body


# What msgpack can carry (int64 and uint64): a wider JSON integer is no field's value.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _json_int(text: str) -> int:
    value = int(text)  # ValueError beyond Python's digit limit too
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"integer {text[:20]}{'...' if len(text) > 20 else ''} exceeds 64 bits")
    return value


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


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@web.middleware
async def same_origin_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """A write that a browser sends from another site's page is refused (CSRF): a
    `text/plain` POST needs no CORS preflight, and a browser that has the console's
    Basic credential would send it. Browsers name the page's origin in `Origin`; the
    CLI, the agents and curl send none, and the console's own page sends this one."""
    origin = request.headers.get("Origin")
    if (
        origin is not None
        and request.method not in _SAFE_METHODS
        and urlsplit(origin).netloc.lower() != request.host.lower()
    ):
        raise ApiError(
            "UNAUTHORIZED",
            f"a write from another origin ({origin}) is refused: the web console's "
            "own page sends its own, the CLI and the agents none",
            http_status=403,
        )
    return await handler(request)
