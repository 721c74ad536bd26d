"""The cluster-history tables of DESIGN 1.6, as DataFrame transforms over the records.

Input: the records DataFrame of `spark_replay.datasource` (typed columns included).
Output: `broker_history`, `partition_history`, `leader_elections`,
`offline_partitions`, and the as-of state. Offsets are log offsets; an interval is
``[start_offset, end_offset)`` with ``end_offset`` null while it is still open.

How replay semantics map onto DataFrame operations:

- **Where a record takes effect.** A record applies at its own offset, except in a
  metadata transaction (KIP-868), whose records apply together at the
  EndTransactionRecord's offset (and never, if aborted or unfinished). Each row
  gets ``at_offset`` (where it applies) and ``seq`` (its order inside that point).
  The transaction markers are few, so they are collected to the driver and joined
  back by offset bucket (a broadcast equi-join, not a range join).
- **A log that starts with a snapshot.** When the segments do not reach back to
  offset 0, the earliest snapshot that the segments continue from supplies the
  starting state: its records apply at ``snapshot end offset - 1`` (the offset the
  snapshot's state is as of) and at its SnapshotHeader's time; segment records
  below the snapshot's end are dropped. A complete log ignores snapshots.
- **Carry-forward.** One window per broker / per partition, ordered by
  (at_offset, seq), with an explicit ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT
  ROW`` frame: ``last(x, ignorenulls)`` carries what a record leaves unchanged.
  PartitionChangeRecord's "unchanged" sentinels (leader -2, leader_recovery_state
  -1, null lists) are mapped to null first. Epochs are computed as Kafka's replay
  does, never inferred from value changes: partition_epoch = the PartitionRecord's
  + the number of change records since; leader_epoch = the PartitionRecord's + the
  number of change records whose leader is not -2 (even the same broker).
- **Intervals.** Several rows at one at_offset (a transaction, a snapshot) leave
  only the last state visible: earlier ones are dropped. Then each row starts an
  interval that ends where the next row of the same key starts (``lead``), so the
  intervals of a key tile its lifetime with no gap or overlap. A RemoveTopicRecord
  ends its partitions' last interval; an UnregisterBrokerRecord starts an
  UNREGISTERED interval.

Cost: one shuffle and one window pass for the partition states (every carry,
epoch count, `lead` for the interval end and "before" frame for the previous
leader and ISR share one partitioning and ordering, differing only in frame);
partition_history and leader_elections are filters and broadcast joins of those
states, offline_partitions a window over the few rows that can change
leaderlessness. broker_history is one small window of its own.

Table conventions: `leader` -1 means no leader (as in the image and the HTTP
API). leader_elections has the record's own `offset` and the `applied_offset`
where it took effect (they differ inside a transaction); `new_leader` -1 is a
record that left the partition without a leader. Broker intervals carry the
image's `fenced` and `in_controlled_shutdown` flags besides `state` (a broker
fenced after a controlled shutdown is FENCED with in_controlled_shutdown true).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from metadata_log.errors import MetadataLogError
from metadata_log.records import LEADER_RECOVERY_UNCHANGED, NO_LEADER, NO_LEADER_CHANGE
from spark_replay.tables import (
    BROKER_AS_OF_COLUMNS,
    BROKER_INTERVAL_KEY,
    BROKER_STATE_KEYS,
    BROKER_TYPES,
    OFFLINE_PARTITIONS_COLUMNS,
    PARTITION_AS_OF_COLUMNS,
    PARTITION_STATE_KEYS,
    PARTITION_STATE_VALUES,
    PARTITION_TYPES,
    STATE_TYPES,
    TXN_TYPES,
)

# Transactions are joined back by offset bucket: a transaction spans few buckets.
TXN_BUCKET = 4096

RECOVERING = 1  # leader_recovery_state after an unclean election (KIP-704)


class HistoryError(MetadataLogError):
    """The log cannot yield a history (no starting state, offset out of range)."""


@dataclass
class Transaction:
    begin: int
    end: int  # offset of the End/Abort record; the log's end offset if unfinished
    applied: bool  # ended by EndTransactionRecord
    end_time_ms: int


@dataclass
class LogInfo:
    """What the driver learns from a few small queries before building tables."""

    first_offset: int  # first offset the history covers (snapshot end - 1, or first record)
    last_offset: int  # last offset read
    first_time_ms: int
    last_time_ms: int
    record_count: int
    snapshot_end_offset: int | None = None  # the snapshot the history starts from
    snapshot_time_ms: int | None = None
    segment_first_offset: int | None = None
    transactions: list[Transaction] = field(default_factory=list)
    # {file, position, bytes}: the newest segment ended in an incomplete batch,
    # read as the end of the data (a cut-short append, or damage: it is said)
    torn_tail: dict[str, Any] | None = None
    # {file, offset, epoch, before}: the first record whose leader epoch is below
    # an earlier one (Raft's epochs never go back; Kafka's CRC does not cover them)
    epoch_back: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        torn = {"torn_tail": self.torn_tail} if self.torn_tail else {}
        back = {"epoch_back": self.epoch_back} if self.epoch_back else {}
        return {
            **torn,
            **back,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "first_time_ms": self.first_time_ms,
            "last_time_ms": self.last_time_ms,
            "record_count": self.record_count,
            "snapshot_end_offset": self.snapshot_end_offset,
            "segment_first_offset": self.segment_first_offset,
            "transactions": len(self.transactions),
            "aborted_transactions": sum(1 for t in self.transactions if not t.applied),
        }


def _rows_frame(*keys: str) -> Any:
    """Per-key window ordered by where records apply, with an explicit ROWS frame."""
    return (
        Window.partitionBy(*keys)
        .orderBy("at_offset", "seq")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )


def _ordered(*keys: str) -> Any:
    """Same order, no frame: for lag/lead."""
    return Window.partitionBy(*keys).orderBy("at_offset", "seq")


def _carry(col: Column, w: Any) -> Column:
    return F.last(col, ignorenulls=True).over(w)


# ----------------------------------------------------------------------------- log info


def log_info(records: DataFrame) -> LogInfo:
    """Offsets, times, the starting snapshot and the transactions (a few small queries).

    The CLI job does not need these queries: `info_from_stats` gets the same from
    what the records stage gathered while decoding.
    """
    seg = records.filter(F.col("source") == "segment")
    row = seg.agg(
        F.min("offset").alias("lo"),
        F.max("offset").alias("hi"),
        F.min("append_time_ms").alias("t0"),
        F.max("append_time_ms").alias("t1"),
        F.count(F.lit(1)).alias("n"),
    ).first()
    headers = (
        records.filter((F.col("source") == "snapshot") & (F.col("type") == "SnapshotHeader"))
        .select("snapshot_end_offset", "fields")
        .collect()
    )
    snaps = [(int(h["snapshot_end_offset"]), h["fields"]) for h in headers]
    markers: list[tuple[int, str, int]] = []
    if row["lo"] is not None:
        markers = [
            (m["offset"], m["type"], m["append_time_ms"])
            for m in seg.filter(F.col("type").isin(*TXN_TYPES))
            .select("offset", "type", "append_time_ms")
            .collect()
        ]
    return _make_info(row["lo"], row["hi"], row["t0"], row["t1"], row["n"], snaps, markers)


def iso_time(ms: int | None) -> str | None:
    """An append time (ms since the epoch) as ISO 8601 UTC, to the millisecond."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def torn_tail_text(torn: dict[str, Any]) -> str:
    """One sentence for a torn tail (LogInfo.torn_tail): stderr and the report."""
    return (
        f"{torn['file']} ends in an incomplete batch at file position {torn['position']} "
        f"({torn['bytes']:,} bytes not read): the history stops before it. A cut-short "
        "last append (a crash, a live log) looks like this; many bytes may mean damage"
    )


