"""`spark-replay what-if`: every scenario of a grid over one log, in one Spark job.

The driver reads the log's facts once (`facts.read_facts`, a few seconds per
million records) and leaves them in OUT/_whatif_work for the tasks; then one
Spark task per scenario (the actual log being one more) writes its scenario's
counterfactual log, replays it into leader_elections and offline_partitions
(`replay.scenario_tables`), writes its part of `whatif_elections` and
`whatif_offline_partitions` and returns its figures (`metrics`). The driver
checks identity (the in-force scenario against the actual tables, row for row),
writes `whatif_summary.json` and the "What if" section of report.html.

Why a task per scenario and not per partition: the controller's broker
decisions are not independent of its partitions (a broker asking to shut down
is told to shut down at once only if it leads nothing, `next_state`), so a
partition-split run would need the other splits' leaderships; docs/what-if.md
says more.

All or nothing, as spark-replay: a failed run leaves none of its outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_replay.whatif.facts import Facts, read_facts
from spark_replay.whatif.metrics import scenario_metrics, table_differences
from spark_replay.whatif.replay import (
    history_tables,
    load_facts,
    save_facts,
    scenario_tables,
    with_scenario,
)
from spark_replay.whatif.scenario import IN_FORCE, Scenario, ScenarioError

WORK = "_whatif_work"
ACTUAL = "actual"
TABLES = {"whatif_elections": "leader_elections", "whatif_offline_partitions": "offline_partitions"}
OUTPUTS = (*TABLES, "whatif_summary.json", WORK)
KEYS = {
    "leader_elections": ("offset", "topic", "partition_id"),
    "offline_partitions": ("start_offset", "topic", "partition_id"),
}


def _progress(msg: str) -> None:
    print(f"spark-replay what-if: {msg}", file=sys.stderr, flush=True)


def check_racks(facts: Facts, scenarios: list[Scenario]) -> None:
    """A rack-aware placement needs every broker's rack (the log's or --racks)."""
    for s in scenarios:
        if s.placement != "rack-aware":
            continue
        missing = [b for b in facts.broker_ids if (s.racks.get(b) or facts.racks.get(b)) is None]
        if missing:
            raise ScenarioError(
                f"scenario {s.name}: replica.placement=rack-aware needs a rack for brokers "
                f"{missing}: the log has none, give --racks {missing[0]}=RACK,..."
            )


def clear_outputs(out: Path) -> None:
    for name in OUTPUTS:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _write_part(out: str, table_dir: str, index: int, table: pa.Table) -> None:
    target = os.path.join(out, table_dir, f"part-{index:05d}.parquet")
    tmp = f"{target}.{uuid.uuid4().hex}.tmp"
    pq.write_table(table, tmp, compression="zstd", compression_level=1)
    os.replace(tmp, target)


def run_item(item: tuple[int, Scenario | None, str, str, int, int]) -> dict[str, Any]:
    """Task: one scenario (None: the actual log) -> its table parts and figures."""
    index, scenario, log_dir, out, start_ms, end_ms = item
    t = time.perf_counter()
    work = Path(out) / WORK / f"scenario-{index:03d}"
    if scenario is None:
        raw = history_tables(Path(log_dir), work / "tables")
        tables = {n: with_scenario(t_, ACTUAL) for n, t_ in raw.items()}
        stats: dict[str, Any] = {}
        name = ACTUAL
    else:
        facts = load_facts(Path(out) / WORK / "facts.pickle")
        tables, stats = scenario_tables(facts, scenario, work)
        name = scenario.name
    for table_dir, name_in in TABLES.items():
        _write_part(out, table_dir, index, tables[name_in])
    if scenario is None or scenario.name == IN_FORCE:
        # kept for the identity check on the driver
        for n, tab in tables.items():
            pq.write_table(tab, str(work / f"{n}.parquet"))
    metrics = scenario_metrics(
        tables["leader_elections"], tables["offline_partitions"], start_ms, end_ms
    )
    return {
        "name": name,
        "engine": stats,
        "metrics": metrics,
        "seconds": round(time.perf_counter() - t, 3),
    }


def identity(out: Path, in_force_index: int) -> dict[str, Any]:
    """The in-force scenario's tables against the actual ones, row for row."""
    result: dict[str, Any] = {"holds": True, "tables": {}}
    for name, key in KEYS.items():
        a = pq.read_table(out / WORK / "scenario-000" / f"{name}.parquet")
        b = pq.read_table(out / WORK / f"scenario-{in_force_index:03d}" / f"{name}.parquet")
        diffs = table_differences(a, b, key, limit=0)
        result["tables"][name] = {
            "actual_rows": a.num_rows,
            "replayed_rows": b.num_rows,
            "differing_rows": len(diffs),
            "differences": diffs[:20],
        }
        if diffs:
            result["holds"] = False
    return result


