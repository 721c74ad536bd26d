"""3 `kraft controller` + 5 `broker-agent` processes on 127.0.0.1 (issue 5's acceptance).

One cluster for the module; the tests run in file order and each leaves the
cluster in the state the next expects:

1. all five agents RUNNING and unfenced within 10 s;
2. kill -9 of a broker: fenced within the session timeout + 2 s, and the
   partitions it led get the leader BestLeader picks;
3. that broker restarted: a new incarnation and broker epoch, unfenced after
   catching up (and back in the ISRs through AlterPartition);
4. SIGTERM to another broker: controlled shutdown, its leaderships have moved
   when it exits, exit code 0;
5. kill -9 of the active controller: no broker is fenced, all stay RUNNING;
6. each broker's image equals the controllers' log replayed to the same offset;
7. `broker-agent fleet`: 12 agents in one process all RUNNING, a status line
   (count per state, heartbeat p99, errors), the lag model shrinking ISRs through
   AlterPartition, SIGTERM a controlled shutdown of every agent, exit 0;
8. a broker that starts after the controllers trimmed their logs (snapshots every
   few KiB, no retention) loads a snapshot (FetchSnapshot) and catches up.

Every process is started here and killed by pid (tests/integration/procs.py).
Agents run with `--status-port` so the test can read their state and image.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metadata_log.errors import MetadataLogError
from metadata_log.replay import replay_log
from tests.integration.procs import Proc, ProcGroup, free_ports, http, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.story]

CONTROLLERS = (1, 2, 3)
BROKERS = (4, 5, 6, 7, 8)
HEARTBEAT_MS = 1000
SESSION_MS = 6000
TOPIC = "orders"
LATE_BROKER = 9
FLEET_FIRST, FLEET_COUNT = 20, 12  # broker-agent fleet: brokers 20..31 in one process
OVERRIDES = {
    "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "broker.session.timeout.ms": str(SESSION_MS),
}
# Controllers snapshot often and keep no log below their snapshot, so that a late
# observer must load a snapshot (keys a broker does not use are logged as unused).
CONTROLLER_OVERRIDES = {
    **OVERRIDES,
    "metadata.log.max.record.bytes.between.snapshots": "4096",
    "metadata.log.segment.bytes": "4096",
    "metadata.max.retention.bytes": "0",
}


@dataclass
class Cluster:
    tmp: Path
    group: ProcGroup
    controller_ports: dict[int, int]
    status_ports: dict[int, int]
    voters: str
    controllers: dict[int, Proc]
    brokers: dict[int, Proc]
    state: dict[str, Any]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.controller_ports[c]}" for c in CONTROLLERS]

    def start_controller(self, node_id: int) -> Proc:
        args = [
            "-m", "kraft.cli", "controller",
            "--node-id", str(node_id),
            "--voters", self.voters,
            "--data-dir", str(self.tmp / f"controller-{node_id}"),
        ]  # fmt: skip
        for k, v in CONTROLLER_OVERRIDES.items():
            args += ["--override", f"{k}={v}"]
        starts = sum(1 for p in self.group.procs if p.name == f"controller-{node_id}")
        proc = Proc(
            f"controller-{node_id}", args, self.tmp / "logs" / f"controller-{node_id}.{starts}.log"
        )
        self.controllers[node_id] = self.group.start(proc)
        return proc

    def start_broker(self, broker_id: int) -> Proc:
        args = [
            "-m", "broker_agent.cli",
            "--broker-id", str(broker_id),
            "--controllers", ",".join(self.urls),
            "--status-port", str(self.status_ports[broker_id]),
            "--status-interval", "2",
            "--log-format", "json",
        ]  # fmt: skip
        for k, v in OVERRIDES.items():
            args += ["--override", f"{k}={v}"]
        starts = sum(1 for p in self.group.procs if p.name == f"broker-{broker_id}")
        proc = Proc(
            f"broker-{broker_id}", args, self.tmp / "logs" / f"broker-{broker_id}.{starts}.log"
        )
        self.brokers[broker_id] = self.group.start(proc)
        return proc

    # ------------------------------------------------------------ observation

    def quorum(self, node_id: int) -> dict[str, Any] | None:
        if not self.controllers[node_id].alive():
            return None
        try:
            status, body = http("GET", f"{self.urls[node_id - 1]}/v1/quorum", timeout=2)
        except OSError:
            return None
        return body if status == 200 else None

    def active(self) -> int | None:
        """The controller that says it leads, once another agrees."""
        views = {c: self.quorum(c) for c in CONTROLLERS}
        leaders = [c for c, v in views.items() if v and v.get("state") == "leader"]
        if len(leaders) != 1:
            return None
        lead = leaders[0]
        epoch = views[lead]["leader_epoch"]
        agree = [
            c
            for c, v in views.items()
            if c != lead and v and v.get("leader_id") == lead and v.get("leader_epoch") == epoch
        ]
        return lead if agree else None

    def get(self, path: str) -> Any:
        """GET from the active controller. Retried (bounded) while leadership settles:
        a new Raft leader answers NOT_CONTROLLER until it has replayed the log."""

        def once() -> Any:
            lead = self.active()
            assert lead is not None, "no active controller"
            status, body = http("GET", f"{self.urls[lead - 1]}{path}", timeout=3)
            assert status == 200, (path, status, body)
            return (body,)  # truthy even for an empty body

        return wait_until(once, 5, interval=0.1, what=f"GET {path} from the active controller")[0]

    def post(self, path: str, body: Any) -> Any:
        lead = self.active()
        assert lead is not None, "no active controller"
        status, reply = http("POST", f"{self.urls[lead - 1]}{path}", body, timeout=10)
        assert status in (200, 201), (path, status, reply)
        return reply

    def registrations(self) -> dict[int, dict[str, Any]]:
        return {b["broker_id"]: b for b in self.get("/v1/brokers")}

    def partitions(self) -> list[dict[str, Any]]:
        return self.get(f"/v1/topics/{TOPIC}")["partitions"]

    def agent(self, broker_id: int, path: str = "/status") -> Any:
        status, body = http(
            "GET", f"http://127.0.0.1:{self.status_ports[broker_id]}{path}", timeout=2
        )
        assert status == 200
        return body

    def agent_state(self, broker_id: int) -> dict[str, Any]:
        return self.agent(broker_id)["agents"][0]

    def running(self, ids: tuple[int, ...] | list[int]) -> bool:
        regs = self.registrations()
        for b in ids:
            st = self.agent_state(b)
            if st["state"] != "RUNNING":
                return False
            if b not in regs or regs[b]["fenced"]:
                return False
        return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("broker-agents")
    brokers = (*BROKERS, LATE_BROKER, FLEET_FIRST)  # FLEET_FIRST: the fleet's status port
    ports = free_ports(len(CONTROLLERS) + len(brokers))
    cports = dict(zip(CONTROLLERS, ports[: len(CONTROLLERS)], strict=True))
    sports = dict(zip(brokers, ports[len(CONTROLLERS) :], strict=True))
    voters = ",".join(f"{c}@127.0.0.1:{cports[c]}" for c in CONTROLLERS)
    group = ProcGroup()
    c = Cluster(tmp, group, cports, sports, voters, {}, {}, {})
    try:
        yield c
    finally:
        group.close()
        for p in group.procs:
            if "Traceback" in p.log_text():
                print(f"--- {p.name} log ({p.log_path}) ---\n{p.log_text()[-4000:]}")


def state_changes(proc: Proc) -> list[tuple[str, str, str]]:
    """(old, new, reason) of every `broker_state` line in an agent's JSON log."""
    out = []
    for line in proc.log_text().splitlines():
        if line.startswith("{") and '"event": "broker_state"' in line:
            rec = json.loads(line)
            out.append((rec["old"], rec["new"], rec["reason"]))
    return out


