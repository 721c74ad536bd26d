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

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from kraft.console.ui_routes import build_console_routes
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
from kraft.security.authz import Authorizer
from kraft.security.server_security import (
    PRINCIPAL,
    SECURITY,
    authorize_admin,
    authorize_broker,
    check,
)
from kraft.server.api_spec import openapi, routes_from_spec
from kraft.server.controller_service import Generate
from kraft.server.http_codec import read_body, reply
from metadata_log.image import MetadataImage


class ControllerBackend(Protocol):
    """What the routes need from the controller shell (kraft.server.controller_service
    .ControllerService implements it)."""

    async def write(self, name: str, generate: Generate, *, priority: bool = False) -> Any:
        """Queue a command; answer its reply once its records are committed."""
        ...

    def submit(self, name: str, generate: Generate, *, priority: bool = False) -> Any:
        """Queue a command; a future of its reply (raises ApiError at once if refused)."""
        ...

    async def wait_reply(self, name: str, fut: Any) -> Any:
        """A submitted command's reply, waited for at most `reply_timeout_s`."""
        ...

    async def read_image(self, standby: bool = False) -> MetadataImage:
        """The committed image (on the active controller unless standby is allowed)."""
        ...

    def reassignments(self) -> list[dict[str, Any]]:
        """The ongoing reassignments of the image read last (ListPartitionReassignments)."""
        ...

    def timed_out(self, name: str) -> ApiError: ...

    @property
    def reply_timeout_s(self) -> float: ...

    def note_heartbeat_contact(self, broker_id: int, broker_epoch: int) -> None: ...

    def quorum_view(self) -> dict[str, Any]: ...

    def metrics_text(self) -> tuple[bytes, str]: ...


HEARTBEAT = "broker-heartbeat"
HEARTBEAT_PATH = "/v1/brokers/heartbeat"


class HeartbeatCommand:
    """The heartbeat's command. `at_once`: its reply without the event queue when
    it changes nothing (QuorumController.heartbeat_at_once), while a large write
    holds the queue."""

    __slots__ = ("req",)

    def __init__(self, req: BrokerHeartbeatRequest) -> None:
        self.req = req

    def __call__(self, c: Any, now: int, off: int) -> Any:
        return c.heartbeat(self.req, now)

    def at_once(self, c: Any, now: int, committed_offset: int) -> Any:
        return c.heartbeat_at_once(self.req, now, committed_offset)


def heartbeat_command(req: BrokerHeartbeatRequest) -> Generate:
    """The heartbeat's command (the simulators and tests queue it as the routes do)."""
    return HeartbeatCommand(req)


def submit_heartbeat(
    service: ControllerBackend,
    authenticate: Callable[[], str | None],
    body: Callable[[], Any],
    authorizer: Authorizer | None,
) -> asyncio.Future[Any]:
    """The heartbeat path of both listeners, the aiohttp route below and the lean
    front (kraft.server.heartbeat_front), in its order:

    1. authenticate: the principal (401 before the body is looked at; the route's
       middleware has done it already, the front does it here);
    2. parse the body (400);
    3. authorize: the principal may speak for that broker id (403);
    4. note the contact as it arrives, even if the queued command later misses its
       deadline (Kafka bug 15019);
    5. submit the command in the event queue's priority lane.

    Returns the command's future: its reply once its records are committed."""
    principal = authenticate()
    req = BrokerHeartbeatRequest.parse(body())
    if authorizer is not None:
        check(HEARTBEAT_PATH, principal, authorizer.broker_action(principal, req.broker_id))
    service.note_heartbeat_contact(req.broker_id, req.broker_epoch)
    return service.submit(HEARTBEAT, heartbeat_command(req), priority=True)


def build_routes(
    service: ControllerBackend, limits: TopicLimits | None = None
) -> list[web.RouteDef]:
    """The API table's routes (kraft.server.api_spec) over `service`, and the web
    console's (GET /ui...; not in the API table: HTML and its own views)."""
    handlers = {**_broker_handlers(service), **_admin_handlers(service, limits or TopicLimits())}
    handlers.update(_read_handlers(service))
    console = build_console_routes(service) if hasattr(service, "console_controller") else []
    return console + routes_from_spec(handlers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _broker_handlers(service: ControllerBackend) -> dict[str, Handler]:
    """Register, heartbeat, AlterPartition: a broker speaks for its own id."""

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
        body = await read_body(request)
        security = request.app.get(SECURITY)
        fut = submit_heartbeat(
            service,
            lambda: request.get(PRINCIPAL),  # authenticated by the security middleware
            lambda: body,
            None if security is None else security.authorizer,
        )
        return reply(request, await service.wait_reply(HEARTBEAT, fut))

    async def alter_partition(request: web.Request) -> web.Response:
        req = AlterPartitionRequest.parse(await read_body(request))
        authorize_broker(request, req.broker_id)
        return reply(
            request,
            await service.write("alter-partition", lambda c, now, off: c.alter_partition(req, now)),
        )

    return {"register": register, "heartbeat": heartbeat, "alter_partition": alter_partition}


def _admin_handlers(service: ControllerBackend, limits: TopicLimits) -> dict[str, Handler]:
    """Writes by an administrator (a super user when the authorizer is on)."""

    async def unregister(request: web.Request) -> web.Response:
        authorize_admin(request, "unregister a broker")
        broker_id = parse_int(request.match_info["id"], "broker id")
        return reply(
            request,
            await service.write(
                "unregister-broker", lambda c, now, off: c.unregister_broker(broker_id, now)
            ),
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

    return {
        "unregister": unregister,
        "create_topic": create_topic,
        "delete_topic": delete_topic,
        "add_partitions": add_partitions,
        "alter_configs": alter_configs,
        "elect": elect,
        "alter_reassignments": alter_reassignments,
    }


def _standby(request: web.Request) -> bool:
    return request.query.get("standby", "false").lower() == "true"


def _read_handlers(service: ControllerBackend) -> dict[str, Handler]:
    """Reads of the committed image (`?standby=true`: a standby's), the quorum,
    metrics, health and the API description."""

    async def list_reassignments(request: web.Request) -> web.Response:
        await service.read_image(_standby(request))
        return reply(request, {"partitions": service.reassignments()})

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

    return {
        "list_reassignments": list_reassignments,
        "get_topics": get_topics,
        "get_topic": get_topic,
        "get_brokers": get_brokers,
        "get_metadata": get_metadata,
        "get_quorum": get_quorum,
        "metrics": metrics,
        "healthz": healthz,
        "openapi": get_openapi,
    }
