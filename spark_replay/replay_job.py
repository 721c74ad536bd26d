"""The records table and the history tables of a log, file-parallel: the job
both `spark-replay` and the one-process replay run, only the runner differs.

1. *records* (one task per file, `decode_and_prepare`): the file's `records`
   part, its stats and, from the same decode, the file's events in apply order
   (`segment_replay.file_events`, written to ``OUT/_work/events-N.arrow``)
   reduced to a `Summary` (a few kB per thousand partitions), for the files
   that can tell their own plan; the others are read again (`prepare`) once
   the driver knows every file's transactions;
2. the driver folds the summaries in offset order into each file's starting
   states (`PrefixFold`, a prefix scan), as they arrive;
3. *replay* (one task per file, `replay`): `segment_replay.replay_file` from
   the starting state, its rows written as ``part-N.parquet`` of each table,
   except a partition's last interval and offline window, whose end lies in a
   later file: returned to the driver, which fills their ends from the
   summaries once all are in (`next_points`, a suffix scan; `close_open`) and
   writes them as one more part, with broker_history (a few thousand rows).

A file's replay starts as soon as the files before it are summarized, so the
replay stage runs in the slots the records stage leaves idle (its tail, the
driver's fold), with no barrier between them (`replay_log`).

A runner runs the tasks: `SparkRunner` (each a one-task Spark job, submitted
from driver threads, one more per lane than the slots so that a freed slot finds
the next task waiting; the tasks' big results, summaries and open rows, come
back through files under OUT/_work rather than through the JVM) or
`SerialRunner` (in the caller, one after another, results handed over as they are).
Tasks write under a temporary name and rename when complete, so a retried or
failed task leaves no partial part; the driver writes ``_SUCCESS`` once every
task succeeded (and the caller removes the tables of a failed job). OUT must be
on storage that the driver and every executor see.
"""

from __future__ import annotations

import gc
import os
import pickle
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spark_replay.decode import ARROW_SCHEMA
from spark_replay.records import part_name, stats_from_dict
from spark_replay.segment_replay import (
    EVENT_SOURCE_COLUMNS,
    OPEN_TABLES,
    Delta,
    Key,
    Point,
    PrefixFold,
    Summary,
    Txn,
    broker_history,
    close_open,
    file_events,
    next_points,
    replay_file,
    summarize,
    table_schema,
)
from spark_replay.tables import STATE_TYPES, TABLE_COLUMNS

# A task's (start, end) wall time (time.time(): comparable across the processes
# of one machine) and its CPU seconds: where a stage's time goes.
Span = tuple[float, float, float]
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
    index: int, f: Any, records_dir: str, out: str, via_files: bool = False
) -> tuple[dict[str, Any], tuple[FilePlan, Summary | str] | None]:
    """Task of the records stage that also does step 1 from the same decode, for
    the files that can tell their own plan (`own_plan`): the records part, its
    stats, and (plan, Summary) with the events written for step 3. With
    `via_files` the Summary is written under OUT/_work and its path returned
    (`load_summary`): a Spark task's result goes through the JVM, and a summary
    is about 1 MB per file at 10M records."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_replay.records import write_part

    t0, c0 = time.time(), time.process_time()
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
    prepared = None
    if plan is not None:
        schema = pa.schema([ARROW_SCHEMA.field(c) for c in cols])
        rows = pa.Table.from_batches(kept, schema=schema)
        summary = _prepare_rows(plan, out, rows)
        prepared = (plan, _dump_summary(out, plan, summary) if via_files else summary)
    stats["task_span"] = (t0, time.time(), time.process_time() - c0)
    return stats, prepared


def _dump_summary(out: str, plan: FilePlan, summary: Summary) -> str:
    path = os.path.join(out, WORK, f"summary-{plan.index:05d}.pickle")
    data = pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)
    _commit(path, lambda tmp: Path(tmp).write_bytes(data))
    return path


def load_summary(got: Summary | str) -> Summary:
    """A records task's Summary, itself or from the file it was written to."""
    if isinstance(got, Summary):
        return got
    with open(got, "rb") as fh:
        summary: Summary = pickle.load(fh)  # written by this job's records task
    return summary


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


