"""Open a segment or snapshot for reading: a regular file, or one clear error.

A name is all the readers go by (`00000000000000000000.log`), and open() of a
FIFO with that name waits for a writer forever, a device reads without end, a
directory fails with a bare errno. Every reader of log files (the replays,
metadata_log.kafka's reader and format detection, `kraft dump-log`,
spark_replay's decoders) opens them here. The file is opened non-blocking and
checked with fstat, so one swapped for a FIFO after the stat cannot block.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from metadata_log.errors import MetadataLogError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(path: str | Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise MetadataLogError(
            f"{path}: is {kind}, not a regular file: a segment or snapshot must be one"
        )


def open_log_file(path: str | Path) -> BinaryIO:
    """`path` opened read-only (binary); MetadataLogError unless it is a regular
    file (symlinks followed, a loop of them named). OSError as open() raises it
    otherwise (a missing or unreadable file)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise MetadataLogError(f"{path}: a symlink loop ({e.strerror})") from None
    _check_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _check_regular(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
