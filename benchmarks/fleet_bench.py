"""Fleet benchmark (issue 5): prints one JSON object.

Real processes on 127.0.0.1: 3 `kraft controller` (kraft.local.cluster.LocalCluster,
fsync on, Kafka's default timeouts) and ONE `broker-agent fleet --count K`
process (default K = 2,000 agents sharing one connection pool and one metadata
observer; the seeded lag model is on, as it is in fleets by default). Phases:

1. start-up: the time until every agent is RUNNING (the fleet's `/status`) and
   unfenced in the active controller's `GET /v1/brokers`; then a topic with
   `--partitions` partitions (replication factor 3) so that agents lead
   partitions and the lag model drives AlterPartition ISR changes;
2. hold for `--duration` seconds (default 120), sampling every few seconds:
   agents per state, fenced brokers, the Raft leader. Reported:
   - heartbeat latency p50/p90/p99/max as the agents saw it (the fleet's
     `GET /heartbeats?since=N`: every heartbeat answered during the hold);
   - spurious fences: FenceBrokerRecords in the active controller's log during
     the hold and over the whole run (every agent keeps heartbeating, so any
     fence is spurious; goal 0), the controllers' fence counters
     (`kafka_controller_controllerstats_brokerfences_total`), the most fenced
     brokers and the fewest RUNNING agents seen in a sample;
   - CPU seconds and percent of one core of the fleet process and of each
     controller (the active one marked), from /proc/PID/stat; RSS (VmRSS,
     VmHWM); the machine's load average and busy CPU during the hold (other
     work on a shared machine shows there);
3. SIGTERM to the fleet: every agent does a controlled shutdown; the time until
   the process exits, and its exit code (goal 0).

Storm mode (`--storm`, issue 27): `--count` (default 10,000) agents all started
at once (`--ramp-ms 0`) against 3 controllers at Kafka's default timeouts, and
`--kill-active-at S` kills -9 the active controller S seconds into the storm.
Reported per run: the seconds until every agent is RUNNING in the fleet and
unfenced in the active controller's `GET /v1/brokers` (goal: 60 s, 90 s with the
kill), the failed requests by kind and error code (the fleet's counters: why
registrations were refused), the fleet's task exceptions and the tracebacks in
its log (goal 0 each), FenceBrokerRecords in the active controller's log (every
agent heartbeats, so each is spurious), CPU seconds per process, and, if the
bound passed first, how many agents were still in each state. `--repeat N` runs N fresh clusters and adds the medians.

Every process is started here and stopped by pid (SIGTERM, then SIGKILL after a
bound); children also die with this process (PR_SET_PDEATHSIG).

Usage: python benchmarks/fleet_bench.py [--count K] [--duration S] [--partitions P]
       [--quick] [--keep]
       python benchmarks/fleet_bench.py --storm [--count K] [--kill-active-at S] [--repeat N]
Run timing measurements under the shared lock:
  flock /tmp/kraft-heavy.lock .venv/bin/python benchmarks/fleet_bench.py > /tmp/fleet_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kraft.local.cluster import ClusterSpec, LocalCluster, Node, free_ports, http_json  # noqa: E402
from metadata_log.records import FenceBrokerRecord  # noqa: E402
from metadata_log.replay import METADATA_DIR_NAME, iter_file_batches, segment_files  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
FENCE_COUNTER = "kafka_controller_controllerstats_brokerfences_total"
QUEUE_TIME = "kafka_controller_controllereventmanager_eventqueuetimems"
COMMIT_LATENCY = "kafka_server_raft_metrics_commit_latency_ms"


# ==================================================================== /proc


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process, in seconds (None once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_mib(pid: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {"rss_mib": None, "peak_rss_mib": None}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mib"] = round(int(line.split()[1]) / 1024, 1)
            elif line.startswith("VmHWM:"):
                out["peak_rss_mib"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot (/proc/stat)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return sum(parts) - idle, sum(parts)


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


# ==================================================================== HTTP


def get_json(url: str, timeout: float = 5.0) -> Any:
    status, body = http_json("GET", url, timeout=timeout)
    if status != 200:
        raise OSError(f"GET {url}: HTTP {status} {body}")
    return body


def scrape(url: str) -> str | None:
    """A controller's /metrics text (None if it does not answer)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=3) as resp:
            return resp.read().decode()
    except OSError:
        return None


