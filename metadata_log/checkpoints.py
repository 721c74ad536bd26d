"""Small durable files: atomic replacement and Kafka-style checkpoint text.

Every small state file of the log (``leader-epoch-checkpoint``,
``recovery-point-checkpoint``) is replaced atomically: the new content goes to
``NAME.tmp``, is fsynced, renamed over ``NAME``, and the directory is fsynced so
the rename itself survives a crash. A reader therefore sees either the old or
the new file, never a mix.

Checkpoint text follows Kafka's ``CheckpointFile`` layout::

    <version>\\n
    <number of entries>\\n
    <entry>\\n            one line per entry, fields separated by one space

Parsing is strict and every error names the file and line: a checkpoint that
cannot be read is a `CheckpointFormatError`, never silently treated as empty.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from metadata_log.errors import MetadataLogError

TMP_SUFFIX = ".tmp"


class CheckpointFormatError(MetadataLogError):
    """A checkpoint file whose text is not what its writer produces."""

    def __init__(self, path: str | Path, line: int, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        super().__init__(f"bad checkpoint file {path} (line {line}): {reason}")


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory so that creations, renames and deletions in it are durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data` atomically and durably.

    Raises OSError as is (the caller decides whether it is fatal); the temporary
    file is removed on failure so that a retry does not trip over it.
    """
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        # Leave no half-written temporary file behind; the old file is intact.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def format_checkpoint(version: int, entries: Sequence[Sequence[object]]) -> bytes:
    """The text of a checkpoint: version line, count line, one line per entry."""
    lines = [str(version), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_checkpoint(path: str | Path, text: str, *, version: int, fields: int) -> list[list[str]]:
    """Parse checkpoint text written by `format_checkpoint`.

    `fields` is the number of space-separated fields of each entry line. Returns
    the entries as lists of strings; the caller converts them.
    """
    lines = text.split("\n")
    # A file written by format_checkpoint ends with a newline: one empty last item.
    if lines and lines[-1] == "":
        lines.pop()
    else:
        raise CheckpointFormatError(path, max(len(lines), 1), "missing final newline")
    if len(lines) < 2:
        raise CheckpointFormatError(path, len(lines) + 1, "missing version or count line")
    if lines[0] != str(version):
        raise CheckpointFormatError(path, 1, f"unsupported version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointFormatError(path, 2, f"count {lines[1]!r} is not a number") from None
    if count < 0 or count != len(lines) - 2:
        raise CheckpointFormatError(
            path, 2, f"count says {lines[1]} entries, file holds {len(lines) - 2}"
        )
    out: list[list[str]] = []
    for i, line in enumerate(lines[2:], start=3):
        parts = line.split(" ")
        if len(parts) != fields or any(p == "" for p in parts):
            raise CheckpointFormatError(path, i, f"expected {fields} fields, got {line!r}")
        out.append(parts)
    return out


def read_checkpoint(path: str | Path, *, version: int, fields: int) -> list[list[str]] | None:
    """Read and parse a checkpoint file; None when it does not exist."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise CheckpointFormatError(path, 1, "not ASCII text") from None
    return parse_checkpoint(path, text, version=version, fields=fields)


def parse_int(path: str | Path, line: int, value: str, what: str) -> int:
    """An integer field of a checkpoint line, with an error naming file and line."""
    try:
        # int() accepts "+5", " 5" and "5_0"; a checkpoint only ever holds plain digits.
        if not (value.isdigit() or (value.startswith("-") and value[1:].isdigit())):
            raise ValueError
        return int(value)
    except ValueError:
        raise CheckpointFormatError(path, line, f"{what} {value!r} is not an integer") from None
