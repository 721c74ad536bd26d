"""A quorum of real `kraft controller` processes for integration tests.

Processes are started through tests/integration/procs.py (free ports, logs per
start, cleanup that kills exactly the pids started here). Observation goes
through the HTTP API only (`/v1/quorum`, the client API), and the committed log
is read from the data directories' segment files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metadata_log.replay import METADATA_DIR_NAME, iter_file_batches, segment_files
from tests.integration.procs import Proc, ProcGroup, free_ports, http


@dataclass
class ControllerQuorum:
    tmp: Path
    group: ProcGroup
    ids: tuple[int, ...] = (1, 2, 3)
    overrides: dict[str, str] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)
    procs: dict[int, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = dict(zip(self.ids, free_ports(len(self.ids)), strict=True))
        self.voters = ",".join(f"{i}@127.0.0.1:{self.ports[i]}" for i in self.ids)

    def url(self, node_id: int) -> str:
        return f"http://127.0.0.1:{self.ports[node_id]}"

    def data_dir(self, node_id: int) -> Path:
        return self.tmp / f"controller-{node_id}"

    def start(self, node_id: int) -> Proc:
        args = [
            "-m", "kraft.cli", "controller",
            "--node-id", str(node_id),
            "--voters", self.voters,
            "--data-dir", str(self.data_dir(node_id)),
            "--log-format", "json",
        ]  # fmt: skip
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        n = sum(1 for p in self.group.procs if p.name == f"controller-{node_id}")
        proc = Proc(
            f"controller-{node_id}", args, self.tmp / "logs" / f"controller-{node_id}.{n}.log"
        )
        self.procs[node_id] = self.group.start(proc)
        return proc

    def start_all(self) -> None:
        for i in self.ids:
            self.start(i)

    def alive(self, node_id: int) -> bool:
        p = self.procs.get(node_id)
        return p is not None and p.alive()

    def quorum(self, node_id: int, timeout: float = 1.0) -> dict[str, Any] | None:
        if not self.alive(node_id):
            return None
        try:
            status, body = http("GET", self.url(node_id) + "/v1/quorum", timeout=timeout)
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def leader(self) -> dict[str, Any] | None:
        """The view of the node that says it leads (the highest epoch wins)."""
        best = None
        for i in self.ids:
            q = self.quorum(i)
            if (
                q
                and q["state"] == "leader"
                and (best is None or q["leader_epoch"] > best["leader_epoch"])
            ):
                best = q
        return best

    def active(self, exclude: int | None = None) -> int | None:
        """The node whose controller is active (its write path is open)."""
        q = self.leader()
        if q is None or q["node_id"] == exclude:
            return None
        status, body = http("GET", self.url(q["node_id"]) + "/v1/brokers", timeout=2.0)
        return q["node_id"] if status == 200 else None

    def call_active(
        self, method: str, path: str, body: Any = None, timeout: float = 5.0
    ) -> tuple[int, Any]:
        """A request to the active controller, following NOT_CONTROLLER hints (bounded)."""
        deadline = time.monotonic() + timeout
        order = list(self.ids)
        url = None
        last: Any = None
        attempt = 0
        while time.monotonic() < deadline:
            target = url or self.url(order[attempt % len(order)])
            attempt += 1
            try:
                status, out = http(
                    method, target + path, body, timeout=max(0.2, deadline - time.monotonic())
                )
            except OSError as e:
                last, url = e, None
                time.sleep(0.05)
                continue
            if (
                status == 503
                and isinstance(out, dict)
                and out.get("error_code") == "NOT_CONTROLLER"
            ):
                url = out.get("leader_url")
                last = out
                if url is None:
                    time.sleep(0.05)
                continue
            return status, out
        raise AssertionError(
            f"{method} {path}: no active controller answered in {timeout}s ({last})"
        )

    def committed_batches(self, node_id: int, upto: int) -> list[tuple[int, int, bool, list[Any]]]:
        """(base offset, epoch, control, records) of every batch below `upto` in the node's log."""
        d = self.data_dir(node_id) / METADATA_DIR_NAME
        out = []
        for _base, path in segment_files(d):
            for b in iter_file_batches(path, allow_torn_tail=True):
                if b.base_offset + len(b.records) <= upto:
                    out.append((b.base_offset, b.leader_epoch, b.control, b.records))
        return out

    def records(self, node_id: int) -> list[tuple[int, Any]]:
        """(offset, record) of every record in the node's log segments."""
        d = self.data_dir(node_id) / METADATA_DIR_NAME
        out = []
        for _base, path in segment_files(d):
            for b in iter_file_batches(path, allow_torn_tail=True):
                for i, r in enumerate(b.records):
                    out.append((b.base_offset + i, r))
        return out

    def dump_logs(self) -> str:
        """The tail of every controller's log file (for assertion messages)."""
        parts = []
        for p in self.group.procs:
            parts.append(f"--- {p.log_path.name}\n" + "\n".join(p.log_text().splitlines()[-15:]))
        return "\n".join(parts)
