"""Limits on topic creation (Kafka's CreateTopicPolicy role): a topic's partition
count (`max.partitions.per.topic`) and the number of topics (`max.topics`).

Checked before the controller generates any record, so an absurd request costs
nothing; the answer is POLICY_VIOLATION (400) naming the limit. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraft.config import default_of, value_of
from kraft.controller.errors import ApiError
from kraft.controller.requests import CreatePartitionsRequest, CreateTopicRequest
from metadata_log.image import MetadataImage


@dataclass(frozen=True, slots=True)
class TopicLimits:
    max_partitions_per_topic: int = default_of("max.partitions.per.topic")
    max_topics: int = default_of("max.topics")

    @classmethod
    def from_config(cls, config: Any) -> TopicLimits:
        """The configured limits (a kraft.config.Config, or None for the defaults)."""
        return cls(value_of(config, "max.partitions.per.topic"), value_of(config, "max.topics"))


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
