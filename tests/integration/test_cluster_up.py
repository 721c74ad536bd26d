"""`kraft cluster up` as a user runs it: a live cluster, its /metrics and JSON logs,
and a clean stop on SIGTERM that leaves no process behind.

One run (module fixture) of `kraft cluster up --controllers 3 --brokers 2`: wait for
a leader and two unfenced brokers over HTTP, create a topic, kill -9 one broker (a
child of cluster up, by the pid it printed) and wait for its fence, scrape every
controller's /metrics, then SIGTERM cluster up: exit 0, every child pid gone, and
each node's log is JSON lines with the state changes that happened. Then
`cluster up` again on the same DATA_DIR (a restart): the same URLs, a new leader
epoch, the topic still there and both brokers unfenced; meanwhile a third one on
that DATA_DIR, and one with another quorum size, exit 2 with one line each.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kraft.local.cluster import http_json, wait_for

pytestmark = pytest.mark.integration

SESSION_MS = 4000


@dataclass
class Run:
    data: Path
    urls: dict[int, str]
    pids: dict[str, int]
    logs: dict[str, Path]
    leader: int
    killed_broker: int
    metrics: dict[int, dict[str, list[tuple[dict[str, str], float]]]]
    exit_code: int
    output: str
    gone: dict[str, bool]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it has exited but not been reaped. But a
    # killed process's leader thread shows "Z" while its other threads (a
    # controller's fsync worker, ...) are still going, and until they are gone its
    # parent's waitpid cannot reap it either (`cluster up` saw it alive).
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _read_header(proc: subprocess.Popen[str], lines: list[str]) -> None:
    """Read cluster up's banner up to 'Ctrl-C stops the cluster.' (bounded)."""
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("cluster up exited early:\n" + "".join(lines))
        lines.append(line)
        if line.startswith("Ctrl-C stops"):
            return
    raise AssertionError("no banner from cluster up:\n" + "".join(lines))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    data = tmp_path_factory.mktemp("cluster-up")
    proc = _cluster_up(data, "--controllers", "3")
    lines: list[str] = []
    pids: dict[str, int] = {}
    try:
        _read_header(proc, lines)
        urls, logs = _banner(lines, pids)
        assert len(urls) == 3 and len(pids) == 5, "".join(lines)
        lead = wait_for(lambda: _leader(urls), 30, "a controller leader")
        wait_for(lambda: _unfenced(urls[lead]) == {4, 5}, 30, "two unfenced brokers")
        status, body = http_json(
            "POST",
            f"{urls[lead]}/v1/topics",
            {"name": "metrics-topic", "partitions": 4, "replication_factor": 2},
            timeout=10,
        )
        assert status in (200, 201), body
        victim = 4  # controllers are 1..3, brokers 4..5
        os.kill(pids[f"broker-{victim}"], signal.SIGKILL)
        wait_for(
            lambda: _brokers(urls[lead]).get(victim, {}).get("fenced"),
            SESSION_MS / 1000 + 15,
            f"broker {victim} fenced",
        )
        # every controller's image has caught up with the fence (NoOps move hw on)
        wait_for(
            lambda: all(
                next(
                    iter(
                        v
                        for _l, v in _scrape(u)[
                            "kafka_controller_kafkacontroller_fencedbrokercount"
                        ]
                    )
                )
                == 1
                for u in urls.values()
            ),
            15,
            "every controller's image shows the fence",
        )
        metrics = {nid: _scrape(url) for nid, url in urls.items()}
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        assert proc.stdout is not None
        output = "".join(lines) + proc.stdout.read()
        gone = {name: not _alive(pid) for name, pid in pids.items()}
        yield Run(data, urls, pids, logs, lead, victim, metrics, code, output, gone)
    finally:
        _kill(proc, pids)


def _read_until(proc: subprocess.Popen[str], lines: list[str], text: str) -> None:
    """Read cluster up's output up to a line holding `text` (bounded: the status
    lines come every second until the stop)."""
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} in cluster up's output:\n{''.join(lines)}")


def _cluster_up(data: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "kraft.cli", "cluster", "up", *extra,
        "--brokers", "2",
        "--data-dir", str(data),
        "--status-interval", "1",
        "--override", f"broker.session.timeout.ms={SESSION_MS}",
        "--override", "broker.heartbeat.interval.ms=1000",
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )


def _banner(lines: list[str], pids: dict[str, int]) -> tuple[dict[int, str], dict[str, Path]]:
    """The controllers' URLs and the nodes' logs from cluster up's banner (pids
    are added to `pids` as they are read, for the clean-up)."""
    urls: dict[int, str] = {}
    logs: dict[str, Path] = {}
    for line in lines:
        m = re.match(r"\s+controller (\d+): (\S+)\s+pid (\d+)\s+\(log (\S+)\)", line)
        if m:
            urls[int(m[1])] = m[2]
            pids[f"controller-{m[1]}"] = int(m[3])
            logs[f"controller-{m[1]}"] = Path(m[4])
        m = re.match(r"\s+broker (\d+): pid (\d+)\s+\(log (\S+)\)", line)
        if m:
            pids[f"broker-{m[1]}"] = int(m[2])
            logs[f"broker-{m[1]}"] = Path(m[3])
    return urls, logs


