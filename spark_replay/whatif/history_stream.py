"""leader_elections and offline_partitions of a log, built as the log is written.

A what-if scenario needs only these two tables of its counterfactual log.
Writing the log and replaying it (`spark_replay.one_process.write_tables`: the
vectorised decoder, then `segment_replay`'s rules over Arrow columns) cost
~4.5 CPU s per million records, about half of what the engine itself takes;
gathering the same columns from the engine's record objects costs as much
(benchmarks/whatif_bench.py --floor). `HistoryStream` takes the batches the
engine writes, record objects and all, and keeps only what the two tables
read: per partition its leader, ISR, replicas, recovery state and leader
epoch; per unit (a batch, or a transaction applied at its end) the broker and
config records that give an election its cause.

The rules are `spark_replay.history.leader_elections` and `offline_partitions`
(DESIGN 1.6), as `segment_replay` vectorises them, here one record at a time:
a second implementation, tested equal to `write_tables`' tables on the seeded
stories, the hand-made ones and the real clusters' logs under every setting
(tests/unit/whatif/test_history_stream.py), and at 1M records by
`whatif_bench.py --floor`. For a log from offset 0 (no starting snapshot),
which is what the engine writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from metadata_log.records import (
    FENCE_NO,
    FENCE_YES,
    LEADER_RECOVERY_UNCHANGED,
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECOVERING,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from spark_replay.segment_replay import table_schema
from spark_replay.tables import LEADER_ELECTIONS_COLUMNS, OFFLINE_PARTITIONS_COLUMNS

# a unit's events that can give an election its cause (history._unit_events)
FENCE, SHUTDOWN, UNFENCE, CONFIG = "FENCE", "CONTROLLED_SHUTDOWN", "UNFENCE", "CONFIG"
# a partition's state: the fields the two tables read, and its open offline window
LEADER, ISR, REPLICAS, RECOVERY, LEADER_EPOCH, OFFLINE = range(6)

Key = tuple[str, int]
Row = tuple[int, Any]  # (offset, record)


def _event(r: Any) -> tuple[int | None, str] | None:
    """(broker_id, kind) of a record that can cause an election, else None."""
    t = type(r)
    if t is FenceBrokerRecord:
        return r.id, FENCE
    if t is UnregisterBrokerRecord:
        return r.broker_id, FENCE
    if t is UnfenceBrokerRecord:
        return r.id, UNFENCE
    if t is BrokerRegistrationChangeRecord:
        if r.fenced == FENCE_YES:
            return r.broker_id, FENCE
        if r.in_controlled_shutdown == 1:
            return r.broker_id, SHUTDOWN
        if r.fenced == FENCE_NO:
            return r.broker_id, UNFENCE
        return None
    if t is ConfigRecord:
        return None, CONFIG
    return None


class _Unit:
    """A batch's or a transaction's elections, waiting for all of its events."""

    __slots__ = ("elections", "events")

    def __init__(self) -> None:
        # (offset, applied offset, time, key, old leader, new leader, old ISR,
        #  ISR, created, replicas changed, preferred, election type, leader epoch)
        self.elections: list[tuple[Any, ...]] = []
        self.events: list[tuple[int | None, str]] = []


class HistoryStream:
    """Fed every batch of a log in offset order (`batch`); `tables()` then
    gives its leader_elections and offline_partitions."""

    def __init__(self) -> None:
        # (topic id, partition) -> [leader, isr, replicas, recovery, leader epoch,
        # the open offline window's (offset, time) or None]
        self._parts: dict[Key, list[Any]] = {}
        self._by_topic: dict[str, list[Key]] = {}
        self._names: dict[str, str] = {}
        self._txn: list[Row] | None = None  # the open transaction's rows
        self._elections: list[tuple[Any, ...]] = []
        self._offline: list[tuple[Any, ...]] = []

    def batch(
        self, base_offset: int, time_ms: int, records: Sequence[Any], control: bool = False
    ) -> None:
        if control:
            return
        if self._txn is None and len(records) == 1:
            r = records[0]
            if (
                type(r) is PartitionChangeRecord
                and r.leader == NO_LEADER_CHANGE
                and r.replicas is None
            ):
                # nine batches in ten: a leader's ISR change, alone (no election,
                # no leader moves, so no offline window opens or closes)
                st = self._parts.get((r.topic_id, r.partition_id))
                if st is not None:
                    if r.isr is not None:
                        st[ISR] = r.isr
                    if r.leader_recovery_state != LEADER_RECOVERY_UNCHANGED:
                        st[RECOVERY] = r.leader_recovery_state
                    return
        # this batch's rows outside any transaction: one unit, however a
        # transaction's end splits them (its rows apply in between)
        plain: list[Row] = []
        unit = _Unit()
        offset = base_offset
        for r in records:
            t = type(r)
            if t is BeginTransactionRecord:
                if self._txn is not None:
                    raise ValueError(f"offset {offset}: a transaction begun inside one")
                self._txn = []
            elif t is EndTransactionRecord or t is AbortTransactionRecord:
                rows, self._txn = self._txn, None
                if rows and t is EndTransactionRecord:
                    # the rows before it in this batch apply first, at their offsets
                    self._rows(plain, None, time_ms, unit)
                    plain = []
                    txn = _Unit()
                    self._rows(rows, offset, time_ms, txn)
                    self._settle(txn)
            elif self._txn is not None:
                self._txn.append((offset, r))
            else:
                plain.append((offset, r))
            offset += 1
        self._rows(plain, None, time_ms, unit)
        self._settle(unit)

    def _rows(self, rows: list[Row], applied_at: int | None, time_ms: int, unit: _Unit) -> None:
        """Rows of one unit, in offset order: a batch's (each applies at its own
        offset) or a transaction's (all at `applied_at`, its end)."""
        if not rows:
            return
        last: dict[Key, int] = {}
        removed: set[str] = set()
        if applied_at is not None:
            # of several rows applying at one offset only the last is visible,
            # and none of a topic removed there
            for i, (_, r) in enumerate(rows):
                if type(r) is PartitionRecord or type(r) is PartitionChangeRecord:
                    last[(r.topic_id, r.partition_id)] = i
                elif type(r) is RemoveTopicRecord:
                    removed.add(r.topic_id)
        for i, (offset, r) in enumerate(rows):
            at = offset if applied_at is None else applied_at
            t = type(r)
            if t is PartitionChangeRecord or t is PartitionRecord:
                key = (r.topic_id, r.partition_id)
                visible = applied_at is None or (last[key] == i and r.topic_id not in removed)
                self._partition(offset, at, time_ms, key, r, t is PartitionRecord, visible, unit)
            elif t is TopicRecord:
                self._names[r.topic_id] = r.name
            elif t is RemoveTopicRecord:
                for key in self._by_topic.pop(r.topic_id, ()):
                    st = self._parts.pop(key)
                    if st[OFFLINE] is not None:
                        self._offline.append((key, *st[OFFLINE], at, time_ms))
            else:
                ev = _event(r)
                if ev is not None:
                    unit.events.append(ev)

    def _partition(
        self,
        offset: int,
        at: int,
        time_ms: int,
        key: Key,
        r: Any,
        create: bool,
        visible: bool,
        unit: _Unit,
    ) -> None:
        st = self._parts.get(key)
        if st is None:
            st = self._parts[key] = [None, None, None, None, None, None]
            self._by_topic.setdefault(key[0], []).append(key)
        old_leader, old_isr = st[LEADER], st[ISR]
        if create:
            st[LEADER], st[ISR], st[REPLICAS] = r.leader, r.isr, r.replicas
            st[RECOVERY], st[LEADER_EPOCH] = r.leader_recovery_state, r.leader_epoch
            sets_leader = True
        else:
            sets_leader = r.leader != NO_LEADER_CHANGE
            if sets_leader:
                st[LEADER] = r.leader
                if st[LEADER_EPOCH] is not None:
                    st[LEADER_EPOCH] += 1
            if r.isr is not None:
                st[ISR] = r.isr
            if r.replicas is not None:
                st[REPLICAS] = r.replicas
            if r.leader_recovery_state != LEADER_RECOVERY_UNCHANGED:
                st[RECOVERY] = r.leader_recovery_state
        leader = st[LEADER]
        if sets_leader:
            unit.elections.append(
                _election(offset, at, time_ms, key, r, create, st, old_leader, old_isr)
            )
        if visible:
            offline = leader is not None and leader < 0
            if offline and st[OFFLINE] is None:
                st[OFFLINE] = (at, time_ms)
            elif not offline and st[OFFLINE] is not None:
                self._offline.append((key, *st[OFFLINE], at, time_ms))
                st[OFFLINE] = None

    def _settle(self, unit: _Unit) -> None:
        """The causes of the unit's elections, from all of the unit's events."""
        events = unit.events
        for e in unit.elections:
            (offset, at, time_ms, key, ol, nl, old_isr, isr, create, sets_rep, pref, etype, le) = e
            cause, broker = _cause(events, ol, nl, old_isr, isr, create, sets_rep, pref)
            self._elections.append(
                (offset, at, time_ms, key, ol, nl, etype == "UNCLEAN", etype, cause, broker, le)
            )

    def tables(self) -> dict[str, pa.Table]:
        """The two tables; a window still open at the end has null ends."""
        names = self._names
        open_windows = [
            (key, *st[OFFLINE], None, None)
            for key, st in self._parts.items()
            if st[OFFLINE] is not None
        ]
        el = self._elections
        # column by column from the stored tuples: zipping rows built in column
        # order allocated twice as much (1M records: 0.15 -> 0.3-0.6 s)
        elections = {
            "offset": [e[0] for e in el],
            "applied_offset": [e[1] for e in el],
            "append_time_ms": [e[2] for e in el],
            "topic": [names.get(e[3][0]) for e in el],
            "topic_id": [e[3][0] for e in el],
            "partition_id": [e[3][1] for e in el],
            "old_leader": [e[4] for e in el],
            "new_leader": [e[5] for e in el],
            "unclean": [e[6] for e in el],
            "election_type": [e[7] for e in el],
            "cause": [e[8] for e in el],
            "cause_broker_id": [e[9] for e in el],
            "leader_epoch": [e[10] for e in el],
        }
        off = sorted(self._offline + open_windows, key=lambda w: (w[1], w[0]))
        offline = {
            "topic": [names.get(w[0][0]) for w in off],
            "topic_id": [w[0][0] for w in off],
            "partition_id": [w[0][1] for w in off],
            "start_offset": [w[1] for w in off],
            "end_offset": [w[3] for w in off],
            "start_time_ms": [w[2] for w in off],
            "end_time_ms": [w[4] for w in off],
        }
        return {
            "leader_elections": _table(elections, LEADER_ELECTIONS_COLUMNS),
            "offline_partitions": _table(offline, OFFLINE_PARTITIONS_COLUMNS),
        }


