"""A local cluster of real processes: `kraft cluster up`, the demo and the chaos test.

`LocalCluster` starts `kraft controller` and `broker-agent` child processes on
free loopback ports, knows each one's pid, URL and log file, and can kill -9,
SIGSTOP/SIGCONT, SIGTERM or restart any of them. It never signals a process it
did not start. Children get SIGTERM from the kernel if this process dies
(Linux PR_SET_PDEATHSIG), so even a kill -9 of the supervisor leaves no orphans.

Node ids are one namespace (as in Kafka): controllers are 1..C, brokers C+1..C+B.

Secure mode (`ClusterSpec.certs_dir`, `kraft cluster up --secure`): `kraft certs`
material in that directory (generated when missing), every controller on https
with its own keystore and token (`--config DIR/controller-N.properties`), every
broker with its own (`DIR/broker-N.properties`), and this supervisor's own calls
made as `admin`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kraft.arg_types import key_value, positive_seconds
from kraft.config import BROKER_KEYS, CONTROLLER_KEYS, SECURITY_KEYS, default_of, load_config
from kraft.local import saved_cluster
from kraft.security.client_security import NONE, ClientSecurity, from_command_config, urllib_kwargs
from kraft.security.reload import Reloader

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
# `kraft cluster up`'s stop: how long a controller may take after SIGTERM, and how
# long past its own controlled-shutdown bound a broker agent may take to exit
CONTROLLER_STOP_S = 30.0
SHUTDOWN_GRACE_S = 10.0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask the kernel to SIGTERM this child when its parent dies (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports (held open together so that they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_json(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 3.0,
    security: ClientSecurity = NONE,
) -> tuple[int, Any]:
    """One JSON request with a timeout; (status, decoded body). Raises OSError if unreachable."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            **security.headers,
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout, **urllib_kwargs(security)) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return e.code, raw.decode(errors="replace")


