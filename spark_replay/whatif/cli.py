"""`spark-replay what-if --log-dir DIR --out OUT --set KEY=VALUE ... [--grid FILE]
[--in-force KEY=VALUE ...] [--racks 1=a,2=b,...] [--master M] [--no-report]`.

Everything the user can get wrong (a key, a value, the grid file, the racks,
the log) is checked before Spark starts: one line on stderr, exit status 2.
Prints one JSON line with each scenario's figures when done.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from metadata_log.errors import MetadataLogError
from spark_replay.cli import (
    EXIT_INTERRUPTED,
    INTERRUPTED,
    UserError,
    check_master,
    usable_out,
    user_message,
)
from spark_replay.whatif.scenario import KNOWN_KEYS, ScenarioError, build_scenarios

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spark-replay what-if",
        description="Replay a log's facts through the controller under other settings "
        "(docs/what-if.md).",
    )
    ap.add_argument("--log-dir", required=True, help="data dir or its __cluster_metadata-0")
    ap.add_argument("--out", required=True, help="output dir (may be a spark-replay --out)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a setting of the scenario (repeatable; keys: {', '.join(KNOWN_KEYS)})",
    )
    ap.add_argument("--grid", help="JSON list of scenarios: [{'name': ..., 'set': {KEY: VALUE}}]")
    ap.add_argument(
        "--in-force",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="what was in force when the log was written, where the log does not say "
        "(default Kafka's: broker.session.timeout.ms=9000, ...)",
    )
    ap.add_argument("--racks", help="BROKER=RACK,... for a log without racks")
    ap.add_argument(
        "--master",
        default=None,
        help="Spark master (default local[*]; under spark-submit, spark-submit's)",
    )
    ap.add_argument("--no-report", action="store_true", help="leave report.html alone")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # absolute: the tasks open the log and OUT's work files by path, and an
    # executor's working directory is not the driver's
    args.log_dir = str(Path(args.log_dir).absolute())
    try:
        scenarios = build_scenarios(args.set, args.grid, args.in_force, args.racks)
        if not Path(args.log_dir).exists():
            raise ScenarioError(f"--log-dir {args.log_dir} does not exist")
        # before the facts, which take minutes on a big log
        check_master(args.master)  # first: a bad --master leaves no OUT behind
        args.out = str(usable_out(args.out, args.log_dir))
        from spark_replay.whatif.facts import read_facts
        from spark_replay.whatif.job import check_racks

        facts = read_facts(args.log_dir, scenarios[0].session_timeout_ms)
        check_racks(facts, scenarios)
    except (ScenarioError, MetadataLogError, UserError, OSError) as e:
        print(f"spark-replay what-if: error: {user_message(e) or e}", file=sys.stderr)
        return EXIT_USER_ERROR

    from spark_replay.session import build_session, cli_master, quiet_task_failures
    from spark_replay.whatif.job import run_whatif

    spark = build_session(cli_master(args.master))
    quiet_task_failures(spark)
    try:
        summary = run_whatif(
            spark, args.log_dir, args.out, scenarios, facts=facts, report=not args.no_report
        )
    except KeyboardInterrupt:
        print(INTERRUPTED.format(prog="spark-replay what-if"), file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        spark.stop()
    line = {
        "out": str(args.out),
        "identity": summary["identity"]["holds"],
        "scenarios": {
            s["name"]: {
                k: s["metrics"][k]
                for k in ("offline_partition_seconds", "max_offline_at_once", "unclean_elections")
            }
            for s in [summary["actual"], *summary["scenarios"]]
        },
        "seconds": summary["timings"],
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
