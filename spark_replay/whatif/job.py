"""`spark-replay what-if`: every scenario of a grid over one log, in one Spark job.

The driver reads the log's facts once (`facts.read_facts`, a few seconds per
million records) and leaves them in OUT/_whatif_work for the tasks, while one
Spark task builds the actual log's leader_elections and offline_partitions
beside it (they need no facts; where they take longer, as when the CLI read
the facts before Spark started, they go on beside the scenarios' tasks).
Then one Spark task per scenario runs the engine, builds the scenario's two
tables as the engine writes its batches
(`replay.scenario_history`, no log written), writes its part of
`whatif_elections` and `whatif_offline_partitions` and returns its figures
(`metrics`). The in-force scenario writes its log: it is usually the actual
log byte for byte (`replay.same_log`), and its tables are then the actual
ones (the driver writes its parts from them once both jobs are done);
otherwise it is replayed by the actual log's rules
(`replay.history_tables`) for the identity check. The driver checks identity
(the in-force scenario against the actual tables, row for row), writes
`whatif_summary.json` and the "What if" section of report.html.

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

from spark_replay.cli import remove_output
from spark_replay.whatif.facts import Facts, read_facts
from spark_replay.whatif.metrics import scenario_metrics, table_differences
from spark_replay.whatif.replay import (
    COMPARED as TABLE_NAMES,
)
from spark_replay.whatif.replay import (
    history_tables,
    load_facts,
    same_log,
    save_facts,
    scenario_history,
    with_scenario,
    write_counterfactual_log,
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
        remove_output(out / name)


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
    stats: dict[str, Any] = {}
    if scenario is None:
        raw = history_tables(Path(log_dir), work / "tables")
        name = ACTUAL
    else:
        facts = load_facts(Path(out) / WORK / "facts.pickle")
        name = scenario.name
        if name != IN_FORCE:
            # the two tables as the engine writes, with no log (history_stream)
            raw, stats = scenario_history(facts, scenario)
            stats["identical_log"] = False  # only the in-force log is compared
        else:
            # the identity check: the log itself, compared byte for byte, and
            # otherwise replayed by the same rules as the actual log
            log = work / "log"
            stats = write_counterfactual_log(facts, scenario, log)
            stats["identical_log"] = identical = same_log(log, Path(log_dir))
            if identical:
                # the actual log again, byte for byte: its tables are the actual
                # ones, which the actual log's task may still be building; the
                # driver writes this scenario's parts from them (`_in_force_parts`)
                shutil.rmtree(log, ignore_errors=True)
                return {"name": name, "engine": stats, "metrics": None, "seconds": _since(t)}
            raw = history_tables(log, work / "tables")
            shutil.rmtree(log, ignore_errors=True)
    shutil.rmtree(work / "tables", ignore_errors=True)
    tables = _labelled_parts(out, index, name, raw)
    if scenario is None or (name == IN_FORCE and not stats["identical_log"]):
        # kept for the identity check on the driver
        work.mkdir(parents=True, exist_ok=True)
        for n, tab in raw.items():
            pq.write_table(tab, str(work / f"{n}.parquet"))
    # the actual log's task runs before the facts give the log's times: the
    # driver computes its figures
    metrics = None if scenario is None else _figures(tables, start_ms, end_ms)
    return {"name": name, "engine": stats, "metrics": metrics, "seconds": _since(t)}


def _since(t: float) -> float:
    return round(time.perf_counter() - t, 3)


def _labelled_parts(
    out: str, index: int, name: str, raw: dict[str, pa.Table]
) -> dict[str, pa.Table]:
    """A run's two tables with their `scenario` column, written as its parts."""
    tables = {n: with_scenario(t_, name) for n, t_ in raw.items()}
    for table_dir, name_in in TABLES.items():
        _write_part(out, table_dir, index, tables[name_in])
    return tables


def _figures(tables: dict[str, pa.Table], start_ms: int, end_ms: int) -> dict[str, Any]:
    return scenario_metrics(
        tables["leader_elections"], tables["offline_partitions"], start_ms, end_ms
    )


def _actual_tables(out: Path) -> dict[str, pa.Table]:
    """The actual log's two tables, as its task left them for the driver."""
    return {n: pq.read_table(out / WORK / "scenario-000" / f"{n}.parquet") for n in TABLE_NAMES}


def _in_force_parts(
    out: Path, index: int, actual: dict[str, pa.Table], actual_figures: dict[str, Any]
) -> dict[str, Any]:
    """The in-force scenario's table parts when its log is the actual one byte
    for byte: the actual tables, labelled; its figures are the actual ones
    (the same rows)."""
    _labelled_parts(str(out), index, IN_FORCE, actual)
    return dict(actual_figures)