def _election(
    offset: int,
    at: int,
    time_ms: int,
    key: Key,
    r: Any,
    create: bool,
    st: list[Any],
    old_leader: int | None,
    old_isr: tuple[int, ...] | None,
) -> tuple[Any, ...]:
    """An election's row but its cause, which the unit's events decide."""
    leader, isr, replicas = st[LEADER], st[ISR] or (), st[REPLICAS]
    old_isr = old_isr or ()
    sets_replicas = not create and r.replicas is not None
    elected = leader is not None and leader >= 0
    in_old = elected and leader in old_isr
    preferred = (
        old_leader is not None
        and old_leader >= 0
        and in_old
        and bool(replicas)
        and leader == replicas[0]
    )
    if not elected:
        etype = None
    elif create or in_old or (sets_replicas and leader in isr):
        etype = "ISR"
    elif st[RECOVERY] == RECOVERING:
        etype = "UNCLEAN"
    else:
        etype = "ELR"
    return (
        offset,
        at,
        time_ms,
        key,
        old_leader,
        leader,
        old_isr,
        isr,
        create,
        sets_replicas,
        preferred,
        etype,
        st[LEADER_EPOCH],
    )


def log_tables(batches: Iterable[Any]) -> dict[str, pa.Table]:
    """The two tables of a whole log's batches, as read back (each with
    `base_offset`, `append_time_ms`, `records` and `control`)."""
    stream = HistoryStream()
    for b in batches:
        stream.batch(b.base_offset, b.append_time_ms, b.records, b.control)
    return stream.tables()


