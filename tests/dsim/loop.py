"""SimLoop: a deterministic asyncio event loop with a virtual clock.

It is asyncio's own SelectorEventLoop (same scheduling, same ready queue, same
Task and Future code) with three things replaced:

- `time()` reads a virtual clock, so every `call_at`, `asyncio.sleep` and
  `wait_for` of the code under test runs on simulated time;
- the selector never blocks: asked to wait `timeout` seconds, it moves the
  virtual clock to the next timer at once (there are no file descriptors to
  watch: no sockets, not even the self-pipe). Nothing scheduled and nothing
  ready is a deadlock, raised as such;
- `run_in_executor` runs the function on the loop thread after a simulated disk
  latency chosen by the simulation (`executor_delay`), instead of in a thread:
  the fsyncs of the Raft log and the quorum-state writes keep their asynchrony
  (appends go on while a flush is "in flight") without any real concurrency.

Every task and executor job is tagged with the simulated process that created it
(the `OWNER` context variable, inherited by tasks and callbacks), so a crash can
cancel exactly that process's work.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
from collections.abc import Callable
from typing import Any

# The simulated process (a node id, or None for the simulation's own clients).
OWNER: contextvars.ContextVar[int | None] = contextvars.ContextVar("dsim_owner", default=None)


class SimulationDeadlock(RuntimeError):
    """Nothing is ready and no timer is set: the simulated world stopped."""


class _VirtualSelector(selectors.SelectSelector):
    def __init__(self, loop_ref: list[SimLoop]) -> None:
        super().__init__()
        self._loop_ref = loop_ref

    def select(self, timeout: float | None = None) -> list[Any]:
        loop = self._loop_ref[0]
        if timeout is None:
            raise SimulationDeadlock("nothing ready and no timer: the simulation cannot go on")
        if timeout > 0:
            # Jump straight to the next timer (exactly, so float sums never leave
            # the loop just short of it).
            nxt = loop._scheduled[0]._when if loop._scheduled else loop.now + timeout
            loop.now = max(loop.now, nxt)
            if loop.now > loop.limit_s:
                raise SimulationDeadlock(f"virtual time passed its limit ({loop.limit_s:.0f} s)")
        return []


class SimLoop(asyncio.SelectorEventLoop):
    def __init__(self, executor_delay: Callable[[int | None], float] | None = None) -> None:
        ref: list[SimLoop] = []
        super().__init__(selector=_VirtualSelector(ref))
        ref.append(self)
        self.now = 0.0
        self.limit_s = float("inf")  # the simulation fails past this virtual time
        # owner -> seconds before its next executor job runs (the disk's latency)
        self.executor_delay = executor_delay or (lambda _owner: 0.001)
        self.tasks_of: dict[int | None, set[asyncio.Task[Any]]] = {}
        self._jobs_of: dict[int | None, set[asyncio.TimerHandle]] = {}
        self.dead: set[int] = set()  # owners whose pending work must never run
        self.paused_until: dict[int, float] = {}  # owner -> virtual time its pause ends
        self._held: dict[int, list[asyncio.Handle]] = {}  # a paused owner's callbacks

    # -------------------------------------------------------------- no self-pipe

    def _make_self_pipe(self) -> None:
        self._ssock = self._csock = None

    def _close_self_pipe(self) -> None:
        pass

    def _write_to_self(self) -> None:
        pass  # no other thread ever wakes this loop

    # ---------------------------------------------------------------- the clock

    def time(self) -> float:
        return self.now

    # ---------------------------------------------------------------- pauses

    def pause(self, owner: int, seconds: float) -> None:
        """Stall `owner`: none of its callbacks runs for `seconds` from now."""
        until = self.now + seconds
        if until <= self.paused_until.get(owner, 0.0):
            return
        if owner not in self.paused_until:
            self._held[owner] = []
        self.paused_until[owner] = until
        self.call_at(until, self._resume, owner, until)

    def _resume(self, owner: int, until: float) -> None:
        if self.paused_until.get(owner) != until:
            return  # extended since: a later timer resumes it
        del self.paused_until[owner]
        # in the order they were scheduled, as asyncio's ready queue would run them
        self._ready.extend(self._held.pop(owner))  # type: ignore[attr-defined]

    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any:
        # Every task step and future callback passes here: a paused owner's are
        # held until the pause ends (timers already due still fire, as a kernel's
        # would, but what they wake is a callback of the owner: it waits too).
        if self.paused_until:
            owner = context.get(OWNER) if context is not None else OWNER.get()
            held = self._held.get(owner)  # type: ignore[arg-type]
            if held is not None:
                handle = asyncio.Handle(callback, args, self, context)
                held.append(handle)
                return handle
        return super().call_soon(callback, *args, context=context)

    # ---------------------------------------------------------------- ownership

    def create_task(self, coro: Any, *, name: str | None = None, context: Any = None) -> Any:
        task = super().create_task(coro, name=name, context=context)
        owner = context.get(OWNER) if context is not None else OWNER.get()
        tasks = self.tasks_of.setdefault(owner, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        owner = OWNER.get()
        fut = self.create_future()
        jobs = self._jobs_of.setdefault(owner, set())

        def run() -> None:
            jobs.discard(handle)
            if fut.cancelled() or owner in self.dead:
                return
            try:
                result = func(*args)
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting code
                fut.set_exception(e)
            else:
                fut.set_result(result)

        handle = self.call_at(self.now + self.executor_delay(owner), run)
        jobs.add(handle)
        return fut

    def kill(self, owner: int) -> list[asyncio.Task[Any]]:
        """Cancel every task and pending executor job of `owner` (a process crash);
        returns the cancelled tasks, to be awaited."""
        # A paused process dies too: what it held runs now, as its unwinding (its
        # executor jobs are dead), never after it restarted under the same owner.
        self.paused_until.pop(owner, None)
        self._ready.extend(self._held.pop(owner, []))  # type: ignore[attr-defined]
        for h in self._jobs_of.pop(owner, set()):
            h.cancel()
        tasks = sorted(self.tasks_of.pop(owner, set()), key=lambda t: t.get_name())
        for t in tasks:
            t.cancel()
        return tasks
