"""No log call in the tree passes a reserved LogRecord attribute in `extra=` (issue 27).

`logging` raises KeyError ("Attempt to overwrite 'message' in LogRecord") for such
a key, at the log call: the broker agent's "registration refused" warning once
passed `message` and so ended its send task before the lifecycle heard of the
error. This scans every module's source (AST), so the class of bug cannot come
back: each `extra=` of a logging call must be a dict literal whose keys are string
constants outside LogRecord's attributes. A dynamic part is checked where its keys
come from: `**kwargs` of the enclosing function through the keyword names of every
call of that function in the tree, the state-change log's `**fields` through the
keys its producer can write.
"""

from __future__ import annotations

import ast
import functools
import logging
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SOURCES = ("kraft", "broker_agent", "metadata_log", "spark_replay", "benchmarks", "tests")
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
# What makeRecord refuses to overwrite: LogRecord's own attributes (taskName from
# Python 3.12 on), plus the two the formatter sets.
RESERVED = set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
# (module, function) -> the function whose dict keys a `**spread` in its extra draws on
DYNAMIC = {("kraft/logs.py", "log_state_change"): "state_change"}


def python_files() -> list[Path]:
    out: list[Path] = []
    for top in SOURCES:
        out += sorted((REPO / top).rglob("*.py"))
    return out


def constant_keys(fn: ast.FunctionDef) -> set[str]:
    """Every string key a function writes into a dict: literals and `d["k"] = ...`."""
    keys: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict):
            keys |= {
                k.value for k in node.keys if isinstance(k, ast.Constant) and type(k.value) is str
            }
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                    keys.add(str(t.slice.value))
    return keys


@functools.cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def calls_by_name(files: list[Path]) -> dict[str, list[tuple[str, ast.Call]]]:
    """Every call in the tree, by the called function's (or method's) name."""
    out: dict[str, list[tuple[str, ast.Call]]] = {}
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if name:
                    out.setdefault(name, []).append((f"{rel}:{node.lineno}", node))
    return out


def kwargs_problems(fn: ast.FunctionDef, calls: dict[str, list[tuple[str, ast.Call]]]) -> list[str]:
    """The keyword names that calls of `fn` pass into its **kwargs."""
    named = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    out = []
    for where, call in calls.get(fn.name, []):
        for kw in call.keywords:
            if kw.arg is None:
                out.append(f"{where}: {fn.name}(**...) feeds a log extra unchecked")
            elif kw.arg in RESERVED and kw.arg not in named:
                out.append(f"{where}: {fn.name}({kw.arg}=...) is a LogRecord attribute in extra")
    return out


def extra_problems(
    path: Path, calls: dict[str, list[tuple[str, ast.Call]]] | None = None
) -> list[str]:
    rel = path.relative_to(REPO).as_posix()
    if "extra" not in path.read_text():
        return []
    tree = parse(path)
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    enclosing: dict[ast.AST, str] = {}
    for fn in functions.values():
        for node in ast.walk(fn):
            enclosing.setdefault(node, fn.name)
    problems: list[str] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_METHODS
        ):
            continue
        for kw in node.keywords:
            if kw.arg != "extra":
                continue
            where = f"{rel}:{node.lineno}"
            if not isinstance(kw.value, ast.Dict):
                problems.append(f"{where}: extra is not a dict literal")
                continue
            for key, value in zip(kw.value.keys, kw.value.values, strict=True):
                fn = functions.get(enclosing.get(node, ""))
                if (
                    key is None
                    and fn is not None
                    and fn.args.kwarg is not None
                    and isinstance(value, ast.Name)
                    and value.id == fn.args.kwarg.arg
                ):  # the enclosing function's **kwargs: checked at its call sites
                    problems += kwargs_problems(fn, calls or {})
                elif key is None:  # a **spread
                    producer = DYNAMIC.get((rel, enclosing.get(node, "")))
                    if producer is None:
                        problems.append(f"{where}: extra spreads {ast.unparse(value)}")
                        continue
                    bad = constant_keys(functions[producer]) & RESERVED
                    problems += [f"{where}: {producer}() writes reserved key {k!r}" for k in bad]
                elif not (isinstance(key, ast.Constant) and type(key.value) is str):
                    problems.append(f"{where}: extra key {ast.unparse(key)} is not a constant")
                elif key.value in RESERVED:
                    problems.append(f"{where}: extra key {key.value!r} is a LogRecord attribute")
    return problems


def test_no_log_call_passes_a_reserved_logrecord_key() -> None:
    files = python_files()
    assert len(files) > 50  # the scan sees the tree
    calls = calls_by_name(files)
    problems = [p for f in files for p in extra_problems(f, calls)]
    assert problems == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ('log.warning("x", extra={"message": 1})', "is a LogRecord attribute"),
        ('log.info("x", extra={"event": "e", "name": 1})', "is a LogRecord attribute"),
        ('log.info("x", extra=fields)', "not a dict literal"),
        ('log.info("x", extra={**fields})', "spreads fields"),
        ('log.info("x", extra={k: 1})', "not a constant"),
    ],
)
def test_the_scan_finds_each_kind_of_unsafe_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: str
) -> None:
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    path = tmp_path / "mod.py"
    path.write_text(f"def f(log, fields, k):\n    {source}\n")
    [problem] = extra_problems(path)
    assert expected in problem


def test_kwargs_spread_into_extra_are_checked_at_each_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    path = tmp_path / "mod.py"
    path.write_text(
        "def summary(log, first, **counts):\n"
        "    log.info('x', extra={'event': 'e', **counts})\n"
        "summary(log, 1, isr_changed=2)\n"
        "summary(log, 1, lineno=3)\n"
        "summary(log, first=1, **more)\n"
    )
    problems = extra_problems(path, calls_by_name([path]))
    assert len(problems) == 2
    assert "summary(lineno=...)" in problems[0] and "summary(**...)" in problems[1]


def test_a_reserved_key_really_raises_in_logging() -> None:
    # what the scan guards against: the log call itself raises (spelled through
    # ** so that the scan above does not flag this file)
    with pytest.raises(KeyError, match="message"):
        logging.getLogger("t").warning("x", **{"extra": {"message": "refused"}})
