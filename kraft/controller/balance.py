"""Automatic preferred-leader balancing: Kafka's maybeBalancePartitionLeaders.

A partition whose leader is not its first replica is imbalanced (Kafka's
`hasPreferredLeader`; a leaderless one counts too, as in Kafka's
preferredreplicaimbalancecount). The set is kept by replay in the controller's
ReplicationIndex, so the count is never a scan.

Every `leader.imbalance.check.interval.seconds` the shell asks for one batch:
a PREFERRED election (cause REBALANCE) for each imbalanced partition whose
preferred replica is a valid leader (in the ISR, unfenced, not shutting down),
in (topic id, partition id) order. A batch is bounded twice, so that the event
queue is never held long and heartbeats keep their latency: at most
`leader.imbalance.max.elections.per.batch` records and at most KEYS_PER_TURN
partitions looked at. A round walks a snapshot of the imbalanced set taken at
its start, so partitions whose preferred replica cannot lead are looked at once
per round, not once per batch; while a round has partitions left the reply says
`more` and the shell asks again at once (after replaying the batch).

The round's position is the active controller's soft state (like the heartbeat
sessions): it is dropped on activate/deactivate.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from kraft.controller.partition_change import Election
from metadata_log.records import MetadataRecord

if TYPE_CHECKING:
    from kraft.controller.quorum_controller import PartitionKey, QuorumController

# Partitions looked at per batch at most (about 2-4 ms of builders).
KEYS_PER_BATCH = 8192


def sorted_keys(keys: Iterable[PartitionKey]) -> list[PartitionKey]:
    """Keys in (topic id, partition id) order, grouped first (sorting 100k
    (str, int) pairs compares the same long topic id a million times)."""
    by_topic: dict[str, list[int]] = {}
    for topic_id, pid in keys:
        by_topic.setdefault(topic_id, []).append(pid)
    return [(t, pid) for t in sorted(by_topic) for pid in sorted(by_topic[t])]


class LeaderBalancer:
    """One balancing round's position over the imbalanced partitions."""

    def __init__(self) -> None:
        self._round: Iterator[PartitionKey] | None = None

    def reset(self) -> None:
        self._round = None

    def next_batch(
        self, ctrl: QuorumController, max_elections: int
    ) -> tuple[list[MetadataRecord], bool] | None:
        """(records, more) of the next batch; None when nothing is imbalanced."""
        imbalanced = ctrl.index.imbalanced
        if not imbalanced:
            self._round = None
            return None
        if self._round is None:
            self._round = iter(sorted_keys(imbalanced))
        from kraft.controller.quorum_controller import _AcceptableLeaders  # a cycle at import

        topics = ctrl.image.topics
        # once per broker met, not per registered broker (10,000 of them: ~3 ms)
        acceptable = _AcceptableLeaders(ctrl._acceptable).__getitem__
        records: list[MetadataRecord] = []
        for scanned, key in enumerate(self._round, 1):
            topic = topics.get(key[0])
            # replayed since the round began: balanced now, or the topic is gone
            if key in imbalanced and topic is not None and key[1] in topic.partitions:
                rec = (
                    ctrl.partition_builder(topic, key[1], acceptable, unclean=False)
                    .set_election(Election.PREFERRED)
                    .build()
                )
                if rec is not None:
                    records.append(rec)
            if len(records) >= max_elections or scanned >= KEYS_PER_BATCH:
                return records, True
        self._round = None
        return records, False


def balance_reply(elections: int, more: bool, imbalanced: int) -> dict[str, Any]:
    return {"elections": elections, "more": more, "imbalanced": imbalanced}
