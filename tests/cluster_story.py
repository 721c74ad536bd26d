"""A scripted cluster story as metadata batches: the demo log and the image test's input.

Three brokers register and are unfenced, a topic of 3 partitions with
replication factor 3 is created, broker 1 stops heartbeating and is fenced (its
partitions lose it from their ISRs and its leaderships move by BestLeader), it
comes back (unfenced, rejoins the ISRs through AlterPartition), and broker 2
does a controlled shutdown. Every partition change is computed by the real
PartitionChangeBuilder against the real MetadataImage replay, so the log is
what a controller would have written, not canned text. Pure: time and ids come
from the arguments.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kraft.controller.partition_change import PartitionChangeBuilder, isr_without
from metadata_log.image import MetadataImage
from metadata_log.records import (
    FENCE_YES,
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderChangeMessage,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    new_topic_id,
)

CONTROLLER_IDS = (3000, 3001, 3002)


@dataclass(frozen=True, slots=True)
class StoryBatch:
    base_offset: int
    leader_epoch: int
    append_time_ms: int
    records: tuple[Record, ...]
    control: bool = False
    note: str = ""


class StoryWriter:
    """Assigns offsets, replays every batch into an image, collects the batches."""

    def __init__(self, start_time_ms: int, leader_epoch: int = 1) -> None:
        self.image = MetadataImage()
        self.batches: list[StoryBatch] = []
        self.now_ms = start_time_ms
        self.epoch = leader_epoch
        self.next_offset = 0

    def append(self, records: list[Record], note: str = "", control: bool = False) -> int:
        base = self.next_offset
        batch = StoryBatch(base, self.epoch, self.now_ms, tuple(records), control, note)
        self.image.replay_batch(base, records, self.now_ms)
        self.batches.append(batch)
        self.next_offset += len(records)
        return base

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def _acceptable(image: MetadataImage, exclude: int | None) -> Callable[[int], bool]:
    def ok(broker_id: int) -> bool:
        b = image.brokers.get(broker_id)
        return (
            b is not None and not b.fenced and not b.in_controlled_shutdown and broker_id != exclude
        )

    return ok


def remove_from_isrs(image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
    """Partition changes that take `broker_id` out of every ISR and leadership."""
    out: list[MetadataRecord] = []
    for name in sorted(image.topic_ids_by_name):
        topic = image.topics[image.topic_ids_by_name[name]]
        unclean = image.topic_configs(name).get("unclean.leader.election.enable") == "true"
        for pid in sorted(topic.partitions):
            p = topic.partitions[pid]
            if broker_id not in p.isr and p.leader != broker_id:
                continue
            rec = (
                PartitionChangeBuilder(
                    p, topic.topic_id, pid, _acceptable(image, broker_id), unclean
                )
                .set_target_isr(isr_without(p.isr, broker_id))
                .build()
            )
            if rec is not None:
                out.append(rec)
    return out


def elect_leaderless(image: MetadataImage) -> list[MetadataRecord]:
    """Leaders for partitions that have none and now have an acceptable ISR member."""
    out: list[MetadataRecord] = []
    for name in sorted(image.topic_ids_by_name):
        topic = image.topics[image.topic_ids_by_name[name]]
        for pid in sorted(topic.partitions):
            p = topic.partitions[pid]
            if p.leader >= 0:
                continue
            rec = PartitionChangeBuilder(p, topic.topic_id, pid, _acceptable(image, None)).build()
            if rec is not None:
                out.append(rec)
    return out


def cluster_story(start_time_ms: int = 1_700_000_000_000, seed: int = 7) -> list[StoryBatch]:
    rng = random.Random(seed)
    w = StoryWriter(start_time_ms)
    w.append(
        [LeaderChangeMessage(CONTROLLER_IDS[0], CONTROLLER_IDS, CONTROLLER_IDS[:2])],
        "controller 3000 elected",
        control=True,
    )
    w.append(
        [FeatureLevelRecord(METADATA_VERSION_FEATURE, LATEST_METADATA_VERSION)],
        "bootstrap metadata.version",
    )

    epochs: dict[int, int] = {}
    for bid, rack in ((1, "rack-a"), (2, "rack-b"), (3, "rack-c")):
        w.advance(150)
        epoch = w.next_offset  # a broker's epoch is the offset of its registration
        epochs[bid] = epoch
        w.append(
            [
                RegisterBrokerRecord(
                    broker_id=bid,
                    incarnation_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                    broker_epoch=epoch,
                    endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", 9091 + bid, "PLAINTEXT"),),
                    features=(BrokerFeature(METADATA_VERSION_FEATURE, 1, LATEST_METADATA_VERSION),),
                    rack=rack,
                    fenced=True,
                )
            ],
            f"broker {bid} registers (fenced)",
        )
    for bid in (1, 2, 3):
        w.advance(400)
        w.append([UnfenceBrokerRecord(bid, epochs[bid])], f"broker {bid} caught up: unfenced")

    w.advance(1000)
    topic_id = new_topic_id(rng)
    assignments = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    w.append(
        [TopicRecord("orders", topic_id)]
        + [
            PartitionRecord(topic_id, pid, replicas, replicas, leader=replicas[0])
            for pid, replicas in enumerate(assignments)
        ],
        "topic orders created: 3 partitions, replication factor 3",
    )
    w.advance(500)
    w.append([NoOpRecord()], "NoOp (metadata.max.idle.interval.ms)")

    # Broker 1 stops heartbeating; after broker.session.timeout.ms it is fenced.
    w.advance(9000)
    w.append(
        remove_from_isrs(w.image, 1) + [FenceBrokerRecord(1, epochs[1])],
        "broker 1 missed its session: leaderships move, then fenced",
    )
    w.advance(5000)
    w.append([UnfenceBrokerRecord(1, epochs[1])], "broker 1 is back and caught up: unfenced")
    w.advance(200)
    # The partition leaders add broker 1 back to their ISRs (AlterPartition).
    expand: list[Record] = []
    for pid in sorted(w.image.topics[topic_id].partitions):
        p = w.image.topics[topic_id].partitions[pid]
        if 1 not in p.isr:
            isr = tuple(r for r in p.replicas if r in p.isr or r == 1)
            expand.append(PartitionChangeRecord(topic_id, pid, isr=isr))
    w.append(expand, "AlterPartition: broker 1 rejoins the ISRs")

    w.advance(3000)
    w.append(
        [BrokerRegistrationChangeRecord(2, epochs[2], in_controlled_shutdown=1)]
        + remove_from_isrs(w.image, 2),
        "broker 2 controlled shutdown: leaderships move away",
    )
    w.advance(400)
    w.append(
        [BrokerRegistrationChangeRecord(2, epochs[2], fenced=FENCE_YES)],
        "broker 2 shut down: fenced",
    )
    w.advance(500)
    w.append([NoOpRecord()], "NoOp")
    return w.batches


def story_image(batches: list[StoryBatch]) -> MetadataImage:
    image = MetadataImage()
    for b in batches:
        image.replay_batch(b.base_offset, b.records, b.append_time_ms)
    return image
