"""The figures a what-if compares, from one scenario's two tables (pyarrow).

Pure: tables in, plain dicts out. `offline_seconds` and `max_offline_at_once`
count a window still open at the log's end up to the log's last time, as
report.html does.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

MAX_LISTED = 50  # unclean elections listed by offset in summary.json
MAX_POINTS = 2000  # points of the offline-partitions series kept for the plot


def offline_steps(offline: pa.Table, end_ms: int) -> list[tuple[int, int]]:
    """(time, partitions offline from then on), one point per change."""
    starts = offline.column("start_time_ms").to_pylist()
    ends = offline.column("end_time_ms").to_pylist()
    deltas: dict[int, int] = {}
    for s, e in zip(starts, ends, strict=True):
        deltas[s] = deltas.get(s, 0) + 1
        e = end_ms if e is None else e
        if e < end_ms:
            deltas[e] = deltas.get(e, 0) - 1
    out: list[tuple[int, int]] = []
    n = 0
    for t in sorted(deltas):
        n += deltas[t]
        out.append((t, n))
    return out


def offline_before(offline: pa.Table, until_ms: int) -> tuple[int, float]:
    """The partitions offline before `until_ms` and their offline seconds up to
    it (a window open then is cut there), for figures that leave out what
    follows a cluster's stop (spark-replay's `offline.while_running`)."""
    starts = offline.column("start_time_ms").to_pylist()
    ends = offline.column("end_time_ms").to_pylist()
    keys = zip(
        offline.column("topic_id").to_pylist(),
        offline.column("partition_id").to_pylist(),
        strict=True,
    )
    partitions: set[tuple[str, int]] = set()
    total_ms = 0
    for s, e, k in zip(starts, ends, keys, strict=True):
        if s >= until_ms:
            continue
        partitions.add(k)
        total_ms += (until_ms if e is None else min(e, until_ms)) - s
    return len(partitions), round(total_ms / 1000, 3)


def _thin(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """At most MAX_POINTS points, keeping each stride's highest (a peak stays)."""
    if len(points) <= MAX_POINTS:
        return points
    stride = -(-len(points) // MAX_POINTS)
    return [max(points[i : i + stride], key=lambda p: p[1]) for i in range(0, len(points), stride)]


def scenario_metrics(
    elections: pa.Table, offline: pa.Table, start_ms: int, end_ms: int
) -> dict[str, Any]:
    starts = offline.column("start_time_ms").to_pylist()
    ends = [end_ms if e is None else e for e in offline.column("end_time_ms").to_pylist()]
    topics = offline.column("topic").to_pylist()
    by_topic: dict[str, float] = {}
    total_ms = 0
    for s, e, t in zip(starts, ends, topics, strict=True):
        d = max(0, e - s)
        total_ms += d
        key = t if t is not None else "?"
        by_topic[key] = by_topic.get(key, 0) + d / 1000
    steps = offline_steps(offline, end_ms)
    keys = set(
        zip(
            offline.column("topic_id").to_pylist(),
            offline.column("partition_id").to_pylist(),
            strict=True,
        )
    )
    rows = elections.select(
        ["offset", "topic", "partition_id", "old_leader", "new_leader", "unclean", "cause"]
    ).to_pylist()
    unclean = [r for r in rows if r["unclean"]]
    moves = sum(1 for r in rows if r["cause"] != "CREATE" and r["new_leader"] != r["old_leader"])
    return {
        "offline_partition_seconds": round(total_ms / 1000, 3),
        "max_offline_at_once": max((n for _, n in steps), default=0),
        "offline_windows": offline.num_rows,
        "partitions_ever_offline": len(keys),
        "offline_seconds_by_topic": {k: round(v, 3) for k, v in sorted(by_topic.items())},
        "elections": elections.num_rows,
        "leadership_moves": moves,
        "unclean_elections": len(unclean),
        "unclean_partitions": len({(r["topic"], r["partition_id"]) for r in unclean}),
        "unclean_at": [
            {"topic": r["topic"], "partition_id": r["partition_id"], "offset": r["offset"]}
            for r in sorted(unclean, key=lambda r: r["offset"])[:MAX_LISTED]
        ],
        "offline_series": [[start_ms, 0], *map(list, _thin(steps))],
    }


def table_differences(
    actual: pa.Table, replayed: pa.Table, key: tuple[str, ...], limit: int = 20
) -> list[dict[str, Any]]:
    """The rows in one table and not in the other (both without `scenario`)."""
    cols = [c for c in actual.column_names if c != "scenario"]
    a = {tuple(r[c] for c in cols): r for r in actual.select(cols).to_pylist()}
    b = {tuple(r[c] for c in cols): r for r in replayed.select(cols).to_pylist()}
    out: list[dict[str, Any]] = []
    for side, mine, other in (("actual only", a, b), ("replayed only", b, a)):
        for k in sorted(set(mine) - set(other), key=lambda k: tuple(str(x) for x in k)):
            out.append({"side": side, **{c: mine[k][c] for c in key}, "row": mine[k]})
    out.sort(key=lambda d: tuple(str(d[c]) for c in key))
    return out[:limit] if limit else out
