"""ReplayMetrics: the active controller's replay observer (metrics and state-change log).

The pure controller tells its observer of each batch it replays as the active
controller, before replaying it (QuorumController.observer); this one counts the
fences and partition leader elections written and logs each state change
(kraft.logs, logger `kraft.state_change`). It reads, never changes, the
controller: state changes only in replay.

A batch's counters are added once, not per record: a fence of a broker in a
million ISRs is a million elections and ISR changes. The partitions of a large
batch get one summary state-change line, not one each: a JSON line costs
~30 us, three times the replay, and a million of them held the active
controller's loop for tens of seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kraft.logs import log_state_change, log_state_changes_summary
from kraft.server.metrics import ControllerMetrics
from metadata_log.records import (
    NO_LEADER_CHANGE,
    RECOVERING,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    TopicRecord,
)

# A replayed slice of more partition records than this logs one summary line.
STATE_CHANGE_DETAIL_MAX = 256


class ReplayMetrics:
    """A QuorumController ReplayObserver over the node's ControllerMetrics."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self.metrics = metrics

    def replaying(self, controller: Any, base_offset: int, records: Sequence[Record]) -> None:
        detail = len(records) <= STATE_CHANGE_DETAIL_MAX
        topics = controller.image.topics
        # Names as replay will have them: a topic created earlier in this batch is
        # not in the image yet; a removed one still is (the batch is not replayed).
        created: dict[str, str] = {}

        def topic_name(topic_id: str) -> str | None:
            topic = topics.get(topic_id)
            return topic.name if topic is not None else created.get(topic_id)

        fences = clean = unclean = isr_only = partitions = 0
        off = base_offset
        for record in records:
            t = type(record)
            if detail or (t is not PartitionChangeRecord and t is not PartitionRecord):
                log_state_change(record, off, topic_name)
            if t is PartitionChangeRecord:
                if record.leader != NO_LEADER_CHANGE:
                    if record.leader_recovery_state == RECOVERING:
                        unclean += 1
                    else:
                        clean += 1
                elif record.isr is not None:
                    isr_only += 1
            elif t is PartitionRecord:
                partitions += 1
            elif t is FenceBrokerRecord:
                fences += 1
            elif t is TopicRecord:
                created[record.topic_id] = record.name
            off += 1
        m = self.metrics
        if fences:
            m.fences.inc(fences)
        if clean:
            m.partition_elections.labels(unclean="false").inc(clean)
        if unclean:
            m.partition_elections.labels(unclean="true").inc(unclean)
        if not detail and (clean or unclean or isr_only or partitions):
            log_state_changes_summary(
                base_offset,
                off - 1,
                partition_created=partitions,
                partition_leader_elected=clean + unclean,
                unclean=unclean,
                isr_changed=isr_only,
            )
