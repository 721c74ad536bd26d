"""`make demo`: the whole story on a real local cluster, then its history from Spark.

1. a quorum of 3 `kraft controller` processes and 4 `broker-agent` processes start
   on free loopback ports and a leader is elected;
2. two topics are created (replication factor 3);
3. a broker is killed (kill -9): it is fenced one session later and its
   leaderships move by BestLeader;
4. the active controller is killed: the quorum elects another one, nothing is
   fenced, and the killed controller rejoins as a follower;
5. the broker is restarted: a new incarnation and broker epoch, unfenced once
   caught up, back in the ISRs (AlterPartition), and within one
   `leader.imbalance.check.interval.seconds` (5 s here) the active controller
   gives it back the partitions it prefers to lead (automatic balancing);
6. `kraft reassign-partitions` moves the payments topic off one broker (KIP-455):
   the new replicas catch up, join the ISRs, and the old ones are dropped;
7. another broker does a controlled shutdown (SIGTERM) and exits 0;
8. an outage: two of the three running brokers are killed at once; the
   partitions whose other replica is the broker shut down in step 7 go offline
   (it is in none of their ISRs);
9. that broker comes back first: with unclean leader election off, the
   partitions stay offline until the killed brokers are restarted;
10. the cluster stops; 11. `spark-replay` rebuilds the history from a
   controller's log and the summary is printed with where report.html is; a
   one-line what-if replays the log with unclean leader election on
   (`spark_replay.whatif.demo`).

With `--secure` (`make demo SECURE=1`) the same story runs with TLS and
authentication on: `kraft certs` material in DATA_DIR/certs, every listener on
https, every controller and broker with its own credential, the demo itself
acting as `admin`; step 1 also shows a forged heartbeat refused.

Run: `python -m kraft.local.demo [--data-dir DIR] [--keep] [--secure]`. Each step prints what it
waits for and how long it took; a step that does not happen in time fails the
demo with a message naming it (exit 1).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kraft.local.cluster import ClusterSpec, LocalCluster, http_json, wait_for
from kraft.security.client_security import client_security

SESSION_MS = 6000
HEARTBEAT_MS = 1000
BALANCE_INTERVAL_S = 5  # leader.imbalance.check.interval.seconds (Kafka: 300)
OUTAGE_HOLD_S = 5  # step 9: how long the offline partitions wait with a replica back
Key = tuple[str, int]  # (topic, partition id)


def say(text: str = "") -> None:
    print(text, flush=True)


def step(n: int, title: str) -> float:
    say(f"\n== {n}. {title}")
    return time.monotonic()


def claim(holds: bool, what: str) -> None:
    """Every claim the demo prints is checked first: a false one fails the demo."""
    if not holds:
        raise RuntimeError(f"the story did not hold: {what}")


def took(t0: float) -> str:
    return f"{time.monotonic() - t0:.1f}s"


def leaders_of(cluster: LocalCluster, topic: str) -> list[dict[str, Any]]:
    return cluster.active_get(f"/v1/topics/{topic}")["partitions"]


def print_partitions(cluster: LocalCluster, topics: list[str]) -> None:
    for t in topics:
        for p in leaders_of(cluster, t):
            say(
                f"   {t}-{p['partition_id']}: leader {p['leader']:>2}  isr {p['isr']}  "
                f"replicas {p['replicas']}  leader_epoch {p['leader_epoch']}"
            )


def broker_state(cluster: LocalCluster, broker_id: int) -> dict[str, Any] | None:
    return cluster.brokers_view().get(broker_id)


def all_unfenced(cluster: LocalCluster, ids: list[int]) -> bool:
    view = cluster.brokers_view()
    return all(i in view and not view[i]["fenced"] for i in ids)


def show_security(cluster: LocalCluster, broker_ids: list[int]) -> None:
    """One forged request and one without a credential, refused by the active controller."""
    certs = cluster.spec.certs_dir
    assert certs is not None
    forger, victim = broker_ids[0], broker_ids[1]
    as_forger = client_security(str(certs / "ca.pem"), None, str(certs / f"broker-{forger}.token"))
    anonymous = client_security(str(certs / "ca.pem"), None, None)
    url = cluster.nodes[cluster.wait_leader()["node_id"]].url
    body = {"broker_id": victim, "broker_epoch": 0, "current_metadata_offset": 0}
    status, out = http_json("POST", f"{url}/v1/brokers/heartbeat", body, 5, as_forger)
    say(
        f"   forged: broker {forger}'s credential sends a heartbeat as broker {victim} -> "
        f"HTTP {status} {out.get('error_code')}: {out.get('message')}"
    )
    status, out = http_json("GET", f"{url}/v1/brokers", None, 5, anonymous)
    say(f"   no credential: GET /v1/brokers -> HTTP {status} {out.get('error_code')}")


def run_demo(data_dir: Path, keep: bool, secure: bool = False) -> int:
    if keep and any(data_dir.glob("controller-*/meta.properties")):
        # its log names voters on other ports and already has the story's topics
        print(
            f"demo: {data_dir} holds a previous run's cluster, and the story needs a new "
            "one: drop --keep to wipe it, or give another --data-dir",
            file=sys.stderr,
        )
        return 2
    if data_dir.exists() and not keep:
        shutil.rmtree(data_dir)
    spec = demo_spec(data_dir, secure)
    cluster = LocalCluster(spec)
    topics = ["orders", "payments"]
    broker_ids = [b.node_id for b in cluster.brokers]
    try:
        start_cluster(cluster, broker_ids, secure)
        create_topics(cluster, topics)
        victim, fencer = kill_a_broker(cluster, topics, broker_ids)
        fenced_by_killed = fail_over_the_controller(cluster, victim, fencer)
        restart_the_broker(cluster, victim)
        preferred_leaders_return(cluster, topics, victim)
        reassign_payments(cluster, broker_ids, spec.certs_dir)
        leaver = shut_down_a_broker(cluster, topics, [b for b in broker_ids if b != victim])
        show_metrics_and_quorum(cluster, fencer, fenced_by_killed)
        down, offline = an_outage(cluster, topics, broker_ids, leaver)
        recover(cluster, topics, leaver, down, offline)
    finally:
        t0 = step(10, "stop the cluster")
        codes = cluster.stop_all()
        say("   " + ", ".join(f"{k}={v}" for k, v in sorted(codes.items())) + f" ({took(t0)})")
    return replay_history(data_dir)


def demo_spec(data_dir: Path, secure: bool) -> ClusterSpec:
    """3 controllers and 4 lagging broker agents with short sessions and a 5 s
    balancer, so that every step happens within seconds."""
    return ClusterSpec(
        controllers=3,
        brokers=4,
        data_dir=data_dir,
        broker_overrides={
            "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
            "broker.session.timeout.ms": str(SESSION_MS),
        },
        controller_overrides={
            "broker.session.timeout.ms": str(SESSION_MS),
            "leader.imbalance.check.interval.seconds": str(BALANCE_INTERVAL_S),
        },
        broker_args=["--simulate-lag"],
        certs_dir=(data_dir / "certs").resolve() if secure else None,
    )


def start_cluster(cluster: LocalCluster, broker_ids: list[int], secure: bool) -> None:
    """Step 1: every process up, a leader elected, every broker unfenced."""
    t0 = step(1, "start 3 controllers and 4 broker agents")
    if secure:
        say(
            f"   secure: TLS (https) and authentication on; CA, certificates and tokens "
            f"in {cluster.spec.certs_dir} (kraft certs); the demo acts as principal 'admin'"
        )
    cluster.start_all()
    for n in cluster.controllers:
        say(f"   controller {n.node_id}  {n.url}  pid {n.pid}")
    q = cluster.wait_leader(20)
    say(f"   controller {q['node_id']} leads epoch {q['leader_epoch']} ({took(t0)})")
    wait_for(lambda: all_unfenced(cluster, broker_ids), 30, "every broker unfenced")
    say(f"   brokers {broker_ids} registered and unfenced ({took(t0)})")
    if secure:
        show_security(cluster, broker_ids)


def create_topics(cluster: LocalCluster, topics: list[str]) -> None:
    """Step 2: orders and payments, replication factor 3."""
    step(2, "create topics orders (6 partitions) and payments (3), replication factor 3")
    cluster.active_call(
        "POST", "/v1/topics", {"name": "orders", "partitions": 6, "replication_factor": 3}
    )
    cluster.active_call(
        "POST", "/v1/topics", {"name": "payments", "partitions": 3, "replication_factor": 3}
    )
    print_partitions(cluster, topics)


def most_leaderships(cluster: LocalCluster, topics: list[str], brokers: list[int]) -> int:
    """The broker of `brokers` that leads the most partitions of `topics`."""
    return max(
        brokers,
        key=lambda b: sum(p["leader"] == b for t in topics for p in leaders_of(cluster, t)),
    )


def kill_a_broker(
    cluster: LocalCluster, topics: list[str], broker_ids: list[int]
) -> tuple[int, int | None]:
    """Step 3: kill -9 the broker leading the most partitions; it is fenced one
    session later and leads nothing. Returns it and the controller that wrote the
    fence (None if leadership changed meanwhile)."""
    victim = most_leaderships(cluster, topics, broker_ids)
    t0 = step(3, f"kill -9 broker {victim} (it leads the most partitions)")
    before_fence = cluster.wait_leader()
    cluster.kill9(victim)
    wait_for(
        lambda: (broker_state(cluster, victim) or {}).get("fenced"),
        SESSION_MS / 1000 + 10,
        f"broker {victim} fenced",
    )
    say(f"   broker {victim} fenced after {took(t0)} (session timeout {SESSION_MS} ms)")
    leading = [p for t in topics for p in leaders_of(cluster, t) if p["leader"] == victim]
    claim(not leading, f"partitions still led by the fenced broker {victim}: {leading}")
    say(f"   partitions still led by {victim}: {len(leading)}")
    after_fence = cluster.wait_leader()
    # the fence's writer is known if one leader held the same epoch throughout
    same = (before_fence["node_id"], before_fence["leader_epoch"]) == (
        after_fence["node_id"],
        after_fence["leader_epoch"],
    )
    print_partitions(cluster, topics)
    return victim, before_fence["node_id"] if same else None


def fail_over_the_controller(cluster: LocalCluster, victim: int, fencer: int | None) -> bool:
    """Step 4: kill -9 the active controller; another is elected, nothing more is
    fenced, and the killed one rejoins as a follower. True if it wrote step 3's fence."""
    active = cluster.wait_leader()
    fenced_by_killed = active["node_id"] == fencer
    t0 = step(4, f"kill -9 the active controller {active['node_id']}")
    cluster.kill9(active["node_id"])
    q = wait_for(
        lambda: (lambda x: x if x and x["node_id"] != active["node_id"] else None)(
            cluster.leader()
        ),
        20,
        "a new active controller",
    )
    say(f"   controller {q['node_id']} leads epoch {q['leader_epoch']} ({took(t0)})")
    cluster.start(active["node_id"])
    wait_for(
        lambda: (cluster.quorum(active["node_id"]) or {}).get("state") == "follower",
        20,
        f"controller {active['node_id']} rejoining as a follower",
    )
    say(f"   controller {active['node_id']} restarted and follows ({took(t0)})")
    fenced = [b for b, v in cluster.brokers_view().items() if v["fenced"]]
    claim(fenced == [victim], f"fenced after the failover: {fenced}, expected only {victim}")
    say(f"   fenced brokers after the failover: {fenced} (only the killed one)")
    return fenced_by_killed


