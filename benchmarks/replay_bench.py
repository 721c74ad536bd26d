"""Spark replay throughput: log -> all tables in Parquet, against one Python process.

For each size (default 1M and 10M records) this generates a seeded log (cached
under --work: generating is not what is measured), then times, `--repeat` times
each (the JSON has every run and the median), the modes of --modes (each run also reports the CPU seconds
that other processes of the machine used meanwhile, from /proc/stat):

- ``one_process``: ``python -m spark_replay.one_process`` in a child process:
  the same functions as the Spark tasks (records parts, summaries, the
  vectorised replay) run one after another on one core. Its CPU seconds and
  peak RSS (VmHWM, from wait4) are the child's;
- ``local2`` / ``local1``: the `spark-replay` job (`spark_replay.cli.run_job`,
  records and the four history tables) on local[2] / local[1], SparkSession
  start-up reported apart and not counted; the repeats share the session (the
  first is the cold one). local[1] -> local[2] is the scaling figure;
- ``cluster``: the same job on a standalone cluster of --cluster-workers
  one-core workers started from pyspark's distribution (`spark_replay.cluster`).

Per Spark run: CPU seconds per million records of the driver's JVM, of the
Python workers below it (or the executors' JVMs and their Python workers on
a cluster) and of the driver's Python, from /proc (a Python worker that exits
during a run is counted through its parent's cutime); peak RSS (VmHWM) of the
JVM, the largest Python worker and the driver.

Tables are compared across modes by a hash of their rows sorted by each table's
key (`tables_hash`), at every size. Prints one JSON document; `uptime`'s load at
the start and end of each run goes with it (figures depend on what else runs).
With ``--formats kraft,kafka`` each size is also rewritten in Apache Kafka's
format (`metadata_log.kafka.writer`, batch for batch at the same offsets; cached
too) and every mode runs on both: keys ``MODE`` (native) and ``MODE_kafka``, the
ratio ``kafka_vs_kraft_MODE`` (the issue 23 goal: at most 1.3), and the tables of
both formats in the same hash comparison (they must be equal).
With ``--shape busy`` the story is shaped like a busy real cluster's log (BUSY
below: mostly NoOpRecords one per batch, PartitionChangeRecords from ISR churn and
rolling restarts, BrokerRegistrationChangeRecords); each run then carries the
log's measured `record_mix`. ``--generate-only`` writes (and caches) the logs of
every size and format and prints where they are, with the mix: the generator of
both formats from one story.
Usage::

    python benchmarks/replay_bench.py [--records 1000000 --records 10000000] [--repeat 3]
        [--modes one_process,local2,local1,cluster] [--formats kraft,kafka]
        [--shape story|busy] [--generate-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from spark_replay.generator import generate, scaled_config  # noqa: E402
from spark_replay.tables import TABLE_COLUMNS  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
# A key that orders each table's rows uniquely (for the hash of the sorted rows).
SORT_KEYS = {
    "broker_history": ("broker_id", "start_offset"),
    "partition_history": ("topic_id", "partition_id", "start_offset"),
    "leader_elections": ("offset",),
    "offline_partitions": ("topic_id", "partition_id", "start_offset"),
}


# The busy shape (issue 23): a long-lived busy cluster's log is mostly the active
# controller's NoOpRecords (one every metadata.max.idle.interval.ms = 500 ms, one per
# batch, as KRaft writes them), with AlterPartition ISR shrinks and expands, and
# rolling restarts (controlled shutdowns: BrokerRegistrationChangeRecords, then the
# leaders moving: PartitionChangeRecords) far more often than crashes, topic churn,
# admin elections or controller failovers. The generator steps ~500 ms of simulated
# time, so a quiet step writes one NoOp; the rates are per step. Measured mix (seed
# 1): at 1M 80.4% NoOpRecord, 18.3% PartitionChangeRecord, 1.3% PartitionRecord;
# at 10M (more brokers and partitions, scaled_config) 64.0%, 32.8%, 3.1%; the rest
# < 0.05% (each run's JSON carries the exact counts by type: `record_mix`).
BUSY = {
    "step_ms": (400, 600),
    "isr_shrink_rate": 0.03,
    "shutdown_rate": 0.00006,
    "crash_rate": 0.00001,
    "topic_churn_rate": 0.00002,
    "admin_rate": 0.0003,
    "failover_rate": 0.00002,
}
SHAPES = {"story": {}, "busy": BUSY}


def record_mix(data: Path) -> dict[str, Any]:
    """Records by type and batches of a native log (every batch decoded)."""
    from collections import Counter

    from metadata_log.replay import iter_file_batches, segment_files

    counts: Counter[str] = Counter()
    batches = 0
    segments = segment_files(data / "__cluster_metadata-0")
    for k, (_base, path) in enumerate(segments):
        for b in iter_file_batches(path, allow_torn_tail=k == len(segments) - 1):
            batches += 1
            counts.update(type(r).__name__ for r in b.records)
    total = sum(counts.values())
    return {
        "batches": batches,
        "records_by_type": dict(counts.most_common()),
        "share_by_type": {k: round(v / total, 4) for k, v in counts.most_common()},
    }


def ensure_log(
    work: Path, records: int, seed: int, shape: str = "story"
) -> tuple[Path, dict[str, Any]]:
    """A cached generated log of `records` records of the given shape (SHAPES)."""
    data = work / (
        f"log-{records}-{seed}-v2" if shape == "story" else f"log-{records}-{seed}-{shape}-v1"
    )
    meta_file = data / "generated.json"
    if meta_file.exists():
        return data, json.loads(meta_file.read_text())
    if data.exists():
        shutil.rmtree(data)
    t = time.perf_counter()
    meta = generate(data, scaled_config(records, seed, **SHAPES[shape]))
    meta["generate_s"] = round(time.perf_counter() - t, 2)
    meta["shape"] = shape
    if shape != "story":
        meta["record_mix"] = record_mix(data)
    meta_file.write_text(json.dumps(meta))
    return data, meta


def ensure_kafka_log(native: Path) -> Path:
    """The native log rewritten in Kafka's format (cached beside it)."""
    from metadata_log.kafka.writer import write_kafka_log

    data = native.with_name(native.name + "-kafka")
    done = data / "written.json"
    if done.exists():
        return data
    if data.exists():
        shutil.rmtree(data)
    t = time.perf_counter()
    n = write_kafka_log(native, data)
    done.write_text(json.dumps({"records": n, "write_s": round(time.perf_counter() - t, 2)}))
    return data


