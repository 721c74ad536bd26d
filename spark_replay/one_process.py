"""The Spark job's work in one Python process, streaming: the baseline of
``benchmarks/replay_bench.py`` and a cross-check of `spark_replay.history`.

``python -m spark_replay.one_process --log-dir DIR --out OUT`` writes the same
`records` table and the four history tables as ``spark-replay`` (Parquet, through
pyarrow), for complete logs (segments from offset 0, no starting snapshot).

It reads the log once, a file at a time in offset order, with the same decoder as
the Spark tasks (`spark_replay.decode.read_file`), and holds only one file's
state-changing rows, each partition's current state and the rows not yet
written: memory grows with the segment size and the number of partitions, not
with the log. The semantics
are spark_replay.history's, computed record by record instead of with windows:

- records apply at their own offset, a metadata transaction's at its
  EndTransactionRecord (never, if aborted or unfinished);
- the records of one batch, or one transaction, are a *unit*: an election's cause
  comes from the broker and config records of its unit, so a unit is replayed
  only once all of its records are read;
- of several states of a partition at one offset only the last is visible: a
  partition's state is written as an interval when its next record applies at a
  later offset (or when its topic is removed, or at the end of the log).
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from metadata_log.errors import MetadataLogError
from spark_replay.tables import (
    BROKER_INTERVAL_KEY,
    BROKER_TYPES,
    PARTITION_STATE_VALUES,
    PARTITION_TYPES,
    STATE_TYPES,
    TABLE_COLUMNS,
    TXN_TYPES,
)

# The records columns the history reads, in this order in each row tuple (the
# names below index it).
ROW_COLUMNS = (
    "offset",
    "base_offset",
    "append_time_ms",
    "type",
    "topic_id",
    "topic_name",
    "partition_id",
    *PARTITION_STATE_VALUES,
    "broker_id",
    "broker_epoch",
    "fenced",
    "shutdown",
    "incarnation_id",
    "rack",
)
(
    OFFSET,
    BASE,
    TIME,
    TYPE,
    TOPIC_ID,
    TOPIC_NAME,
    PARTITION_ID,
    LEADER,
    ISR,
    REPLICAS,
    REMOVING,
    ADDING,
    LRS,
    LEADER_EPOCH,
    PARTITION_EPOCH,
    BROKER_ID,
    BROKER_EPOCH,
    FENCED,
    SHUTDOWN,
    INCARNATION_ID,
    RACK,
) = range(len(ROW_COLUMNS))

NO_LEADER_CHANGE = -2
LEADER_RECOVERY_UNCHANGED = -1
WRITE_CHUNK_ROWS = 200_000


class OneProcessError(ValueError):
    """The log is not one this replay handles (it starts from a snapshot)."""


def _arrow_types() -> dict[str, Any]:
    import pyarrow as pa

    i32, i64, s, b, lst = pa.int32(), pa.int64(), pa.string(), pa.bool_(), pa.list_(pa.int32())
    return {
        **dict.fromkeys(("broker_id", "partition_id", "leader", "old_leader", "new_leader"), i32),
        **dict.fromkeys(("leader_recovery_state", "leader_epoch", "partition_epoch"), i32),
        "cause_broker_id": i32,
        **dict.fromkeys(("offset", "applied_offset", "append_time_ms", "broker_epoch"), i64),
        **dict.fromkeys(("start_offset", "end_offset", "start_time_ms", "end_time_ms"), i64),
        **dict.fromkeys(("topic", "topic_id", "state", "incarnation_id", "rack", "cause"), s),
        **dict.fromkeys(("fenced", "in_controlled_shutdown", "unclean"), b),
        **dict.fromkeys(("isr", "replicas", "removing_replicas", "adding_replicas"), lst),
    }


class _TableWriter:
    """One table's rows (tuples, TABLE_COLUMNS order, `topic` filled in at write
    time from the topic names known by then) written to Parquet in chunks."""

    def __init__(self, path: Path, name: str, names: dict[str, str]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = _arrow_types()
        self.columns = TABLE_COLUMNS[name]
        self.schema = pa.schema([pa.field(c, types[c]) for c in self.columns])
        path.mkdir(parents=True)
        self.writer = pq.ParquetWriter(path / "part-00000.parquet", self.schema)
        self.names = names
        self.topic_at = self.columns.index("topic") if "topic" in self.columns else None
        self.rows: list[tuple[Any, ...]] = []
        self.count = 0

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= WRITE_CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if not self.rows:
            return
        cols = [list(c) for c in zip(*self.rows, strict=True)]
        if self.topic_at is not None:
            names = self.names
            cols[self.topic_at] = [names.get(t) for t in cols[self.topic_at + 1]]
        self.writer.write_table(pa.Table.from_arrays(cols, schema=self.schema))
        self.count += len(self.rows)
        self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()


class _Partition:
    """A partition's state after the records replayed so far, and its pending interval."""

    __slots__ = (
        "leader",
        "isr",
        "replicas",
        "removing",
        "adding",
        "lrs",
        "leader_epoch",
        "partition_epoch",
        "start",  # at_offset of the state: the pending interval's start
        "start_time",
        "offline_since",  # (offset, time) of the open offline window, or None
    )

    def __init__(self) -> None:
        self.leader = self.isr = self.replicas = self.removing = self.adding = None
        self.lrs = self.leader_epoch = self.partition_epoch = None
        self.start = self.start_time = None
        self.offline_since: tuple[int, int] | None = None