def best_leader(p: dict[str, Any], fenced: set[int]) -> int:
    for r in p["replicas"]:
        if r in p["isr"] and r not in fenced:
            return r
    return -1


# ---------------------------------------------------------------------- tests


def test_all_agents_running_and_unfenced(cluster: Cluster) -> None:
    for node in CONTROLLERS:
        cluster.start_controller(node)
    wait_until(cluster.active, 20, what="an active controller")
    t0 = time.monotonic()
    for b in BROKERS:
        cluster.start_broker(b)
    # a bound on the wait, not a figure: fleet_bench measures how long it takes
    wait_until(lambda: cluster.running(BROKERS), 60, interval=0.1, what="5 agents RUNNING")
    print(f"5 agents RUNNING {time.monotonic() - t0:.1f}s after their start")
    regs = cluster.registrations()
    for b in BROKERS:
        st = cluster.agent_state(b)
        assert st["incarnation_id"] == regs[b]["incarnation_id"]
        assert st["broker_epoch"] == regs[b]["broker_epoch"]
    cluster.post("/v1/topics", {"name": TOPIC, "partitions": 10, "replication_factor": 3})
    parts = cluster.partitions()
    assert all(p["leader"] in BROKERS and len(p["isr"]) == 3 for p in parts)


def test_kill9_broker_is_fenced_and_leaders_move_by_best_leader(cluster: Cluster) -> None:
    parts = cluster.partitions()
    led: dict[int, list[int]] = {}
    for p in parts:
        led.setdefault(p["leader"], []).append(p["partition_id"])
    victim = max(BROKERS, key=lambda b: len(led.get(b, [])))
    assert led.get(victim), "the victim leads something"
    old = cluster.registrations()[victim]
    cluster.state["victim"] = victim
    cluster.state["victim_reg"] = old
    cluster.state["victim_incarnation"] = cluster.agent_state(victim)["incarnation_id"]
    t0 = time.monotonic()
    cluster.brokers[victim].kill9()
    wait_until(
        lambda: cluster.registrations()[victim]["fenced"],
        SESSION_MS / 1000 + 2,
        interval=0.1,
        what=f"broker {victim} fenced",
    )
    fenced_after = time.monotonic() - t0
    assert fenced_after <= SESSION_MS / 1000 + 2
    regs = cluster.registrations()
    fenced = {b for b, r in regs.items() if r["fenced"]}
    assert fenced == {victim}
    after = {p["partition_id"]: p for p in cluster.partitions()}
    before = {p["partition_id"]: p for p in parts}
    for pid in led[victim]:
        p, b = after[pid], before[pid]
        # BestLeader: the first replica (in replica order) of the ISR before the
        # fence that is not fenced; the fence only removes the victim from the ISR
        assert p["leader"] != victim
        assert p["leader"] == best_leader(b, fenced), (b, p)
        assert p["isr"] == [r for r in b["isr"] if r != victim], (b, p)
        assert p["leader_epoch"] == b["leader_epoch"] + 1, (b, p)
    # the agents left standing are still RUNNING
    assert cluster.running([b for b in BROKERS if b != victim])