def load() -> float:
    """The 1-minute load average (the machine may be shared)."""
    return os.getloadavg()[0]


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time (the middle one; the faster of the two middle ones)."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return ordered[(len(ordered) - 1) // 2]


# ----------------------------------------------------------------------------- /proc


def _stat(pid: int) -> tuple[float, float] | None:
    """(own CPU s, reaped children's CPU s) of a process."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / CLK, (int(f[13]) + int(f[14])) / CLK


def _hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _is_jvm(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name == "java"
    except OSError:
        return False


def _tree(roots: list[int]) -> list[int]:
    from spark_replay.cluster import _descendants

    return [p for r in roots for p in (r, *_descendants(r))]


class ProcSample:
    """CPU seconds of a process tree split into JVMs and Python processes."""

    def __init__(self, roots: list[int]) -> None:
        self.jvm = self.python = 0.0
        self.peak_jvm_mb = self.peak_python_mb = 0.0
        for pid in _tree(roots):
            s = _stat(pid)
            if s is None:
                continue
            if _is_jvm(pid):
                self.jvm += s[0]
                self.peak_jvm_mb = max(self.peak_jvm_mb, _hwm_mb(pid))
            else:  # a Python worker (or the daemon, with its exited workers' CPU)
                self.python += s[0] + s[1]
                self.peak_python_mb = max(self.peak_python_mb, _hwm_mb(pid))


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat): less
    a run's own CPU, what else ran during it."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = f[:8]
    return (user + nice + system + irq + softirq + steal) / CLK


def _reset_peak_rss() -> None:
    """Start this process's VmHWM afresh (Linux: clear_refs 5), so that a run's
    peak is its own, not the table hashing's before it."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _driver_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ----------------------------------------------------------------------------- modes


