"""Golden test: a small hand-written story, every row of every table checked by hand.

The story (offsets on the left) covers registration, unfencing, topic creation, a
fence that moves leadership, AlterPartition ISR changes, an admin preferred
election, a controlled shutdown, a fence inside a metadata transaction, an
aborted transaction across a controller failover, a last-ISR-member fence that
takes partitions offline, an unclean election enabled by a topic config, topic
deletion, broker unregistration, and a transaction left open at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metadata_log.records import (
    TOPIC_RESOURCE,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    record_fields,
)
from spark_replay import history as H
from spark_replay.cli import TABLES, run_job
from spark_replay.datasource import read_log
from tests.spark.logs import Batch, images_by_offset, write_log

T1, T2 = "orders-topic-id-000001", "audit-topic-id-0000002"


def reg(bid: int, epoch: int, inc: str, rack: str | None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(bid, inc, epoch, rack=rack, fenced=True)


def pcr(tid: str, pid: int, **kw: Any) -> PartitionChangeRecord:
    return PartitionChangeRecord(tid, pid, **kw)


STORY: list[Batch] = [
    (1, 1000, [LeaderChangeMessage(3000, (3000, 3001, 3002), (3000, 3001))], True),  # 0
    (1, 1000, [FeatureLevelRecord("metadata.version", 1)], False),  # 1
    (1, 2000, [reg(1, 2, "inc-1", "r1")], False),  # 2
    (1, 2100, [reg(2, 3, "inc-2", "r2")], False),  # 3
    (1, 2200, [reg(3, 4, "inc-3", None)], False),  # 4
    (
        1,
        3000,
        [UnfenceBrokerRecord(1, 2), UnfenceBrokerRecord(2, 3), UnfenceBrokerRecord(3, 4)],
        False,
    ),  # 5-7
    (
        1,
        4000,
        [
            TopicRecord("orders", T1),
            PartitionRecord(T1, 0, (1, 2, 3), (1, 2, 3), leader=1),
            PartitionRecord(T1, 1, (2, 3, 1), (2, 3, 1), leader=2),
        ],
        False,
    ),  # 8-10
    (1, 5000, [NoOpRecord()], False),  # 11
    # broker 1 missed its session: leadership of p0 moves, both ISRs shrink, fenced
    (
        1,
        20000,
        [pcr(T1, 0, isr=(2, 3), leader=2), pcr(T1, 1, isr=(2, 3)), FenceBrokerRecord(1, 2)],
        False,
    ),  # 12-14
    (1, 30000, [UnfenceBrokerRecord(1, 2)], False),  # 15
    (1, 31000, [pcr(T1, 0, isr=(1, 2, 3))], False),  # 16 AlterPartition
    (1, 32000, [pcr(T1, 1, isr=(2, 3, 1))], False),  # 17 AlterPartition
    (1, 40000, [pcr(T1, 0, leader=1)], False),  # 18 preferred election
    (
        1,
        50000,
        [
            BrokerRegistrationChangeRecord(2, 3, in_controlled_shutdown=1),
            pcr(T1, 0, isr=(1, 3)),
            pcr(T1, 1, isr=(3, 1), leader=3),
        ],
        False,
    ),  # 19-21
    (1, 52000, [BrokerRegistrationChangeRecord(2, 3, fenced=1)], False),  # 22
    # a fence too large for one batch: a transaction applied at its end (offset 27)
    (1, 60000, [BeginTransactionRecord("fence broker 3")], False),  # 23
    (1, 60000, [pcr(T1, 0, isr=(1,)), pcr(T1, 1, isr=(1,), leader=1)], False),  # 24-25
    (1, 60001, [FenceBrokerRecord(3, 4), EndTransactionRecord()], False),  # 26-27
    # a transaction whose controller dies: the next one aborts it
    (1, 70000, [BeginTransactionRecord("doomed")], False),  # 28
    (1, 70000, [pcr(T1, 0, leader=-1)], False),  # 29 never applied
    (2, 71000, [LeaderChangeMessage(3001, (3000, 3001, 3002), (3001, 3002))], True),  # 30
    (2, 71000, [AbortTransactionRecord("leader changed")], False),  # 31
    # broker 1, the last ISR member, is fenced: both partitions go offline
    (
        2,
        80000,
        [pcr(T1, 0, leader=-1), pcr(T1, 1, leader=-1), FenceBrokerRecord(1, 2)],
        False,
    ),  # 32-34
    (2, 90000, [reg(3, 35, "inc-3b", "r3")], False),  # 35
    (2, 91000, [UnfenceBrokerRecord(3, 35)], False),  # 36
    (
        2,
        95000,
        [
            ConfigRecord(TOPIC_RESOURCE, "orders", "unclean.leader.election.enable", "true"),
            pcr(T1, 0, isr=(3,), leader=3, leader_recovery_state=1),
            pcr(T1, 1, isr=(3,), leader=3, leader_recovery_state=1),
        ],
        False,
    ),  # 37-39
    (
        2,
        100000,
        [TopicRecord("audit", T2), PartitionRecord(T2, 0, (3, 1), (3,), leader=3)],
        False,
    ),  # 40-41
    (2, 110000, [RemoveTopicRecord(T1)], False),  # 42
    (2, 120000, [UnregisterBrokerRecord(2, 3)], False),  # 43
    (2, 121000, [NoOpRecord()], False),  # 44
    # a reassignment completes: replica 1 removed, the leader stays (epoch bump)
    (2, 122000, [pcr(T2, 0, replicas=(3,), leader=3)], False),  # 45
    # broker 3, the only replica, is fenced, then unfenced: it leads again
    (2, 125000, [pcr(T2, 0, leader=-1), FenceBrokerRecord(3, 35)], False),  # 46-47
    (2, 127000, [UnfenceBrokerRecord(3, 35), pcr(T2, 0, leader=3)], False),  # 48-49
    # a transaction still open at the end of the log: not applied (yet)
    (2, 130000, [BeginTransactionRecord("unfinished")], False),  # 50
    (2, 130000, [pcr(T2, 0, leader=-1)], False),  # 51
]

N = None
# broker_id, broker_epoch, state, fenced, in_controlled_shutdown, incarnation, rack, start, end, t0, t1
BROKERS = [
    (1, 2, "FENCED", True, False, "inc-1", "r1", 2, 5, 2000, 3000),
    (1, 2, "UNFENCED", False, False, "inc-1", "r1", 5, 14, 3000, 20000),
    (1, 2, "FENCED", True, False, "inc-1", "r1", 14, 15, 20000, 30000),
    (1, 2, "UNFENCED", False, False, "inc-1", "r1", 15, 34, 30000, 80000),
    (1, 2, "FENCED", True, False, "inc-1", "r1", 34, N, 80000, N),
    (2, 3, "FENCED", True, False, "inc-2", "r2", 3, 6, 2100, 3000),
    (2, 3, "UNFENCED", False, False, "inc-2", "r2", 6, 19, 3000, 50000),
    (2, 3, "CONTROLLED_SHUTDOWN", False, True, "inc-2", "r2", 19, 22, 50000, 52000),
    (2, 3, "FENCED", True, True, "inc-2", "r2", 22, 43, 52000, 120000),
    (2, 3, "UNREGISTERED", N, N, "inc-2", "r2", 43, N, 120000, N),
    (3, 4, "FENCED", True, False, "inc-3", N, 4, 7, 2200, 3000),
    (3, 4, "UNFENCED", False, False, "inc-3", N, 7, 27, 3000, 60001),
    (3, 4, "FENCED", True, False, "inc-3", N, 27, 35, 60001, 90000),
    (3, 35, "FENCED", True, False, "inc-3b", "r3", 35, 36, 90000, 91000),
    (3, 35, "UNFENCED", False, False, "inc-3b", "r3", 36, 47, 91000, 125000),
    (3, 35, "FENCED", True, False, "inc-3b", "r3", 47, 48, 125000, 127000),
    (3, 35, "UNFENCED", False, False, "inc-3b", "r3", 48, N, 127000, N),
]
# topic, topic_id, pid, leader, isr, replicas, lrs, leader_epoch, partition_epoch, start, end, t0, t1
R0, R1 = [1, 2, 3], [2, 3, 1]
PARTITIONS = [
    ("orders", T1, 0, 1, [1, 2, 3], R0, 0, 0, 0, 9, 12, 4000, 20000),
    ("orders", T1, 0, 2, [2, 3], R0, 0, 1, 1, 12, 16, 20000, 31000),
    ("orders", T1, 0, 2, [1, 2, 3], R0, 0, 1, 2, 16, 18, 31000, 40000),
    ("orders", T1, 0, 1, [1, 2, 3], R0, 0, 2, 3, 18, 20, 40000, 50000),
    ("orders", T1, 0, 1, [1, 3], R0, 0, 2, 4, 20, 27, 50000, 60001),
    ("orders", T1, 0, 1, [1], R0, 0, 2, 5, 27, 32, 60001, 80000),
    ("orders", T1, 0, -1, [1], R0, 0, 3, 6, 32, 38, 80000, 95000),
    ("orders", T1, 0, 3, [3], R0, 1, 4, 7, 38, 42, 95000, 110000),
    ("orders", T1, 1, 2, [2, 3, 1], R1, 0, 0, 0, 10, 13, 4000, 20000),
    ("orders", T1, 1, 2, [2, 3], R1, 0, 0, 1, 13, 17, 20000, 32000),
    ("orders", T1, 1, 2, [2, 3, 1], R1, 0, 0, 2, 17, 21, 32000, 50000),
    ("orders", T1, 1, 3, [3, 1], R1, 0, 1, 3, 21, 27, 50000, 60001),
    ("orders", T1, 1, 1, [1], R1, 0, 2, 4, 27, 33, 60001, 80000),
    ("orders", T1, 1, -1, [1], R1, 0, 3, 5, 33, 39, 80000, 95000),
    ("orders", T1, 1, 3, [3], R1, 1, 4, 6, 39, 42, 95000, 110000),
    ("audit", T2, 0, 3, [3], [3, 1], 0, 0, 0, 41, 45, 100000, 122000),
    ("audit", T2, 0, 3, [3], [3], 0, 1, 1, 45, 46, 122000, 125000),
    ("audit", T2, 0, -1, [3], [3], 0, 2, 2, 46, 49, 125000, 127000),
    ("audit", T2, 0, 3, [3], [3], 0, 3, 3, 49, N, 127000, N),
]
# offset, applied_offset, time, topic, topic_id, pid, old, new, unclean, cause, cause_broker,
# leader_epoch
ELECTIONS = [
    (9, 9, 4000, "orders", T1, 0, N, 1, False, "CREATE", N, 0),
    (10, 10, 4000, "orders", T1, 1, N, 2, False, "CREATE", N, 0),
    (12, 12, 20000, "orders", T1, 0, 1, 2, False, "FENCE", 1, 1),
    # a preferred election (an admin's here): the same record as the balancer's
    (18, 18, 40000, "orders", T1, 0, 2, 1, False, "REBALANCE", N, 2),
    (21, 21, 50000, "orders", T1, 1, 2, 3, False, "CONTROLLED_SHUTDOWN", 2, 1),
    (25, 27, 60001, "orders", T1, 1, 3, 1, False, "FENCE", 3, 2),
    (32, 32, 80000, "orders", T1, 0, 1, -1, False, "FENCE", 1, 3),
    (33, 33, 80000, "orders", T1, 1, 1, -1, False, "FENCE", 1, 3),
    (38, 38, 95000, "orders", T1, 0, -1, 3, True, "ADMIN", N, 4),
    (39, 39, 95000, "orders", T1, 1, -1, 3, True, "ADMIN", N, 4),
    (41, 41, 100000, "audit", T2, 0, N, 3, False, "CREATE", N, 0),
    # the replica set changes (KIP-455: only a reassignment changes it)
    (45, 45, 122000, "audit", T2, 0, 3, 3, False, "REASSIGNMENT", N, 1),
    (46, 46, 125000, "audit", T2, 0, 3, -1, False, "FENCE", 3, 2),
    (49, 49, 127000, "audit", T2, 0, -1, 3, False, "UNFENCE", 3, 3),
]
OFFLINE = [
    ("audit", T2, 0, 46, 49, 125000, 127000),
    ("orders", T1, 0, 32, 38, 80000, 95000),
    ("orders", T1, 1, 33, 39, 80000, 95000),
]


AS_OF = 38  # the state_as_of/ the CLI path writes


@pytest.fixture(scope="module", params=["source", "cli"])
def golden(
    request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The tables two ways: the data source and in-memory DataFrames ("source"), and
    the CLI job ("cli": records written per file with pyarrow, tables and report
    written to Parquet and read back). Every golden check runs on both."""
    data = tmp_path_factory.mktemp("golden")
    # small segments: the story spans several files (and input partitions)
    write_log(data, STORY, segment_bytes=400)
    out: dict[str, Any] = {"dir": data, "mode": request.param}
    if request.param == "source":
        records = read_log(spark, data)
        tables = H.build_tables(spark, records)
    else:
        target = tmp_path_factory.mktemp("golden-out")
        out["result"] = run_job(spark, data, target, as_of_offset=AS_OF)
        out["out"] = target
        records = spark.read.parquet(str(target / "records"))
        tables = H.Tables(
            info=H.log_info(records),
            **{name: spark.read.parquet(str(target / name)) for name in TABLES},
        )
    out.update(
        records=records.collect(),
        tables=tables,
        brokers=tables.broker_history.collect(),
        partitions=tables.partition_history.collect(),
        elections=tables.leader_elections.collect(),
        offline=tables.offline_partitions.collect(),
    )
    return out