def test_restarted_broker_has_new_incarnation_and_epoch(cluster: Cluster) -> None:
    victim = cluster.state["victim"]
    old = cluster.state["victim_reg"]
    cluster.start_broker(victim)
    wait_until(lambda: cluster.running(BROKERS), 15, interval=0.1, what=f"broker {victim} back")
    reg = cluster.registrations()[victim]
    st = cluster.agent_state(victim)
    assert reg["incarnation_id"] != cluster.state["victim_incarnation"]
    assert reg["incarnation_id"] == st["incarnation_id"]
    assert reg["broker_epoch"] > old["broker_epoch"]
    assert st["broker_epoch"] == reg["broker_epoch"]
    # unfenced only once caught up: its image holds its own registration, and its
    # log shows STARTING -> RECOVERY (caught up) before RECOVERY -> RUNNING
    assert st["metadata_offset"] >= reg["broker_epoch"]
    assert state_changes(cluster.brokers[victim])[:2] == [
        ("STARTING", "RECOVERY", "caught up with the metadata log"),
        ("RECOVERY", "RUNNING", "unfenced"),
    ]
    # leaders expand the ISRs back to it (AlterPartition; on by default)
    wait_until(
        lambda: all(victim in p["isr"] for p in cluster.partitions() if victim in p["replicas"]),
        15,
        interval=0.2,
        what=f"broker {victim} back in every ISR",
    )


def test_sigterm_is_a_controlled_shutdown(cluster: Cluster) -> None:
    parts = cluster.partitions()
    leaders = {p["leader"] for p in parts}
    target = next(b for b in BROKERS if b in leaders and b != cluster.state["victim"])
    cluster.state["stopped"] = target
    proc = cluster.brokers[target]
    proc.signal(signal.SIGTERM)
    code = proc.popen.wait(20)  # type: ignore[union-attr]
    assert code == 0
    # leaderships moved before it exited: the controller granted the shutdown only
    # after committing them, so the first look after the exit already shows it
    after = cluster.partitions()
    assert all(p["leader"] != target for p in after)
    reg = cluster.registrations()[target]
    assert reg["in_controlled_shutdown"] or reg["fenced"]
    # the controller granted it (should_shut_down), which it does only once the
    # broker leads nothing: not the controlled-shutdown timeout
    assert state_changes(proc)[-2:] == [
        ("RUNNING", "PENDING_CONTROLLED_SHUTDOWN", "shutdown requested"),
        ("PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN", "controller granted shutdown"),
    ]
    assert "Traceback" not in proc.log_text()


