"""The one table of the controller's HTTP API: every route, who may call it, and the
JSON Schema of its body and query. The routes are registered from it
(`routes_from_spec`), `GET /v1/openapi.json` is generated from it, and the fuzz
tests drive every endpoint in it; the Raft bodies' schemas are derived from the
message dataclasses themselves (kraft.raft.messages).

`auth` says what the authorizer requires when `authorizer.enable=true`:
`open` (no credential), `any` (any authenticated principal), `admin`
(super.users), `broker` (the body's broker_id's own credential), `raft` (the
sender's own controller/broker credential; quorum RPCs only from current voters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from kraft.controller.requests import INT16_MAX, INT32_MAX, INT64_MAX
from kraft.raft.messages import REQUEST_TYPES

Schema = dict[str, Any]

INT: Schema = {"type": "integer"}
NONNEG: Schema = {"type": "integer", "minimum": 0}
STR: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
# Kafka's wire types: the ranges kraft.controller.requests checks
ID: Schema = {"type": "integer", "minimum": 0, "maximum": INT32_MAX}  # node/partition id
I32: Schema = {"type": "integer", "minimum": -INT32_MAX - 1, "maximum": INT32_MAX}
I64: Schema = {"type": "integer", "minimum": -INT64_MAX - 1, "maximum": INT64_MAX}
VERSION: Schema = {"type": "integer", "minimum": 0, "maximum": INT16_MAX}
UUID: Schema = {"type": "string", "format": "uuid"}


def obj(required: list[str], **props: Schema) -> Schema:
    return {"type": "object", "required": required, "properties": props}


def closed(required: list[str], **props: Schema) -> Schema:
    """An admin's body: a field not named here is refused (a typo is not ignored)."""
    return {**obj(required, **props), "additionalProperties": False}


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: str
    summary: str
    auth: str
    body: Schema | None = None
    query: Mapping[str, Schema] = field(default_factory=dict)
    msgpack_only: bool = False  # the Raft RPCs


_STANDBY = {"standby": {"type": "string", "enum": ["true", "false"]}}
_CONFIGS = {"type": "object", "additionalProperties": {"type": ["string", "null"]}}
_ASSIGNMENTS = arr(arr(ID))

V1: list[Endpoint] = [
    Endpoint(
        "register", "POST", "/v1/brokers/register", "register a broker (new broker epoch)",
        "broker",
        obj(
            ["broker_id", "cluster_id", "incarnation_id"],
            broker_id=ID, cluster_id=STR, incarnation_id=UUID,
            listeners=arr(obj(
                ["name", "host", "port"], name=STR, host=STR,
                port={"type": "integer", "minimum": 0, "maximum": 65535},
                security_protocol={"type": "string", "enum": ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]},
            )),
            rack={"type": ["string", "null"]},
            features=arr(obj(
                ["name", "min_supported_version", "max_supported_version"],
                name=STR, min_supported_version=VERSION, max_supported_version=VERSION,
            )),
            previous_broker_epoch=I64,  # KIP-966: -1 after an unclean shutdown
        ),
    ),
    Endpoint(
        "heartbeat", "POST", "/v1/brokers/heartbeat", "broker heartbeat", "broker",
        obj(
            ["broker_id", "broker_epoch", "current_metadata_offset"],
            broker_id=ID, broker_epoch=I64, current_metadata_offset=I64,
            want_fence=BOOL, want_shutdown=BOOL,
        ),
    ),
    Endpoint("unregister", "DELETE", "/v1/brokers/{id}", "unregister a broker", "admin"),
    Endpoint("get_brokers", "GET", "/v1/brokers", "registered brokers", "any", query=_STANDBY),
    Endpoint(
        "alter_partition", "POST", "/v1/partitions/alter", "AlterPartition from a leader",
        "broker",
        obj(
            ["broker_id", "broker_epoch", "topic_id", "partition_id", "leader_epoch",
             "partition_epoch", "new_isr_with_epochs"],
            broker_id=ID, broker_epoch=I64, topic_id=STR, partition_id=ID,
            leader_epoch=I32, partition_epoch=I32,
            new_isr_with_epochs=arr(obj(["broker_id"], broker_id=ID, broker_epoch=I64)),
            leader_recovery_state={"type": "integer", "enum": [0, 1]},
        ),
    ),
    Endpoint(
        "create_topic", "POST", "/v1/topics", "create a topic", "admin",
        closed(["name"], name=STR, partitions=I32, replication_factor=I32,
               assignments=_ASSIGNMENTS, configs=_CONFIGS),
    ),
    Endpoint("get_topics", "GET", "/v1/topics", "list topics", "any", query=_STANDBY),
    Endpoint("get_topic", "GET", "/v1/topics/{name}", "describe a topic", "any", query=_STANDBY),
    Endpoint("delete_topic", "DELETE", "/v1/topics/{name}", "delete a topic", "admin"),
    Endpoint(
        "add_partitions", "POST", "/v1/topics/{name}/partitions", "raise the partition count",
        "admin", closed(["count"], count=I32, assignments=_ASSIGNMENTS),
    ),
    Endpoint(
        "alter_configs", "POST", "/v1/topics/{name}/configs", "set or delete topic configs",
        "admin", closed(["configs"], configs=_CONFIGS),
    ),
    Endpoint(
        "elect", "POST", "/v1/elections", "preferred or unclean leader election", "admin",
        closed(["topic", "partition"], topic=STR, partition=ID,
               type={"type": "string", "enum": ["preferred", "unclean"]}),
    ),
    Endpoint(
        "alter_reassignments", "POST", "/v1/partitions/reassignments",
        "start or cancel partition reassignments (KIP-455; kafka-reassign-partitions JSON)",
        "admin",
        obj(["partitions"], version={"type": "integer", "enum": [1]},
            partitions=arr(obj(["topic", "partition", "replicas"], topic=STR,
                               partition=ID,
                               replicas={"type": ["array", "null"], "items": ID}))),
    ),
    Endpoint("list_reassignments", "GET", "/v1/partitions/reassignments",
             "the ongoing partition reassignments", "any", query=_STANDBY),
    Endpoint("get_metadata", "GET", "/v1/metadata", "the committed metadata image", "any",
             query=_STANDBY),
    Endpoint("get_quorum", "GET", "/v1/quorum", "this node's view of the quorum", "any"),
    Endpoint(
        "add_voter", "POST", "/v1/quorum/voters", "add a controller to the voters (KIP-853)",
        "admin",
        obj(["node_id", "directory_id", "url"], node_id=ID, directory_id=STR, url=STR,
            timeout_ms={"type": "integer", "minimum": 1, "maximum": 300000}),
    ),
    Endpoint(
        "remove_voter", "DELETE", "/v1/quorum/voters/{id}", "remove a voter (KIP-853)", "admin",
        obj([], directory_id=STR, timeout_ms=INT),
        query={"directory_id": STR, "timeout_ms": STR},
    ),
    Endpoint("openapi", "GET", "/v1/openapi.json", "this description", "open"),
    Endpoint("metrics", "GET", "/metrics", "Prometheus metrics", "any"),
    Endpoint("healthz", "GET", "/healthz", "liveness", "open"),
]  # fmt: skip


