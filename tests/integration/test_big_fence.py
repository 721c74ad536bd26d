"""Issue 26: a fence that changes every partition costs the quorum no leader.

Three `kraft controller` processes at the fast test timeouts (election 500 ms,
fetch 1 s, session 3 s); brokers 10, 11 and 12 registered and heartbeating from
this process; PARTITIONS partitions with RF 3 over the three brokers, so broker
10 is in every ISR and leads a third. Broker 10 then stops heartbeating: its
fence is one metadata transaction of PARTITIONS PartitionChangeRecords plus the
FenceBrokerRecord. While it is generated, appended, replicated and replayed on
every controller:

- the leader epoch never moves (no election, no leader change);
- brokers 11 and 12 keep their sessions (never fenced);
- every controller ends with broker 10 fenced and out of every ISR.

Waits are bounded; the times (decision -> committed, heartbeat latencies) are
printed, not asserted (a loaded machine would fail a threshold). Every process is
started here and killed by pid.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.controller_procs import ControllerQuorum
from tests.integration.procs import ProcGroup, http, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTITIONS = 200_000
PER_TOPIC = 10_000  # max.partitions.per.topic
BROKERS = (10, 11, 12)
VICTIM = 10
SESSION_MS = 3000
FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.session.timeout.ms": str(SESSION_MS),
    "broker.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerQuorum]:
    group = ProcGroup()
    q = ControllerQuorum(tmp_path_factory.mktemp("big-fence"), group, overrides=dict(FAST))
    try:
        q.start_all()
        yield q
    finally:
        group.close()


class Heartbeats(threading.Thread):
    """Brokers heartbeating every 250 ms (each call bounded), following the active
    controller; a silenced broker stops."""

    def __init__(self, q: ControllerQuorum, epochs: dict[int, int]) -> None:
        super().__init__(daemon=True)
        self.q = q
        self.epochs = epochs
        self.silent: set[int] = set()
        self.latencies: list[float] = []
        self.fenced_replies: dict[int, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            for b, epoch in self.epochs.items():
                if b in self.silent:
                    continue
                body = {
                    "broker_id": b,
                    "broker_epoch": epoch,
                    "current_metadata_offset": 1 << 40,
                    "want_fence": False,
                    "want_shutdown": False,
                }
                t = time.perf_counter()
                try:
                    st, out = self.q.call_active("POST", "/v1/brokers/heartbeat", body, 2.0)
                except AssertionError:
                    continue  # no active controller answered in time: counted by the session
                self.latencies.append(time.perf_counter() - t)
                if st == 200 and out.get("is_fenced"):
                    self.fenced_replies[b] = self.fenced_replies.get(b, 0) + 1


def epochs_of(q: ControllerQuorum) -> set[int]:
    return {v["leader_epoch"] for i in q.ids if (v := q.quorum(i, timeout=2.0)) is not None}


def metric(q: ControllerQuorum, node_id: int, name: str) -> float | None:
    import urllib.request

    with urllib.request.urlopen(q.url(node_id) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_fence_of_a_broker_in_every_isr_costs_no_leader(quorum: ControllerQuorum) -> None:
    q = quorum
    leader = wait_until(q.active, 30, interval=0.05, what="an active controller")
    _, qv = http("GET", q.url(leader) + "/v1/quorum")
    epochs: dict[int, int] = {}
    for b in BROKERS:
        st, out = q.call_active(
            "POST",
            "/v1/brokers/register",
            {
                "broker_id": b,
                "cluster_id": qv["cluster_id"],
                "incarnation_id": str(uuid.uuid4()),
                "listeners": [
                    {"name": "P", "host": "h", "port": 9092, "security_protocol": "PLAINTEXT"}
                ],
                "rack": None,
                "features": [],
            },
        )
        assert st == 200, out
        epochs[b] = out["broker_epoch"]
    beats = Heartbeats(q, epochs)
    beats.start()
    try:
        wait_until(
            lambda: all(
                not b["fenced"]
                for b in q.call_active("GET", "/v1/brokers")[1]
                if b["broker_id"] in BROKERS
            ),
            30,
            what="the brokers unfenced",
        )
        t0 = time.monotonic()
        rotations = [BROKERS[k:] + BROKERS[:k] for k in range(3)]
        for n in range(PARTITIONS // PER_TOPIC):
            assignments = [list(rotations[(n + p) % 3]) for p in range(PER_TOPIC)]
            st, out = q.call_active(
                "POST", "/v1/topics", {"name": f"big-{n}", "assignments": assignments}, 30
            )
            assert st == 201, out
        print(f"\ncreated {PARTITIONS} partitions in {time.monotonic() - t0:.1f} s")
        # every controller has replayed them: the fence below is the only big change
        end = http("GET", q.url(leader) + "/v1/quorum")[1]["high_watermark"] - 1

        def caught_up() -> bool:
            return all(
                (metric(q, i, "kafka_controller_kafkacontroller_lastappliedrecordoffset") or -1)
                >= end
                for i in q.ids
            )

        wait_until(caught_up, 60, interval=0.2, what="every controller caught up")
        before = epochs_of(q)
        assert len(before) == 1, before
        n_lat = len(beats.latencies)

        beats.silent.add(VICTIM)
        t_silent = time.monotonic()

        # The fence is over when every controller shows the victim fenced.
        def fenced_everywhere() -> bool:
            for i in q.ids:
                st, view = http("GET", q.url(i) + "/v1/brokers?standby=true", timeout=2.0)
                if st != 200:
                    return False
                mine = [b for b in view if b["broker_id"] == VICTIM]
                if not mine or not mine[0]["fenced"]:
                    return False
            return True

        wait_until(fenced_everywhere, 120, interval=0.1, what="the fence on every controller")
        applied_s = time.monotonic() - t_silent - SESSION_MS / 1000
        after = epochs_of(q)
        active = wait_until(q.active, 10, what="an active controller")
        commit_ms = metric(q, active, "kraft_controller_last_fence_commit_ms")
        records = metric(q, active, "kraft_controller_last_fence_records")
        lat = sorted(beats.latencies[n_lat:])
        p99 = lat[int(0.99 * (len(lat) - 1))] * 1000 if lat else float("nan")
        print(
            f"fence of broker {VICTIM}: {records:.0f} records, decision -> committed "
            f"{commit_ms:.0f} ms, on every controller ~{applied_s:.1f} s after session "
            f"expiry; other brokers' heartbeat p99 {p99:.0f} ms over {len(lat)}"
        )
        assert before == after, f"the leader epoch moved from {before} to {after}"
        assert active == leader
        assert records == PARTITIONS + 1
        assert not {b for b in beats.fenced_replies if b != VICTIM}, beats.fenced_replies
        for i in q.ids:
            st, view = http("GET", q.url(i) + "/v1/brokers?standby=true", timeout=5.0)
            fenced = {b["broker_id"] for b in view if b["fenced"]}
            assert fenced == {VICTIM}, (i, fenced)
    finally:
        beats.stop.set()
        beats.join(5)
