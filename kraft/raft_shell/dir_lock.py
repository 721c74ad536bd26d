"""One process per data directory: an exclusive lock on ``DATA_DIR/.lock``.

Kafka's log manager takes the same lock on each log directory. Without it a second
``kraft controller`` given the same ``--data-dir`` (a copy-paste slip, a service
started twice) opened the same metadata log and quorum-state, won its own election
and appended its batches into the segment the first process was writing; a second
``broker-agent`` took the first one's clean-shutdown broker epoch (KIP-966) and
registered with it.

The lock is ``flock`` on an open file: the kernel releases it when the process
exits, however it exits, so a crash never leaves a stale lock behind. The file
holds the holder's pid, for the refusal's message only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

FILE_NAME = ".lock"


class DataDirInUse(Exception):
    """Another live process holds the data directory's lock."""


@contextlib.contextmanager
def hold_dir_lock(data_dir: Path, owner: str = "controller") -> Iterator[Path]:
    """Hold DATA_DIR/.lock (creating the directory if needed) while the block runs.

    Raises DataDirInUse, naming the holder's pid, when another process holds it.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / FILE_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise DataDirInUse(
                f"{data_dir} is in use by {who} (it holds {path}): one data directory "
                f"per {owner}; stop that process or give this one another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
