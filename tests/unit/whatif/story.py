"""Hand-made stories: a log written through the real QuorumController, step by step.

`Story` is the generator's loop without its randomness: time is set by the test,
live brokers heartbeat every interval, the session timer runs at every step, and
each result is appended as the controller would (its own batch). The test says
who is alive when, so the answer is known in advance.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import ControllerConfig, ControllerResult, QuorumController
from kraft.controller.requests import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    IsrMember,
    RegisterBrokerRequest,
)
from metadata_log.batch import encode_batch
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    RECOVERED,
    BrokerFeature,
    Endpoint,
    FeatureLevelRecord,
    LeaderChangeMessage,
)
from spark_replay.generator import METADATA_DIR, SegmentWriter

T0 = 1_700_000_000_000
CLUSTER = "story"
STEP_MS = 500


class Story:
    def __init__(self, directory: Path, session_ms: int = 9000, heartbeat_ms: int = 2000) -> None:
        self.dir = directory
        self.sink = SegmentWriter(directory / METADATA_DIR)
        self.heartbeat_ms = heartbeat_ms
        self.ctl = QuorumController(
            ControllerConfig(3000, frozenset({3000}), CLUSTER, session_timeout_ms=session_ms),
            random.Random(7),
        )
        self.now = T0
        self.alive: set[int] = set()
        self.epochs: dict[int, int] = {}
        self.last_hb: dict[int, int] = {}
        self._rng = random.Random(1)
        self._write([LeaderChangeMessage(3000, (3000,), (3000,))], control=True)
        self.ctl.activate(self.now)
        # metadata.version only: no eligible.leader.replicas feature (ELR off)
        self._commit(
            ControllerResult(
                (FeatureLevelRecord(METADATA_VERSION_FEATURE, LATEST_METADATA_VERSION),)
            )
        )

    def _write(self, records: list, control: bool = False) -> None:  # noqa: ANN001
        base = self.sink.next_offset
        self.sink.append(encode_batch(base, 1, self.now, records, control), len(records))
        if not control:
            self.ctl.replay_batch(base, records, self.now)
            self.ctl.on_commit(base + len(records) - 1)

    def _commit(self, result: ControllerResult | None) -> ControllerResult | None:
        if result is None:
            return None
        result = result.drained()
        if result.records:
            self._write(list(result.records))
        return result

    # ------------------------------------------------------------ brokers

    def register(self, b: int, rack: str | None = None) -> None:
        req = RegisterBrokerRequest(
            b,
            CLUSTER,
            str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),),
            rack,
            (BrokerFeature(METADATA_VERSION_FEATURE, 1, LATEST_METADATA_VERSION),),
        )
        result = self._commit(self.ctl.register_broker(req, self.now, self.sink.next_offset))
        assert result is not None
        self.epochs[b] = result.reply["broker_epoch"]
        self.alive.add(b)
        self.heartbeat(b)

    def heartbeat(self, b: int, want_shutdown: bool = False) -> dict:
        req = BrokerHeartbeatRequest(
            b, self.epochs[b], self.sink.next_offset - 1, False, want_shutdown
        )
        result = self._commit(self.ctl.heartbeat(req, self.now))
        assert result is not None
        self.last_hb[b] = self.now
        return result.reply

    def run_until(self, t: int) -> None:
        """Steps to time t: live brokers heartbeat, the session timer fences."""
        while self.now < t:
            self.now = min(t, self.now + STEP_MS)
            for b in sorted(self.alive):
                if self.now - self.last_hb.get(b, 0) >= self.heartbeat_ms:
                    self.heartbeat(b)
            while self._commit(self.ctl.maybe_fence_stale_broker(self.now)) is not None:
                pass

    def stop(self, b: int) -> None:
        """The broker goes silent now."""
        self.alive.discard(b)

    def resume(self, b: int) -> None:
        """The same process is heard from again (a pause, not a restart)."""
        self.alive.add(b)
        self.heartbeat(b)

    # ------------------------------------------------------------ topics

    def create_topic(self, name: str, assignments: list[tuple[int, ...]]) -> str:
        req = CreateTopicRequest(name, None, None, tuple(assignments), {})
        result = self._commit(self.ctl.create_topic(req, self.now))
        assert result is not None
        return result.reply["topic_id"]

    def shrink_isr(self, topic_id: str, pid: int, isr: tuple[int, ...]) -> None:
        p = self.ctl.image.topics[topic_id].partitions[pid]
        req = AlterPartitionRequest(
            p.leader,
            self.epochs[p.leader],
            topic_id,
            pid,
            p.leader_epoch,
            p.partition_epoch,
            tuple(IsrMember(r, self.epochs[r]) for r in isr),
            RECOVERED,
        )
        self._commit(self.ctl.alter_partition(req, self.now))

    def close(self) -> Path:
        self.sink.close()
        return self.dir


__all__ = ["ApiError", "Story", "T0"]
