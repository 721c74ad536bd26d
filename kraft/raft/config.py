"""RaftConfig: Kafka's controller.quorum.* settings (defaults are Kafka's, stated
once in the config registry, kraft.config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraft.config import default_of, value_of

# RaftConfig field -> its key in the config registry.
CONFIG_KEYS = {
    "election_timeout_ms": "controller.quorum.election.timeout.ms",
    "fetch_timeout_ms": "controller.quorum.fetch.timeout.ms",
    "fetch_max_wait_ms": "controller.quorum.fetch.max.wait.ms",
    "high_watermark_linger_ms": "controller.quorum.high.watermark.linger.ms",
    "request_timeout_ms": "controller.quorum.request.timeout.ms",
}


@dataclass(frozen=True, slots=True)
class RaftConfig:
    # controller.quorum.election.timeout.ms: T of [T, 2T]
    election_timeout_ms: int = default_of(CONFIG_KEYS["election_timeout_ms"])
    fetch_timeout_ms: int = default_of(CONFIG_KEYS["fetch_timeout_ms"])
    # how long the leader parks an empty fetch
    fetch_max_wait_ms: int = default_of(CONFIG_KEYS["fetch_max_wait_ms"])
    # How long the leader holds the news of a moved high watermark for data to ride
    # with it. A writer appends its next batch right after its commit: answering at
    # once with the HW alone would send that batch only on the follower's next
    # fetch, a whole extra round trip on every commit at low load. 0: at once.
    high_watermark_linger_ms: int = default_of(CONFIG_KEYS["high_watermark_linger_ms"])
    request_timeout_ms: int = default_of(CONFIG_KEYS["request_timeout_ms"])
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms (not configurable here)
    fetch_max_bytes: int = 1 << 20
    snapshot_chunk_bytes: int = 1 << 20
    # The leader resigns when a majority has not fetched within this many fetch timeouts.
    check_quorum_factor: float = 1.5

    @classmethod
    def from_config(cls, config: Any) -> RaftConfig:
        """The configured controller.quorum.* values (a kraft.config.Config, or None
        for every default)."""
        return cls(**{field: value_of(config, key) for field, key in CONFIG_KEYS.items()})

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * self.check_quorum_factor)
