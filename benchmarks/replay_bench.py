"""Spark replay throughput: log -> all tables in Parquet, against one Python process.

For each size (default 1M and 10M records) this generates a seeded log (cached
under --work, since generating is not what is measured), then times:

- ``spark``: the headline, end to end as the issue defines it (log -> all
  tables in Parquet): the `spark-replay` job on local[2] writing the records
  table and the four history tables, in a fresh SparkSession; the SparkSession
  start-up is reported apart and not counted;
- ``spark_with_report``: the same job plus summary.json and report.html;
- ``single_process``: pure-Python replay of the same log in one process
  (`metadata_log.replay.replay_log`: verify, decode and apply every record to a
  MetadataImage) — the in-process alternative to Spark;
- ``single_process_records_table_only``: the Spark job's first stage (decode to
  Arrow, write the records table) in one process with pyarrow, for comparison
  with the Spark ``records_s`` stage.

Prints one JSON document. Figures depend on the machine (cores above all);
`cpu_count` is in the output. Usage::

    python benchmarks/replay_bench.py [--records 1000000 --records 10000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metadata_log.replay import replay_log  # noqa: E402
from spark_replay.generator import generate, scaled_config  # noqa: E402


def ensure_log(work: Path, records: int, seed: int) -> tuple[Path, dict[str, Any]]:
    """A cached generated log of `records` records."""
    data = work / f"log-{records}-{seed}-v2"
    meta_file = data / "generated.json"
    if meta_file.exists():
        return data, json.loads(meta_file.read_text())
    if data.exists():
        shutil.rmtree(data)
    t = time.perf_counter()
    meta = generate(data, scaled_config(records, seed))
    meta["generate_s"] = round(time.perf_counter() - t, 2)
    meta_file.write_text(json.dumps(meta))
    return data, meta


def bench_spark(master: str, data: Path, out: Path, report: bool) -> dict[str, Any]:
    from spark_replay.cli import run_job
    from spark_replay.session import build_session

    t = time.perf_counter()
    spark = build_session(master, progress=False)
    spark.range(1).count()  # JVM up
    startup = time.perf_counter() - t
    try:
        if out.exists():
            shutil.rmtree(out)
        t = time.perf_counter()
        result = run_job(spark, data, out, report=report)
        elapsed = time.perf_counter() - t
    finally:
        spark.stop()
    n = result["info"]["record_count"]
    return {
        "seconds": round(elapsed, 2),
        "records_per_s": round(n / elapsed),
        "session_startup_s": round(startup, 2),
        "stages_s": {k: round(v, 2) for k, v in result["timings"].items()},
    }


def bench_single(data: Path, records: int) -> dict[str, Any]:
    t = time.perf_counter()
    image = replay_log(data)
    elapsed = time.perf_counter() - t
    return {
        "seconds": round(elapsed, 2),
        "records_per_s": round(records / elapsed),
        "final_offset": image.offset,
    }


def bench_single_records(data: Path, out: Path) -> dict[str, Any]:
    """One process, the records table only: the Spark job's first-stage task
    (`spark_replay.records.write_part`: decode to Arrow, write Parquet with
    pyarrow) run over every file in turn, without Spark: shows what the
    one-task-per-file parallelism buys."""
    from spark_replay.datasource import list_log_files
    from spark_replay.records import write_part

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t = time.perf_counter()
    n = sum(write_part(i, f, str(out))["records"] for i, f in enumerate(list_log_files(data)))
    elapsed = time.perf_counter() - t
    shutil.rmtree(out)
    return {"seconds": round(elapsed, 2), "records_per_s": round(n / elapsed)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--records",
        type=int,
        action="append",
        help="log size (repeatable); default 1000000 and 10000000",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work", default="/tmp/kraft-replay-bench", help="cache of generated logs")
    ap.add_argument(
        "--no-report-run", action="store_true", help="skip the run with summary and report"
    )
    args = ap.parse_args(argv)
    sizes = args.records or [1_000_000, 10_000_000]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for size in sizes:
        data, meta = ensure_log(work, size, args.seed)
        n = meta["records"]
        single = bench_single(data, n)
        single_records = bench_single_records(data, work / f"single-records-{size}")
        spark_tables = bench_spark(args.master, data, work / f"out-{size}-tables", report=False)
        run: dict[str, Any] = {
            "records": n,
            "segments": meta["segments"],
            "log_bytes": sum(
                f.stat().st_size for f in (data / "__cluster_metadata-0").glob("*.log")
            ),
            "simulated_hours": meta["simulated_hours"],
            "spark": spark_tables,
            "single_process": single,
            "single_process_records_table_only": single_records,
            "records_stage_speedup_vs_single_process": round(
                single_records["seconds"] / spark_tables["stages_s"]["records_s"], 2
            ),
            "speedup_vs_single_process": round(
                spark_tables["records_per_s"] / single["records_per_s"], 2
            ),
        }
        if not args.no_report_run:
            run["spark_with_report"] = bench_spark(
                args.master, data, work / f"out-{size}", report=True
            )
        runs.append(run)
        print(json.dumps(run), file=sys.stderr)
    print(
        json.dumps(
            {
                "benchmark": "spark_replay end to end (log -> all tables in Parquet)",
                "master": args.master,
                "cpu_count": os.cpu_count(),
                "goal": {"records_per_s": 500_000, "speedup_vs_single_process_at_10M": 1.5},
                "runs": runs,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
