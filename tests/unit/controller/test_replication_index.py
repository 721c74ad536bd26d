"""ReplicationIndex.partitions_changed (a slice of changes moved by set operations,
issue 26) equals partition_changed called once per change, and the index a
controller keeps through a staged fence transaction equals one rebuilt from its
image."""

from __future__ import annotations

import random

import pytest

from kraft.controller.replication_index import ReplicationIndex
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import (
    BeginTransactionRecord,
    EndTransactionRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)

BROKERS = (1, 2, 3, 4, 5)


def index_fields(ix: ReplicationIndex) -> dict[str, object]:
    def nonempty(d: dict[int, set[tuple[str, int]]]) -> dict[int, set[tuple[str, int]]]:
        return {b: s for b, s in d.items() if s}

    return {
        "in_isr": nonempty(ix.in_isr),
        "in_elr": nonempty(ix.in_elr),
        "led_by": nonempty(ix.led_by),
        "leaderless": ix.leaderless,
        "reassigning": ix.reassigning,
        "imbalanced": ix.imbalanced,
    }


def a_registration(rng: random.Random) -> PartitionRegistration:
    replicas = tuple(rng.sample(BROKERS, 3))
    isr = tuple(b for b in replicas if rng.random() < 0.8) or replicas[:1]
    return PartitionRegistration(
        replicas,
        isr,
        (replicas[2],) if rng.random() < 0.05 else (),
        (rng.choice(BROKERS),) if rng.random() < 0.05 else (),
        rng.choice([*isr, -1]),
        0,
        0,
        0,
        (rng.choice(BROKERS),) if rng.random() < 0.1 else (),
    )


def a_change(rng: random.Random, p: PartitionRegistration) -> PartitionChangeRecord:
    isr = tuple(b for b in p.isr if rng.random() < 0.7)
    return PartitionChangeRecord(
        "T",
        0,
        isr=isr if rng.random() < 0.8 else None,
        leader=rng.choice([-2, -2, -1, *BROKERS]),
        replicas=tuple(rng.sample(BROKERS, 3)) if rng.random() < 0.05 else None,
        adding_replicas=() if rng.random() < 0.05 else None,
        eligible_leader_replicas=(rng.choice(BROKERS),) if rng.random() < 0.1 else None,
    )


@pytest.mark.parametrize("seed", range(20))
def test_a_slice_of_changes_moves_the_index_as_one_call_each(seed: int) -> None:
    rng = random.Random(seed)
    one, many = ReplicationIndex(), ReplicationIndex()
    parts = {(f"t{k % 7}", k): a_registration(rng) for k in range(300)}
    for (tid, pid), p in parts.items():
        one.partition_changed(tid, pid, None, p)
        many.partition_changed(tid, pid, None, p)
    for _ in range(5):
        keys = rng.sample(sorted(parts), rng.randint(1, 200))  # distinct partitions
        changes = []
        for tid, pid in keys:
            old = parts[(tid, pid)]
            new = parts[(tid, pid)] = old.merge(a_change(rng, old))
            changes.append((tid, pid, old, new))
            one.partition_changed(tid, pid, old, new)
        many.partitions_changed(changes)
        assert index_fields(many) == index_fields(one)


def test_the_index_after_a_staged_fence_equals_one_rebuilt_from_the_image() -> None:
    rng = random.Random(2)
    image = MetadataImage()
    image.listener = index = ReplicationIndex()
    off = 0
    for b in BROKERS:
        image.replay(RegisterBrokerRecord(b, f"i{b}", b, fenced=False), off)
        off += 1
    image.replay(TopicRecord("t", "T"), off)
    off += 1
    for pid in range(3000):
        r = tuple(rng.sample(BROKERS, 3))
        image.replay(PartitionRecord("T", pid, r, r, leader=r[0]), off)
        off += 1
    image.replay(BeginTransactionRecord("fence"), off)
    off += 1
    for pid, p in sorted(image.topics["T"].partitions.items()):
        if 1 in p.isr:
            isr = tuple(b for b in p.isr if b != 1)
            leader = isr[0] if p.leader == 1 else -2
            image.replay(PartitionChangeRecord("T", pid, isr=isr, leader=leader), off)
            off += 1
    for _ in image.replay_in_steps(EndTransactionRecord(), off, 256):
        pass
    rebuilt = ReplicationIndex()
    for pid, p in image.topics["T"].partitions.items():
        rebuilt.partition_changed("T", pid, None, p)
    assert index_fields(index) == index_fields(rebuilt)
    assert not index.in_isr.get(1) and not index.led_by.get(1)
