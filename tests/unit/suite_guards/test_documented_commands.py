"""Every command the contract (DESIGN 1.1) and README's Commands table show exists,
with every option they name.

A documented flag the CLI lacks is found by a user first (README once showed a
command's options under another name). Each row's commands are asked for
`--help` in this process, through the console scripts' own entry points, and each
`--option` the row names must be in the help of one of them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import re
from pathlib import Path

import pytest

from tests.design_doc import DESIGN, section

REPO = Path(__file__).resolve().parents[3]
ENTRY_POINTS = {
    "kraft": "kraft.cli:main",
    "broker-agent": "broker_agent.cli:main",
    "spark-replay": "spark_replay.cli:main",
}
_WORD = re.compile(r"^[a-z][a-z-]*(\|[a-z][a-z-]*)*$")
_FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def _commands(table: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(program, alternatives of its subcommand path, options named) per command
    of the table's first column; a span that starts with an option continues the
    command before it."""
    out: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = re.split(r"(?<!\\)\|", line)[1]  # "\|" is a | inside a cell
        for span in re.findall(r"`([^`]+)`", first_cell):
            tokens = span.replace("\\|", "|").split()
            if tokens[0].startswith("-") and out:
                prog, subs, flags = out.pop()
                out.append((prog, subs, flags + tuple(_FLAG.findall(span))))
                continue
            if tokens[0] not in ENTRY_POINTS:
                continue  # make targets, python -m ...
            words = list(itertools.takewhile(lambda t: _WORD.match(t) is not None, tokens[1:]))
            paths = tuple(" ".join(p) for p in itertools.product(*(w.split("|") for w in words)))
            rest = " ".join(tokens[1 + len(words) :])
            out.append((tokens[0], paths or ("",), tuple(_FLAG.findall(rest))))
    return out


def _help(prog: str, path: str) -> tuple[object, str]:
    module, fn = ENTRY_POINTS[prog].split(":")
    main = getattr(importlib.import_module(module), fn)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main([*path.split(), "--help"])
    except SystemExit as e:
        return e.code, out.getvalue()
    return None, out.getvalue()


TABLES = {
    "DESIGN 1.1": (DESIGN, "### 1.1 Commands (console scripts from pyproject.toml)"),
    "README Commands": (REPO / "README.md", "## Commands"),
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_documented_command_and_option_exists(table: str) -> None:
    path, heading = TABLES[table]
    commands = _commands(section(path.read_text(), heading))
    assert len(commands) >= 15, commands  # the parsing found the table
    missing = []
    for prog, paths, flags in commands:
        helps = []
        for path in paths:
            code, text = _help(prog, path)
            if code != 0:
                missing.append(f"{prog} {path}: --help exits {code}")
            helps.append(text)
        for flag in flags:
            if not any(re.search(rf"{re.escape(flag)}\b", h) for h in helps):
                missing.append(f"{prog} {'|'.join(paths)}: no option {flag}")
    assert not missing, "\n".join(missing)


def test_the_parser_sees_a_wrong_option() -> None:
    table = "| `kraft topics alter-configs --topic T --config K=V` | x |\n"
    [(prog, paths, flags)] = _commands(table)
    assert (prog, paths, flags) == ("kraft", ("topics alter-configs",), ("--topic", "--config"))
    _, text = _help(prog, paths[0])
    assert "--add-config" in text and not re.search(r"--config\b", text)


def test_a_section_ends_at_its_level_outside_code_blocks() -> None:
    # README's Commands section has subsections and shell comments in code blocks
    text = "# top\n## Commands\na\n### sub\n```sh\n# a comment\n```\nb\n## Next\nc\n"
    assert section(text, "## Commands") == "## Commands\na\n### sub\n```sh\n# a comment\n```\nb"
    assert section(text, "## Next") == "## Next\nc\n"
