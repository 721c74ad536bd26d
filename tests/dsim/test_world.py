"""The simulated world itself: virtual time, the executor, the disk's crash semantics."""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
import time
from pathlib import Path

import pytest

from tests.dsim.disk import SimDisk
from tests.dsim.loop import OWNER, SimLoop, SimulationDeadlock


def _run(loop: SimLoop, coro) -> object:  # noqa: ANN001
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_virtual_time_jumps_to_the_next_timer() -> None:
    loop = SimLoop()

    async def main() -> tuple[float, float]:
        t0 = time.monotonic()
        await asyncio.sleep(3600)
        await asyncio.wait_for(asyncio.sleep(5), 10)
        return loop.time(), time.monotonic() - t0

    virtual, real = _run(loop, main())
    assert virtual == pytest.approx(3605)
    assert real < 1.0  # an hour and five seconds of simulated time, no waiting


def test_executor_jobs_run_after_their_delay_and_die_with_their_owner() -> None:
    loop = SimLoop(executor_delay=lambda owner: 0.5 if owner == 1 else 0.1)
    ran: list[tuple[str, float]] = []

    async def main() -> None:
        fut = loop.run_in_executor(None, lambda: ran.append(("none", loop.time())))
        OWNER.set(1)
        doomed = loop.run_in_executor(None, lambda: ran.append(("n1", loop.time())))
        await fut
        loop.kill(1)
        await asyncio.sleep(1)
        assert not doomed.done()

    _run(loop, main())
    assert ran == [("none", pytest.approx(0.1))]


def test_a_deadlock_is_an_error() -> None:
    loop = SimLoop()
    with pytest.raises(SimulationDeadlock):
        _run(loop, asyncio.Event().wait())


def test_a_crash_keeps_only_what_was_fsynced(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path, random.Random(1))
    node = disk.node_dir(1)
    node.mkdir()
    with disk.installed():
        a = node / "a.log"
        with open(a, "wb") as f:
            f.write(b"durable")
            f.flush()
            os.fsync(f.fileno())
            f.write(b"+lost")
        (node / "never-synced").write_bytes(b"x")
        tmp = node / "state.tmp"
        with open(tmp, "wb") as f:
            f.write(b"new")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, node / "state")  # a rename keeps the content durable
        disk.crash(1, torn=0.0)
    assert a.read_bytes() == b"durable"
    assert not (node / "never-synced").exists()
    assert (node / "state").read_bytes() == b"new"


def test_a_failed_fsync_is_reported_and_a_retry_recorded(tmp_path: Path) -> None:
    disk = SimDisk(tmp_path, random.Random(1))
    node = disk.node_dir(2)
    node.mkdir()
    disk.fail_next.add(2)
    with disk.installed(), open(node / "0.log", "wb") as f:
        f.write(b"x")
        f.flush()
        with pytest.raises(OSError):
            os.fsync(f.fileno())
        os.fsync(f.fileno())
    assert disk.retried_after_failure


def test_a_paused_process_waits_in_order_and_a_crash_ends_its_pause() -> None:
    loop = SimLoop()
    ran: list[tuple[str, float]] = []

    async def worker(name: str) -> None:
        for _ in range(2):
            await asyncio.sleep(0.1)
            ran.append((name, round(loop.time(), 3)))

    def spawn(owner: int | None, name: str) -> asyncio.Task[None]:
        ctx = contextvars.copy_context()
        ctx.run(OWNER.set, owner)
        return loop.create_task(worker(name), context=ctx)

    async def main() -> None:
        a, b = spawn(1, "a"), spawn(None, "b")
        await asyncio.sleep(0.05)
        loop.pause(1, 1.0)  # a's wakeup at 0.1 waits until 1.05
        await asyncio.wait([a, b])
        c = spawn(2, "c")
        await asyncio.sleep(0.01)
        loop.pause(2, 10.0)
        loop.kill(2)  # dies paused: its cancellation runs now, not in 10 s
        await asyncio.wait([c])
        assert c.cancelled()
        assert loop.time() < 1.2  # (held until 11.06 it would end then)

    _run(loop, main())
    assert ran == [("b", 0.1), ("b", 0.2), ("a", 1.05), ("a", 1.15)]
