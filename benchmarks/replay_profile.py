"""Where the driver's Python and the JVM spend their CPU in one `spark-replay` run
(issue 18: which stage stands between a figure and its goal).

``python benchmarks/replay_profile.py --log-dir DIR [--master local[2]] [--runs 2]``
runs `spark_replay.cli.run_job` (no report) on one SparkSession `--runs` times
(the first with a cold JVM) and prints one JSON document per run:

- the driver's CPU seconds (process, main thread) and, per driver function of
  `spark_replay.replay_job` (the fold, a replay task's starting state, the ends
  of the open rows, ...), its thread CPU seconds and calls; ``job thread CPU
  LANE``: the driver threads that submit the one-task Spark jobs and collect
  their results;
- the JVM's CPU seconds by thread name (/proc/PID/task: JIT compilers, GC, the
  executor's task threads, the DAG scheduler, ...);
- the job's own timings and task profile (`replay_job.stage_profile`).

The wrappers cost a thread_time() call per wrapped call (a few hundred per run).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import spark_replay.history as H  # noqa: E402
import spark_replay.replay_job as RJ  # noqa: E402
import spark_replay.segment_replay as SR  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
CPU: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()
LOCK = threading.Lock()


def _add(label: str, cpu: float) -> None:
    with LOCK:
        CPU[label] += cpu
        CALLS[label] += 1


def _timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(label, time.thread_time() - c)

    return wrapper


def instrument() -> None:
    """Wrap the driver's functions (module attributes, as replay_log calls them)."""
    for name in (
        "replay_item",
        "load_summary",
        "load_open",
        "next_points",
        "close_open",
        "broker_history",
        "plan_files",
        "stats_from_dict",
    ):
        setattr(RJ, name, _timed(name, getattr(RJ, name)))
    H.info_from_stats = _timed("info_from_stats", H.info_from_stats)
    SR.PrefixFold.push = _timed("PrefixFold.push", SR.PrefixFold.push)  # type: ignore[method-assign]
    job = RJ.SparkRunner._job

    def timed_job(self: Any, fn: Any, item: Any, lane: str) -> Any:
        c = time.thread_time()
        try:
            return job(self, fn, item, lane)
        finally:
            _add(f"job thread CPU {lane}", time.thread_time() - c)

    RJ.SparkRunner._job = timed_job  # type: ignore[method-assign]


def jvm_threads(pid: int) -> collections.Counter[str]:
    """CPU seconds of a process's threads, by name (digits stripped: pools summed)."""
    out: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip().rstrip("0123456789 #-")
            f = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[name] += (int(f[11]) + int(f[12])) / CLK
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--out", default="/tmp/kraft-replay-profile")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args(argv)
    instrument()
    from pyspark import SparkContext

    from spark_replay.cli import run_job
    from spark_replay.session import build_session

    spark = build_session(args.master, progress=False)
    spark.range(1).count()  # JVM up
    jvm = SparkContext._gateway.proc.pid  # type: ignore[union-attr]
    try:
        for run in range(args.runs):
            CPU.clear()
            CALLS.clear()
            j0, r0, m0 = jvm_threads(jvm), os.times(), time.thread_time()
            t = time.perf_counter()
            result = run_job(spark, args.log_dir, args.out, report=False)
            wall = time.perf_counter() - t
            m1, r1, j1 = time.thread_time(), os.times(), jvm_threads(jvm)
            by_thread = {k: round(v - j0.get(k, 0.0), 2) for k, v in j1.items()}
            doc = {
                "run": run,
                "master": args.master,
                "wall_s": round(wall, 2),
                "load_1min": round(os.getloadavg()[0], 2),
                "driver_cpu_s": round(r1.user + r1.system - r0.user - r0.system, 2),
                "driver_main_thread_cpu_s": round(m1 - m0, 2),
                "driver_by_function": {
                    k: {"cpu_s": round(v, 3), "calls": CALLS[k]} for k, v in CPU.most_common()
                },
                "jvm_cpu_s": round(sum(by_thread.values()), 2),
                "jvm_by_thread": {
                    k: v for k, v in sorted(by_thread.items(), key=lambda x: -x[1]) if v >= 0.05
                },
                "timings": {k: round(v, 2) for k, v in result["timings"].items()},
                "task_profile": result["task_profile"],
            }
            print(json.dumps(doc, indent=1), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
