"""The connection-flood scenario (issue 25 item 5), shared by
tests/integration/test_connection_flood.py (60 s plaintext, 20 s TLS, asserts) and
`benchmarks/security_bench.py --flood` (5 minutes, reports).

3 real `kraft controller` processes and 3 broker agents (heartbeating every 250 ms)
on 127.0.0.1. benchmarks/connection_flood.py holds 5,000 connections against the
active controller from 127.0.0.2-127.0.0.9, each with half a request head (TLS:
half a ClientHello), re-opened as soon as it is closed. While it lasts the
scenario measures: the listener full and turning half-open slots over (its
/metrics), `kraft topics create` (the CLI), an admin request from 127.0.0.10 (a
host that is no voter's, so it has no voter's privilege), a follower controller
killed with SIGKILL and restarted rejoining and catching up, a new broker agent
registering and being unfenced; at the end: fences, the leader epoch, and each
honest broker's heartbeat latency over the flood.

File descriptors: `raise_open_files` raises this process's soft RLIMIT_NOFILE to
the hard limit before anything starts, so the controllers inherit it; each
controller also raises its own to what its connection limits need
(kraft.server.limits.raise_open_files_limit), and the flood process its own.
"""

from __future__ import annotations

import http.client
import json
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kraft.local.cluster import ClusterSpec, LocalCluster, free_ports, wait_for
from kraft.security.client_security import NONE, ClientSecurity, from_command_config, urllib_kwargs

REPO = Path(__file__).resolve().parents[2]
FLOOD_SOURCES = "127.0.0.2-127.0.0.9"
OUTSIDER = "127.0.0.10"  # an admin host that is no voter's
HEARTBEAT_MS = 250
BROKERS = (4, 5, 6)
NEW_BROKER = 7
CONNECTION_COUNT = "kafka_server_socket_server_metrics_connection_count"