def _cause(
    events: list[tuple[int | None, str]],
    old_leader: int | None,
    new_leader: int | None,
    old_isr: tuple[int, ...],
    isr: tuple[int, ...],
    create: bool,
    sets_replicas: bool,
    preferred: bool,
) -> tuple[str, int | None]:
    """history.leader_elections' cause rule, first match wins."""
    if create:
        return "CREATE", None
    for rule in (FENCE, SHUTDOWN):
        hits = [
            b
            for b, kind in events
            if kind == rule
            and (
                (old_leader is not None and b == old_leader)
                or (b in old_isr and b not in isr)
                # a leaderless partition's epoch bump for an ISR member it keeps
                or (new_leader == NO_LEADER and b in isr)
            )
        ]
        if hits:
            # the old leader first when several brokers qualify
            return rule, old_leader if old_leader in hits else hits[0]
    if new_leader is not None and any(k == UNFENCE and b == new_leader for b, k in events):
        return UNFENCE, new_leader
    if any(k == CONFIG for _, k in events):
        return "ADMIN", None
    if sets_replicas:
        return "REASSIGNMENT", None
    if old_leader is not None and old_leader == new_leader:
        return "ALTER_PARTITION", new_leader
    if preferred:
        return "REBALANCE", None
    return "ADMIN", None


def _table(cols: dict[str, list[Any]], columns: tuple[str, ...]) -> pa.Table:
    schema = table_schema(columns)
    return pa.Table.from_arrays(
        [pa.array(cols[c], type=schema.field(c).type) for c in columns], schema=schema
    )
