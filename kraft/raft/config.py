"""RaftConfig: Kafka's controller.quorum.* settings (defaults are Kafka's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms: T of [T, 2T]
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    fetch_max_wait_ms: int = 500  # how long the leader parks an empty fetch
    # How long the leader holds the news of a moved high watermark for data to ride
    # with it. A writer appends its next batch right after its commit: answering at
    # once with the HW alone would send that batch only on the follower's next
    # fetch, a whole extra round trip on every commit at low load. 0: at once.
    high_watermark_linger_ms: int = 1
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_bytes: int = 1 << 20
    snapshot_chunk_bytes: int = 1 << 20
    # The leader resigns when a majority has not fetched within this many fetch timeouts.
    check_quorum_factor: float = 1.5

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * self.check_quorum_factor)
