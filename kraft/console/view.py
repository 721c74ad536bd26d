"""The console's cluster view: brokers and partitions, trouble first, bounded. Pure.

The page polls this every 2 s from every open tab, on clusters of 10,000 brokers,
so it never ships a whole list: it counts everything and returns at most `limit`
rows of each kind, the ones a person must see first (fenced and shutting-down
brokers; offline, under-replicated and reassigning partitions). The counts and
orderings cost a scan of the image: `ClusterSummary` is computed once and reused
while the image's offset is unchanged or for up to 2 s (kraft.console.ui_routes), so
five tabs cost one scan per poll period; the rows of each reply, read live from the
image, are cheap.

Partitions led come from the controller's ReplicationIndex (kept by replay on the
active controller and on standbys alike), time since the last heartbeat from the
active controller's BrokerHeartbeatManager (None on a standby, which has none).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from metadata_log.image import MetadataImage

UNFENCED = "UNFENCED"
FENCED = "FENCED"
CONTROLLED_SHUTDOWN = "CONTROLLED_SHUTDOWN"

# partition status, in the order the console lists them
OFFLINE = "offline"
UNDER_REPLICATED = "under_replicated"
REASSIGNING = "reassigning"
HEALTHY = "ok"
_RANK = {OFFLINE: 0, UNDER_REPLICATED: 1, REASSIGNING: 2, HEALTHY: 3}
_BROKER_RANK = {FENCED: 0, CONTROLLED_SHUTDOWN: 1, UNFENCED: 2}

DEFAULT_LIMIT = 200
MAX_LIMIT = 2000


def broker_state(fenced: bool, in_controlled_shutdown: bool) -> str:
    """Kafka's BrokerRegistrationState as the console names it (shutdown wins: a
    broker in controlled shutdown is also fenced at its end)."""
    if in_controlled_shutdown:
        return CONTROLLED_SHUTDOWN
    return FENCED if fenced else UNFENCED


def partition_status(p: Any) -> str:
    if p.leader < 0:
        return OFFLINE
    # As Kafka counts under-replicated partitions: replicas a reassignment is still
    # adding are not yet owed to the ISR (counting them, every move read as
    # under-replicated and none as reassigning).
    adding = p.adding_replicas
    if any(r not in p.isr for r in p.replicas if r not in adding):
        return UNDER_REPLICATED
    if adding or p.removing_replicas:
        return REASSIGNING
    return HEALTHY


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    """Counts and trouble-first orderings of one image (see module docstring)."""

    offset: int
    reassignments: int  # partitions with replicas being added or removed, any status
    broker_counts: dict[str, int]
    broker_order: tuple[int, ...]  # ids, trouble first, then by id
    partition_counts: dict[str, int]
    # (topic_id, partition id), trouble first then by topic name and id: only the
    # first MAX_LIMIT, which is all a reply may show
    partition_order: tuple[tuple[str, int], ...]
    topics: tuple[dict[str, Any], ...]


def summarize(image: MetadataImage) -> ClusterSummary:
    counts = {UNFENCED: 0, FENCED: 0, CONTROLLED_SHUTDOWN: 0}
    ranked = []
    for bid, b in image.brokers.items():
        state = broker_state(b.fenced, b.in_controlled_shutdown)
        counts[state] += 1
        ranked.append((_BROKER_RANK[state], bid))
    ranked.sort()
    pcounts = {OFFLINE: 0, UNDER_REPLICATED: 0, REASSIGNING: 0, HEALTHY: 0}
    trouble: list[tuple[int, str, int, str]] = []
    healthy: list[tuple[str, int, str]] = []
    topics = []
    moving = 0
    for name, tid in sorted(image.topic_ids_by_name.items()):
        t = image.topics.get(tid)
        if t is None:
            continue
        tcounts = {OFFLINE: 0, UNDER_REPLICATED: 0, REASSIGNING: 0, HEALTHY: 0}
        for pid, p in t.partitions.items():
            s = partition_status(p)
            tcounts[s] += 1
            if p.adding_replicas or p.removing_replicas:
                moving += 1
            if s != HEALTHY:
                trouble.append((_RANK[s], name, pid, tid))
            elif len(healthy) < MAX_LIMIT:
                healthy.append((name, pid, tid))
        for k, v in tcounts.items():
            pcounts[k] += v
        topics.append(
            {
                "name": name,
                "topic_id": tid,
                "partitions": len(t.partitions),
                OFFLINE: tcounts[OFFLINE],
                UNDER_REPLICATED: tcounts[UNDER_REPLICATED],
                REASSIGNING: tcounts[REASSIGNING],
            }
        )
    trouble.sort()
    healthy.sort()
    order = [(tid, pid) for _, _, pid, tid in trouble[:MAX_LIMIT]]
    order += [(tid, pid) for _, pid, tid in healthy[: MAX_LIMIT - len(order)]]
    # topics with trouble first, then by name
    topics.sort(key=lambda t: (-(t[OFFLINE] + t[UNDER_REPLICATED] + t[REASSIGNING]), t["name"]))
    return ClusterSummary(
        image.offset,
        moving,
        counts,
        tuple(bid for _, bid in ranked),
        pcounts,
        tuple(order),
        tuple(topics[:MAX_LIMIT]),
    )


def cluster_view(
    image: MetadataImage,
    summary: ClusterSummary,
    led_by: Mapping[int, Any],
    heartbeat_age_ms: Callable[[int], int | None],
    limit: int = DEFAULT_LIMIT,
) -> dict[str, Any]:
    """The reply of `GET /ui/api/cluster`: counts, and the first `limit` rows of
    brokers, partitions and topics, trouble first."""
    brokers = []
    for bid in summary.broker_order[:limit]:
        b = image.brokers.get(bid)
        if b is None:  # unregistered since the summary
            continue
        brokers.append(
            {
                "broker_id": bid,
                "state": broker_state(b.fenced, b.in_controlled_shutdown),
                "broker_epoch": b.broker_epoch,
                "incarnation_id": b.incarnation_id,
                "rack": b.rack,
                "heartbeat_age_ms": heartbeat_age_ms(bid),
                "partitions_led": len(led_by.get(bid, ())),
            }
        )
    partitions = []
    for tid, pid in summary.partition_order[:limit]:
        t = image.topics.get(tid)
        p = None if t is None else t.partitions.get(pid)
        if p is None:  # deleted since the summary
            continue
        row = {"topic": t.name, "partition_id": pid, **p.to_dict()}  # type: ignore[union-attr]
        row["status"] = partition_status(p)
        partitions.append(row)
    return {
        "offset": image.offset,
        "last_append_time_ms": image.last_append_time_ms,
        "brokers": {"counts": summary.broker_counts, "total": len(image.brokers), "rows": brokers},
        "partitions": {
            "counts": summary.partition_counts,
            "total": sum(summary.partition_counts.values()),
            "reassignments": summary.reassignments,
            "rows": partitions,
        },
        "topics": {"total": len(image.topics), "rows": _topic_rows(image, summary, limit)},
    }


def _topic_rows(image: MetadataImage, summary: ClusterSummary, limit: int) -> list[dict[str, Any]]:
    """The summary's topic rows in its order, read against the current image: a topic
    deleted since is left out, one created since comes last, with its counts."""
    rows = [
        {**t, "partitions": len(image.topics[t["topic_id"]].partitions)}
        for t in summary.topics[:limit]
        if t["topic_id"] in image.topics
    ]
    if len(rows) < limit and len(image.topics) > len(rows):  # one created since
        shown = {t["topic_id"] for t in summary.topics}
        for name, tid in sorted(image.topic_ids_by_name.items()):
            t = image.topics.get(tid)
            if t is None or tid in shown:
                continue
            counts = {OFFLINE: 0, UNDER_REPLICATED: 0, REASSIGNING: 0, HEALTHY: 0}
            for p in t.partitions.values():
                counts[partition_status(p)] += 1
            rows.append(
                {
                    "name": name,
                    "topic_id": tid,
                    "partitions": len(t.partitions),
                    OFFLINE: counts[OFFLINE],
                    UNDER_REPLICATED: counts[UNDER_REPLICATED],
                    REASSIGNING: counts[REASSIGNING],
                }
            )
            if len(rows) >= limit:
                break
    return rows
