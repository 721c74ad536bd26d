"""SendGate: which of a fleet's waiting requests goes on its shared connections next.

A real broker has a connection of its own to the controller; a fleet's agents
share a pool (fleet.py). Left to aiohttp, 10,000 agents started at once queue
10,000 registrations, then 10,000 heartbeats, in the pool's FIFO, and a request's
timeout runs while it waits there: measured with a 10,000-agent storm against 3
controllers, 83,000 of the fleet's requests timed out in 60 s (NETWORK), almost
all before reaching a controller, each retried into the same queue, and running
brokers whose heartbeats waited behind registrations were fenced (13,394 fences
in 150 s), so the storm never settled.

The gate keeps at most `limit` requests on the wire (the pool's connections) and
hands a free slot to the waiting request of the best priority, FIFO within one:
heartbeats of unfenced brokers first (their sessions), then the rest of the
heartbeats (brokers about to be unfenced first), then registrations. The agent
starts its lifecycle's request timeout when the gate lets the request through
(`BrokerLifecycle.on_sent`) and drops a request that its lifecycle gave up on
while it waited, so no connection carries an answer nobody waits for.
"""

from __future__ import annotations

import asyncio
from collections import deque

# Priorities, best first.
KEEP_SESSION = 0  # a heartbeat of an unfenced broker: missing it fences the broker
RECOVERING = 1  # a heartbeat of a caught-up broker asking to be unfenced
CATCHING_UP = 2  # a heartbeat of a registered broker that is still catching up
REGISTER = 3
PRIORITIES = 4


class SendGate:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a send gate needs at least one slot, got {limit}")
        self.limit = limit
        self.active = 0
        self._waiting: list[deque[asyncio.Future[None]]] = [deque() for _ in range(PRIORITIES)]
        self.waited = 0  # requests that found every slot taken

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._waiting)

    async def acquire(self, priority: int) -> None:
        """Wait for a slot; `release()` it after the request (also on error)."""
        if self.active < self.limit and not self.queued:
            self.active += 1
            return
        self.waited += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane = self._waiting[priority]
        lane.append(fut)
        try:
            await fut  # the releasing request passes its slot on (active unchanged)
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot came as we were cancelled: pass it on
            elif fut in lane:
                lane.remove(fut)
            raise

    def release(self) -> None:
        for lane in self._waiting:
            while lane:
                fut = lane.popleft()
                if not fut.done():
                    fut.set_result(None)
                    return
        self.active -= 1