def epoch_back_text(back: dict[str, Any]) -> str:
    """One sentence for LogInfo.epoch_back: stderr and the report."""
    return (
        f"{back['file']}: the record at offset {back['offset']} has leader epoch "
        f"{back['epoch']}, below the {back['before']} before it: a log's epochs never go "
        "back, so a batch's epoch field is damaged (Kafka's batch CRC does not cover it); "
        "the tables' epochs may be wrong from there"
    )


def _epoch_back(segs: list[Any]) -> dict[str, Any] | None:
    """The first step back of the leader epoch along the segments (offset order)."""
    top: int | None = None
    for s in sorted(segs, key=lambda s: s.first_offset):
        if top is not None and s.first_epoch is not None and s.first_epoch < top:
            return {"file": s.path, "offset": s.first_offset, "epoch": s.first_epoch, "before": top}
        if s.epoch_back:
            offset, epoch, before = s.epoch_back
            return {"file": s.path, "offset": offset, "epoch": epoch, "before": before}
        if s.max_epoch is not None:
            top = s.max_epoch if top is None else max(top, s.max_epoch)
    return None


def info_from_stats(stats: list[Any]) -> LogInfo:
    """The same LogInfo from the records stage's per-file `FileStats` (no Spark query)."""
    segs = [s for s in stats if s.source == "segment" and s.records]
    lo = min((s.first_offset for s in segs), default=None)
    hi = max((s.last_offset for s in segs), default=None)
    t0 = min((s.first_time_ms for s in segs), default=None)
    t1 = max((s.last_time_ms for s in segs), default=None)
    n = sum(s.records for s in segs)
    snaps = [
        (int(s.snapshot_end_offset), m[4])
        for s in stats
        if s.source == "snapshot"
        for m in s.markers
        if m[1] == "SnapshotHeader"
    ]
    markers = [(m[0], m[1], m[2]) for s in segs for m in s.markers if m[1] in TXN_TYPES]
    info = _make_info(lo, hi, t0, t1, n, snaps, markers)
    for s in stats:
        if s.source == "snapshot" and s.snapshot_end_offset == info.snapshot_end_offset:
            _check_whole_snapshot(s)
    info.epoch_back = _epoch_back(segs)
    for s in stats:
        if s.torn_tail:
            info.torn_tail = {"file": s.path, "position": s.torn_tail[0], "bytes": s.torn_tail[1]}
    return info


