"""Structured logs: JSON lines, and the state change each metadata record makes."""

from __future__ import annotations

import io
import json
import logging

from kraft.logs import JsonFormatter, TextFormatter, log_state_change, state_change
from metadata_log.records import (
    FENCE_NO,
    FENCE_YES,
    RECOVERING,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

NAMES = {"t1": "orders"}


def change(record: object) -> dict | None:
    return state_change(record, 42, NAMES.get)


def test_broker_changes() -> None:
    reg = change(RegisterBrokerRecord(4, "inc-1", 17))
    assert reg == {
        "change": "broker_registered",
        "broker_id": 4,
        "broker_epoch": 17,
        "incarnation_id": "inc-1",
        "fenced": True,
        "offset": 42,
    }
    assert change(FenceBrokerRecord(4, 17))["change"] == "broker_fenced"  # type: ignore[index]
    assert change(UnfenceBrokerRecord(4, 17))["change"] == "broker_unfenced"  # type: ignore[index]
    assert change(UnregisterBrokerRecord(4, 17))["change"] == "broker_unregistered"  # type: ignore[index]
    brc = BrokerRegistrationChangeRecord
    assert change(brc(4, 17, fenced=FENCE_YES))["change"] == "broker_fenced"  # type: ignore[index]
    assert change(brc(4, 17, fenced=FENCE_NO))["change"] == "broker_unfenced"  # type: ignore[index]
    shut = change(brc(4, 17, in_controlled_shutdown=1))
    assert shut["change"] == "broker_controlled_shutdown"  # type: ignore[index]
    assert change(brc(4, 17)) is None


def test_topic_and_partition_changes() -> None:
    assert change(TopicRecord("orders", "t1"))["change"] == "topic_created"  # type: ignore[index]
    deleted = change(RemoveTopicRecord("t1"))
    assert deleted["change"] == "topic_deleted" and deleted["topic"] == "orders"  # type: ignore[index]
    created = change(PartitionRecord("t1", 0, (4, 5), (4, 5), leader=4))
    assert created["change"] == "partition_created" and created["leader"] == 4  # type: ignore[index]
    elected = change(PartitionChangeRecord("t1", 2, isr=(5,), leader=5))
    assert elected == {
        "change": "partition_leader_elected",
        "topic": "orders",
        "partition": 2,
        "leader": 5,
        "unclean": False,
        "isr": [5],
        "offset": 42,
    }
    unclean = change(PartitionChangeRecord("t1", 2, leader=6, leader_recovery_state=RECOVERING))
    assert unclean["unclean"] is True and "isr" not in unclean  # type: ignore[index]
    isr = change(PartitionChangeRecord("t1", 2, isr=(5, 6)))
    assert isr["change"] == "isr_changed" and isr["isr"] == [5, 6]  # type: ignore[index]
    assert change(PartitionChangeRecord("t1", 2)) is None
    assert change(NoOpRecord()) is None
    assert change(ConfigRecord(2, "orders", "x", "y")) is None


def _capture(formatter: logging.Formatter) -> tuple[io.StringIO, logging.Handler]:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(formatter)
    logger = logging.getLogger("kraft.state_change")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return buf, handler


def test_json_format_is_one_object_per_line() -> None:
    buf, handler = _capture(JsonFormatter())
    try:
        log_state_change(FenceBrokerRecord(4, 17), 9, NAMES.get)
        log_state_change(NoOpRecord(), 10, NAMES.get)  # not a state change: no line
        log_state_change(PartitionChangeRecord("t1", 0, leader=5), 11, NAMES.get)
    finally:
        logging.getLogger("kraft.state_change").removeHandler(handler)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["event"] == "state_change" and first["change"] == "broker_fenced"
    assert first["broker_id"] == 4 and first["offset"] == 9
    assert {"ts", "level", "logger", "msg"} <= set(first)
    assert second["change"] == "partition_leader_elected" and second["topic"] == "orders"


def test_text_format_has_the_fields() -> None:
    buf, handler = _capture(TextFormatter())
    try:
        log_state_change(UnfenceBrokerRecord(4, 17), 9, NAMES.get)
    finally:
        logging.getLogger("kraft.state_change").removeHandler(handler)
    line = buf.getvalue().strip()
    assert "broker_unfenced" in line and "broker_id=4" in line and "\n" not in line