def bench_spark(
    master: str, data: Path, out: Path, repeat: int, roots: list[int] | None = None
) -> dict[str, Any]:
    """`repeat` runs of the job on `master`; `roots`: the processes doing the work
    besides the driver's JVM (a cluster's workers)."""
    from pyspark import SparkContext

    from spark_replay.cli import run_job
    from spark_replay.session import build_session

    t = time.perf_counter()
    spark = build_session(master, progress=False)
    spark.range(1).count()  # JVM up
    startup = time.perf_counter() - t
    jvm_pid = SparkContext._gateway.proc.pid  # type: ignore[union-attr]
    tree = [jvm_pid, *(roots or [])]
    runs = []
    try:
        for _ in range(repeat):
            load0 = load()
            _reset_peak_rss()
            before, d0, m0 = ProcSample(tree), _driver_cpu(), _machine_busy_s()
            t = time.perf_counter()
            result = run_job(spark, data, out, report=False)
            elapsed = time.perf_counter() - t
            after, d1, m1 = ProcSample(tree), _driver_cpu(), _machine_busy_s()
            own = (after.jvm - before.jvm) + (after.python - before.python) + (d1 - d0)
            n = result["info"]["record_count"]
            m = n / 1e6
            runs.append(
                {
                    "seconds": round(elapsed, 2),
                    "records_per_s": round(n / elapsed),
                    "stages_s": {k: round(v, 2) for k, v in result["timings"].items()},
                    # per stage: tasks, busy share of the slots, tail, driver gaps
                    "task_profile": result.get("task_profile"),
                    "cpu_s_per_million": {
                        "jvm": round((after.jvm - before.jvm) / m, 2),
                        "python_workers": round((after.python - before.python) / m, 2),
                        "driver_python": round((d1 - d0) / m, 2),
                    },
                    "peak_rss_mb": {
                        "jvm": round(after.peak_jvm_mb),
                        "python_worker": round(after.peak_python_mb),
                        "driver_python": round(_hwm_mb(os.getpid())),
                    },
                    "load_1min": [round(load0, 2), round(load(), 2)],
                    "other_processes_cpu_s": round(max(0.0, (m1 - m0) - own), 1),
                }
            )
            print(json.dumps({master: runs[-1]}), file=sys.stderr, flush=True)
    finally:
        spark.stop()
    return {"median": median_of(runs), "session_startup_s": round(startup, 2), "runs": runs}


def bench_one_process(data: Path, out: Path, repeat: int, records: int) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        if out.exists():
            shutil.rmtree(out)
        load0 = load()
        m0 = _machine_busy_s()
        t = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spark_replay.one_process",
                "--log-dir",
                str(data),
                "--out",
                str(out),
            ],
            cwd=Path(__file__).resolve().parents[1],
        )
        _pid, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t
        other = (_machine_busy_s() - m0) - (usage.ru_utime + usage.ru_stime)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"one_process exited with {proc.returncode}")
        runs.append(
            {
                "seconds": round(elapsed, 2),
                "records_per_s": round(records / elapsed),
                "cpu_s_per_million": round((usage.ru_utime + usage.ru_stime) / (records / 1e6), 2),
                "peak_rss_mb": round(usage.ru_maxrss / 1024),
                "load_1min": [round(load0, 2), round(load(), 2)],
                "other_processes_cpu_s": round(max(0.0, other), 1),
            }
        )
        print(json.dumps({"one_process": runs[-1]}), file=sys.stderr, flush=True)
    return {"median": median_of(runs), "runs": runs}


def bench_cluster(workers: int, data: Path, out: Path, repeat: int) -> dict[str, Any]:
    from spark_replay.cluster import StandaloneCluster

    t = time.perf_counter()
    with StandaloneCluster(workers=workers, cores=1, memory="3g") as cluster:
        startup = time.perf_counter() - t
        result = bench_spark(cluster.master_url, data, out, repeat, roots=cluster.pids[1:])
    result["cluster"] = {"workers": workers, "cores_per_worker": 1, "startup_s": round(startup, 2)}
    return result


# ----------------------------------------------------------------------------- tables


def tables_hash(out: Path) -> dict[str, str]:
    """Per table: blake2b of its rows sorted by the table's key, as Arrow IPC
    batches in the canonical schema (so any two writers of the same rows agree)."""
    import pyarrow.parquet as pq

    from spark_replay.segment_replay import table_schema

    result = {}
    for name, cols in TABLE_COLUMNS.items():
        t = pq.read_table(out / name, columns=list(cols)).cast(table_schema(cols))
        t = t.sort_by([(k, "ascending") for k in SORT_KEYS[name]])
        h = hashlib.blake2b(digest_size=16)
        for batch in t.combine_chunks().to_batches(max_chunksize=1 << 16):
            h.update(batch.serialize())
        result[name] = f"{t.num_rows}:{h.hexdigest()}"
        del t
    # Hand the tables' memory back to the OS: the next run's peak RSS starts from
    # this process's RSS (_reset_peak_rss), and Arrow's allocator keeps freed pages.
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    return result