def test_segments_are_several_files(golden: dict[str, Any]) -> None:
    assert len(list((Path(golden["dir"]) / "__cluster_metadata-0").glob("*.log"))) > 3


def test_records_every_row(golden: dict[str, Any]) -> None:
    rows = sorted(golden["records"], key=lambda r: r["offset"])
    expected = []
    off = 0
    for epoch, ts, recs, control in STORY:
        base = off
        for rec in recs:
            expected.append(
                (off, base, epoch, ts, control, type(rec).__name__, record_fields(rec), "segment")
            )
            off += 1
    got = [
        (
            r["offset"],
            r["base_offset"],
            r["epoch"],
            r["append_time_ms"],
            r["control"],
            r["type"],
            json.loads(r["fields"]),
            r["source"],
        )
        for r in rows
    ]
    assert got == expected
    noop = [r for r in rows if r["noop"]]
    assert [r["offset"] for r in noop] == [11, 44]
    assert all(r["type"] == "NoOpRecord" for r in noop)
    assert [r["offset"] for r in rows if r["control"]] == [0, 30]


def test_broker_history_every_row(golden: dict[str, Any]) -> None:
    got = sorted(
        (
            r["broker_id"],
            r["broker_epoch"],
            r["state"],
            r["fenced"],
            r["in_controlled_shutdown"],
            r["incarnation_id"],
            r["rack"],
            r["start_offset"],
            r["end_offset"],
            r["start_time_ms"],
            r["end_time_ms"],
        )
        for r in golden["brokers"]
    )
    assert sorted(got, key=lambda t: (t[0], t[7])) == BROKERS


