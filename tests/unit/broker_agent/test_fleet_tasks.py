"""A fleet counts and logs any task that dies with nobody to hear it (issue 27)."""

from __future__ import annotations

import asyncio
import io
import logging

import pytest

from broker_agent.fleet import Fleet
from tests.unit.broker_agent.test_cli import fleet


async def test_the_loop_handler_counts_logs_and_shows_a_dead_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    f = Fleet(fleet(), out=io.StringIO())
    loop = asyncio.get_running_loop()
    f._loop_exception(
        loop, {"message": "Task exception was never retrieved", "exception": ValueError("lost")}
    )
    assert f.stats.task_exceptions == 1 and f.status(agents=False)["task_exceptions"] == 1
    assert f.status_line().endswith("| task exceptions=1")
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.event == "task_exception" and "lost" in str(record.exc_info)  # type: ignore[attr-defined]


async def test_run_installs_the_handler_and_restores_the_previous_one() -> None:
    loop = asyncio.get_running_loop()
    seen: list[object] = []

    def previous(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        seen.append(context)

    loop.set_exception_handler(previous)
    try:
        f = Fleet(fleet(), out=io.StringIO())
        f.shutdown()  # stop before anything is sent
        handlers: list[object] = []
        real_run = f._run

        async def spy(*args: object) -> int:
            handlers.append(loop.get_exception_handler())
            return await real_run(*args)  # type: ignore[arg-type]

        f._run = spy  # type: ignore[method-assign]
        assert await asyncio.wait_for(f.run(), 10) == 0
        assert handlers == [f._loop_exception]
        assert loop.get_exception_handler() is previous
    finally:
        loop.set_exception_handler(None)
