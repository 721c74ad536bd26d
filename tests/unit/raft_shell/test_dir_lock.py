"""DATA_DIR/.lock: one process per controller data directory (kraft.raft_shell.dir_lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.raft_shell.dir_lock import DataDirInUse, hold_dir_lock


def test_a_held_lock_refuses_a_second_holder_and_is_free_after_the_block(tmp_path: Path) -> None:
    data = tmp_path / "new" / "dir"  # created when missing
    with hold_dir_lock(data) as path:
        assert path.read_text() == f"{os.getpid()}\n"
        with (
            pytest.raises(DataDirInUse, match=f"in use by process {os.getpid()}"),
            hold_dir_lock(data),
        ):
            pass
    with hold_dir_lock(data):  # released: taken again
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    """The kernel drops the lock with the process: kill -9 needs no clean-up."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from kraft.raft_shell.dir_lock import hold_dir_lock\n"
            "with hold_dir_lock(Path(sys.argv[1])):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        with (
            pytest.raises(DataDirInUse, match=f"in use by process {child.pid}"),
            hold_dir_lock(tmp_path),
        ):
            pass
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    with hold_dir_lock(tmp_path) as path:  # a dead holder's pid is overwritten
        assert path.read_text() == f"{os.getpid()}\n"
