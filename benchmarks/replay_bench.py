"""Spark replay throughput: log -> all tables in Parquet, against one Python process.

For each size (default 1M and 10M records) this generates a seeded log (cached
under --work, since generating is not what is measured), then times, `--repeat`
times each (the JSON has every run and the median):

- ``spark``: the headline, end to end as the issue defines it (log -> all
  tables in Parquet): the `spark-replay` job (`spark_replay.cli.run_job`) on
  local[2] writing the records table and the four history tables. The
  SparkSession start-up is reported apart and not counted; the repeats run in
  the same session (the first is the cold one);
- ``single_process``: the same work in one Python process, no Spark
  (`spark_replay.one_process`): the same decoder (`spark_replay.decode.read_file`)
  writing the records table with pyarrow, and the four history tables computed
  record by record in one streaming pass (memory bounded by one segment's rows
  and the partitions, so it runs at 10M records too) and written with pyarrow. Its tables are compared
  with Spark's, row for row (``tables_equal``), so both did the same work (on
  logs up to --compare-max records; above, row counts);
- ``single_process_image_replay`` (with --image-replay): metadata_log's own
  replay of the log into a MetadataImage, no tables (its per-record decoder with
  full validation is several times slower than the vectorised one);
- ``spark_with_report`` (with --report-run): the job plus summary.json and
  report.html.

Prints one JSON document, with `uptime`'s load average at the start and end of
each run: figures depend on the machine (cores above all, and what else runs).
Usage::

    python benchmarks/replay_bench.py [--records 1000000 --records 10000000] [--repeat 3]
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

from metadata_log.replay import replay_log  # noqa: E402
from spark_replay.generator import generate, scaled_config  # noqa: E402
from spark_replay.one_process import write_tables  # noqa: E402
from spark_replay.tables import TABLE_COLUMNS  # noqa: E402


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


def load() -> float:
    """The 1-minute load average (the machine may be shared)."""
    return os.getloadavg()[0]


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time (the middle one; the faster of the two middle ones)."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return ordered[(len(ordered) - 1) // 2]


def bench_spark(master: str, data: Path, out: Path, report: bool, repeat: int) -> dict[str, Any]:
    from spark_replay.cli import run_job
    from spark_replay.session import build_session

    t = time.perf_counter()
    spark = build_session(master, progress=False)
    spark.range(1).count()  # JVM up
    startup = time.perf_counter() - t
    runs = []
    try:
        for _ in range(repeat):
            load0 = load()
            t = time.perf_counter()
            result = run_job(spark, data, out, report=report)
            elapsed = time.perf_counter() - t
            n = result["info"]["record_count"]
            runs.append(
                {
                    "seconds": round(elapsed, 2),
                    "records_per_s": round(n / elapsed),
                    "stages_s": {k: round(v, 2) for k, v in result["timings"].items()},
                    "load_1min": [round(load0, 2), round(load(), 2)],
                }
            )
            print(json.dumps({"spark": runs[-1]}), file=sys.stderr, flush=True)
    finally:
        spark.stop()
    return {"median": median_of(runs), "session_startup_s": round(startup, 2), "runs": runs}


def bench_single_image(data: Path, records: int) -> dict[str, Any]:
    t = time.perf_counter()
    image = replay_log(data)
    elapsed = time.perf_counter() - t
    return {
        "seconds": round(elapsed, 2),
        "records_per_s": round(records / elapsed),
        "final_offset": image.offset,
    }


def bench_single(data: Path, out: Path, repeat: int) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        load0 = load()
        t = time.perf_counter()
        n = write_tables(data, out)
        elapsed = time.perf_counter() - t
        runs.append(
            {
                "seconds": round(elapsed, 2),
                "records_per_s": round(n / elapsed),
                "load_1min": [round(load0, 2), round(load(), 2)],
                # this process's peak so far (the Spark driver side before it is small)
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
        )
        print(json.dumps({"single_process": runs[-1]}), file=sys.stderr, flush=True)
    return {"median": median_of(runs), "runs": runs}


def count_rows(a: Path, b: Path) -> dict[str, Any]:
    """Per table: do the one-process and Spark outputs hold as many rows?"""
    import pyarrow.parquet as pq

    result = {}
    for name in TABLE_COLUMNS:
        na, nb = (pq.ParquetDataset(d / name).read(columns=[]).num_rows for d in (a, b))
        result[name] = {"rows": nb, "same_count": na == nb}
    return result


def compare_tables(a: Path, b: Path) -> dict[str, Any]:
    """Per table: do the one-process and Spark outputs hold the same rows?"""
    import pyarrow.parquet as pq

    result = {}
    for name, cols in TABLE_COLUMNS.items():
        rows = []
        for d in (a, b):
            t = pq.read_table(d / name, columns=list(cols))
            rows.append(
                sorted(zip(*(t.column(c).to_pylist() for c in cols), strict=True), key=repr)
            )
        result[name] = {"rows": len(rows[1]), "equal": rows[0] == rows[1]}
    return result


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
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    ap.add_argument("--report-run", action="store_true", help="also time the job with the report")
    ap.add_argument(
        "--image-replay", action="store_true", help="also time metadata_log's image replay"
    )
    ap.add_argument(
        "--compare-max",
        type=int,
        default=2_000_000,
        help="compare the tables row for row up to this many records (row counts above)",
    )
    args = ap.parse_args(argv)
    sizes = args.records or [1_000_000, 10_000_000]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for size in sizes:
        data, meta = ensure_log(work, size, args.seed)
        n = meta["records"]
        spark_out = work / f"out-{size}-tables"
        single_out = work / f"single-{size}"
        spark = bench_spark(args.master, data, spark_out, False, args.repeat)
        run: dict[str, Any] = {
            "records": n,
            "segments": meta["segments"],
            "log_bytes": sum(
                f.stat().st_size for f in (data / "__cluster_metadata-0").glob("*.log")
            ),
            "simulated_hours": meta["simulated_hours"],
            "spark_records_per_s": spark["median"]["records_per_s"],
        }
        single = bench_single(data, single_out, args.repeat)
        same = (
            compare_tables(single_out, spark_out)
            if n <= args.compare_max
            else count_rows(single_out, spark_out)
        )
        run["single_process_records_per_s"] = single["median"]["records_per_s"]
        run["speedup_vs_single_process"] = round(
            single["median"]["seconds"] / spark["median"]["seconds"], 2
        )
        run["single_process"] = single
        run["tables_equal"] = same
        run["spark"] = spark
        shutil.rmtree(single_out, ignore_errors=True)
        if args.image_replay:
            run["single_process_image_replay"] = bench_single_image(data, n)
        if args.report_run:
            run["spark_with_report"] = bench_spark(args.master, data, work / f"out-{size}", True, 1)
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
