"""The `kraft` command: one entry point, one subcommand per tool (argparse)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kraft.arg_types import whole_number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft", description="kraft-py: a KRaft-style metadata controller"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = sub.add_parser(
        "dump-log",
        help="print batch headers and decoded records of segments and snapshots",
        description="Like kafka-dump-log --cluster-metadata-decoder.",
    )
    dump.add_argument(
        "path",
        metavar="DIR_OR_FILE",
        help="a data dir, its __cluster_metadata-0 folder, a .log or a .checkpoint",
    )
    dump.add_argument("--json", action="store_true", help="one JSON object per record per line")
    dump.add_argument(
        "--from-offset",
        type=whole_number(0),
        default=0,
        metavar="N",
        help="skip records below offset N",
    )
    dump.add_argument(
        "--format",
        choices=("auto", "kafka", "kraft"),
        default="auto",
        help="kraft: native batches (magic 1); kafka: Apache Kafka's (magic 2); "
        "auto (default): chosen by each batch's magic byte",
    )
    dump.add_argument(
        "--skip-unknown",
        action="store_true",
        help="Kafka records of an unknown api key or newer version are counted and "
        "passed over instead of stopping the dump",
    )
    from kraft.tools import admin

    admin.register(sub)
    from kraft.tools import reassign

    reassign.register(sub)
    from kraft.local import cluster

    cluster.register(sub)
    from kraft.security import certs

    certs.register(sub)
    from kraft.server.node import add_controller_parser

    add_controller_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:
        # the reader went away (`kraft topics describe | head`): stop quietly, and
        # point stdout at /dev/null so that the exit's flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C on a command that waits (an admin call retrying an unreachable
        # controller, a dump of a big log): stop, without a traceback, as the shell's
        # 130 (128 + SIGINT)
        print(f"kraft {args.command}: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.command == "dump-log":
        from kraft.tools.dump_log import run

        return run(args.path, args.json, args.from_offset, args.format, args.skip_unknown)
    if args.command in ("topics", "brokers", "elect", "quorum"):
        from kraft.tools.admin import run as run_admin

        return run_admin(args)
    if args.command == "reassign-partitions":
        from kraft.tools.reassign import run as run_reassign

        return run_reassign(args)
    if args.command == "controller":
        from kraft.server.node import run_controller

        return run_controller(args)
    if args.command == "certs":
        from kraft.security.certs import run as run_certs

        return run_certs(args)
    if args.command == "cluster":
        from kraft.local.cluster import run as run_cluster

        return run_cluster(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
