"""Helpers to write small logs for the Spark tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from metadata_log.batch import encode_batch
from metadata_log.image import MetadataImage
from metadata_log.records import Record
from spark_replay.generator import METADATA_DIR, open_writer

# (epoch, append_time_ms, records, control)
Batch = tuple[int, int, Sequence[Record], bool]


def write_log(data_dir: Path, batches: Sequence[Batch], segment_bytes: int = 1 << 20) -> Path:
    """Write batches with contiguous offsets from 0 (FileLog); returns the metadata dir."""
    w = open_writer(data_dir / METADATA_DIR, segment_bytes)
    for epoch, ts, records, control in batches:
        w.append(encode_batch(w.next_offset, epoch, ts, list(records), control), len(records))
    w.close()
    return data_dir / METADATA_DIR


def images_by_offset(batches: Sequence[Batch]) -> dict[int, MetadataImage]:
    """The in-process image after every offset (copies)."""
    image = MetadataImage()
    out: dict[int, MetadataImage] = {}
    off = 0
    for _epoch, _ts, records, _control in batches:
        for rec in records:
            image.replay(rec, off)
            out[off] = image.copy()
            off += 1
    return out
