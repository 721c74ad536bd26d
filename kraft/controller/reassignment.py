"""Partition reassignment (KIP-455): a plan's validation and its change records.

Kafka's ReplicationControlManager.alterPartitionReassignments, with its
PartitionReassignmentReplicas and PartitionReassignmentRevert:

1. a target different from the replicas starts a reassignment: the replicas
   become the target followed by the replicas it drops (`removing_replicas`),
   and `adding_replicas` lists the target's new ones; a target that only
   reorders the current replicas completes at once;
2. the leader adds each new replica to the ISR once it has caught up
   (AlterPartition); when every adding replica is in the ISR, the builder's
   completion step writes replicas = target and clears adding/removing, and the
   leader moves if it was being removed (`partition_change.completed_reassignment`);
3. `replicas: null` cancels: back to the original replicas (the current ones
   without the adding ones), the ISR without the adding ones; if that leaves no
   ISR, the first original replica is taken, which is an unclean election, so
   it is refused unless the topic allows unclean election (as Kafka).

The whole plan is validated before any record is built: one bad entry fails
the request with Kafka's error name, and nothing is written. Two deliberate
choices beyond Kafka: a target with fewer replicas than the topic's
min.insync.replicas is refused (such a partition could never take acks=all
writes), and a new target over an ongoing reassignment replaces its adding and
removing lists entirely (Kafka keeps a stale adding list when the new target
adds nothing), and a plan for a leaderless partition of a topic that allows
unclean election elects at once (Kafka leaves that to its periodic unclean
election check, every 5 minutes).

Pure: the functions read the controller's image and return records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kraft.controller.configs import MIN_INSYNC_REPLICAS
from kraft.controller.errors import ApiError
from kraft.controller.requests import AlterPartitionReassignmentsRequest, ReassignmentTarget
from metadata_log.image import PartitionRegistration, TopicImage
from metadata_log.records import TOPIC_RESOURCE, MetadataRecord, PartitionChangeRecord

if TYPE_CHECKING:
    from kraft.controller.quorum_controller import QuorumController


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    """Kafka's PartitionReassignmentReplicas: the union replica list and its diff."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @classmethod
    def of(cls, current: tuple[int, ...], target: tuple[int, ...]) -> ReassignmentReplicas:
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        return cls((*target, *removing), adding, removing)


@dataclass(frozen=True, slots=True)
class ReassignmentRevert:
    """Kafka's PartitionReassignmentRevert: where a cancel goes back to."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool

    @classmethod
    def of(cls, p: PartitionRegistration) -> ReassignmentRevert:
        replicas = tuple(r for r in p.replicas if r not in p.adding_replicas)
        isr = tuple(r for r in p.isr if r not in p.adding_replicas)
        if isr:
            return cls(replicas, isr, False)
        # every ISR member was being added: only an unclean choice is left
        return cls(replicas, replicas[:1], True)


def reassignment_view(topic_name: str, pid: int, p: PartitionRegistration) -> dict[str, Any]:
    """One partition as the reassignment routes show it (Kafka's
    ListPartitionReassignments: the current union replicas and the diff)."""
    return {
        "topic": topic_name,
        "partition": pid,
        "replicas": list(p.replicas),
        "adding_replicas": list(p.adding_replicas),
        "removing_replicas": list(p.removing_replicas),
    }


def _configured_min_isr(ctrl: QuorumController, topic: TopicImage) -> int:
    value = ctrl.image.configs.get((TOPIC_RESOURCE, topic.name), {}).get(MIN_INSYNC_REPLICAS)
    return ctrl.config.min_insync_replicas if value is None else int(value)


def _validate(
    ctrl: QuorumController, target: ReassignmentTarget
) -> tuple[TopicImage, PartitionRegistration]:
    """The entry's topic and partition, or the ApiError that refuses the plan."""
    name = f"{target.topic}-{target.partition}"
    topic = ctrl.image.topic_by_name(target.topic)
    if topic is None:
        raise ApiError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {target.topic!r} does not exist")
    p = topic.partitions.get(target.partition)
    if p is None:
        raise ApiError("UNKNOWN_TOPIC_OR_PARTITION", f"partition {name} does not exist")
    if target.replicas is None:
        if not p.reassigning:
            raise ApiError(
                "NO_REASSIGNMENT_IN_PROGRESS", f"no reassignment of {name} is in progress"
            )
        if ReassignmentRevert.of(p).unclean and not ctrl._unclean_enabled(topic.name):
            raise ApiError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"cancelling the reassignment of {name} would need an unclean leader "
                "election (every ISR member is a replica being added)",
            )
        return topic, p
    replicas = target.replicas
    if not replicas:
        raise ApiError("INVALID_REPLICA_ASSIGNMENT", f"the target of {name} is an empty list")
    if len(set(replicas)) != len(replicas):
        raise ApiError(
            "INVALID_REPLICA_ASSIGNMENT",
            f"the target of {name} lists a replica twice: {list(replicas)}",
        )
    for r in replicas:
        if r not in ctrl.image.brokers:
            raise ApiError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"the target of {name} names broker {r}, which is not registered",
            )
    min_isr = _configured_min_isr(ctrl, topic)
    if len(replicas) < min_isr:
        raise ApiError(
            "INVALID_REPLICA_ASSIGNMENT",
            f"the target of {name} has {len(replicas)} replica(s), fewer than the "
            f"topic's min.insync.replicas {min_isr}",
        )
    return topic, p


def _change(
    ctrl: QuorumController,
    topic: TopicImage,
    pid: int,
    p: PartitionRegistration,
    target: tuple[int, ...] | None,
) -> PartitionChangeRecord | None:
    if target is None:
        revert = ReassignmentRevert.of(p)
        return (
            ctrl.partition_builder(topic, pid)
            .set_target_isr(revert.isr)
            .set_target_replicas(revert.replicas)
            .set_target_removing(())
            .set_target_adding(())
            .build()
        )
    plan = ReassignmentReplicas.of(p.replicas, target)
    return (
        ctrl.partition_builder(topic, pid)
        .set_target_replicas(plan.replicas)
        .set_target_removing(plan.removing)
        .set_target_adding(plan.adding)
        .build()
    )


def alter_partition_reassignments(
    ctrl: QuorumController, req: AlterPartitionReassignmentsRequest
) -> tuple[list[MetadataRecord], dict[str, Any]]:
    """The records and reply of a whole plan, or ApiError with nothing built."""
    checked = [_validate(ctrl, t) for t in req.partitions]
    records: list[MetadataRecord] = []
    out: list[dict[str, Any]] = []
    for target, (topic, p) in zip(req.partitions, checked, strict=True):
        rec = _change(ctrl, topic, target.partition, p, target.replicas)
        after = p
        if rec is not None:
            records.append(rec)
            after = p.merge(rec)
        out.append(reassignment_view(topic.name, target.partition, after))
    return records, {"partitions": out}


def list_partition_reassignments(ctrl: QuorumController) -> list[dict[str, Any]]:
    """The ongoing reassignments, by topic name and partition id (from the index
    of reassigning partitions, not a scan)."""
    topics = ctrl.image.topics
    rows = []
    for topic_id, pid in ctrl.index.reassigning:
        topic = topics[topic_id]
        rows.append(reassignment_view(topic.name, pid, topic.partitions[pid]))
    rows.sort(key=lambda r: (r["topic"], r["partition"]))
    return rows
