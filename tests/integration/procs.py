"""Real processes on 127.0.0.1 for integration tests: free ports, bounded waits,
and cleanup that kills exactly the processes a test started (by pid)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

# Re-exported: the integration tests take their ports from here.
from kraft.local.cluster import free_ports as free_ports

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def wait_until(
    fn: Callable[[], T | None], timeout: float, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll fn until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc})")


def http(method: str, url: str, body: Any = None, timeout: float = 5.0) -> tuple[int, Any]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return e.code, raw.decode(errors="replace")


@dataclass
class Proc:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.popen = subprocess.Popen(
            [sys.executable, *self.args], stdout=logf, stderr=subprocess.STDOUT, cwd=REPO, env=env
        )
        logf.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(10)  # type: ignore[union-attr]

    def terminate(self, timeout: float = 20) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.popen is None:
            return 0
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(10)
            return -9

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class ProcGroup:
    """Every process a test starts; `close()` kills exactly those pids."""

    def __init__(self) -> None:
        self.procs: list[Proc] = []

    def start(self, proc: Proc) -> Proc:
        self.procs.append(proc.start())
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.alive():
                p.signal(signal.SIGKILL)
        for p in self.procs:
            if p.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(10)