def start_unfenced(cluster: LocalCluster, broker_id: int) -> None:
    """Start a stopped broker and wait until the controller unfences it."""
    cluster.start(broker_id)
    wait_for(
        lambda: (lambda b: b and not b["fenced"])(broker_state(cluster, broker_id)),
        30,
        f"broker {broker_id} unfenced",
    )


def restart_the_broker(cluster: LocalCluster, victim: int) -> None:
    """Step 5's start: the killed broker comes back with a new broker epoch and
    incarnation and is unfenced."""
    before = broker_state(cluster, victim) or {}
    t0 = step(5, f"restart broker {victim}")
    start_unfenced(cluster, victim)
    after = broker_state(cluster, victim) or {}
    claim(
        after.get("broker_epoch", -1) > before.get("broker_epoch", -1)
        and after.get("incarnation_id") != before.get("incarnation_id"),
        f"broker {victim} restarted without a new broker epoch and incarnation: "
        f"{before} -> {after}",
    )
    say(
        f"   broker {victim} unfenced ({took(t0)}): epoch {before.get('broker_epoch')} -> "
        f"{after.get('broker_epoch')}, incarnation {after.get('incarnation_id')}"
    )


def shut_down_a_broker(cluster: LocalCluster, topics: list[str], leavers: list[int]) -> int:
    """Step 7: SIGTERM to the broker of `leavers` leading the most partitions: a
    controlled shutdown that moves its leaderships away, then exit 0. Returns it."""
    leaver = most_leaderships(cluster, topics, leavers)
    t0 = step(7, f"controlled shutdown of broker {leaver} (SIGTERM)")
    code = cluster.terminate(leaver, timeout=40)
    claim(code == 0, f"broker {leaver} exited with code {code} after its controlled shutdown")
    still = [p for t in topics for p in leaders_of(cluster, t) if p["leader"] == leaver]
    say(
        f"   broker {leaver} exited with code {code} ({took(t0)}); partitions it leads: {len(still)}"
    )
    print_partitions(cluster, topics)
    return leaver


