"""A Spark standalone cluster on 127.0.0.1 from pyspark's own distribution.

``python -m spark_replay.cluster start --workers 2`` starts a master and N
workers with pyspark's ``bin/spark-class`` (nothing is downloaded), waits until
every worker has registered, writes their pids and the master URL to
``--state-dir`` and prints the URL; ``... stop`` stops exactly those processes
(and the executors they launched); ``... run --workers 2 -- CMD`` starts a
cluster, runs CMD with ``SPARK_MASTER_URL`` set, and stops the cluster.
`StandaloneCluster` does the same from Python (tests, benchmarks).

Why: a user who owns a cluster runs ``spark-submit --master spark://...``; this
starts a real one (separate JVMs for master, workers and executors, tasks
shipped over RPC) without one. Every wait is bounded; stopping sends SIGTERM,
then SIGKILL after a grace period, only to pids this module started or their
descendants (the executors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.local.cluster import free_ports

START_TIMEOUT_S = 90.0
# The ports are drawn free, then bound by the JVMs a moment later: another process
# may take one between the two. A JVM then fails at once (spark.port.maxRetries=0:
# Spark would otherwise bind the next port, and the status page or the master URL
# polled here would be the wrong one); the whole start is tried again on new ports.
START_ATTEMPTS = 3
_NO_PORT_RETRIES = "-Dspark.port.maxRetries=0"
STOP_GRACE_S = 10.0
POLL_S = 0.2


class ClusterError(RuntimeError):
    """The cluster did not come up (the message says which process and why)."""


def spark_home() -> Path:
    """pyspark's own distribution (bin/spark-class, jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