def test_partition_history_every_row(golden: dict[str, Any]) -> None:
    got = sorted(
        (
            (
                r["topic"],
                r["topic_id"],
                r["partition_id"],
                r["leader"],
                list(r["isr"]),
                list(r["replicas"]),
                r["leader_recovery_state"],
                r["leader_epoch"],
                r["partition_epoch"],
                r["start_offset"],
                r["end_offset"],
                r["start_time_ms"],
                r["end_time_ms"],
            )
            for r in golden["partitions"]
        ),
        key=lambda t: (t[1], t[2], t[9]),
    )
    assert got == sorted(PARTITIONS, key=lambda t: (t[1], t[2], t[9]))
    assert all(
        list(r["removing_replicas"]) == [] == list(r["adding_replicas"])
        for r in golden["partitions"]
    )
    # no min.insync.replicas above 1 in this story: KIP-966's lists stay empty
    assert all(list(r["elr"]) == [] == list(r["last_known_elr"]) for r in golden["partitions"])


def test_leader_elections_every_row(golden: dict[str, Any]) -> None:
    got = sorted(
        (
            r["offset"],
            r["applied_offset"],
            r["append_time_ms"],
            r["topic"],
            r["topic_id"],
            r["partition_id"],
            r["old_leader"],
            r["new_leader"],
            r["unclean"],
            r["cause"],
            r["cause_broker_id"],
            r["leader_epoch"],
        )
        for r in golden["elections"]
    )
    assert got == ELECTIONS


