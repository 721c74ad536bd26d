"""One scenario end to end, without Spark: facts -> counterfactual log -> tables.

Two ways, with the same tables (tests/unit/whatif/test_history_stream.py):

- `scenario_tables`: the counterfactual log is written as a real segment
  folder and replayed into the history tables by the very functions
  `spark-replay` runs (`spark_replay.one_process.write_tables`: the same
  decoder, the same `segment_replay` rules for causes, unclean flags and
  offline windows), so the actual and the in-force tables are built alike and
  the identity check compares like with like;
- `scenario_history`: no log; the engine's batches go, as records, to a
  `history_stream.HistoryStream` that builds the two tables as they are
  written (a third of the CPU). A Spark task runs it for every scenario but
  the in-force one.
"""

from __future__ import annotations

import gc
import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_replay.generator import METADATA_DIR, SegmentWriter
from spark_replay.whatif.engine import CountingSink, forget_decisions, run_scenario
from spark_replay.whatif.facts import Facts
from spark_replay.whatif.history_stream import HistoryStream
from spark_replay.whatif.scenario import Scenario

COMPARED = ("leader_elections", "offline_partitions")
SEGMENT_BYTES = 16 * 1024 * 1024


def write_counterfactual_log(facts: Facts, scenario: Scenario, directory: Path) -> dict[str, Any]:
    """The scenario's log under directory/__cluster_metadata-0; the engine's stats."""
    # 16 MiB segments, as the generator's and the shell's: the tables of a 1M-record
    # log cut so were built in 4.1 s against 4.7 s from one 54 MB segment
    sink = SegmentWriter(directory / METADATA_DIR, segment_bytes=SEGMENT_BYTES)
    try:
        stats = run_scenario(facts, scenario, sink)
    finally:
        sink.close()
    return {**stats.to_dict(), "records": sink.next_offset}


def scenario_history(
    facts: Facts, scenario: Scenario
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The scenario's leader_elections and offline_partitions (without the
    `scenario` column) and the engine's stats, with no log written."""
    sink, history = CountingSink(), HistoryStream()
    stats = run_scenario(facts, scenario, sink, observer=history)
    return history.tables(), {**stats.to_dict(), "records": sink.next_offset}


def history_tables(log_dir: Path, out: Path) -> dict[str, pa.Table]:
    """leader_elections and offline_partitions of a native log (one process)."""
    from spark_replay.one_process import write_tables

    write_tables(log_dir, out)
    return {name: pq.read_table(out / name) for name in COMPARED}


def scenario_tables(
    facts: Facts, scenario: Scenario, work: Path, keep_log: bool = False
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The scenario's tables (each with a `scenario` column) and engine stats."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log"
    stats = write_counterfactual_log(facts, scenario, log)
    tables = history_tables(log, work / "tables")
    if not keep_log:
        shutil.rmtree(log, ignore_errors=True)
    shutil.rmtree(work / "tables", ignore_errors=True)
    return {n: with_scenario(t, scenario.name) for n, t in tables.items()}, stats


def same_log(a: Path, b: Path, chunk: int = 1 << 20) -> bool:
    """Whether two native logs hold the same batches, byte for byte (their
    segments' bytes in offset order; where the segments are cut does not count).

    Equal bytes are the same records in the same batches at the same offsets and
    times, and the history tables are a function of those: a scenario whose log
    is the actual one has the actual tables (the identity check's usual case,
    so the in-force scenario's tables need not be built again)."""
    from metadata_log.replay import metadata_dir, segment_files

    def stream(log: Path) -> Iterator[bytes]:
        for _, path in segment_files(metadata_dir(log)):
            with open(path, "rb") as f:
                while block := f.read(chunk):
                    yield block

    sa, sb = stream(a), stream(b)
    pa_, pb = b"", b""
    while True:
        if not pa_:
            pa_ = next(sa, b"")
        if not pb:
            pb = next(sb, b"")
        if not pa_ or not pb:
            return not pa_ and not pb
        n = min(len(pa_), len(pb))
        if pa_[:n] != pb[:n]:
            return False
        pa_, pb = pa_[n:], pb[n:]


def with_scenario(table: pa.Table, name: str) -> pa.Table:
    return table.append_column("scenario", pa.array([name] * table.num_rows, pa.string()))


# A Python worker runs many tasks (spark.python.worker.reuse): the facts of a
# 1M-record log take a few seconds to load, so each worker loads them once per job.
_LOADED: dict[tuple[str, int], Facts] = {}


def load_facts(path: str | Path) -> Facts:
    """The facts `save_facts` wrote, loaded once per worker process and kept out
    of the cyclic garbage collector's reach (`gc.freeze`): they are millions of
    acyclic objects that a scenario only reads, and every full collection during
    the engine's run would walk them all (1M records: the load 3.5 -> 1.3 CPU s
    with the collector off, the engine ~4% faster frozen)."""
    key = (str(path), os.stat(path).st_mtime_ns)
    facts = _LOADED.get(key)
    if facts is None:
        if _LOADED:
            _LOADED.clear()
            gc.unfreeze()  # the previous job's facts: collectable again
        forget_decisions()  # a new job: no answers of an earlier one
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            with open(path, "rb") as f:
                facts = pickle.load(f)  # noqa: S301 — written by this job's driver, just before
        finally:
            if was_enabled:
                gc.enable()
        gc.freeze()
        _LOADED[key] = facts
    return facts


def save_facts(facts: Facts, path: str | Path) -> None:
    # with the collector off: pickling millions of objects allocates, and its
    # passes would walk the facts (1M records: 1.6 -> 1.3 s, on the driver's
    # way to the first scenario)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with open(path, "wb") as f:
            pickle.dump(facts, f, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        if was_enabled:
            gc.enable()
