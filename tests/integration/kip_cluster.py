"""A small real cluster for the KIP-455 / KIP-966 / leader-balancing integration tests:
one `kraft controller` (a single voter starts in about a second) and broker agents,
each with a status port and a data dir (the KIP-966 clean shutdown file), on
127.0.0.1 with free ports. Every process is started through a ProcGroup and killed
by pid; every wait is bounded (tests/integration/procs.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.procs import REPO, Proc, ProcGroup, free_ports, http, wait_until

CONTROLLER_ID = 100  # one namespace with the brokers: far from their ids
HEARTBEAT_MS = 500
SESSION_MS = 3000
FAST = {
    "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "broker.session.timeout.ms": str(SESSION_MS),
}


@dataclass
class KipCluster:
    tmp: Path
    brokers: tuple[int, ...]
    controller_overrides: dict[str, str] = field(default_factory=dict)
    racks: dict[int, str] = field(default_factory=dict)
    group: ProcGroup = field(default_factory=ProcGroup)
    procs: dict[int, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ports = free_ports(1 + len(self.brokers))
        self.port = ports[0]
        self.status_ports = dict(zip(self.brokers, ports[1:], strict=True))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------ processes

    def start(self) -> KipCluster:
        args = [
            "-m", "kraft.cli", "controller",
            "--node-id", str(CONTROLLER_ID),
            "--voters", f"{CONTROLLER_ID}@127.0.0.1:{self.port}",
            "--data-dir", str(self.tmp / "controller"),
        ]  # fmt: skip
        for k, v in {**FAST, **self.controller_overrides}.items():
            args += ["--override", f"{k}={v}"]
        self.group.start(Proc("controller", args, self.tmp / "logs" / "controller.log"))
        wait_until(self._ready, 30, interval=0.1, what="the controller active")
        for b in self.brokers:
            self.start_broker(b)
        self.wait_running(self.brokers)
        return self

    def _ready(self) -> bool:
        status, _ = http("GET", self.url + "/v1/brokers", timeout=2)
        return status == 200

    def start_broker(self, broker_id: int) -> Proc:
        args = [
            "-m", "broker_agent.cli",
            "--broker-id", str(broker_id),
            "--controllers", self.url,
            "--status-port", str(self.status_ports[broker_id]),
            "--status-interval", "0",
            "--data-dir", str(self.tmp / f"broker-{broker_id}"),
            "--log-format", "json",
        ]  # fmt: skip
        if broker_id in self.racks:
            args += ["--rack", self.racks[broker_id]]
        for k, v in FAST.items():
            args += ["--override", f"{k}={v}"]
        starts = sum(1 for p in self.group.procs if p.name == f"broker-{broker_id}")
        proc = Proc(
            f"broker-{broker_id}", args, self.tmp / "logs" / f"broker-{broker_id}.{starts}.log"
        )
        self.procs[broker_id] = self.group.start(proc)
        return proc

    def stop_broker(self, broker_id: int) -> int:
        """SIGTERM: a controlled shutdown (the clean shutdown file is written)."""
        code = self.procs[broker_id].terminate(20)
        assert code == 0, f"broker {broker_id} exited {code}"
        return code

    def kill_broker(self, broker_id: int) -> None:
        """kill -9: an unclean shutdown."""
        self.procs[broker_id].kill9()

    def close(self) -> None:
        self.group.close()
        for p in self.group.procs:
            if "Traceback" in p.log_text():
                print(f"--- {p.name} log ({p.log_path}) ---\n{p.log_text()[-4000:]}")

    # ------------------------------------------------------------ API

    def get(self, path: str) -> Any:
        status, body = http("GET", self.url + path, timeout=5)
        assert status == 200, (path, status, body)
        return body

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(method, self.url + path, body, timeout=15)

    def post(self, path: str, body: Any) -> Any:
        status, reply = self.call("POST", path, body)
        assert status in (200, 201), (path, status, reply)
        return reply

    def registrations(self) -> dict[int, dict[str, Any]]:
        return {b["broker_id"]: b for b in self.get("/v1/brokers")}

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        return sorted(
            self.get(f"/v1/topics/{topic}")["partitions"], key=lambda p: p["partition_id"]
        )

    def agent(self, broker_id: int) -> dict[str, Any]:
        status, body = http(
            "GET", f"http://127.0.0.1:{self.status_ports[broker_id]}/status", timeout=2
        )
        assert status == 200
        return body["agents"][0]

    def running(self, ids: Iterable[int]) -> bool:
        regs = self.registrations()
        for b in ids:
            if b not in regs or regs[b]["fenced"] or regs[b]["in_controlled_shutdown"]:
                return False
            try:
                if self.agent(b)["state"] != "RUNNING":
                    return False
            except OSError:
                return False
        return True

    def wait_running(self, ids: Iterable[int], timeout: float = 30) -> None:
        ids = tuple(ids)
        wait_until(lambda: self.running(ids), timeout, interval=0.1, what=f"brokers {ids} RUNNING")

    def wait_fenced(self, broker_id: int, timeout: float = SESSION_MS / 1000 + 5) -> None:
        wait_until(
            lambda: self.registrations()[broker_id]["fenced"],
            timeout,
            interval=0.1,
            what=f"broker {broker_id} fenced",
        )

    def create_topic(self, name: str, assignments: list[list[int]], **configs: str) -> None:
        self.post("/v1/topics", {"name": name, "assignments": assignments, "configs": configs})

    def wait_full_isr(self, topic: str, timeout: float = 20) -> list[dict[str, Any]]:
        def full() -> list[dict[str, Any]] | None:
            parts = self.partitions(topic)
            ok = all(sorted(p["isr"]) == sorted(p["replicas"]) for p in parts)
            return parts if ok else None

        return wait_until(full, timeout, interval=0.1, what=f"{topic}: every replica in the ISR")

    # ------------------------------------------------------------ the CLI

    def kraft(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`kraft ARGS --bootstrap URL` as a user types it (30 s bound)."""
        res = subprocess.run(
            [sys.executable, "-m", "kraft.cli", *args, "--bootstrap", self.url],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
        )
        if check:
            assert res.returncode == 0, (args, res.returncode, res.stdout, res.stderr)
        return res

    def write_json(self, name: str, doc: Any) -> Path:
        path = self.tmp / name
        path.write_text(json.dumps(doc))
        return path


class TopicWriter:
    """A client that keeps creating small topics (and counts failures) while a
    reassignment runs: the controller must keep serving other writes."""

    def __init__(self, cluster: KipCluster, prefix: str, brokers: list[int]) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.brokers = brokers
        self.created = 0
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TopicWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(20)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            replicas = [self.brokers[i % len(self.brokers)]]
            try:
                status, body = self.cluster.call(
                    "POST", "/v1/topics", {"name": f"{self.prefix}{i}", "assignments": [replicas]}
                )
            except OSError as e:
                status, body = 0, str(e)
            if status == 201:
                self.created += 1
            else:
                self.errors.append((status, body))
            i += 1
            self._stop.wait(0.02)
