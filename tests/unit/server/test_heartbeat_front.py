"""The heartbeat front answers exactly as the aiohttp route would, hands everything
else to aiohttp, and keeps the listener's limits (idle close, max.connections, stop).

Each case runs a real listener on loopback (GuardedSite with and without the front)
over a fake controller service whose replies the test controls."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from aiohttp import web

from kraft.controller.errors import ApiError, not_controller
from kraft.local.cluster import free_ports
from kraft.server.heartbeat_front import HeartbeatFronts
from kraft.server.http_codec import error_middleware
from kraft.server.limits import GuardedSite, body_middleware
from kraft.server.routes import build_routes

pytestmark = pytest.mark.timeout(30)

MSGPACK = "application/msgpack"


class FakeController:
    def heartbeat(self, req: Any, now: int) -> Any:
        return SimpleNamespace(
            reply={"error_code": "NONE", "broker_id": req.broker_id, "is_fenced": False}
        )


class FakeService:
    """submit() runs the command at once, or holds its future when `hold` is set."""

    def __init__(self) -> None:
        self.active = True
        self.hold = False
        self.held: list[asyncio.Future[Any]] = []
        self.contacts: list[tuple[int, int]] = []
        self.reply_timeout_s = 5.0

    def submit(self, name: str, generate: Any, *, priority: bool = False) -> asyncio.Future[Any]:
        if not self.active:
            raise not_controller(2, "http://127.0.0.1:2")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        reply = generate(FakeController(), 0, 0).reply
        if self.hold:
            self.held.append(fut)
            fut.reply = reply  # type: ignore[attr-defined]
        else:
            fut.set_result(reply)
        return fut

    def release(self) -> None:
        for fut in self.held:
            fut.set_result(fut.reply)  # type: ignore[attr-defined]
        self.held.clear()

    def timed_out(self, name: str) -> ApiError:
        return ApiError("REQUEST_TIMED_OUT", f"{name} did not commit in time")

    async def wait_reply(self, name: str, fut: asyncio.Future[Any]) -> Any:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.reply_timeout_s)
        except TimeoutError:
            raise self.timed_out(name) from None

    async def write(self, name: str, generate: Any, *, priority: bool = False) -> Any:
        return await self.wait_reply(name, self.submit(name, generate, priority=priority))

    def note_heartbeat_contact(self, broker_id: int, broker_epoch: int) -> None:
        self.contacts.append((broker_id, broker_epoch))


class Listener:
    def __init__(
        self,
        service: FakeService,
        front: bool,
        *,
        idle_s: float = 60.0,
        max_connections: int = 100,
        max_body: int = 4096,
    ) -> None:
        self.service = service
        self.front = front
        self.idle_s = idle_s
        self.max_connections = max_connections
        self.max_body = max_body
        self.fronts: HeartbeatFronts | None = None

    async def __aenter__(self) -> Listener:
        app = web.Application(
            middlewares=[error_middleware, body_middleware(self.idle_s)],
            client_max_size=self.max_body,
        )
        app.add_routes(build_routes(self.service))  # type: ignore[arg-type]
        self.runner = web.AppRunner(
            app, access_log=None, handle_signals=False, keepalive_timeout=self.idle_s
        )
        await self.runner.setup()
        if self.front:
            assert self.runner.server is not None
            self.fronts = HeartbeatFronts(
                self.service,  # type: ignore[arg-type]
                self.runner.server,
                max_body_bytes=self.max_body,
                idle_timeout_s=self.idle_s,
            )
        self.port = free_ports(1)[0]
        site = GuardedSite(
            self.runner,
            "127.0.0.1",
            self.port,
            max_connections=self.max_connections,
            fronts=self.fronts,
        )
        await site.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.runner.cleanup()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


def request(
    body: bytes,
    *,
    content_type: str = MSGPACK,
    accept: str | None = MSGPACK,
    path: str = "/v1/brokers/heartbeat",
    version: str = "HTTP/1.1",
    extra: str = "",
    chunked: bool = False,
) -> bytes:
    head = f"POST {path} {version}\r\nHost: x\r\nContent-Type: {content_type}\r\n"
    if accept is not None:
        head += f"Accept: {accept}\r\n"
    head += extra
    if chunked:
        head += "Transfer-Encoding: chunked\r\n\r\n"
        return head.encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def heartbeat(broker_id: int, epoch: int = 7) -> bytes:
    body = {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": 3}
    return msgpack.packb(body)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 5)
    return int(lines[0].split()[1]), headers, body


def decoded(headers: dict[str, str], body: bytes) -> Any:
    if headers["content-type"].startswith(MSGPACK):
        return msgpack.unpackb(body)
    return json.loads(body)


async def exchange(listener: Listener, raw: bytes) -> tuple[int, str, Any]:
    reader, writer = await listener.connect()
    try:
        writer.write(raw)
        status, headers, body = await read_response(reader)
        return status, headers["content-type"], decoded(headers, body)
    finally:
        writer.close()


CASES = {
    "msgpack": request(heartbeat(5)),
    "json": request(
        json.dumps({"broker_id": 5, "broker_epoch": 7, "current_metadata_offset": 1}).encode(),
        content_type="application/json",
        accept=None,
    ),
    "json body, msgpack reply": request(
        json.dumps({"broker_id": 5, "broker_epoch": 7, "current_metadata_offset": 1}).encode(),
        content_type="application/json; charset=utf-8",
    ),
    "garbage msgpack": request(b"\xc1\xc1\xc1"),
    "garbage json": request(b"{nope", content_type="application/json", accept=None),
    "missing field": request(msgpack.packb({"broker_id": 5})),
    "wrong type": request(msgpack.packb({"broker_id": "five", "broker_epoch": 1})),
}


async def plain_and_front(
    raw: bytes, service: FakeService | None = None
) -> tuple[Any, Any, HeartbeatFronts]:
    """The same request to a listener without the front, then to one with it."""
    service = service or FakeService()
    async with Listener(service, front=False) as plain, Listener(service, front=True) as front:
        expected = await exchange(plain, raw)
        got = await exchange(front, raw)
    assert front.fronts is not None
    return expected, got, front.fronts


@pytest.mark.asyncio
@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_front_answers_as_the_aiohttp_route_does(case: str) -> None:
    expected, got, fronts = await plain_and_front(CASES[case])
    assert got == expected
    assert (fronts.answered, fronts.handed_over) == (1, 0)


@pytest.mark.asyncio
async def test_not_controller_names_the_leader_as_the_route_does() -> None:
    service = FakeService()
    service.active = False
    expected, got, _ = await plain_and_front(CASES["msgpack"], service)
    assert got == expected
    assert got[2]["error_code"] == "NOT_CONTROLLER" and got[2]["leader_id"] == 2


@pytest.mark.asyncio
async def test_contact_is_noted_on_arrival_even_while_the_reply_waits() -> None:
    service = FakeService()
    service.hold = True
    async with Listener(service, front=True) as front:
        reader, writer = await front.connect()
        behind = request(heartbeat(2)) + request(heartbeat(3))
        writer.write(request(heartbeat(1)) + behind)
        for _ in range(500):  # bounded: 5 s; every byte is in and the first one is held
            fronts = front.fronts.open if front.fronts is not None else ()
            if service.held and [len(f._buf) for f in fronts] == [len(behind)]:
                break
            await asyncio.sleep(0.01)
        # one request in flight: the next two wait in the buffer, in order
        assert [len(f._buf) for f in front.fronts.open] == [len(behind)]  # type: ignore[union-attr]
        assert service.contacts == [(1, 7)]
        service.hold = False
        service.release()
        ids = []
        for _ in range(3):
            _, h, b = await read_response(reader)
            ids.append(decoded(h, b)["broker_id"])
        writer.close()
    assert ids == [1, 2, 3]
    assert service.contacts == [(1, 7), (2, 7), (3, 7)]


@pytest.mark.asyncio
async def test_a_reply_that_never_comes_is_answered_request_timed_out() -> None:
    service = FakeService()
    service.hold = True
    service.reply_timeout_s = 0.2
    async with Listener(service, front=True) as front:
        reader, writer = await front.connect()
        writer.write(request(heartbeat(1)))
        status, headers, body = await read_response(reader)
        assert status == ApiError("REQUEST_TIMED_OUT", "").status
        assert decoded(headers, body)["error_code"] == "REQUEST_TIMED_OUT"
        # the connection goes on serving; the late reply is dropped
        service.release()
        service.hold = False
        writer.write(request(heartbeat(2)))
        _, headers, body = await read_response(reader)
        assert decoded(headers, body)["broker_id"] == 2
        writer.close()


@pytest.mark.asyncio
async def test_any_other_request_hands_the_connection_to_aiohttp() -> None:
    service = FakeService()
    async with Listener(service, front=True) as front:
        reader, writer = await front.connect()
        writer.write(request(heartbeat(1)))
        assert (await read_response(reader))[0] == 200
        # the rest of this connection, pipelined: aiohttp answers all of it
        writer.write(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n"
            + request(heartbeat(2))
        )
        status, headers, body = await read_response(reader)
        assert (status, decoded(headers, body)) == (200, {"status": "ok"})
        status, headers, body = await read_response(reader)
        assert (status, decoded(headers, body)["broker_id"]) == (200, 2)
        writer.close()
        assert front.fronts is not None
        assert (front.fronts.answered, front.fronts.handed_over) == (1, 1)
        assert not front.fronts.open


HANDED_OVER = {
    "chunked body": request(heartbeat(5), chunked=True),
    "HTTP/1.0": request(heartbeat(5), version="HTTP/1.0"),
    "Connection: close": request(heartbeat(5), extra="Connection: close\r\n"),
    "query string": request(heartbeat(5), path="/v1/brokers/heartbeat?x=1"),
    "body over max.request.bytes": request(msgpack.packb({"pad": "x" * 5000})),
    "no Content-Length": b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: x\r\n\r\n",
    "another path": request(heartbeat(5), path="/v1/brokers/register"),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("case", sorted(HANDED_OVER))
async def test_what_aiohttp_must_frame_is_handed_over_and_answered_alike(case: str) -> None:
    expected, got, fronts = await plain_and_front(HANDED_OVER[case])
    assert got == expected
    assert (fronts.answered, fronts.handed_over) == (0, 1)


@pytest.mark.asyncio
async def test_an_idle_connection_is_closed() -> None:
    async with Listener(FakeService(), front=True, idle_s=0.3) as front:
        reader, writer = await front.connect()
        writer.write(request(heartbeat(1)))
        await read_response(reader)
        assert await asyncio.wait_for(reader.read(), 3) == b""  # closed by the server
        assert front.fronts is not None and not front.fronts.open


@pytest.mark.asyncio
async def test_front_connections_count_against_max_connections_and_close_on_stop() -> None:
    async with Listener(FakeService(), front=True, max_connections=2) as front:
        conns = [await front.connect() for _ in range(2)]
        for reader, writer in conns:
            writer.write(request(heartbeat(1)))
            assert (await read_response(reader))[0] == 200
        # every connection is established (it completed a request): refused, reset at once
        with pytest.raises(ConnectionResetError):
            reader, writer = await front.connect()
            await asyncio.wait_for(reader.read(), 3)
        await front.runner.cleanup()
        for reader, writer in conns:
            assert await asyncio.wait_for(reader.read(), 3) == b""
            writer.close()
        assert front.fronts is not None and not front.fronts.open


@pytest.mark.asyncio
async def test_a_connection_closed_while_its_heartbeat_waits_leaves_nothing_behind() -> None:
    service = FakeService()
    service.hold = True
    async with Listener(service, front=True) as front:
        reader, writer = await front.connect()
        writer.write(request(heartbeat(1)))
        for _ in range(100):
            if service.held:
                break
            await asyncio.sleep(0.01)
        writer.close()
        await writer.wait_closed()
        for _ in range(100):
            assert front.fronts is not None
            if not front.fronts.open:
                break
            await asyncio.sleep(0.01)
        assert not front.fronts.open
        service.release()  # a reply with nowhere to go is dropped
        for _ in range(5):  # the reply's callbacks run within a few loop iterations
            await asyncio.sleep(0)
        assert front.fronts.answered == 0


@pytest.mark.asyncio
async def test_requests_piling_up_behind_a_waiting_one_pause_reading_and_all_get_answers() -> None:
    service = FakeService()
    service.hold = True
    async with Listener(service, front=True, max_body=512) as front:
        reader, writer = await front.connect()
        count = 200  # ~20 KB: past one full request (8 KiB head + 512 B body) behind the first
        writer.write(request(heartbeat(0)))
        for _ in range(100):
            if service.held:
                break
            await asyncio.sleep(0.01)
        writer.write(b"".join(request(heartbeat(i)) for i in range(1, count)))
        for _ in range(500):  # bounded: 5 s
            if [f._paused for f in front.fronts.open] == [True]:  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.01)
        assert len(service.contacts) == 1
        assert [f._paused for f in front.fronts.open] == [True]  # type: ignore[union-attr]
        service.hold = False
        service.release()
        ids = []
        for _ in range(count):
            _, h, b = await read_response(reader)
            ids.append(decoded(h, b)["broker_id"])
        writer.close()
    assert ids == list(range(count))