def _field_schema(name: str, annotation: str) -> Schema:
    a = annotation.replace(" ", "")
    if a == "int":
        return INT
    if a == "bool":
        return BOOL
    if a == "str":
        return STR
    if a == "bytes":
        return {"type": "string", "format": "binary"}
    if a == "tuple[int,...]":
        return arr(INT)
    if a.startswith("SnapshotId"):
        return {"type": "array", "items": INT, "minItems": 2, "maxItems": 2,
                "description": "[end_offset, epoch]"}  # fmt: skip
    raise AssertionError(f"no schema for {name}: {annotation}")


def raft_schema(cls: type) -> Schema:
    """The msgpack body of a Raft request, from its dataclass fields."""
    props: dict[str, Schema] = {"type": {"type": "string", "enum": [cls.__name__]}}
    required = []
    for f in dataclasses.fields(cls):
        props[f.name] = _field_schema(f.name, str(f.type))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    return obj(required, **props)


RAFT: list[Endpoint] = [
    Endpoint(
        f"raft_{cls.ENDPOINT}",  # type: ignore[attr-defined]
        "POST",
        f"/raft/{cls.ENDPOINT}",  # type: ignore[attr-defined]
        f"Raft {cls.__name__} (msgpack; `type` may be left out)",
        "raft",
        raft_schema(cls),
        msgpack_only=True,
    )
    for cls in REQUEST_TYPES
]

ENDPOINTS: list[Endpoint] = V1 + RAFT
BY_NAME: dict[str, Endpoint] = {e.name: e for e in ENDPOINTS}


def routes_from_spec(handlers: Mapping[str, Callable[..., Any]]) -> list[web.RouteDef]:
    """RouteDefs for the given handlers, paths and methods from the table."""
    out = []
    for name, handler in handlers.items():
        ep = BY_NAME.get(name)
        if ep is None:
            raise AssertionError(f"handler {name!r} is not in the API table")
        out.append(web.route(ep.method, ep.path, handler))
    return out


_ERROR: Schema = obj(["error_code", "message"], error_code=STR, message=STR)


def openapi(server_url: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.0 description of the whole API."""
    paths: dict[str, dict[str, Any]] = {}
    for ep in ENDPOINTS:
        op: dict[str, Any] = {
            "operationId": ep.name,
            "summary": ep.summary,
            "x-kraft-auth": ep.auth,
            "responses": {
                "200": {"description": "success"},
                "4XX": {
                    "description": "error (Kafka's error name)",
                    "content": {"application/json": {"schema": _ERROR}},
                },
            },
        }
        params = [
            {"name": p, "in": "path", "required": True, "schema": STR}
            for p in _path_params(ep.path)
        ]
        params += [{"name": q, "in": "query", "schema": s} for q, s in ep.query.items()]
        if params:
            op["parameters"] = params
        if ep.body is not None:
            types = ["application/msgpack"] if ep.msgpack_only else [
                "application/json", "application/msgpack"]  # fmt: skip
            op["requestBody"] = {
                "required": bool(ep.body.get("required")),
                "content": {t: {"schema": ep.body} for t in types},
            }
        if ep.auth != "open":
            op["security"] = [{"bearer": []}, {"mtls": []}]
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "kraft-py controller API", "version": "1"},
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "principal:secret (authentication.token.file)"},
                "mtls": {"type": "mutualTLS", "description": "client certificate CN"},
            }
        },
    }  # fmt: skip
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc


def _path_params(path: str) -> list[str]:
    return [seg[1:-1] for seg in path.split("/") if seg.startswith("{") and seg.endswith("}")]