class _Background:
    """One task's Spark job run from a thread beside the driver's own work;
    `cancel` ends it (its job group) if it is still running."""

    JOIN_S = 60.0  # bound on the wait for a cancelled job's thread

    def __init__(self, sc: Any, item: tuple[Any, ...], what: str) -> None:
        from pyspark import InheritableThread

        self._sc = sc
        self._group = f"whatif-{uuid.uuid4().hex}"
        self._box: dict[str, Any] = {}
        self.done_at: float | None = None  # when its job ended (perf_counter)

        def run() -> None:
            try:
                sc.setJobGroup(self._group, f"spark-replay what-if: {what}", True)
                self._box["result"] = sc.parallelize([item], 1).map(run_item).collect()[0]
            except BaseException as e:  # re-raised by result()
                self._box["error"] = e
            self.done_at = time.perf_counter()

        self._thread = InheritableThread(target=run, daemon=True)
        self._thread.start()

    def result(self) -> dict[str, Any]:
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["result"]

    def cancel(self) -> None:
        if self._thread.is_alive():
            self._sc.cancelJobGroup(self._group)
            self._thread.join(self.JOIN_S)


def identity(
    out: Path, actual: dict[str, pa.Table], in_force_index: int, identical_log: bool
) -> dict[str, Any]:
    """The in-force scenario's tables against the actual ones, row for row; when
    its log is the actual log byte for byte, its tables are the actual ones."""
    result: dict[str, Any] = {"holds": True, "identical_log": identical_log, "tables": {}}
    for name, key in KEYS.items():
        a = actual[name]
        if identical_log:
            result["tables"][name] = {
                "actual_rows": a.num_rows,
                "replayed_rows": a.num_rows,
                "differing_rows": 0,
                "differences": [],
            }
            continue
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
    t = t0 = time.perf_counter()
    (out / WORK).mkdir(parents=True)
    for table_dir in TABLES:
        (out / table_dir).mkdir()
    sc = spark.sparkContext
    # The actual log's tables need no facts: one task builds them while the
    # driver reads the facts (one core each), and goes on beside the scenarios
    # if it takes longer (a big log whose facts the CLI read before Spark).
    actual = _Background(sc, (0, None, str(log_dir), str(out), 0, 0), "the actual log's tables")
    try:
        if facts is None:
            facts = read_facts(log_dir, scenarios[0].session_timeout_ms)
            check_racks(facts, scenarios)
        save_facts(facts, out / WORK / "facts.pickle")
        timings["facts_s"] = time.perf_counter() - t
        _progress(
            f"facts: {len(facts.units)} units, {facts.command_count} commands "
            f"({timings['facts_s']:.1f} s)"
        )
        items = [
            (i + 1, s, str(log_dir), str(out), facts.first_time_ms, facts.last_time_ms)
            for i, s in enumerate(scenarios)
        ]
        # Tasks start in order: the in-force scenario last, as it usually builds
        # no tables (its log is the actual one), so it fills the end of a slot.
        items.sort(key=lambda item: item[1].name == IN_FORCE)  # type: ignore[union-attr]
        t = time.perf_counter()
        sc.setJobDescription(f"spark-replay what-if: {len(scenarios)} scenarios")
        ran = sc.parallelize(items, len(items)).map(run_item).collect()
        sc.setJobDescription(None)
        timings["scenarios_s"] = time.perf_counter() - t
        actual_result = actual.result()
        assert actual.done_at is not None
        timings["actual_s"] = actual.done_at - t0  # from the job's start, beside the facts
    finally:
        actual.cancel()
    _progress(f"{len(scenarios)} scenarios replayed ({timings['scenarios_s']:.1f} s)")
    by_index = {item[0]: r for item, r in zip(items, ran, strict=True)}
    results = [by_index[i + 1] for i in range(len(scenarios))]
    actual_tables = _actual_tables(out)  # read once: figures, in-force parts, identity
    actual_result["metrics"] = _figures(actual_tables, facts.first_time_ms, facts.last_time_ms)
    for index, r in by_index.items():
        if r["name"] == IN_FORCE and r["engine"].get("identical_log"):
            r["metrics"] = _in_force_parts(out, index, actual_tables, actual_result["metrics"])
    for table_dir in TABLES:
        (out / table_dir / "_SUCCESS").touch()
    results = [actual_result, *results]
    in_force = 1 + next(i for i, s in enumerate(scenarios) if s.name == IN_FORCE)
    ident = identity(
        out, actual_tables, in_force, bool(results[in_force]["engine"].get("identical_log"))
    )
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
        # the log as read: its settings are the ones in force (nothing changed)
        "actual": {**results[0], "settings": scenarios[0].settings(), "changed": []},
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
