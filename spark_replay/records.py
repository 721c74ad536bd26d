"""The `records` table: one Spark task per log file decodes it and writes its Parquet part.

Why not ``spark.read.format("kraft_metadata_log")...write.parquet()``: measured on
this project (10M records, local[2]), handing the decoded Arrow batches to the JVM
and letting Spark's Parquet writer encode them cost about 3 µs per record of CPU,
several times the decoding itself; pyarrow's Parquet writer, in the same task that
decoded the batches, costs about 0.4 µs. So this stage is one task per file
(the data source's partitioning, the same parallelism; run by
`spark_replay.replay_job.replay_log`) whose tasks write ``part-NNNNN.parquet``
with pyarrow and return only their file's `FileStats` (counts, offsets, times,
a few marker rows). The data source stays the way to
query a log directly (`spark_replay.datasource.read_log`); both use
`spark_replay.decode.read_file`, so they decode identically.

A part is written under a temporary name and renamed when complete, so a failed or
retried task never leaves a partial part behind; the driver writes ``_SUCCESS``
when every task succeeded. A corrupt file fails its task with the error naming
the file and offset, and so the job; the table directory is then removed, so no
partial records table is left behind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_replay.decode import ARROW_SCHEMA, FileStats, LogFile, file_stats, read_file

if TYPE_CHECKING:
    import pyarrow as pa

# Low-cardinality columns get dictionary pages; the rest (JSON text, numbers) do
# not: trying a dictionary on unique JSON text only to abandon it costs time.
DICTIONARY_COLUMNS = ["type", "source", "topic_id", "topic_name", "incarnation_id", "rack"]
# zstd level 1: about as fast as snappy here and a third of the size (JSON text).
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
# Rows buffered before a write: fewer, larger row groups read faster.
ROW_GROUP_ROWS = 1 << 20


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def write_part(
    index: int,
    f: LogFile,
    out_dir: str,
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
) -> dict[str, Any]:
    """Decode one file into ``out_dir/part-{index}.parquet``; returns its FileStats.

    `on_batch` also sees every decoded batch (the one-process replay keeps the
    state-changing rows from the same single decode).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    stats = file_stats(f)
    final = os.path.join(out_dir, part_name(index))
    tmp = os.path.join(out_dir, f".{part_name(index)}.{uuid.uuid4().hex}.tmp")
    pending: list[pa.RecordBatch] = []
    rows = 0
    try:
        with pq.ParquetWriter(
            tmp,
            ARROW_SCHEMA,
            compression=COMPRESSION,
            compression_level=COMPRESSION_LEVEL,
            use_dictionary=DICTIONARY_COLUMNS,
        ) as writer:
            for batch in read_file(f, stats=stats):
                if on_batch is not None:
                    on_batch(batch)
                pending.append(batch)
                rows += batch.num_rows
                if rows >= ROW_GROUP_ROWS:
                    writer.write_table(pa.Table.from_batches(pending, ARROW_SCHEMA), ROW_GROUP_ROWS)
                    pending, rows = [], 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending, ARROW_SCHEMA), ROW_GROUP_ROWS)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return stats.to_dict()


def stats_from_dict(d: dict[str, Any]) -> FileStats:
    s = FileStats(path=d["path"], source=d["source"], snapshot_end_offset=d["snapshot_end_offset"])
    for k in (
        "records",
        "first_offset",
        "last_offset",
        "first_time_ms",
        "last_time_ms",
        "max_epoch",
        "by_type",
    ):
        setattr(s, k, d[k])
    s.markers = [tuple(m) for m in d["markers"]]  # type: ignore[misc]
    s.torn_tail = d.get("torn_tail")
    s.first_epoch, s.epoch_back = d.get("first_epoch"), d.get("epoch_back")
    span = d.get("task_span")
    s.task_span = None if span is None else tuple(span)  # type: ignore[assignment]
    return s
