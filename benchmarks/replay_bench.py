"""Spark replay throughput: log -> all tables in Parquet, against one Python process.

For each size (default 1M and 10M records) this generates a seeded log (cached
under --work, since generating is not what is measured), then times, `--repeat`
times each (the JSON has every run and the median):

- ``spark``: the headline, end to end as the issue defines it (log -> all
  tables in Parquet): the `spark-replay` job (`spark_replay.cli.run_job`) on
  local[2] writing the records table and the four history tables. The
  SparkSession start-up is reported apart and not counted; the repeats run in
  the same session (the first is the cold one);
- ``single_process``: the same work in one Python process, no Spark: the same
  decoder (`spark_replay.decode.read_file`) writing the records table with
  pyarrow, then the four history tables computed in plain Python (dicts and
  lists, one pass per partition) and written with pyarrow. Its tables are
  compared with Spark's, row for row (``tables_equal``), so both did the same
  work (on logs up to --compare-max records; above, row counts);
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
from spark_replay.tables import (  # noqa: E402
    BROKER_INTERVAL_KEY,
    BROKER_TYPES,
    STATE_TYPES,
    TABLE_COLUMNS,
    TXN_TYPES,
)


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
        n = single_process_tables(data, out)
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


# ----------------------------------------------------------------------------- one process


def _decode_and_write_records(data: Path, out: Path) -> tuple[int, list[dict[str, Any]]]:
    """Every file decoded (the same decoder as the Spark tasks), the records table
    written with pyarrow, and the state-changing rows kept (narrow) for the history."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spark_replay.datasource import list_log_files
    from spark_replay.decode import ARROW_SCHEMA, BROKER_FIELDS, PARTITION_FIELDS, read_file
    from spark_replay.records import COMPRESSION, COMPRESSION_LEVEL, DICTIONARY_COLUMNS

    files = list_log_files(data)
    if any(f.source != "segment" for f in files) or (files and files[0].base_offset != 0):
        raise SystemExit("the one-process replay handles complete logs without snapshots only")
    wanted = pa.array([*STATE_TYPES, *TXN_TYPES])
    # The records columns the history needs: where and when, the type, every typed column.
    state_columns = [
        "offset",
        "base_offset",
        "append_time_ms",
        "type",
        *(f.name for f in PARTITION_FIELDS),
        *(f.name for f in BROKER_FIELDS),
    ]
    (out / "records").mkdir(parents=True)
    kept: list[pa.Table] = []
    n = 0
    for i, f in enumerate(files):
        with pq.ParquetWriter(
            out / "records" / f"part-{i:05d}.parquet",
            ARROW_SCHEMA,
            compression=COMPRESSION,
            compression_level=COMPRESSION_LEVEL,
            use_dictionary=DICTIONARY_COLUMNS,
        ) as writer:
            for batch in read_file(f):
                n += batch.num_rows
                writer.write_batch(batch)
                sel = batch.filter(pc.is_in(batch.column(5), value_set=wanted))
                kept.append(pa.Table.from_batches([sel]).select(state_columns))
    table = pa.concat_tables(kept).sort_by("offset")
    cols = [table.column(c).to_pylist() for c in state_columns]
    return n, [dict(zip(state_columns, row, strict=True)) for row in zip(*cols, strict=True)]


