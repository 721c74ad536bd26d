"""Topic commands of the pure controller: CreateTopics, DeleteTopics,
CreatePartitions and IncrementalAlterConfigs, with Kafka's validation.

Each takes the QuorumController (whose public method has already checked that it
is active and taken the command's time) and returns its records and reply; like
every command, it reads the image and changes nothing (records first, then
replay). Kept apart from quorum_controller.py as kraft/controller/reassignment.py
is: the controller's class keeps the broker lifecycle and replay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kraft.controller.configs import (
    MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    config_true,
    validate_topic_configs,
)
from kraft.controller.errors import ApiError
from kraft.controller.placement import place_replicas
from kraft.controller.requests import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
)
from metadata_log.image import PartitionRegistration, TopicImage
from metadata_log.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    new_topic_id,
)

if TYPE_CHECKING:
    from kraft.controller.quorum_controller import QuorumController

# A command's records and its reply (the controller wraps them in a ControllerResult).
Written = tuple[list[MetadataRecord], dict[str, Any]]

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249


def usable_brokers(c: QuorumController) -> dict[int, str | None]:
    return {
        bid: b.rack
        for bid, b in c.image.brokers.items()
        if not b.fenced and not b.in_controlled_shutdown
    }


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise ApiError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ApiError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not _TOPIC_NAME.fullmatch(name):  # match's $ also takes a final \n
        raise ApiError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'",
        )


def new_partitions(
    c: QuorumController,
    topic_id: str,
    first_partition_id: int,
    assignments: list[tuple[int, ...]],
) -> list[MetadataRecord]:
    out: list[MetadataRecord] = []
    for i, replicas in enumerate(assignments):
        isr = tuple(r for r in replicas if c._acceptable(r))
        if not isr:
            raise ApiError(
                "INVALID_REPLICATION_FACTOR",
                f"all brokers of partition {first_partition_id + i}'s assignment {list(replicas)} are fenced",
            )
        out.append(PartitionRecord(topic_id, first_partition_id + i, replicas, isr, leader=isr[0]))
    return out


def check_assignments(
    c: QuorumController, assignments: Iterable[tuple[int, ...]], rf: int | None
) -> None:
    for i, replicas in enumerate(assignments):
        if not replicas:
            raise ApiError("INVALID_REPLICA_ASSIGNMENT", f"partition {i} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise ApiError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"partition {i} lists a replica twice: {list(replicas)}",
            )
        if rf is not None and len(replicas) != rf:
            raise ApiError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"partition {i} has {len(replicas)} replicas, the others have {rf}",
            )
        for r in replicas:
            if r not in c.image.brokers:
                raise ApiError(
                    "INVALID_REPLICA_ASSIGNMENT", f"partition {i}: broker {r} is not registered"
                )
        rf = len(replicas)


def placement(
    c: QuorumController, partitions: int, rf: int, first_partition_id: int
) -> list[tuple[int, ...]]:
    usable = usable_brokers(c)
    if rf <= len(usable):
        return place_replicas(usable, partitions, rf, c.rng, first_partition_id)
    # As Kafka's StripedReplicaPlacer: the replication factor is checked against
    # every registered broker not shutting down, fenced ones too (a rolling restart
    # does not stop topic creation); it needs one unfenced broker, and a fenced
    # replica comes after the unfenced ones (the leader is the first of the ISR).
    registered = {bid: b.rack for bid, b in c.image.brokers.items() if not b.in_controlled_shutdown}
    if rf > len(registered):
        raise ApiError(
            "INVALID_REPLICATION_FACTOR",
            f"replication factor {rf} is larger than the {len(registered)} registered brokers "
            "(not shutting down)",
        )
    if not usable:
        raise ApiError("INVALID_REPLICATION_FACTOR", "all brokers are currently fenced")
    placed = place_replicas(registered, partitions, rf, c.rng, first_partition_id)
    return [tuple(sorted(replicas, key=lambda r: r not in usable)) for replicas in placed]


def create_topic(c: QuorumController, req: CreateTopicRequest) -> Written:
    validate_topic_name(req.name)
    if req.name in c.image.topic_ids_by_name:
        raise ApiError("TOPIC_ALREADY_EXISTS", f"topic {req.name!r} already exists")
    # '.' and '_' collide in metric names, as in Kafka
    canon = req.name.replace(".", "_")
    for other in c.image.topic_ids_by_name:
        if other.replace(".", "_") == canon:
            raise ApiError(
                "INVALID_TOPIC_EXCEPTION",
                f"topic {req.name!r} collides with existing topic {other!r}",
            )
    if len(c.image.topics) >= c.config.max_topics:
        raise ApiError(
            "INVALID_REQUEST",
            f"the cluster already has the maximum of {c.config.max_topics} topics",
        )
    validate_topic_configs(req.configs)
    if req.assignments is not None:
        if not req.assignments:
            raise ApiError("INVALID_PARTITIONS", "assignments must list at least one partition")
        if len(req.assignments) > c.config.max_partitions_per_request:
            raise ApiError(
                "INVALID_PARTITIONS",
                f"more than {c.config.max_partitions_per_request} partitions",
            )
        check_assignments(c, req.assignments, None)
        assignments = list(req.assignments)
    else:
        assert req.partitions is not None and req.replication_factor is not None
        if req.partitions < 1:
            raise ApiError(
                "INVALID_PARTITIONS", f"number of partitions must be >= 1, got {req.partitions}"
            )
        if req.partitions > c.config.max_partitions_per_request:
            raise ApiError(
                "INVALID_PARTITIONS",
                f"{req.partitions} partitions exceed the limit of {c.config.max_partitions_per_request}",
            )
        if req.replication_factor < 1:
            raise ApiError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor must be >= 1, got {req.replication_factor}",
            )
        assignments = placement(c, req.partitions, req.replication_factor, 0)
    topic_id = new_topic_id(c.rng)
    records: list[MetadataRecord] = [TopicRecord(req.name, topic_id)]
    records += new_partitions(c, topic_id, 0, assignments)
    records += [
        ConfigRecord(TOPIC_RESOURCE, req.name, k, v) for k, v in sorted(req.configs.items())
    ]
    return records, {"name": req.name, "topic_id": topic_id, "partitions": len(assignments)}


def topic_or_404(c: QuorumController, name: str) -> TopicImage:
    topic = c.image.topic_by_name(name)
    if topic is None:
        raise ApiError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
    return topic


def delete_topic(c: QuorumController, name: str) -> Written:
    topic = topic_or_404(c, name)
    return [RemoveTopicRecord(topic.topic_id)], {"name": name, "topic_id": topic.topic_id}


def create_partitions(c: QuorumController, req: CreatePartitionsRequest) -> Written:
    topic = topic_or_404(c, req.name)
    current = len(topic.partitions)
    if req.count <= current:
        raise ApiError(
            "INVALID_PARTITIONS",
            f"topic {req.name!r} has {current} partitions; the new count {req.count} must be larger",
        )
    added = req.count - current
    if added > c.config.max_partitions_per_request:
        raise ApiError(
            "INVALID_PARTITIONS",
            f"cannot add more than {c.config.max_partitions_per_request} partitions",
        )
    rf = len(topic.partitions[0].replicas) if topic.partitions else 1
    if req.assignments is not None:
        if len(req.assignments) != added:
            raise ApiError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"{len(req.assignments)} assignments given for {added} new partitions",
            )
        check_assignments(c, req.assignments, rf)
        assignments = list(req.assignments)
    else:
        assignments = placement(c, added, rf, current)
    records = new_partitions(c, topic.topic_id, current, assignments)
    return records, {"name": req.name, "partitions": req.count}


def alter_configs(c: QuorumController, req: AlterConfigsRequest) -> Written:
    topic_or_404(c, req.name)
    validate_topic_configs(req.configs)
    current = c.image.topic_configs(req.name)
    records: list[MetadataRecord] = [
        ConfigRecord(TOPIC_RESOURCE, req.name, k, v)
        for k, v in sorted(req.configs.items())
        if current.get(k) != v
    ]
    merged = {k: v for k, v in {**current, **req.configs}.items() if v is not None}
    # Enabling unclean election elects leaders for leaderless partitions now, as Kafka does.
    topic = c.image.topic_by_name(req.name)
    after: dict[int, PartitionRegistration] = {}
    if config_true(req.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)):
        keys = [k for k in c.index.leaderless if k[0] == topic.topic_id]
        for _topic_id, pid in sorted(keys):
            rec = c.partition_builder(topic, pid, unclean=True).build()
            if rec is not None:
                records.append(rec)
                after[pid] = topic.partitions[pid].merge(rec)
    if (
        MIN_INSYNC_REPLICAS in req.configs
        and current.get(MIN_INSYNC_REPLICAS) != req.configs[MIN_INSYNC_REPLICAS]
    ):
        # The ELRs were kept for the old min ISR: a new one clears them (and the
        # last known leaders), as Kafka's ClearElrRecord does for the topic.
        for pid in sorted(topic.partitions):
            p = after.get(pid, topic.partitions[pid])
            if p.elr or p.last_known_elr:
                records.append(
                    PartitionChangeRecord(
                        topic.topic_id,
                        pid,
                        eligible_leader_replicas=() if p.elr else None,
                        last_known_elr=() if p.last_known_elr else None,
                    )
                )
    return records, {"name": req.name, "configs": merged}
