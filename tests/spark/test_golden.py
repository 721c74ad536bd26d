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
        [TopicRecord("audit", T2), PartitionRecord(T2, 0, (3,), (3,), leader=3)],
        False,
    ),  # 40-41
    (2, 110000, [RemoveTopicRecord(T1)], False),  # 42
    (2, 120000, [UnregisterBrokerRecord(2, 3)], False),  # 43
    (2, 121000, [NoOpRecord()], False),  # 44
    # a transaction still open at the end of the log: not applied (yet)
    (2, 130000, [BeginTransactionRecord("unfinished")], False),  # 45
    (2, 130000, [pcr(T2, 0, leader=-1)], False),  # 46
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
    (3, 35, "UNFENCED", False, False, "inc-3b", "r3", 36, N, 91000, N),
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
    ("audit", T2, 0, 3, [3], [3], 0, 0, 0, 41, N, 100000, N),
]
# offset, applied_offset, time, topic, pid, old, new, unclean, cause, cause_broker, leader_epoch
ELECTIONS = [
    (9, 9, 4000, "orders", 0, N, 1, False, "CREATE", N, 0),
    (10, 10, 4000, "orders", 1, N, 2, False, "CREATE", N, 0),
    (12, 12, 20000, "orders", 0, 1, 2, False, "FENCE", 1, 1),
    (18, 18, 40000, "orders", 0, 2, 1, False, "ADMIN", N, 2),
    (21, 21, 50000, "orders", 1, 2, 3, False, "CONTROLLED_SHUTDOWN", 2, 1),
    (25, 27, 60001, "orders", 1, 3, 1, False, "FENCE", 3, 2),
    (32, 32, 80000, "orders", 0, 1, -1, False, "FENCE", 1, 3),
    (33, 33, 80000, "orders", 1, 1, -1, False, "FENCE", 1, 3),
    (38, 38, 95000, "orders", 0, -1, 3, True, "ADMIN", N, 4),
    (39, 39, 95000, "orders", 1, -1, 3, True, "ADMIN", N, 4),
    (41, 41, 100000, "audit", 0, N, 3, False, "CREATE", N, 0),
]
OFFLINE = [
    ("orders", T1, 0, 32, 38, 80000, 95000),
    ("orders", T1, 1, 33, 39, 80000, 95000),
]


@pytest.fixture(scope="module")
def golden(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("golden")
    # small segments: the story spans several files (and input partitions)
    write_log(data, STORY, segment_bytes=400)
    records = read_log(spark, data)
    tables = H.build_tables(spark, records)
    return {
        "dir": data,
        "records": records.collect(),
        "tables": tables,
        "brokers": tables.broker_history.collect(),
        "partitions": tables.partition_history.collect(),
        "elections": tables.leader_elections.collect(),
        "offline": tables.offline_partitions.collect(),
    }


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


def test_leader_elections_every_row(golden: dict[str, Any]) -> None:
    got = sorted(
        (
            r["offset"],
            r["applied_offset"],
            r["append_time_ms"],
            r["topic"],
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
    for off in (26, 27, 29, 38, 44, 46):
        b, p = H.state_as_of(tables.broker_history, tables.partition_history, tables.info, off)
        assert H.rows_state(b.collect(), p.collect()) == H.image_state(images[off])
    with pytest.raises(H.HistoryError):
        H.state_as_of(tables.broker_history, tables.partition_history, tables.info, 47)
