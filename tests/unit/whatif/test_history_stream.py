"""The two tables built as the engine writes (history_stream) are the tables of
the log it writes, built by spark-replay's rules (one_process.write_tables).

`HistoryStream` is a second implementation of leader_elections' and
offline_partitions' rules, record by record; the what-if job builds every
scenario's tables with it but the in-force one's. Here it must give the rows
`write_tables` gives, row for row: for the engine's logs of seeded stories
under every setting the job can vary, for the real clusters' logs (read back
and replayed), and for hand-made transactions (the visibility rule, aborted
and unfinished transactions, a topic deleted in one, a batch split by a
transaction's end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata_log.batch import encode_batch
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    RECOVERING,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from metadata_log.replay import iter_file_batches, metadata_dir, segment_files
from spark_replay.generator import METADATA_DIR, SegmentWriter, generate, scaled_config
from spark_replay.whatif.engine import forget_decisions, run_scenario
from spark_replay.whatif.facts import read_facts
from spark_replay.whatif.history_stream import HistoryStream, log_tables
from spark_replay.whatif.replay import SEGMENT_BYTES, history_tables, scenario_history
from spark_replay.whatif.scenario import build_scenarios

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "whatif"
ELR = "eligible.leader.replicas.enable"
SETTINGS = [
    [],
    ["unclean.leader.election.enable=true"],
    ["broker.session.timeout.ms=30000"],
    ["broker.session.timeout.ms=3000", "unclean.leader.election.enable=true"],
    ["controlled.shutdown.enable=false"],
    [f"{ELR}=true", "min.insync.replicas=2"],
    ["replica.placement=rack-unaware"],
]


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows in a fixed order (the two builders emit them in their own)."""
    return sorted(
        (tuple(r.values()) for r in table.to_pylist()),
        key=lambda r: tuple((v is None, v if v is not None else 0) for v in r),
    )


def _assert_same(stream: dict[str, pa.Table], expected: dict[str, pa.Table], what: str) -> None:
    for name, table in expected.items():
        mine = stream[name]
        assert mine.schema.equals(table.schema), (what, name, mine.schema, table.schema)
        assert _rows(mine) == _rows(table), (what, name)


def _batches(log: Path) -> list[Any]:
    return [
        b
        for _, p in segment_files(metadata_dir(log))
        for b in iter_file_batches(p, allow_torn_tail=False)
    ]


@pytest.mark.parametrize("seed", (1, 2, 3))
def test_the_stream_gives_the_tables_of_the_engines_log_under_every_setting(
    seed: int, tmp_path: Path
) -> None:
    log = tmp_path / "data"
    generate(
        log,
        scaled_config(
            4000, seed, failover_rate=0.02, admin_rate=0.05, crash_rate=0.03, shutdown_rate=0.03
        ),
    )
    facts = read_facts(log, 9000)
    forget_decisions()
    seen = {"offline": 0, "unclean": 0, "causes": set()}
    for i, sets in enumerate(SETTINGS):
        scenario = build_scenarios(sets)[-1]
        out = tmp_path / f"s{i}"
        sink = SegmentWriter(out / "log" / METADATA_DIR, segment_bytes=SEGMENT_BYTES)
        observer = HistoryStream()
        try:
            stats = run_scenario(facts, scenario, sink, observer=observer)
        finally:
            sink.close()
        stream = observer.tables()
        _assert_same(stream, history_tables(out / "log", out / "tables"), scenario.name)
        # without a log (the job's way): the same batches, so the same tables and stats
        tables, counted = scenario_history(facts, scenario)
        _assert_same(tables, stream, scenario.name)
        assert counted == {**stats.to_dict(), "records": sink.next_offset}
        el = stream["leader_elections"]
        seen["offline"] += stream["offline_partitions"].num_rows
        seen["unclean"] += sum(el.column("unclean").to_pylist())
        seen["causes"] |= set(el.column("cause").to_pylist())
    # not vacuous: the stories take partitions offline, elect unclean, and give
    # elections most of their causes
    assert seen["offline"] > 0 and seen["unclean"] > 0, seen
    assert {"CREATE", "FENCE", "CONTROLLED_SHUTDOWN", "UNFENCE", "REBALANCE"} <= seen["causes"], (
        seen
    )


@pytest.mark.parametrize(
    "name", ("demo-log", "demo-outage-log", "chaos-plain-log", "chaos-secure-log")
)
def test_the_stream_gives_a_real_clusters_tables(name: str, tmp_path: Path) -> None:
    """The logs of `make demo` and of the chaos test (group commits, a
    reassignment, balancing, failovers, topics deleted), read back and fed to
    the stream, and replayed by the engine with unclean election on."""
    log = FIXTURES / name
    _assert_same(log_tables(_batches(log)), history_tables(log, tmp_path / "actual"), name)
    facts = read_facts(log, 6000)
    [_, scenario] = build_scenarios(
        ["unclean.leader.election.enable=true"], in_force=["broker.session.timeout.ms=6000"]
    )
    out = tmp_path / "unclean"
    sink = SegmentWriter(out / "log" / METADATA_DIR, segment_bytes=SEGMENT_BYTES)
    observer = HistoryStream()
    try:
        run_scenario(facts, scenario, sink, observer=observer)
    finally:
        sink.close()
    _assert_same(observer.tables(), history_tables(out / "log", out / "tables"), name)


