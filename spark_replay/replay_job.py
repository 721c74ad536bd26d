"""The history tables of a decoded log, file-parallel: the job both `spark-replay`
and the one-process replay run, only the map over files differs.

After the records stage (one part per log file, `spark_replay.records`) and the
LogInfo from its stats (offsets, transactions, the starting snapshot):

1. *prepare* (one task per file): the file's events in apply order
   (`segment_replay.file_events`) are written to ``OUT/_work/events-N.arrow``
   and reduced to a `Summary` (a few kB per thousand partitions), returned to
   the driver;
2. the driver folds the summaries in offset order into each file's starting
   states and, backwards, the ends of the intervals left open at each file's
   end (`starting_states`, `next_points`: a prefix and a suffix scan), and
   writes broker_history (a few thousand rows) itself;
3. *replay* (one task per file): `segment_replay.replay_file` from the
   starting states, its rows written as ``part-N.parquet`` of each table.

`mapper(fn, items)` runs `fn` over `items` and returns the results in order: a
Spark job of one task per item (`spark_mapper`) or a plain loop
(`serial_mapper`). Tasks write under a temporary name and rename when complete,
so a retried or failed task leaves no partial part; the driver writes
``_SUCCESS`` once every task succeeded (and the caller removes the tables of a
failed job). OUT must be on storage that the driver and every executor see.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spark_replay.decode import ARROW_SCHEMA
from spark_replay.records import part_name
from spark_replay.segment_replay import (
    EVENT_SOURCE_COLUMNS,
    Delta,
    Key,
    Point,
    Summary,
    Txn,
    broker_history,
    file_events,
    next_points,
    replay_file,
    starting_states,
    summarize,
)
from spark_replay.tables import STATE_TYPES

Mapper = Callable[[Callable[[Any], Any], list[Any]], list[Any]]
HISTORY_TABLES = ("partition_history", "leader_elections", "offline_partitions")
WORK = "_work"


@dataclass(frozen=True)
class FilePlan:
    """What one task needs to know about its file: which records part, which
    offsets apply in it, and the transactions around it."""

    index: int  # the records part's number (the file's place in the listing)
    part: str
    weight: int  # bytes of the part: biggest first
    lo: int  # rows applying at offsets in [lo, hi] are this file's
    hi: int
    txns: tuple[Txn, ...] = ()
    # (part, first offset, last offset): an applied transaction that began in an
    # earlier file and ends in this one has its rows there.
    extra: tuple[tuple[str, int, int], ...] = ()
    snapshot_point: Point | None = None
    min_offset: int | None = None


def plan_files(files: list[Any], stats: list[Any], info: Any, records_dir: Path) -> list[FilePlan]:
    """The files the history replays, in offset order (a starting snapshot first)."""
    txns = [Txn(t.begin, t.end, t.applied, t.end_time_ms) for t in info.transactions]
    part = [str(records_dir / part_name(i)) for i in range(len(files))]
    size = [os.path.getsize(p) if os.path.exists(p) else 0 for p in part]
    plans: list[FilePlan] = []
    snap_end = info.snapshot_end_offset
    if snap_end is not None:
        i = next(
            i
            for i, f in enumerate(files)
            if f.source == "snapshot" and f.snapshot_end_offset == snap_end
        )
        point = (snap_end - 1, info.snapshot_time_ms)
        plans.append(FilePlan(i, part[i], size[i], point[0], point[0], snapshot_point=point))
    segs = [
        (i, s)
        for i, (f, s) in enumerate(zip(files, stats, strict=True))
        if f.source == "segment" and s.records
    ]
    for i, s in segs:
        if snap_end is not None and s.last_offset < snap_end:
            continue
        lo = s.first_offset if snap_end is None else max(s.first_offset, snap_end)
        extra = tuple(
            (part[j], max(t.begin + 1, sj.first_offset), min(t.end - 1, sj.last_offset))
            for t in txns
            if t.applied and lo <= t.end <= s.last_offset and t.begin < s.first_offset
            for j, sj in segs
            if sj.last_offset > t.begin and sj.first_offset < s.first_offset
        )
        plans.append(
            FilePlan(
                i,
                part[i],
                size[i],
                lo,
                s.last_offset,
                txns=tuple(t for t in txns if t.begin <= s.last_offset and t.end >= s.first_offset),
                extra=extra,
                # (only where it drops rows: a plan equal to own_plan's is reused)
                min_offset=snap_end if snap_end is not None and s.first_offset < snap_end else None,
            )
        )
    return plans


def own_plan(index: int, stats: dict[str, Any], records_dir: str) -> FilePlan | None:
    """The plan of a segment as far as the file itself can tell (its own
    transactions; none open at its start), or None when it cannot tell (a
    transaction marker without its pair, a snapshot, no records). The driver
    uses what was computed with it only if it equals the plan of `plan_files`."""
    if stats["source"] != "segment" or not stats["records"]:
        return None
    txns, begin = [], None
    for offset, kind, time_ms, *_rest in stats["markers"]:
        if kind == "BeginTransactionRecord":
            if begin is not None:
                return None
            begin = offset
        elif kind in ("EndTransactionRecord", "AbortTransactionRecord"):
            if begin is None:
                return None
            txns.append(Txn(begin, offset, kind == "EndTransactionRecord", time_ms))
            begin = None
    if begin is not None:
        return None
    part = os.path.join(records_dir, part_name(index))
    return FilePlan(index, part, 0, stats["first_offset"], stats["last_offset"], tuple(txns))


def decode_and_prepare(
    index: int, f: Any, records_dir: str, out: str
) -> tuple[dict[str, Any], tuple[FilePlan, Summary] | None]:
    """Task of the records stage that also does step 1 from the same decode, for
    the files that can tell their own plan (`own_plan`): the records part, its
    stats, and (plan, Summary) with the events written for step 3."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_replay.records import write_part

    kept: list[pa.RecordBatch] = []
    state_types = pa.array(STATE_TYPES)
    cols = list(EVENT_SOURCE_COLUMNS)

    def keep(batch: pa.RecordBatch) -> None:
        # The decoder groups a chunk's rows by kind (PartitionChangeRecords, NoOps,
        # ...): most batches are kept or dropped whole, and the JSON text is never
        # copied (filtering every column cost as much as summarizing the file).
        mask = pc.is_in(batch.column("type"), value_set=state_types)
        n = pc.sum(mask).as_py() or 0
        if n == batch.num_rows:
            kept.append(batch.select(cols))
        elif n:
            kept.append(batch.select(cols).filter(mask))

    stats = write_part(index, f, records_dir, on_batch=keep)
    plan = own_plan(index, stats, records_dir)
    if plan is None:
        return stats, None
    schema = pa.schema([ARROW_SCHEMA.field(c) for c in cols])
    rows = pa.Table.from_batches(kept, schema=schema)
    return stats, (plan, _prepare_rows(plan, out, rows))