def test_offline_partitions_every_row(golden: dict[str, Any]) -> None:
    got = sorted(
        (
            r["topic"],
            r["topic_id"],
            r["partition_id"],
            r["start_offset"],
            r["end_offset"],
            r["start_time_ms"],
            r["end_time_ms"],
        )
        for r in golden["offline"]
    )
    assert got == OFFLINE


def test_state_at_every_offset_equals_image(golden: dict[str, Any]) -> None:
    images = images_by_offset(STORY)
    for off, image in images.items():
        if off < 2:
            continue  # before the first broker and partition: nothing to compare
        assert H.state_from_intervals(
            golden["brokers"], golden["partitions"], off
        ) == H.image_state(image), off


def test_intervals_tile(golden: dict[str, Any]) -> None:
    assert H.tiling_errors(golden["brokers"], ("broker_id",)) == []
    assert H.tiling_errors(golden["partitions"], ("topic_id", "partition_id")) == []


def test_state_as_of_in_spark(golden: dict[str, Any]) -> None:
    tables = golden["tables"]
    images = images_by_offset(STORY)
    for off in (26, 27, 29, 38, 44, 46, 49, 51):
        b, p = H.state_as_of(tables.broker_history, tables.partition_history, tables.info, off)
        assert H.rows_state(b.collect(), p.collect()) == H.image_state(images[off])
    with pytest.raises(H.HistoryError):
        H.state_as_of(tables.broker_history, tables.partition_history, tables.info, 52)