def _check_whole_snapshot(s: Any) -> None:
    """The snapshot the history starts from must be whole: it is written to a
    temporary file and renamed once its SnapshotFooter is in, so one without its
    footer is damage (cut at a batch boundary), and the state it gives would be
    partial. (A snapshot torn inside a batch is already the decoder's error.)"""
    if "SnapshotFooter" not in s.by_type:
        raise HistoryError(
            f"{s.path}: the snapshot the history starts from is not whole: it has no "
            "SnapshotFooter; move it aside to start from an older snapshot or from the log"
        )


def _make_info(
    lo: int | None,
    hi: int | None,
    t0: int | None,
    t1: int | None,
    n: int,
    snapshot_headers: list[tuple[int, str]],
    txn_markers: list[tuple[int, str, int]],
) -> LogInfo:
    """LogInfo from the segments' offset and time range, the snapshots' headers
    (end offset, SnapshotHeader fields JSON) and the transaction markers
    (offset, type, append time)."""
    snaps = sorted(
        (end, int(json.loads(fields)["last_contained_log_time"]))
        for end, fields in snapshot_headers
    )
    snapshot: tuple[int, int] | None = None
    if lo is None:
        if not snaps:
            raise HistoryError("the log holds no records")
        snapshot = snaps[-1]  # only snapshots: the newest is the whole story
    elif lo > 0:
        usable = [s for s in snaps if lo <= s[0] <= hi + 1]  # type: ignore[operator]
        if not usable:
            raise HistoryError(
                f"the log starts at offset {lo} and no snapshot covers the offsets before it"
            )
        snapshot = usable[0]  # the earliest: the longest history
    txns: list[Transaction] = []
    if lo is not None:
        open_begin: int | None = None
        for offset, kind, ts in sorted(txn_markers):
            if kind == "BeginTransactionRecord":
                open_begin = offset
            elif open_begin is not None:
                txns.append(Transaction(open_begin, offset, kind == "EndTransactionRecord", ts))
                open_begin = None
        if open_begin is not None:  # unfinished at the end of the log: not applied (yet)
            # (end is exclusive in the join: hi + 1 keeps the last record out too)
            txns.append(Transaction(open_begin, hi + 1, False, t1))  # type: ignore[operator,arg-type]
    if snapshot is not None:
        first = snapshot[0] - 1
        first_time = snapshot[1]
    else:
        first, first_time = lo, t0
    return LogInfo(
        first_offset=first,  # type: ignore[arg-type]
        last_offset=hi if hi is not None else snapshot[0] - 1,  # type: ignore[index]
        first_time_ms=first_time,  # type: ignore[arg-type]
        last_time_ms=t1 if t1 is not None else first_time,  # type: ignore[arg-type]
        record_count=n,
        snapshot_end_offset=None if snapshot is None else snapshot[0],
        snapshot_time_ms=None if snapshot is None else snapshot[1],
        segment_first_offset=lo,
        transactions=txns,
    )


# ----------------------------------------------------------------------------- events