def unit_kind(row: tuple[Any, ...]) -> str | None:
    """What a broker or config record tells an election in its unit (history._unit_events)."""
    t = row[TYPE]
    brc = t == "BrokerRegistrationChangeRecord"
    if t == "FenceBrokerRecord" or (brc and row[FENCED] == 1) or t == "UnregisterBrokerRecord":
        return "FENCE"
    if brc and row[SHUTDOWN] == 1:
        return "CONTROLLED_SHUTDOWN"
    if t == "UnfenceBrokerRecord" or (brc and row[FENCED] == -1):
        return "UNFENCE"
    if t == "ConfigRecord":
        return "CONFIG"
    return None


def election_cause(
    create: bool,
    old_leader: int | None,
    old_isr: list[int],
    isr: list[int] | None,
    leader: int | None,
    unit_events: list[tuple[int, str]],
) -> tuple[str, int | None]:
    """(cause, cause_broker_id) by history.leader_elections' rule."""
    if create:
        return "CREATE", None
    for kind in ("FENCE", "CONTROLLED_SHUTDOWN"):
        hits = [
            b
            for b, k in unit_events
            if k == kind and (b == old_leader or (b in old_isr and b not in (isr or ())))
        ]
        if hits:
            return kind, old_leader if old_leader in hits else hits[0]
    if any(k == "UNFENCE" and b == leader for b, k in unit_events):
        return "UNFENCE", leader
    if any(k == "CONFIG" for _, k in unit_events):
        return "ADMIN", None
    if old_leader is not None and old_leader == leader:
        return "ALTER_PARTITION", leader
    return "ADMIN", None


# An event: (at_offset, offset, at_time, unit, row).
Event = tuple[int, int, int, int, tuple[Any, ...]]


def events(rows: Iterable[tuple[Any, ...]]) -> Iterator[list[Event]]:
    """The state-changing rows (offset order) as groups of whole units, in the
    order they apply: a group is yielded once no later row can join its units."""
    pending: list[Event] = []
    unsorted = False  # a transaction's rows apply after rows read later than them
    txn: list[tuple[Any, ...]] | None = None
    base = None
    for r in rows:
        t = r[TYPE]
        if t == "BeginTransactionRecord":
            if txn:  # a second Begin: the first one's rows were in no transaction
                pending += [(x[OFFSET], x[OFFSET], x[TIME], x[BASE], x) for x in txn]
            txn = []
            continue
        if t == "EndTransactionRecord" or t == "AbortTransactionRecord":
            if txn is not None and t == "EndTransactionRecord":
                at, at_time = r[OFFSET], r[TIME]
                pending += [(at, x[OFFSET], at_time, at, x) for x in txn]
                unsorted = True
            txn = None  # an aborted transaction never happened
            continue
        if txn is not None:
            txn.append(r)
            continue
        if r[BASE] != base and pending:
            if unsorted:
                pending.sort(key=lambda e: (e[0], e[1]))
            yield pending
            pending, unsorted = [], False
        base = r[BASE]
        pending.append((r[OFFSET], r[OFFSET], r[TIME], r[BASE], r))
    if pending:  # (an unfinished transaction is not applied)
        if unsorted:
            pending.sort(key=lambda e: (e[0], e[1]))
        yield pending