T = "t-id"
GONE = "gone-id"


def _hand_made() -> list[tuple[list[Any], bool]]:
    """(records, control) per batch: transactions every way the rules treat them."""
    p = PartitionChangeRecord
    return [
        (
            [
                FeatureLevelRecord(METADATA_VERSION_FEATURE, LATEST_METADATA_VERSION),
                TopicRecord("t", T),
                PartitionRecord(T, 0, (1, 2, 3), (1, 2), leader=1),
                PartitionRecord(T, 1, (2, 1, 3), (2, 1), leader=2),
                TopicRecord("gone", GONE),
                PartitionRecord(GONE, 0, (1, 2), (1,), leader=1),
            ],
            False,
        ),
        # a transaction: the fence's two steps apply at its end, and only the
        # last state shows (no offline window from the intermediate -1)
        ([BeginTransactionRecord("fence")], False),
        ([FenceBrokerRecord(1, 0), p(T, 0, isr=(2,), leader=-1)], False),
        ([p(T, 0, leader=2)], False),
        ([EndTransactionRecord()], False),
        # aborted: never applied
        ([BeginTransactionRecord("x"), p(T, 1, isr=(2,), leader=-1)], False),
        ([AbortTransactionRecord("x")], False),
        # a plain leaderless change: a window opens
        ([FenceBrokerRecord(2, 0), p(T, 1, isr=(1,), leader=-1), p(T, 0, leader=-1)], False),
        # Kafka 3.x: a fence bumps a leaderless partition's epoch (leader -1 -> -1)
        # for the ISR member it keeps: the fence is the cause, not an AlterPartition
        ([BrokerRegistrationChangeRecord(2, 0, 1, 0), p(T, 0, leader=-1)], False),
        # a batch split by a transaction's end: the rows around it are one unit
        # (the unfence after the end is the cause of the election before it)
        (
            [
                p(T, 1, leader=1),
                BeginTransactionRecord("y"),
                p(GONE, 0, leader=-1),
                RemoveTopicRecord(GONE),
                EndTransactionRecord(),
                UnfenceBrokerRecord(1, 0),
            ],
            False,
        ),
        # unclean: RECOVERING after a leader outside the ISR
        ([p(T, 0, leader=3, isr=(3,), leader_recovery_state=RECOVERING)], False),
        # a config change's election (the same leader again: ALTER_PARTITION
        # without the config); a controlled shutdown moves a leader; a leader's
        # own epoch bump
        (
            [ConfigRecord(2, "t", "unclean.leader.election.enable", "true"), p(T, 1, leader=1)],
            False,
        ),
        ([p(T, 1, leader=2, isr=(1, 2))], False),
        ([BrokerRegistrationChangeRecord(2, 0, 0, 1), p(T, 1, leader=1, isr=(1,))], False),
        ([p(T, 1, leader=1, isr=(1, 3))], False),
        # a reassignment step and a preferred election
        ([p(T, 0, replicas=(3, 2), isr=(3, 2), leader=2)], False),
        ([p(T, 0, leader=3)], False),
        # a handover to a replica in the ISR but not the first: not a rebalance
        ([p(T, 0, leader=2)], False),
        # two brokers leave the ISR at once: the old leader (listed second) is the cause
        ([FenceBrokerRecord(3, 0), FenceBrokerRecord(2, 0), p(T, 0, isr=(), leader=-1)], False),
        ([UnfenceBrokerRecord(2, 0), p(T, 0, leader=2, isr=(2,))], False),
        # a broker told to shut down now (fenced by a registration change):
        # its partition goes offline to the end of the log
        ([BrokerRegistrationChangeRecord(1, 0, 1, 0), p(T, 1, leader=-1, isr=())], False),
        # unfinished at the end of the log: never applied
        ([BeginTransactionRecord("z"), p(T, 1, leader=-1)], False),
    ]


def test_hand_made_transactions_give_the_logs_tables(tmp_path: Path) -> None:
    sink = SegmentWriter(tmp_path / "log" / METADATA_DIR)
    stream = HistoryStream()
    t = 1_700_000_000_000
    for records, control in _hand_made():
        t += 1000
        base = sink.next_offset
        sink.append(encode_batch(base, 1, t, records, control), len(records))
        stream.batch(base, t, records, control)
    sink.close()
    tables = stream.tables()
    _assert_same(tables, history_tables(tmp_path / "log", tmp_path / "tables"), "hand-made")
    el = tables["leader_elections"]
    assert set(el.column("cause").to_pylist()) >= {
        "CREATE",
        "FENCE",
        "UNFENCE",
        "ADMIN",
        "CONTROLLED_SHUTDOWN",
        "REASSIGNMENT",
        "REBALANCE",
        "ALTER_PARTITION",
    }
    assert True in el.column("unclean").to_pylist()
    bumps = [r for r in el.to_pylist() if r["old_leader"] == r["new_leader"] == -1]
    assert [(r["cause"], r["cause_broker_id"]) for r in bumps] == [("FENCE", 2)]
    # the transaction's intermediate leaderless state never shows; the plain one does
    assert tables["offline_partitions"].num_rows >= 1