def raise_open_files(needed: int) -> int:
    """Soft RLIMIT_NOFILE to the hard limit; returns it (the caller checks `needed`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(needed, 65536)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def metrics(url: str, security: ClientSecurity) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5, **urllib_kwargs(security)) as r:
        text = r.read().decode()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)
    }


def outsider_request(url: str, security: ClientSecurity) -> tuple[int, float]:
    """GET /v1/topics from 127.0.0.10: (status, seconds)."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    t0 = time.monotonic()
    conn: http.client.HTTPConnection
    if security.ssl_context is not None:
        conn = http.client.HTTPSConnection(
            host, int(port), timeout=5, source_address=(OUTSIDER, 0), context=security.ssl_context
        )
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=5, source_address=(OUTSIDER, 0))
    try:
        conn.request("GET", "/v1/topics", headers=security.headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0
    finally:
        conn.close()


def _agent(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
        return json.loads(r.read())


def _timed(fn: Any, timeout: float, what: str) -> float | None:
    """Seconds until fn() holds, or None if it did not within `timeout`."""
    t0 = time.monotonic()
    try:
        wait_for(fn, timeout, what)
    except TimeoutError:
        return None
    return round(time.monotonic() - t0, 3)


def run_flood_scenario(
    tmp: Path, *, secure: bool, seconds: float, connections: int = 5000
) -> dict[str, Any]:
    """Run it; every step's outcome is in the result (nothing is asserted here)."""
    certs = tmp / "certs" if secure else None
    spec = ClusterSpec(
        controllers=3,
        brokers=len(BROKERS),
        data_dir=tmp / "cluster",
        certs_dir=certs,
        broker_overrides={"broker.heartbeat.interval.ms": str(HEARTBEAT_MS)},
    )
    cluster = LocalCluster(spec)
    security = from_command_config(str(certs / "admin.properties")) if certs else NONE
    status_ports = dict(zip(BROKERS, free_ports(len(BROKERS)), strict=True))
    for b, port in status_ports.items():
        cluster.nodes[b].args += ["--status-port", str(port)]
    out: dict[str, Any] = {"secure": secure, "seconds": seconds, "connections": connections}
    flood: subprocess.Popen[bytes] | None = None
    flood_out = tmp / "flood.json"

    def unfenced(ids: tuple[int, ...]) -> bool:
        view = cluster.brokers_view()
        return all(b in view and not view[b]["fenced"] for b in ids)

    try:
        cluster.start_all()
        wait_for(lambda: unfenced(BROKERS), 60, "brokers 4-6 registered and unfenced")
        leader = cluster.wait_leader()
        active = leader["node_id"]
        lead_url = cluster.controller_urls[active - 1]
        before = metrics(lead_url, security)
        heartbeats_before = {
            b: _agent(p, "/heartbeats")["heartbeats"] for b, p in status_ports.items()
        }

        flood = subprocess.Popen(
            [sys.executable, "benchmarks/connection_flood.py",
             "--target", lead_url.split("://", 1)[1],
             "--connections", str(connections), "--sources", FLOOD_SOURCES,
             "--seconds", str(seconds), *(["--tls"] if secure else [])],
            cwd=REPO, stdout=flood_out.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        started = time.monotonic()
        peak = [0.0]

        def flooded() -> bool:
            m = metrics(lead_url, security)
            peak[0] = max(peak[0], m[CONNECTION_COUNT])
            turned = sum(
                v for k, v in m.items() if k.startswith("kraft_server_connections_evicted")
            )
            return m[CONNECTION_COUNT] >= 900 and turned > 0

        out["listener_full_s"] = _timed(flooded, 30, "the flood to fill the listener")

        # an operator: `kraft topics create`
        boot = ",".join(cluster.controller_urls)
        extra = ["--command-config", str(certs / "admin.properties")] if certs else []
        t0 = time.monotonic()
        created = subprocess.run(
            [sys.executable, "-m", "kraft.cli", "topics", "create", "--topic", "under-flood",
             "--partitions", "3", "--replication-factor", "2", "--bootstrap", boot, *extra],
            capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        )  # fmt: skip
        out["topics_create"] = {
            "returncode": created.returncode,
            "s": round(time.monotonic() - t0, 3),
            "stderr": created.stderr[-500:],
        }
        # an admin on a host that is no voter's: no exemption, the eviction path
        try:
            status, took = outsider_request(lead_url, security)
            out["outsider_request"] = {"status": status, "s": round(took, 3)}
        except OSError as e:
            out["outsider_request"] = {"status": None, "error": repr(e)}

        # a follower controller killed and restarted rejoins and catches up
        follower = next(i for i in (1, 2, 3) if i != active)
        cluster.kill9(follower)
        cluster.start(follower)
        target = cluster.quorum(active)["high_watermark"]  # type: ignore[index]

        def caught_up() -> bool:
            q = cluster.quorum(follower)
            return bool(q and q["leader_id"] == active and q["log_end_offset"] >= target)

        out["follower_caught_up_s"] = _timed(caught_up, 60, f"controller {follower} caught up")

        # a new broker agent registers and is unfenced
        cluster.add_broker(NEW_BROKER)
        cluster.start(NEW_BROKER)
        out["new_broker_unfenced_s"] = _timed(
            lambda: unfenced((NEW_BROKER,)), 30, f"broker {NEW_BROKER} unfenced"
        )

        # hold the flood for its whole time, watching the listener
        while time.monotonic() - started < seconds - 1:
            peak[0] = max(peak[0], metrics(lead_url, security)[CONNECTION_COUNT])
            time.sleep(1)
        after = metrics(lead_url, security)
        out["flood_exit"] = flood.wait(60)
        lines = flood_out.read_text().splitlines()
        out["flood"] = json.loads(lines[-1]) if lines else None
        flood = None

        out["leader_epoch_changed"] = (
            cluster.wait_leader()["leader_epoch"] != leader["leader_epoch"]
        )
        fences = "kafka_controller_controllerstats_brokerfences_total"
        out["fences"] = after.get(fences, 0.0) - before.get(fences, 0.0)
        out["all_unfenced"] = unfenced((*BROKERS, NEW_BROKER))
        out["heartbeats"] = {
            b: _agent(port, f"/heartbeats?since={heartbeats_before[b]}")
            for b, port in status_ports.items()
        }
        out["p99_ms"] = max(hb["p99_ms"] or 0.0 for hb in out["heartbeats"].values())
        out["peak_connections"] = peak[0]
        out["refused"] = {k: v for k, v in after.items() if "connections_refused" in k}
        out["evicted"] = {k: v for k, v in after.items() if "connections_evicted" in k}
    finally:
        if flood is not None and flood.poll() is None:
            flood.send_signal(signal.SIGKILL)
            flood.wait(10)
        out["exit_codes"] = cluster.stop_all()
    out["tracebacks"] = [n.name for n, log in cluster.iter_logs() if "Traceback" in log.read_text()]
    return out
