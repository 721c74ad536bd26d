"""`spark-replay --log-dir DIR --out OUT [--format auto|kafka|kraft] [--master local[*]]
[--as-of-offset N | --as-of-time ISO]`.

The Spark batch job of DESIGN 1.6. DIR is this project's log or an Apache Kafka
`metadata.log.dir` (or its `__cluster_metadata-0` folder), told apart by the
batches' magic byte; a Kafka log is only ever opened for reading. Also runnable as
``spark-submit --master local[4] spark_replay/cli.py --log-dir DIR --out OUT``
(without --master, the master comes from spark-submit; run it with the project's
virtualenv active, or PYSPARK_PYTHON set to its python, so that the driver and
the tasks import `spark_replay`).

Steps (`spark_replay.replay_job.replay_log`): decode every log file into the
`records` table (one Spark task per file, see `spark_replay.records`; the same
decoder as the `kraft_metadata_log` data source), the task also summarizing the
file for the replay; the history tables by the segment-parallel replay (the
driver folds the summaries into each file's starting state as they arrive, one
task per file replays it, vectorised, and writes its part of each table; a
file's replay starts as soon as the files before it are summarized, so the two
stages overlap); with an as-of point, the point is checked once the records are
in and before any replay, and the state as of it is written; then
`summary.json` and `report.html`. Each step prints one line on stderr when done
(with records/s).

All or nothing: a failed run leaves none of its outputs behind (nor an earlier
run's) under OUT. User errors (a missing directory, a corrupt segment, an offset
outside the log) are one line on stderr and exit status 2, without a Python
traceback.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from metadata_log.errors import MetadataLogError

EXIT_USER_ERROR = 2
# Ctrl-C: one line and the shells' 128 + SIGINT (the outputs: as for a failed run)
EXIT_INTERRUPTED = 130
INTERRUPTED = "{prog}: interrupted"
TABLES = ("broker_history", "partition_history", "leader_elections", "offline_partitions")

# The first line of our own errors inside a Spark task failure (the worker's
# traceback is embedded in a long JVM message).
_TASK_ERROR = re.compile(
    r"(?:[\w.]+\.)?(CorruptBatchError|IncompleteBatchError|RecordDecodeError|MetadataLogError"
    r"|HistoryError|MetadataReplayError"
    # a log file a task could not read (permissions, a directory named *.log, ...)
    r"|PermissionError|IsADirectoryError|NotADirectoryError|FileNotFoundError|OSError"
    r"): ([^\n]+)"
)


class UserError(Exception):
    """Something the user can fix: printed as one line, no traceback."""


def _check_out_beside_log(out: Path, log_dir: str | Path) -> None:
    """OUT may not be inside the metadata log's folder, nor inside any node's data
    dir (one with meta.properties, this log's or another's: a Kafka broker refuses
    to start on a log dir holding folders that are not topic partitions)."""
    from spark_replay.datasource import metadata_dir

    log_folder = metadata_dir(log_dir).resolve()
    if out == log_folder or log_folder in out.parents:
        raise UserError(
            f"--out {out} is inside the log's data dir {log_folder}: give a folder "
            "outside it (the outputs would sit beside the metadata log)"
        )
    for folder in (out, *out.parents):
        if (folder / "meta.properties").is_file():
            whose = (
                "the log's data dir"
                if folder == log_folder.parent
                else "the data dir of another Kafka or kraft node (it holds meta.properties)"
            )
            raise UserError(
                f"--out {out} is inside {whose} {folder}: give a folder outside it "
                "(a node refuses to start on a data dir holding folders it does not know)"
            )


def usable_out(out: str | Path, log_dir: str | Path | None = None) -> Path:
    """OUT as an absolute path (the tasks write it by path, and an executor's working
    directory is not the driver's), created if missing. UserError, before Spark
    starts, when it cannot hold the outputs, or when it is inside the data dir of
    `log_dir` (the tables' folders would land beside the metadata log: a Kafka
    node refuses to start on a log dir holding folders it does not know)."""
    path = Path(out).absolute()
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} is a file, not a directory")
    if log_dir is not None:
        _check_out_beside_log(path.resolve(), log_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {path} cannot be created: {e.strerror or e}") from None
    try:
        # as root, os.access says yes to a read-only mount or an immutable folder
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UserError(f"--out {path} cannot be written: {e.strerror or e}") from None
    return path


_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*\d+)?\])?|local-cluster\[.+\]|spark://.+|yarn|k8s://.+"
)


def check_master(master: str | None) -> None:
    """UserError, before Spark starts, for a --master Spark would refuse (with a
    JVM stack trace)."""
    if master is not None and not _MASTER.fullmatch(master):
        raise UserError(
            f"--master {master!r} is not a Spark master URL: local, local[N], local[*], "
            "spark://HOST:PORT, yarn or k8s://URL"
        )


def user_message(exc: BaseException) -> str | None:
    """The log error inside a (Spark) exception, if it is one of ours."""
    if isinstance(exc, MetadataLogError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"cannot read {exc.filename}: {exc.strerror or exc}" if exc.filename else str(exc)
    m = _TASK_ERROR.search(str(exc))
    if m:
        return m.group(2).strip()
    return None


def parse_time_ms(text: str) -> int:
    """ISO 8601 (a naive time is UTC) or epoch milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"--as-of-time {text!r} is not an ISO 8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def run_job(
    spark: Any,
    log_dir: str | Path,
    out: str | Path,
    as_of_offset: int | None = None,
    as_of_time_ms: int | None = None,
    report: bool = True,
    fmt: str = "auto",
) -> dict[str, Any]:
    """The whole job on an existing SparkSession; returns timings and the summary.

    `fmt` is the log's format: "auto" (by the first batch's magic byte), "kraft"
    (this project's) or "kafka" (Apache Kafka's, read-only through metadata_log.kafka).

    All or nothing: the run writes into OUT/_staging, and only once it succeeded
    do its outputs replace those of an earlier run (each a rename in OUT); if it
    fails, OUT is as it was. So OUT never holds a partial (or mixed) history, and
    a failed rerun does not cost the last good one. Other files in OUT are left
    alone.
    """
    out = Path(out)
    from spark_replay.datasource import list_log_files

    files = list_log_files(log_dir, fmt=fmt)  # a clear error before Spark does anything
    source = log_source(log_dir, files[0].fmt)
    out.mkdir(parents=True, exist_ok=True)
    stage = out / STAGING
    remove_output(stage)  # a run killed before it could clean up
    stage.mkdir()
    try:
        result = _run(spark, files, stage, as_of_offset, as_of_time_ms, report, source)
        for name in OUTPUTS:
            remove_output(out / name)  # an output this run did not make (state_as_of) goes too
            if (stage / name).exists():
                (stage / name).rename(out / name)
        return result
    finally:
        remove_output(stage)


