"""kraft.server.forked_snapshot: a forked child writes the snapshot the thread would,
reports failure by its exit code, holds none of the parent's descriptors, and is
killed when its wait is cancelled."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from kraft.server.forked_snapshot import can_fork, fork_writer, wait_child
from metadata_log.image import MetadataImage
from metadata_log.records import (
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from metadata_log.replay import read_snapshot_image
from metadata_log.snapshot import SnapshotId, snapshot_path, write_snapshot

pytestmark = pytest.mark.timeout(60)


def test_this_machine_writes_snapshots_by_fork() -> None:
    """The controllers' snapshot path on Linux; on a machine without it the tests
    below fail (never skip): the thread fallback is not what production runs."""
    assert can_fork(), "os.fork and os.pidfd_open are needed (Linux >= 5.3)"


def image() -> MetadataImage:
    img = MetadataImage()
    records = [
        FeatureLevelRecord("metadata.version", 1),
        RegisterBrokerRecord(broker_id=1, incarnation_id="i1", broker_epoch=1, fenced=False),
        TopicRecord("t", "tid-1"),
        *(
            PartitionRecord(topic_id="tid-1", partition_id=p, replicas=(1,), isr=(1,), leader=1)
            for p in range(50)
        ),
    ]
    img.replay_batch(0, records)
    return img


def write(directory: Path, img: MetadataImage) -> None:
    sid = SnapshotId(img.offset + 1, 1)
    write_snapshot(directory, sid, img.to_records(), last_contained_log_time=0, append_time_ms=7)


def test_a_forked_child_writes_the_snapshot_a_thread_would(tmp_path: Path) -> None:
    img = image()
    sid = SnapshotId(img.offset + 1, 1)
    write(tmp_path / "thread", img)
    pid = fork_writer(lambda: write(tmp_path / "child", img))
    img.replay(TopicRecord("after-the-fork", "tid-2"), img.offset + 1)  # not in the child's
    assert asyncio.run(wait_child(pid)) == 0
    thread_bytes = snapshot_path(tmp_path / "thread", sid).read_bytes()
    assert snapshot_path(tmp_path / "child", sid).read_bytes() == thread_bytes
    loaded = read_snapshot_image(snapshot_path(tmp_path / "child", sid), sid.end_offset)
    assert loaded.topic_by_name("after-the-fork") is None
    assert len(loaded.topic_by_name("t").partitions) == 50


def test_a_failing_writer_exits_1_with_its_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    def fail() -> None:
        raise OSError("disk full")

    assert asyncio.run(wait_child(fork_writer(fail))) == 1
    assert "OSError: disk full" in capfd.readouterr().err


def test_the_child_holds_none_of_the_parents_descriptors() -> None:
    """A connection the parent closes is closed, though the child still runs."""
    a, b = socket.socketpair()
    b.settimeout(10)
    pid = fork_writer(lambda: time.sleep(30))

    async def main() -> None:
        waiting = asyncio.ensure_future(wait_child(pid))
        a.close()
        assert await asyncio.to_thread(b.recv, 1) == b""  # EOF: the child's copy is gone
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    try:
        asyncio.run(main())
    finally:
        b.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped by the cancelled wait


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie waiting for its new parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_child_dies_with_its_parent() -> None:
    """A SIGKILLed controller leaves no writer behind (PR_SET_PDEATHSIG)."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:  # the "controller": forks a writer, reports its pid, dies at once
        try:
            child = fork_writer(lambda: time.sleep(30))
            os.write(w, str(child).encode())
        finally:
            os._exit(0)
    os.close(w)
    child = int(os.read(r, 32))
    os.close(r)
    os.waitpid(middle, 0)
    for _ in range(500):  # bounded: 10 s
        if _gone(child):
            break
        time.sleep(0.02)
    assert _gone(child)
