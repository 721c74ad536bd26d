"""The demo's one-line what-if (`spark_replay.whatif.demo.format_line`), the
offline figures before a cluster's stop (`metrics.offline_before`), and the
demo's outage replayed with unclean election on."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_replay.whatif.demo import UNCLEAN_ON, format_line
from spark_replay.whatif.facts import read_facts
from spark_replay.whatif.metrics import offline_before, scenario_metrics
from spark_replay.whatif.replay import history_tables, scenario_history
from spark_replay.whatif.scenario import build_scenarios

STOP_MS = 1_764_150_292_683  # a time with milliseconds: the ISO round trip keeps them
LINE = re.compile(
    r"^with unclean election on: (\d+) partitions offline for ([\d.]+) s instead of ([\d.]+) s"
)


def _offline(rows: list[tuple[str, str, int, int, int | None]]) -> pa.Table:
    """(scenario, topic id, partition, start ms, end ms or None) per window."""
    cols = list(zip(*rows, strict=True))
    return pa.table(
        {
            "topic": ["t"] * len(rows),
            "topic_id": list(cols[1]),
            "partition_id": list(cols[2]),
            "start_time_ms": list(cols[3]),
            "end_time_ms": list(cols[4]),
            "scenario": list(cols[0]),
        }
    )


def _summary(asked_s: float, actual_s: float, asked_n: int, holds: bool = True) -> dict[str, Any]:
    def m(s: float, n: int) -> dict[str, Any]:
        return {"offline_partition_seconds": s, "partitions_ever_offline": n}

    return {
        "actual": {"metrics": m(actual_s, 2)},
        "scenarios": [
            {"name": "in-force", "metrics": m(actual_s, 2)},
            {"name": UNCLEAN_ON, "metrics": m(asked_s, asked_n)},
        ],
        "identity": {"holds": holds},
    }


def test_offline_before_cuts_windows_at_the_stop() -> None:
    t = STOP_MS
    off = _offline(
        [
            ("actual", "x", 0, t - 5000, t - 2000),  # before: 3 s
            ("actual", "x", 1, t - 1000, None),  # open across the stop: 1 s before it
            ("actual", "y", 0, t - 500, t + 9000),  # closed after the stop: 0.5 s
            ("actual", "y", 1, t, None),  # from the stop on: left out
        ]
    )
    assert offline_before(off, t) == (3, 4.5)
    assert offline_before(off, t - 5000) == (0, 0.0)


def test_the_line_adds_the_figures_from_before_the_clusters_stop() -> None:
    t = STOP_MS
    off = _offline(
        [
            ("actual", "x", 0, t - 8000, t - 2000),  # an outage while it ran: 6 s
            (UNCLEAN_ON, "x", 0, t - 8000, t - 7000),  # unclean on: 1 s
            ("actual", "x", 0, t, None),  # the stop: both
            (UNCLEAN_ON, "x", 0, t, None),
            ("actual", "x", 1, t + 10, None),
            (UNCLEAN_ON, "x", 1, t + 10, None),
        ]
    )
    stop = {
        "until_offset": 92,
        "until_time": datetime.fromtimestamp(t / 1000, UTC).isoformat(timespec="milliseconds"),
    }
    line = format_line(_summary(10.0, 15.0, 2), stop, off)
    assert line == (
        "with unclean election on: 2 partitions offline for 10.0 s instead of 15.0 s "
        "(while the cluster ran, before its stop at offset 92: "
        "1 partitions offline for 1.0 s instead of 6.0 s)"
    )
    assert LINE.match(line).groups() == ("2", "10.0", "15.0")  # type: ignore[union-attr]


def test_without_a_stop_the_line_is_the_whole_logs() -> None:
    off = _offline([("actual", "x", 0, 0, None)])
    line = format_line(_summary(0.0, 4.6, 0), None, off)
    assert line == "with unclean election on: 0 partitions offline for 0.0 s instead of 4.6 s"
    failed = format_line(_summary(0.0, 4.6, 0, holds=False), None, off)
    assert failed.endswith("(identity check failed: see whatif_summary.json)")


def test_the_demos_outage_with_unclean_election_on(tmp_path: Path) -> None:
    """`make demo`'s log with its outage (tests/fixtures/whatif/demo-outage-log:
    brokers 4 and 6 killed at once, broker 7 shut down before; 7 back first,
    then 4 and 6) replayed with unclean election on: orders-4, whose one live
    replica (5) lagged out of its ISR, is led by 5 at the fence, and the five
    partitions whose last replica was 7 come back when 7 is unfenced, not when
    4 and 6 return."""
    log = Path(__file__).resolve().parents[2] / "fixtures" / "whatif" / "demo-outage-log"
    facts = read_facts(log, 6000)
    [_, unclean] = build_scenarios([UNCLEAN_ON], in_force=["broker.session.timeout.ms=6000"])
    tables, stats = scenario_history(facts, unclean)
    assert stats["refused"] == {} and stats["skipped"] == {}
    elections = [
        (r["topic"], r["partition_id"], r["new_leader"], r["cause"])
        for r in tables["leader_elections"].to_pylist()
        if r["unclean"] and r["offset"] < 140  # the outage (the stop comes later)
    ]
    assert elections == [
        ("orders", 4, 5, "FENCE"),
        ("payments", 0, 7, "UNFENCE"),
        ("payments", 1, 7, "UNFENCE"),
        ("payments", 2, 7, "UNFENCE"),
        ("orders", 2, 7, "UNFENCE"),
        ("orders", 5, 7, "UNFENCE"),
    ]
    actual = history_tables(log, tmp_path / "actual")
    start, end = facts.first_time_ms, facts.last_time_ms
    before = scenario_metrics(actual["leader_elections"], actual["offline_partitions"], start, end)
    after = scenario_metrics(tables["leader_elections"], tables["offline_partitions"], start, end)
    assert (before["offline_partition_seconds"], after["offline_partition_seconds"]) == (
        39.486,
        6.494,
    )
