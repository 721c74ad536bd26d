"""Every option whose --help names a numeric default ("default 10", "default: 2.5")
has that default: an operator reads --help to know how long a command waits.
(`kraft quorum add-controller --help` said 10 s while the command waited 60 s.)"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from broker_agent.cli import build_parser as broker_agent_parser
from kraft.cli import build_parser as kraft_parser
from spark_replay.cli import build_parser as spark_replay_parser
from spark_replay.whatif.cli import build_parser as whatif_parser

# "default 10", "default: 2.5", "default 60: the leader waits ..." (not "%(default)s")
NUMBER = re.compile(r"\bdefault:?\s+(-?\d+(?:\.\d+)?)\b")


def _options(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif action.help and action.option_strings:
            yield f"{path} {action.option_strings[-1]}", action


PARSERS = {
    "kraft": kraft_parser,
    "broker-agent": broker_agent_parser,
    "spark-replay": spark_replay_parser,
    "spark-replay what-if": whatif_parser,
}


def test_numeric_defaults_in_help_are_the_real_ones() -> None:
    checked = 0
    wrong = []
    for command, build in PARSERS.items():
        for where, action in _options(build(), command):
            m = NUMBER.search(action.help or "")
            if m is None:
                continue
            checked += 1
            real = action.default
            number = isinstance(real, int | float) and not isinstance(real, bool)
            if not number or float(m.group(1)) != float(real):
                wrong.append(f"{where}: help says {m.group(0)!r}, default is {real!r}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 14  # the walk reached every subcommand's --timeout


def test_a_voter_change_says_it_waits_60_s() -> None:
    args = kraft_parser().parse_args(
        ["quorum", "add-controller", "--node-id", "4", "--directory-id", "d" * 22]
        + ["--url", "http://h:1"]
    )
    assert args.timeout == 60.0
    assert kraft_parser().parse_args(["quorum", "describe"]).timeout == 10.0
