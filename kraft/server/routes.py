"""The client API of DESIGN 1.2 as aiohttp routes over a ControllerService.

Handlers only parse, call the service and shape replies: every decision is in
the pure controller, every write goes through the service's event queue and is
answered after commit. Writes and reads of the image go to the active controller
(others answer NOT_CONTROLLER with the leader's id and URL); `?standby=true` reads
a standby's committed image, `/v1/quorum`, `/metrics` and `/healthz` work anywhere.

Paths and methods come from the API table (kraft.server.api_spec). With the
authorizer on, a broker's requests are checked against its own credential right
after parsing (before a heartbeat counts as contact), admin operations need a
super user (kraft.security.server_security); topic limits are checked before any record
is generated (kraft.controller.topic_policy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from kraft.console.server import build_console_routes
from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import ControllerResult, QuorumController
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    RegisterBrokerRequest,
    parse_int,
    parse_reassignment_plan,
)
from kraft.controller.topic_policy import (
    TopicLimits,
    check_create_partitions,
    check_create_topic,
    check_topic_count,
)
from kraft.controller.views import describe_topic, list_brokers, list_topics, metadata_view
from kraft.security.server_security import authorize_admin, authorize_broker
from kraft.server.api_spec import openapi, routes_from_spec
from kraft.server.http_codec import read_body, reply
from metadata_log.image import MetadataImage

Generate = Callable[
    [QuorumController, int, int], ControllerResult
]  # (controller, now_ms, next_offset)


class ControllerService(Protocol):
    """What the routes need from the controller shell."""

    async def write(self, name: str, generate: Generate, *, priority: bool = False) -> Any:
        """Queue a command; answer its reply once its records are committed."""
        ...

    async def read_image(self, standby: bool = False) -> MetadataImage:
        """The committed image (on the active controller unless standby is allowed)."""
        ...

    def submit(self, name: str, generate: Generate, *, priority: bool = False) -> Any:
        """Queue a command; a future of its reply (raises ApiError at once if refused)."""
        ...

    def timed_out(self, name: str) -> ApiError: ...

    @property
    def reply_timeout_s(self) -> float: ...

    def note_heartbeat_contact(self, broker_id: int, broker_epoch: int) -> None: ...

    def quorum_view(self) -> dict[str, Any]: ...

    def metrics_text(self) -> tuple[bytes, str]: ...


HEARTBEAT = "broker-heartbeat"


class HeartbeatCommand:
    """The heartbeat's command (the aiohttp route and kraft.server.heartbeat_front).
    `at_once`: its reply without the event queue when it changes nothing
    (QuorumController.heartbeat_at_once), while a large write holds the queue."""

    __slots__ = ("req",)

    def __init__(self, req: BrokerHeartbeatRequest) -> None:
        self.req = req

    def __call__(self, c: Any, now: int, off: int) -> Any:
        return c.heartbeat(self.req, now)

    def at_once(self, c: Any, now: int, committed_offset: int) -> Any:
        return c.heartbeat_at_once(self.req, now, committed_offset)


def heartbeat_command(req: BrokerHeartbeatRequest) -> Generate:
    """The heartbeat's command (the aiohttp route and kraft.server.heartbeat_front)."""
    return HeartbeatCommand(req)


