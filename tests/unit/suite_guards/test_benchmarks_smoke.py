"""Every script in benchmarks/ runs with its smallest settings and prints its JSON.

A benchmark nobody runs breaks unnoticed (`make bench QUICK=1` once did). Each one
here runs as a real process, as `make bench` runs it, with the smallest flags it
has, and its JSON must parse and carry the keys its readers use. Never a timing:
a figure may be anything, only its presence is checked. A new script in
benchmarks/ without a case here fails `test_every_benchmark_has_a_smoke_case`.

The multi-process benchmarks (raft, controller, fleet, security) start real
controllers on 127.0.0.1 with free ports; each bench kills exactly the processes
it started, and each run here is bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
BENCHMARKS = REPO / "benchmarks"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    # dotted paths into the JSON (an int part indexes a list)
    keys: tuple[str, ...]
    timeout_s: float = 120.0


def _whatif_args(tmp: Path) -> tuple[str, ...]:
    """whatif_bench's smallest run: a 2,000-record log, one run, one core."""
    return (
        "--records",
        "2000",
        "--repeat",
        "1",
        "--master",
        "local[1]",
        "--work",
        str(tmp / "whatif"),
    )


def _cases(tmp: Path, target: str) -> dict[str, Case]:
    return {
        "fence_apply_bench": Case(
            ("--partitions", "2000"),
            (
                "records",
                "stages_s.leader_generate",
                "us_per_record.standby_replay_end",
                "images_equal",
            ),
        ),
        "log_bench": Case(
            ("--quick", "--dir", str(tmp)),
            ("durable_append.1000", "append_no_fsync", "read_decode", "encode", "goals_met"),
        ),
        "purgatory_bench": Case(
            ("--quick",),
            (
                "heap_sortedlist.park_complete_us",
                "timing_wheel.park_expire_us",
                "asyncio_timers.wake_all_ms",
            ),
        ),
        "kafka_decode_bench": Case(
            ("--records", "2000", "--runs", "1", "--codecs", "none,zstd"),
            (
                "records",
                "native.records_per_s",
                "kafka.none.records_per_s",
                "kafka.none.natives_only_time_vs_native",
                "kafka.zstd.write_records_per_s",
                "kafka.none.task_rows_time_vs_native",
            ),
        ),
        "http_floor": Case(
            ("--seconds", "0.3", "--requests", "30", "--connections", "4"),
            (
                "aiohttp_server_capacity.requests_per_s",
                "aiohttp_round_trip.p99_ms",
                "fsync_p50_ms.one_file",
            ),
        ),
        "connection_flood": Case(
            (
                "--target",
                target,
                "--connections",
                "8",
                "--sources",
                "127.0.0.2-127.0.0.3",
                "--seconds",
                "0.5",
            ),  # fmt: skip
            ("connects", "closed_by_server", "max_held", "sources"),
        ),
        "replay_bench": Case(
            (
                "--records",
                "3000",
                "--repeat",
                "1",
                "--modes",
                "one_process",
                "--formats",
                "kraft,kafka",
                "--shape",
                "busy",
                "--work",
                str(tmp / "replay"),
            ),  # fmt: skip
            (
                "runs.0.one_process.median.seconds",
                "runs.0.one_process_kafka.median.records_per_s",
                "runs.0.kafka_vs_kraft_one_process",
                "runs.0.tables_hash.one_process_kafka",
                "runs.0.tables_equal",
                "runs.0.record_mix.records_by_type.NoOpRecord",
            ),
        ),
        "security_bench": Case(
            ("--seconds", "0.3", "--brokers", "2"),
            ("token_verify", "plain", "tokens", "tls+tokens"),
        ),
        "raft_bench": Case(
            (
                "--quick",
                "--duration",
                "0.5",
                "--writers",
                "4",
                "--records-per-write",
                "1",
                "--kills",
                "1",
                "--pysyncobj-batching",
                "on",
            ),  # fmt: skip
            (
                "setup.data_dir_filesystem.type",
                "setup.fsync.measured_leader_fsyncs",
                "kraft.throughput",
                "pysyncobj.durable_batching_on.throughput",
                "kraft_vs_durable_pysyncobj_best_throughput",
                "goals",
            ),
            timeout_s=240.0,
        ),
        "controller_bench": Case(
            (
                "--brokers",
                "16",
                "--connections",
                "4",
                "--duration",
                "0.5",
                "--interval-ms",
                "200",
                "--session-ms",
                "1500",
                "--big-partitions",
                "30",
                "--big-topics",
                "1",
                "--snapshot-partitions",
                "2000",
            ),  # fmt: skip
            (
                "heartbeats.achieved_per_s",
                "heartbeats.spurious_fences",
                "heartbeats.spurious_fences_whole_run",
                "heartbeats.deliberately_fenced",
                "fence_detection.median_ms_after_session_expiry",
                "fence_100k_partitions.fence_records",
                "fsyncs_by_controller",
                "setup.data_dir_filesystem.type",
                "snapshot.loaded_equal",
                "snapshot.peak_rss_mib_after_load",
            ),
            timeout_s=240.0,
        ),
        "replay_profile": Case(
            (
                "--log-dir",
                str(REPO / "tests" / "fixtures" / "whatif" / "demo-log"),
                "--out",
                str(tmp / "profile"),
                "--master",
                "local[1]",
                "--runs",
                "1",
            ),  # fmt: skip
            ("wall_s", "driver_cpu_s", "jvm_cpu_s", "driver_by_function", "timings"),
            timeout_s=240.0,
        ),
        "whatif_bench": Case(
            _whatif_args(tmp),
            ("plain_replay.median_s", "whatif_grid.median_s", "ratio", "goal_met"),
            timeout_s=240.0,
        ),
        "fleet_bench": Case(
            (
                "--count",
                "4",
                "--duration",
                "0.5",
                "--partitions",
                "3",
                "--settle",
                "0.2",
                "--sample-s",
                "0.2",
                "--heartbeat-ms",
                "200",
                "--session-ms",
                "1500",
            ),  # fmt: skip
            (
                "controllers_elected_s",
                "startup_all_running_s",
                "hold.heartbeats_per_s",
                "hold.spurious_fences",
                "fleet_shutdown",
            ),
            timeout_s=240.0,
        ),
    }