def _events_path(out: str, plan: FilePlan) -> str:
    return os.path.join(out, WORK, f"events-{plan.index:05d}.arrow")


def prepare(item: tuple[FilePlan, str]) -> Summary:
    """Task of step 1: the file's events, written for step 3, and its Summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    plan, out = item
    cols = list(EVENT_SOURCE_COLUMNS)
    rows = pq.read_table(plan.part, columns=cols)
    for path, lo, hi in plan.extra:
        more = pq.read_table(
            path, columns=cols, filters=[("offset", ">=", lo), ("offset", "<=", hi)]
        )
        rows = pa.concat_tables([more, rows])
    return _prepare_rows(plan, out, rows)


def _prepare_rows(plan: FilePlan, out: str, rows: Any) -> Summary:
    events = file_events(
        rows, plan.lo, plan.hi, list(plan.txns), plan.snapshot_point, plan.min_offset
    )
    _commit(_events_path(out, plan), lambda tmp: _write_ipc(tmp, events))
    return summarize(events)


def replay(
    item: tuple[FilePlan, str, dict[Key, Delta], dict[Key, Any], dict[str, str]],
) -> dict[str, int]:
    """Task of step 3: the file's rows of the three partition tables; their counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    plan, out, start, ends, names = item
    with pa.memory_map(_events_path(out, plan)) as source:
        events = pa.ipc.open_file(source).read_all()
    tables = replay_file(events, start, ends, names)
    for name, table in tables.items():
        target = os.path.join(out, name, part_name(plan.index))
        _commit(
            target,
            lambda tmp, t=table: pq.write_table(t, tmp, compression="zstd", compression_level=1),
        )
    return {name: t.num_rows for name, t in tables.items()}


