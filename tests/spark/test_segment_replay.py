"""spark_replay.segment_replay without Spark: summaries fold the same in any
grouping, replaying files from their folded starting states equals replaying
the whole log as one file, and the rules' pieces on hand-made rows.

(The equality with the DataFrame-window reference, spark_replay.history, on
seeded stories and the golden log is in test_seeded.py and test_golden.py.)
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_replay.decode import ARROW_SCHEMA
from spark_replay.segment_replay import (
    EVENT_SOURCE_COLUMNS,
    OPEN_TABLES,
    Delta,
    Summary,
    Txn,
    _members,
    broker_history,
    close_open,
    compose,
    file_events,
    next_points,
    replay_file,
    starting_states,
    summarize,
)

SCHEMA = pa.schema([ARROW_SCHEMA.field(c) for c in EVENT_SOURCE_COLUMNS])
TOPICS = ("t0", "t1", "t2")


def record(offset: int, base: int, typ: str, **kw: Any) -> dict[str, Any]:
    return {
        "offset": offset,
        "base_offset": base,
        "append_time_ms": 1000 + offset,
        "type": typ,
        **kw,
    }


def table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def story(rng: random.Random, batches: int) -> list[list[dict[str, Any]]]:
    """A valid random log as batches of records: topics created, partitions
    created and changed (leader moves, leaderless, ISR shrinks), brokers fenced
    and unfenced in the same batches, topics removed (ids never reused)."""
    out: list[list[dict[str, Any]]] = []
    off = 0
    live: dict[str, int] = {}  # topic -> partitions
    removed: set[str] = set()
    for _ in range(batches):
        batch: list[dict[str, Any]] = []
        base = off
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            free = [t for t in TOPICS if t not in live and t not in removed]
            if free and (not live or choice < 0.1):
                t = free[0]
                live[t] = rng.randint(1, 3)
                batch.append(record(off, base, "TopicRecord", topic_id=t, topic_name=f"n-{t}"))
                off += 1
                for p in range(live[t]):
                    batch.append(
                        record(
                            off,
                            base,
                            "PartitionRecord",
                            topic_id=t,
                            partition_id=p,
                            leader=1,
                            isr=[1, 2, 3],
                            replicas=[1, 2, 3],
                            removing_replicas=[],
                            adding_replicas=[],
                            elr=[],
                            last_known_elr=[],
                            leader_recovery_state=0,
                            leader_epoch=0,
                            partition_epoch=0,
                        )
                    )
                    off += 1
            elif live and choice < 0.15:
                t = rng.choice(sorted(live))
                del live[t]
                removed.add(t)
                batch.append(record(off, base, "RemoveTopicRecord", topic_id=t))
                off += 1
            elif choice < 0.3:
                b = rng.randint(1, 3)
                kind = rng.choice(["FenceBrokerRecord", "UnfenceBrokerRecord"])
                batch.append(record(off, base, kind, broker_id=b, broker_epoch=7))
                off += 1
            elif live:
                t = rng.choice(sorted(live))
                batch.append(
                    record(
                        off,
                        base,
                        "PartitionChangeRecord",
                        topic_id=t,
                        partition_id=rng.randrange(live[t]),
                        leader=rng.choice([-2, -2, -1, 1, 2, 3]),
                        isr=rng.choice([None, [1], [2, 3], [1, 2, 3]]),
                        # KIP-966's lists: null keeps them
                        elr=rng.choice([None, None, None, [], [2], [2, 3]]),
                        last_known_elr=rng.choice([None, None, None, [], [1]]),
                        leader_recovery_state=rng.choice([-1, -1, 0, 1]),
                    )
                )
                off += 1
        if batch:
            out.append(batch)
    return out


def events_of(batches: list[list[dict[str, Any]]]) -> pa.Table:
    rows = [r for b in batches for r in b]
    return file_events(table(rows), 0, 1 << 40, [])


def split(batches: list[list[dict[str, Any]]], cuts: list[int]) -> list[pa.Table]:
    """The log as files cut at batch boundaries (a batch never spans two segments)."""
    edges = [0, *sorted(set(c % (len(batches) + 1) for c in cuts)), len(batches)]
    return [events_of(batches[a:b]) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def fold_tree(summaries: list[Summary], rng: random.Random) -> Summary:
    """compose over a random binary tree with the summaries in order as leaves."""
    if len(summaries) == 1:
        return summaries[0]
    at = rng.randint(1, len(summaries) - 1)
    return compose(fold_tree(summaries[:at], rng), fold_tree(summaries[at:], rng))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    batches=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 60), max_size=5),
    tree=st.integers(0, 2**32),
)
def test_folding_summaries_in_any_grouping_gives_the_same_starting_states(
    seed: int, batches: int, cuts: list[int], tree: int
) -> None:
    log = story(random.Random(seed), batches)
    if not log:
        return
    files = split(log, cuts)
    summaries = [summarize(e) for e in files]
    # any grouping of compose equals the summary of the whole log
    assert fold_tree(summaries, random.Random(tree)) == summarize(events_of(log))
    # each file's starting state (the in-place prefix scan) equals the fold, in
    # a random grouping, of the summaries before it
    starts = starting_states(summaries)
    for i in range(1, len(summaries)):
        before = fold_tree(summaries[:i], random.Random(tree + i))
        assert starts[i] == {
            k: d for k, d in before.deltas.items() if k in summaries[i].first_event
        }


def _sorted_rows(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True), key=repr)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    batches=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 60), max_size=5),
)
def test_files_replayed_from_their_starting_states_equal_one_replay_of_the_log(
    seed: int, batches: int, cuts: list[int]
) -> None:
    log = story(random.Random(seed), batches)
    if not log:
        return
    whole_events = events_of(log)
    whole_summary = summarize(whole_events)
    whole = replay_file(whole_events, {}, {}, whole_summary.names)
    files = split(log, cuts)
    summaries = [summarize(e) for e in files]
    starts = starting_states(summaries)
    ends = next_points(summaries, [list(s.first_event) for s in summaries])
    names: dict[str, str] = {}
    for s in summaries:
        names.update(s.names)
    parts = [replay_file(e, starts[i], ends[i], names) for i, e in enumerate(files)]
    for name, t in whole.items():
        assert _sorted_rows(pa.concat_tables([p[name] for p in parts])) == _sorted_rows(t), name
    # replayed before any later file is known (ends=None, the topic names of the
    # files so far), the rows that end in a later file closed afterwards
    early: list[dict[str, pa.Table]] = []
    known: dict[str, str] = {}
    for i, e in enumerate(files):
        known.update(summaries[i].names)
        early.append(replay_file(e, starts[i], None, dict(known)))
    for name, t in whole.items():
        rows = [p[name] for p in early]
        if name in OPEN_TABLES:
            which = 0 if name == "partition_history" else 1
            rows += [close_open(p[OPEN_TABLES[name]], ends[i], which) for i, p in enumerate(early)]
        assert _sorted_rows(pa.concat_tables(rows)) == _sorted_rows(t), name


def test_delta_then_keeps_the_last_set_value_and_adds_the_counts() -> None:
    a = Delta(
        leader=1,
        isr=(1, 2),
        elr=(3,),
        last_known_elr=(),
        leader_epoch_base=0,
        leader_changes=2,
        partition_epoch_base=0,
        changes=3,
    )
    b = Delta(leader=None, isr=(2,), last_known_elr=(1,), leader_changes=1, changes=1)
    assert a.then(b) == Delta(
        leader=1,
        isr=(2,),
        elr=(3,),
        last_known_elr=(1,),
        leader_epoch_base=0,
        leader_changes=3,
        partition_epoch_base=0,
        changes=4,
    )
    # every field of the NamedTuple: a later value wins, counts add (then is positional)
    counts = {"leader_changes", "changes"}
    x = Delta(*(i + 1 for i in range(len(Delta._fields))))
    y = Delta(*(100 + i for i in range(len(Delta._fields))))
    for name in Delta._fields:
        got, want = getattr(x.then(y), name), getattr(y, name)
        assert got == (getattr(x, name) + want if name in counts else want), name
        assert getattr(x.then(Delta()), name) == getattr(x, name), name


def test_transaction_rows_apply_at_its_end_or_never() -> None:
    rows = table(
        [
            record(10, 10, "BeginTransactionRecord"),
            record(11, 11, "PartitionChangeRecord", topic_id="t", partition_id=0, leader=2),
            record(12, 12, "EndTransactionRecord"),
            record(13, 13, "BeginTransactionRecord"),
            record(14, 14, "PartitionChangeRecord", topic_id="t", partition_id=0, leader=3),
            record(15, 15, "AbortTransactionRecord"),
            record(16, 16, "BeginTransactionRecord"),
            record(17, 17, "PartitionChangeRecord", topic_id="t", partition_id=0, leader=4),
        ]
    )
    txns = [Txn(10, 12, True, 5000), Txn(13, 15, False, 6000), Txn(16, 30, True, 7000)]
    ev = file_events(rows, 10, 17, txns)
    # the first applies at 12 (its unit: the transaction), the aborted one never,
    # the third ends after this file: its rows are the later file's
    assert ev.column("seq").to_pylist() == [11]
    assert (ev.column("at").to_pylist(), ev.column("at_time").to_pylist()) == ([12], [5000])
    assert ev.column("unit").to_pylist() == [12]
    later = file_events(rows, 18, 30, txns)
    assert later.column("seq").to_pylist() == [17] and later.column("at").to_pylist() == [30]


def test_snapshot_rows_apply_together_at_its_end() -> None:
    rows = table(
        [record(0, 0, "TopicRecord", topic_id="t", topic_name="a"), record(1, 0, "ConfigRecord")]
    )
    ev = file_events(rows, 99, 99, [], snapshot_point=(99, 5))
    assert ev.column("at").to_pylist() == [99, 99] and ev.column("from_snapshot").to_pylist() == [
        True,
        True,
    ]


def test_members_pairs_a_broker_with_its_rows_list() -> None:
    lists = pa.array([[1, 2], None, [3], []], pa.list_(pa.int32()))
    rows = [0, 0, 1, 2, 3, 2]
    brokers = [2, 3, 1, 3, 3, -1]
    import numpy as np

    assert _members(np.array(rows), np.array(brokers), lists).tolist() == [
        True,
        False,
        False,
        True,
        False,
        False,
    ]


def test_broker_history_shows_the_last_of_several_records_at_one_offset() -> None:
    from spark_replay.segment_replay import FENCE, REGISTER, UNFENCE

    ev = [
        (5, 50, REGISTER, 1, 7, 1, -1, "inc", None),
        (6, 60, UNFENCE, 1, 7, -1, 0, None, None),
        (9, 90, FENCE, 1, 7, 1, 0, None, None),  # a transaction: both at 9,
        (9, 90, UNFENCE, 1, 7, -1, 0, None, None),  # only the last is visible
    ]
    rows = broker_history(ev).to_pylist()
    assert [(r["state"], r["start_offset"], r["end_offset"]) for r in rows] == [
        ("FENCED", 5, 6),
        ("UNFENCED", 6, None),
    ]


def test_election_causes_follow_the_rule_order_of_history_leader_elections() -> None:
    import numpy as np

    from spark_replay.segment_replay import CAUSES, NULL, election_causes

    lst = pa.list_(pa.int32())
    # unit 1: broker 1 fenced; unit 2: broker 3 unfenced; unit 3: a ConfigRecord
    events = (np.array([1, 2, 3]), np.array([1, 3, NULL]), np.array([1, 3, 4]))
    unit = np.array([1, 1, 2, 4, 3, 4, 4])
    create = np.array([False, False, False, True, False, False, False])
    old_leader = np.array([1, 2, -1, NULL, 2, 2, 2])
    new_leader = np.array([2, 2, 3, 1, 3, 2, 3])
    old_isr = pa.array([[1, 2], [2, 1], [], None, [2, 3], [2], [2, 3]], lst)
    isr = pa.array([[2], [2], [3], [1], [2, 3], [2], [3]], lst)
    none = np.zeros(len(unit), bool)
    cause, broker = election_causes(
        unit, create, old_leader, new_leader, old_isr, isr, events, none, none
    )
    assert CAUSES.take(pa.array(cause)).to_pylist() == [
        "FENCE",  # the old leader was fenced
        "FENCE",  # a fenced broker left the ISR
        "UNFENCE",  # the returning broker leads a leaderless partition
        "CREATE",
        "ADMIN",  # a ConfigRecord in its batch
        "ALTER_PARTITION",  # the leader stays
        "ADMIN",  # anything else
    ]
    assert [None if b == NULL else int(b) for b in broker] == [1, 1, 3, None, None, 2, None]
    # issue 19: a record that also sets the replicas is a reassignment's step, after
    # the broker and config rules; a live leader handing over to the preferred
    # replica (in the ISR) is a rebalance, after ALTER_PARTITION
    sets_replicas = np.array([True, False, False, False, True, True, False])
    preferred = np.array([False, False, False, False, False, True, True])
    cause, broker = election_causes(
        unit, create, old_leader, new_leader, old_isr, isr, events, sets_replicas, preferred
    )
    assert CAUSES.take(pa.array(cause)).to_pylist() == [
        "FENCE",
        "FENCE",
        "UNFENCE",
        "CREATE",
        "ADMIN",
        "REASSIGNMENT",
        "REBALANCE",
    ]
    assert [None if b == NULL else int(b) for b in broker] == [1, 1, 3, None, None, None, None]
