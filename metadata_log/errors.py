"""Errors of the metadata log: each names where the problem is (file, offset)."""

from __future__ import annotations


class MetadataLogError(Exception):
    """Base of every metadata_log error."""


class RecordDecodeError(MetadataLogError):
    """A record that cannot be decoded: unknown type, newer version, malformed."""

    def __init__(self, offset: int, reason: str, path: str | None = None) -> None:
        self.offset = offset
        self.reason = reason
        self.path = path
        where = f"{path} at offset {offset}" if path else f"offset {offset}"
        super().__init__(f"cannot decode record at {where}: {reason}")

    def at(self, path: str) -> RecordDecodeError:
        """The same error, now naming the file it was read from."""
        return RecordDecodeError(self.offset, self.reason, path)


class CorruptBatchError(MetadataLogError):
    """A complete batch whose checksum or structure is wrong."""

    def __init__(self, path: str, offset: int, position: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.position = position
        self.reason = reason
        super().__init__(
            f"corrupt batch in {path} at offset {offset} (file position {position}): {reason}"
        )


class IncompleteBatchError(MetadataLogError):
    """A batch cut short by the end of the data (a torn or still-growing tail)."""

    def __init__(self, path: str, offset: int, position: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.position = position
        super().__init__(
            f"incomplete batch in {path} at offset {offset} (file position {position}): {reason}"
        )


class LogFatalError(MetadataLogError):
    """The disk failed us (fsync error, disk full): the node must stop. Never retried."""


class OffsetOutOfRangeError(MetadataLogError):
    """A read below the log start offset or beyond the log end offset."""

    def __init__(self, offset: int, start_offset: int, end_offset: int) -> None:
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset
        super().__init__(f"offset {offset} is out of range [{start_offset}, {end_offset})")