def fence_counter(text: str | None) -> float | None:
    """The controller's count of session-expiry fences."""
    if text is None:
        return None
    m = re.search(rf"^{FENCE_COUNTER} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def histogram(text: str | None, name: str) -> dict[float, float]:
    """Cumulative bucket counts {le: count} of a Prometheus histogram."""
    out: dict[float, float] = {}
    for m in re.finditer(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text or "", re.M):
        out[float(m.group(1))] = float(m.group(2))
    return out


def histogram_quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """p50/p99 (as bucket upper bounds, ms) of the observations between two scrapes."""
    delta = sorted((le, after.get(le, 0.0) - before.get(le, 0.0)) for le in after)
    total = delta[-1][1] if delta else 0.0
    out: dict[str, Any] = {"count": int(total)}
    for q in (0.5, 0.99):
        le = next((le for le, c in delta if total and c >= q * total), None)
        out[f"p{int(q * 100)}_le_ms"] = le
    return out


def fence_records(data_dir: Path, from_offset: int = 0) -> list[dict[str, int]]:
    """FenceBrokerRecords at or after `from_offset` in a controller's log segments."""
    out = []
    for _base, path in segment_files(data_dir / METADATA_DIR_NAME):
        for b in iter_file_batches(path, allow_torn_tail=True):
            for i, r in enumerate(b.records):
                off = b.base_offset + i
                if off >= from_offset and isinstance(r, FenceBrokerRecord):
                    out.append({"offset": off, "broker_id": r.id, "epoch": r.epoch})
    return out


def wait_for(fn: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last})")


# ==================================================================== bench


