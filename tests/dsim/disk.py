"""SimDisk: crash semantics for the real files of simulated nodes.

The nodes run the deployed file code (metadata_log's FileLog, the snapshot and
quorum-state writers) on real files in a scratch directory, ideally on tmpfs.
What makes it a simulated disk is that durability is decided here: `os.fsync`
is replaced, for the duration of a simulation, by a function that records the
file's content at that moment as its durable content (keyed by inode, so a
rename keeps it). A crash of a node then puts every file of that node back to
its durable content plus, with some chance, a prefix of the bytes written after
it (a torn write). A file that was neither fsynced nor listed in a directory
fsync disappears; one whose directory entry was fsynced (the directory's fsync)
but not its data survives empty, as POSIX allows. Renames and unlinks are taken
as durable at once: a simplification, the code fsyncs the directory after each
anyway.

Faults:
- `fail_fsync(node)`: the node's next fsync raises EIO. Kafka (and this code)
  must treat it as fatal and never retry: a later fsync of the same file by the
  same process incarnation is recorded in `retried_after_failure`;
- latencies and stalls are the loop's executor delay (tests/dsim/loop.py), since
  every fsync of the shells runs through `run_in_executor`.
"""

from __future__ import annotations

import errno
import os
import random
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

_REAL_FSYNC = os.fsync
_REAL_UNLINK = os.unlink
_REAL_REPLACE = os.replace
_REAL_RENAME = os.rename


class SimDisk:
    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root = root
        self.rng = rng
        self.durable: dict[int, bytes] = {}  # inode -> content at its last fsync
        self.fail_next: set[int] = set()  # nodes whose next fsync fails
        self.failed: dict[int, tuple[int, str]] = {}  # node -> (incarnation, file) that failed
        self.retried_after_failure: list[str] = []
        self.incarnation: dict[int, int] = {}
        self.down: set[int] = set()  # crashed nodes: their fsyncs count for nothing
        self.fsyncs = 0
        self.on_event: Callable[[str], None] = lambda _e: None

    def node_dir(self, nid: int) -> Path:
        return self.root / f"n{nid}"

    def _node_of(self, path: str) -> int | None:
        rel = os.path.relpath(path, self.root)
        head = rel.split(os.sep, 1)[0]
        return int(head[1:]) if head.startswith("n") and head[1:].isdigit() else None

    # --------------------------------------------------------------- the hooks

    def _fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        nid = self._node_of(path)
        if nid is None:
            _REAL_FSYNC(fd)
            return
        if nid in self.down:
            return  # a dead process syncs nothing
        inc = self.incarnation.get(nid, 0)
        if self.failed.get(nid) == (inc, path):
            self.retried_after_failure.append(f"n{nid} retried the failed fsync of {path}")
        name = os.path.basename(path)
        # Only the Raft log and the quorum-state file, whose failed fsync must stop
        # the node (a failed snapshot write is retried with a new file by design).
        if nid in self.fail_next and (name.endswith(".log") or name.startswith("quorum-state")):
            self.fail_next.discard(nid)
            self.failed[nid] = (inc, path)
            self.on_event(f"fsync-fail n{nid} {os.path.basename(path)}")
            raise OSError(errno.EIO, "simulated fsync failure", path)
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                self.durable[st.st_ino] = f.read()
        elif stat.S_ISDIR(st.st_mode):
            # The entries are durable now; a file's data only once it is fsynced.
            for entry in os.scandir(path):
                if entry.is_file(follow_symlinks=False):
                    self.durable.setdefault(entry.inode(), b"")
        self.fsyncs += 1

    def _forget(self, path: str | os.PathLike[str], dir_fd: int | None) -> None:
        try:
            st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode) and st.st_nlink <= 1:
            self.durable.pop(st.st_ino, None)  # the inode may be reused

    def _unlink(self, path, *, dir_fd=None):  # noqa: ANN001, ANN202 - os.unlink's signature
        self._forget(path, dir_fd)
        return _REAL_UNLINK(path, dir_fd=dir_fd)

    def _replace(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # noqa: ANN001, ANN202
        self._forget(dst, dst_dir_fd)
        return _REAL_REPLACE(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def _rename(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # noqa: ANN001, ANN202
        self._forget(dst, dst_dir_fd)
        return _REAL_RENAME(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """os.fsync (and the calls that free an inode) routed through this disk."""
        saved = os.fsync, os.unlink, os.remove, os.replace, os.rename
        os.fsync, os.unlink, os.remove = self._fsync, self._unlink, self._unlink
        os.replace, os.rename = self._replace, self._rename
        try:
            yield
        finally:
            os.fsync, os.unlink, os.remove, os.replace, os.rename = saved

    # --------------------------------------------------------------- crashes

    def crash(self, nid: int, torn: float) -> None:
        """Put the node's files back to what a crash leaves: durable content, plus a
        random prefix of the later bytes with chance `torn`."""
        self.down.add(nid)
        top = self.node_dir(nid)
        for dirpath, _dirs, files in sorted(os.walk(top)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                kept = self.durable.get(st.st_ino)
                if kept is None:
                    self._unlink(path)
                    continue
                with open(path, "rb") as f:
                    now = f.read()
                if now == kept:
                    continue
                data = kept
                if now.startswith(kept) and len(now) > len(kept) and self.rng.random() < torn:
                    data = now[: self.rng.randint(len(kept), len(now))]
                with open(path, "r+b") as f:
                    f.write(data)
                    f.truncate(len(data))
                # a torn tail that reached the platter is what the disk holds now
                self.durable[st.st_ino] = data

    def restarted(self, nid: int) -> None:
        self.down.discard(nid)
        self.incarnation[nid] = self.incarnation.get(nid, 0) + 1
