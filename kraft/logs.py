"""Structured logs: one line per event, text (`key=value`) or JSON (`--log-format json`).

Callers log with `extra={"event": ..., ...}`; the fields beyond the standard
LogRecord attributes become the line's fields.

`state_change(record, offset, topic_name)` names the cluster state change a
metadata record makes (Kafka's state-change log): the active controller logs one
`{"event": "state_change", "change": ...}` line per record it writes that
registers, fences, unfences or unregisters a broker, creates or deletes a topic,
or elects a partition leader or changes an ISR.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from metadata_log.records import (
    FENCE_NO,
    FENCE_YES,
    NO_LEADER_CHANGE,
    RECOVERING,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info and record.levelno >= logging.ERROR:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        extra = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{ts} {record.levelname:<5} {record.name}: {record.getMessage()}"
        if extra:
            line += f" [{extra}]"
        if record.exc_info and record.levelno >= logging.ERROR:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def state_change(
    record: Any, offset: int, topic_name: Callable[[str], str | None]
) -> dict[str, Any] | None:
    """The log fields of the state change `record` makes at `offset`, or None."""
    t = type(record)
    out: dict[str, Any] | None = None
    if t is RegisterBrokerRecord:
        out = {
            "change": "broker_registered",
            "broker_id": record.broker_id,
            "broker_epoch": record.broker_epoch,
            "incarnation_id": record.incarnation_id,
            "fenced": record.fenced,
        }
    elif t is UnregisterBrokerRecord:
        out = {"change": "broker_unregistered", "broker_id": record.broker_id}
    elif t is FenceBrokerRecord:
        out = {"change": "broker_fenced", "broker_id": record.id, "broker_epoch": record.epoch}
    elif t is UnfenceBrokerRecord:
        out = {"change": "broker_unfenced", "broker_id": record.id, "broker_epoch": record.epoch}
    elif t is BrokerRegistrationChangeRecord:
        if record.fenced == FENCE_YES:
            change = "broker_fenced"
        elif record.fenced == FENCE_NO:
            change = "broker_unfenced"
        elif record.in_controlled_shutdown == 1:
            change = "broker_controlled_shutdown"
        else:
            return None
        out = {"change": change, "broker_id": record.broker_id, "broker_epoch": record.broker_epoch}
        if record.in_controlled_shutdown == 1:
            out["in_controlled_shutdown"] = True
    elif t is TopicRecord:
        out = {"change": "topic_created", "topic": record.name, "topic_id": record.topic_id}
    elif t is RemoveTopicRecord:
        out = {
            "change": "topic_deleted",
            "topic": topic_name(record.topic_id),
            "topic_id": record.topic_id,
        }
    elif t is PartitionRecord:
        out = {
            "change": "partition_created",
            "topic": topic_name(record.topic_id),
            "partition": record.partition_id,
            "leader": record.leader,
            "isr": list(record.isr),
            "replicas": list(record.replicas),
        }
    elif t is PartitionChangeRecord:
        elected = record.leader != NO_LEADER_CHANGE
        if not elected and record.isr is None:
            return None
        out = {
            "change": "partition_leader_elected" if elected else "isr_changed",
            "topic": topic_name(record.topic_id),
            "partition": record.partition_id,
        }
        if elected:
            out["leader"] = record.leader
            out["unclean"] = record.leader_recovery_state == RECOVERING
        if record.isr is not None:
            out["isr"] = list(record.isr)
    if out is not None:
        out["offset"] = offset
    return out


_state_log = logging.getLogger("kraft.state_change")


def log_state_changes_summary(first_offset: int, last_offset: int, **counts: int) -> None:
    """One `state_change` line ("partitions_changed") for the partition changes of a
    large replayed slice, with how many of each kind (and their offsets)."""
    if _state_log.isEnabledFor(logging.INFO):
        _state_log.info(
            "partitions_changed",
            extra={
                "event": "state_change",
                "change": "partitions_changed",
                "first_offset": first_offset,
                "last_offset": last_offset,
                **counts,
            },
        )


def log_state_change(record: Any, offset: int, topic_name: Callable[[str], str | None]) -> None:
    """One `state_change` line (logger `kraft.state_change`) if the record changes state."""
    if not _state_log.isEnabledFor(logging.INFO):
        return
    fields = state_change(record, offset, topic_name)
    if fields is not None:
        _state_log.info("%s", fields["change"], extra={"event": "state_change", **fields})