def wait_for(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll fn until it returns something truthy; TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if time.monotonic() >= deadline:
            detail = f" (last error: {last})" if last else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


@dataclass
class Node:
    """One child process: a controller or a broker agent."""

    node_id: int
    role: str  # "controller" | "broker"
    args: list[str]
    log_path: Path
    url: str | None = None  # controllers: their listener
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    stopped: bool = False  # SIGSTOPped
    killed_by_terminate: bool = False  # the last terminate() ended in SIGKILL

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def out_path(self) -> Path:
        """Where the process's stdout goes (its log is stderr, in log_path)."""
        return self.log_path.with_suffix(".out")

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class ClusterSpec:
    controllers: int = 3
    brokers: int = 3
    data_dir: Path = Path("cluster-data")
    host: str = "127.0.0.1"
    controller_overrides: dict[str, str] = field(default_factory=dict)
    broker_overrides: dict[str, str] = field(default_factory=dict)
    broker_args: list[str] = field(default_factory=list)
    log_format: str = "json"
    # TLS + authentication (issue 8): kraft certs material here (created when missing)
    certs_dir: Path | None = None
    spare_broker_ids: int = 4  # secure mode: credentials for brokers added later

    def __post_init__(self) -> None:
        if not 1 <= self.controllers <= 9:
            raise ValueError(f"--controllers must be between 1 and 9, got {self.controllers}")
        if not 0 <= self.brokers <= 200:
            raise ValueError(f"--brokers must be between 0 and 200, got {self.brokers}")


class LocalCluster:
    """Controllers and broker agents as child processes of this one."""

    def __init__(
        self,
        spec: ClusterSpec,
        ports: list[int] | None = None,
        peer_ports: dict[tuple[int, int], int] | None = None,
    ) -> None:
        """`peer_ports[(i, j)]`, when given, is the port controller i dials to reach
        controller j (a fault-injecting proxy in the chaos test): each controller
        then gets its own voters string, listens on its own port (`--listen`) and
        all share one explicit `--cluster-id` (the derived one would differ)."""
        self.spec = spec
        self.data_dir = Path(spec.data_dir).resolve()
        ports = ports or free_ports(spec.controllers, spec.host)
        if len(ports) != spec.controllers:
            raise ValueError("one port per controller is needed")
        self.ports = ports
        self.peer_ports = peer_ports
        self.voters = ",".join(f"{i + 1}@{spec.host}:{p}" for i, p in enumerate(ports))
        self._security = NONE
        self._reloader: Reloader | None = None
        scheme = "http"
        if spec.certs_dir is not None:
            self._ensure_certs(spec)
            self._security = from_command_config(str(spec.certs_dir / "admin.properties"))
            self._reloader = Reloader([self._security], 0, who="cluster up")
            scheme = "https"
        self.controller_urls = [f"{scheme}://{spec.host}:{p}" for p in ports]
        self.nodes: dict[int, Node] = {}
        for i in range(spec.controllers):
            nid = i + 1
            args = [
                "-m", "kraft.cli", "controller",
                "--node-id", str(nid),
                "--voters", self._voters_seen_by(nid),
                "--data-dir", str(self.data_dir / f"controller-{nid}"),
                "--log-format", spec.log_format,
            ]  # fmt: skip
            if peer_ports is not None:
                args += [
                    "--listen", f"{spec.host}:{ports[i]}",
                    "--cluster-id", f"kraft-local-{ports[0]}",
                ]  # fmt: skip
            if spec.certs_dir is not None:
                args += ["--config", str(spec.certs_dir / f"controller-{nid}.properties")]
            for k, v in spec.controller_overrides.items():
                args += ["--override", f"{k}={v}"]
            self.nodes[nid] = Node(
                nid, "controller", args, self.data_dir / "logs" / f"controller-{nid}.log",
                url=self.controller_urls[i],
            )  # fmt: skip
        for j in range(spec.brokers):
            self.add_broker(spec.controllers + 1 + j)

    @property
    def security(self) -> ClientSecurity:
        """The admin's TLS material and token (secure mode), read again when `kraft
        certs` rewrote their files: after a rotation the old CA alone no longer
        verifies the controllers, and the status line showed every controller down.
        Material caught half-written keeps the last good one (logged) until it is
        whole."""
        if self._reloader is not None:
            self._reloader.check()
        return self._security

    @staticmethod
    def _ensure_certs(spec: ClusterSpec) -> None:
        assert spec.certs_dir is not None
        if (spec.certs_dir / "admin.properties").exists():
            return
        from kraft.security.certs import generate

        c = spec.controllers
        generate(
            spec.certs_dir,
            list(range(1, c + 1)),
            list(range(c + 1, c + spec.brokers + spec.spare_broker_ids + 1)),
            admin=True,
        )

    def _voters_seen_by(self, nid: int) -> str:
        if self.peer_ports is None:
            return self.voters
        host = self.spec.host
        return ",".join(
            f"{j}@{host}:{self.ports[j - 1] if j == nid else self.peer_ports[(nid, j)]}"
            for j in range(1, self.spec.controllers + 1)
        )

    # ------------------------------------------------------------ membership

    def add_broker(self, broker_id: int) -> Node:
        if broker_id in self.nodes:
            raise ValueError(f"node id {broker_id} is already used")
        args = [
            "-m", "broker_agent.cli",
            "--broker-id", str(broker_id),
            "--controllers", ",".join(self.controller_urls),
            "--log-format", self.spec.log_format,
            # KIP-966: a clean shutdown's broker epoch survives the restart
            "--data-dir", str((self.data_dir / f"broker-{broker_id}").resolve()),
            *self.spec.broker_args,
        ]  # fmt: skip
        if self.spec.certs_dir is not None:
            cfg = self.spec.certs_dir / f"broker-{broker_id}.properties"
            if not cfg.exists():
                raise ValueError(f"no credentials for broker {broker_id} in {self.spec.certs_dir}")
            args += ["--config", str(cfg)]
        for k, v in self.spec.broker_overrides.items():
            args += ["--override", f"{k}={v}"]
        node = Node(broker_id, "broker", args, self.data_dir / "logs" / f"broker-{broker_id}.log")
        self.nodes[broker_id] = node
        return node

    @property
    def console_url(self) -> str:
        """The web console (kraft.console) of the first controller; every one serves it."""
        return self.controller_urls[0] + "/ui"

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "controller"]

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "broker"]

    # ------------------------------------------------------------- processes

    def start(self, node_id: int) -> Node:
        node = self.nodes[node_id]
        if node.alive():
            raise RuntimeError(f"{node.name} is already running (pid {node.pid})")
        node.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # stderr is the structured log (one JSON object per line with --log-format
        # json); stdout (a broker agent's status lines) goes next to it.
        with node.log_path.open("ab") as logf, node.out_path.open("ab") as outf:
            node.popen = subprocess.Popen(
                [sys.executable, *node.args],
                stdout=outf,
                stderr=logf,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                # Own process group: a terminal's Ctrl-C reaches only the supervisor,
                # which stops brokers before controllers (a controlled shutdown needs one).
                start_new_session=True,
            )
        node.starts += 1
        node.stopped = False
        return node

    def start_all(self) -> None:
        for nid in sorted(self.nodes):
            if not self.nodes[nid].alive():
                self.start(nid)

    def kill9(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive():
            assert node.popen is not None
            if node.stopped:
                os.kill(node.popen.pid, signal.SIGCONT)
            os.kill(node.popen.pid, signal.SIGKILL)
            node.popen.wait(10)
        node.stopped = False

    def pause(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive() and not node.stopped:
            os.kill(node.popen.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            node.stopped = True

    def resume(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive() and node.stopped:
            os.kill(node.popen.pid, signal.SIGCONT)  # type: ignore[union-attr]
        node.stopped = False

    def terminate(self, node_id: int, timeout: float = 30.0) -> int | None:
        """SIGTERM (a graceful stop) and wait; SIGKILL after `timeout`. Returns the exit code."""
        node = self.nodes[node_id]
        if node.popen is None:
            return None
        node.killed_by_terminate = False
        if node.alive():
            if node.stopped:
                os.kill(node.popen.pid, signal.SIGCONT)
                node.stopped = False
            os.kill(node.popen.pid, signal.SIGTERM)
        try:
            return node.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(node.popen.pid, signal.SIGKILL)
            node.popen.wait(10)
            node.killed_by_terminate = True
            return -signal.SIGKILL

    def broker_shutdown_bound_s(self) -> float:
        """How long a broker agent waits for its controlled shutdown before it gives
        up and exits by itself (controlled.shutdown.timeout.ms)."""
        ms: int = default_of("controlled.shutdown.timeout.ms")
        # an override the brokers refuse (they exit 2 at start) leaves the default
        with contextlib.suppress(ValueError):
            ms = int(self.spec.broker_overrides.get("controlled.shutdown.timeout.ms", ms))
        return ms / 1000

    def hurry_brokers(self) -> list[str]:
        """SIGINT to every live broker agent: to one in its controlled shutdown it is
        the second signal, which ends the wait at once (exit 0). The names signalled."""
        hurried = []
        for n in self.brokers:
            if n.alive() and n.popen is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(n.popen.pid, signal.SIGINT)
                    hurried.append(n.name)
        return hurried

    def stop_all(
        self, timeout: float = 30.0, broker_timeout: float | None = None
    ) -> dict[str, int | None]:
        """Brokers first (controlled shutdown needs a controller), then controllers, in
        parallel; each SIGKILLed after its group's timeout (brokers: `broker_timeout`,
        else `timeout`)."""
        codes: dict[str, int | None] = {}

        def stop_group(nodes: list[Node], wait_s: float) -> None:
            threads = [
                threading.Thread(
                    target=lambda n=n: codes.__setitem__(n.name, self.terminate(n.node_id, wait_s))
                )
                for n in nodes
                if n.popen is not None
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        stop_group(self.brokers, timeout if broker_timeout is None else broker_timeout)
        stop_group(self.controllers, timeout)
        return codes

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    # ------------------------------------------------------------ observation

    def quorum(self, node_id: int, timeout: float = 2.0) -> dict[str, Any] | None:
        node = self.nodes[node_id]
        if not node.alive() or node.stopped or node.url is None:
            return None
        try:
            status, body = http_json(
                "GET", f"{node.url}/v1/quorum", timeout=timeout, security=self.security
            )
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def leader(self) -> dict[str, Any] | None:
        """The quorum view of the controller that says it leads (the highest epoch wins)."""
        best: dict[str, Any] | None = None
        for n in self.controllers:
            q = self.quorum(n.node_id)
            if (
                q
                and q.get("state") == "leader"
                and (best is None or q["leader_epoch"] > best["leader_epoch"])
            ):
                best = q
        return best

    def wait_leader(self, timeout: float = 15.0) -> dict[str, Any]:
        return wait_for(self.leader, timeout, "an elected controller leader")

    def client_get(self, path: str, timeout: float = 3.0) -> Any:
        """GET from any live controller (reads come from the committed image)."""
        last: Exception | None = None
        for n in self.controllers:
            if not n.alive() or n.stopped:
                continue
            try:
                status, body = http_json(
                    "GET", f"{n.url}{path}", timeout=timeout, security=self.security
                )
            except OSError as e:
                last = e
                continue
            if status == 200:
                return body
        raise OSError(f"no controller answered GET {path}: {last}")

    def active_get(self, path: str, timeout: float = 3.0) -> Any:
        """GET from the active controller."""
        q = self.leader()
        if q is None:
            raise OSError("no active controller")
        status, body = http_json(
            "GET", f"{self.nodes[q['node_id']].url}{path}", timeout=timeout, security=self.security
        )
        if status != 200:
            raise OSError(f"GET {path}: HTTP {status} {body}")
        return body

    def active_call(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        """A write to the active controller; raises RuntimeError with the error body."""
        q = self.leader()
        if q is None:
            raise OSError("no active controller")
        status, out = http_json(
            method, f"{self.nodes[q['node_id']].url}{path}", body, timeout, self.security
        )
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status} {out}")
        return out

    def brokers_view(self) -> dict[int, dict[str, Any]]:
        return {b["broker_id"]: b for b in self.active_get("/v1/brokers")}

    def status_line(self) -> str:
        parts = []
        for n in self.controllers:
            q = self.quorum(n.node_id, timeout=1.0)
            if q is None:
                parts.append(f"c{n.node_id}:{'stopped' if n.stopped else 'down'}")
            else:
                parts.append(
                    f"c{n.node_id}:{q['state']}@{q['leader_epoch']} hw={q['high_watermark']}"
                )
        try:
            view = self.brokers_view()
            fenced = sum(1 for b in view.values() if b.get("fenced"))
            parts.append(f"brokers {len(view) - fenced} unfenced / {fenced} fenced")
        except (OSError, RuntimeError):
            parts.append("brokers ?")
        return "  ".join(parts)

    def iter_logs(self) -> Iterator[tuple[Node, Path]]:
        for n in self.nodes.values():
            yield n, n.log_path


# ------------------------------------------------------------------ kraft cluster up


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = sub.add_parser("cluster", help="run a whole local cluster in the foreground")
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    up = csub.add_parser(
        "up",
        help="start controllers and broker agents as child processes; Ctrl-C stops them",
    )
    up.add_argument(
        "--controllers",
        type=int,
        default=None,
        help="quorum size: 3 for a new DATA_DIR; a restart keeps DATA_DIR's "
        "(its ports and --secure too: DATA_DIR/cluster.json)",
    )
    up.add_argument("--brokers", type=int, default=3, help="broker agents (default 3)")
    up.add_argument("--data-dir", default="cluster-data", help="default: ./cluster-data")
    up.add_argument(
        "--status-interval",
        type=positive_seconds,
        default=2.0,
        help="seconds between status lines",
    )
    up.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="stop by itself after this many seconds",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help="a configuration value for every controller and broker (repeatable), "
        "e.g. broker.session.timeout.ms=6000",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS and authentication on: certificates and tokens from `kraft certs` in "
        "DATA_DIR/certs (generated when missing); admin tools use "
        "--command-config DATA_DIR/certs/admin.properties",
    )


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    try:
        overrides = dict(args.override)
        # every process would refuse a bad value at its start (exit 2) and leave the
        # cluster up with nothing running: refused here, before anything starts
        load_config(
            {*CONTROLLER_KEYS, *BROKER_KEYS, *SECURITY_KEYS},
            overrides=[f"{k}={v}" for k, v in overrides.items()],
        )
        # a restart: the voters' URLs are in the log, so the same ports and scheme
        controllers, ports = saved_cluster.controller_ports(
            data_dir, args.controllers, args.secure, ClusterSpec.host
        )
        spec = ClusterSpec(
            controllers,
            args.brokers,
            data_dir,
            controller_overrides=overrides,
            broker_overrides=overrides,
            certs_dir=(data_dir / "certs") if args.secure else None,
        )
    except ValueError as e:
        print(f"kraft cluster up: {e}", file=sys.stderr)
        return 2
    cluster = LocalCluster(spec, ports=list(ports) if ports else None)
    try:
        saved_cluster.save(
            data_dir, saved_cluster.SavedCluster(controllers, tuple(cluster.ports), args.secure)
        )
    except OSError as e:
        print(
            f"kraft cluster up: cannot write {data_dir / saved_cluster.FILE}: {e}", file=sys.stderr
        )
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start_all()
        print(f"kraft cluster: {spec.controllers} controllers, {spec.brokers} brokers")
        for n in cluster.controllers:
            print(f"  controller {n.node_id}: {n.url}  pid {n.pid}  (log {n.log_path})")
        for n in cluster.brokers:
            print(f"  broker {n.node_id}: pid {n.pid}  (log {n.log_path})")
        print(f"web console: {cluster.console_url}  (any controller's /ui)")
        print(f"admin tools: export KRAFT_BOOTSTRAP={','.join(cluster.controller_urls)}")
        if spec.certs_dir is not None:
            print(f"             export KRAFT_COMMAND_CONFIG={spec.certs_dir / 'admin.properties'}")
            print(
                f"             (the console asks for a principal and secret: {spec.certs_dir / 'admin.token'} holds admin:SECRET)"
            )
        print("Ctrl-C stops the cluster.", flush=True)
        started = time.monotonic()
        told: set[str] = set()  # exited nodes whose last words were printed
        while not stop.wait(args.status_interval):
            dead = [n for n in cluster.nodes.values() if not n.alive()]
            for n in dead:
                if n.name not in told and n.popen is not None:
                    told.add(n.name)
                    print(
                        f"{n.name} exited with code {n.popen.returncode}: "
                        f"{last_words(n.log_path)}  (log {n.log_path})",
                        flush=True,
                    )
            line = cluster.status_line()
            if dead:
                line += "  exited: " + ",".join(n.name for n in dead)
            print(time.strftime("%H:%M:%S ") + line, flush=True)
            if len(dead) == len(cluster.nodes):
                print("every process has exited: stopping", flush=True)
                break
            if args.duration is not None and time.monotonic() - started >= args.duration:
                break
    finally:
        # A broker whose controlled shutdown cannot finish (no active controller)
        # gives up after its own bound and exits 0; it is killed only if it is
        # still there some seconds later. Ctrl-C again hurries the brokers instead.
        broker_wait = cluster.broker_shutdown_bound_s() + SHUTDOWN_GRACE_S

        def on_second_signal(signum: int, _frame: object) -> None:
            hurried = cluster.hurry_brokers()
            if hurried:
                print(f"skipping the controlled shutdown of {', '.join(hurried)}", flush=True)

        for sig in old:
            signal.signal(sig, on_second_signal)
        print(
            "stopping: brokers first (controlled shutdown, at most "
            f"{broker_wait:.0f} s; Ctrl-C again skips it), then controllers ...",
            flush=True,
        )
        gone = [n.name for n in cluster.nodes.values() if not n.alive()]
        codes = cluster.stop_all(CONTROLLER_STOP_S, broker_timeout=broker_wait)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        print("stopped: " + stopped_line(cluster, codes, gone, broker_wait), flush=True)
    # A process that ended by itself with an error (it printed why) fails the run; one
    # killed by a signal (the operator's kill -9, a chaos test) does not.
    failed = sorted(name for name in gone if (codes.get(name) or 0) > 0)
    if failed:
        print(f"kraft cluster up: {', '.join(failed)} exited with an error", file=sys.stderr)
        return 1
    return 0


def last_words(log_path: Path, limit: int = 300) -> str:
    """The last line of a node's log (its `msg`, and `error` if any, when the line is
    JSON): why a node exited, e.g. `kraft controller: error: corrupt batch ...`."""
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [x for x in f.read().decode("utf-8", "replace").splitlines() if x.strip()]
    except OSError as e:
        return f"(its log cannot be read: {e})"
    if not lines:
        return "(nothing in its log)"
    last = lines[-1].strip()
    if last.startswith("{"):
        with contextlib.suppress(ValueError):
            doc = json.loads(last)
            if isinstance(doc, dict) and "msg" in doc:
                last, error = str(doc["msg"]), str(doc.get("error") or "")
                if error and error not in last:
                    last += f": {error}"
    return last if len(last) <= limit else last[: limit - 3] + "..."


def stopped_line(
    cluster: LocalCluster, codes: dict[str, int | None], gone: list[str], broker_wait: float
) -> str:
    """`name=code` per process, saying which had exited before the stop and which
    the stop had to kill (and after how long)."""
    parts = []
    for n in sorted(cluster.nodes.values(), key=lambda n: n.name):
        if n.name not in codes:
            continue
        part = f"{n.name}={codes[n.name]}"
        if n.name in gone:
            part += " (had exited)"
        elif n.killed_by_terminate:
            wait_s = broker_wait if n.role == "broker" else CONTROLLER_STOP_S
            part += f" (killed: still running {wait_s:.0f} s after SIGTERM)"
        parts.append(part)
    return ", ".join(parts)