class Replay:
    """The history tables, record by record; `write_tables` drives it."""

    def __init__(self, out: Path) -> None:
        self.names: dict[str, str] = {}
        self.partitions: dict[tuple[str, int], _Partition] = {}
        self.topic_partitions: dict[str, list[int]] = {}
        self.broker_events: list[dict[str, Any]] = []
        self.history = _TableWriter(out / "partition_history", "partition_history", self.names)
        self.elections = _TableWriter(out / "leader_elections", "leader_elections", self.names)
        self.offline = _TableWriter(out / "offline_partitions", "offline_partitions", self.names)
        self.out = out

    def apply(self, group: list[Event]) -> None:
        unit_events: dict[int, list[tuple[int, str]]] = {}
        for _at, _off, _time, unit, r in group:
            t = r[TYPE]
            if t not in PARTITION_TYPES:
                kind = unit_kind(r)
                if kind is not None:
                    unit_events.setdefault(unit, []).append((r[BROKER_ID], kind))
        for at, off, at_time, unit, r in group:
            t = r[TYPE]
            if t in PARTITION_TYPES:
                self._partition_record(at, off, at_time, r, unit_events.get(unit, ()))
            elif t == "TopicRecord":
                self.names[r[TOPIC_ID]] = r[TOPIC_NAME]
            elif t == "RemoveTopicRecord":
                for pid in self.topic_partitions.pop(r[TOPIC_ID], ()):
                    self._remove((r[TOPIC_ID], pid), at, at_time)
            elif t in BROKER_TYPES:
                self.broker_events.append(
                    {**dict(zip(ROW_COLUMNS, r, strict=True)), "at_offset": at, "at_time": at_time}
                )

    def _partition_record(
        self, at: int, off: int, at_time: int, r: tuple[Any, ...], unit_events: Any
    ) -> None:
        key = (r[TOPIC_ID], r[PARTITION_ID])
        p = self.partitions.get(key)
        if p is None:
            p = self.partitions[key] = _Partition()
            self.topic_partitions.setdefault(key[0], []).append(key[1])
        elif p.start != at:  # the state so far was visible: its interval ends here
            self._write_interval(key, p, at, at_time)
        old_leader, old_isr = p.leader, p.isr
        create = r[TYPE] == "PartitionRecord"
        sets_leader = create or r[LEADER] != NO_LEADER_CHANGE
        if create:
            p.leader, p.lrs = r[LEADER], r[LRS]
            p.leader_epoch, p.partition_epoch = r[LEADER_EPOCH], r[PARTITION_EPOCH]
        else:
            if p.partition_epoch is not None:
                p.partition_epoch += 1
            if sets_leader:
                p.leader = r[LEADER]
                if p.leader_epoch is not None:
                    p.leader_epoch += 1
            if r[LRS] != LEADER_RECOVERY_UNCHANGED:
                p.lrs = r[LRS]
        if r[ISR] is not None:
            p.isr = r[ISR]
        if r[REPLICAS] is not None:
            p.replicas = r[REPLICAS]
        if r[REMOVING] is not None:
            p.removing = r[REMOVING]
        if r[ADDING] is not None:
            p.adding = r[ADDING]
        p.start, p.start_time = at, at_time
        if sets_leader:
            oi = old_isr or []
            leader = p.leader
            cause, cause_broker = election_cause(create, old_leader, oi, p.isr, leader, unit_events)
            unclean = (not create) and leader is not None and leader >= 0 and leader not in oi
            self.elections.add(
                (
                    off,
                    at,
                    at_time,
                    None,
                    key[0],
                    key[1],
                    old_leader,
                    leader,
                    unclean,
                    cause,
                    cause_broker,
                    p.leader_epoch,
                )
            )

    def _write_interval(
        self, key: tuple[str, int], p: _Partition, end: int | None, end_time: int | None
    ) -> None:
        """The visible state `p` holds, as [p.start, end); offline windows follow it."""
        self.history.add(
            (
                None,
                key[0],
                key[1],
                p.leader,
                p.isr,
                p.replicas,
                p.removing,
                p.adding,
                p.lrs,
                p.leader_epoch,
                p.partition_epoch,
                p.start,
                end,
                p.start_time,
                end_time,
            )
        )
        if p.leader is not None and p.leader < 0:
            if p.offline_since is None:
                p.offline_since = (p.start, p.start_time)
        elif p.offline_since is not None:
            self._write_offline(key, p, p.start, p.start_time)

    def _write_offline(
        self, key: tuple[str, int], p: _Partition, end: int | None, end_time: int | None
    ) -> None:
        since, since_time = p.offline_since  # type: ignore[misc]
        self.offline.add((None, key[0], key[1], since, end, since_time, end_time))
        p.offline_since = None

    def _remove(self, key: tuple[str, int], at: int, at_time: int) -> None:
        p = self.partitions.pop(key)
        if p.start != at:
            self._write_interval(key, p, at, at_time)
        if p.offline_since is not None:
            self._write_offline(key, p, at, at_time)

    def finish(self) -> None:
        for key, p in self.partitions.items():
            self._write_interval(key, p, None, None)
            if p.offline_since is not None:
                self._write_offline(key, p, None, None)
        self.partitions.clear()
        for w in (self.history, self.elections, self.offline):
            w.close()
        brokers = _TableWriter(self.out / "broker_history", "broker_history", self.names)
        for row in broker_history(self.broker_events):
            brokers.add(row)
        brokers.close()


