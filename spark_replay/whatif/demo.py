"""The one-line what-if at the end of `make demo` (kraft/local/demo.py step 9).

Runs `spark-replay what-if` on the demo controller's log with unclean election
on (a child process, as the demo runs spark-replay), into the replay's OUT, so
report.html gains its "What if" section, and returns the line to print.

The demo ends by stopping its cluster: the last broker to leave takes its
partitions offline, with or without unclean election (no replica is left to
elect). Where spark-replay's summary.json found such a stop
(`offline.while_running`), the line adds the figures from before it, so the
stop is not read as an outage the setting could not help.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_replay.whatif.job import ACTUAL
from spark_replay.whatif.metrics import offline_before

UNCLEAN_ON = "unclean.leader.election.enable=true"


def what_if_line(log_dir: Path, out: Path, session_ms: int, timeout_s: float = 600) -> str:
    cmd = [
        sys.executable, "-m", "spark_replay.cli", "what-if",
        "--log-dir", str(log_dir),
        "--out", str(out),
        "--in-force", f"broker.session.timeout.ms={session_ms}",
        "--set", UNCLEAN_ON,
        "--master", "local[2]",
    ]  # fmt: skip
    proc = subprocess.run(cmd, check=False, timeout=timeout_s, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"what-if failed (exit {proc.returncode}): {tail[0]}"
    summary = json.loads((out / "whatif_summary.json").read_text())
    replay = out / "summary.json"  # spark-replay's, when it ran into the same OUT
    stop = None
    if replay.exists():
        stop = (json.loads(replay.read_text()).get("offline") or {}).get("while_running")
    offline = pq.read_table(out / "whatif_offline_partitions")
    return format_line(summary, stop, offline)


def format_line(summary: dict[str, Any], stop: dict[str, Any] | None, offline: pa.Table) -> str:
    """The line, from whatif_summary.json, spark-replay's `offline.while_running`
    (None: the log does not end with the cluster stopped) and the
    whatif_offline_partitions table."""
    actual = summary["actual"]["metrics"]
    [asked] = [s for s in summary["scenarios"] if s["name"] == UNCLEAN_ON]
    m = asked["metrics"]
    line = (
        f"with unclean election on: {m['partitions_ever_offline']} partitions offline for "
        f"{m['offline_partition_seconds']:.1f} s instead of {actual['offline_partition_seconds']:.1f} s"
    )
    if stop is not None:
        until_ms = round(datetime.fromisoformat(stop["until_time"]).timestamp() * 1000)
        n, asked_s = offline_before(_rows(offline, UNCLEAN_ON), until_ms)
        _, actual_s = offline_before(_rows(offline, ACTUAL), until_ms)
        line += (
            f" (while the cluster ran, before its stop at offset {stop['until_offset']}: "
            f"{n} partitions offline for {asked_s:.1f} s instead of {actual_s:.1f} s)"
        )
    if not summary["identity"]["holds"]:
        line += " (identity check failed: see whatif_summary.json)"
    return line


def _rows(offline: pa.Table, scenario: str) -> pa.Table:
    return offline.filter(pc.equal(offline.column("scenario"), scenario))
