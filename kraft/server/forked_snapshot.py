"""Snapshots written by a forked child: no copy of the image, no GIL shared.

Why (issue 26): after a change of a million partitions every controller's
snapshot is due at once. Written by a thread of the controller's process, it
first copied the image on the event loop (165 ms at 1M partitions, twice that at
2M: longer than a heartbeat's 100 ms goal) and then held the GIL for seconds
while it built and encoded a record per partition. A thread that runs Python
takes the GIL from the loop at every switch interval (5 ms), so each of the
loop's system calls could wait that long: fetches and heartbeats slowed to a
crawl, and at 2M partitions a follower's fetch timeout passed (an election).
Lowering such a thread's priority made it worse (ad7e9aa: a preempted thread
holding the GIL stops the loop).

`os.fork()` gives the child the image as of the fork, copy-on-write: nothing is
copied on the loop (the fork itself copies page tables, a few ms), the child's
work runs on another core at a lower priority, and the parent goes on replaying
and serving. The child closes every inherited descriptor first (a connection the
parent closes must not stay open in the child), keeps the cyclic collector off
(it must not finalize the parent's objects), writes the snapshot durably
(write then rename: a child killed midway leaves no snapshot) and leaves with
os._exit, running no cleanup of the parent's. The parent waits for it on a
pidfd, without a thread; cancelled, it kills the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import signal
import traceback
from collections.abc import Callable

# The child's priority: below the controllers' event loops it shares the cores with.
CHILD_NICENESS = 10
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Descriptors the child keeps: stdin, stdout, stderr (for its traceback).
_KEEP_FDS = 3


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "pidfd_open")


def fork_writer(write: Callable[[], object]) -> int:
    """Fork a child that runs `write()` and exits 0, or 1 with its traceback on
    stderr; returns the child's pid. Call it when the state `write` reads is the
    one to save: the child sees memory as of this call."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _die_with(parent)
        # The parent's signal handlers and its loop's wakeup socket are not the
        # child's (only the main thread may change them: a loop run in another
        # thread leaves them, and the child closes that socket below anyway).
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
        gc.disable()
        os.closerange(_KEEP_FDS, os.sysconf("SC_OPEN_MAX"))
        with contextlib.suppress(OSError):
            os.nice(CHILD_NICENESS)
        write()
        code = 0
    except BaseException:  # noqa: BLE001 - the child reports and exits, whatever it was
        with contextlib.suppress(Exception):
            os.write(2, f"snapshot writer {os.getpid()}: {traceback.format_exc()}".encode())
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    """The child is killed when its parent ends (a SIGKILLed controller leaves no
    writer behind to drop a snapshot file into a data directory a restarted
    controller owns): Linux's PR_SET_PDEATHSIG."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the prctl
        os._exit(1)


async def wait_child(pid: int) -> int:
    """The exit code of child `pid` (a signal's number, negated, if one ended it),
    awaited on a pidfd. Cancelled: the child is killed and reaped."""
    loop = asyncio.get_running_loop()
    fd = os.pidfd_open(pid)
    try:
        exited = loop.create_future()
        loop.add_reader(fd, lambda: exited.done() or exited.set_result(None))
        try:
            await exited
        finally:
            loop.remove_reader(fd)
    except asyncio.CancelledError:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.waitpid(pid, 0)  # it is dying: a few ms
        raise
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)  # it has exited: at once
    return os.waitstatus_to_exitcode(status)