def _visible(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of several rows applying at one offset, only the last is visible."""
    return [
        r
        for r, nxt in zip(rows, [*rows[1:], None], strict=True)
        if nxt is None or nxt["at_offset"] != r["at_offset"]
    ]


def broker_history(ev: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """broker_history rows (TABLE_COLUMNS order) from the broker records, in the
    order they apply (a few per broker: plain Python is enough)."""
    by_broker: dict[int, list[dict[str, Any]]] = {}
    for r in ev:
        by_broker.setdefault(r["broker_id"], []).append(r)
    out: list[tuple[Any, ...]] = []
    for bid in sorted(by_broker):
        fenced = shut = None
        reg: tuple[Any, Any] | None = None
        states = []
        for r in by_broker[bid]:
            if r["fenced"] in (1, -1):
                fenced = r["fenced"] == 1
            if r["shutdown"] in (1, -1):
                shut = r["shutdown"] == 1
            if r["type"] == "RegisterBrokerRecord":
                reg = (r["incarnation_id"], r["rack"])
            unreg = r["type"] == "UnregisterBrokerRecord"
            if unreg:
                state = "UNREGISTERED"
            elif fenced:
                state = "FENCED"
            elif shut:
                state = "CONTROLLED_SHUTDOWN"
            else:
                state = "UNFENCED"
            states.append(
                {
                    "broker_epoch": r["broker_epoch"],
                    "state": state,
                    "fenced": None if unreg else fenced,
                    "in_controlled_shutdown": None if unreg else shut,
                    "incarnation_id": reg[0] if reg else None,
                    "rack": reg[1] if reg else None,
                    "at_offset": r["at_offset"],
                    "at_time": r["at_time"],
                }
            )
        changes: list[dict[str, Any]] = []
        prev = None
        for s in _visible(states):
            key = tuple(s[k] for k in BROKER_INTERVAL_KEY)
            if key != prev:
                changes.append(s)
            prev = key
        for s, nxt in zip(changes, [*changes[1:], None], strict=True):
            out.append(
                (
                    bid,
                    *(s[k] for k in BROKER_INTERVAL_KEY),
                    s["at_offset"],
                    None if nxt is None else nxt["at_offset"],
                    s["at_time"],
                    None if nxt is None else nxt["at_time"],
                )
            )
    return out


def write_tables(log_dir: str | Path, out: str | Path) -> int:
    """log -> OUT/records and the four history tables; returns the record count.

    OUT's table directories must not exist yet.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_replay.datasource import list_log_files
    from spark_replay.decode import ARROW_SCHEMA
    from spark_replay.records import write_part

    out = Path(out)
    files = list_log_files(log_dir)
    if any(f.source != "segment" for f in files) or (files and files[0].base_offset != 0):
        raise OneProcessError(
            f"{log_dir}: the one-process replay reads complete logs only "
            "(segments from offset 0), not a history that starts from a snapshot"
        )
    wanted = pa.array([*STATE_TYPES, *TXN_TYPES])
    (out / "records").mkdir(parents=True)
    count = 0

    def keep(kept: list[pa.RecordBatch], batch: pa.RecordBatch) -> None:
        kept.append(batch.filter(pc.is_in(batch.column("type"), value_set=wanted)))

    def rows() -> Iterator[tuple[Any, ...]]:
        nonlocal count
        for i, f in enumerate(files):
            kept: list[pa.RecordBatch] = []
            # The records table's part, as the Spark job writes it, from the same decode.
            part = write_part(i, f, str(out / "records"), on_batch=functools.partial(keep, kept))
            count += part["records"]
            # The decoder groups a chunk's rows by kind: one file (one segment's
            # worth of rows) is put back in offset order before it is replayed.
            table = pa.Table.from_batches(kept, schema=ARROW_SCHEMA).sort_by("offset")
            yield from zip(*(table.column(c).to_pylist() for c in ROW_COLUMNS), strict=True)

    replay = Replay(out)
    # Many small tuples and lists, no cycles: the cyclic collector would rescan them.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for group in events(rows()):
            replay.apply(group)
        replay.finish()
    finally:
        if was_enabled:
            gc.enable()
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m spark_replay.one_process",
        description="The spark-replay tables in one Python process, without Spark "
        "(complete logs only).",
    )
    ap.add_argument("--log-dir", required=True, help="data dir or __cluster_metadata-0 dir")
    ap.add_argument("--out", required=True, help="output dir (must not hold the tables yet)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    existing = [n for n in ("records", *TABLE_COLUMNS) if (out / n).exists()]
    if existing:
        print(f"one_process: {out} already holds {', '.join(existing)}", file=sys.stderr)
        return 2
    try:
        n = write_tables(args.log_dir, out)
    except (MetadataLogError, OneProcessError, OSError) as e:
        print(f"one_process: {e}", file=sys.stderr)
        return 2
    print(f"one_process: {n} records -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
