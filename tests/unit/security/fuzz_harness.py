"""A controller in a background thread, and hostile requests built from the API table.

Hypothesis draws, per request, a `shape` and a `seed`; `build_request` turns them
into one request for an endpoint of kraft.server.api_spec: its body schema gives
near-valid bodies (fields from the schema, from a pool of values that exist in
the cluster so requests go deep, or of a wrong type, missing, extra), next to
arbitrary JSON/msgpack values, truncated encodings, random bytes, oversized
bodies, wrong content types, methods and bad query strings. Building from a
seeded random.Random keeps a request cheap to make (hypothesis' own per-draw
cost would dominate a 24,000-request run) and exactly reproducible from the
(shape, seed) pair hypothesis reports and shrinks.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import msgpack
from hypothesis import strategies as st

from kraft.server.api_spec import Endpoint
from tests.unit.security.harness import start_single

MAX_REQUEST_BYTES = 65536

EDGE_INTS = [
    0,
    1,
    -1,
    2,
    3,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    10**30,
]
CONTENT_TYPES = [
    "application/json",
    "application/msgpack",
    "application/x-msgpack",
    "text/plain",
    None,
    "application/json; charset=latin-1",
    "multipart/form-data; boundary=xx",
    "application/msgpack; garbage=;;",
]
ACCEPTS = [None, "application/json", "application/msgpack", "*/*", "x/y;q=abc"]


class FuzzServer:
    """One single-voter controller on its own event loop thread."""

    def __init__(self, root: Path, overrides: list[str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.node = self.run(start_single(root, overrides))
        self.host, self.port = self.node.listen
        self.conn: http.client.HTTPConnection | None = None
        self.requests = 0

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def state(self) -> tuple[int, int, int, bool]:
        """Read from this thread: plain attribute reads, and no request is in flight."""
        n = self.node
        core = n.raft.core
        return (
            n.controller.image.offset,
            n.log.end_offset,
            core.epoch if core else -1,
            n.controller.active,
        )

    def settle(self, timeout: float = 10) -> None:
        """Wait until the node leads again with everything committed (after an accepted
        Vote or BeginQuorumEpoch moved it to a new epoch)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = self.node
            core = n.raft.core
            if (
                n.controller.active
                and core is not None
                and core.is_leader
                and n.raft.delivered_offset >= n.log.end_offset
            ):
                return
            time.sleep(0.01)
        raise AssertionError("the fuzzed node did not lead again")

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
                self.requests += 1
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return resp.status, data, resp.getheader("Content-Type", "")
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # a kept-alive connection the server closed after its last answer
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
            except TimeoutError:
                # No answer at all is a finding in itself: say what the node was
                # doing rather than leave a bare socket timeout.
                self.conn.close()
                self.conn = None
                raw = self.node.raft
                raise AssertionError(
                    f"no answer in 20 s to {method} {path} {headers}; node state "
                    f"{self.state()}, raft {raw.describe() if raw.core else None}, "
                    f"fatal {raw.fatal_error!r}, pending commits {len(raw._commit_waiters)}"
                ) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.run(self.node.stop(2.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# ---------------------------------------------------------------- generation

_ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz0123456789-_.",
    '\x00\x01\t\n\r "\\/%{}[]:,#?&=',
    "éß漢字🙂\u200b\ufeff\U0010ffff",
]


def _text(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.05:
        return ""
    if r < 0.08:
        return "x" * rng.choice([255, 256, 1000, 5000])
    if r < 0.1:
        return "\ud800"  # a lone surrogate: not encodable as UTF-8
    alphabet = rng.choice(_ALPHABETS)
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16)))


def _int(rng: random.Random) -> int:
    return rng.choice(EDGE_INTS) if rng.random() < 0.3 else rng.randint(-3, 40)