def run_whatif(
    spark: Any,
    log_dir: str | Path,
    out: str | Path,
    scenarios: list[Scenario],
    facts: Facts | None = None,
    report: bool = True,
) -> dict[str, Any]:
    """The whole what-if job; returns the summary (also written to OUT)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    clear_outputs(out)
    try:
        return _run(spark, Path(log_dir), out, scenarios, facts, report)
    except BaseException:
        clear_outputs(out)
        raise


def _run(
    spark: Any,
    log_dir: Path,
    out: Path,
    scenarios: list[Scenario],
    facts: Facts | None,
    report: bool,
) -> dict[str, Any]:
    timings: dict[str, float] = {}
    t = time.perf_counter()
    if facts is None:
        facts = read_facts(log_dir, scenarios[0].session_timeout_ms)
        check_racks(facts, scenarios)
    (out / WORK).mkdir(parents=True)
    save_facts(facts, out / WORK / "facts.pickle")
    timings["facts_s"] = time.perf_counter() - t
    _progress(
        f"facts: {len(facts.units)} units, {facts.command_count} commands "
        f"({timings['facts_s']:.1f} s)"
    )
    for table_dir in TABLES:
        (out / table_dir).mkdir()
    items = [(0, None, str(log_dir), str(out), facts.first_time_ms, facts.last_time_ms)]
    items += [
        (i + 1, s, str(log_dir), str(out), facts.first_time_ms, facts.last_time_ms)
        for i, s in enumerate(scenarios)
    ]
    t = time.perf_counter()
    sc = spark.sparkContext
    sc.setJobDescription(f"spark-replay what-if: {len(scenarios)} scenarios")
    results = sc.parallelize(items, len(items)).map(run_item).collect()
    sc.setJobDescription(None)
    timings["scenarios_s"] = time.perf_counter() - t
    _progress(
        f"{len(scenarios)} scenarios and the actual log replayed ({timings['scenarios_s']:.1f} s)"
    )
    for table_dir in TABLES:
        (out / table_dir / "_SUCCESS").touch()
    in_force = 1 + next(i for i, s in enumerate(scenarios) if s.name == IN_FORCE)
    ident = identity(out, in_force)
    summary = {
        "log_dir": str(log_dir),
        "first_time_ms": facts.first_time_ms,
        "last_time_ms": facts.last_time_ms,
        "last_offset": facts.last_offset,
        "in_force": scenarios[0].settings(),
        "facts": {
            "units": len(facts.units),
            "commands": facts.command_count,
            # records of command units that no command explains (docs/what-if.md)
            "unexplained_records": sum(u.unexplained for u in facts.units),
        },
        "actual": results[0],
        "scenarios": [
            {**r, "settings": s.settings(), "changed": list(s.changed)}
            for r, s in zip(results[1:], scenarios, strict=True)
        ],
        "identity": ident,
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }
    shutil.rmtree(out / WORK, ignore_errors=True)
    (out / "whatif_summary.json").write_text(json.dumps(summary, indent=1, default=_json) + "\n")
    if report:
        from spark_replay.report import write_whatif_section

        write_whatif_section(out, summary)
    return summary


def _json(x: Any) -> Any:
    if hasattr(x, "__dataclass_fields__"):
        return asdict(x)
    return str(x)
