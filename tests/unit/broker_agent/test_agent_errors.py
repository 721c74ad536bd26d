"""Every error path of the real BrokerAgent shell ends RUNNING (issue 27).

The agents here are the production `BrokerAgent` (its aiohttp session, its send
tasks, its run loop); the controllers are stubs: aiohttp servers on 127.0.0.1 that
answer registration and heartbeat with whatever a per-broker script says, then
behave (register: a new epoch; heartbeat: caught up, fenced while the broker asks
to be). Scripted answers: each error code of the contract's table (DESIGN 1.2,
parsed from docs/DESIGN.md with its HTTP status), a request left unanswered past
the agent's timeout, a connection reset, a body that is not msgpack (with a 2xx
and with a 5xx status), an empty 2xx body, NOT_CONTROLLER with and without a
leader hint. The agent must end RUNNING once the stub behaves (registration
errors that no retry can fix end it with exit code 1 instead), with no task
exception. Waits are events with bounded timeouts.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgpack
import pytest
from aiohttp import web

import broker_agent.agent as agent_mod
from broker_agent.agent import AgentSettings, AgentStats, BrokerAgent
from broker_agent.heartbeat_channel import HeartbeatChannel
from broker_agent.lifecycle import FATAL_REGISTRATION_ERRORS, BrokerState
from broker_agent.send_gate import SendGate
from metadata_log.image import MetadataImage
from tests.design_doc import contract_errors

WAIT_S = 20.0  # bound of every wait (the scenarios take well under a second)
SETTINGS = AgentSettings(heartbeat_interval_ms=100, request_timeout_ms=300)
HANG_S = 1.0  # a "timeout" answer comes this late (past the agent's 300 ms)


CONTRACT = contract_errors()


def test_the_contract_table_is_read() -> None:
    codes = {c for _, c in CONTRACT}
    assert {"NOT_CONTROLLER", "REQUEST_TIMED_OUT", "STALE_BROKER_EPOCH"} <= codes
    assert (401, "UNAUTHORIZED") in CONTRACT and (504, "REQUEST_TIMED_OUT") in CONTRACT
    assert len(CONTRACT) >= 20


# ---------------------------------------------------------------- the stub


@dataclass(frozen=True)
class Answer:
    """One scripted answer: `how` is error | hang | reset | garbage | empty | not_controller."""

    how: str
    status: int = 200
    code: str = ""
    hint: bool = False


@dataclass
class Stubs:
    """Two controller stubs sharing one script per (broker id, request kind)."""

    urls: list[str] = field(default_factory=list)
    scripts: dict[tuple[int, str], deque[Answer]] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    hits: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # stub index per request
    next_epoch: int = 10
    # stubs that are standbys: every answer NOT_CONTROLLER naming the other stub
    standbys: set[int] = field(default_factory=set)

    def script(self, broker_id: int, kind: str, *answers: Answer) -> None:
        self.scripts[(broker_id, kind)] = deque(answers)

    async def answer(self, stub: int, kind: str, request: web.Request) -> web.StreamResponse:
        body = msgpack.unpackb(await request.read(), raw=False)
        bid = body["broker_id"]
        self.hits.setdefault((bid, kind), []).append(stub)
        if stub in self.standbys:
            return await self.scripted(stub, Answer("not_controller", hint=True), request)
        script = self.scripts.get((bid, kind))
        if script:
            return await self.scripted(stub, script.popleft(), request)
        if kind == "register":
            self.epochs[bid] = self.next_epoch
            self.next_epoch += 1
            return packed({"broker_epoch": self.epochs[bid]})
        if self.epochs.get(bid) != body["broker_epoch"]:
            return packed({"error_code": "STALE_BROKER_EPOCH", "message": "stale"}, 409)
        return packed(
            {"is_caught_up": True, "is_fenced": body["want_fence"], "should_shut_down": False}
        )

    async def scripted(self, stub: int, a: Answer, request: web.Request) -> web.StreamResponse:
        if a.how == "error":
            return packed({"error_code": a.code, "message": f"scripted {a.code}"}, a.status)
        if a.how == "not_controller":
            other = self.urls[1 - stub]
            hint = {"leader_id": 2 - stub, "leader_url": other} if a.hint else {}
            return packed({"error_code": "NOT_CONTROLLER", "message": "standby", **hint}, 503)
        if a.how == "hang":
            await asyncio.sleep(HANG_S)
            return packed({"error_code": "REQUEST_TIMED_OUT", "message": "late"}, 504)
        if a.how == "reset":
            assert request.transport is not None
            request.transport.abort()  # the connection drops with no answer
            return web.Response(status=500)
        if a.how == "garbage":
            return web.Response(body=b"\xc1<html>bad gateway", status=a.status)
        if a.how == "empty":
            return web.Response(body=b"", status=200)
        raise AssertionError(a.how)


def packed(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(
        body=msgpack.packb(body, use_bin_type=True),
        status=status,
        content_type="application/msgpack",
    )


@pytest.fixture
async def stubs() -> AsyncIterator[Stubs]:
    st = Stubs()
    runners = []
    for i in range(2):
        app = web.Application()

        def route(kind: str, i: int = i) -> Callable[[web.Request], Any]:
            async def handler(request: web.Request) -> web.StreamResponse:
                return await st.answer(i, kind, request)

            return handler

        app.router.add_post("/v1/brokers/register", route("register"))
        app.router.add_post("/v1/brokers/heartbeat", route("heartbeat"))
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        st.urls.append(f"http://127.0.0.1:{port}")
        runners.append(runner)
    try:
        yield st
    finally:
        for r in runners:
            await r.cleanup()


class FakeMetadata:
    """A follower that has caught up with everything (the agent's MetadataSource)."""

    committed_offset = 10**9
    image = MetadataImage()
    cluster_id = "stub-cluster"

    def led_by(self, broker_id: int) -> frozenset[tuple[str, int]]:
        return frozenset()

    def leads_any(self, broker_id: int) -> bool:
        return False

    def subscribe(self, fn: Callable[[int], None]) -> None:
        pass

    async def wait_cluster_id(self, timeout_s: float) -> str | None:
        return self.cluster_id


@dataclass
class Run:
    agents: dict[int, BrokerAgent]
    running: dict[int, asyncio.Event]
    tasks: dict[int, asyncio.Task[int]]
    stats: AgentStats
    channel: HeartbeatChannel | None = None


async def run_agents(
    stubs: Stubs,
    broker_ids: list[int],
    expect_exit: frozenset[int] = frozenset(),
    fleet_path: bool = False,
    urls: list[str] | None = None,
) -> Run:
    """Start one real agent per id against the stubs; wait (bounded) until each is
    RUNNING, or has exited for the ids in `expect_exit`; then stop them all.
    `fleet_path`: as a fleet sends, through send gates (few slots, so requests
    queue) and heartbeats over the pipelined HeartbeatChannel."""
    channel = HeartbeatChannel(2) if fleet_path else None
    gates = {"heartbeat": SendGate(4), "register": SendGate(2)} if fleet_path else None
    stats = AgentStats()
    running = {b: asyncio.Event() for b in broker_ids}

    def on_change(bid: int, old: BrokerState, new: BrokerState, reason: str) -> None:
        if new is BrokerState.RUNNING:
            running[bid].set()

    async with aiohttp.ClientSession() as session:
        agents = {
            b: BrokerAgent(
                b,
                stubs.urls if urls is None else urls,
                session,
                FakeMetadata(),
                SETTINGS,
                rng=random.Random(b),
                stats=stats,
                on_state_change=on_change,
                gates=gates,
                heartbeat_channel=channel,
            )
            for b in broker_ids
        }
        tasks = {b: asyncio.create_task(a.run()) for b, a in agents.items()}
        waits = [
            tasks[b] if b in expect_exit else asyncio.create_task(running[b].wait())
            for b in broker_ids
        ]
        try:
            await asyncio.wait(waits, timeout=WAIT_S)
        finally:
            for a in agents.values():
                a.stop()
            await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), 10)
            for w in waits:
                w.cancel()
            if channel is not None:
                channel.close()
    return Run(agents, running, tasks, stats, channel)