def _offline(cluster: LocalCluster, keys: list[Key]) -> list[Key]:
    now = {(t, p["partition_id"]): p for t in {k[0] for k in keys} for p in leaders_of(cluster, t)}
    return [k for k in keys if now[k]["leader"] < 0]


def an_outage(
    cluster: LocalCluster, topics: list[str], broker_ids: list[int], leaver: int
) -> tuple[list[int], list[Key]]:
    """Step 8: two of the three running brokers are killed at once (a rack lost).
    They are chosen so that some partitions have no replica left but `leaver`,
    shut down in step 7 and so in none of their ISRs: those go offline, and so
    does any whose one live replica is out of its ISR and ELR (the brokers'
    simulated lag). Returns the two and every partition offline then."""
    live = [b for b in broker_ids if b != leaver]
    parts = {(t, p["partition_id"]): p for t in topics for p in leaders_of(cluster, t)}

    def stranded_without(spared: int) -> list[Key]:
        return sorted(k for k, p in parts.items() if spared not in p["replicas"])

    spared = max(live, key=lambda b: len(stranded_without(b)))
    down = [b for b in live if b != spared]
    stranded = stranded_without(spared)
    claim(bool(stranded), f"no partition without a replica on broker {spared}")
    t0 = step(8, f"an outage: kill -9 brokers {down[0]} and {down[1]} at once")
    for b in down:
        cluster.kill9(b)
    wait_for(
        lambda: all((broker_state(cluster, b) or {}).get("fenced") for b in down),
        2 * SESSION_MS / 1000 + 15,
        f"brokers {down} fenced",
    )
    say(f"   brokers {down} fenced after {took(t0)}, one at a time (oldest contact first)")
    offline = _offline(cluster, sorted(parts))
    claim(set(stranded) <= set(offline), f"offline: {offline}, expected {stranded} among them")
    say(f"   offline: {len(offline)} of {len(parts)} partitions")
    say(
        f"   {_names(stranded)}: every replica is on {down} or on broker {leaver} "
        f"(shut down in step 7, so in none of their ISRs)"
    )
    lagging = [k for k in offline if k not in stranded]
    if lagging:
        say(
            f"   {_names(lagging)}: broker {spared} holds a replica but is in neither "
            f"their ISR nor their ELR (the brokers' simulated lag)"
        )
    print_partitions(cluster, topics)
    return down, offline