def events(spark: SparkSession, records: DataFrame, info: LogInfo) -> DataFrame:
    """State-changing records with at_offset, seq, at_time and unit (batch or transaction)."""
    state = records.filter(F.col("type").isin(*STATE_TYPES))
    seg = state.filter(F.col("source") == "segment")
    if info.snapshot_end_offset is not None:
        seg = seg.filter(F.col("offset") >= info.snapshot_end_offset)
        snap = state.filter(
            (F.col("source") == "snapshot")
            & (F.col("snapshot_end_offset") == info.snapshot_end_offset)
        ).select(
            "*",
            F.lit(info.snapshot_end_offset - 1).cast("long").alias("at_offset"),
            F.col("offset").alias("seq"),
            F.lit(info.snapshot_time_ms).cast("long").alias("at_time"),
            F.lit(-1).cast("long").alias("unit"),
        )
    else:
        snap = None
    if info.transactions:
        rows = []
        for t in info.transactions:
            for b in range(t.begin // TXN_BUCKET, t.end // TXN_BUCKET + 1):
                rows.append((b, t.begin, t.end, t.end if t.applied else None, t.end_time_ms))
        txn = spark.createDataFrame(
            rows, "t_bucket long, t_begin long, t_end long, t_apply long, t_time long"
        )
        seg = (
            seg.withColumn("bucket", (F.col("offset") / TXN_BUCKET).cast("long"))
            .join(
                F.broadcast(txn),
                on=[
                    F.col("bucket") == F.col("t_bucket"),
                    F.col("offset") > F.col("t_begin"),
                    F.col("offset") < F.col("t_end"),
                ],
                how="left",
            )
            # in a transaction that never applied: never happened
            .filter(F.col("t_begin").isNull() | F.col("t_apply").isNotNull())
        )
        at_offset = F.coalesce(F.col("t_apply"), F.col("offset"))
        at_time = F.coalesce(F.col("t_time"), F.col("append_time_ms"))
        unit = F.coalesce(F.col("t_apply"), F.col("base_offset"))
        seg = seg.select(
            *[F.col(c) for c in state.columns],
            at_offset.alias("at_offset"),
            F.col("offset").alias("seq"),
            at_time.alias("at_time"),
            unit.alias("unit"),
        )
    else:
        seg = seg.select(
            "*",
            F.col("offset").alias("at_offset"),
            F.col("offset").alias("seq"),
            F.col("append_time_ms").alias("at_time"),
            F.col("base_offset").alias("unit"),
        )
    return seg if snap is None else snap.unionByName(seg)


# ----------------------------------------------------------------------------- brokers


def broker_history(ev: DataFrame) -> DataFrame:
    """Intervals per broker in one state: FENCED, UNFENCED, CONTROLLED_SHUTDOWN, UNREGISTERED."""
    b = ev.filter(F.col("type").isin(*BROKER_TYPES))
    w = _rows_frame("broker_id")
    o = _ordered("broker_id")
    is_reg = F.col("type") == "RegisterBrokerRecord"
    fenced_v = F.when(F.col("fenced") == 1, True).when(F.col("fenced") == -1, False)
    shut_v = F.when(F.col("shutdown") == 1, True).when(F.col("shutdown") == -1, False)
    # rack may be null in a registration: carry the registration, not the rack
    reg = F.when(is_reg, F.struct(F.col("incarnation_id"), F.col("rack")))
    carried = b.select(
        "broker_id",
        "broker_epoch",
        "at_offset",
        "seq",
        "at_time",
        (F.col("type") == "UnregisterBrokerRecord").alias("unregistered"),
        _carry(fenced_v, w).alias("fenced"),
        _carry(shut_v, w).alias("in_controlled_shutdown"),
        _carry(reg, w).alias("reg"),
        F.lead("at_offset").over(o).alias("next_at"),
    )
    state = (
        F.when(F.col("unregistered"), "UNREGISTERED")
        .when(F.col("fenced"), "FENCED")
        .when(F.col("in_controlled_shutdown"), "CONTROLLED_SHUTDOWN")
        .otherwise("UNFENCED")
    )
    visible = carried.filter(
        F.col("next_at").isNull() | (F.col("next_at") != F.col("at_offset"))
    ).select(
        "broker_id",
        "broker_epoch",
        state.alias("state"),
        F.when(~F.col("unregistered"), F.col("fenced")).alias("fenced"),
        F.when(~F.col("unregistered"), F.col("in_controlled_shutdown")).alias(
            "in_controlled_shutdown"
        ),
        F.col("reg.incarnation_id").alias("incarnation_id"),
        F.col("reg.rack").alias("rack"),
        "at_offset",
        "seq",
        "at_time",
    )
    key = F.struct(*BROKER_INTERVAL_KEY)
    changes = visible.withColumn("prev", F.lag(key).over(o)).filter(~F.col("prev").eqNullSafe(key))
    return changes.select(
        "broker_id",
        *BROKER_INTERVAL_KEY,
        F.col("at_offset").alias("start_offset"),
        F.lead("at_offset").over(o).alias("end_offset"),
        F.col("at_time").alias("start_time_ms"),
        F.lead("at_time").over(o).alias("end_time_ms"),
    )


# ----------------------------------------------------------------------------- partitions


def topic_names(ev: DataFrame) -> DataFrame:
    return ev.filter(F.col("type") == "TopicRecord").select(
        "topic_id", F.col("topic_name").alias("topic")
    )


KIND_CREATE, KIND_CHANGE, KIND_REMOVE = 0, 1, 2


def _partition_rows(ev: DataFrame, other: DataFrame | None = None) -> DataFrame:
    """PartitionRecord/PartitionChangeRecord rows plus one removal row per partition
    of a deleted topic (RemoveTopicRecord names only the topic).

    Only narrow columns go into the shuffle: the record type becomes a small `kind`.
    `other`: the events other than partition records (see `other_events`), if at hand.
    """
    parts = ev.filter(F.col("type").isin(*PARTITION_TYPES))
    kind = F.when(F.col("type") == "PartitionRecord", KIND_CREATE).otherwise(KIND_CHANGE)
    removals = (
        (ev if other is None else other)
        .filter(F.col("type") == "RemoveTopicRecord")
        .select("topic_id", "at_offset", "seq", "at_time", "unit")
    )
    known = parts.filter(F.col("type") == "PartitionRecord").select("topic_id", "partition_id")
    removed = known.join(F.broadcast(removals), "topic_id").select(
        "topic_id",
        "partition_id",
        "at_offset",
        "seq",
        "at_time",
        "unit",
        F.lit(KIND_REMOVE).cast("byte").alias("kind"),
        F.lit(False).alias("from_snapshot"),
    )
    return parts.select(
        "topic_id",
        "partition_id",
        "at_offset",
        "seq",
        "at_time",
        "unit",
        kind.cast("byte").alias("kind"),
        (F.col("source") == "snapshot").alias("from_snapshot"),
        *PARTITION_STATE_VALUES,
    ).unionByName(removed, allowMissingColumns=True)


def partition_states(ev: DataFrame, other: DataFrame | None = None) -> DataFrame:
    """Every partition record with the state after it (carried forward), where the
    next record of the partition applies (next_at: the end of this state when the
    row is visible), and the leader and ISR before it. One shuffle, one window pass:
    every expression shares the partitioning and ordering; they differ only in frame.
    """
    rows = _partition_rows(ev, other)
    key = ("topic_id", "partition_id")
    w = _rows_frame(*key)
    before = (
        Window.partitionBy(*key)
        .orderBy("at_offset", "seq")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    o = _ordered(*key)
    is_pr = F.col("kind") == KIND_CREATE
    is_pcr = F.col("kind") == KIND_CHANGE
    sets_leader = is_pcr & (F.col("leader") != NO_LEADER_CHANGE)
    leader_v = F.when(is_pr | sets_leader, F.col("leader"))  # -2 -> null before last()
    lrs_v = F.when(
        is_pr | (F.col("leader_recovery_state") != LEADER_RECOVERY_UNCHANGED),
        F.col("leader_recovery_state"),
    )
    # Kafka's replay: each change record bumps partition_epoch, each that sets the
    # leader (even to the same broker) bumps leader_epoch. Assumes one
    # PartitionRecord per (topic id, partition id): topic ids are never reused.
    changes = F.sum(F.when(is_pcr, 1).otherwise(0)).over(w)
    leader_changes = F.sum(F.when(sets_leader, 1).otherwise(0)).over(w)
    return rows.select(
        *key,
        "at_offset",
        "seq",
        "at_time",
        "unit",
        "kind",
        (F.col("kind") == KIND_REMOVE).alias("removed"),
        "from_snapshot",
        sets_leader.alias("sets_leader"),
        # the record changes the replica set: a reassignment's step (KIP-455)
        (is_pcr & F.col("replicas").isNotNull()).alias("sets_replicas"),
        _carry(leader_v, w).alias("leader"),
        _carry(F.col("isr"), w).alias("isr"),
        _carry(F.col("replicas"), w).alias("replicas"),
        _carry(F.col("removing_replicas"), w).alias("removing_replicas"),
        _carry(F.col("adding_replicas"), w).alias("adding_replicas"),
        _carry(F.col("elr"), w).alias("elr"),
        _carry(F.col("last_known_elr"), w).alias("last_known_elr"),
        _carry(lrs_v, w).alias("leader_recovery_state"),
        (_carry(F.col("leader_epoch"), w) + leader_changes).cast("int").alias("leader_epoch"),
        (_carry(F.col("partition_epoch"), w) + changes).cast("int").alias("partition_epoch"),
        F.lead("at_offset").over(o).alias("next_at"),
        F.lead("at_time").over(o).alias("next_time"),
        F.lag("at_offset").over(o).alias("prev_at"),
        _carry(leader_v, before).alias("old_leader"),
        _carry(F.col("isr"), before).alias("old_isr"),
    )


def _visible(states: DataFrame) -> DataFrame:
    """Rows whose state is observable: the last of those applying at one offset."""
    return states.filter(F.col("next_at").isNull() | (F.col("next_at") != F.col("at_offset")))


def partition_history(states: DataFrame, names: DataFrame) -> DataFrame:
    """Intervals per partition with one (leader, isr, replicas, epochs).

    A visible row's state lasts until the partition's next record applies, so
    the interval end is `next_at` from the same window pass: no second window.
    """
    intervals = _visible(states).filter(~F.col("removed"))
    return intervals.join(F.broadcast(names), "topic_id", "left").select(
        *PARTITION_STATE_KEYS,
        F.col("at_offset").alias("start_offset"),
        F.col("next_at").alias("end_offset"),
        F.col("at_time").alias("start_time_ms"),
        F.col("next_time").alias("end_time_ms"),
    )


def offline_partitions(states: DataFrame, names: DataFrame) -> DataFrame:
    """Maximal intervals with no leader (leader -1), per partition.

    Islands over the visible states, computed on the few rows that can start or
    end one: a partition's first row, removals, rows whose leaderlessness differs
    from the leader before them (`old_leader`), and the visible row of a group of
    records applying at one offset (where `old_leader` is an intermediate state).
    Every other visible row has a single-row group whose predecessor is visible and
    in the same (on/offline) condition, so dropping it changes no island; the
    window then runs over thousands of rows instead of every change record.
    """
    key = ("topic_id", "partition_id")
    o = _ordered(*key)
    offline = ~F.col("removed") & (F.col("leader") < 0)
    was_offline = F.col("old_leader") < 0
    candidates = _visible(states).filter(
        F.col("removed")
        | F.col("old_leader").isNull()
        | (offline != was_offline)
        | (F.col("prev_at") == F.col("at_offset"))
    )
    visible = candidates.select(
        *key, "at_offset", "seq", "at_time", "removed", offline.alias("offline")
    )
    edges = visible.withColumn("prev", F.lag("offline").over(o)).filter(
        F.col("removed") | F.col("prev").isNull() | (F.col("prev") != F.col("offline"))
    )
    spans = edges.select(
        *key,
        "offline",
        F.col("at_offset").alias("start_offset"),
        F.lead("at_offset").over(o).alias("end_offset"),
        F.col("at_time").alias("start_time_ms"),
        F.lead("at_time").over(o).alias("end_time_ms"),
    ).filter(F.col("offline"))
    return spans.join(F.broadcast(names), "topic_id", "left").select(*OFFLINE_PARTITIONS_COLUMNS)


# ----------------------------------------------------------------------------- elections


def _unit_events(ev: DataFrame) -> DataFrame:
    """Per batch (or transaction): the broker state changes and admin records in it."""
    kind = (
        F.when(
            (F.col("type") == "FenceBrokerRecord")
            | ((F.col("type") == "BrokerRegistrationChangeRecord") & (F.col("fenced") == 1)),
            "FENCE",
        )
        .when(F.col("type") == "UnregisterBrokerRecord", "FENCE")
        .when(
            (F.col("type") == "BrokerRegistrationChangeRecord") & (F.col("shutdown") == 1),
            "CONTROLLED_SHUTDOWN",
        )
        .when(
            (F.col("type") == "UnfenceBrokerRecord")
            | ((F.col("type") == "BrokerRegistrationChangeRecord") & (F.col("fenced") == -1)),
            "UNFENCE",
        )
        .when(F.col("type") == "ConfigRecord", "CONFIG")
    )
    return (
        ev.filter(
            F.col("type").isin(*BROKER_TYPES, "ConfigRecord") & (F.col("source") == "segment")
        )
        .select("unit", F.struct(F.col("broker_id"), kind.alias("kind")).alias("e"))
        .filter(F.col("e.kind").isNotNull())
        .groupBy("unit")
        .agg(F.collect_list("e").alias("unit_events"))
    )


def _first(arr: Column) -> Column:
    """First element or null (element_at fails on an empty array under ANSI mode)."""
    return F.try_element_at(arr, F.lit(1))


def leader_elections(ev: DataFrame, states: DataFrame, names: DataFrame) -> DataFrame:
    """One row per record that sets a leader, with its cause.

    Cause rule (the records that commit together with the election — its batch, or
    its transaction — say why the controller wrote it):

    1. PartitionRecord: CREATE.
    2. FENCE: a FenceBrokerRecord, a BrokerRegistrationChangeRecord with fenced=1, or
       an UnregisterBrokerRecord in the same batch for the old leader, for a
       broker this record takes out of the ISR, or, when the record leaves the
       partition leaderless, for a broker still in its ISR (Kafka 3.x bumps a
       leaderless partition's epoch, leader -1 -> -1, for each fence of an ISR member
       it keeps); cause_broker_id is that broker.
    3. CONTROLLED_SHUTDOWN: a BrokerRegistrationChangeRecord with
       in_controlled_shutdown=1 for a broker that qualifies as in 2.
    4. UNFENCE: an UnfenceBrokerRecord (or BrokerRegistrationChangeRecord fenced=-1)
       for the new leader: a leaderless partition gets the returning broker.
    5. ADMIN: a ConfigRecord in the batch (enabling unclean election elects at once).
    6. REASSIGNMENT: the record also changes the replica set (KIP-455: a
       reassignment completes and its leader is being removed, or a cancel).
    7. ALTER_PARTITION: the leader stays (an epoch bump with an ISR change, from a
       partition leader's AlterPartition); cause_broker_id is the leader.
    8. REBALANCE: a live leader hands over to the partition's first replica, which
       was in the ISR (a preferred election: the controller's automatic balancing,
       or an admin's `elect --type preferred`, which writes the same record).
    9. ADMIN: anything else (an unclean election request, ...).

    election_type (null when nobody is elected): ISR (the new leader was in the ISR
    before the record, or a reassignment's step puts it in the ISR it writes: the
    new replica joined by AlterPartition); else UNCLEAN when the partition is RECOVERING after it (an
    unclean or last-known-leader election, KIP-704), else ELR (a clean election of
    an eligible leader replica, KIP-966). unclean: the election type is UNCLEAN.
    Records of the starting snapshot are state, not elections, and are left out.
    """
    el = states.filter(
        ~F.col("from_snapshot") & ((F.col("kind") == KIND_CREATE) | F.col("sets_leader"))
    ).join(F.broadcast(_unit_events(ev)), "unit", "left")
    evs = F.coalesce(
        F.col("unit_events"), F.array().cast("array<struct<broker_id:int,kind:string>>")
    )
    old_leader, new_leader = F.col("old_leader"), F.col("leader")
    old_isr = F.coalesce(F.col("old_isr"), F.array().cast("array<int>"))

    def leaving(kind: str) -> Column:
        hits = F.filter(
            evs,
            lambda e: (
                (e["kind"] == kind)
                & (
                    (e["broker_id"] == old_leader)
                    | (
                        F.array_contains(old_isr, e["broker_id"])
                        & ~F.array_contains(F.col("isr"), e["broker_id"])
                    )
                    | ((new_leader == NO_LEADER) & F.array_contains(F.col("isr"), e["broker_id"]))
                )
            ),
        )
        # prefer the old leader when several brokers qualify
        led = F.filter(hits, lambda e: e["broker_id"] == old_leader)
        return F.coalesce(_first(led), _first(hits))["broker_id"]

    fence_b = leaving("FENCE")
    shut_b = leaving("CONTROLLED_SHUTDOWN")
    unfence_b = _first(
        F.filter(evs, lambda e: (e["kind"] == "UNFENCE") & (e["broker_id"] == new_leader))
    )["broker_id"]
    has_config = F.exists(evs, lambda e: e["kind"] == "CONFIG")
    create = F.col("kind") == KIND_CREATE
    same_leader = old_leader.isNotNull() & (old_leader == new_leader)
    in_old_isr = F.array_contains(old_isr, new_leader)
    preferred = (
        (old_leader >= 0)
        & (new_leader >= 0)
        & in_old_isr
        & (new_leader == F.try_element_at(F.col("replicas"), F.lit(1)))
    )
    cause = (
        F.when(create, "CREATE")
        .when(fence_b.isNotNull(), "FENCE")
        .when(shut_b.isNotNull(), "CONTROLLED_SHUTDOWN")
        .when(unfence_b.isNotNull(), "UNFENCE")
        .when(has_config, "ADMIN")
        .when(F.col("sets_replicas"), "REASSIGNMENT")
        .when(same_leader, "ALTER_PARTITION")
        .when(F.coalesce(preferred, F.lit(False)), "REBALANCE")
        .otherwise("ADMIN")
    )
    cause_broker = (
        F.when(create, F.lit(None).cast("int"))
        .when(fence_b.isNotNull(), fence_b)
        .when(shut_b.isNotNull(), shut_b)
        .when(unfence_b.isNotNull(), unfence_b)
        .when(has_config, F.lit(None).cast("int"))
        .when(F.col("sets_replicas"), F.lit(None).cast("int"))
        .when(same_leader, new_leader)
    )
    election_type = (
        F.when(new_leader.isNull() | (new_leader < 0), F.lit(None).cast("string"))
        .when(
            create
            | in_old_isr
            | (F.col("sets_replicas") & F.array_contains(F.col("isr"), new_leader)),
            "ISR",
        )
        .when(F.col("leader_recovery_state") == RECOVERING, "UNCLEAN")
        .otherwise("ELR")
    )
    unclean = F.coalesce(election_type == "UNCLEAN", F.lit(False))
    return el.join(F.broadcast(names), "topic_id", "left").select(
        F.col("seq").alias("offset"),
        F.col("at_offset").alias("applied_offset"),
        F.col("at_time").alias("append_time_ms"),
        "topic",
        "topic_id",
        "partition_id",
        old_leader.alias("old_leader"),
        new_leader.alias("new_leader"),
        unclean.alias("unclean"),
        election_type.alias("election_type"),
        cause.alias("cause"),
        cause_broker.cast("int").alias("cause_broker_id"),
        "leader_epoch",
    )


# ----------------------------------------------------------------------------- as-of


@dataclass
class Tables:
    info: LogInfo
    broker_history: DataFrame
    partition_history: DataFrame
    leader_elections: DataFrame
    offline_partitions: DataFrame
    # DataFrames that build_tables(persist=True) cached; release() frees them.
    cached: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached = []


def other_events(ev: DataFrame) -> DataFrame:
    """The events other than partition records: broker, topic and config records.

    A few thousand rows in a log of millions (partition records are the bulk),
    which broker_history, the topic names, topic removals and the election causes
    all read.
    """
    return ev.filter(~F.col("type").isin(*PARTITION_TYPES))


def build_tables(
    spark: SparkSession,
    records: DataFrame,
    info: LogInfo | None = None,
    work_dir: str | None = None,
    persist: bool = False,
) -> Tables:
    """All history tables from a records DataFrame (best read back from Parquet).

    partition_history, leader_elections and offline_partitions all derive from
    the per-partition states (the one expensive window), and broker_history, the
    topic names and the election causes from the few other events. Computed
    once, they can be shared instead of recomputed per table:

    - `persist`: both are cached (memory, spilling to disk) when first
      computed; `Tables.release()` frees them. Measured on 1M records (local[2],
      ``spark.sql.inMemoryColumnarStorage.compressed`` false, as `build_session`
      sets it): the cheapest, about 1.4x less CPU than writing the states to
      Parquet and reading them back, because the records are then scanned once
      instead of once per table, and uncompressed cached columns cost less to
      build than Parquet's encoding of the array columns.
    - `work_dir`: the states are written there as Parquet and read back.
    - neither: every table recomputes what it needs (fine for small logs, tests).
    """
    from pyspark import StorageLevel

    info = info or log_info(records)
    ev = events(spark, records, info)
    other = other_events(ev)
    cached: list[DataFrame] = []
    if persist:
        other = other.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(other)
    names = topic_names(other)
    states = partition_states(ev, other)
    if persist:
        states = states.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(states)
    elif work_dir is not None:
        states.write.mode("overwrite").parquet(work_dir)
        states = spark.read.parquet(work_dir)
    return Tables(
        info=info,
        broker_history=broker_history(other),
        partition_history=partition_history(states, names),
        leader_elections=leader_elections(other, states, names),
        offline_partitions=offline_partitions(states, names),
        cached=cached,
    )


def _covering(df: DataFrame, offset: int) -> DataFrame:
    return df.filter(
        (F.col("start_offset") <= offset)
        & (F.col("end_offset").isNull() | (F.col("end_offset") > offset))
    )


def offset_at_time(records: DataFrame, time_ms: int) -> int:
    """The last offset appended at or before `time_ms`."""
    row = (
        records.filter((F.col("source") == "segment") & (F.col("append_time_ms") <= time_ms))
        .agg(F.max("offset").alias("o"))
        .first()
    )
    if row is None or row["o"] is None:
        raise HistoryError(f"no record was appended at or before {time_ms} ms")
    return int(row["o"])


def check_in_history(info: LogInfo, offset: int) -> None:
    """HistoryError unless the history covers `offset`."""
    if offset < info.first_offset or offset > info.last_offset:
        raise HistoryError(
            f"offset {offset} is outside the history, which covers offsets "
            f"{info.first_offset} to {info.last_offset}"
        )


def state_as_of(
    broker_hist: DataFrame, partition_hist: DataFrame, info: LogInfo, offset: int
) -> tuple[DataFrame, DataFrame]:
    """(brokers, partitions) as the image holds them after replaying up to `offset`."""
    check_in_history(info, offset)
    as_of = F.lit(offset).cast("long").alias("as_of_offset")
    brokers = (
        _covering(broker_hist, offset)
        .filter(F.col("state") != "UNREGISTERED")
        .select(*BROKER_AS_OF_COLUMNS, as_of)
    )
    partitions = _covering(partition_hist, offset).select(*PARTITION_AS_OF_COLUMNS, as_of)
    return brokers, partitions


def states_as_of(
    spark: SparkSession,
    broker_hist: DataFrame,
    partition_hist: DataFrame,
    info: LogInfo,
    offsets: list[int],
) -> tuple[DataFrame, DataFrame]:
    """state_as_of at many offsets in one query each: rows keyed by `as_of_offset`.

    The offsets are broadcast and joined to the intervals covering them
    (``start_offset <= o < end_offset``, an open interval covering all later offsets).
    """
    for o in offsets:
        check_in_history(info, o)
    points = F.broadcast(
        spark.createDataFrame([(o,) for o in sorted(set(offsets))], "as_of_offset long")
    )

    def covering(df: DataFrame) -> DataFrame:
        cond = (F.col("start_offset") <= F.col("as_of_offset")) & (
            F.col("end_offset").isNull() | (F.col("end_offset") > F.col("as_of_offset"))
        )
        return df.join(points, cond, "inner")

    brokers = (
        covering(broker_hist)
        .filter(F.col("state") != "UNREGISTERED")
        .select(*BROKER_AS_OF_COLUMNS, "as_of_offset")
    )
    partitions = covering(partition_hist).select(*PARTITION_AS_OF_COLUMNS, "as_of_offset")
    return brokers, partitions


def image_state(image: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The same (brokers, partitions) rows from an in-process MetadataImage, for comparison."""
    brokers = [
        {
            "broker_id": b.broker_id,
            "broker_epoch": b.broker_epoch,
            "incarnation_id": b.incarnation_id,
            "rack": b.rack,
            "fenced": b.fenced,
            "in_controlled_shutdown": b.in_controlled_shutdown,
        }
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
    ]
    partitions = []
    for tid, t in sorted(image.topics.items()):
        for pid, p in sorted(t.partitions.items()):
            partitions.append(
                {
                    "topic": t.name,
                    "topic_id": tid,
                    "partition_id": pid,
                    "leader": p.leader,
                    "isr": list(p.isr),
                    "replicas": list(p.replicas),
                    "removing_replicas": list(p.removing_replicas),
                    "adding_replicas": list(p.adding_replicas),
                    "elr": list(p.elr),
                    "last_known_elr": list(p.last_known_elr),
                    "leader_recovery_state": p.leader_recovery_state,
                    "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch,
                }
            )
    return brokers, partitions


def rows_state(
    brokers: list[Any], partitions: list[Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Spark rows (or dicts) of state_as_of in image_state's form, sorted."""

    def norm(r: Any, keys: tuple[str, ...]) -> dict[str, Any]:
        d = r.asDict() if hasattr(r, "asDict") else dict(r)
        return {k: (list(d[k]) if isinstance(d[k], list | tuple) else d[k]) for k in keys}

    b = sorted((norm(r, BROKER_STATE_KEYS) for r in brokers), key=lambda d: d["broker_id"])
    p = sorted(
        (norm(r, PARTITION_STATE_KEYS) for r in partitions),
        key=lambda d: (d["topic_id"], d["partition_id"]),
    )
    return b, p


def state_from_intervals(
    broker_rows: list[Any], partition_rows: list[Any], offset: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """state_as_of over collected history rows, on the driver (tests, many offsets)."""

    def covers(r: Any) -> bool:
        return r["start_offset"] <= offset and (r["end_offset"] is None or r["end_offset"] > offset)

    brokers = [r for r in broker_rows if covers(r) and r["state"] != "UNREGISTERED"]
    partitions = [r for r in partition_rows if covers(r)]
    return rows_state(brokers, partitions)


def tiling_errors(rows: list[Any], key: tuple[str, ...]) -> list[str]:
    """Gaps, overlaps or misplaced open intervals among one table's intervals, per key."""
    by_key: dict[tuple[Any, ...], list[Any]] = {}
    for r in rows:
        by_key.setdefault(tuple(r[k] for k in key), []).append(r)
    errors = []
    for k, rs in by_key.items():
        rs.sort(key=lambda r: r["start_offset"])
        for a, b in zip(rs, rs[1:], strict=False):
            if a["end_offset"] != b["start_offset"]:
                errors.append(
                    f"{k}: [{a['start_offset']}, {a['end_offset']}) then {b['start_offset']}"
                )
            if a["end_time_ms"] != b["start_time_ms"]:
                errors.append(
                    f"{k}: end time {a['end_time_ms']} != next start {b['start_time_ms']}"
                )
        for r in rs:
            if r["end_offset"] is not None and r["end_offset"] <= r["start_offset"]:
                errors.append(f"{k}: empty interval [{r['start_offset']}, {r['end_offset']})")
    return errors