def _start_path(out: str, plan: FilePlan) -> str:
    return os.path.join(out, WORK, f"start-{plan.index:05d}.pickle")


def replay_item(
    plan: FilePlan,
    out: str,
    start: dict[Key, Delta],
    names: dict[str, str],
    via_files: bool = False,
) -> tuple[FilePlan, str, bool]:
    """The replay task of `plan`: its starting state and the topic names go
    through a file under OUT/_work (which every executor sees), not inside the
    task (about 1 MB per file at 10M records: Spark warns of big tasks and
    ships them through the JVM); with `via_files`, so do the rows it leaves open."""
    data = pickle.dumps((start, names), protocol=pickle.HIGHEST_PROTOCOL)
    _commit(_start_path(out, plan), lambda tmp: Path(tmp).write_bytes(data))
    return plan, out, via_files


def replay(item: tuple[FilePlan, str, bool]) -> dict[str, Any]:
    """Task of step 3: the file's rows of the three partition tables (those that
    end in a later file are returned, see `replay_file(ends=None)`: the table, or
    with `via_files` the path of an Arrow file under OUT/_work, `load_open`);
    their counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0, c0 = time.time(), time.process_time()
    plan, out, via_files = item
    with open(_start_path(out, plan), "rb") as fh:
        start, names = pickle.load(fh)  # written by this job's driver (replay_item)
    with pa.memory_map(_events_path(out, plan)) as source:
        events = pa.ipc.open_file(source).read_all()
    tables = replay_file(events, start, None, names)
    counts: dict[str, Any] = {}
    for name, table in tables.items():
        if name in OPEN_TABLES.values():
            # a partition's last rows, whose ends the driver fills in (close_open)
            counts[f"{name}_rows"] = table.num_rows
            if via_files:
                path = os.path.join(out, WORK, f"{name}-{plan.index:05d}.arrow")
                _commit(path, lambda tmp, t=table: _write_ipc(tmp, t))
                counts[name] = path
            else:
                counts[name] = table
            continue
        target = os.path.join(out, name, part_name(plan.index))
        _commit(
            target,
            lambda tmp, t=table: pq.write_table(t, tmp, compression="zstd", compression_level=1),
        )
        counts[name] = table.num_rows
    counts["task_span"] = (t0, time.time(), time.process_time() - c0)
    return counts


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


class SerialRunner:
    """Runs each task at once, in the caller (the one-process replay)."""

    slots = 1
    via_files = False  # results are handed over as they are

    def submit(self, fn: Callable[[Any], Any], item: Any, lane: str) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(item))
        except BaseException as e:  # noqa: BLE001 — handed to whoever waits on it
            fut.set_exception(e)
        return fut

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


class SparkRunner:
    """Each task a Spark job of one task, submitted from driver threads, at most
    `slots` at a time per lane ("records", "replay"). A free slot goes to the
    oldest job waiting (Spark's FIFO scheduler), so a file's replay submitted
    while records tasks are still to come runs before the next of those: the
    replay stage fills the slots the records stage leaves idle, with no barrier
    between the two."""

    # A task's big results (a summary, the rows left open) come back through files
    # under OUT/_work: a result through the JVM costs both processes CPU and
    # delays the file's replay (the next file's, at the end of the run).
    via_files = True

    def __init__(self, spark: Any) -> None:
        self.sc = spark.sparkContext
        self.slots = max(1, int(self.sc.defaultParallelism))
        self.group = f"spark-replay-{uuid.uuid4().hex}"  # to cancel this run's jobs only
        # One job more than the slots per lane: when a task ends, the next is
        # already submitted and waits in Spark's scheduler, not in the driver's
        # submission (measured: ~85 ms of an idle slot per task at 10M, local[1]).
        self.pools = {
            lane: ThreadPoolExecutor(self.slots + 1, thread_name_prefix=f"spark-replay-{lane}")
            for lane in ("records", "replay")
        }

    def submit(self, fn: Callable[[Any], Any], item: Any, lane: str) -> Future[Any]:
        return self.pools[lane].submit(self._job, fn, item, lane)

    def _job(self, fn: Callable[[Any], Any], item: Any, lane: str) -> Any:
        self.sc.setJobGroup(self.group, f"spark-replay: {lane}")
        return self.sc.parallelize([item], 1).map(fn).collect()[0]

    def cancel(self) -> None:
        """Stop what is queued and running (a task failed)."""
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        self.sc.cancelJobGroup(self.group)

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(wait=True, cancel_futures=True)


Runner = SerialRunner | SparkRunner


def _records_task(item: tuple[int, Any, str, str, bool]) -> tuple[dict[str, Any], Any]:
    return decode_and_prepare(*item)


def load_open(got: Any) -> Any:
    """A replay task's open rows: the table, or read from its Arrow file."""
    import pyarrow as pa

    if not isinstance(got, str):
        return got
    with pa.memory_map(got) as source:
        return pa.ipc.open_file(source).read_all()


def stage_profile(spans: list[Span], start: float, end: float, slots: int) -> dict[str, Any]:
    """Where a stage's wall time went, from its tasks' spans (`start`/`end`: the
    driver's time.time() around the stage; `slots`: the tasks that can run at once).

    `busy`: the tasks' share of slots x wall; `before_first_task_s`: scheduling and
    task shipping before any task ran; `tail_s`: the last task running alone
    (one slot idle) after the one before it ended; `after_last_task_s`: collecting
    results and the driver's work after every task ended."""
    if not spans:
        return {"tasks": 0, "wall_s": round(end - start, 3)}
    ends = sorted(s[1] for s in spans)
    task_s = sum(s[1] - s[0] for s in spans)
    wall = max(end - start, 1e-9)
    return {
        "tasks": len(spans),
        "slots": slots,
        "wall_s": round(wall, 3),
        "task_s": round(task_s, 3),
        "task_cpu_s": round(sum(s[2] for s in spans), 3),
        "longest_task_s": round(max(s[1] - s[0] for s in spans), 3),
        "busy": round(task_s / (wall * slots), 3),
        "before_first_task_s": round(min(s[0] for s in spans) - start, 3),
        "tail_s": round(ends[-1] - ends[-2], 3) if len(ends) > 1 and slots > 1 else 0.0,
        "after_last_task_s": round(end - ends[-1], 3),
    }


def _progress(msg: str) -> None:
    print(f"spark-replay: {msg}", file=sys.stderr, flush=True)


@dataclass
class LogReplay:
    """What `replay_log` hands back: per file its stats, the LogInfo, the steps'
    seconds and where each stage's time went."""

    stats: list[Any]
    info: Any
    timings: dict[str, float]
    profile: dict[str, Any]
    # files replayed before the records stage ended whose replay stood (their
    # plan was the driver's final one)
    early_replays: int = 0


def replay_log(
    runner: Runner,
    files: list[Any],
    out: str | Path,
    progress: Callable[[str], None] = _progress,
    before_history: Callable[[Any], None] | None = None,
) -> LogReplay:
    """The records table and the four history tables of `files` under `out`.

    The records stage (one task per file: `decode_and_prepare`) and the replay
    stage overlap: a file is replayed (`replay`, with its open-ended rows kept
    apart) as soon as every file before it is summarized and could tell its own
    plan (whole transactions, no starting snapshot), from the starting state
    folded so far (`PrefixFold`). The rest waits for the driver's plan of every
    file (`plan_files`): files crossed by a transaction are read again
    (`prepare`) and replayed then. Once every file is summarized, the ends of
    the rows left open (`next_points`) are filled in (`close_open`) and written
    as one more part, with broker_history.

    `before_history(info)`, if given, runs once the records stage is done and
    before any replay (e.g. to check an as-of offset first); then nothing is
    replayed early.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_replay.history import info_from_stats

    out = Path(out)
    records_dir = out / "records"
    records_dir.mkdir(parents=True)
    work = out / WORK
    work.mkdir(parents=True, exist_ok=True)
    for name in (*HISTORY_TABLES, "broker_history"):
        (out / name).mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    slots = runner.slots
    t0, wall0 = time.perf_counter(), time.time()
    early = before_history is None and bool(files) and files[0].base_offset == 0
    early = early and all(f.source == "segment" for f in files)
    frozen_before = gc.get_freeze_count()
    try:
        pending = [
            runner.submit(
                _records_task, (i, f, str(records_dir), str(out), runner.via_files), "records"
            )
            for i, f in enumerate(files)
        ]
        fold, names = PrefixFold(), {}
        replays: dict[int, tuple[FilePlan, Future[Any]]] = {}
        # per file replayed early: the plan and summary it was replayed with
        early_plans: dict[int, tuple[FilePlan, Summary]] = {}
        done: list[tuple[dict[str, Any], tuple[FilePlan, Summary] | None]] = []
        cut, txn_open = 0, False  # files [cut, i] wait for an open transaction's end
        for i, fut in enumerate(pending):
            stats_dict, got = fut.result()
            done.append((stats_dict, got and (got[0], load_summary(got[1]))))
            # The summaries and the fold's state live to the end of the job: out
            # of the collector's full passes, which otherwise rescan the growing
            # heap (measured, 17 summaries of the 10M log: unpickling 0.58 ->
            # 0.20 CPU s, folding 0.27 -> 0.18); given back in `finally`.
            gc.freeze()
            for _offset, kind, *_rest in sorted(done[-1][0]["markers"]):
                if kind == "BeginTransactionRecord":
                    txn_open = True
                elif kind in ("EndTransactionRecord", "AbortTransactionRecord"):
                    txn_open = False
            if not early or txn_open:
                continue
            # No transaction is open at this file's end: the plans of the files
            # up to here are final (those of the driver's plan_files over all).
            head = [stats_from_dict(d) for d, _ in done]
            window = [
                replace(p, weight=0)
                for p in plan_files(files[: i + 1], head, info_from_stats(head), records_dir)
                if p.index >= cut
            ]
            again = {}
            for p in window:
                got = done[p.index][1]
                if got is None or replace(got[0], weight=0) != p:
                    # a transaction crossed it: its events and summary by this plan
                    again[p.index] = runner.submit(prepare, (p, str(out)), "records")
            for p in window:
                summary = again[p.index].result() if p.index in again else done[p.index][1][1]  # type: ignore[index]
                start = fold.push(summary)
                names.update(summary.names)
                early_plans[p.index] = (p, summary)
                item = replay_item(p, str(out), start, names, runner.via_files)
                replays[p.index] = (p, runner.submit(replay, item, "replay"))
            cut = i + 1
        (records_dir / "_SUCCESS").touch()
        records_end = time.time()
        stats = [stats_from_dict(d) for d, _ in done]
        info = info_from_stats(stats)
        timings["records_s"] = time.perf_counter() - t0
        n = max(1, info.record_count)
        progress(
            f"records: {info.record_count} records from {len(files)} files, offsets "
            f"{info.first_offset}..{info.last_offset} ({timings['records_s']:.1f} s, "
            f"{n / timings['records_s']:,.0f} records/s; {len(replays)} files replayed meanwhile)"
        )
        if before_history is not None:
            before_history(info)

        t = time.perf_counter()
        plans = plan_files(files, stats, info, records_dir)
        summaries: dict[int, Summary] = {}
        for p in plans:
            got = early_plans.get(p.index) or done[p.index][1]
            if got is not None and replace(got[0], weight=0) == replace(p, weight=0):
                summaries[p.index] = got[1]
        todo = [p for p in plans if p.index not in summaries]
        again = [runner.submit(prepare, (p, str(out)), "records") for p in todo]
        summaries.update(zip((p.index for p in todo), (f.result() for f in again), strict=True))
        timings["summaries_s"] = time.perf_counter() - t
        if todo:
            progress(
                f"summaries: {len(todo)} of {len(plans)} files read again (a transaction "
                f"crosses them or a snapshot starts the history; {timings['summaries_s']:.1f} s)"
            )
        # The early replays stand for the leading files whose plan is the final
        # one (then so are their starting states); the rest are replayed now,
        # from a fold of the summaries in the final plan's order (folded only
        # from the first file that does not stand: at the end of the run, with
        # every file replayed early, it cost ~0.9 s of the driver at 10M).
        ordered = [summaries[p.index] for p in plans]
        all_names: dict[str, str] = {}
        for summary in ordered:
            all_names.update(summary.names)
        standing, early_replays, late_fold = True, 0, PrefixFold()
        for i, p in enumerate(plans):
            got = replays.get(p.index)
            standing = standing and got is not None and got[0] == replace(p, weight=0)
            early_replays += standing
            if standing:
                continue
            if early_replays == i:  # the first file that does not stand
                for summary in ordered[:i]:
                    late_fold.push(summary)
            start = late_fold.push(ordered[i])
            if got is not None:
                got[1].result()  # it writes the same parts: let it finish first
            item = replay_item(p, str(out), start, all_names, runner.via_files)
            replays[p.index] = (p, runner.submit(replay, item, "replay"))
        # While the last replays run: where the rows they leave open end, and
        # broker_history; then each file's open rows as its replay returns.
        t = time.perf_counter()
        ends = next_points(ordered, [list(s.first_event) for s in ordered])
        bh = broker_history([ev for summary in ordered for ev in summary.brokers])
        _commit(str(out / "broker_history" / part_name(0)), lambda tmp: pq.write_table(bh, tmp))
        timings["fold_s"] = time.perf_counter() - t
        closed: dict[str, list[Any]] = {name: [] for name in OPEN_TABLES}
        counts: dict[int, dict[str, Any]] = {}
        for i, p in enumerate(plans):
            got = counts[p.index] = replays[p.index][1].result()
            for name, open_name in OPEN_TABLES.items():
                which = 0 if name == "partition_history" else 1
                closed[name].append(close_open(load_open(got[open_name]), ends[i], which))
        replay_end = time.time()
        t = time.perf_counter()
        for name, tables in closed.items():
            table = (
                pa.concat_tables(tables)
                if tables
                else table_schema(TABLE_COLUMNS[name]).empty_table()
            )
            _commit(
                str(out / name / part_name(len(files))),
                lambda tmp, t=table: pq.write_table(
                    t, tmp, compression="zstd", compression_level=1
                ),
            )
        for name in (*HISTORY_TABLES, "broker_history"):
            (out / name / "_SUCCESS").touch()
        shutil.rmtree(work, ignore_errors=True)
        timings["open_rows_s"] = time.perf_counter() - t
    except BaseException:
        runner.cancel()
        raise
    finally:
        runner.close()
        if not frozen_before:  # (a caller's own frozen heap stays frozen)
            gc.unfreeze()
    timings["replay_s"] = time.perf_counter() - t0 - timings["records_s"]
    rows = {name: sum(c[name] for c in counts.values()) for name in HISTORY_TABLES}
    rows["partition_history"] += sum(counts[p.index]["partition_history_open_rows"] for p in plans)
    rows["offline_partitions"] += sum(counts[p.index]["offline_open_rows"] for p in plans)
    progress(
        f"replay: {rows['partition_history']} intervals, {rows['leader_elections']} elections "
        f"({timings['replay_s']:.1f} s after the records stage; the rows left open "
        f"written in {timings['open_rows_s']:.1f} s)"
    )
    profile = {
        "records": stage_profile(
            [s.task_span for s in stats if s.task_span], wall0, records_end, slots
        ),
        "replay": stage_profile(
            [c["task_span"] for c in counts.values()], wall0, replay_end, slots
        ),
        "files": len(plans),
        "replayed_early": early_replays,
        "replayed_during_records": sum(
            1 for c in counts.values() if c["task_span"][0] < records_end
        ),
    }
    return LogReplay(stats, info, timings, profile, early_replays)