def stuck(run: Run, stubs: Stubs, names: dict[int, str], expect_exit: frozenset[int]) -> list[str]:
    out = []
    for b, name in names.items():
        a = run.agents[b]
        ok = (
            a.exit_code == 1 and a.state is BrokerState.SHUTTING_DOWN
            if b in expect_exit
            else run.running[b].is_set()
        )
        if not ok:
            out.append(f"{name}: {a.state.value}, exit {a.exit_code}, hits {stubs.hits}")
    return out


def scenarios() -> list[tuple[str, Answer]]:
    out = [(f"{status} {code}", Answer("error", status, code)) for status, code in CONTRACT]
    out += [
        ("NOT_CONTROLLER with a hint", Answer("not_controller", hint=True)),
        ("NOT_CONTROLLER without a hint", Answer("not_controller")),
        ("no answer within the timeout", Answer("hang")),
        ("connection reset", Answer("reset")),
        ("200 with a body that is not msgpack", Answer("garbage", 200)),
        ("502 with a body that is not msgpack", Answer("garbage", 502)),
        ("200 with an empty body", Answer("empty")),
    ]
    return out


@pytest.mark.parametrize(
    "kind, fleet_path",
    [("register", False), ("heartbeat", False), ("register", True), ("heartbeat", True)],
    ids=["register", "heartbeat", "register-fleet-path", "heartbeat-fleet-path"],
)
async def test_every_error_answer_ends_running_once_the_controller_behaves(
    stubs: Stubs, kind: str, fleet_path: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    names: dict[int, str] = {}
    fatal: set[int] = set()
    for i, (name, answer) in enumerate(scenarios()):
        bid = 100 + i
        names[bid] = name
        # twice in a row: the retry must also survive the error
        stubs.script(bid, kind, answer, answer)
        if (
            kind == "register"
            and answer.how == "error"
            and answer.code in FATAL_REGISTRATION_ERRORS | {"INCONSISTENT_CLUSTER_ID"}
        ):
            # (a cluster id refusal is fatal once every controller said it: the
            # script answers it twice, once from each of the two stubs)
            fatal.add(bid)
    run = await run_agents(stubs, list(names), frozenset(fatal), fleet_path)
    assert stuck(run, stubs, names, frozenset(fatal)) == []
    for b in names:  # every script was played out, each answer reached the agent
        assert not stubs.scripts[(b, kind)] or b in fatal, names[b]
    assert run.stats.task_exceptions == 0
    assert run.stats.error_codes  # the refusals were counted by code
    if fleet_path:  # heartbeats went over the pipelined channel, at most 2 connections open
        assert run.channel is not None and run.channel.sent > len(names)
        assert run.channel.connects > 2  # the hangs and resets closed some
    died = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert died == []  # nothing unexpected, no "Task exception was never retrieved"
    if kind == "register":
        refused = [r for r in caplog.records if getattr(r, "event", "") == "register_error"]
        # each refusal is logged with its code (transport failures are only counted)
        logged = {r.error_code for r in refused}  # type: ignore[attr-defined]
        assert logged >= {c for _, c in CONTRACT if c != "NOT_CONTROLLER"} | {
            "INVALID_RESPONSE",
            "HTTP_502",
        }
        assert run.stats.error_codes["register:NETWORK"] >= 4  # hang and reset, twice each
        for b in fatal:
            assert run.agents[b].lifecycle.fatal in FATAL_REGISTRATION_ERRORS | {  # type: ignore[union-attr]
                "INCONSISTENT_CLUSTER_ID"
            }


async def test_not_controller_hint_goes_to_the_named_controller(stubs: Stubs) -> None:
    # both stubs answer NOT_CONTROLLER naming the other, twice; then the agent registers
    stubs.script(7, "register", *[Answer("not_controller", hint=True)] * 2)
    stubs.script(8, "register", *[Answer("not_controller")] * 2)
    run = await run_agents(stubs, [7, 8])
    assert run.running[7].is_set() and run.running[8].is_set()
    hinted, unhinted = stubs.hits[(7, "register")], stubs.hits[(8, "register")]
    # a hint is followed at once to the named stub; without one, round-robin
    assert hinted[1] == 1 - hinted[0] and hinted[2] == 1 - hinted[1]
    assert unhinted[1] == 1 - unhinted[0]
    assert run.stats.redirects == 2  # a hinted NOT_CONTROLLER is a redirect, not an error


async def test_a_hint_to_a_controller_the_agent_was_not_given_is_followed(
    stubs: Stubs,
) -> None:
    """Given only a standby's URL, the agent asked it forever: the hint named a URL
    outside its list, which it dropped. Now it learns the URL and registers there."""
    stubs.standbys.add(0)
    run = await run_agents(stubs, [9], urls=[stubs.urls[0]])
    assert run.running[9].is_set(), stubs.hits
    assert run.agents[9].controllers == [stubs.urls[0], stubs.urls[1]]
    assert stubs.hits[(9, "register")][-1] == 1
    assert run.stats.redirects >= 1


async def test_an_unexpected_exception_is_logged_once_and_retried(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = agent_mod.post_msgpack
    raised: list[str] = []

    async def flaky(session: Any, url: str, body: Any, *args: Any) -> Any:
        if len(raised) < 2:  # the first registration and the first heartbeat attempt
            kind = "register" if "incarnation_id" in body else "heartbeat"
            if kind not in raised:
                raised.append(kind)
                raise RuntimeError(f"a bug in the {kind} path")
        return await real(session, url, body, *args)

    monkeypatch.setattr(agent_mod, "post_msgpack", flaky)
    caplog.set_level(logging.INFO)
    run = await run_agents(stubs, [5])
    assert run.running[5].is_set()
    assert raised == ["register", "heartbeat"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.event for r in errors] == ["agent_unexpected_error"] * 2  # type: ignore[attr-defined]
    assert all(r.exc_info and "a bug in the" in str(r.exc_info[1]) for r in errors)
    assert run.stats.error_codes == {
        "register:UNEXPECTED_ERROR": 1,
        "heartbeat:UNEXPECTED_ERROR": 1,
    }
    assert run.stats.task_exceptions == 0


async def test_a_task_that_dies_anyway_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with aiohttp.ClientSession() as session:
        a = BrokerAgent(1, ["http://127.0.0.1:9"], session, FakeMetadata(), SETTINGS)

        async def broken() -> None:
            raise ValueError("escaped")

        a._spawn(broken())
        await asyncio.wait_for(asyncio.gather(*a._tasks, return_exceptions=True), 5)
        await asyncio.sleep(0)  # the done callback runs
    assert a.stats.task_exceptions == 1 and not a._tasks
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.event == "task_exception" and "escaped" in str(record.exc_info)  # type: ignore[attr-defined]