def _write_ipc(path: str, table: Any) -> None:
    import pyarrow as pa

    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _commit(final: str, write: Callable[[str], None]) -> None:
    """Write through a temporary name and rename: a reader never sees a partial file."""
    tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def serial_mapper(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [fn(x) for x in items]


def spark_mapper(spark: Any) -> Mapper:
    """One Spark task per item, the heaviest first (local[N] runs tasks in order)."""
    sc = spark.sparkContext

    def run(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if not items:
            return []
        order = sorted(range(len(items)), key=lambda i: -items[i][0].weight)
        results = sc.parallelize([items[i] for i in order], len(items)).map(fn).collect()
        out: list[Any] = [None] * len(items)
        for i, r in zip(order, results, strict=True):
            out[i] = r
        return out

    return run


def _progress(msg: str) -> None:
    print(f"spark-replay: {msg}", file=sys.stderr, flush=True)


def build_history(
    mapper: Mapper,
    files: list[Any],
    stats: list[Any],
    info: Any,
    out: str | Path,
    describe: Callable[[str | None], None] = lambda _d: None,
    progress: Callable[[str], None] = _progress,
    prepared: list[tuple[FilePlan, Summary] | None] | None = None,
) -> dict[str, float]:
    """The four history tables under `out` (whose `records/` is written); timings.

    `prepared`: per file (records part order), what `decode_and_prepare` did in
    the records stage; step 1 runs only for the files whose plan it missed.
    """
    out = Path(out)
    timings: dict[str, float] = {}
    plans = plan_files(files, stats, info, out / "records")
    n = max(1, info.record_count)
    work = out / WORK
    work.mkdir(parents=True, exist_ok=True)
    for name in (*HISTORY_TABLES, "broker_history"):
        (out / name).mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    describe(f"spark-replay: summarize {len(plans)} files")
    done = {}
    for p in plans:
        got = prepared[p.index] if prepared else None
        if got is not None and replace(got[0], weight=0) == replace(p, weight=0):
            done[p.index] = got[1]
    todo = [p for p in plans if p.index not in done]
    done.update(
        zip((p.index for p in todo), mapper(prepare, [(p, str(out)) for p in todo]), strict=True)
    )
    summaries = [done[p.index] for p in plans]
    timings["summaries_s"] = time.perf_counter() - t
    progress(
        f"summaries: {len(plans)} files ({len(todo)} read again: a transaction "
        f"crosses them or a snapshot starts the history; {timings['summaries_s']:.1f} s)"
    )
    t = time.perf_counter()
    starts = starting_states(summaries)
    ends = next_points(summaries, [list(s.first_event) for s in summaries])
    names: dict[str, str] = {}
    brokers = []
    for s in summaries:
        names.update(s.names)
        brokers.extend(s.brokers)
    import pyarrow.parquet as pq

    bh = broker_history(brokers)
    _commit(str(out / "broker_history" / part_name(0)), lambda tmp: pq.write_table(bh, tmp))
    timings["fold_s"] = time.perf_counter() - t
    progress(f"starting states folded, broker_history written ({timings['fold_s']:.1f} s)")
    t = time.perf_counter()
    describe(f"spark-replay: replay {len(plans)} files")
    items = [(p, str(out), starts[i], ends[i], names) for i, p in enumerate(plans)]
    counts = mapper(replay, items)
    describe(None)
    for name in (*HISTORY_TABLES, "broker_history"):
        (out / name / "_SUCCESS").touch()
    shutil.rmtree(work, ignore_errors=True)
    timings["replay_s"] = time.perf_counter() - t
    rows = {name: sum(c[name] for c in counts) for name in HISTORY_TABLES}
    progress(
        f"replay: {rows['partition_history']} intervals, {rows['leader_elections']} elections "
        f"({timings['replay_s']:.1f} s, {n / timings['replay_s']:,.0f} records/s)"
    )
    return timings
