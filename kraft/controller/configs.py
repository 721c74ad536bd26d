"""Topic configs the controller accepts, with Kafka's names and validators."""

from __future__ import annotations

from collections.abc import Callable

from kraft.controller.errors import ApiError

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS = "min.insync.replicas"


def _long_at_least(lo: int) -> Callable[[str], bool]:
    def check(v: str) -> bool:
        try:
            return int(v) >= lo
        except ValueError:
            return False

    return check


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda v: v in choices


def _cleanup_policy(v: str) -> bool:
    parts = [p.strip() for p in v.split(",")]
    return bool(parts) and all(p in ("delete", "compact") for p in parts)


TOPIC_CONFIGS: dict[str, tuple[Callable[[str], bool], str]] = {
    "cleanup.policy": (_cleanup_policy, "delete, compact or both"),
    "compression.type": (
        _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        "producer, uncompressed, gzip, snappy, lz4 or zstd",
    ),
    "retention.ms": (_long_at_least(-1), "an integer >= -1"),
    "retention.bytes": (_long_at_least(-1), "an integer >= -1"),
    "segment.bytes": (_long_at_least(14), "an integer >= 14"),
    "segment.ms": (_long_at_least(1), "an integer >= 1"),
    "max.message.bytes": (_long_at_least(0), "an integer >= 0"),
    MIN_INSYNC_REPLICAS: (_long_at_least(1), "an integer >= 1"),
    "message.timestamp.type": (
        _one_of("CreateTime", "LogAppendTime"),
        "CreateTime or LogAppendTime",
    ),
    UNCLEAN_LEADER_ELECTION_ENABLE: (_one_of("true", "false"), "true or false"),
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
