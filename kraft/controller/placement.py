"""Replica placement for new partitions: Kafka's rack-aware round-robin.

Brokers are interleaved by rack (rack A's first, rack B's first, ..., rack A's
second, ...); partition p's first replica is broker (p + start) in that list and
the followers step by a shift that grows every full round, skipping brokers whose
rack already holds a replica until every rack does (AdminUtils'
assignReplicasToBrokersRackAware). Without racks it is the rack-unaware variant.
The random start and shift come from the seeded rng passed in.
"""

from __future__ import annotations

import random
from collections.abc import Mapping


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    iters = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        for brokers in iters:
            if i < len(brokers):
                out.append(brokers[i])
        i += 1
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def place_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    rng: random.Random,
    first_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    """`partitions` replica lists over `brokers` (broker id -> rack or None)."""
    n = len(brokers)
    if replication_factor < 1 or replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} with {n} usable brokers")
    start = rng.randrange(n)
    shift = rng.randrange(n)
    rack_aware = all(r is not None for r in brokers.values())
    if rack_aware:
        racks: dict[int, str] = {b: r for b, r in brokers.items() if r is not None}
        ordered = _rack_alternated(racks)
        num_racks = len(set(racks.values()))
    else:
        ordered = sorted(brokers)
        num_racks = 0
    out: list[tuple[int, ...]] = []
    for i in range(partitions):
        p = first_partition_id + i
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        if not rack_aware:
            replicas += [
                ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
            out.append(tuple(replicas))
            continue
        racks_used = {racks[ordered[first]]}
        k = 0
        while len(replicas) < replication_factor:
            b = ordered[_replica_index(first, shift * num_racks, k, n)]
            k += 1
            rack_ok = racks[b] not in racks_used or len(racks_used) == num_racks
            if rack_ok and b not in replicas:
                replicas.append(b)
                racks_used.add(racks[b])
        out.append(tuple(replicas))
    return out