def _names(keys: list[Key]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in keys)


def recover(
    cluster: LocalCluster, topics: list[str], leaver: int, down: list[int], offline: list[Key]
) -> None:
    """Step 9: `leaver` comes back first. It is a replica of some offline
    partitions but in none of their ISRs: with unclean leader election off
    (Kafka's default) they all stay offline until a broker of their last ISR
    returns. Then the two killed brokers are restarted and lead them again."""
    t0 = step(9, f"broker {leaver} comes back, then brokers {down[0]} and {down[1]}")
    start_unfenced(cluster, leaver)
    say(f"   broker {leaver} unfenced ({took(t0)})")
    time.sleep(OUTAGE_HOLD_S)  # the window unclean election would have closed
    still = _offline(cluster, offline)
    claim(still == offline, f"offline with broker {leaver} back: {still}, expected {offline}")
    say(
        f"   {OUTAGE_HOLD_S} s later still offline: {len(still)} partitions (no live replica "
        f"is in their ISR or ELR, and unclean.leader.election.enable is false)"
    )
    t1 = time.monotonic()
    for b in down:
        cluster.start(b)
    every = [(t, p["partition_id"]) for t in topics for p in leaders_of(cluster, t)]
    wait_for(lambda: not _offline(cluster, every), 60, "every partition online again")
    say(f"   brokers {down} restarted; every partition online again ({took(t1)})")
    print_partitions(cluster, topics)


