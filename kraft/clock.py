"""The shells' two clocks, in milliseconds.

`mono_ms` drives every timer, deadline and session (Raft's election and fetch
timeouts, broker sessions, request deadlines): it never steps, so an NTP step or a
manual clock change cannot start an election or fence every broker at once.
`wall_ms` is only for timestamps that a reader compares with the calendar: a
batch's append time, a snapshot's time, a log line. Kafka splits them the same way
(`Time.milliseconds()` for stamps, `Time.nanoseconds()` for timers).
"""

from __future__ import annotations

import time


def mono_ms() -> int:
    """Monotonic milliseconds: for timers, deadlines and sessions only."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """Wall-clock milliseconds since the epoch: for timestamps only."""
    return int(time.time() * 1000)  # timestamp