class Bench:
    def __init__(self, opts: argparse.Namespace, tmp: Path) -> None:
        self.opts = opts
        self.tmp = tmp
        overrides = {
            "broker.heartbeat.interval.ms": str(opts.heartbeat_ms),
            "broker.session.timeout.ms": str(opts.session_ms),
        }
        self.cluster = LocalCluster(
            ClusterSpec(
                controllers=3,
                brokers=0,
                data_dir=tmp,
                controller_overrides=overrides,
                log_format="json",
            )
        )
        (self.status_port,) = free_ports(1)
        self.fleet_id = opts.first_id
        prof = ["-m", "cProfile", "-o", str(opts.profile_fleet)] if opts.profile_fleet else []
        args = [
            *prof,
            "-m", "broker_agent.cli", "fleet",
            "--count", str(opts.count),
            "--first-id", str(opts.first_id),
            "--controllers", ",".join(self.cluster.controller_urls),
            "--status-port", str(self.status_port),
            "--status-interval", "5",
            "--seed", str(opts.seed),
            "--log-format", "json",
        ]  # fmt: skip
        if opts.ramp_ms is not None:
            args += ["--ramp-ms", str(opts.ramp_ms)]
        for k, v in overrides.items():
            args += ["--override", f"{k}={v}"]
        # the fleet is one child process; LocalCluster starts and stops it by pid
        self.cluster.nodes[self.fleet_id] = Node(
            self.fleet_id, "broker", args, tmp / "logs" / "fleet.log"
        )
        self.out: dict[str, Any] = {
            "config": {
                "count": opts.count,
                "duration_s": opts.duration,
                "partitions": opts.partitions,
                "heartbeat_interval_ms": opts.heartbeat_ms,
                "session_timeout_ms": opts.session_ms,
                "controllers": 3,
                "cpus": os.cpu_count(),
            }
        }

    # ------------------------------------------------------------ views

    def fleet_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.status_port}{path}"

    def fleet_status(self) -> dict[str, Any]:
        return get_json(self.fleet_url("/status?agents=0"))

    def fleet_pid(self) -> int:
        pid = self.cluster.nodes[self.fleet_id].pid
        assert pid is not None
        return pid

    def controller_pids(self) -> dict[int, int]:
        return {n.node_id: n.pid for n in self.cluster.controllers if n.pid is not None}

    def active(self) -> int | None:
        q = self.cluster.leader()
        return None if q is None else int(q["node_id"])

    def brokers(self) -> list[dict[str, Any]]:
        return self.cluster.active_get("/v1/brokers", timeout=10)

    def all_running(self) -> bool:
        st = self.fleet_status()
        if st["counts"].get("RUNNING") != self.opts.count:
            return False
        regs = [b for b in self.brokers() if b["broker_id"] >= self.opts.first_id]
        return len(regs) == self.opts.count and not any(b["fenced"] for b in regs)

    # ------------------------------------------------------------ phases

    def start(self) -> None:
        t0 = time.monotonic()
        for n in self.cluster.controllers:
            self.cluster.start(n.node_id)
        self.cluster.wait_leader(30)
        self.out["controllers_elected_s"] = round(time.monotonic() - t0, 2)
        t1 = time.monotonic()
        self.cluster.start(self.fleet_id)
        timeout = self.opts.startup_timeout or max(60.0, self.opts.count * 0.05)
        wait_for(self.all_running, timeout, f"{self.opts.count} agents RUNNING and unfenced")
        self.out["startup_all_running_s"] = round(time.monotonic() - t1, 2)
        if self.opts.partitions:
            self.cluster.active_call(
                "POST",
                "/v1/topics",
                {"name": "bench", "partitions": self.opts.partitions, "replication_factor": 3},
                timeout=30,
            )

    def hold(self) -> None:
        opts = self.opts
        time.sleep(opts.settle)  # the topic's first ISR changes and leader moves
        active = self.active()
        assert active is not None, "no active controller"
        start_offset = int(self.cluster.quorum(active)["high_watermark"])
        start_hb = int(get_json(self.fleet_url("/heartbeats?since=0"))["heartbeats"])
        fleet_pid = self.fleet_pid()
        cpids = self.controller_pids()
        cpu0 = {"fleet": cpu_seconds(fleet_pid), **{c: cpu_seconds(p) for c, p in cpids.items()}}
        metrics0 = {n.node_id: scrape(n.url or "") for n in self.cluster.controllers}
        busy0, total0 = machine_busy()
        load0 = loadavg()
        t0 = time.monotonic()
        min_running = opts.count
        max_fenced = 0
        leaders: set[int] = {active}
        samples = 0
        sample_errors: list[str] = []
        while time.monotonic() - t0 < opts.duration:
            time.sleep(min(opts.sample_s, max(0.0, opts.duration - (time.monotonic() - t0))))
            try:
                st = self.fleet_status()
                min_running = min(min_running, st["counts"].get("RUNNING", 0))
                regs = self.brokers()
                max_fenced = max(max_fenced, sum(1 for b in regs if b["fenced"]))
                lead = self.active()
                if lead is not None:
                    leaders.add(lead)
                samples += 1
            except (OSError, KeyError, ValueError) as e:
                sample_errors.append(str(e)[:200])
        wall = time.monotonic() - t0
        busy1, total1 = machine_busy()
        cpu1 = {"fleet": cpu_seconds(fleet_pid), **{c: cpu_seconds(p) for c, p in cpids.items()}}
        hb = get_json(self.fleet_url(f"/heartbeats?since={start_hb}"))
        metrics1 = {n.node_id: scrape(n.url or "") for n in self.cluster.controllers}
        counters0 = {c: fence_counter(t) for c, t in metrics0.items()}
        counters1 = {c: fence_counter(t) for c, t in metrics1.items()}
        end_active = self.active()
        st = self.fleet_status()
        data_dir = self.tmp / f"controller-{end_active or active}"
        fences_hold = fence_records(data_dir, start_offset)
        fences_all = fence_records(data_dir, 0)

        def cpu(key: Any) -> dict[str, float | None]:
            a, b = cpu0.get(key), cpu1.get(key)
            if a is None or b is None:
                return {"cpu_s": None, "cpu_pct": None}
            return {"cpu_s": round(b - a, 2), "cpu_pct": round(100 * (b - a) / wall, 1)}

        controllers = {}
        for c, pid in cpids.items():
            controllers[str(c)] = {"active": c == active, **cpu(c), **memory_mib(pid)}
        self.out["hold"] = {
            "wall_s": round(wall, 1),
            "heartbeats": hb["count"],
            "heartbeats_per_s": round(hb["count"] / wall, 1),
            "heartbeat_latency_ms": {
                k: None if hb[k] is None else round(hb[k], 2)
                for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")
            },
            "latency_history_complete": hb["complete"],
            "fleet_errors_total": hb["errors"],
            "alter_partitions_total": hb["alter_partitions"],
            "spurious_fences": len(fences_hold),
            "fence_records_whole_run": len(fences_all),
            "fenced_brokers_examples": fences_hold[:10],
            "controller_fence_counters_delta": {
                str(c): None
                if counters0[c] is None or counters1[c] is None
                else counters1[c] - counters0[c]
                for c in counters0
            },
            "max_fenced_in_a_sample": max_fenced,
            "min_running_in_a_sample": min_running,
            "running_at_end": st["counts"].get("RUNNING", 0),
            "samples": samples,
            "sample_errors": sample_errors[:5],
            "active_controller": active,
            "active_event_queue_time": histogram_quantiles(
                histogram(metrics0[active], QUEUE_TIME), histogram(metrics1[active], QUEUE_TIME)
            ),
            "active_commit_latency": histogram_quantiles(
                histogram(metrics0[active], COMMIT_LATENCY),
                histogram(metrics1[active], COMMIT_LATENCY),
            ),
            "raft_leaders_seen": sorted(leaders | ({end_active} if end_active else set())),
            "fleet": {**cpu("fleet"), **memory_mib(fleet_pid)},
            "controllers": controllers,
            "machine": {
                "busy_pct_of_all_cpus": round(100 * (busy1 - busy0) / max(1, total1 - total0), 1),
                "loadavg_start": load0,
                "loadavg_end": loadavg(),
            },
            "last_status_line": self.last_status_line(),
        }

    def storm(self) -> dict[str, Any]:
        """Start every agent at once; poll until all are RUNNING and unfenced, killing
        the active controller `--kill-active-at` s in. Figures of this one run."""
        opts = self.opts
        for n in self.cluster.controllers:
            self.cluster.start(n.node_id)
        self.cluster.wait_leader(30)
        load0 = loadavg()
        busy0, total0 = machine_busy()
        cpids = self.controller_pids()
        cpu0 = {c: cpu_seconds(p) for c, p in cpids.items()}
        t0 = time.monotonic()
        self.cluster.start(self.fleet_id)
        fleet_pid = self.fleet_pid()
        out: dict[str, Any] = {"killed": None}
        counts: dict[str, int] = {}
        fleet_running_s: float | None = None
        done = False
        while time.monotonic() - t0 < opts.storm_timeout:
            elapsed = time.monotonic() - t0
            kill_due = opts.kill_active_at is not None and elapsed >= opts.kill_active_at
            if kill_due and out["killed"] is None and (active := self.active()) is not None:
                self.cluster.kill9(active)
                out["killed"] = {"controller": active, "at_s": round(elapsed, 2)}
            try:
                st = self.fleet_status()
                counts = {k: v for k, v in st["counts"].items() if v}
                if st["counts"].get("RUNNING") == opts.count:
                    fleet_running_s = fleet_running_s or round(time.monotonic() - t0, 2)
                    regs = [b for b in self.brokers() if b["broker_id"] >= opts.first_id]
                    if len(regs) == opts.count and not any(b["fenced"] for b in regs):
                        done = True
                        break
            except (OSError, ValueError, KeyError):
                pass  # the fleet's listener is not up yet, or no controller is active
            time.sleep(0.25)
        wall = round(time.monotonic() - t0, 2)
        cpu1 = {c: cpu_seconds(p) for c, p in cpids.items()}
        busy1, total1 = machine_busy()
        cpu = {"fleet": cpu_seconds(fleet_pid)}  # from its start
        for c, before in cpu0.items():
            after = cpu1[c]
            cpu[f"controller-{c}"] = None if before is None or after is None else after - before
        st = self.fleet_status()
        log_text = self.cluster.nodes[self.fleet_id].log_path.read_text(errors="replace")
        end_active = self.active()
        fences = (
            None if end_active is None else fence_records(self.tmp / f"controller-{end_active}")
        )
        out.update(
            all_running_s=wall if done else None,
            fleet_all_running_s=fleet_running_s,
            timed_out_after_s=None if done else wall,
            states_at_end={k: v for k, v in st["counts"].items() if v},
            states_last_sample=counts,
            failed_requests=dict(sorted(st.get("error_codes", {}).items())),
            task_exceptions=st.get("task_exceptions"),
            # every agent heartbeats throughout: any fence in the log is spurious
            fence_records=None if fences is None else len(fences),
            tracebacks_in_fleet_log=log_text.count("Traceback"),
            cpu_s={k: None if v is None else round(v, 1) for k, v in cpu.items()},
            machine_busy_pct=round(100 * (busy1 - busy0) / max(1, total1 - total0), 1),
            loadavg_start=load0,
            loadavg_end=loadavg(),
        )
        return out

    def last_status_line(self) -> str | None:
        node = self.cluster.nodes[self.fleet_id]
        try:  # stdout: the fleet's status lines
            lines = node.out_path.read_text(errors="replace").splitlines()
        except OSError:
            return None
        status = [ln for ln in lines if ln.startswith("fleet ")]
        return status[-1] if status else None

    def shutdown(self) -> None:
        t0 = time.monotonic()
        code = self.cluster.terminate(self.fleet_id, timeout=self.opts.shutdown_timeout)
        self.out["fleet_shutdown"] = {
            "exit_code": code,
            "seconds": round(time.monotonic() - t0, 2),
            "last_status_line": self.last_status_line(),
        }

    def close(self) -> None:
        # SIGTERM (SIGKILL after the bound) to exactly the processes started here
        codes = self.cluster.stop_all(timeout=30)
        self.out["controller_exit_codes"] = {k: v for k, v in codes.items() if "controller" in k}


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=2000, help="agents in the fleet (default 2000)")
    ap.add_argument("--duration", type=float, default=120.0, help="hold time in s (default 120)")
    ap.add_argument(
        "--partitions", type=int, default=200, help="partitions of the bench topic (RF 3; 0: none)"
    )
    ap.add_argument("--first-id", type=int, default=100)
    ap.add_argument("--heartbeat-ms", type=int, default=2000)
    ap.add_argument("--session-ms", type=int, default=9000)
    ap.add_argument("--seed", type=int, default=0, help="seed of the fleet's lag model")
    ap.add_argument("--settle", type=float, default=5.0, help="s between topic and hold")
    ap.add_argument("--sample-s", type=float, default=5.0, help="sampling period of the hold")
    ap.add_argument("--startup-timeout", type=float, default=None)
    ap.add_argument("--shutdown-timeout", type=float, default=120.0)
    ap.add_argument(
        "--profile-fleet", type=Path, default=None, metavar="FILE", help="cProfile the fleet"
    )
    ap.add_argument("--ramp-ms", type=int, default=None, help="the fleet's --ramp-ms")
    ap.add_argument("--storm", action="store_true", help="storm mode (see above)")
    ap.add_argument("--kill-active-at", type=float, default=None, metavar="S")
    ap.add_argument("--storm-timeout", type=float, default=180.0, metavar="S")
    ap.add_argument("--repeat", type=int, default=1, help="storm runs (fresh clusters)")
    ap.add_argument("--quick", action="store_true", help="200 agents, 20 s, 50 partitions")
    ap.add_argument("--keep", action="store_true", help="keep the data and log directory")
    opts = ap.parse_args()
    if opts.storm:
        return storm_main(opts)
    if opts.quick:
        opts.count, opts.duration, opts.partitions = 200, 20.0, 50
    if opts.count < 1 or opts.first_id <= 3:
        ap.error("--count must be >= 1 and --first-id > 3 (controllers are nodes 1..3)")
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    bench = Bench(opts, tmp)
    # SIGTERM to the bench: unwind through `finally` so every child is stopped
    signal.signal(signal.SIGTERM, _interrupted)
    code = 0
    try:
        bench.start()
        bench.hold()
        bench.shutdown()
    except (TimeoutError, OSError, AssertionError, RuntimeError, KeyboardInterrupt) as e:
        bench.out["error"] = f"{type(e).__name__}: {e}"
        code = 1
    finally:
        try:
            bench.close()
        finally:
            if opts.keep or code:
                bench.out["data_dir"] = str(tmp)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(bench.out, indent=2))
    return code