def show_metrics_and_quorum(
    cluster: LocalCluster, fencer: int | None, fenced_by_killed: bool
) -> None:
    """Step 7's end: the active controller's metrics, `kraft quorum describe`, and
    the web console's address."""
    q = cluster.wait_leader()
    url = cluster.nodes[q["node_id"]].url

    say(f"\n   curl {url}/metrics  (the active controller; Kafka's metric names):")
    for line in _get_text(f"{url}/metrics", cluster).splitlines():
        if _shown_metric(line):
            say(f"     {line}")
    written_by = (
        "the controller killed in step 4"
        if fenced_by_killed
        else "the controller active then"
        if fencer is None
        else f"controller {fencer}, active then"
    )
    say(
        "   (counters such as brokerfences_total count what this controller process "
        f"wrote since it started: the fence of step 3 was written by {written_by})"
    )
    say("\n   kraft quorum describe --replication:")
    describe = [
        sys.executable, "-m", "kraft.cli", "quorum", "describe",
        "--bootstrap", url, "--replication",
    ]  # fmt: skip
    certs_dir = cluster.spec.certs_dir
    if certs_dir is not None:
        describe += ["--command-config", str(certs_dir / "admin.properties")]
    subprocess.run(describe, check=False, timeout=30)
    say(f"\n   web console (live, while the cluster runs): {url}/ui")