def hostile(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON or msgpack value."""
    k = rng.randrange(10 if depth < 3 else 7)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return _int(rng)
    if k == 3:
        return rng.choice([0.5, -0.0, float("nan"), float("inf"), 1e308, 1e-308])
    if k == 4:
        return _text(rng)
    if k == 5:
        return rng.randbytes(rng.randint(0, 16))
    if k == 6:
        return rng.choice([[], {}, [[]], {"": None}])
    if k in (7, 8):
        return [hostile(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = [_text(rng), rng.randint(-3, 3), rng.randbytes(2)]
    return {rng.choice(keys): hostile(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def from_schema(
    rng: random.Random,
    schema: dict[str, Any],
    pool: dict[str, list[Any]],
    name: str = "",
    p: float = 0.25,
) -> Any:
    """A value near the schema: valid, from the pool, or (with probability p, per
    field) anything. p = 0 gives valid requests, which reach the controller's logic."""
    r = rng.random()
    if r < p:
        return hostile(rng)
    if name in pool and r < 0.6 + 0.4 * (p == 0):
        return rng.choice(pool[name])
    t = schema.get("type")
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if isinstance(t, list):
        t = rng.choice(t)
    if t == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        out: dict[Any, Any] = {}
        if not props and "additionalProperties" in schema:
            for _ in range(rng.randint(0, 4)):
                out[_text(rng)] = from_schema(rng, schema["additionalProperties"], pool, p=p)
            return out
        for key, sub in props.items():
            # required fields are (nearly always) there, optional ones half the time
            if key in required and rng.random() >= p / 2 or rng.random() < 0.5:
                out[key] = from_schema(rng, sub, pool, key, p)
        if rng.random() < p / 2:
            out[_text(rng)] = hostile(rng)
        return out
    if t == "array":
        lo, hi = schema.get("minItems", 0), schema.get("maxItems", 5)
        return [from_schema(rng, schema["items"], pool, p=p) for _ in range(rng.randint(lo, hi))]
    if t == "integer":
        lo = schema.get("minimum")
        if p == 0:
            return rng.randint(max(lo or 0, 0), min(schema.get("maximum", 5), 5))
        return _int(rng) if rng.random() < 0.5 else rng.randint(lo if lo is not None else -3, 20)
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    if t == "string":
        if schema.get("format") == "binary":
            return rng.randbytes(rng.randint(0, 64))
        if p == 0:
            return rng.choice(["t", "x", "http://127.0.0.1:1"])
        return _text(rng) if rng.random() < 0.7 else rng.choice(["http://127.0.0.1:1", "t"])
    return hostile(rng)


def _encode(value: Any, as_msgpack: bool) -> bytes:
    if as_msgpack:
        try:
            return msgpack.packb(value, use_bin_type=True)
        except (OverflowError, TypeError, ValueError):
            pass
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError):
        return b"null"


def build_request(
    ep: Endpoint, pool: dict[str, list[Any]], kind: int, seed: int
) -> tuple[str, str, bytes | None, dict[str, str]]:
    """(method, path with query, body, headers) of one hostile request to `ep`;
    `kind` (0..19) picks the body's category, `seed` everything else."""
    rng = random.Random(seed)
    query_kind = rng.randrange(10)
    ct_kind = rng.randrange(4)
    method_kind = rng.randrange(20)
    as_msgpack = ep.msgpack_only or rng.random() < 0.5
    # how hostile the fields of a schema-shaped body are: valid, a little, a lot
    p = rng.choice([0.0, 0.0, 0.05, 0.25])
    path = ep.path
    for param, choices in (("{name}", ["t", "missing", "a%2Fb"]), ("{id}", ["4", "1", "99"])):
        if param in path:
            r = rng.random()
            raw = (
                rng.choice(choices)
                if r < 0.4
                else str(rng.choice(EDGE_INTS))
                if r < 0.6
                else urllib.parse.quote(_text(rng) or "x", safe="", errors="surrogatepass")
            )
            path = path.replace(param, raw)
    if query_kind < 2:
        keys = [*ep.query, "standby", "x", "directory_id", "timeout_ms"]
        values = ["true", "false", "1", "-1", "99999999999999999999", ""]
        q = {
            rng.choice(keys): rng.choice(values) if rng.random() < 0.6 else _text(rng)
            for _ in range(rng.randint(1, 3))
        }
        path += "?" + urllib.parse.urlencode(q, errors="surrogatepass")
    elif query_kind == 2:
        path += "?" + rng.choice(["%", "%zz", "a=%ff", "&&==", "standby", "standby=%00"])
    body: bytes | None
    if ep.body is None and kind < 14:
        body = None  # a GET or DELETE mostly has no body
    elif kind < 12:
        value = from_schema(rng, ep.body or {}, pool, p=p)
        if ep.msgpack_only and isinstance(value, dict) and kind % 2:
            value.pop("type", None)
        body = _encode(value, as_msgpack)
    elif kind < 14:
        body = _encode(hostile(rng), as_msgpack)
    elif kind < 16:
        full = _encode(from_schema(rng, ep.body or {}, pool), as_msgpack)
        body = full[: rng.randint(0, max(0, len(full) - 1))]  # truncated
    elif kind < 18:
        body = rng.randbytes(rng.randint(1, 200))
    elif kind < 19:
        body = b""
    else:
        body = b'{"name": "' + b"x" * (MAX_REQUEST_BYTES + rng.randint(1, 4096)) + b'"}'
    headers: dict[str, str] = {}
    ct = (
        rng.choice(CONTENT_TYPES)
        if ct_kind == 0
        else ("application/msgpack" if as_msgpack else "application/json")
    )
    if ct is not None and body is not None:
        headers["Content-Type"] = ct
    accept = rng.choice(ACCEPTS)
    if accept is not None:
        headers["Accept"] = accept
    method = ep.method if method_kind else rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH"])
    return method, path, body, headers


# Hypothesis draws the (shape, seed) pairs: a batch per example keeps its per-example
# cost small next to the requests themselves.
request_keys = st.tuples(st.integers(0, 19), st.integers(0, 2**32 - 1))
