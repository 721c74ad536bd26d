"""The chaos test: 3 controllers, 6 brokers, a topic writer and random faults.

For CHAOS_MINUTES (default 2) minutes, every 1.5-4 s a seeded random fault hits the
cluster: kill -9 of a controller or broker (restarted a few seconds later), SIGSTOP
(SIGCONT later), a graceful restart, a controller cut off from its peers, or one
peer link cut (the controllers reach each other only through fault-injecting TCP
proxies). Meanwhile a writer creates and deletes topics. Then every fault is
healed, one broker is killed for good, and after a bounded settle wait:

- no epoch ever had two leaders: every LeaderChangeMessage in every controller's
  log (committed or not) names one leader per epoch, and so does every sample of
  /v1/quorum taken during the run;
- every acknowledged create and delete is in the committed log, and the final
  image holds exactly the acknowledged topics that were not deleted;
- all controllers' logs are identical up to the lowest high watermark;
- every controller's image equals the image replayed from its log at the same
  offset, and images taken at the same offset are equal;
- the killed broker is fenced and every live broker is unfenced;
- spark-replay's state as of the final offset equals the replayed image.

`CHAOS_SEED=N` replays a schedule (the seed is printed; `random` picks one);
`make chaos CHAOS_MINUTES=30` is the long run.

Secured (issue 25): the same run with TLS, mTLS-or-token authentication and the
authorizer on every controller and broker (`kraft certs` material), every test
client authenticated as the admin, and one more fault: every 8 s a step of the
credential rotation recipe (a new CA trusted beside the old, every certificate and
token renewed, the old CA dropped, the old tokens dropped), reloaded by SIGHUP or
the nodes' file poll. `CHAOS_SECURE=1` runs only the secured run, `0` only the
plain one; unset (`make test`), both run, each for half of CHAOS_MINUTES.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kraft.controller.views import metadata_view
from kraft.local.cluster import wait_for
from kraft.security.client_security import NONE, ClientSecurity
from metadata_log.records import LeaderChangeMessage, RemoveTopicRecord, TopicRecord
from metadata_log.replay import iter_file_batches, metadata_dir, replay_log, segment_files
from tests.integration.chaos_cluster import (
    ChaosCluster,
    CredentialRotation,
    FaultInjector,
    QuorumWatcher,
    TopicWriter,
    http_get,
)
from tests.toolchain import spark_missing

pytestmark = pytest.mark.integration

MINUTES = float(os.environ.get("CHAOS_MINUTES", "2"))
_SEED_ENV = os.environ.get("CHAOS_SEED", "")
SEED = (
    random.SystemRandom().randrange(1 << 31)
    if _SEED_ENV == "random"
    else int(_SEED_ENV or "20261123")
)
_SECURE_ENV = os.environ.get("CHAOS_SECURE", "")
MODES = {"1": ("secure",), "0": ("plain",)}.get(_SECURE_ENV, ("plain", "secure"))
RUN_MINUTES = MINUTES / len(MODES)
CONTROLLERS, BROKERS = 3, 6
SESSION_MS, HEARTBEAT_MS = 6000, 1000
SETTLE_S = 90.0


@dataclass
class ChaosResult:
    seed: int
    secure: bool
    data_dir: Path
    writer: Any
    watcher_leaders: dict[int, set[int]]
    min_hw: int
    dead_broker: int
    brokers_view: dict[int, dict[str, Any]]
    live_brokers: set[int]
    views: dict[int, dict[str, Any]]  # controller id -> /v1/metadata (its committed image)
    same_offset_views: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    stop_codes: dict[str, int | None] = field(default_factory=dict)
    rotations: list[str] = field(default_factory=list)  # secured runs: the steps done

    def controller_dir(self, nid: int) -> Path:
        return self.data_dir / f"controller-{nid}"


def _tails(chaos: ChaosCluster, lines: int = 12) -> str:
    out = []
    for node, path in chaos.cluster.iter_logs():
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = []
        out.append(f"--- {node.name} ({path})\n" + "\n".join(text))
    return "\n".join(out)


def _view(url: str, security: ClientSecurity = NONE) -> dict[str, Any] | None:
    status, body = http_get(f"{url}/v1/metadata?standby=true", timeout=3.0, security=security)
    return body if status == 200 else None


def _settled(chaos: ChaosCluster, dead: int) -> dict[int, dict[str, Any]] | None:
    view = chaos.cluster.brokers_view()
    for b in chaos.cluster.brokers:
        state = view.get(b.node_id)
        if state is None or state["fenced"] != (b.node_id == dead):
            return None
    return view


def _run_chaos(data_dir: Path, secure: bool) -> ChaosResult:
    mode = "secured (TLS + authorizer, credentials rotated)" if secure else "plaintext"
    print(
        f"\nchaos: {mode}, seed {SEED} (CHAOS_SEED={SEED} replays it), {RUN_MINUTES} minutes",
        flush=True,
    )
    rng = random.Random(SEED)
    spec_kw: dict[str, Any] = {
        "controller_overrides": {"broker.session.timeout.ms": str(SESSION_MS)},
        "broker_overrides": {
            "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
            "broker.session.timeout.ms": str(SESSION_MS),
        },
        "broker_args": ["--simulate-lag"],
    }
    if secure:
        spec_kw["certs_dir"] = data_dir / "certs"
        for k in ("controller_overrides", "broker_overrides"):
            spec_kw[k]["security.reload.interval.ms"] = "1000"
    chaos = ChaosCluster(data_dir, CONTROLLERS, BROKERS, spec_kw)
    cluster = chaos.cluster
    writer = TopicWriter(cluster, seed=SEED + 1)
    watcher = QuorumWatcher(cluster)
    t0 = time.monotonic()
    rotation = CredentialRotation(cluster, random.Random(SEED + 2)) if secure else None
    faults = FaultInjector(chaos, rng, t0, rotation)
    ok = False
    try:
        cluster.start_all()
        cluster.wait_leader(30)
        wait_for(lambda: _settled(chaos, dead=-1), 60, "every broker registered and unfenced", 0.2)
        faults.say("cluster up: leader elected, 6 brokers unfenced; chaos starts")
        watcher.start()
        writer.start()
        end = time.monotonic() + RUN_MINUTES * 60
        # A third of the way in, a run that has seen no failover yet gets one.
        force_failover_at: float | None = time.monotonic() + RUN_MINUTES * 20
        while time.monotonic() < end:
            faults.recover_due(time.monotonic())
            if (
                force_failover_at is not None
                and time.monotonic() >= force_failover_at
                and (len(watcher.leaders) >= 2 or faults.kill_leader())
            ):
                force_failover_at = None
            faults.inject()
            next_fault = min(end, time.monotonic() + rng.uniform(1.5, 4.0))
            while time.monotonic() < next_fault:
                time.sleep(0.1)
                faults.recover_due(time.monotonic())
            if writer.error is not None:
                raise writer.error
        writer.stop()
        faults.heal()
        dead = rng.choice([b.node_id for b in cluster.brokers])
        cluster.kill9(dead)
        faults.say(f"kill -9 broker-{dead} for good; settling (at most {SETTLE_S:.0f}s)")
        cluster.wait_leader(SETTLE_S)
        view = wait_for(
            lambda: _settled(chaos, dead),
            SETTLE_S,
            f"broker {dead} fenced and every other broker unfenced",
            0.25,
        )
        live = {b.node_id for b in cluster.brokers if b.alive() and not b.stopped}
        # One more acknowledged write: the settled cluster takes writes.
        final = {"name": "chaos-final", "partitions": 2, "replication_factor": 3}
        kind, out = writer.call("POST", "/v1/topics", final, timeout=20, stoppable=False)
        assert kind == "ok", f"the healed cluster refused a write: {kind} {out}"
        writer.log.acked_creates["chaos-final"] = out["topic_id"]
        target = cluster.wait_leader(10)["high_watermark"]
        wait_for(
            lambda: all(
                (cluster.quorum(n.node_id) or {}).get("high_watermark", -1) >= target
                for n in cluster.controllers
            ),
            30,
            f"every controller's high watermark at {target}",
        )
        hws = [cluster.quorum(n.node_id)["high_watermark"] for n in cluster.controllers]  # type: ignore[index]
        min_hw = min(hws)
        # Images at the same offset: NoOps move the offset every 500 ms, so ask all
        # three at once a few times; each image is also checked against its own log.
        views: dict[int, dict[str, Any]] = {}
        same: list[dict[str, Any]] = []
        urls = {n.node_id: n.url for n in cluster.controllers}
        with ThreadPoolExecutor(len(urls)) as pool:
            for _ in range(30):
                got = dict(
                    zip(
                        urls,
                        pool.map(lambda u: _view(u, cluster.security), urls.values()),
                        strict=True,
                    )
                )
                if all(got.values()):
                    views = got  # type: ignore[assignment]
                    if len({v["offset"] for v in got.values()}) == 1:  # type: ignore[union-attr]
                        same = list(got.values())  # type: ignore[arg-type]
                        break
                time.sleep(0.05)
        assert views, "no controller answered GET /v1/metadata"
        watcher.stop()
        faults.say(
            f"settled: hw {hws}, views at offsets {[v['offset'] for v in views.values()]}; "
            f"writer acked {len(writer.log.acked_creates)} creates and "
            f"{len(writer.log.acked_deletes)} deletes, {writer.log.unknown} unknown, "
            f"{writer.log.refused} refused; faults {faults.counts}"
        )
        result = ChaosResult(
            seed=SEED,
            secure=secure,
            data_dir=cluster.data_dir,
            writer=writer.log,
            watcher_leaders=watcher.leaders,
            min_hw=min_hw,
            dead_broker=dead,
            brokers_view=view,
            live_brokers=live,
            views=views,
            same_offset_views=same,
            counts=dict(faults.counts),
        )
        ok = True
    finally:
        writer.stop_event.set()
        watcher.stop_event.set()
        codes = chaos.close()
        if not ok:
            print(
                f"chaos FAILED ({mode}, seed {SEED}); node log tails:\n{_tails(chaos)}",
                flush=True,
            )
    result.stop_codes = codes
    result.rotations = list(rotation.done) if rotation is not None else []
    return result


@pytest.fixture(scope="module", params=MODES)
def chaos_result(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChaosResult]:
    # pytest keeps the last few base temp dirs: the logs stay there for a post-mortem
    data_dir = tmp_path_factory.mktemp(f"chaos-{request.param}")
    print(f"chaos data and node logs: {data_dir}", flush=True)
    yield _run_chaos(data_dir, secure=request.param == "secure")


def _batches(result: ChaosResult, nid: int) -> list[tuple[int, int, bool, tuple[Any, ...]]]:
    d = metadata_dir(result.controller_dir(nid))
    segs = segment_files(d)
    out = []
    for i, (_base, path) in enumerate(segs):
        for b in iter_file_batches(path, allow_torn_tail=i == len(segs) - 1):
            out.append((b.base_offset, b.leader_epoch, b.control, tuple(b.records)))
    return out


def _committed_records(result: ChaosResult, nid: int) -> list[tuple[int, int, Any]]:
    """(offset, epoch, record) of every record below the lowest high watermark."""
    out = []
    for base, epoch, _control, records in _batches(result, nid):
        for i, rec in enumerate(records):
            if base + i < result.min_hw:
                out.append((base + i, epoch, rec))
    return out


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


# ----------------------------------------------------------------- the checks

# One long run feeds every check below; the timeout covers the run plus settling,
# stopping and Spark.
_TIMEOUT = int(RUN_MINUTES * 60 + 480)


@pytest.mark.timeout(_TIMEOUT)
def test_chaos_ran_faults_and_writes(chaos_result: ChaosResult) -> None:
    r = chaos_result
    assert sum(r.counts.values()) >= max(5, int(RUN_MINUTES * 60 / 4 * 0.6)), r.counts
    assert {"kill9", "pause"} <= set(r.counts), r.counts
    assert len(r.writer.acked_creates) >= 10, "the writer got almost nothing acknowledged"
    assert not r.writer.violations, r.writer.violations
    # every process exited cleanly on SIGTERM, but the broker killed for good
    dead = f"broker-{r.dead_broker}"
    assert r.stop_codes[dead] == -9, r.stop_codes
    assert all(code == 0 for name, code in r.stop_codes.items() if name != dead), r.stop_codes


def leaders_by_epoch_from_logs(result: ChaosResult) -> dict[int, set[int]]:
    """epoch -> the leaders that wrote a LeaderChangeMessage in it, over every
    controller's whole log (a new leader writes one as its epoch's first batch)."""
    out: dict[int, set[int]] = {}
    for n in range(1, CONTROLLERS + 1):
        for _base, epoch, control, records in _batches(result, n):
            if control:
                for rec in records:
                    if isinstance(rec, LeaderChangeMessage):
                        out.setdefault(epoch, set()).add(rec.leader_id)
    return out


@pytest.mark.timeout(_TIMEOUT)
def test_at_most_one_leader_per_epoch(chaos_result: ChaosResult) -> None:
    from_logs = leaders_by_epoch_from_logs(chaos_result)
    two = {e: ls for e, ls in from_logs.items() if len(ls) > 1}
    assert not two, f"epochs with more than one leader in the logs: {two}"
    assert len(from_logs) >= 2, "no leader change was ever written"
    sampled = {e: ls for e, ls in chaos_result.watcher_leaders.items() if len(ls) > 1}
    assert not sampled, f"epochs with more than one leader in /v1/quorum: {sampled}"
    # every leader the samples saw wrote its epoch's LeaderChangeMessage
    for epoch, leaders in chaos_result.watcher_leaders.items():
        if epoch in from_logs:
            assert leaders == from_logs[epoch], (epoch, leaders, from_logs[epoch])


@pytest.mark.timeout(_TIMEOUT)
def test_committed_logs_identical_up_to_lowest_high_watermark(chaos_result: ChaosResult) -> None:
    r = chaos_result
    logs = {n: _committed_records(r, n) for n in range(1, CONTROLLERS + 1)}
    first = logs[1]
    assert len(first) == r.min_hw, f"controller 1 holds {len(first)} of {r.min_hw} committed"
    assert [o for o, _e, _r in first] == list(range(r.min_hw)), "gap in the committed log"
    for n, recs in logs.items():
        assert len(recs) == len(first), f"controller {n}: {len(recs)} records below {r.min_hw}"
        for a, b in zip(first, recs, strict=True):
            assert a == b, f"controller {n} differs from controller 1 at offset {a[0]}: {a} != {b}"


@pytest.mark.timeout(_TIMEOUT)
def test_every_acknowledged_write_is_in_the_log(chaos_result: ChaosResult) -> None:
    r = chaos_result
    recs = _committed_records(r, 1)
    created = {rec.name: rec.topic_id for _o, _e, rec in recs if type(rec) is TopicRecord}
    removed = {rec.topic_id for _o, _e, rec in recs if type(rec) is RemoveTopicRecord}
    for name, tid in r.writer.acked_creates.items():
        assert created.get(name) == tid, f"acknowledged create of {name} ({tid}) not in the log"
    for name, tid in r.writer.acked_deletes.items():
        assert tid in removed, f"acknowledged delete of {name} ({tid}) not in the log"
    image = replay_log(r.controller_dir(1), upto_offset=r.min_hw - 1)
    topics = {t.name: tid for tid, t in image.topics.items()}
    for name, tid in r.writer.acked_creates.items():
        if name in r.writer.acked_deletes:
            assert name not in topics, f"deleted topic {name} is in the image"
        elif name in r.writer.unknown_deletes:
            # its delete may or may not have happened; if it did, the log says so
            assert topics.get(name) == tid or tid in removed, f"topic {name} vanished"
        else:
            assert topics.get(name) == tid, (
                f"acknowledged topic {name} ({tid}) missing from the image; "
                f"removed in the log: {tid in removed}"
            )


@pytest.mark.timeout(_TIMEOUT)
def test_images_equal_at_the_same_offset(chaos_result: ChaosResult) -> None:
    r = chaos_result
    for nid, view in r.views.items():
        replayed = replay_log(r.controller_dir(nid), upto_offset=view["offset"])
        assert replayed.offset == view["offset"]
        assert _jsonable(metadata_view(replayed)) == view, (
            f"controller {nid}'s image at {view['offset']} differs from its log's replay"
        )
    # at one offset every controller has (below the lowest high watermark), the
    # images replayed from each controller's log are equal
    off = min([r.min_hw - 1, *(v["offset"] for v in r.views.values())])
    images = [
        _jsonable(metadata_view(replay_log(r.controller_dir(n), upto_offset=off)))
        for n in range(1, CONTROLLERS + 1)
    ]
    assert images[0]["offset"] == off
    assert all(img == images[0] for img in images), f"images differ at offset {off}"
    if r.same_offset_views:
        assert all(v == r.same_offset_views[0] for v in r.same_offset_views)


@pytest.mark.timeout(_TIMEOUT)
def test_dead_broker_fenced_and_live_brokers_unfenced(chaos_result: ChaosResult) -> None:
    r = chaos_result
    assert r.dead_broker not in r.live_brokers
    for bid, b in r.brokers_view.items():
        if bid == r.dead_broker:
            assert b["fenced"], f"dead broker {bid} is unfenced"
        elif bid in r.live_brokers:
            assert not b["fenced"], f"live broker {bid} is fenced"
    assert r.live_brokers | {r.dead_broker} == set(r.brokers_view)
    # and the image the controllers serve says the same
    for view in r.views.values():
        fenced = {b["broker_id"] for b in view["brokers"] if b["fenced"]}
        assert fenced == {r.dead_broker}, f"fenced in the image at {view['offset']}: {fenced}"


@pytest.mark.timeout(_TIMEOUT)
def test_spark_replay_state_equals_the_image(chaos_result: ChaosResult, tmp_path: Path) -> None:
    missing = spark_missing()
    if missing is not None:
        pytest.fail(missing, pytrace=False)
    from spark_replay import history as H

    r = chaos_result
    offset = r.views[1]["offset"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_replay.cli",
            "--log-dir",
            str(r.controller_dir(1)),
            "--out",
            str(tmp_path / "replay"),
            "--master",
            "local[2]",
            "--as-of-offset",
            str(offset),
            "--no-report",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((tmp_path / "replay" / "state_as_of" / "state.json").read_text())
    brokers, partitions = H.image_state(replay_log(r.controller_dir(1), upto_offset=offset))
    assert state["as_of_offset"] == offset
    assert state["brokers"] == _jsonable(brokers)
    assert state["partitions"] == _jsonable(partitions)
    # and that image is the one controller 1 served at that offset
    assert {b["broker_id"]: b["fenced"] for b in state["brokers"]} == {
        b["broker_id"]: b["fenced"] for b in r.views[1]["brokers"]
    }
    assert {p["topic"] for p in state["partitions"]} == {t["name"] for t in r.views[1]["topics"]}


@pytest.mark.timeout(_TIMEOUT)
def test_secured_run_rotated_the_ca_and_every_node_reloaded(chaos_result: ChaosResult) -> None:
    """Secured runs: a whole CA rotation happened under the faults; every controller
    and broker reloaded (by SIGHUP or its poll) and no reload failed; no node logged a
    traceback. (Plain runs: no credentials, nothing to check.)"""
    r = chaos_result
    if not r.secure:
        assert not r.rotations
        return
    steps = CredentialRotation.STEPS
    assert list(r.rotations) == [steps[i % len(steps)] for i in range(len(r.rotations))]
    assert "rotate-ca finish" in r.rotations, r.rotations
    logs = sorted((r.data_dir / "logs").glob("*.log"))
    assert len(logs) == CONTROLLERS + BROKERS
    for log in logs:
        text = log.read_text(errors="replace")
        assert '"event": "security_reload_failed"' not in text, log.name
        assert '"event": "security_reloaded"' in text or log.stem == f"broker-{r.dead_broker}", (
            f"{log.name} never reloaded"
        )
        assert "Traceback" not in text, f"{log.name} logged a traceback"
