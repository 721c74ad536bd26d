"""Topic configs the controller accepts, with Kafka's names and validators."""

from __future__ import annotations

import re
from collections.abc import Callable

from kraft.controller.errors import ApiError
from kraft.controller.requests import INT32_MAX, INT64_MAX

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS = "min.insync.replicas"


# Kafka's ConfigDef reads a number trimmed, in decimal digits, within its type's
# range (Java's parseInt/parseLong): no "1_000", no 40 digits.
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT_MAX, _LONG_MAX = INT32_MAX, INT64_MAX  # Java's INT and LONG


def _number_at_least(lo: int, hi: int) -> Callable[[str], bool]:
    def check(v: str) -> bool:
        text = v.strip()
        return _DECIMAL.fullmatch(text) is not None and lo <= int(text) <= hi

    return check


def _long_at_least(lo: int) -> Callable[[str], bool]:
    return _number_at_least(lo, _LONG_MAX)


def _int_at_least(lo: int) -> Callable[[str], bool]:
    return _number_at_least(lo, _INT_MAX)


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda v: v in choices


def _boolean(v: str) -> bool:
    # Kafka's ConfigDef reads a BOOLEAN trimmed and in any case ("TRUE", " true ")
    return v.strip().lower() in ("true", "false")


def config_true(value: str | None) -> bool:
    """A stored boolean config as Kafka reads it (`Boolean.parseBoolean`, any case)."""
    return value is not None and value.strip().lower() == "true"


def _cleanup_policy(v: str) -> bool:
    parts = [p.strip() for p in v.split(",")]
    return bool(parts) and all(p in ("delete", "compact") for p in parts)


TOPIC_CONFIGS: dict[str, tuple[Callable[[str], bool], str]] = {
    "cleanup.policy": (_cleanup_policy, "delete, compact or both"),
    "compression.type": (
        _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        "producer, uncompressed, gzip, snappy, lz4 or zstd",
    ),
    "retention.ms": (_long_at_least(-1), f"an integer in -1..{_LONG_MAX}"),
    "retention.bytes": (_long_at_least(-1), f"an integer in -1..{_LONG_MAX}"),
    "segment.bytes": (_int_at_least(14), f"an integer in 14..{_INT_MAX}"),
    "segment.ms": (_long_at_least(1), f"an integer in 1..{_LONG_MAX}"),
    "max.message.bytes": (_int_at_least(0), f"an integer in 0..{_INT_MAX}"),
    MIN_INSYNC_REPLICAS: (_int_at_least(1), f"an integer in 1..{_INT_MAX}"),
    "message.timestamp.type": (
        _one_of("CreateTime", "LogAppendTime"),
        "CreateTime or LogAppendTime",
    ),
    UNCLEAN_LEADER_ELECTION_ENABLE: (_boolean, "true or false"),
}


def validate_topic_configs(configs: dict[str, str | None]) -> None:
    for key, value in configs.items():
        spec = TOPIC_CONFIGS.get(key)
        if spec is None:
            raise ApiError("INVALID_CONFIG", f"unknown topic config {key!r}")
        if value is None:
            continue
        check, what = spec
        if not check(value):
            raise ApiError("INVALID_CONFIG", f"invalid value {value!r} for {key}: must be {what}")