def _descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _is_spark_daemon(pid: int) -> bool:
    try:
        return b"org.apache.spark.deploy." in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_pids(pids: list[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM these pids and their descendants, SIGKILL what is left after `grace_s`."""
    targets: list[int] = []
    for pid in pids:
        targets += [pid, *_descendants(pid)]
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in targets):
        time.sleep(POLL_S)
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:  # reap our own children (no zombies)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


class _PortTaken(ClusterError):
    """A JVM could not bind a port drawn free a moment before."""


@dataclass
class StandaloneCluster:
    """A master and `workers` workers of `cores` cores each, on 127.0.0.1."""

    workers: int = 2
    cores: int = 1
    memory: str = "2g"
    work_dir: Path | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    master_url: str = ""
    ui_port: int = 0
    # each process's log and where this process's output starts in it (appended)
    logs: dict[int, tuple[Path, int]] = field(default_factory=dict)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the master and workers; returns the master URL once all registered
        (on new ports, at most START_ATTEMPTS times, when one was taken meanwhile)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start_once(timeout_s)
            except _PortTaken as e:
                if attempt == START_ATTEMPTS:
                    raise ClusterError(f"{e} ({attempt} attempts on new ports)") from None
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> str:
        work = Path(self.work_dir or tempfile.mkdtemp(prefix="kraft-spark-cluster-"))
        work.mkdir(parents=True, exist_ok=True)
        self.work_dir = work
        self.procs = []
        ports = free_ports(2 + self.workers)
        port, self.ui_port = ports[0], ports[1]
        self.master_url = f"spark://127.0.0.1:{port}"
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(work),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_MASTER_OPTS": f"{os.environ.get('SPARK_MASTER_OPTS', '')} {_NO_PORT_RETRIES}",
            "SPARK_WORKER_OPTS": f"{os.environ.get('SPARK_WORKER_OPTS', '')} {_NO_PORT_RETRIES}",
        }
        spark_class = str(spark_home() / "bin" / "spark-class")
        master = [spark_class, "org.apache.spark.deploy.master.Master"]
        master += ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(self.ui_port)]
        try:
            self._spawn(master, work / "master.log", env)
            self._wait(lambda s: s is not None, timeout_s, "the master")
            for i in range(self.workers):
                cmd = [spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url]
                cmd += ["--host", "127.0.0.1", "--cores", str(self.cores)]
                cmd += ["--memory", self.memory, "--webui-port", str(ports[2 + i])]
                cmd += ["--work-dir", str(work / f"worker-{i}")]
                self._spawn(cmd, work / f"worker-{i}.log", env)
            self._wait(
                lambda s: s is not None and self._alive_workers(s) >= self.workers,
                timeout_s,
                f"{self.workers} workers to register",
            )
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def _spawn(self, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        with open(log, "ab") as out:
            start = out.tell()
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.logs[proc.pid] = (log, start)
        self.procs.append(proc)

    def _bind_failed(self, proc: subprocess.Popen[bytes]) -> bool:
        """Whether the exited process's output says a port could not be bound."""
        log, start = self.logs.get(proc.pid, (None, 0))
        if log is None:
            return False
        try:
            with open(log, "rb") as f:
                f.seek(start)
                out = f.read(1 << 20)
        except OSError:
            return False
        return b"java.net.BindException" in out

    def status(self) -> dict[str, Any] | None:
        """The master's JSON status, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _alive_workers(status: dict[str, Any]) -> int:
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, ready: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead and self._bind_failed(dead[0]):
                raise _PortTaken(f"waiting for {what}: {dead[0].args[1]} found its port taken")
            if dead:
                raise ClusterError(
                    f"waiting for {what}: {dead[0].args[1]} exited with {dead[0].returncode} "
                    f"(logs in {self.work_dir})"
                )
            if ready(self.status()):
                return
            time.sleep(POLL_S)
        raise ClusterError(f"{what} not ready after {timeout_s:.0f} s (logs in {self.work_dir})")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master."""
        stop_pids(self.pids[1:])
        stop_pids(self.pids[:1])
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=STOP_GRACE_S)
        self.procs = []

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


STATE_FILE = "cluster.json"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The options (before or after the action) and, for `run`, the command
    after `--`. The command is cut off first: a REMAINDER argument would also
    swallow the options written after the action (`start --workers 4` started
    two workers, and `run --workers 2 -- CMD` ran `--workers`)."""
    ap = argparse.ArgumentParser(
        prog="python -m spark_replay.cluster",
        description="A Spark standalone cluster on 127.0.0.1 from pyspark's distribution.",
        usage="%(prog)s {start,stop,run} [--workers N] [--cores N] [--memory M] "
        "[--state-dir DIR] [-- CMD ARGS... (run)]",
    )
    ap.add_argument("action", choices=("start", "stop", "run"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1, help="cores per worker")
    ap.add_argument("--memory", default="2g", help="memory per worker")
    ap.add_argument("--state-dir", default="/tmp/kraft-spark-cluster")
    cmd: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1 :]
    args = ap.parse_args(argv)
    if cmd and args.action != "run":
        ap.error(f"a command after -- goes with run, not {args.action}")
    return args, cmd


def main(argv: list[str] | None = None) -> int:
    args, cmd = parse_args(sys.argv[1:] if argv is None else list(argv))
    state_dir = Path(args.state_dir)
    state = state_dir / STATE_FILE
    if args.action == "stop":
        if not state.exists():
            print(f"cluster: no cluster recorded in {state}", file=sys.stderr)
            return 2
        info = json.loads(state.read_text())
        # Only pids that are still Spark daemons: a recorded pid may have been reused.
        stop_pids([p for p in info["worker_pids"] if _is_spark_daemon(p)])
        stop_pids([p for p in [info["master_pid"]] if _is_spark_daemon(p)])
        state.unlink()
        print(f"cluster: stopped {info['master_url']}", file=sys.stderr)
        return 0
    if args.workers < 1 or args.cores < 1:
        print("cluster: --workers and --cores must be >= 1", file=sys.stderr)
        return 2
    if args.action == "start" and state.exists():
        print(f"cluster: {state} records a running cluster; stop it first", file=sys.stderr)
        return 2
    cluster = StandaloneCluster(args.workers, args.cores, args.memory, state_dir)
    try:
        url = cluster.start()
    except ClusterError as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 2
    if args.action == "start":
        state.write_text(
            json.dumps(
                {
                    "master_url": url,
                    "master_pid": cluster.pids[0],
                    "worker_pids": cluster.pids[1:],
                    "ui": f"http://127.0.0.1:{cluster.ui_port}",
                }
            )
        )
        print(url)
        return 0
    try:
        if not cmd:
            print(f"cluster: {url} (Ctrl-C stops it)", file=sys.stderr)
            while True:
                time.sleep(3600)
        return subprocess.call(cmd, env={**os.environ, "SPARK_MASTER_URL": url})
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
