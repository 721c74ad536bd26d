"""The replay rules, vectorised over one log file: what each record type does to
the history tables (DESIGN 1.6), in one place for the Spark tasks and the
one-process replay.

A log file's work splits in two, so that files can be replayed in parallel:

1. `file_events` puts a file's state-changing rows in the order they apply
   (a metadata transaction's rows at its EndTransactionRecord, KIP-868; a
   starting snapshot's at its end offset - 1) and `summarize` reduces them to a
   `Summary`: per partition the last value of each carried field and the number
   of changes that bump each epoch (a `Delta`), where each partition's first
   record and first online state are, the topics it names and removes, and the
   broker records. Summaries form a monoid (`compose`): the driver folds them
   in offset order into each file's starting states (`starting_states`, a
   prefix scan) and, backwards, where each partition's next interval starts
   (`next_points`).
2. `replay_file` replays the file from its starting states with numpy and
   pyarrow (no per-record Python loop): a start row per partition, then every
   record; carried fields are forward fills within a partition, epochs are
   cumulative sums, an interval ends at the partition's next record (in a
   later file: from `next_points`). It returns the partition_history,
   leader_elections and offline_partitions rows of the intervals, elections
   and offline windows that *start* in the file.

The semantics are spark_replay.history's (the DataFrame-window reference that
the tests compare this with): carried fields are the last non-null value,
`leader_epoch` = the last PartitionRecord's + the number of change records
that set a leader, `partition_epoch` = the last PartitionRecord's + the number
of change records; of several rows at one offset only the last is visible; a
RemoveTopicRecord ends its partitions' intervals. Topic ids are never reused.
broker_history (a few thousand rows) is plain Python on the driver
(`broker_history`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata_log.records import LEADER_RECOVERY_UNCHANGED, NO_LEADER, NO_LEADER_CHANGE
from spark_replay.tables import (
    BROKER_INTERVAL_KEY,
    LEADER_ELECTIONS_COLUMNS,
    OFFLINE_PARTITIONS_COLUMNS,
    PARTITION_HISTORY_COLUMNS,
    PARTITION_STATE_VALUES,
    STATE_TYPES,
)

# Record type codes: the position in STATE_TYPES.
CODE = {t: i for i, t in enumerate(STATE_TYPES)}
PR, PCR = CODE["PartitionRecord"], CODE["PartitionChangeRecord"]
TOPIC, REMOVE_TOPIC, CONFIG = CODE["TopicRecord"], CODE["RemoveTopicRecord"], CODE["ConfigRecord"]
REGISTER, UNREGISTER = CODE["RegisterBrokerRecord"], CODE["UnregisterBrokerRecord"]
FENCE, UNFENCE = CODE["FenceBrokerRecord"], CODE["UnfenceBrokerRecord"]
BRC = CODE["BrokerRegistrationChangeRecord"]
_STATE_TYPES = pa.array(STATE_TYPES, pa.string())

# The records columns an events table keeps (besides its own at/seq/at_time/unit/code).
EVENT_SOURCE_COLUMNS = (
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
LIST_FIELDS = ("isr", "replicas", "removing_replicas", "adding_replicas", "elr", "last_known_elr")

# A partition's key and a point of the history: (topic id, partition id), (offset, time).
Key = tuple[str, int]
Point = tuple[int, int]


class Delta(NamedTuple):
    """What a run of records does to one partition: the last non-null value of
    each carried field (None: unchanged), the last PartitionRecord's epochs, and
    how many records bump each epoch. Deltas compose: later non-null values win,
    counts add (`then`).

    A NamedTuple rather than a dataclass: the driver folds and pickles one per
    partition per file (measured: `then` 6x and pickling 2-3x faster)."""

    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    leader_recovery_state: int | None = None
    leader_epoch_base: int | None = None
    leader_changes: int = 0
    partition_epoch_base: int | None = None
    changes: int = 0

    def then(self, b: Delta) -> Delta:
        a = self
        return Delta(
            a[0] if b[0] is None else b[0],
            a[1] if b[1] is None else b[1],
            a[2] if b[2] is None else b[2],
            a[3] if b[3] is None else b[3],
            a[4] if b[4] is None else b[4],
            a[5] if b[5] is None else b[5],
            a[6] if b[6] is None else b[6],
            a[7] if b[7] is None else b[7],
            a[8] if b[8] is None else b[8],
            a[9] + b[9],
            a[10] if b[10] is None else b[10],
            a[11] + b[11],
        )


# A broker record as broker_history reads it, in apply order:
# (at_offset, at_time, type code, broker_id, broker_epoch, fenced, shutdown, incarnation_id, rack)
BrokerEvent = tuple[int, int, int, int, int | None, int, int, str | None, str | None]


@dataclass(frozen=True)
class Summary:
    """One file's (or a run of files') effect on the history (see the module doc)."""

    deltas: dict[Key, Delta] = field(default_factory=dict)
    first_event: dict[Key, Point] = field(default_factory=dict)
    # The first visible state with a leader, among those after the run's first
    # leader change: where an offline window open at the run's start ends.
    first_online: dict[Key, Point] = field(default_factory=dict)
    removed: dict[str, Point] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    brokers: tuple[BrokerEvent, ...] = ()


def compose(a: Summary, b: Summary) -> Summary:
    """The summary of a run of records followed by another (associative)."""
    deltas = dict(a.deltas)
    for k, d in b.deltas.items():
        prev = deltas.get(k)
        deltas[k] = d if prev is None else prev.then(d)
    if b.removed:
        deltas = {k: d for k, d in deltas.items() if k[0] not in b.removed}
    return Summary(
        deltas=deltas,
        first_event={**b.first_event, **a.first_event},
        first_online={**b.first_online, **a.first_online},
        removed={**b.removed, **a.removed},
        names={**a.names, **b.names},
        brokers=a.brokers + b.brokers,
    )


class PrefixFold:
    """The exclusive prefix scan of `compose`, one file at a time, in place: the
    driver can hand a file its starting state as soon as the files before it
    are summarized."""

    def __init__(self) -> None:
        self.state: dict[Key, Delta] = {}
        self.by_topic: dict[str, set[Key]] = {}

    def push(self, s: Summary) -> dict[Key, Delta]:
        """The starting state of the file `s` summarizes (of the partitions it
        touches); then folds `s` in."""
        state = self.state
        start = {k: state[k] for k in s.first_event if k in state}
        for k, d in s.deltas.items():
            prev = state.get(k)
            if prev is None:
                state[k] = d
                self.by_topic.setdefault(k[0], set()).add(k)
            else:
                state[k] = prev.then(d)
        for topic in s.removed:
            for k in self.by_topic.pop(topic, ()):
                del state[k]
        return start


def starting_states(summaries: list[Summary]) -> list[dict[Key, Delta]]:
    """Each file's starting state of the partitions it touches: the fold of the
    summaries before it (an exclusive prefix scan of `compose`, done in place)."""
    fold = PrefixFold()
    return [fold.push(s) for s in summaries]


def next_points(
    summaries: list[Summary], keys: list[list[Key]]
) -> list[dict[Key, tuple[Point | None, Point | None]]]:
    """Per file, for its partitions `keys[i]`: where the partition's next record
    in a later file applies (its last interval's end) and where it is next
    online (an offline window's end); a removal of its topic ends both."""
    next_event: dict[Key, Point] = {}
    next_online: dict[Key, Point] = {}
    next_removal: dict[str, Point] = {}
    out: list[dict[Key, tuple[Point | None, Point | None]]] = [{} for _ in summaries]
    for i in range(len(summaries) - 1, -1, -1):
        ends = {}
        for k in keys[i]:
            rm = next_removal.get(k[0])
            ends[k] = (_earliest(next_event.get(k), rm), _earliest(next_online.get(k), rm))
        out[i] = ends
        s = summaries[i]
        next_event.update(s.first_event)
        next_online.update(s.first_online)
        next_removal.update(s.removed)
    return out


def _earliest(a: Point | None, b: Point | None) -> Point | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a[0] <= b[0] else b


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Txn:
    """A metadata transaction by its markers: rows in (begin, end) apply at `end`
    if `applied` (an EndTransactionRecord), else never."""

    begin: int
    end: int
    applied: bool
    end_time_ms: int


def file_events(
    rows: pa.Table,
    lo: int,
    hi: int,
    txns: list[Txn],
    snapshot_point: Point | None = None,
    min_offset: int | None = None,
) -> pa.Table:
    """The state-changing rows of `rows` (records columns) that apply at an offset
    in [lo, hi], with `code`, `at`, `seq`, `at_time`, `unit` and `from_snapshot`,
    in the order they apply.

    A snapshot's rows (`snapshot_point`: its end offset - 1 and time) all apply
    there, in their order; segment rows below `min_offset` (a starting
    snapshot's end) are dropped; a transaction's rows apply at its end (with its
    end as their unit) or, aborted or unfinished, never.
    """
    code_all = pc.index_in(rows.column("type"), value_set=_STATE_TYPES)
    state = pc.is_valid(code_all)
    rows = rows.filter(state).select(list(EVENT_SOURCE_COLUMNS))
    code = code_all.filter(state).to_numpy().astype(np.int8)
    off = rows.column("offset").to_numpy()
    n = len(off)
    if snapshot_point is not None:
        at = np.full(n, snapshot_point[0], np.int64)
        at_time = np.full(n, snapshot_point[1], np.int64)
        unit = np.full(n, -1, np.int64)
        keep = np.ones(n, bool)
    else:
        at = off.copy()
        at_time = rows.column("append_time_ms").to_numpy().copy()
        unit = rows.column("base_offset").to_numpy().copy()
        keep = np.ones(n, bool)
        if min_offset is not None:
            keep &= off >= min_offset
        if txns:
            begins = np.array([t.begin for t in txns], np.int64)
            ends = np.array([t.end for t in txns], np.int64)
            applied = np.array([t.applied for t in txns], bool)
            end_times = np.array([t.end_time_ms for t in txns], np.int64)
            i = np.maximum(np.searchsorted(begins, off, side="right") - 1, 0)
            inside = (off > begins[i]) & (off < ends[i])
            at = np.where(inside, ends[i], at)
            at_time = np.where(inside, end_times[i], at_time)
            unit = np.where(inside, ends[i], unit)
            keep &= ~inside | applied[i]
        keep &= (at >= lo) & (at <= hi)
    order = np.flatnonzero(keep)
    order = order[np.lexsort((off[order], at[order]))]
    idx = pa.array(order)
    out = rows.take(idx)
    return (
        out.append_column("code", pa.array(code[order]))
        .append_column("at", pa.array(at[order]))
        .append_column("seq", pa.array(off[order]))
        .append_column("at_time", pa.array(at_time[order]))
        .append_column("unit", pa.array(unit[order]))
        .append_column("from_snapshot", pa.array(np.full(len(order), snapshot_point is not None)))
    )


# ----------------------------------------------------------------------------- carry


def _np(col: Any, fill: int) -> np.ndarray:
    """An integer Arrow column as int64 numpy, nulls as `fill`."""
    return pc.fill_null(col.cast(pa.int64()), fill).to_numpy(zero_copy_only=False)


def _valid(col: Any) -> np.ndarray:
    return pc.is_valid(col).to_numpy(zero_copy_only=False)


NULL = np.iinfo(np.int64).min  # an int64 column's null inside numpy


@dataclass
class Carried:
    """Every partition record of a file after its partition's start row, in
    (partition, apply) order, with the state after it and before it."""

    n_groups: int
    keys: list[Key]  # by group
    group: np.ndarray  # per row
    is_start: np.ndarray
    at: np.ndarray
    at_time: np.ndarray
    seq: np.ndarray
    unit: np.ndarray
    code: np.ndarray
    from_snapshot: np.ndarray
    sets_leader: np.ndarray
    sets_replicas: np.ndarray  # a change record that sets the replicas (KIP-455)
    leader: np.ndarray  # carried; NULL when none
    lrs: np.ndarray
    leader_epoch: np.ndarray
    partition_epoch: np.ndarray
    leader_changes: np.ndarray  # cumulative, from the start row
    changes: np.ndarray
    le_base: np.ndarray
    pe_base: np.ndarray
    # Carried list columns, lazily: row i's value is list_source[name][list_index[name][i]]
    # (a take of only the rows a caller needs: the lists are the costly columns).
    list_source: dict[str, pa.Array]
    list_index: dict[str, np.ndarray]
    old_leader: np.ndarray  # the carried leader of the row before (NULL at start rows)
    old_isr_index: np.ndarray  # into list_source["isr"]
    topic_code: np.ndarray  # per row: index into `topics`
    topics: list[str]

    def lists(self, name: str, rows: np.ndarray) -> pa.Array:
        """The carried list column `name` at `rows`."""
        return self.list_source[name].take(pa.array(self.list_index[name][rows]))


def _start_columns(keys: list[Key], start: dict[Key, Delta]) -> dict[str, Any]:
    ds = [start.get(k) for k in keys]

    def ints(name: str) -> np.ndarray:
        return np.array(
            [NULL if d is None or getattr(d, name) is None else getattr(d, name) for d in ds],
            np.int64,
        )

    cols: dict[str, Any] = {
        "leader": ints("leader"),
        "leader_recovery_state": ints("leader_recovery_state"),
        "leader_epoch_base": ints("leader_epoch_base"),
        "partition_epoch_base": ints("partition_epoch_base"),
        "leader_changes": np.array([0 if d is None else d.leader_changes for d in ds], np.int64),
        "changes": np.array([0 if d is None else d.changes for d in ds], np.int64),
    }
    for name in LIST_FIELDS:
        cols[name] = pa.array(
            [None if d is None else getattr(d, name) for d in ds], pa.list_(pa.int32())
        )
    return cols


def carry(events: pa.Table, start: dict[Key, Delta]) -> Carried:
    """The partition records of `events` (apply order) replayed from `start`."""
    code = events.column("code")
    parts = events.filter(pc.and_(pc.greater_equal(code, PR), pc.less_equal(code, PCR)))
    n = parts.num_rows
    tcol = pc.dictionary_encode(parts.column("topic_id")).combine_chunks()
    topics = tcol.dictionary.to_pylist()
    tidx = tcol.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    pid = _np(parts.column("partition_id"), 0)
    key64 = (tidx << 32) | pid
    ukeys, group_p = np.unique(key64, return_inverse=True)
    g = len(ukeys)
    keys = [(topics[int(k >> 32)], int(k & 0xFFFFFFFF)) for k in ukeys]
    sc = _start_columns(keys, start)
    # rows: g start rows then n records; a stable sort by group puts each
    # partition's start row first and keeps its records in apply order.
    group_all = np.concatenate([np.arange(g), group_p])
    order = np.argsort(group_all, kind="stable")
    group = group_all[order]
    is_start = order < g

    def arrange(start_vals: np.ndarray, rec_vals: np.ndarray) -> np.ndarray:
        return np.concatenate([start_vals, rec_vals])[order]

    code_p = parts.column("code").to_numpy(zero_copy_only=False)
    code = arrange(np.full(g, -1, np.int8), code_p)
    leader_raw = _np(parts.column("leader"), NULL)
    is_pr = code == PR
    is_pcr = code == PCR
    sets_leader = is_pcr & (arrange(np.zeros(g, np.int64), leader_raw) != NO_LEADER_CHANGE)
    pos = np.arange(g + n)

    def ffill(valid: np.ndarray) -> np.ndarray:
        return np.maximum.accumulate(np.where(valid | is_start, pos, 0))

    leader_all = arrange(sc["leader"], leader_raw)
    leader = leader_all[ffill(is_pr | sets_leader)]
    lrs_raw = arrange(sc["leader_recovery_state"], _np(parts.column("leader_recovery_state"), NULL))
    lrs = lrs_raw[ffill(is_pr | (is_pcr & (lrs_raw != LEADER_RECOVERY_UNCHANGED)))]
    le_raw = arrange(sc["leader_epoch_base"], _np(parts.column("leader_epoch"), NULL))
    pe_raw = arrange(sc["partition_epoch_base"], _np(parts.column("partition_epoch"), NULL))
    le_base = le_raw[ffill(le_raw != NULL)]
    pe_base = pe_raw[ffill(pe_raw != NULL)]
    # Counts from each partition's start row (which holds the counts before the file).
    first_of_group = np.flatnonzero(is_start)
    leader_changes = _group_cumsum(
        np.where(is_start, arrange(sc["leader_changes"], np.zeros(n, np.int64)), sets_leader),
        group,
        first_of_group,
    )
    changes = _group_cumsum(
        np.where(is_start, arrange(sc["changes"], np.zeros(n, np.int64)), is_pcr),
        group,
        first_of_group,
    )
    leader_epoch = np.where(le_base == NULL, NULL, le_base + leader_changes)
    partition_epoch = np.where(pe_base == NULL, NULL, pe_base + changes)
    list_source, list_index = {}, {}
    sets_replicas = np.zeros(g + n, bool)
    for name in LIST_FIELDS:
        both = pa.concat_arrays(
            [sc[name], parts.column(name).combine_chunks().cast(pa.list_(pa.int32()))]
        )
        valid = np.concatenate([np.ones(g, bool), _valid(both)[g:]])[order]
        list_source[name] = both
        list_index[name] = order[ffill(valid)]
        if name == "replicas":
            sets_replicas = is_pcr & valid
    before = np.maximum(pos - 1, 0)
    old_leader = np.where(is_start, NULL, leader[before])
    old_isr_index = list_index["isr"][before]
    topic_code = (ukeys[group] >> 32).astype(np.int64)
    return Carried(
        n_groups=g,
        keys=keys,
        group=group,
        is_start=is_start,
        at=arrange(np.full(g, NULL), parts.column("at").to_numpy()),
        at_time=arrange(np.full(g, NULL), parts.column("at_time").to_numpy()),
        seq=arrange(np.full(g, NULL), parts.column("seq").to_numpy()),
        unit=arrange(np.full(g, NULL), parts.column("unit").to_numpy()),
        code=code,
        from_snapshot=arrange(
            np.zeros(g, bool), parts.column("from_snapshot").to_numpy(zero_copy_only=False)
        ),
        sets_leader=sets_leader,
        sets_replicas=sets_replicas,
        leader=leader,
        lrs=lrs,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        leader_changes=leader_changes,
        changes=changes,
        le_base=le_base,
        pe_base=pe_base,
        list_source=list_source,
        list_index=list_index,
        old_leader=old_leader,
        old_isr_index=old_isr_index,
        topic_code=topic_code,
        topics=topics,
    )


def _group_cumsum(c: np.ndarray, group: np.ndarray, first_of_group: np.ndarray) -> np.ndarray:
    c = c.astype(np.int64)
    cs = np.cumsum(c)
    base = cs[first_of_group] - c[first_of_group]
    return cs - base[group]


def _group_bounds(c: Carried) -> tuple[np.ndarray, np.ndarray]:
    """Per row: does the next row belong to the same partition; per group: its last row."""
    same_next = np.zeros(len(c.group), bool)
    same_next[:-1] = c.group[1:] == c.group[:-1]
    return same_next, np.flatnonzero(~same_next)


def _removals(events: pa.Table) -> dict[str, Point]:
    rm = events.filter(pc.equal(events.column("code"), REMOVE_TOPIC))
    return {
        t: (a, tm)
        for t, a, tm in zip(
            rm.column("topic_id").to_pylist(),
            rm.column("at").to_pylist(),
            rm.column("at_time").to_pylist(),
            strict=True,
        )
    }


def _next_in_file(
    c: Carried, same_next: np.ndarray, group_end: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Where each row's state ends: the partition's next row, or past its last row
    `group_end` (per group: offset and time, NULL when open)."""
    nxt = np.minimum(np.arange(len(c.group)) + 1, len(c.group) - 1)
    next_at = np.where(same_next, c.at[nxt], group_end[0][c.group])
    next_time = np.where(same_next, c.at_time[nxt], group_end[1][c.group])
    return next_at, next_time


def _points(points: list[Point | None]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([NULL if p is None else p[0] for p in points], np.int64),
        np.array([NULL if p is None else p[1] for p in points], np.int64),
    )


def _tuple(x: list[int] | None) -> tuple[int, ...] | None:
    return None if x is None else tuple(x)


def _opt(v: int) -> int | None:
    return None if v == NULL else int(v)


def summarize(events: pa.Table) -> Summary:
    """A file's Summary from its events (`file_events`)."""
    c = carry(events, {})
    removed = _removals(events)
    same_next, last = _group_bounds(c)
    in_file_end = _points([removed.get(k[0]) for k in c.keys])
    next_at, _ = _next_in_file(c, same_next, in_file_end)
    visible = ~c.is_start & (next_at != c.at)
    lists = {name: c.lists(name, last).to_pylist() for name in LIST_FIELDS}
    deltas = {}
    for i, (k, r) in enumerate(zip(c.keys, last.tolist(), strict=True)):
        if k[0] in removed:
            continue
        deltas[k] = Delta(
            _opt(c.leader[r]),
            _tuple(lists["isr"][i]),
            _tuple(lists["replicas"][i]),
            _tuple(lists["removing_replicas"][i]),
            _tuple(lists["adding_replicas"][i]),
            _tuple(lists["elr"][i]),
            _tuple(lists["last_known_elr"][i]),
            _opt(c.lrs[r]),
            _opt(c.le_base[r]),
            int(c.leader_changes[r]),
            _opt(c.pe_base[r]),
            int(c.changes[r]),
        )
    first_rows = np.flatnonzero(c.is_start) + 1
    first_event = {
        k: (int(c.at[r]), int(c.at_time[r]))
        for k, r in zip(c.keys, first_rows.tolist(), strict=True)
    }
    online = np.flatnonzero(visible & (c.leader != NULL) & (c.leader >= 0))
    groups, first = np.unique(c.group[online], return_index=True)
    first_online = {
        c.keys[g]: (int(c.at[r]), int(c.at_time[r]))
        for g, r in zip(groups.tolist(), online[first].tolist(), strict=True)
    }
    topics = events.filter(pc.equal(events.column("code"), TOPIC))
    names = dict(
        zip(
            topics.column("topic_id").to_pylist(),
            topics.column("topic_name").to_pylist(),
            strict=True,
        )
    )
    return Summary(deltas, first_event, first_online, removed, names, broker_events(events))


def broker_events(events: pa.Table) -> tuple[BrokerEvent, ...]:
    code = events.column("code")
    b = events.filter(pc.less_equal(code, BRC))  # the broker types come first in STATE_TYPES
    cols = (
        "at",
        "at_time",
        "code",
        "broker_id",
        "broker_epoch",
        "fenced",
        "shutdown",
        "incarnation_id",
        "rack",
    )
    return tuple(zip(*(b.column(x).to_pylist() for x in cols), strict=True))


# ----------------------------------------------------------------------------- replay

_LIST = pa.list_(pa.field("element", pa.int32()))
_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(
        ("broker_id", "partition_id", "leader", "old_leader", "new_leader"), pa.int32()
    ),
    **dict.fromkeys(("leader_recovery_state", "leader_epoch", "partition_epoch"), pa.int32()),
    "cause_broker_id": pa.int32(),
    **dict.fromkeys(("offset", "applied_offset", "append_time_ms", "broker_epoch"), pa.int64()),
    **dict.fromkeys(("start_offset", "end_offset", "start_time_ms", "end_time_ms"), pa.int64()),
    **dict.fromkeys(
        ("topic", "topic_id", "state", "incarnation_id", "rack", "cause", "election_type"),
        pa.string(),
    ),
    **dict.fromkeys(("fenced", "in_controlled_shutdown", "unclean"), pa.bool_()),
    **dict.fromkeys(LIST_FIELDS, _LIST),
}


def table_schema(columns: tuple[str, ...]) -> pa.Schema:
    """The Arrow schema of a history table (Spark's types: int, bigint, array<int>)."""
    return pa.schema([pa.field(c, _TYPES[c]) for c in columns])


def _int_col(v: np.ndarray, name: str) -> pa.Array:
    return pa.array(
        v, _TYPES[name] if _TYPES[name] != pa.int32() else pa.int64(), mask=v == NULL
    ).cast(_TYPES[name])


CAUSES = pa.array(
    [
        "CREATE",
        "FENCE",
        "CONTROLLED_SHUTDOWN",
        "UNFENCE",
        "ADMIN",
        "ALTER_PARTITION",
        "REASSIGNMENT",
        "REBALANCE",
    ]
)
_CREATE, _FENCE, _SHUTDOWN, _UNFENCE, _ADMIN, _ALTER, _REASSIGN, _REBALANCE = range(8)
# history.leader_elections' election_type: ISR, ELR, UNCLEAN (null: nobody elected)
ELECTION_TYPES = pa.array(["ISR", "ELR", "UNCLEAN", None], pa.string())
_ISR, _ELR, _UNCLEAN, _NOBODY = range(4)
RECOVERING = 1
_KIND_NONE = -1


def unit_kinds(events: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit, broker_id, kind) of the broker and config records that tell an
    election its cause (history._unit_events), in apply order."""
    code = events.column("code").to_numpy(zero_copy_only=False)
    snap = events.column("from_snapshot").to_numpy(zero_copy_only=False)
    fenced = _np(events.column("fenced"), 0)
    shutdown = _np(events.column("shutdown"), 0)
    brc = code == BRC
    kind = np.select(
        [
            (code == FENCE) | (brc & (fenced == 1)) | (code == UNREGISTER),
            brc & (shutdown == 1),
            (code == UNFENCE) | (brc & (fenced == -1)),
            code == CONFIG,
        ],
        [_FENCE, _SHUTDOWN, _UNFENCE, _ADMIN],
        _KIND_NONE,
    )
    keep = np.flatnonzero((kind != _KIND_NONE) & ~snap)
    return (
        events.column("unit").to_numpy()[keep],
        _np(events.column("broker_id"), NULL)[keep],
        kind[keep],
    )


def _members(rows: np.ndarray, brokers: np.ndarray, lists: pa.Array) -> np.ndarray:
    """Per (row, broker) pair: is the broker in `lists[row]` (a null list is empty).

    Each pair is compared with every element of its row's list: ISRs are short.
    """
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    n = lengths[rows]
    pair = np.repeat(np.arange(len(rows)), n)
    element = np.repeat(offsets[rows] - np.concatenate([[0], np.cumsum(n)])[:-1], n) + np.arange(
        len(pair)
    )
    hit = flat[element] == brokers[pair]
    return np.bincount(pair[hit], minlength=len(rows)) > 0


def election_causes(
    unit: np.ndarray,
    create: np.ndarray,
    old_leader: np.ndarray,
    new_leader: np.ndarray,
    old_isr: pa.Array,
    isr: pa.Array,
    events: tuple[np.ndarray, np.ndarray, np.ndarray],
    sets_replicas: np.ndarray,
    preferred: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(cause index into CAUSES, cause_broker_id or NULL) per election, by
    history.leader_elections' rule, over (election, event of its unit) pairs."""
    m = len(unit)
    ev_unit, ev_broker, ev_kind = events
    order = np.argsort(ev_unit, kind="stable")
    ev_unit, ev_broker, ev_kind = ev_unit[order], ev_broker[order], ev_kind[order]
    lo = np.searchsorted(ev_unit, unit, "left")
    cnt = np.searchsorted(ev_unit, unit, "right") - lo
    rep = np.repeat(np.arange(m), cnt)
    starts = np.cumsum(cnt) - cnt
    evi = np.repeat(lo, cnt) + (np.arange(len(rep)) - np.repeat(starts, cnt))
    b, k = ev_broker[evi], ev_kind[evi]
    ol, nl = old_leader[rep], new_leader[rep]
    in_old = _members(rep, b, old_isr)
    in_new = _members(rep, b, isr)
    cause = np.where(create, _CREATE, -1)
    broker = np.full(m, NULL, np.int64)

    def settle(rule: int, hit: np.ndarray, who: np.ndarray) -> None:
        rows = rep[hit]
        open_rows = cause[rows] == -1
        rows, who = rows[open_rows], who[hit][open_rows]
        rows_u, first = np.unique(rows, return_index=True)
        cause[rows_u] = rule
        broker[rows_u] = who[first]

    for rule in (_FENCE, _SHUTDOWN):
        leaving = (k == rule) & (
            ((ol != NULL) & (b == ol)) | (in_old & ~in_new) | ((nl == NO_LEADER) & in_new)
        )
        # the old leader first when several brokers qualify
        settle(rule, leaving & (b == ol), b)
        settle(rule, leaving, b)
    settle(_UNFENCE, (k == _UNFENCE) & (b == nl), b)
    config = np.zeros(m, bool)
    config[rep[k == _ADMIN]] = True
    open_ = cause == -1
    cause[open_ & config] = _ADMIN
    cause[open_ & ~config & sets_replicas] = _REASSIGN
    open_ = cause == -1
    same = open_ & (old_leader != NULL) & (old_leader == new_leader)
    cause[same] = _ALTER
    broker[same] = new_leader[same]
    cause[open_ & ~same & preferred] = _REBALANCE
    cause[cause == -1] = _ADMIN
    return cause, broker


# replay_file(ends=None)'s tables of the rows whose end lies in a later file.
OPEN_TABLES = {"partition_history": "partition_history_open", "offline_partitions": "offline_open"}


def replay_file(
    events: pa.Table,
    start: dict[Key, Delta],
    ends: dict[Key, tuple[Point | None, Point | None]] | None,
    names: dict[str, str],
) -> dict[str, pa.Table]:
    """partition_history, leader_elections and offline_partitions rows of what
    starts in this file, replayed from `start` (`starting_states`), with the
    intervals still open at its end closed by `ends` (`next_points`).

    `ends=None`: the later files are not known yet (the summaries of the files
    after this one need not exist: a file is replayed as soon as the ones
    before it are summarized). The rows whose end lies in a later file (at
    most a partition's last interval and offline window) then come apart, in
    `OPEN_TABLES`, with null ends, for `close_open` once every file is
    summarized."""
    c = carry(events, start)
    removed = _removals(events)
    same_next, _last = _group_bounds(c)
    nothing: tuple[Point | None, Point | None] = (None, None)
    later = ends or {}
    event_end = _points([removed.get(k[0]) or later.get(k, nothing)[0] for k in c.keys])
    online_end = _points([removed.get(k[0]) or later.get(k, nothing)[1] for k in c.keys])
    # per group: does its end come from a later file (no removal of its topic here)
    ends_later = np.array([k[0] not in removed for k in c.keys], bool)
    next_at, next_time = _next_in_file(c, same_next, event_end)
    visible = ~c.is_start & (next_at != c.at)
    topic_ids = pa.array(c.topics, pa.string())
    topic_names = pa.array([names.get(t) for t in c.topics], pa.string())
    pids = np.array([k[1] for k in c.keys], np.int64)

    def key_columns(rows: np.ndarray) -> dict[str, pa.Array]:
        t = pa.array(c.topic_code[rows])
        return {
            "topic": topic_names.take(t),
            "topic_id": topic_ids.take(t),
            "partition_id": _int_col(pids[c.group[rows]], "partition_id"),
        }

    out: dict[str, pa.Table] = {}
    h = np.flatnonzero(visible)
    cols = {
        **key_columns(h),
        "leader": _int_col(c.leader[h], "leader"),
        **{name: c.lists(name, h).cast(_LIST) for name in LIST_FIELDS},
        "leader_recovery_state": _int_col(c.lrs[h], "leader_recovery_state"),
        "leader_epoch": _int_col(c.leader_epoch[h], "leader_epoch"),
        "partition_epoch": _int_col(c.partition_epoch[h], "partition_epoch"),
        "start_offset": _int_col(c.at[h], "start_offset"),
        "end_offset": _int_col(next_at[h], "end_offset"),
        "start_time_ms": _int_col(c.at_time[h], "start_time_ms"),
        "end_time_ms": _int_col(next_time[h], "end_time_ms"),
    }
    out["partition_history"] = _table(cols, PARTITION_HISTORY_COLUMNS)
    if ends is None:
        # a group's last visible row ends where its partition's next record applies
        _split_open(out, "partition_history", ~same_next[h] & ends_later[c.group[h]])

    is_pr = c.code == PR
    e = np.flatnonzero(~c.is_start & (is_pr | c.sets_leader) & ~c.from_snapshot)
    old_isr = c.list_source["isr"].take(pa.array(c.old_isr_index[e]))
    isr = c.lists("isr", e)
    create = is_pr[e]
    new_leader = c.leader[e]
    old_leader = c.old_leader[e]
    new_in_old = _members(np.arange(len(e)), new_leader, old_isr)
    replicas = c.lists("replicas", e)
    has_first = pc.fill_null(pc.list_value_length(replicas), 0).to_numpy(zero_copy_only=False) > 0
    first = np.full(len(e), NULL, np.int64)
    if has_first.any():
        heads = pc.list_element(replicas.filter(pa.array(has_first)), 0)
        first[has_first] = heads.to_numpy(zero_copy_only=False)
    elected = (new_leader != NULL) & (new_leader >= 0)
    preferred = (
        (old_leader != NULL) & (old_leader >= 0) & elected & new_in_old & (new_leader == first)
    )
    cause, cause_broker = election_causes(
        c.unit[e],
        create,
        old_leader,
        new_leader,
        old_isr,
        isr,
        unit_kinds(events),
        c.sets_replicas[e],
        preferred,
    )
    new_in_new = _members(np.arange(len(e)), new_leader, isr)
    joined = c.sets_replicas[e] & new_in_new  # a reassignment step's ISR (history.py)
    etype = np.select(
        [~elected, create | new_in_old | joined, c.lrs[e] == RECOVERING],
        [_NOBODY, _ISR, _UNCLEAN],
        _ELR,
    )
    unclean = etype == _UNCLEAN
    cols = {
        "offset": _int_col(c.seq[e], "offset"),
        "applied_offset": _int_col(c.at[e], "applied_offset"),
        "append_time_ms": _int_col(c.at_time[e], "append_time_ms"),
        **key_columns(e),
        "old_leader": _int_col(old_leader, "old_leader"),
        "new_leader": _int_col(new_leader, "new_leader"),
        "unclean": pa.array(unclean),
        "election_type": ELECTION_TYPES.take(pa.array(etype)),
        "cause": CAUSES.take(pa.array(cause)),
        "cause_broker_id": _int_col(cause_broker, "cause_broker_id"),
        "leader_epoch": _int_col(c.leader_epoch[e], "leader_epoch"),
    }
    out["leader_elections"] = _table(cols, LEADER_ELECTIONS_COLUMNS)
    out["offline_partitions"], groups, inside = _offline(c, visible, online_end, key_columns)
    if ends is None:
        _split_open(out, "offline_partitions", ~inside & ends_later[groups])
    return out


def _split_open(out: dict[str, pa.Table], name: str, later: np.ndarray) -> None:
    table = out[name]
    mask = pa.array(later)
    out[OPEN_TABLES[name]] = table.filter(mask)
    out[name] = table.filter(pc.invert(mask))


def close_open(
    table: pa.Table, ends: dict[Key, tuple[Point | None, Point | None]], which: int
) -> pa.Table:
    """An OPEN_TABLES table of one file with its ends from `next_points` (the
    file's `ends`; `which`: 0 an interval's end, 1 an offline window's)."""
    keys = zip(
        table.column("topic_id").to_pylist(), table.column("partition_id").to_pylist(), strict=True
    )
    at, time_ms = _points([ends.get(k, (None, None))[which] for k in keys])
    i = table.schema.get_field_index("end_offset")
    table = table.set_column(i, "end_offset", _int_col(at, "end_offset"))
    i = table.schema.get_field_index("end_time_ms")
    return table.set_column(i, "end_time_ms", _int_col(time_ms, "end_time_ms"))


def _offline(
    c: Carried, visible: np.ndarray, online_end: tuple[np.ndarray, np.ndarray], key_columns: Any
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Maximal runs of visible leaderless states that start in this file; per
    row, its group and whether it ends in this file."""
    mp = np.flatnonzero(c.is_start | visible)
    grp = c.group[mp]
    offline = (c.leader[mp] != NULL) & (c.leader[mp] < 0)
    prev_same = np.zeros(len(mp), bool)
    prev_same[1:] = grp[1:] == grp[:-1]
    prev_offline = np.zeros(len(mp), bool)
    prev_offline[1:] = offline[:-1]
    prev_offline &= prev_same
    rec = ~c.is_start[mp]
    starts = np.flatnonzero(offline & ~prev_offline & rec)
    big = len(mp)
    online_at = np.where(~offline & rec, np.arange(len(mp)), big)
    next_online = np.minimum.accumulate(online_at[::-1])[::-1]
    q = next_online[starts]
    qc = np.minimum(q, big - 1)
    inside = (q < big) & (grp[qc] == grp[starts])
    rows = mp[starts]
    end_at = np.where(inside, c.at[mp[qc]], online_end[0][grp[starts]])
    end_time = np.where(inside, c.at_time[mp[qc]], online_end[1][grp[starts]])
    cols = {
        **key_columns(rows),
        "start_offset": _int_col(c.at[rows], "start_offset"),
        "end_offset": _int_col(end_at, "end_offset"),
        "start_time_ms": _int_col(c.at_time[rows], "start_time_ms"),
        "end_time_ms": _int_col(end_time, "end_time_ms"),
    }
    return _table(cols, OFFLINE_PARTITIONS_COLUMNS), grp[starts], inside


def _table(cols: dict[str, pa.Array], columns: tuple[str, ...]) -> pa.Table:
    return pa.Table.from_arrays([cols[x] for x in columns], schema=table_schema(columns))


# ----------------------------------------------------------------------------- brokers


def broker_history(events: list[BrokerEvent]) -> pa.Table:
    """broker_history from the broker records in the order they apply (a few per
    broker: plain Python on the driver)."""
    by_broker: dict[int, list[BrokerEvent]] = {}
    for ev in events:
        by_broker.setdefault(ev[3], []).append(ev)
    rows: list[tuple[Any, ...]] = []
    for bid in sorted(by_broker):
        fenced = shut = None
        reg: tuple[Any, Any] | None = None
        states = []
        for at, at_time, code, _b, epoch, f, s, inc, rack in by_broker[bid]:
            if f in (1, -1):
                fenced = f == 1
            if s in (1, -1):
                shut = s == 1
            if code == REGISTER:
                reg = (inc, rack)
            unreg = code == UNREGISTER
            state = (
                "UNREGISTERED"
                if unreg
                else "FENCED"
                if fenced
                else "CONTROLLED_SHUTDOWN"
                if shut
                else "UNFENCED"
            )
            interval_key = (
                epoch,
                state,
                None if unreg else fenced,
                None if unreg else shut,
                reg[0] if reg else None,
                reg[1] if reg else None,
            )
            if states and states[-1][1] == at:  # of several at one offset, the last is visible
                states.pop()
            states.append((interval_key, at, at_time))
        changes = []
        for s in states:
            if not changes or changes[-1][0] != s[0]:
                changes.append(s)
        for s, nxt in zip(changes, [*changes[1:], None], strict=True):
            rows.append(
                (
                    bid,
                    *s[0],
                    s[1],
                    None if nxt is None else nxt[1],
                    s[2],
                    None if nxt is None else nxt[2],
                )
            )
    columns = (
        "broker_id",
        *BROKER_INTERVAL_KEY,
        "start_offset",
        "end_offset",
        "start_time_ms",
        "end_time_ms",
    )
    schema = table_schema(columns)
    return pa.Table.from_arrays(
        [
            pa.array(list(col), f.type)
            for col, f in zip(zip(*rows, strict=True), schema, strict=True)
        ]
        if rows
        else [pa.array([], f.type) for f in schema],
        schema=schema,
    )