def _quorum(url: str) -> dict[str, Any] | None:
    try:
        status, q = http_json("GET", f"{url}/v1/quorum", timeout=1)
    except OSError:
        return None
    return q if status == 200 else None


def _leader(urls: dict[int, str]) -> int | None:
    for nid, url in urls.items():
        q = _quorum(url)
        if q is not None and q["state"] == "leader":
            return nid
    return None


def _brokers(url: str) -> dict[int, dict[str, Any]]:
    status, body = http_json("GET", f"{url}/v1/brokers", timeout=2)
    return {b["broker_id"]: b for b in body} if status == 200 else {}


def _unfenced(url: str) -> set[int]:
    return {i for i, b in _brokers(url).items() if not b["fenced"]}


def _kill(proc: subprocess.Popen[str], pids: dict[str, int]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    for pid in pids.values():  # only the children cluster up started
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _value(m: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    for lab, v in m[name]:
        if all(lab.get(k) == val for k, val in labels.items()):
            return v
    raise AssertionError(f"{name}{labels} not exposed")


def test_sigterm_stops_everything_with_exit_0(run: Run) -> None:
    assert run.exit_code == 0, run.output
    assert all(run.gone.values()), f"children still running: {run.gone}"
    assert "stopping: brokers first" in run.output
    # the killed broker's exit was told as it happened, then again at the stop
    assert re.search(r"broker-4 exited with code -9: .+  \(log \S+broker-4\.log\)", run.output)
    assert run.output.count("broker-4 exited with code") == 1, run.output
    # the stop says which process was gone before it (the broker killed above)
    stopped = next(line for line in run.output.splitlines() if line.startswith("stopped: "))
    assert "broker-4=-9 (had exited), broker-5=0, controller-1=0" in stopped, stopped
    # status lines showed the quorum and the brokers
    assert re.search(r"c\d:leader@\d+ hw=\d+", run.output), run.output


def test_metrics_have_kafka_names_and_plausible_values(run: Run) -> None:
    m = run.metrics
    ctl = "kafka_controller_kafkacontroller_"
    raft = "kafka_server_raft_metrics_"
    assert sum(_value(m[n], ctl + "activecontrollercount") for n in m) == 1
    assert _value(m[run.leader], ctl + "activecontrollercount") == 1
    for nid, mm in m.items():
        assert _value(mm, ctl + "fencedbrokercount") == 1, nid
        assert _value(mm, ctl + "activebrokercount") == 1, nid
        assert _value(mm, ctl + "globaltopiccount") == 1, nid
        assert _value(mm, ctl + "globalpartitioncount") == 4, nid
        # the killed broker's leaderships moved to the other (rf 2): nothing offline
        assert _value(mm, ctl + "offlinepartitionscount") == 0, nid
        hw = _value(mm, raft + "high_watermark")
        committed = _value(mm, ctl + "lastcommittedrecordoffset")
        assert 0 < committed < hw <= _value(mm, raft + "log_end_offset"), nid
        assert _value(mm, raft + "current_leader") == run.leader, nid
        assert _value(mm, raft + "current_epoch") >= 1, nid
        assert _value(mm, raft + "leader_changes_total") >= 1, nid
    epochs = {_value(mm, raft + "current_epoch") for mm in m.values()}
    assert len(epochs) == 1, epochs
    assert sum(_value(mm, raft + "elections_total") for mm in m.values()) >= 1
    lead = m[run.leader]
    assert _value(lead, raft + "commit_latency_ms_count") > 0
    assert _value(lead, "kafka_controller_controllereventmanager_eventqueuetimems_count") > 0
    assert _value(lead, "kafka_controller_controllerstats_brokerfences_total") == 1
    assert (
        _value(lead, "kafka_controller_controllerstats_leaderelections_total", unclean="false") >= 1
    )


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))  # every line is one JSON object
    return out


def test_logs_are_json_lines_with_every_state_change(run: Run) -> None:
    events: list[dict[str, Any]] = []
    for name, path in run.logs.items():
        lines = _json_lines(path)
        assert lines, name
        events += lines
    changes = [e for e in events if e.get("event") == "state_change"]
    kinds = {e["change"] for e in changes}
    assert {
        "broker_registered",
        "broker_unfenced",
        "broker_fenced",
        "topic_created",
        "partition_created",
        "partition_leader_elected",
    } <= kinds, kinds
    fenced = [e for e in changes if e["change"] == "broker_fenced"]
    assert any(e["broker_id"] == run.killed_broker for e in fenced)
    raft = [e for e in events if e.get("event") in ("raft_state", "leader_change")]
    assert any(e.get("event") == "raft_state" for e in raft), "no Raft state change logged"
    assert any(e.get("event") == "leader_change" for e in raft), "no Raft leader change logged"
    assert any(e.get("event") == "broker_state" for e in events), "no broker lifecycle line"