def test_kill9_active_controller_fences_nobody(cluster: Cluster) -> None:
    alive = [b for b in BROKERS if cluster.brokers[b].alive()]
    before = cluster.registrations()
    assert all(not before[b]["fenced"] for b in alive)
    lead = cluster.active()
    assert lead is not None
    cluster.state["killed_controller"] = lead
    cluster.controllers[lead].kill9()
    t0 = time.monotonic()
    new = wait_until(
        lambda: (lambda a: a if a is not None and a != lead else None)(cluster.active()),
        15,
        interval=0.1,
        what="a new active controller",
    )
    assert new != lead
    # watch for longer than a session timeout: nobody fenced, every agent RUNNING
    while time.monotonic() - t0 < SESSION_MS / 1000 + 2:
        regs = cluster.registrations()
        assert all(not regs[b]["fenced"] for b in alive), regs
        assert all(cluster.agent_state(b)["state"] == "RUNNING" for b in alive)
        time.sleep(0.5)
    # and every agent now talks to the new active controller
    wait_until(
        lambda: all(cluster.agent_state(b)["controller"] == cluster.urls[new - 1] for b in alive),
        5,
        what="agents following the new active controller",
    )
    cluster.start_controller(lead)


def image_matches_log(cluster: Cluster, broker_id: int) -> bool:
    """The broker's image equals the active controller's log replayed to its offset.

    A snapshot written (and the log below it trimmed) between the two reads can
    leave nothing to replay that exact offset from: that read is retried."""
    lead = cluster.active()
    assert lead is not None
    image = cluster.agent(broker_id, "/v1/metadata")
    offset = image["offset"]
    assert offset > 0
    try:
        expected = replay_log(cluster.tmp / f"controller-{lead}", upto_offset=offset)
    except MetadataLogError:
        return False
    if expected.offset != offset:
        return False
    assert json.loads(json.dumps(expected.to_dict())) == image, f"broker {broker_id} at {offset}"
    return True


def test_broker_images_equal_the_controllers_log(cluster: Cluster) -> None:
    alive = [b for b in BROKERS if cluster.brokers[b].alive()]
    for b in alive:
        wait_until(lambda b=b: image_matches_log(cluster, b), 10, what=f"broker {b}'s image")


