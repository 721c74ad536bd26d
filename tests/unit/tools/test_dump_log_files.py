"""`kraft dump-log` on paths that are not log files: one error line naming what
the path is (a FIFO, a symlink loop), exit 1, never a hang or "no such file";
and running out of memory is a line that says so, not an empty reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kraft.tools import dump_log
from kraft.tools.dump_log import run
from metadata_log.replay import METADATA_DIR_NAME

# a FIFO opened the old way blocks forever: the test fails at 5 s instead
pytestmark = pytest.mark.timeout(5)


def test_a_fifo_named_like_a_segment_is_one_error_not_a_hang(capsys, tmp_path: Path) -> None:
    d = tmp_path / METADATA_DIR_NAME
    d.mkdir()
    fifo = d / "00000000000000000000.log"
    os.mkfifo(fifo)
    for target in (tmp_path, fifo):
        assert run(str(target), as_json=True) == 1
        err = capsys.readouterr().err.splitlines()
        assert err == [
            f"kraft dump-log: error: {fifo}: is a FIFO, not a regular file: "
            "a segment or snapshot must be one"
        ]


def test_a_symlink_loop_is_named_not_missing(capsys, tmp_path: Path) -> None:
    loop = tmp_path / "selfloop"
    loop.symlink_to(loop)
    assert run(str(loop)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"kraft dump-log: error: {loop}: Too many levels of symbolic links (a symlink loop)"
    ]
    inside = tmp_path / "log" / METADATA_DIR_NAME
    inside.mkdir(parents=True)
    seg = inside / "00000000000000000000.log"
    seg.symlink_to(seg)
    assert run(str(tmp_path / "log")) == 1
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith(f"kraft dump-log: error: {seg}: a symlink loop (")
    )


def test_running_out_of_memory_is_one_line_that_says_so(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_memory(*_args: object) -> list[str]:
        raise MemoryError

    monkeypatch.setattr(dump_log, "dump", no_memory)
    assert run(str(tmp_path)) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"kraft dump-log: error: {tmp_path}: out of memory"
    ]