def _dig(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(doc, list):
            doc = doc[int(part)]
        else:
            if part not in doc:
                raise KeyError(path)
            doc = doc[part]
    return doc


def _json_of(stdout: str) -> Any:
    """The benchmark's JSON: the whole stdout, or else its last line."""
    text = stdout.strip()
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text.splitlines()[-1])


@pytest.fixture(scope="module")
def flood_target() -> Iterator[str]:
    """A listener for connection_flood: accepts, then closes each connection after
    its first bytes (a server refusing half a request head)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):
                    conn.recv(4096)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        srv.close()
        thread.join(5)


def _names() -> list[str]:
    # a leading underscore marks a helper module, not a benchmark
    return sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def test_every_benchmark_has_a_smoke_case(tmp_path: Path) -> None:
    missing = set(_names()) - set(_cases(tmp_path, "127.0.0.1:1"))
    assert not missing, f"benchmarks without a smoke case here: {sorted(missing)}"


def _modes(tmp: Path) -> dict[str, tuple[str, Case]]:
    """A benchmark's other modes, each with its own JSON: (script, case)."""
    return {
        # also checks, per scenario, the tables built from the records' objects
        # against the shared rules' (the run fails when they differ)
        "whatif_bench --floor": (
            "whatif_bench",
            Case(
                ("--floor", *_whatif_args(tmp)),
                (
                    "plain_replay.median_s",
                    "floor.scenarios.in-force.controller_replay_cpu_s",
                    "floor.floor_ratio",
                    "floor.left_for_engines_beyond_replay_cpu_s",
                ),
                timeout_s=240.0,
            ),
        ),
        # one process, no Spark: where each scenario's log and state part from the actual's
        "whatif_bench --divergence": (
            "whatif_bench",
            Case(
                ("--divergence", "--records", "2000", "--work", str(tmp / "whatif")),
                (
                    "scenarios.1.first_differing_offset",
                    "scenarios.1.same_rows",
                    "scenarios.1.isr_changes",
                    "scenarios.1.isr_changes_meeting_the_actual_state",
                    "scenarios.1.isr_changes_before_the_partitions_first_difference",
                    "actual_isr_change_runs.runs",
                    "actual_isr_change_runs.runs_ended_by_another_record",
                ),
                timeout_s=240.0,
            ),
        ),
    }