def test_fleet_of_agents_in_one_process(cluster: Cluster) -> None:
    # `broker-agent fleet`: K agents, one process, one connection pool; a status
    # line every few seconds (count per state, heartbeat p99, errors); SIGTERM is a
    # controlled shutdown of every agent and exit 0. Fleets run the seeded lag model
    # (here with a high probability): leaders shrink ISRs through AlterPartition.
    ids = list(range(FLEET_FIRST, FLEET_FIRST + FLEET_COUNT))
    args = [
        "-m", "broker_agent.cli", "fleet",
        "--count", str(FLEET_COUNT),
        "--first-id", str(FLEET_FIRST),
        "--controllers", ",".join(cluster.urls),
        "--status-port", str(cluster.status_ports[FLEET_FIRST]),
        "--status-interval", "1",
        "--log-format", "json",
        "--seed", "7",
        "--override", "broker.simulated.lag.probability=0.3",
    ]  # fmt: skip
    for k, v in OVERRIDES.items():
        args += ["--override", f"{k}={v}"]
    proc = cluster.group.start(Proc("fleet", args, cluster.tmp / "logs" / "fleet.log"))

    def all_running() -> bool:
        st = cluster.agent(FLEET_FIRST, "/status?agents=0")
        regs = cluster.registrations()
        return st["counts"]["RUNNING"] == FLEET_COUNT and all(
            b in regs and not regs[b]["fenced"] for b in ids
        )

    wait_until(all_running, 15, interval=0.2, what=f"{FLEET_COUNT} fleet agents RUNNING")
    status = cluster.agent(FLEET_FIRST)
    assert [a["broker_id"] for a in status["agents"]] == ids
    # one shared observer: every agent reports the same image offset
    assert len({a["metadata_offset"] for a in status["agents"]}) == 1
    regs = cluster.registrations()
    assert len({regs[b]["incarnation_id"] for b in ids}) == FLEET_COUNT
    line = wait_until(
        lambda: next(
            (
                ln
                for ln in reversed(proc.log_text().splitlines())
                if ln.startswith("fleet ") and f"RUNNING={FLEET_COUNT} " in ln and "ms p99=" in ln
            ),
            None,
        ),
        10,
        what="a status line with every agent RUNNING",
    )
    assert f"fleet {ids[0]}..{ids[-1]}: RUNNING={FLEET_COUNT} | heartbeat p50=" in line
    assert "ms p99=" in line and "errors=" in line
    hb = cluster.agent(FLEET_FIRST, "/heartbeats?since=0")
    assert hb["count"] == hb["heartbeats"] > 0 and hb["p99_ms"] >= hb["p50_ms"] > 0
    # the fleet's heartbeats travel on a pool of their own: the active controller's
    # lean front answers them (kraft/server/heartbeat_front.py)
    lead = cluster.active()
    assert lead is not None
    with urllib.request.urlopen(f"{cluster.urls[lead - 1]}/metrics", timeout=3) as r:
        metrics = r.read().decode()
    answered = re.search(r"^kraft_server_heartbeat_front_heartbeats (\S+)$", metrics, re.M)
    assert answered is not None and float(answered.group(1)) > 0, metrics
    # ISR shrinks not caused by fencing: partitions led by fleet agents
    n = len(ids)
    assignments = [[ids[i], ids[(i + 1) % n], ids[(i + 2) % n]] for i in range(6)]
    cluster.post("/v1/topics", {"name": "fleet-isr", "assignments": assignments})
    wait_until(
        lambda: sum(a["isr_shrinks"] for a in cluster.agent(FLEET_FIRST)["agents"]) > 0,
        15,
        interval=0.2,
        what="an ISR shrink by the lag model",
    )
    changed = [p for p in cluster.get("/v1/topics/fleet-isr")["partitions"] if p["partition_epoch"]]
    assert changed and all(p["leader"] in ids for p in changed)
    regs = cluster.registrations()
    assert not any(regs[b]["fenced"] for b in ids)  # no fence: AlterPartition did it
    proc.signal(signal.SIGTERM)
    code = proc.popen.wait(30)  # type: ignore[union-attr]
    assert code == 0
    regs = cluster.registrations()
    assert all(regs[b]["in_controlled_shutdown"] or regs[b]["fenced"] for b in ids)
    changes = [c for c in state_changes(proc) if c[1] == "SHUTTING_DOWN"]
    assert len(changes) == FLEET_COUNT
    assert {c[2] for c in changes} == {"controller granted shutdown"}
    assert "Traceback" not in proc.log_text()


def test_late_broker_loads_a_snapshot(cluster: Cluster) -> None:
    lead = cluster.active()
    assert lead is not None
    wait_until(
        lambda: (cluster.quorum(lead) or {}).get("log_start_offset", 0) > 0,
        40,
        interval=0.5,
        what="the active controller's log to start past 0 (snapshot + trim)",
    )
    cluster.start_broker(LATE_BROKER)
    wait_until(lambda: cluster.running([LATE_BROKER]), 15, interval=0.1, what="the late broker")
    follower = cluster.agent(LATE_BROKER)["follower"]
    assert follower["snapshots_loaded"] >= 1
    assert follower["caught_up"]
    wait_until(lambda: image_matches_log(cluster, LATE_BROKER), 10, what="the late broker's image")


def test_second_signal_stops_a_stuck_controlled_shutdown(cluster: Cluster) -> None:
    # With every controller paused the controlled shutdown cannot finish; a second
    # signal ends the wait at once (exit 0), as Ctrl-C twice does.
    target = LATE_BROKER
    proc = cluster.brokers[target]
    for c in CONTROLLERS:
        cluster.controllers[c].signal(signal.SIGSTOP)
    try:
        proc.signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.alive()
        proc.signal(signal.SIGINT)
        # bounded far below the controlled-shutdown timeout (30 s) the agent would
        # otherwise wait out: it exits because of the second signal
        code = proc.popen.wait(10)  # type: ignore[union-attr]
        assert code == 0
    finally:
        for c in CONTROLLERS:
            cluster.controllers[c].signal(signal.SIGCONT)
    assert "second signal" in proc.log_text()