def storm_main(opts: argparse.Namespace) -> int:
    if "--count" not in sys.argv:
        opts.count = 10_000
    opts.ramp_ms = 0 if opts.ramp_ms is None else opts.ramp_ms
    opts.partitions = 0
    signal.signal(signal.SIGTERM, _interrupted)
    runs: list[dict[str, Any]] = []
    code = 0
    for i in range(opts.repeat):
        tmp = Path(tempfile.mkdtemp(prefix="fleet-storm-"))
        bench = Bench(opts, tmp)
        run: dict[str, Any] = {"run": i + 1}
        try:
            run.update(bench.storm())
        except (TimeoutError, OSError, AssertionError, RuntimeError, KeyboardInterrupt) as e:
            run["error"] = f"{type(e).__name__}: {e}"
        finally:
            # 10,000 controlled shutdowns are not what is measured: kill the fleet
            bench.cluster.kill9(bench.fleet_id)
            bench.close()
            if opts.keep or run.get("error") or run.get("all_running_s") is None:
                run["data_dir"] = str(tmp)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        runs.append(run)
        print(json.dumps(run), file=sys.stderr, flush=True)
        if run.get("error") or run.get("all_running_s") is None or run.get("task_exceptions"):
            code = 1
        if "KeyboardInterrupt" in run.get("error", ""):
            break
    times = [r["all_running_s"] for r in runs if r.get("all_running_s") is not None]
    out = {
        "config": {
            "count": opts.count,
            "ramp_ms": opts.ramp_ms,
            "kill_active_at_s": opts.kill_active_at,
            "heartbeat_interval_ms": opts.heartbeat_ms,
            "session_timeout_ms": opts.session_ms,
            "controllers": 3,
            "cpus": os.cpu_count(),
        },
        "runs": runs,
        "all_running_s_median": statistics.median(times) if len(times) == len(runs) else None,
        "all_running_s_each": [r.get("all_running_s") for r in runs],
        "task_exceptions_total": sum(r.get("task_exceptions") or 0 for r in runs),
        "tracebacks_total": sum(r.get("tracebacks_in_fleet_log") or 0 for r in runs),
    }
    print(json.dumps(out, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