def _assert_keys(doc: Any, case: Case, where: str) -> None:
    absent = []
    for key in case.keys:
        try:
            _dig(doc, key)
        except (KeyError, IndexError, TypeError):
            absent.append(key)
    assert not absent, f"keys missing from the JSON: {absent}\n{json.dumps(doc)[:3000]}\n{where}"


def _run(name: str, case: Case, tmp: Path) -> tuple[Any, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *case.args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=case.timeout_s,
        stdin=subprocess.DEVNULL,
    )
    where = f"{name} {' '.join(case.args)}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}: {where}"
    try:
        return _json_of(proc.stdout), where
    except (ValueError, IndexError) as e:
        raise AssertionError(f"no JSON on stdout ({e}): {proc.stdout[-2000:]}\n{where}") from e


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", _names())
def test_benchmark_prints_its_json(
    name: str, tmp_path: Path, flood_target: str, request: pytest.FixtureRequest
) -> None:
    case = _cases(tmp_path, flood_target)[name]
    doc, where = _run(name, case, tmp_path)
    _assert_keys(doc, case, where)
    check: Callable[[Any], None] | None = _EXTRA.get(name)
    if check is not None:
        check(doc)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", sorted(_modes(Path("/"))))
def test_benchmark_mode_prints_its_json(mode: str, tmp_path: Path) -> None:
    name, case = _modes(tmp_path)[mode]
    doc, where = _run(name, case, tmp_path)
    _assert_keys(doc, case, where)
    check: Callable[[Any], None] | None = _MODE_EXTRA.get(mode)
    if check is not None:
        check(doc)


def _isr_change_runs(doc: Any) -> None:
    # a run holds at least one ISR change; another record ends at most each run once
    # (the in-force scenario is handed every lone ISR change of the log, and more
    # when AlterPartitions were group-committed)
    r = doc["actual_isr_change_runs"]
    assert 0 < r["runs"] <= r["isr_changes"] <= doc["scenarios"][0]["isr_changes"], r
    assert 0 < r["runs_ended_by_another_record"] <= r["runs"], r


_MODE_EXTRA: dict[str, Callable[[Any], None]] = {
    "whatif_bench --divergence": _isr_change_runs,
}


def _replay_tables_equal(doc: Any) -> None:
    # the same story in both formats must give the same tables (a measured label)
    assert doc["runs"][0]["tables_equal"] is True, doc["runs"][0]["tables_hash"]


def _controller_labels(doc: Any) -> None:
    hb = doc["heartbeats"]
    # counted from the log: at most the brokers the bench silenced
    assert 0 <= hb["deliberately_fenced"] <= hb["silenced"], hb
    assert doc["snapshot"]["loaded_equal"] is True, doc["snapshot"]
    # every controller counted its own fsyncs (a Raft log cannot commit without them)
    assert all(n is not None and n > 0 for n in doc["fsyncs_by_controller"].values()), doc


def _fence_images_equal(doc: Any) -> None:
    # the leader's and the standby's image after the fence must be equal (a measured label)
    assert doc["images_equal"] is True, doc


_EXTRA: dict[str, Callable[[Any], None]] = {
    "fence_apply_bench": _fence_images_equal,
    "replay_bench": _replay_tables_equal,
    "controller_bench": _controller_labels,
}
