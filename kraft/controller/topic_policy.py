"""Limits on topic creation (Kafka's CreateTopicPolicy role): a topic's partition
count (`max.partitions.per.topic`) and the number of topics (`max.topics`).

Checked before the controller generates any record, so an absurd request costs
nothing; the answer is POLICY_VIOLATION (400) naming the limit. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft.controller.errors import ApiError
from kraft.controller.requests import CreatePartitionsRequest, CreateTopicRequest
from metadata_log.image import MetadataImage


@dataclass(frozen=True, slots=True)
class TopicLimits:
    max_partitions_per_topic: int = 10_000
    max_topics: int = 100_000


def check_create_topic(req: CreateTopicRequest, limits: TopicLimits) -> None:
    count = len(req.assignments) if req.assignments is not None else req.partitions
    if count is not None and count > limits.max_partitions_per_topic:
        raise ApiError(
            "POLICY_VIOLATION",
            f"topic {req.name!r} would have {count} partitions; "
            f"max.partitions.per.topic is {limits.max_partitions_per_topic}",
        )


def check_topic_count(image: MetadataImage, limits: TopicLimits) -> None:
    if len(image.topics) >= limits.max_topics:
        raise ApiError(
            "POLICY_VIOLATION",
            f"the cluster has {len(image.topics)} topics; max.topics is {limits.max_topics}",
        )


def check_create_partitions(req: CreatePartitionsRequest, limits: TopicLimits) -> None:
    if req.count > limits.max_partitions_per_topic:
        raise ApiError(
            "POLICY_VIOLATION",
            f"topic {req.name!r} would have {req.count} partitions; "
            f"max.partitions.per.topic is {limits.max_partitions_per_topic}",
        )