def _events(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """State rows with at_offset, at_time and unit (transactions apply at their end)."""
    txns: list[tuple[int, int, int | None, int]] = []  # begin, end, apply, time
    begin = None
    for r in rows:
        t = r["type"]
        if t == "BeginTransactionRecord":
            begin = r["offset"]
        elif t in ("EndTransactionRecord", "AbortTransactionRecord") and begin is not None:
            applied = r["offset"] if t == "EndTransactionRecord" else None
            txns.append((begin, r["offset"], applied, r["append_time_ms"]))
            begin = None
    if begin is not None:
        txns.append((begin, rows[-1]["offset"] + 1, None, 0))
    ev = []
    k = 0
    for r in rows:
        if r["type"] in (
            "BeginTransactionRecord",
            "EndTransactionRecord",
            "AbortTransactionRecord",
        ):
            continue
        off = r["offset"]
        while k < len(txns) and txns[k][1] <= off:
            k += 1
        if k < len(txns) and txns[k][0] < off < txns[k][1]:
            if txns[k][2] is None:
                continue  # aborted or unfinished: never happened
            r["at_offset"], r["at_time"], r["unit"] = txns[k][2], txns[k][3], txns[k][2]
        else:
            r["at_offset"], r["at_time"], r["unit"] = off, r["append_time_ms"], r["base_offset"]
        ev.append(r)
    ev.sort(key=lambda r: (r["at_offset"], r["offset"]))
    return ev


def _intervals(rows: list[dict[str, Any]]) -> None:
    """end_offset/end_time_ms of each row: the next row's start (rows of one key)."""
    for a, b in zip(rows, rows[1:], strict=False):
        a["end_offset"], a["end_time_ms"] = b["start_offset"], b["start_time_ms"]
    if rows:
        rows[-1]["end_offset"] = rows[-1]["end_time_ms"] = None


def _last_per_offset(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of several rows applying at one offset, only the last is visible."""
    return [
        r
        for r, nxt in zip(rows, [*rows[1:], None], strict=True)
        if nxt is None or nxt["at_offset"] != r["at_offset"]
    ]


def _broker_history(ev: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_broker: dict[int, list[dict[str, Any]]] = {}
    for r in ev:
        if r["type"] in BROKER_TYPES:
            by_broker.setdefault(r["broker_id"], []).append(r)
    out = []
    for bid in sorted(by_broker):
        fenced = shut = None
        reg: tuple[Any, Any] | None = None
        states = []
        for r in by_broker[bid]:
            if r["fenced"] in (1, -1):
                fenced = r["fenced"] == 1
            if r["shutdown"] in (1, -1):
                shut = r["shutdown"] == 1
            if r["type"] == "RegisterBrokerRecord":
                reg = (r["incarnation_id"], r["rack"])
            unreg = r["type"] == "UnregisterBrokerRecord"
            state = (
                "UNREGISTERED"
                if unreg
                else "FENCED"
                if fenced
                else "CONTROLLED_SHUTDOWN"
                if shut
                else "UNFENCED"
            )
            states.append(
                {
                    "broker_id": bid,
                    "broker_epoch": r["broker_epoch"],
                    "state": state,
                    "fenced": None if unreg else fenced,
                    "in_controlled_shutdown": None if unreg else shut,
                    "incarnation_id": reg[0] if reg else None,
                    "rack": reg[1] if reg else None,
                    "at_offset": r["at_offset"],
                    "start_offset": r["at_offset"],
                    "start_time_ms": r["at_time"],
                }
            )
        rows, prev = [], None
        for s in _last_per_offset(states):
            key = tuple(s[k] for k in BROKER_INTERVAL_KEY)
            if key != prev:
                rows.append(s)
            prev = key
        _intervals(rows)
        out += rows
    return out


def _unit_kind(r: dict[str, Any]) -> str | None:
    t = r["type"]
    brc = t == "BrokerRegistrationChangeRecord"
    if t == "FenceBrokerRecord" or (brc and r["fenced"] == 1) or t == "UnregisterBrokerRecord":
        return "FENCE"
    if brc and r["shutdown"] == 1:
        return "CONTROLLED_SHUTDOWN"
    if t == "UnfenceBrokerRecord" or (brc and r["fenced"] == -1):
        return "UNFENCE"
    if t == "ConfigRecord":
        return "CONFIG"
    return None


def _cause(
    kind: int,
    old_leader: Any,
    old_isr: list[int],
    isr: list[int],
    leader: Any,
    evs: list[tuple[int, str]],
) -> tuple[str, Any]:
    if kind == 0:
        return "CREATE", None
    for k in ("FENCE", "CONTROLLED_SHUTDOWN"):
        hits = [
            b
            for kk, b in ((kk, b) for b, kk in evs)
            if kk == k and (b == old_leader or (b in old_isr and b not in (isr or ())))
        ]
        if hits:
            return k, old_leader if old_leader in hits else hits[0]
    if any(kk == "UNFENCE" and b == leader for b, kk in evs):
        return "UNFENCE", leader
    if any(kk == "CONFIG" for _, kk in evs):
        return "ADMIN", None
    if old_leader is not None and old_leader == leader:
        return "ALTER_PARTITION", leader
    return "ADMIN", None


def _partition_tables(ev: list[dict[str, Any]]) -> tuple[list, list, list]:
    names: dict[str, str] = {}
    removed_at: dict[str, dict[str, Any]] = {}
    unit_events: dict[int, list[tuple[int, str]]] = {}
    by_part: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in ev:
        t = r["type"]
        if t == "PartitionRecord" or t == "PartitionChangeRecord":
            by_part.setdefault((r["topic_id"], r["partition_id"]), []).append(r)
        elif t == "TopicRecord":
            names[r["topic_id"]] = r["topic_name"]
        elif t == "RemoveTopicRecord":
            removed_at[r["topic_id"]] = r
        else:
            k = _unit_kind(r)
            if k is not None:
                unit_events.setdefault(r["unit"], []).append((r["broker_id"], k))
    history, elections, offline = [], [], []
    for (tid, pid), rows in by_part.items():
        topic = names.get(tid)
        rem = removed_at.get(tid)
        if rem is not None:
            rows = [
                *rows,
                {
                    "type": "remove",
                    "at_offset": rem["at_offset"],
                    "offset": rem["offset"],
                    "at_time": rem["at_time"],
                    "unit": rem["unit"],
                },
            ]
            rows.sort(key=lambda r: (r["at_offset"], r["offset"]))
        leader = isr = replicas = removing = adding = lrs = None
        le = pe = None
        states = []
        for r in rows:
            t = r["type"]
            old_leader, old_isr = leader, isr
            if t == "PartitionRecord":
                leader, lrs = r["leader"], r["leader_recovery_state"]
                le, pe = r["leader_epoch"], r["partition_epoch"]
            elif t == "PartitionChangeRecord":
                pe = None if pe is None else pe + 1
                if r["leader"] != -2:
                    leader = r["leader"]
                    le = None if le is None else le + 1
                if r["leader_recovery_state"] != -1:
                    lrs = r["leader_recovery_state"]
            if t != "remove":
                isr = r["isr"] if r["isr"] is not None else isr
                replicas = r["replicas"] if r["replicas"] is not None else replicas
                removing = (
                    r["removing_replicas"] if r["removing_replicas"] is not None else removing
                )
                adding = r["adding_replicas"] if r["adding_replicas"] is not None else adding
            s = {
                "topic": topic,
                "topic_id": tid,
                "partition_id": pid,
                "leader": leader,
                "isr": isr,
                "replicas": replicas,
                "removing_replicas": removing,
                "adding_replicas": adding,
                "leader_recovery_state": lrs,
                "leader_epoch": le,
                "partition_epoch": pe,
                "at_offset": r["at_offset"],
                "start_offset": r["at_offset"],
                "start_time_ms": r["at_time"],
                "removed": t == "remove",
            }
            states.append(s)
            if t == "PartitionRecord" or (t == "PartitionChangeRecord" and r["leader"] != -2):
                kind = 0 if t == "PartitionRecord" else 1
                oi = old_isr or []
                cause, cb = _cause(
                    kind, old_leader, oi, isr, leader, unit_events.get(r["unit"], [])
                )
                elections.append(
                    {
                        "offset": r["offset"],
                        "applied_offset": r["at_offset"],
                        "append_time_ms": r["at_time"],
                        "topic": topic,
                        "topic_id": tid,
                        "partition_id": pid,
                        "old_leader": old_leader,
                        "new_leader": leader,
                        "unclean": kind == 1
                        and leader is not None
                        and leader >= 0
                        and leader not in oi,
                        "cause": cause,
                        "cause_broker_id": cb,
                        "leader_epoch": le,
                    }
                )
        visible = _last_per_offset(states)
        _intervals(visible)
        history += [s for s in visible if not s["removed"]]
        spans, prev = [], None
        for s in visible:
            off = not s["removed"] and s["leader"] is not None and s["leader"] < 0
            if s["removed"] or prev is None or off != prev:
                spans.append(
                    {
                        "topic": topic,
                        "topic_id": tid,
                        "partition_id": pid,
                        "offline": off,
                        "start_offset": s["start_offset"],
                        "start_time_ms": s["start_time_ms"],
                    }
                )
            prev = off
        _intervals(spans)
        offline += [s for s in spans if s["offline"]]
    return history, elections, offline


def single_process_tables(data: Path, out: Path) -> int:
    """The Spark job's work in one Python process: log -> records and the four
    history tables in Parquet (pyarrow). Same decoder, same semantics as
    spark_replay.history (complete logs without snapshots only)."""
    import gc

    import pyarrow as pa
    import pyarrow.parquet as pq

    # Millions of small dicts and lists, no cycles: the cyclic collector would
    # rescan them over and over (the Spark tasks' decoder turns it off too).
    gc.disable()
    try:
        n, rows = _decode_and_write_records(data, out)
        ev = _events(rows)
        history, elections, offline = _partition_tables(ev)
    finally:
        gc.enable()
    tables = {
        "broker_history": _broker_history(ev),
        "partition_history": history,
        "leader_elections": elections,
        "offline_partitions": offline,
    }
    for name, rows_ in tables.items():
        cols = TABLE_COLUMNS[name]
        t = pa.Table.from_pydict({c: [r[c] for r in rows_] for c in cols})
        (out / name).mkdir()
        pq.write_table(t, out / name / "part-00000.parquet")
    return n


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
    ap.add_argument(
        "--single-max",
        type=int,
        default=2_000_000,
        help="run the one-process replay up to this many records (it holds every state "
        "row as a Python dict: gigabytes per million records, see peak_rss_mb)",
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
        if n <= args.single_max:
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
