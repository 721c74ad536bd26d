"""The folder is the boundary: nothing in kraft/raft/ imports I/O, a clock or the shell.

kraft/raft/ is the pure core (decisions); its asyncio shell is kraft/raft_shell/.
A module of the core that imported asyncio, a socket, the clock or the shell would
put the boundary back inside the folder, so each module's imports are read here
(the module's own import statements, by its syntax tree).
"""

from __future__ import annotations

import ast
from pathlib import Path

import kraft.raft

FORBIDDEN = (
    "aiohttp",
    "asyncio",
    "concurrent",
    "kraft.clock",
    "kraft.raft_shell",
    "os",
    "socket",
    "threading",
    "time",
)


def imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_module_of_the_raft_core_imports_io_a_clock_or_its_shell() -> None:
    folder = Path(kraft.raft.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) > 10  # the folder was found
    offenders = {
        p.name: sorted(
            n for n in imported_names(p) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)
        )
        for p in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_shell_lives_in_its_own_package() -> None:
    folder = Path(kraft.raft.__file__).parent
    for shell_module in ("client.py", "transport.py", "quorum_state.py", "file_log_adapter.py"):
        assert not (folder / shell_module).exists(), shell_module
