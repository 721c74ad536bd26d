"""The what-if job's tasks, run in process (no Spark): the in-force scenario's
task needs nothing from the actual log's task, so the scenarios can start while
the actual tables are still being built (a big log whose facts the CLI read
before Spark started: at 10M records the actual tables took 65 s, the facts'
pickle 27 s). When its log is the actual one, the driver writes its parts
from the actual tables afterwards, the same rows as the actual ones."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from spark_replay.generator import generate, scaled_config
from spark_replay.whatif.facts import read_facts
from spark_replay.whatif.job import (
    TABLES,
    WORK,
    _actual_tables,
    _figures,
    _in_force_parts,
    run_item,
)
from spark_replay.whatif.replay import save_facts
from spark_replay.whatif.scenario import IN_FORCE, build_scenarios


def test_the_in_force_task_runs_before_the_actual_tables_exist(tmp_path: Path) -> None:
    log = tmp_path / "data"
    generate(log, scaled_config(2000, 5))
    facts = read_facts(log, 9000)
    out = tmp_path / "out"
    (out / WORK).mkdir(parents=True)
    for table_dir in TABLES:
        (out / table_dir).mkdir()
    save_facts(facts, out / WORK / "facts.pickle")
    [in_force] = build_scenarios([])
    span = (facts.first_time_ms, facts.last_time_ms)

    # no scenario-000 yet: the actual log's task has not written its tables
    done = run_item((1, in_force, str(log), str(out), *span))
    assert done["name"] == IN_FORCE and done["engine"]["identical_log"] is True
    assert done["metrics"] is None  # the driver's, once the actual tables exist
    assert not [f for d in TABLES for f in (out / d).iterdir()]  # no part written yet

    actual = run_item((0, None, str(log), str(out), 0, 0))
    actual_tables = _actual_tables(out)
    metrics = _in_force_parts(out, 1, actual_tables, _figures(actual_tables, *span))
    for table_dir, name in TABLES.items():
        part = pq.read_table(out / table_dir / "part-00001.parquet")
        expected = pq.read_table(out / WORK / "scenario-000" / f"{name}.parquet")
        assert part.column("scenario").unique().to_pylist() == [IN_FORCE]
        assert part.drop_columns(["scenario"]).equals(expected), table_dir
    assert actual["name"] == "actual"
    # the figures of the actual tables (the story has elections and offline windows)
    tables = {
        n: pq.read_table(out / WORK / "scenario-000" / f"{n}.parquet") for n in TABLES.values()
    }
    assert metrics["elections"] == tables["leader_elections"].num_rows > 0
    assert metrics["offline_windows"] == tables["offline_partitions"].num_rows > 0


def test_an_in_force_log_that_differs_is_replayed_for_the_identity_check(
    tmp_path: Path,
) -> None:
    """Told that a 30 s session was in force (the story ran with 9 s), the
    in-force run refuses the registrations of brokers back within 30 s until
    the old session ends: its log is not the actual one, so its
    task replays that log by the actual log's rules, writes its parts and
    keeps its tables for the driver's row-by-row identity check."""
    log = tmp_path / "data"
    generate(log, scaled_config(2000, 5))
    [in_force] = build_scenarios([], in_force=["broker.session.timeout.ms=30000"])
    facts = read_facts(log, in_force.session_timeout_ms)
    out = tmp_path / "out"
    (out / WORK).mkdir(parents=True)
    for table_dir in TABLES:
        (out / table_dir).mkdir()
    save_facts(facts, out / WORK / "facts.pickle")

    done = run_item((1, in_force, str(log), str(out), facts.first_time_ms, facts.last_time_ms))
    assert done["engine"]["identical_log"] is False
    assert done["metrics"]["elections"] > 0
    kept = out / WORK / "scenario-001"
    assert sorted(p.name for p in kept.iterdir()) == [
        "leader_elections.parquet",
        "offline_partitions.parquet",
    ]  # the counterfactual log itself is gone
    for table_dir, name in TABLES.items():
        part = pq.read_table(out / table_dir / "part-00001.parquet")
        assert part.drop_columns(["scenario"]).equals(pq.read_table(kept / f"{name}.parquet"))
