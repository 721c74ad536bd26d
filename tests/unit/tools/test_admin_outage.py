"""The admin tools in an outage, against stub controllers on 127.0.0.1 (a thread
with its own event loop): `kraft quorum describe` shows what a live node knows
when the leader does not answer or none is known (exit 1, one line on stderr
saying so), and a command that gives up says after how many attempts and how
long, and names a timeout as one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from kraft.admin_client import AdminClient, ClientError
from kraft.cli import main
from kraft.local.cluster import free_ports

VOTERS = [{"node_id": i, "directory_id": f"d{i}", "log_end_offset": 40} for i in (1, 2, 3)]


class Stub:
    """One HTTP server whose `GET /v1/quorum` answers `view`, and whose other routes
    answer NOT_CONTROLLER with `hint` (a leader URL) or hang past any timeout."""

    def __init__(self) -> None:
        self.view: dict[str, Any] = {}
        self.hang = False
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        async def quorum(_: web.Request) -> web.Response:
            return web.json_response(self.view)

        async def other(_: web.Request) -> web.Response:
            if self.hang:
                await asyncio.sleep(30)
            body = {"error_code": "NOT_CONTROLLER", "message": "no leader", "leader_url": None}
            return web.json_response(body, status=503)

        app = web.Application()
        app.router.add_get("/v1/quorum", quorum)
        app.router.add_route("*", "/{tail:.*}", other)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def __enter__(self) -> Stub:
        self._thread.start()
        assert self._ready.wait(10), "the stub did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def stub() -> Iterator[Stub]:
    with Stub() as s:
        yield s


def _view(state: str, leader_id: int | None, leader_url: str | None) -> dict[str, Any]:
    return {
        "cluster_id": "c",
        "node_id": 1,
        "state": state,
        "leader_id": leader_id,
        "leader_epoch": 7,
        "leader_url": leader_url,
        "high_watermark": 40,
        "voters": VOTERS,
        "observers": [],
    }


def test_describe_shows_a_live_nodes_view_when_the_leader_does_not_answer(
    stub: Stub, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"  # nobody listens
    stub.view = _view("follower", 3, dead)
    code = main(["quorum", "describe", "--bootstrap", stub.url, "--timeout", "2"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "LeaderEpoch:            7" in out and "CurrentVoters:          [1,2,3]" in out
    (line,) = err.splitlines()
    assert line.startswith("kraft quorum: the leader this node knows (node 3, epoch 7)")
    assert f"{dead}: ClientConnectorError" in line and "node 1's own view" in line


def test_describe_says_when_no_leader_is_known(
    stub: Stub, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.view = _view("prospective", None, None)
    code = main(["quorum", "describe", "--replication", "--bootstrap", stub.url])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[0].startswith("NodeId") and len(out.splitlines()) == 4
    assert err == (
        "kraft quorum: node 1 knows no leader (state prospective, epoch 7). "
        "Below is its own view; exit code 1\n"
    )


def test_describe_of_a_leader_exits_0(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.view = _view("leader", 1, None)
    assert main(["quorum", "describe", "--bootstrap", stub.url]) == 0
    assert capsys.readouterr().err == ""


async def test_a_command_that_gives_up_says_how_long_it_tried(stub: Stub) -> None:
    stub.hang = True
    async with AdminClient(stub.url, timeout_s=0.3, max_attempts=4, backoff_s=0.01) as client:
        with pytest.raises(ClientError) as e:
            await client.brokers()
    assert e.value.code == "NETWORK"
    assert e.value.message.startswith(f"{stub.url}: no answer within 0.3 s (--timeout)")
    assert "(gave up after 4 attempts over " in e.value.message


def test_a_reader_that_goes_away_ends_the_command_quietly(stub: Stub) -> None:
    """`kraft quorum describe --replication | head -1`: the pipe closes while the
    rows are printed; exit 0, no BrokenPipeError traceback."""
    import subprocess
    import sys

    view = _view("leader", 1, None)
    view["observers"] = [
        {"node_id": 100 + i, "directory_id": f"o{i}", "log_end_offset": 40} for i in range(20_000)
    ]
    stub.view = view
    stub.view["leader_url"] = stub.url
    cmd = [sys.executable, "-m", "kraft.cli", "quorum", "describe", "--replication"]
    cmd += ["--bootstrap", stub.url, "--timeout", "5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # the header, then the reader goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
