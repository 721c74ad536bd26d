"""The `records` table: one Spark task per log file decodes it and writes its Parquet part.

Why not ``spark.read.format("kraft_metadata_log")...write.parquet()``: measured on
this project (10M records, local[2]), handing the decoded Arrow batches to the JVM
and letting Spark's Parquet writer encode them cost about 3 µs per record of CPU,
several times the decoding itself; pyarrow's Parquet writer, in the same task that
decoded the batches, costs about 0.4 µs. So this stage is an RDD job of one task
per file (the data source's partitioning, the same parallelism) whose tasks write
``part-NNNNN.parquet`` with pyarrow and return only their file's `FileStats`
(counts, offsets, times, a few marker rows). The data source stays the way to
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
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
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


def write_records(spark: Any, files: list[LogFile], out_dir: str | Path) -> list[FileStats]:
    """Write the records table of `files` under `out_dir` (replaced); their FileStats."""
    return [s for s, _ in write_records_with(spark, files, out_dir, _write_part_only)]


def _write_part_only(index: int, f: LogFile, target: str) -> tuple[dict[str, Any], None]:
    return write_part(index, f, target), None


def write_records_with(
    spark: Any,
    files: list[LogFile],
    out_dir: str | Path,
    task: Callable[[int, LogFile, str], tuple[dict[str, Any], Any]],
) -> list[tuple[FileStats, Any]]:
    """The records table of `files` under `out_dir` (replaced) by `task(index,
    file, out_dir)`, which writes the file's part and returns its stats dict and
    anything else it computed from the same decode; per file, (FileStats, that).

    The biggest files are scheduled first, so that the last task to finish is a
    small one (local[N] runs tasks in partition order).
    """
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    items = sorted(
        enumerate(files), key=lambda item: -os.path.getsize(item[1].path)
    )  # (part index, file), biggest first
    target = str(out)
    sc = spark.sparkContext
    sc.setJobDescription(f"spark-replay: decode {len(files)} log files into records")
    try:
        results = (
            sc.parallelize(items, max(1, len(items)))
            .map(lambda item: task(item[0], item[1], target))
            .collect()
        )
    except BaseException:
        # A failed file fails the job: the parts of the other files must not stay
        # behind looking like a (partial) records table.
        shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        sc.setJobDescription(None)
    (out / "_SUCCESS").touch()
    by_path = {r["path"]: (r, x) for r, x in results}
    return [(stats_from_dict(by_path[f.path][0]), by_path[f.path][1]) for f in files]


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
    return s