def log_source(log_dir: str | Path, fmt: str) -> dict[str, Any]:
    """What summary.json and report.html say about the log read (DESIGN 1.6)."""
    from metadata_log.kafka.reader import read_cluster_id
    from metadata_log.replay import metadata_dir

    return {
        "source_format": fmt,
        "log_dir": str(metadata_dir(log_dir).resolve()),
        "cluster_id": read_cluster_id(log_dir),
    }


def metadata_version(records: Any) -> int | None:
    """The metadata.version feature level at the end of the log (its last
    FeatureLevelRecord for metadata.version, the snapshot's included), or None."""
    from pyspark.sql import functions as F

    rows = (
        records.filter(F.col("type") == "FeatureLevelRecord")
        .select("source", "offset", "fields")
        .collect()
    )
    # Segment records come after the snapshot's; within each, offset order.
    rows.sort(key=lambda r: (r["source"] == "segment", r["offset"]))
    level = None
    for r in rows:
        f = json.loads(r["fields"])
        if f.get("name") == "metadata.version":
            level = f.get("feature_level")
    return level


OUTPUTS = ("records", *TABLES, "state_as_of", "_work", "summary.json", "report.html")
STAGING = "_staging"  # a run's outputs until it succeeded


def remove_output(p: Path) -> None:
    """An output folder or file gone (a symlink itself, not what it points to)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()


def _progress(msg: str) -> None:
    """One line per step on stderr: long jobs show where they are (Spark's bar shows how far)."""
    print(f"spark-replay: {msg}", file=sys.stderr, flush=True)


def _run(
    spark: Any,
    files: list[Any],
    out: Path,
    as_of_offset: int | None,
    as_of_time_ms: int | None,
    report: bool,
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from spark_replay import history as H
    from spark_replay.replay_job import SparkRunner, replay_log

    # Read back only when a later step queries it: opening the table is a Spark
    # job of its own (the parts' footers), which the history does not need.
    records = functools.cache(lambda: spark.read.parquet(str(out / "records")))
    offset: int | None = None

    def check_as_of(info: Any) -> None:
        """The as-of point is checked before the replay: a bad one is a user error."""
        nonlocal offset
        offset = (
            as_of_offset if as_of_offset is not None else H.offset_at_time(records(), as_of_time_ms)  # type: ignore[arg-type]
        )
        H.check_in_history(info, offset)
        if as_of_offset is None and as_of_time_ms > info.last_time_ms:  # type: ignore[operator]
            # Not an error (the state held from the last record on), but the log
            # cannot tell what happened after it: say so rather than imply it.
            print(
                f"spark-replay: warning: --as-of-time {H.iso_time(as_of_time_ms)} is after the "
                f"log's last record (offset {info.last_offset}, {H.iso_time(info.last_time_ms)}): "
                "the state is the one the log ends with; the log says nothing later",
                file=sys.stderr,
            )

    as_of = as_of_offset is not None or as_of_time_ms is not None
    t = time.perf_counter()
    done = replay_log(
        SparkRunner(spark),
        files,
        out,
        progress=_progress,
        before_history=check_as_of if as_of else None,
    )
    info, timings, profile = done.info, done.timings, done.profile
    timings["tables_s"] = time.perf_counter() - t
    if info.torn_tail:
        print(f"spark-replay: warning: {H.torn_tail_text(info.torn_tail)}", file=sys.stderr)
    if info.epoch_back:
        print(f"spark-replay: warning: {H.epoch_back_text(info.epoch_back)}", file=sys.stderr)
    _progress(
        f"records and history tables written ({timings['tables_s']:.1f} s, "
        f"{max(1, info.record_count) / timings['tables_s']:,.0f} records/s)"
    )
    # From here on, read the written tables: cheap, and what a user would query.
    written = H.Tables(
        info=info,
        **{name: spark.read.parquet(str(out / name)) for name in TABLES},
    )
    result: dict[str, Any] = {
        "info": info.to_dict(),
        "timings": timings,
        "task_profile": profile,
        **(source or {}),
    }

    if offset is not None:
        t = time.perf_counter()
        brokers, partitions = H.state_as_of(
            written.broker_history, written.partition_history, info, offset
        )
        target = out / "state_as_of"
        brokers.write.parquet(str(target / "brokers"))
        partitions.write.parquet(str(target / "partitions"))
        b_rows, p_rows = H.rows_state(brokers.collect(), partitions.collect())
        (target / "state.json").write_text(
            json.dumps(
                {
                    "as_of_offset": offset,
                    "as_of_time_ms": as_of_time_ms,
                    "brokers": b_rows,
                    "partitions": p_rows,
                },
                indent=1,
            )
            + "\n"
        )
        result["as_of_offset"] = offset
        timings["state_as_of_s"] = time.perf_counter() - t
        _progress(f"state as of offset {offset} written")

    if report:
        from spark_replay.report import plots, summarize, write_report

        t = time.perf_counter()
        summary = {
            **(source or {}),
            "metadata_version": metadata_version(records()),
            **summarize(records(), written),
            **({"torn_tail": info.torn_tail} if info.torn_tail else {}),
            **({"epoch_back": info.epoch_back} if info.epoch_back else {}),
        }
        write_report(out, summary, plots(written, summary["at_end"]))
        result["summary"] = summary
        timings["report_s"] = time.perf_counter() - t
        _progress(f"summary.json and report.html written ({timings['report_s']:.1f} s)")
    return result


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spark-replay",
        description="Replay a __cluster_metadata log with Spark into cluster-history tables.",
    )
    ap.add_argument("--log-dir", required=True, help="data dir or its __cluster_metadata-0 folder")
    ap.add_argument("--out", required=True, help="output directory (Parquet tables, report)")
    ap.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[*]; under spark-submit, spark-submit's)",
    )
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--as-of-offset", type=int, help="also write state_as_of/ at this offset")
    group.add_argument(
        "--as-of-time", help="also write state_as_of/ at this time (ISO 8601, UTC if naive)"
    )
    ap.add_argument(
        "--format",
        choices=("auto", "kafka", "kraft"),
        default="auto",
        help="the log's format: Apache Kafka's (record batch v2) or this project's; "
        "auto (default) reads the first batch's magic byte",
    )
    ap.add_argument("--no-report", action="store_true", help="skip summary.json and report.html")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["what-if"]:  # issue 20: spark_replay/whatif
        from spark_replay.whatif.cli import main as what_if

        return what_if(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        as_of_time = parse_time_ms(args.as_of_time) if args.as_of_time else None
        if args.as_of_offset is not None and args.as_of_offset < 0:
            raise UserError("--as-of-offset must be >= 0")
        # absolute: the tasks open the log and write OUT by path, and an
        # executor's working directory is not the driver's
        log_dir = Path(args.log_dir).absolute()
        if not log_dir.exists():
            raise UserError(f"--log-dir {log_dir} does not exist")
        from spark_replay.datasource import check_holds_metadata, list_log_files

        check_holds_metadata(list_log_files(log_dir, fmt=args.format))
        check_master(args.master)  # first: a bad --master leaves no OUT behind
        out = usable_out(args.out, log_dir)
    except (UserError, MetadataLogError, OSError) as e:
        print(f"spark-replay: error: {user_message(e) or e}", file=sys.stderr)
        return EXIT_USER_ERROR

    from spark_replay.session import build_session, cli_master, quiet_task_failures

    spark = build_session(cli_master(args.master))
    quiet_task_failures(spark)
    try:
        result = run_job(
            spark,
            log_dir,
            out,
            as_of_offset=args.as_of_offset,
            as_of_time_ms=as_of_time,
            report=not args.no_report,
            fmt=args.format,
        )
    except KeyboardInterrupt:
        # Ctrl-C (PySpark turns SIGINT into this): OUT as it was (the staging goes)
        print(INTERRUPTED.format(prog="spark-replay"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 — a Spark failure wraps our error
        msg = user_message(e)
        if msg is None:
            raise
        print(f"spark-replay: error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    finally:
        spark.stop()
    info = result["info"]
    line = {
        "out": str(args.out),
        "format": result.get("source_format"),
        "records": info["record_count"],
        "offsets": [info["first_offset"], info["last_offset"]],
        "seconds": {k: round(v, 2) for k, v in result["timings"].items()},
    }
    if "as_of_offset" in result:
        line["as_of_offset"] = result["as_of_offset"]
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
