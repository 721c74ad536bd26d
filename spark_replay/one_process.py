"""The spark-replay job in one Python process, without Spark: the baseline of
``benchmarks/replay_bench.py`` and a cross-check of the Spark job.

``python -m spark_replay.one_process --log-dir DIR --out OUT [--format auto|kafka|kraft]``
(this project's log or Apache Kafka's, as for spark-replay) writes the same
`records` table and the four history tables as ``spark-replay`` (Parquet, through
pyarrow), for complete logs (segments from offset 0, no starting snapshot).

It runs the very functions the Spark tasks run, one after another on one
core: `spark_replay.replay_job.replay_log` with a `SerialRunner` (each file's
records part and summary from one decode, then each file's vectorised replay,
`segment_replay`), so the benchmark compares like with like. Memory is bounded by one file's rows
and the partitions' states, as in a Spark task.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from metadata_log.errors import MetadataLogError
from spark_replay.tables import TABLE_COLUMNS


class OneProcessError(ValueError):
    """The log is not one this replay handles (it starts from a snapshot)."""


def write_tables(log_dir: str | Path, out: str | Path, fmt: str = "auto", warn: Any = None) -> int:
    """log -> OUT/records and the four history tables; returns the record count.

    OUT's table directories must not exist yet. `warn(text)` hears of a log read
    only in part (a torn tail, an epoch going back), as spark-replay says them.
    """
    from spark_replay.datasource import list_log_files
    from spark_replay.replay_job import SerialRunner, replay_log

    out = Path(out)
    files = list_log_files(log_dir, fmt=fmt)
    if any(f.source != "segment" for f in files) or (files and files[0].base_offset != 0):
        raise OneProcessError(
            f"{log_dir}: the one-process replay reads complete logs only "
            "(segments from offset 0), not a history that starts from a snapshot"
        )
    done = replay_log(SerialRunner(), files, out, progress=lambda _m: None)
    if warn is not None:
        from spark_replay import history as H

        if done.info.torn_tail:
            warn(H.torn_tail_text(done.info.torn_tail))
        if done.info.epoch_back:
            warn(H.epoch_back_text(done.info.epoch_back))
    return done.info.record_count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m spark_replay.one_process",
        description="The spark-replay tables in one Python process, without Spark "
        "(complete logs only).",
    )
    ap.add_argument("--log-dir", required=True, help="data dir or __cluster_metadata-0 dir")
    ap.add_argument("--out", required=True, help="output dir (must not hold the tables yet)")
    ap.add_argument(
        "--format",
        choices=("auto", "kafka", "kraft"),
        default="auto",
        help="Apache Kafka's log or this project's (auto: by the batches' magic byte)",
    )
    args = ap.parse_args(argv)
    from spark_replay.cli import UserError, usable_out, user_message

    out = Path(args.out)
    existing = [n for n in ("records", *TABLE_COLUMNS) if (out / n).exists()]
    if existing:
        print(f"one_process: {out} already holds {', '.join(existing)}", file=sys.stderr)
        return 2
    try:
        # as spark-replay: never inside a node's data dir (the log is read-only)
        out = usable_out(out, args.log_dir)
        n = write_tables(
            args.log_dir,
            out,
            args.format,
            warn=lambda text: print(f"one_process: warning: {text}", file=sys.stderr),
        )
    except (MetadataLogError, OneProcessError, UserError, OSError) as e:
        print(f"one_process: {user_message(e) or e}", file=sys.stderr)
        return 2
    print(f"one_process: {n} records -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