def build_routes(
    service: ControllerService, limits: TopicLimits | None = None
) -> list[web.RouteDef]:
    limits = limits or TopicLimits()

    async def register(request: web.Request) -> web.Response:
        req = RegisterBrokerRequest.parse(await read_body(request))
        authorize_broker(request, req.broker_id)
        return reply(
            request,
            await service.write(
                "register-broker", lambda c, now, off: c.register_broker(req, now, off)
            ),
        )

    async def heartbeat(request: web.Request) -> web.Response:
        req = BrokerHeartbeatRequest.parse(await read_body(request))
        authorize_broker(request, req.broker_id)
        # Contact counts as it arrives, even if the queued command misses its deadline.
        service.note_heartbeat_contact(req.broker_id, req.broker_epoch)
        result = await service.write(HEARTBEAT, heartbeat_command(req), priority=True)
        return reply(request, result)

    async def unregister(request: web.Request) -> web.Response:
        authorize_admin(request, "unregister a broker")
        broker_id = parse_int(request.match_info["id"], "broker id")
        return reply(
            request,
            await service.write(
                "unregister-broker", lambda c, now, off: c.unregister_broker(broker_id, now)
            ),
        )

    async def alter_partition(request: web.Request) -> web.Response:
        req = AlterPartitionRequest.parse(await read_body(request))
        authorize_broker(request, req.broker_id)
        return reply(
            request,
            await service.write("alter-partition", lambda c, now, off: c.alter_partition(req, now)),
        )

    async def create_topic(request: web.Request) -> web.Response:
        authorize_admin(request, "create topics")
        req = CreateTopicRequest.parse(await read_body(request))
        check_create_topic(req, limits)

        def generate(c: QuorumController, now: int, off: int) -> ControllerResult:
            check_topic_count(c.image, limits)
            return c.create_topic(req, now)

        return reply(request, await service.write("create-topic", generate), 201)

    async def delete_topic(request: web.Request) -> web.Response:
        authorize_admin(request, "delete topics")
        name = request.match_info["name"]
        return reply(
            request,
            await service.write("delete-topic", lambda c, now, off: c.delete_topic(name, now)),
        )

    async def add_partitions(request: web.Request) -> web.Response:
        authorize_admin(request, "add partitions")
        req = CreatePartitionsRequest.parse(request.match_info["name"], await read_body(request))
        check_create_partitions(req, limits)
        return reply(
            request,
            await service.write(
                "create-partitions", lambda c, now, off: c.create_partitions(req, now)
            ),
        )

    async def alter_configs(request: web.Request) -> web.Response:
        authorize_admin(request, "alter topic configs")
        req = AlterConfigsRequest.parse(request.match_info["name"], await read_body(request))
        return reply(
            request,
            await service.write("alter-configs", lambda c, now, off: c.alter_configs(req, now)),
        )

    async def elect(request: web.Request) -> web.Response:
        authorize_admin(request, "elect leaders")
        req = ElectLeadersRequest.parse(await read_body(request))
        return reply(
            request,
            await service.write("elect-leaders", lambda c, now, off: c.elect_leaders(req, now)),
        )

    async def alter_reassignments(request: web.Request) -> web.Response:
        authorize_admin(request, "reassign partitions")
        # The whole plan is parsed here and validated by the controller before any
        # record is generated: a rejected plan writes nothing (KIP-455).
        req = parse_reassignment_plan(await read_body(request))
        return reply(
            request,
            await service.write(
                "alter-partition-reassignments",
                lambda c, now, off: c.alter_partition_reassignments(req, now),
            ),
        )

    async def list_reassignments(request: web.Request) -> web.Response:
        image = await service.read_image(_standby(request))
        return reply(request, {"partitions": ongoing_reassignments(image)})

    def _standby(request: web.Request) -> bool:
        return request.query.get("standby", "false").lower() == "true"

    async def get_topics(request: web.Request) -> web.Response:
        return reply(request, list_topics(await service.read_image(_standby(request))))

    async def get_topic(request: web.Request) -> web.Response:
        return reply(
            request,
            describe_topic(await service.read_image(_standby(request)), request.match_info["name"]),
        )

    async def get_brokers(request: web.Request) -> web.Response:
        return reply(request, list_brokers(await service.read_image(_standby(request))))

    async def get_metadata(request: web.Request) -> web.Response:
        return reply(request, metadata_view(await service.read_image(_standby(request))))

    async def get_quorum(request: web.Request) -> web.Response:
        return reply(request, service.quorum_view())

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = service.metrics_text()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    async def healthz(request: web.Request) -> web.Response:
        return reply(request, {"status": "ok"})

    async def get_openapi(request: web.Request) -> web.Response:
        return reply(request, openapi(f"{request.scheme}://{request.host}"))

    # the web console (GET /ui...; not in the API table: HTML and its own views)
    console = build_console_routes(service) if hasattr(service, "console_controller") else []
    return console + routes_from_spec(
        {
            "register": register,
            "heartbeat": heartbeat,
            "unregister": unregister,
            "get_brokers": get_brokers,
            "alter_partition": alter_partition,
            "create_topic": create_topic,
            "get_topics": get_topics,
            "get_topic": get_topic,
            "delete_topic": delete_topic,
            "add_partitions": add_partitions,
            "alter_configs": alter_configs,
            "elect": elect,
            "alter_reassignments": alter_reassignments,
            "list_reassignments": list_reassignments,
            "get_metadata": get_metadata,
            "get_quorum": get_quorum,
            "metrics": metrics,
            "healthz": healthz,
            "openapi": get_openapi,
        }
    )


def ongoing_reassignments(image: MetadataImage) -> list[dict[str, Any]]:
    """ListPartitionReassignments from a committed image: every partition with adding
    or removing replicas, by topic name and partition id. `replicas` is the current
    (union) set; the target is it without `removing_replicas`."""
    out = []
    for topic in image.topics.values():
        for pid, p in topic.partitions.items():
            if p.adding_replicas or p.removing_replicas:
                out.append(
                    {
                        "topic": topic.name,
                        "partition": pid,
                        "replicas": list(p.replicas),
                        "adding_replicas": list(p.adding_replicas),
                        "removing_replicas": list(p.removing_replicas),
                    }
                )
    out.sort(key=lambda r: (r["topic"], r["partition"]))
    return out


def not_controller(leader_id: int | None, leader_url: str | None) -> ApiError:
    extra: dict[str, Any] = {}
    if leader_id is not None:
        extra["leader_id"] = leader_id
    if leader_url is not None:
        extra["leader_url"] = leader_url
    where = (
        f"; the active controller is {leader_id} at {leader_url}" if leader_id is not None else ""
    )
    return ApiError("NOT_CONTROLLER", f"this node is not the active controller{where}", **extra)
