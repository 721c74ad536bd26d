"""The one-line what-if at the end of `make demo` (kraft/local/demo.py step 9).

Runs `spark-replay what-if` on the demo controller's log with unclean election
on (a child process, as the demo runs spark-replay), into the replay's OUT, so
report.html gains its "What if" section, and returns the line to print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    actual = summary["actual"]["metrics"]
    [asked] = [s for s in summary["scenarios"] if s["name"] == UNCLEAN_ON]
    m = asked["metrics"]
    line = (
        f"with unclean election on: {m['partitions_ever_offline']} partitions offline for "
        f"{m['offline_partition_seconds']:.1f} s instead of {actual['offline_partition_seconds']:.1f} s"
    )
    if not summary["identity"]["holds"]:
        line += " (identity check failed: see whatif_summary.json)"
    return line