def replay_history(data_dir: Path) -> int:
    """Step 11: spark-replay over controller 1's log, its summary, and the what-if line."""
    t0 = step(11, "spark-replay rebuilds the history from controller 1's log")
    out = data_dir / "replay"
    cmd = [
        sys.executable, "-m", "spark_replay.cli",
        "--log-dir", str(data_dir / "controller-1"),
        "--out", str(out),
        "--master", "local[2]",
    ]  # fmt: skip
    say("   $ spark-replay --log-dir " + " ".join(cmd[4:]))
    # Spark's JVM warnings and progress bars go to stderr: shown only on a failure.
    proc = subprocess.run(cmd, check=False, timeout=600, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        say(proc.stderr[-4000:])
        say(f"spark-replay failed with exit code {proc.returncode}")
        return 1
    summary = json.loads((out / "summary.json").read_text())
    say(f"   done in {took(t0)}; history summary:")
    say(json.dumps(summary, indent=2, sort_keys=True))
    say(f"\n   report: {(out / 'report.html').resolve()}")
    say(f"   tables: {out.resolve()}/<table> (Parquet); logs: {data_dir.resolve()}/logs")
    from spark_replay.whatif.demo import what_if_line  # issue 20: docs/what-if.md

    say("   " + what_if_line(data_dir / "controller-1", out, SESSION_MS))
    return 0


def preferred_leaders_return(cluster: LocalCluster, topics: list[str], broker: int) -> None:
    """Step 5's end: `broker` back in the ISRs, then the active controller's balancer
    makes it the leader of every partition it is the preferred (first) replica of."""
    preferred = [
        (t, p["partition_id"]) for t in topics for p in leaders_of(cluster, t)
        if p["replicas"][0] == broker
    ]  # fmt: skip
    led = {(t, p["partition_id"]) for t in topics for p in leaders_of(cluster, t)
           if p["leader"] == broker}  # fmt: skip
    say(f"   broker {broker} is the preferred leader of {len(preferred)} partitions; "
        f"it leads {len(led)} of them now")  # fmt: skip
    t0 = time.monotonic()

    def back() -> bool:
        now = {(t, p["partition_id"]): p for t in topics for p in leaders_of(cluster, t)}
        return all(now[k]["leader"] == broker for k in preferred)

    # the lag model may hold it out of an ISR for a while: bounded by its longest window
    wait_for(back, 3 * BALANCE_INTERVAL_S + 30, f"broker {broker} leading its preferred partitions")
    now = {(t, p["partition_id"]): p for t in topics for p in leaders_of(cluster, t)}
    back_now = [k for k in preferred if now[k]["leader"] == broker]
    claim(len(back_now) == len(preferred), f"preferred leaderships of {broker} not back")
    say(f"   it leads all {len(back_now)} again after {took(t0)}, with no admin election "
        f"(auto.leader.rebalance.enable, checked every {BALANCE_INTERVAL_S} s)")  # fmt: skip
    print_partitions(cluster, topics)


def reassign_payments(cluster: LocalCluster, broker_ids: list[int], certs: Path | None) -> None:
    """Step 6: `kraft reassign-partitions --execute`, then `--verify` until done."""
    parts = leaders_of(cluster, "payments")
    moving = max(broker_ids, key=lambda b: sum(b in p["replicas"] for p in parts))
    t0 = step(6, f"move topic payments off broker {moving} (kraft reassign-partitions)")
    plan = {"version": 1, "partitions": []}
    for p in parts:
        spare = next(b for b in broker_ids if b not in p["replicas"])
        target = [spare if r == moving else r for r in p["replicas"]]
        plan["partitions"].append(
            {"topic": "payments", "partition": p["partition_id"], "replicas": target}
        )
    path = cluster.spec.data_dir / "payments-plan.json"
    path.write_text(json.dumps(plan))
    url = cluster.nodes[cluster.wait_leader()["node_id"]].url
    base = [sys.executable, "-m", "kraft.cli", "reassign-partitions", "--bootstrap", url,
            "--reassignment-json-file", str(path)]  # fmt: skip
    if certs is not None:
        base += ["--command-config", str(certs / "admin.properties")]
    say(f"   $ kraft reassign-partitions --execute --reassignment-json-file {path.name}")
    res = subprocess.run([*base, "--execute"], capture_output=True, text=True, timeout=60)
    claim(res.returncode == 0, f"--execute failed: {res.stdout}{res.stderr}")
    say("     " + res.stdout.strip().splitlines()[-1])
    for p in leaders_of(cluster, "payments"):
        if p["adding_replicas"]:
            say(f"   payments-{p['partition_id']}: replicas {p['replicas']} adding "
                f"{p['adding_replicas']} removing {p['removing_replicas']}")  # fmt: skip

    def verified() -> str | None:
        r = subprocess.run([*base, "--verify"], capture_output=True, text=True, timeout=60)
        return r.stdout if r.returncode == 0 else None

    out = wait_for(verified, 60, "every payments reassignment complete")
    say("   $ kraft reassign-partitions --verify ...")
    for line in out.strip().splitlines():
        say(f"     {line}")
    after = leaders_of(cluster, "payments")
    claim(
        all(moving not in p["replicas"] and p["leader"] != moving for p in after),
        f"broker {moving} still holds payments replicas: {after}",
    )
    say(f"   no payments replica on broker {moving} any more ({took(t0)})")
    print_partitions(cluster, ["payments"])


def _shown_metric(line: str) -> bool:
    """The metrics the demo prints: gauges, counters and histogram counts/sums."""
    if line.startswith("#") or not line.startswith(("kafka_controller", "kafka_server")):
        return False
    name = line.split("{")[0].split(" ")[0]
    return not name.endswith(("_bucket", "_created"))


def _get_text(url: str, cluster: LocalCluster) -> str:
    import urllib.request

    from kraft.security.client_security import urllib_kwargs

    sec = cluster.security
    req = urllib.request.Request(url, headers=sec.headers)
    with urllib.request.urlopen(req, timeout=5, **urllib_kwargs(sec)) as resp:
        return resp.read().decode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kraft-demo", description=__doc__)
    parser.add_argument("--data-dir", default="demo-data", help="default: ./demo-data")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="do not wipe DATA_DIR first (its other files stay; it must not hold a "
        "previous run's cluster)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="TLS and authentication on (certificates generated into DATA_DIR/certs)",
    )
    args = parser.parse_args(argv)

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through run_demo's finally: the cluster stops

    signal.signal(signal.SIGTERM, on_sigterm)
    # Ctrl-C raises KeyboardInterrupt even where a shell started us with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_demo(Path(args.data_dir), args.keep, args.secure)
    except (TimeoutError, OSError, RuntimeError) as e:
        print(f"demo failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("demo interrupted; the cluster was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
