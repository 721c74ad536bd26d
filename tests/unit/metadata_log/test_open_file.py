"""Log files are opened only when they are regular files (metadata_log.open_file).

A FIFO named like a segment made every reader block forever in open(); a
device, a directory or a symlink loop gave a bare errno or read without end.
Each is now one error naming the file and what it is, and nothing blocks (an
alarm fails the test rather than hanging it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metadata_log.errors import MetadataLogError
from metadata_log.kafka.reader import detect_format, iter_file
from metadata_log.kafka.writer import encode_batch, encode_metadata_value
from metadata_log.open_file import open_log_file
from metadata_log.replay import METADATA_DIR_NAME, iter_file_batches

SEGMENT = "00000000000000000000.log"


# a FIFO opened the old way blocks forever: the test fails at 5 s instead
pytestmark = pytest.mark.timeout(5)


def _fifo_segment(tmp_path: Path) -> Path:
    d = tmp_path / METADATA_DIR_NAME
    d.mkdir()
    os.mkfifo(d / SEGMENT)
    return d / SEGMENT


def test_a_regular_file_opens_read_only(tmp_path: Path) -> None:
    path = tmp_path / SEGMENT
    path.write_bytes(b"abc")
    with open_log_file(path) as f:
        assert f.read() == b"abc"
        assert not f.writable()


def test_a_fifo_named_like_a_segment_is_refused_without_blocking(tmp_path: Path) -> None:
    path = _fifo_segment(tmp_path)
    want = f"{path}: is a FIFO, not a regular file: a segment or snapshot must be one"
    for read in (
        open_log_file,
        lambda p: list(iter_file(p)),
        lambda p: list(iter_file_batches(p, allow_torn_tail=False)),
        lambda p: detect_format(p.parent),  # spark-replay's format detection
    ):
        with pytest.raises(MetadataLogError) as e:
            read(path)
        assert str(e.value) == want


def test_a_directory_named_like_a_segment_is_refused(tmp_path: Path) -> None:
    path = tmp_path / SEGMENT
    path.mkdir()
    with pytest.raises(MetadataLogError, match="is a directory, not a regular file"):
        open_log_file(path)


def test_a_symlink_loop_is_named(tmp_path: Path) -> None:
    path = tmp_path / SEGMENT
    path.symlink_to(path)
    with pytest.raises(MetadataLogError, match=r": a symlink loop \("):
        open_log_file(path)


def test_a_symlink_to_a_segment_is_read(tmp_path: Path) -> None:
    real = tmp_path / "real.log"
    real.write_bytes(encode_batch(0, 1, 1000, [(None, encode_metadata_value("NoOpRecord", 0, {}))]))
    link = tmp_path / SEGMENT
    link.symlink_to(real)
    assert [b.header.base_offset for b in iter_file(link)] == [0]
