"""JSON shapes of the read API (DESIGN 1.2), computed from a MetadataImage. Pure."""

from __future__ import annotations

from typing import Any

from kraft.controller.errors import ApiError
from metadata_log.image import MetadataImage, TopicImage


def topic_view(image: MetadataImage, topic: TopicImage) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "configs": image.topic_configs(topic.name),
        "partitions": [
            {"partition_id": pid, **topic.partitions[pid].to_dict()}
            for pid in sorted(topic.partitions)
        ],
    }


def describe_topic(image: MetadataImage, name: str) -> dict[str, Any]:
    topic = image.topic_by_name(name)
    if topic is None:
        raise ApiError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
    return topic_view(image, topic)


def list_topics(image: MetadataImage) -> list[dict[str, Any]]:
    return [
        {"name": name, "topic_id": tid, "partitions": len(image.topics[tid].partitions)}
        for name, tid in sorted(image.topic_ids_by_name.items())
    ]


def list_brokers(image: MetadataImage) -> list[dict[str, Any]]:
    out = []
    for bid in sorted(image.brokers):
        d = image.brokers[bid].to_dict()
        out.append(
            {
                "broker_id": d["broker_id"],
                "broker_epoch": d["broker_epoch"],
                "incarnation_id": d["incarnation_id"],
                "fenced": d["fenced"],
                "in_controlled_shutdown": d["in_controlled_shutdown"],
                "rack": d["rack"],
                "endpoints": d["endpoints"],
            }
        )
    return out


def metadata_view(image: MetadataImage) -> dict[str, Any]:
    """The whole image: brokers, topics with partitions and configs, features."""
    d = image.to_dict()
    return {
        "offset": d["offset"],
        "features": d["features"],
        "brokers": list_brokers(image),
        "topics": d["topics"],
        "configs": d["configs"],
    }
