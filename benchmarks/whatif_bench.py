"""What-if cost: a grid of scenarios over a generated log against one plain replay.

Issue 20's goal: a grid of 8 scenarios over a 1M-record log on local[2] in under
2x the time of one plain `spark-replay` of that log. The log is the seeded one of
benchmarks/replay_bench.py (cached under --work, shared with it). Both jobs run
in one SparkSession (start-up not counted), alternating, `--repeat` times each;
each run reports the 1-minute load and the CPU seconds other processes used
meanwhile (/proc/stat less this process tree's own). Prints one JSON document:
every run, the medians, their ratio and whether the goal is met, and the
identity check of the what-if runs.

Usage::

    flock /tmp/kraft-heavy.lock python benchmarks/whatif_bench.py [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.replay_bench import _machine_busy_s, ensure_log, load  # noqa: E402

GOAL = 2.0
# Eight scenarios: the in-force one (the identity check) and seven changes.
GRID = [
    {"set": {"unclean.leader.election.enable": True}},
    {"set": {"broker.session.timeout.ms": 30000}},
    {"set": {"broker.session.timeout.ms": 3000}},
    {"set": {"controlled.shutdown.enable": False}},
    {"set": {"replica.placement": "rack-aware"}},
    {"set": {"replica.placement": "rack-unaware"}},
    {
        "name": "unclean+30s",
        "set": {"unclean.leader.election.enable": True, "broker.session.timeout.ms": 30000},
    },
]


def _own_cpu() -> float:
    """CPU seconds of this process and its (waited-for and live) children: the
    JVM and the Python workers are children of the driver."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    clk = os.sysconf("SC_CLK_TCK")
    for pid in _descendants(os.getpid()):
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(f[11]) + int(f[12])) / clk
    return total


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def timed(fn: Any) -> dict[str, Any]:
    load0, busy0, own0 = load(), _machine_busy_s(), _own_cpu()
    t = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t
    busy, own = _machine_busy_s() - busy0, _own_cpu() - own0
    return {
        "seconds": round(seconds, 3),
        "load": [round(load0, 2), round(load(), 2)],
        "other_processes_cpu_s": round(max(0.0, busy - own), 1),
        "result": result,
    }


def median(runs: list[dict[str, Any]]) -> float:
    xs = sorted(r["seconds"] for r in runs)
    return xs[(len(xs) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work", default="/tmp/kraft-replay-bench", help="cache of generated logs")
    args = ap.parse_args(argv)

    from spark_replay.cli import run_job
    from spark_replay.session import build_session
    from spark_replay.whatif.job import run_whatif
    from spark_replay.whatif.scenario import build_scenarios

    work = Path(args.work)
    data, meta = ensure_log(work, args.records, args.seed)
    grid = work / "whatif-grid.json"
    grid.write_text(json.dumps(GRID))
    scenarios = build_scenarios([], grid=grid)
    out = work / "whatif-out"
    t = time.perf_counter()
    spark = build_session(args.master, app_name="whatif-bench", progress=False)
    startup = time.perf_counter() - t
    plain: list[dict[str, Any]] = []
    whatif: list[dict[str, Any]] = []
    try:
        for _ in range(args.repeat):
            shutil.rmtree(out, ignore_errors=True)
            r = timed(lambda: run_job(spark, data, out / "plain", report=True))
            r["result"] = {k: round(v, 2) for k, v in r["result"]["timings"].items()}
            plain.append(r)
            r = timed(lambda: run_whatif(spark, data, out / "whatif", scenarios, report=True))
            summary = r["result"]
            r["result"] = {
                "timings": summary["timings"],
                "identity": summary["identity"]["holds"],
                "scenario_task_s": {s["name"]: s["seconds"] for s in summary["scenarios"]},
            }
            whatif.append(r)
            print(
                json.dumps({"plain_s": plain[-1]["seconds"], "whatif_s": r["seconds"]}),
                file=sys.stderr,
            )
    finally:
        spark.stop()
    ratio = median(whatif) / median(plain)
    print(
        json.dumps(
            {
                "records": meta.get("records"),
                "log": str(data),
                "master": args.master,
                "scenarios": len(scenarios),
                "spark_startup_s": round(startup, 2),
                "plain_replay": {"median_s": median(plain), "runs": plain},
                "whatif_grid": {"median_s": median(whatif), "runs": whatif},
                "ratio": round(ratio, 2),
                "goal_ratio": GOAL,
                "goal_met": ratio < GOAL,
                "cpus": os.cpu_count(),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