def test_the_banner_names_the_web_console_of_a_controller(run: Run) -> None:
    line = next(x for x in run.output.splitlines() if x.startswith("web console: "))
    url = line.split()[2]
    assert url.endswith("/ui") and url.removesuffix("/ui") in run.urls.values(), line


@dataclass
class Restart:
    urls: dict[int, str]
    epochs: tuple[int, int]  # the leader epoch before and after the restart
    topic: dict[str, Any]
    unfenced: set[int]
    refused: dict[str, tuple[int, str]]  # a second cluster up on the dir: exit code, output
    exit_code: int
    output: str
    gone: dict[str, bool]


@pytest.fixture(scope="module")
def restart(run: Run) -> Iterator[Restart]:
    """`cluster up` again on the first run's DATA_DIR, without --controllers."""
    proc = _cluster_up(run.data)
    lines: list[str] = []
    pids: dict[str, int] = {}
    try:
        _read_header(proc, lines)
        urls, _logs = _banner(lines, pids)
        lead = wait_for(lambda: _leader(urls), 30, "a leader after the restart")
        q = _quorum(urls[lead])
        assert q is not None
        wait_for(lambda: _unfenced(urls[lead]) == {4, 5}, 30, "both brokers unfenced again")
        status, topic = http_json("GET", f"{urls[lead]}/v1/topics/metrics-topic", timeout=5)
        assert status == 200, topic
        refused = {}
        for name, extra in (("running", ()), ("five", ("--controllers", "5"))):
            other = _cluster_up(run.data, *extra)
            out, _ = other.communicate(timeout=30)
            refused[name] = (other.returncode, out)
        before = int(_value(run.metrics[run.leader], "kafka_server_raft_metrics_current_epoch"))
        unfenced = _unfenced(urls[lead])
        # The stop with no controller left: the brokers' controlled shutdowns cannot
        # finish (they would wait out their 30 s bound); a second signal skips them.
        for nid in urls:
            os.kill(pids[f"controller-{nid}"], signal.SIGKILL)
        wait_for(
            lambda: not any(_alive(pids[f"controller-{nid}"]) for nid in urls) or None,
            10,
            "the controllers gone",
        )
        proc.send_signal(signal.SIGTERM)
        _read_until(proc, lines, "stopping: brokers first")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
        assert proc.stdout is not None
        output = "".join(lines) + proc.stdout.read()
        gone = {name: not _alive(pid) for name, pid in pids.items()}
        yield Restart(
            urls, (before, q["leader_epoch"]), topic, unfenced, refused, code, output, gone
        )
    finally:
        _kill(proc, pids)


def test_a_restart_on_the_same_data_dir_is_the_same_cluster(run: Run, restart: Restart) -> None:
    # the voters' URLs are in the metadata log: the same ports, or nobody is elected
    assert restart.urls == run.urls
    assert restart.epochs[1] > restart.epochs[0], restart.epochs
    assert len(restart.topic["partitions"]) == 4, restart.topic
    assert restart.unfenced == {4, 5}
    assert restart.exit_code == 0 and all(restart.gone.values()), restart.output


def test_a_second_signal_skips_controlled_shutdowns_that_cannot_finish(restart: Restart) -> None:
    """With every controller gone, Ctrl-C again ends the brokers' wait at once: they
    exit 0 (their own second-signal path), not SIGKILLed after the bound."""
    out = restart.output
    assert "at most 40 s; Ctrl-C again skips it" in out, out
    assert "skipping the controlled shutdown of broker-4, broker-5" in out, out
    stopped = next(line for line in out.splitlines() if line.startswith("stopped: "))
    assert "broker-4=0, broker-5=0" in stopped, stopped
    for nid in (1, 2, 3):
        assert f"controller-{nid}=-9 (had exited)" in stopped, stopped


def test_a_second_cluster_up_on_a_running_data_dir_exits_2_in_one_line(restart: Restart) -> None:
    code, out = restart.refused["running"]
    assert code == 2 and out.count("\n") == 1, out
    assert "is in use: is this cluster still running?" in out, out
    code, out = restart.refused["five"]
    assert code == 2 and out.count("\n") == 1, out
    assert "holds a 3-controller cluster: start it with --controllers 3" in out, out


def test_a_cluster_whose_every_process_exits_with_an_error_stops_with_exit_1(
    tmp_path: Path,
) -> None:
    """The controller cannot start (its data dir is held, as by another run): cluster
    up said so, then went on printing status lines with nothing running, and exited
    0 at its stop. Now it stops by itself once every process has exited, and exits
    1 naming the process that failed."""
    from kraft.raft_shell.dir_lock import hold_dir_lock

    data = tmp_path / "cluster"
    cmd = [
        sys.executable, "-m", "kraft.cli", "cluster", "up", "--controllers", "1",
        "--brokers", "0", "--data-dir", str(data), "--status-interval", "0.5",
    ]  # fmt: skip
    with hold_dir_lock(data / "controller-1"):
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:  # its only child has exited: nothing else to kill
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 1, out
    assert re.search(r"controller-1 exited with code 1: .*is in use by process", out), out
    assert "every process has exited: stopping" in out, out
    assert "kraft cluster up: controller-1 exited with an error" in out, out
