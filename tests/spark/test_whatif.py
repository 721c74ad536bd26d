"""`spark-replay what-if` on local[2]: a seeded story and a grid of two, one job.

Checks the outputs of the contract (docs/what-if.md): both Parquet tables with
the columns of leader_elections / offline_partitions plus `scenario`, the
identity check, whatif_summary.json, the report section; and that the actual
rows equal spark-replay's own tables (the same replay rules), and that the
figures' offline count matches spark-replay's summary.json (the same rule
computed twice).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_replay.generator import generate, scaled_config
from spark_replay.tables import LEADER_ELECTIONS_COLUMNS, OFFLINE_PARTITIONS_COLUMNS
from spark_replay.whatif.job import run_whatif
from spark_replay.whatif.scenario import build_scenarios


def test_a_grid_runs_in_one_job_and_the_in_force_scenario_is_the_log(
    spark: Any, tmp_path: Path
) -> None:
    from spark_replay.cli import run_job

    log = tmp_path / "data"
    generate(log, scaled_config(3000, 11, admin_rate=0.05))
    out = tmp_path / "out"
    run_job(spark, log, out)  # spark-replay first: what-if adds its section to its report
    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps(
            [
                {"name": "unclean", "set": {"unclean.leader.election.enable": True}},
                {"name": "long-session", "set": {"broker.session.timeout.ms": 30000}},
            ]
        )
    )
    summary = run_whatif(spark, log, out, build_scenarios([], grid=grid))

    assert summary["identity"]["holds"], summary["identity"]
    # the in-force log is the actual one byte for byte: its tables are the actual
    # ones (not built again); the other scenarios' logs differ
    assert summary["identity"]["identical_log"]
    engines = {s["name"]: s["engine"] for s in summary["scenarios"]}
    assert engines["in-force"]["identical_log"] and not engines["unclean"]["identical_log"]
    names = [s["name"] for s in summary["scenarios"]]
    assert names == ["in-force", "unclean", "long-session"]
    el = spark.read.parquet(str(out / "whatif_elections"))
    off = spark.read.parquet(str(out / "whatif_offline_partitions"))
    assert el.columns == [*LEADER_ELECTIONS_COLUMNS, "scenario"]
    assert off.columns == [*OFFLINE_PARTITIONS_COLUMNS, "scenario"]
    by = {r["scenario"]: r["count"] for r in el.groupBy("scenario").count().collect()}
    assert set(by) == {"actual", "in-force", "unclean", "long-session"}

    # the actual rows are spark-replay's own tables
    mine = el.filter("scenario = 'actual'").drop("scenario")
    theirs = spark.read.parquet(str(out / "leader_elections"))
    assert sorted(mine.collect()) == sorted(theirs.select(*mine.columns).collect())
    replay = json.loads((out / "summary.json").read_text())
    actual = summary["actual"]["metrics"]
    assert actual["offline_windows"] == replay["offline"]["windows"]
    assert summary["scenarios"][1]["metrics"]["unclean_elections"] >= actual["unclean_elections"]

    on_disk = json.loads((out / "whatif_summary.json").read_text())
    assert on_disk["identity"]["holds"] and len(on_disk["scenarios"]) == 3
    # every entry has its settings: the actual's are the ones in force
    assert (
        on_disk["actual"]["settings"] == on_disk["in_force"] == on_disk["scenarios"][0]["settings"]
    )
    assert on_disk["actual"]["changed"] == []
    page = (out / "report.html").read_text()
    assert page.count("<h2>What if</h2>") == 1 and "Offline partition-seconds" in page
    assert "summary.json" in page  # spark-replay's report is still there