def generate_only(work: Path, sizes: list[int], seed: int, shape: str, formats: list[str]) -> int:
    """Write one story per size in every format (cached); print where and what."""
    logs = []
    for size in sizes:
        data, meta = ensure_log(work, size, seed, shape)
        entry: dict[str, Any] = {"records": meta["records"], "native": str(data), **meta}
        if "kafka" in formats:
            kafka = ensure_kafka_log(data)
            entry["kafka"] = str(kafka)
            entry["kafka_written"] = json.loads((kafka / "written.json").read_text())
        logs.append(entry)
    print(json.dumps({"shape": shape, "seed": seed, "logs": logs}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--records", type=int, action="append", help="log size (repeatable); default 1M and 10M"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--modes", default="one_process,local2", help="of one_process,local2,local1,cluster"
    )
    ap.add_argument("--cluster-workers", type=int, default=2)
    ap.add_argument("--work", default="/tmp/kraft-replay-bench", help="cache of generated logs")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    ap.add_argument("--formats", default="kraft", help="of kraft,kafka: the log's format(s)")
    ap.add_argument(
        "--shape", choices=sorted(SHAPES), default="story", help="the generated log's shape"
    )
    ap.add_argument(
        "--generate-only",
        action="store_true",
        help="write (and cache) the logs of every size and format, print their paths and mix",
    )
    args = ap.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not formats or set(formats) - {"kraft", "kafka"}:
        ap.error(f"--formats {args.formats!r}: a list of kraft, kafka")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"one_process", "local2", "local1", "cluster"}
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")
    sizes = args.records or [1_000_000, 10_000_000]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.generate_only:
        return generate_only(work, sizes, args.seed, args.shape, formats)
    runs = []
    for size in sizes:
        data, meta = ensure_log(work, size, args.seed, args.shape)
        n = meta["records"]
        run: dict[str, Any] = {
            "shape": args.shape,
            "record_mix": meta.get("record_mix"),
            "records": n,
            "segments": meta["segments"],
            "log_bytes": sum(
                f.stat().st_size for f in (data / "__cluster_metadata-0").glob("*.log")
            ),
        }
        hashes = {}
        for fmt in formats:
            src = data if fmt == "kraft" else ensure_kafka_log(data)
            if fmt == "kafka":
                run["kafka_log_bytes"] = sum(
                    f.stat().st_size for f in (src / "__cluster_metadata-0").glob("*.log")
                )
            for mode in modes:
                key = mode if fmt == "kraft" else f"{mode}_kafka"
                out = work / f"out-{size}-{key}"
                if mode == "one_process":
                    run[key] = bench_one_process(src, out, args.repeat, n)
                elif mode == "cluster":
                    run[key] = bench_cluster(args.cluster_workers, src, out, args.repeat)
                else:
                    run[key] = bench_spark(f"local[{mode[-1]}]", src, out, args.repeat)
                hashes[key] = tables_hash(out)
                shutil.rmtree(out, ignore_errors=True)
        if {"kraft", "kafka"} <= set(formats):
            for mode in modes:
                run[f"kafka_vs_kraft_{mode}"] = round(
                    run[f"{mode}_kafka"]["median"]["seconds"] / run[mode]["median"]["seconds"], 2
                )
        if "kraft" not in formats:
            for mode in modes:
                run[mode] = run.pop(f"{mode}_kafka")
        secs = {m: run[m]["median"]["seconds"] for m in modes}
        if "local2" in secs:
            run["spark_local2_records_per_s"] = run["local2"]["median"]["records_per_s"]
            if "one_process" in secs:
                run["speedup_local2_vs_one_process"] = round(
                    secs["one_process"] / secs["local2"], 2
                )
            if "local1" in secs:
                run["scaling_local1_to_local2"] = round(secs["local1"] / secs["local2"], 2)
        run["tables_hash"] = hashes
        run["tables_equal"] = len({json.dumps(h, sort_keys=True) for h in hashes.values()}) <= 1
        runs.append(run)
        print(json.dumps(run), file=sys.stderr)
    print(
        json.dumps(
            {
                "benchmark": "spark_replay end to end (log -> all tables in Parquet)",
                "cpu_count": os.cpu_count(),
                "goal": {
                    "local2_records_per_s_at_10M": 300_000,
                    "speedup_local2_vs_one_process_at_10M": 1.5,
                    "local2_records_per_s_at_1M_warm": 200_000,
                    "scaling_local1_to_local2_at_10M": 1.7,
                    "kafka_vs_kraft_max": 1.3,
                },
                "formats": formats,
                "runs": runs,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
