"""SendGate: at most `limit` through, waiting requests served best priority first."""

from __future__ import annotations

import asyncio

import pytest

from broker_agent.send_gate import CATCHING_UP, KEEP_SESSION, RECOVERING, REGISTER, SendGate


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_free_slot_goes_to_the_best_priority_then_fifo() -> None:
    gate = SendGate(1)
    await gate.acquire(REGISTER)  # holds the only slot
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        await gate.acquire(priority)
        order.append(name)

    names = [
        ("reg-1", REGISTER),
        ("catching-up", CATCHING_UP),
        ("session-1", KEEP_SESSION),
        ("reg-2", REGISTER),
        ("recovering", RECOVERING),
        ("session-2", KEEP_SESSION),
    ]
    tasks = [asyncio.create_task(wait(n, p)) for n, p in names]
    await settle()
    assert order == [] and gate.queued == 6 and gate.waited == 6
    for _ in names:
        gate.release()  # the holder passes its slot on
        await settle()
    assert order == ["session-1", "session-2", "recovering", "catching-up", "reg-1", "reg-2"]
    assert gate.active == 1  # the last one still holds it
    gate.release()
    assert gate.active == 0
    await asyncio.gather(*tasks)


async def test_never_more_than_the_limit_at_once() -> None:
    gate = SendGate(3)
    inside = peak = 0

    async def request(i: int) -> None:
        nonlocal inside, peak
        await gate.acquire(i % 4)
        try:
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0)
        finally:
            inside -= 1
            gate.release()

    await asyncio.wait_for(asyncio.gather(*(request(i) for i in range(50))), 5)
    assert peak == 3 and gate.active == 0 and gate.queued == 0


async def test_a_request_cancelled_while_waiting_leaves_no_trace() -> None:
    gate = SendGate(1)
    await gate.acquire(KEEP_SESSION)
    waiter = asyncio.create_task(gate.acquire(REGISTER))
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.queued == 0
    gate.release()
    assert gate.active == 0  # the slot was not handed to the cancelled request


async def test_a_slot_handed_over_as_the_waiter_is_cancelled_is_passed_on() -> None:
    gate = SendGate(1)
    await gate.acquire(KEEP_SESSION)
    first = asyncio.create_task(gate.acquire(KEEP_SESSION))
    second = asyncio.create_task(gate.acquire(REGISTER))
    await settle()
    gate.release()  # hands the slot to `first`...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5)  # it got the slot instead
    assert gate.active == 1
    gate.release()
    assert gate.active == 0


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        SendGate(0)
