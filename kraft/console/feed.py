"""The console's feed: the latest state changes of the committed log. Pure.

`GET /ui/api/changes?after=N` reads the committed log from offset N+1 (the first
poll: the last FIRST_WINDOW offsets) and keeps the records a person watches for:
registrations, fences and unfences, controlled shutdowns, leader elections and ISR
changes, topics created and deleted, config and feature changes. Each change is
one line with its offset and append time. A poll reads at most `max_bytes` of log
and answers `next_after`, the last offset it looked at, so a tab that fell behind
(a fence of a broker in 100k ISRs is 100k records) catches up over a few polls
instead of one large read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metadata_log.batch import decode_batches
from metadata_log.records import (
    NO_LEADER_CHANGE,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

FIRST_WINDOW = 5000  # offsets looked back on a tab's first poll
MAX_BYTES = 256 * 1024  # log read per poll
MAX_CHANGES = 100  # changes per reply (the newest)


def describe_change(rec: Any, topic_name: Callable[[str], str]) -> tuple[str, str] | None:
    """(kind, text) of a record worth showing, None for the others (NoOps,
    PartitionRecords of a new topic, which its TopicRecord stands for)."""
    match rec:
        case RegisterBrokerRecord():
            return "register", f"broker {rec.broker_id} registered (epoch {rec.broker_epoch})"
        case UnregisterBrokerRecord():
            return "unregister", f"broker {rec.broker_id} unregistered"
        case FenceBrokerRecord():
            return "fence", f"broker {rec.id} fenced (epoch {rec.epoch})"
        case UnfenceBrokerRecord():
            return "unfence", f"broker {rec.id} unfenced (epoch {rec.epoch})"
        case BrokerRegistrationChangeRecord():
            parts = []
            if rec.fenced == 1:
                parts.append("fenced")
            elif rec.fenced == -1:
                parts.append("unfenced")
            if rec.in_controlled_shutdown == 1:
                parts.append("entered controlled shutdown")
            what = " and ".join(parts) or "registration changed"
            kind = "fence" if rec.fenced == 1 else "unfence" if rec.fenced == -1 else "shutdown"
            return kind, f"broker {rec.broker_id} {what}"
        case PartitionChangeRecord():
            where = f"{topic_name(rec.topic_id)}-{rec.partition_id}"
            parts = []
            kind = "isr"
            if rec.leader != NO_LEADER_CHANGE:
                kind = "election"
                parts.append(f"leader -> {rec.leader}" if rec.leader >= 0 else "no leader")
            if rec.isr is not None:
                parts.append(f"isr {list(rec.isr)}")
            if rec.replicas is not None:
                kind = "reassignment" if kind == "isr" else kind
                parts.append(f"replicas {list(rec.replicas)}")
            if rec.adding_replicas:
                parts.append(f"adding {list(rec.adding_replicas)}")
            if rec.removing_replicas:
                parts.append(f"removing {list(rec.removing_replicas)}")
            return kind, f"{where}: " + (", ".join(parts) or "changed")
        case TopicRecord():
            return "topic", f"topic {rec.name} created"
        case RemoveTopicRecord():
            return "topic", f"topic {topic_name(rec.topic_id)} deleted"
        case ConfigRecord():
            value = "deleted" if rec.value is None else f"= {rec.value}"
            target = rec.resource_name or "cluster"
            return "config", f"config {rec.name} of {target} {value}"
        case FeatureLevelRecord():
            return "feature", f"feature {rec.name} at level {rec.feature_level}"
    return None


def first_offset(after: int, high_watermark: int, log_start: int) -> int:
    """Where a poll starts reading: after the tab's last offset, within the log."""
    start = after + 1 if after >= 0 else high_watermark - FIRST_WINDOW
    return max(start, log_start, 0)


def changes_since(
    data: bytes,
    start: int,
    high_watermark: int,
    topic_name: Callable[[str], str],
    limit: int = MAX_CHANGES,
    created: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The changes in `data` (whole batches read from `start`) below the high
    watermark: `{changes: [{offset, append_time_ms, kind, text}], next_after}`.

    `created` (topic id -> name) gets the TopicRecords read, and names a topic
    before `topic_name` does: a deleted topic is no longer in the image."""
    changes: list[dict[str, Any]] = []
    last = start - 1
    if created is None:
        created = {}

    def name(topic_id: str) -> str:
        return created.get(topic_id) or topic_name(topic_id)

    for batch in decode_batches(data, "<log>") if data else ():
        for i, rec in enumerate(batch.records):
            offset = batch.base_offset + i
            if offset >= high_watermark:
                break  # not committed yet
            if offset < start:
                continue  # the batch holding `start` begins before it
            last = offset
            if batch.control:
                continue
            if type(rec) is TopicRecord:
                created[rec.topic_id] = rec.name
            d = describe_change(rec, name)
            if d is not None:
                changes.append(
                    {
                        "offset": offset,
                        "append_time_ms": batch.append_time_ms,
                        "kind": d[0],
                        "text": d[1],
                    }
                )
    return {
        "high_watermark": high_watermark,
        "next_after": last,
        "changes": changes[-limit:],
    }
