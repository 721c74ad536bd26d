"""In-process controller nodes with security settings, and clients for them."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgpack

from kraft.config import CONTROLLER_KEYS, load_config
from kraft.security.tls import client_context
from kraft.server.node import ControllerNode, NodeSettings
from tests.unit.raft_shell.raft_harness import free_ports

FAST = [
    "controller.quorum.election.timeout.ms=150",
    "controller.quorum.fetch.timeout.ms=300",
    "controller.quorum.fetch.max.wait.ms=100",
    "controller.quorum.request.timeout.ms=300",
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=200",
]


async def start_single(
    root: Path, overrides: list[str] = (), config_file: Path | None = None, node_id: int = 1
) -> ControllerNode:
    """A one-voter quorum (it elects itself at once); returns it once active."""
    (port,) = free_ports(1)
    # No idle NoOps (unless overridden): tests check that a refused request wrote
    # nothing by comparing log offsets, which a NoOp every 500 ms would move.
    cfg = load_config(
        CONTROLLER_KEYS,
        str(config_file) if config_file else None,
        [*FAST, "metadata.max.idle.interval.ms=0", *overrides],
    )
    node = ControllerNode(NodeSettings(node_id, {node_id: ("127.0.0.1", port)}, root, config=cfg))
    await node.start()
    deadline = time.monotonic() + 10
    while not node.controller.active:
        if time.monotonic() > deadline:
            await node.stop(1.0)
            raise AssertionError("the single node did not become active")
        await asyncio.sleep(0.01)
    return node


def ctx(certs: Path, principal: str | None = None) -> ssl.SSLContext:
    """Trusts the test CA; presents `principal`'s certificate when given."""
    return client_context(
        str(certs / "ca.pem"), str(certs / f"{principal}.pem") if principal else None
    )


def token(certs: Path, principal: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + (certs / f"{principal}.token").read_text().strip()}


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    ssl_ctx: Any = True,
    as_msgpack: bool = False,
) -> tuple[int, Any]:
    h = dict(headers or {})
    data = None
    if body is not None:
        if as_msgpack:
            h.update({"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
            data = msgpack.packb(body, use_bin_type=True)
        else:
            h["Content-Type"] = "application/json"
            data = json.dumps(body)
    async with session.request(method, url, data=data, headers=h, ssl=ssl_ctx) as r:
        raw = await r.read()
        if r.content_type == "application/msgpack":
            return r.status, msgpack.unpackb(raw, raw=False, strict_map_key=False)
        return r.status, json.loads(raw) if raw else None


def register_body(broker_id: int, cluster_id: str) -> dict[str, Any]:
    return {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": str(uuid.uuid4()),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
        "rack": None,
        "features": [],
    }


async def register_unfenced(
    session: aiohttp.ClientSession, node: ControllerNode, broker_id: int, **kw: Any
) -> int:
    """Register `broker_id` and heartbeat (caught up) until it is unfenced; its epoch."""
    st, reg = await call(
        session,
        "POST",
        node.url + "/v1/brokers/register",
        register_body(broker_id, node.cluster_id),
        **kw,
    )
    assert st == 200, reg
    epoch = reg["broker_epoch"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        hb = {
            "broker_id": broker_id,
            "broker_epoch": epoch,
            "current_metadata_offset": node.controller.image.offset,
        }
        st, out = await call(session, "POST", node.url + "/v1/brokers/heartbeat", hb, **kw)
        assert st == 200, out
        if not out["is_fenced"]:
            return epoch
        await asyncio.sleep(0.02)
    raise AssertionError(f"broker {broker_id} was not unfenced")