def _cli(golden: dict[str, Any]) -> Path:
    if golden["mode"] != "cli":
        pytest.skip("checks the CLI job's own outputs")  # allow-listed: no CLI outputs
    return Path(golden["out"])


def test_cli_info_from_decode_stats_equals_queried(golden: dict[str, Any]) -> None:
    """The CLI job's LogInfo (from the decode pass) equals the one queried from records."""
    _cli(golden)
    assert golden["result"]["info"] == golden["tables"].info.to_dict()


def test_cli_state_as_of(golden: dict[str, Any]) -> None:
    out = _cli(golden)
    state = json.loads((out / "state_as_of" / "state.json").read_text())
    brokers, partitions = H.image_state(images_by_offset(STORY)[AS_OF])
    assert state["as_of_offset"] == AS_OF
    assert (state["brokers"], state["partitions"]) == (brokers, partitions)


def test_as_of_time_after_the_log_is_its_last_state_with_a_warning(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A time after the last record (130 s) gives the log's last state, and says
    that the log tells nothing later; a time inside the log says nothing."""
    data = tmp_path / "data"
    write_log(data, STORY, segment_bytes=400)
    last = len(images_by_offset(STORY)) - 1
    result = run_job(spark, data, tmp_path / "late", as_of_time_ms=200_000, report=False)
    assert result["as_of_offset"] == last
    err = capsys.readouterr().err
    assert (
        "spark-replay: warning: --as-of-time 1970-01-01T00:03:20.000+00:00 is after the log's "
        f"last record (offset {last}, 1970-01-01T00:02:10.000+00:00): the state is the one "
        "the log ends with; the log says nothing later"
    ) in err
    run_job(spark, data, tmp_path / "in", as_of_time_ms=130_000, report=False)
    assert "warning" not in capsys.readouterr().err


def test_cli_summary(golden: dict[str, Any]) -> None:
    """summary.json of the story, every figure worked out by hand."""
    out = _cli(golden)
    s = json.loads((out / "summary.json").read_text())
    by_type: dict[str, int] = {}
    for _e, _t, recs, _c in STORY:
        for r in recs:
            by_type[type(r).__name__] = by_type.get(type(r).__name__, 0) + 1
    assert s["records_by_type"] == by_type
    log = s["log"]
    assert (log["first_offset"], log["last_offset"], log["record_count"]) == (0, 51, 52)
    assert (log["first_time_ms"], log["last_time_ms"]) == (1000, 130000)
    # applied (23-27), aborted (28-31), unfinished (50-51)
    assert (log["transactions"], log["aborted_transactions"]) == (3, 2)
    assert s["brokers"] == {
        "fences": 5,  # offsets 14, 22 (BrokerRegistrationChange), 26, 34, 47
        "unfences": 6,  # 5, 6, 7, 15, 36, 48
        "controlled_shutdowns": 1,
        "registrations": 4,
        "unregistrations": 1,
        "fences_by_broker": {"1": 2, "2": 1, "3": 2},
        "state_at_end": {"FENCED": 1, "UNFENCED": 1, "UNREGISTERED": 1},
    }
    assert s["controller"] == {"leader_changes": 2, "last_raft_epoch": 2}
    assert s["elections"] == {
        "total": 11,
        "clean": 6,  # ISR or ELR: the 11 but the 2 unclean and the 3 that leave no leader
        "unclean": 2,
        "leader_lost": 3,
        "by_cause": {
            "ADMIN": 2,
            "CONTROLLED_SHUTDOWN": 1,
            "CREATE": 3,
            "FENCE": 5,
            "REASSIGNMENT": 1,
            "REBALANCE": 1,
            "UNFENCE": 1,
        },
        "rebalances": 1,  # offset 18
        # minute 1 (60 s to 120 s): offsets 25, 32, 33, 38, 39
        "busiest_minute": {"start": "1970-01-01T00:01:00.000+00:00", "elections": 5},
    }
    assert s["offline"] == {
        "windows": 3,
        "partitions_ever_offline": 3,
        "still_offline_at_end": 0,
        "max_offline_at_once": 2,
        "max_offline_at_offset": 33,
        # orders-0 and orders-1 are both offline for 15 s: the earlier one is named
        "longest_window": {
            "topic": "orders",
            "topic_id": T1,
            "partition_id": 0,
            "start_offset": 32,
            "end_offset": 38,
            "start_time": "1970-01-01T00:01:20.000+00:00",
            "duration_ms": 15000,
            "still_open": False,
        },
        "while_running": None,
    }
    # offset 45 changes the replicas without adding or removing ones
    assert s["reassignments"] == {"started": 0, "ended": 0, "in_progress_at_end": 0}
    assert s["at_end"] == {
        "topics": 1,
        "partitions": 1,
        "offline_partitions": 0,
        "brokers_running": 1,
        "cluster_stopped": False,
    }
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4


def test_spark_submit_as_of_time(tmp_path: Path) -> None:
    """`spark-submit spark_replay/cli.py` with --as-of-time: exit 0, the step lines,
    and state_as_of equal to the in-process image at the last offset by then."""
    import os
    import subprocess
    import sys

    import spark_replay.cli

    data = tmp_path / "data"
    write_log(data, STORY, segment_bytes=400)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(bin_dir / "spark-submit"),
            "--master",
            "local[1]",
            spark_replay.cli.__file__,
            "--log-dir",
            str(data),
            "--out",
            str(out),
            # 95 s after the epoch: offsets 37-39 were appended then, 40 later
            "--as-of-time",
            "1970-01-01T00:01:35Z",
            "--no-report",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["records"] == 52 and line["as_of_offset"] == 39
    # (spark-submit merges the Python driver's stderr into its stdout)
    assert "spark-replay: records: 52 records" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    state = json.loads((out / "state_as_of" / "state.json").read_text())
    assert state["as_of_offset"] == 39 and state["as_of_time_ms"] == 95_000
    assert (state["brokers"], state["partitions"]) == H.image_state(images_by_offset(STORY)[39])
