"""summary.json and report.html (matplotlib plots embedded as PNG) from the history tables.

Only aggregates come to the driver: counts, per-bucket deltas and the broker
intervals (brokers are few). Time series are built from +1/-1 deltas at interval
starts and ends, bucketed in Spark and summed up on the driver.
"""

from __future__ import annotations

import base64
import html
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_replay.history import Tables, iso_time

STATE_COLORS = {
    "UNFENCED": "#2ca02c",
    "CONTROLLED_SHUTDOWN": "#ff7f0e",
    "FENCED": "#d62728",
    "UNREGISTERED": "#7f7f7f",
}
# One color per election cause of the contract (CREATE is not plotted): a cause
# left out took matplotlib's next default color, and REBALANCE drew in
# CONTROLLED_SHUTDOWN's orange beside it.
CAUSE_COLORS = {
    "FENCE": "#d62728",
    "UNFENCE": "#2ca02c",
    "CONTROLLED_SHUTDOWN": "#ff7f0e",
    "ALTER_PARTITION": "#1f77b4",
    "ADMIN": "#9467bd",
    "REASSIGNMENT": "#8c564b",
    "REBALANCE": "#17becf",
    "CREATE": "#7f7f7f",
}
MAX_PLOTTED_BROKERS = 60
MAX_BUCKETS = 400


def _bucket_ms(info: Any) -> int:
    """Plot resolution: about MAX_BUCKETS points over the log (a change is drawn at
    most one bucket early: a quarter of a percent of the width)."""
    span = max(1, info.last_time_ms - info.first_time_ms)
    return max(1, -(-span // MAX_BUCKETS))


def _duration_text(ms: float) -> str:
    """A duration as a reader says it: 29 ms, 4.5 s, 2 min 45 s, 2 h 25 min."""
    if round(ms) < 1000:
        return f"{round(ms)} ms"
    if ms < 120_000:
        return f"{ms / 1000:.3g} s"
    if ms < 7_200_000:
        m, sec = divmod(round(ms / 1000), 60)
        return f"{m} min {sec} s" if sec else f"{m} min"
    h, m = divmod(round(ms / 60_000), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def _series(deltas: DataFrame, time_col: str, bucket: int, t0: int) -> list[tuple[int, int]]:
    """(bucket start ms, running total) from a DataFrame of (time, delta)."""
    rows = (
        deltas.select((F.floor((F.col(time_col) - t0) / bucket) * bucket + t0).alias("b"), "delta")
        .groupBy("b")
        .agg(F.sum("delta").alias("d"))
        .orderBy("b")
        .collect()
    )
    out, total = [], 0
    for r in rows:
        total += r["d"]
        out.append((int(r["b"]), total))
    return out


def cluster_stop(broker_rows: list[Any]) -> dict[str, Any] | None:
    """Where the cluster's final stop began, if no broker is running at the end.

    `broker_rows`: broker_history rows (broker_id, state, start_offset,
    end_offset, start_time_ms). A broker runs while UNFENCED. If none does at the
    end of the log, the stop began with the first broker to leave UNFENCED after
    the last time any broker became UNFENCED. None if a broker is still running
    at the end, or none ever ran.
    """
    if any(r["end_offset"] is None and r["state"] == "UNFENCED" for r in broker_rows):
        return None
    starts = [r["start_offset"] for r in broker_rows if r["state"] == "UNFENCED"]
    if not starts:
        return None
    last_up = max(starts)
    by_broker: dict[int, list[Any]] = {}
    for r in broker_rows:
        by_broker.setdefault(r["broker_id"], []).append(r)
    leaving = []
    for rows in by_broker.values():
        rows.sort(key=lambda r: r["start_offset"])
        for a, b in zip(rows, rows[1:], strict=False):
            if a["state"] == "UNFENCED" and b["start_offset"] >= last_up:
                leaving.append((b["start_offset"], b["start_time_ms"], b["state"]))
    first = min(leaving)
    how: dict[str, int] = {}
    for _o, _t, state in leaving:
        how[state] = how.get(state, 0) + 1
    return {"offset": first[0], "time_ms": first[1], "brokers_left_by": dict(sorted(how.items()))}


def _longest(off: DataFrame, dur: Column) -> dict[str, Any] | None:
    r = (
        off.select("*", dur.alias("duration_ms"))
        .orderBy(F.desc("duration_ms"), "start_offset", "topic_id", "partition_id")
        .first()
    )
    if r is None:
        return None
    return {
        "topic": r["topic"],
        "topic_id": r["topic_id"],
        "partition_id": r["partition_id"],
        "start_offset": r["start_offset"],
        "end_offset": r["end_offset"],
        "start_time": iso_time(r["start_time_ms"]),
        "duration_ms": r["duration_ms"],
        "still_open": r["end_offset"] is None,
    }


def summarize(records: DataFrame, tables: Tables) -> dict[str, Any]:
    info = tables.info
    # One pass over the records: counts by type and, for broker records, by broker
    # and fence/shutdown value; everything else is summed up on the driver.
    in_history = F.col("source") == "segment"
    if info.snapshot_end_offset is not None:
        in_history = in_history & (F.col("offset") >= info.snapshot_end_offset)
    groups = (
        records.groupBy(
            "type",
            in_history.alias("h"),
            "broker_id",
            "fenced",
            "shutdown",
        )
        .agg(F.count(F.lit(1)).alias("n"), F.max("epoch").alias("epoch"))
        .collect()
    )
    by_type: dict[str, int] = {}
    counts = dict.fromkeys(
        (
            "fences",
            "unfences",
            "controlled_shutdowns",
            "registrations",
            "unregistrations",
            "controller_leader_changes",
        ),
        0,
    )
    fences_by_broker: dict[str, int] = {}
    last_epoch = None
    for g in groups:
        t, n = g["type"], g["n"]
        by_type[t] = by_type.get(t, 0) + n
        if g["h"] is not True:
            continue
        last_epoch = max(last_epoch or 0, g["epoch"])
        brc = t == "BrokerRegistrationChangeRecord"
        if t == "FenceBrokerRecord" or (brc and g["fenced"] == 1):
            counts["fences"] += n
            key = str(g["broker_id"])
            fences_by_broker[key] = fences_by_broker.get(key, 0) + n
        if t == "UnfenceBrokerRecord" or (brc and g["fenced"] == -1):
            counts["unfences"] += n
        if brc and g["shutdown"] == 1:
            counts["controlled_shutdowns"] += n
        if t == "RegisterBrokerRecord":
            counts["registrations"] += n
        if t == "UnregisterBrokerRecord":
            counts["unregistrations"] += n
        if t == "LeaderChangeMessage":
            counts["controller_leader_changes"] += n
    b = {**counts, "last_raft_epoch": last_epoch}
    el = tables.leader_elections
    causes = {r["cause"]: r["count"] for r in el.groupBy("cause").count().collect()}
    e = (
        el.filter(F.col("cause") != "CREATE")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col("election_type").isin("ISR", "ELR"), 1).otherwise(0)).alias("clean"),
            F.sum(F.when(F.col("unclean"), 1).otherwise(0)).alias("unclean"),
            # a leader there was is gone: not a leaderless partition's epoch bump
            F.sum(
                F.when((F.col("new_leader") < 0) & (F.col("old_leader") >= 0), 1).otherwise(0)
            ).alias("lost"),
        )
        .first()
    )

    off = tables.offline_partitions
    # Most partitions offline at once: +1/-1 at offsets, running sum on the driver.
    deltas = (
        off.select(F.col("start_offset").alias("o"), F.lit(1).alias("d"))
        .unionByName(
            off.filter(F.col("end_offset").isNotNull()).select(
                F.col("end_offset").alias("o"), F.lit(-1).alias("d")
            )
        )
        .groupBy("o")
        .agg(F.sum("d").alias("d"))
        .orderBy("o")
        .collect()
    )
    bh_rows = tables.broker_history.select(
        "broker_id", "state", "start_offset", "end_offset", "start_time_ms"
    ).collect()
    stop = cluster_stop(bh_rows)
    stop_at = stop["offset"] if stop else None
    peak, peak_at, running = 0, None, 0
    run_peak, run_peak_at = 0, None
    for r in deltas:
        running += r["d"]
        if running > peak:
            peak, peak_at = running, r["o"]
        if stop_at is not None and r["o"] < stop_at and running > run_peak:
            run_peak, run_peak_at = running, r["o"]
    end_ms = info.last_time_ms
    longest = _longest(
        off, F.coalesce(F.col("end_time_ms"), F.lit(end_ms)) - F.col("start_time_ms")
    )
    while_running = None
    if stop is not None:
        # Windows open when the stop began are cut there: what follows is the stop.
        stop_ms = F.lit(stop["time_ms"])
        clipped = F.least(F.coalesce(F.col("end_time_ms"), stop_ms), stop_ms)
        while_running = {
            "until_offset": stop_at,
            "until_time": iso_time(stop["time_ms"]),
            "max_offline_at_once": run_peak,
            "max_offline_at_offset": run_peak_at,
            "longest_window": _longest(
                off.filter(F.col("start_offset") < stop_at), clipped - F.col("start_time_ms")
            ),
        }
    off_agg = off.agg(
        F.count(F.lit(1)).alias("windows"),
        F.sum(F.when(F.col("end_offset").isNull(), 1).otherwise(0)).alias("open"),
        F.countDistinct("topic_id", "partition_id").alias("partitions"),
    ).first()
    ph = tables.partition_history
    reassignments = _reassignments(ph)
    final = (
        ph.filter(F.col("end_offset").isNull())
        .agg(
            F.count(F.lit(1)).alias("partitions"),
            F.sum(F.when(F.col("leader") < 0, 1).otherwise(0)).alias("offline"),
            F.countDistinct("topic_id").alias("topics"),
        )
        .first()
    )
    final_brokers: dict[str, int] = {}
    for r in bh_rows:
        if r["end_offset"] is None:
            final_brokers[r["state"]] = final_brokers.get(r["state"], 0) + 1
    busiest = (
        el.filter(F.col("cause") != "CREATE")
        .groupBy(F.floor(F.col("append_time_ms") / 60_000).alias("m"))
        .count()
        .orderBy(F.desc("count"), "m")
        .first()
    )
    return {
        "log": {
            **info.to_dict(),
            "first_time": iso_time(info.first_time_ms),
            "last_time": iso_time(info.last_time_ms),
            "duration_s": round((info.last_time_ms - info.first_time_ms) / 1000, 3),
        },
        "records_by_type": dict(sorted(by_type.items(), key=lambda kv: -kv[1])),
        "brokers": {
            "fences": b["fences"] or 0,
            "unfences": b["unfences"] or 0,
            "controlled_shutdowns": b["controlled_shutdowns"] or 0,
            "registrations": b["registrations"] or 0,
            "unregistrations": b["unregistrations"] or 0,
            "fences_by_broker": dict(sorted(fences_by_broker.items(), key=lambda kv: int(kv[0]))),
            "state_at_end": dict(sorted(final_brokers.items())),
        },
        "controller": {
            "leader_changes": b["controller_leader_changes"] or 0,
            "last_raft_epoch": b["last_raft_epoch"],
        },
        "elections": {
            "total": e["n"] or 0,
            "clean": e["clean"] or 0,
            "unclean": e["unclean"] or 0,
            "leader_lost": e["lost"] or 0,
            "by_cause": dict(sorted(causes.items())),
            # preferred-leader elections (the balancer's, or an admin's preferred)
            "rebalances": causes.get("REBALANCE", 0),
            "busiest_minute": None
            if busiest is None
            else {"start": iso_time(int(busiest["m"]) * 60_000), "elections": busiest["count"]},
        },
        "offline": {
            "windows": off_agg["windows"] or 0,
            "partitions_ever_offline": off_agg["partitions"] or 0,
            "still_offline_at_end": off_agg["open"] or 0,
            "max_offline_at_once": peak,
            "max_offline_at_offset": peak_at,
            "longest_window": longest,
            # Only when the cluster was stopped at the end (see at_end): the same
            # figures before the stop began.
            "while_running": while_running,
        },
        "reassignments": reassignments,
        "at_end": _at_end(final, final_brokers, stop),
    }


def _reassignments(ph: DataFrame) -> dict[str, int]:
    """KIP-455 in partition_history: a reassignment starts where a partition's
    interval first has adding or removing replicas, and ends (completed or
    cancelled) where they are gone again."""
    moving = (F.size(F.coalesce(F.col("adding_replicas"), F.array())) > 0) | (
        F.size(F.coalesce(F.col("removing_replicas"), F.array())) > 0
    )
    w = Window.partitionBy("topic_id", "partition_id").orderBy("start_offset")
    flags = ph.select(moving.alias("m"), F.coalesce(F.lag(moving).over(w), F.lit(False)).alias("p"))
    r = flags.agg(
        F.sum(F.when(F.col("m") & ~F.col("p"), 1).otherwise(0)).alias("started"),
        F.sum(F.when(~F.col("m") & F.col("p"), 1).otherwise(0)).alias("ended"),
    ).first()
    started, ended = (r["started"] or 0), (r["ended"] or 0)
    return {"started": started, "ended": ended, "in_progress_at_end": started - ended}


def _at_end(final: Any, brokers: dict[str, int], stop: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topics": final["topics"] or 0,
        "partitions": final["partitions"] or 0,
        "offline_partitions": final["offline"] or 0,
        "brokers_running": brokers.get("UNFENCED", 0),
        "cluster_stopped": stop is not None,
    }
    if stop is not None:
        how = ", ".join(
            f"{n} {state.lower().replace('_', ' ')}" for state, n in stop["brokers_left_by"].items()
        )
        out["stopped_from_offset"] = stop["offset"]
        out["stopped_from_time"] = iso_time(stop["time_ms"])
        out["note"] = (
            f"No broker is running at the end of the log: the cluster was stopped "
            f"(from offset {stop['offset']}, {iso_time(stop['time_ms'])}; brokers left by: {how}). "
            f"Partitions offline at the end follow from that stop; "
            f"offline.while_running has the figures from before it."
        )
    return out


# ----------------------------------------------------------------------------- plots


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _time_unit(span_ms: int) -> tuple[int, str]:
    """(ms per unit, name) so that a log's span reads as a few to a few hundred units."""
    if span_ms <= 15 * 60_000:
        return 1000, "seconds"
    if span_ms <= 15 * 3_600_000:
        return 60_000, "minutes"
    return 3_600_000, "hours"


ELECTION_BUCKETS_MS = (1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000)


def _election_bucket_ms(span_ms: int) -> int:
    """The smallest round bucket giving at most ten bars (a 4 s log: 1 s; 40 s:
    5 s; 2 min: 15 s); a minute for a log of ten minutes or more."""
    for b in ELECTION_BUCKETS_MS:
        if span_ms <= 10 * b:
            return b
    return 60_000


def _per_text(bucket_ms: int) -> str:
    return "per minute" if bucket_ms == 60_000 else f"per {bucket_ms // 1000} s"


def plots(tables: Tables, stop: dict[str, Any] | None = None) -> dict[str, str]:
    """Base64 PNGs: broker states, partitions online/offline, leaders per broker, elections.

    Every plot shares one time axis: the history's start to its end, in seconds,
    minutes or hours after the start (UTC time in the label). `stop`: the
    summary's `at_end` when the cluster was stopped; the stop is shaded.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    info = tables.info
    t0 = info.first_time_ms
    t_end = max(info.last_time_ms, t0 + 1)
    bucket = _bucket_ms(info)
    unit, unit_name = _time_unit(t_end - t0)
    start = datetime.fromtimestamp(t0 / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    x_label = f"{unit_name} since {start}"
    resolution = f"resolution {_duration_text(bucket)}"
    stop_ms = None
    if stop and stop.get("cluster_stopped"):
        stop_ms = int(datetime.fromisoformat(stop["stopped_from_time"]).timestamp() * 1000)

    def x(ms: float) -> float:
        return (ms - t0) / unit

    def finish(
        ax: Any,
        title: str,
        ylabel: str,
        legend: list[Any] | None = None,
        integer_y: bool = True,
    ) -> None:
        ax.set_xlim(0, x(t_end))
        ax.set_xlabel(x_label)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        handles, labels = ax.get_legend_handles_labels()
        if legend is not None:
            handles = legend
        if stop_ms is not None:
            ax.axvspan(x(stop_ms), x(t_end), color="#000000", alpha=0.08, zorder=0)
            handles = [*handles, Patch(color="#000000", alpha=0.15, label="cluster stopping")]
        if integer_y:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0, top=max(1, ax.get_ylim()[1]))
        if handles:
            # under the plot, in rows: it never covers data, and the figure stays
            # narrow enough to read when a phone scales it to its width
            ax.legend(
                handles=handles,
                loc="upper center",
                bbox_to_anchor=(0.5, -0.28),
                fontsize=9,
                ncol=min(len(handles), 6),
                frameon=False,
            )

    out: dict[str, str] = {}

    # 1. broker state timeline
    rows = tables.broker_history.select(
        "broker_id", "state", "start_time_ms", "end_time_ms"
    ).collect()
    ids = sorted({r["broker_id"] for r in rows})[:MAX_PLOTTED_BROKERS]
    row_of = {b: i for i, b in enumerate(ids)}
    fig, ax = plt.subplots(figsize=(11, 0.35 * len(ids) + 1.5))
    bars: dict[str, list[tuple[int, float, float]]] = {}
    for r in rows:
        if r["broker_id"] not in row_of:
            continue
        end_ms = r["end_time_ms"] if r["end_time_ms"] is not None else t_end
        bars.setdefault(r["state"], []).append(
            (row_of[r["broker_id"]], x(r["start_time_ms"]), x(end_ms))
        )
    min_width = x(t0 + (t_end - t0) / 2000)  # a short interval stays visible
    for state, spans in bars.items():
        for y, start, end in spans:
            ax.broken_barh(
                [(start, max(end - start, min_width))], (y - 0.4, 0.8), color=STATE_COLORS[state]
            )
    ax.set_yticks(range(len(ids)), [str(i) for i in ids])
    title = "Broker states"
    if len({r["broker_id"] for r in rows}) > len(ids):
        title += f" (first {len(ids)} brokers)"
    finish(
        ax,
        title,
        "broker",
        legend=[Patch(color=c, label=s) for s, c in STATE_COLORS.items()],
        integer_y=False,
    )
    out["broker_states"] = _png(fig)

    # 2. partitions online / offline over time
    ph = tables.partition_history
    life = ph.groupBy("topic_id", "partition_id").agg(
        F.min("start_time_ms").alias("born"),
        F.max(F.when(F.col("end_offset").isNull(), 1).otherwise(0)).alias("open"),
        F.max("end_time_ms").alias("died"),
    )
    exist = life.select(F.col("born").alias("t"), F.lit(1).alias("delta")).unionByName(
        life.filter(F.col("open") == 0).select(F.col("died").alias("t"), F.lit(-1).alias("delta"))
    )
    off = tables.offline_partitions
    offline = off.select(F.col("start_time_ms").alias("t"), F.lit(1).alias("delta")).unionByName(
        off.filter(F.col("end_time_ms").isNotNull()).select(
            F.col("end_time_ms").alias("t"), F.lit(-1).alias("delta")
        )
    )
    total = dict(_series(exist, "t", bucket, t0))
    offl = dict(_series(offline, "t", bucket, t0))
    xs = sorted(set(total) | set(offl))
    tot_y, off_y, cur_t, cur_o = [], [], 0, 0
    for b in xs:
        cur_t = total.get(b, cur_t)
        cur_o = offl.get(b, cur_o)
        tot_y.append(cur_t)
        off_y.append(cur_o)
    if xs:  # hold the last value to the end of the history
        xs.append(t_end)
        tot_y.append(tot_y[-1])
        off_y.append(off_y[-1])
    fig, ax = plt.subplots(figsize=(11, 3.5))
    mx = [x(b) for b in xs]
    ax.step(mx, [t - o for t, o in zip(tot_y, off_y, strict=True)], where="post", label="online")
    ax.step(mx, off_y, where="post", label="offline", color="#d62728")
    ax.set_ylim(bottom=0)
    finish(
        ax,
        f"Online and offline partitions ({resolution})",
        "partitions",
    )
    out["partitions_online_offline"] = _png(fig)

    # 3. leaders per broker over time
    led = ph.filter(F.col("leader") >= 0)
    lead_deltas = (
        led.select("leader", F.col("start_time_ms").alias("t"), F.lit(1).alias("delta"))
        .unionByName(
            led.filter(F.col("end_time_ms").isNotNull()).select(
                "leader", F.col("end_time_ms").alias("t"), F.lit(-1).alias("delta")
            )
        )
        .select("leader", (F.floor((F.col("t") - t0) / bucket) * bucket + t0).alias("b"), "delta")
        .groupBy("leader", "b")
        .agg(F.sum("delta").alias("d"))
        .orderBy("leader", "b")
        .collect()
    )
    per: dict[int, list[tuple[int, int]]] = {}
    for r in lead_deltas:
        series = per.setdefault(r["leader"], [])
        series.append((r["b"], (series[-1][1] if series else 0) + r["d"]))
    fig, ax = plt.subplots(figsize=(11, 4))
    plotted = sorted(per)[:MAX_PLOTTED_BROKERS]
    for broker, (color, style) in zip(plotted, distinct_line_styles(len(plotted)), strict=True):
        pts = per[broker] + [(t_end, per[broker][-1][1])]
        ax.step(
            [x(p[0]) for p in pts],
            [p[1] for p in pts],
            where="post",
            label=f"broker {broker}",
            color=color,
            linestyle=style,
        )
    ax.set_ylim(bottom=0)
    finish(ax, f"Partitions led per broker ({resolution})", "partitions led")
    out["leaders_per_broker"] = _png(fig)

    # 4. elections over time: per minute on a long log; on a log of a few seconds
    # or minutes a minute would be one bar wider than the whole plot, so the bucket
    # shrinks to the smallest round width giving at most ten bars, aligned on the history's
    # start, and the title and axis name it ("per 5 s")
    ebucket = _election_bucket_ms(t_end - t0)
    # minutes stay UTC clock minutes, as summary.json's busiest_minute
    origin = 0 if ebucket == 60_000 else t0
    el = (
        tables.leader_elections.filter(F.col("cause") != "CREATE")
        .select(F.floor((F.col("append_time_ms") - origin) / ebucket).alias("m"), "cause")
        .groupBy("m", "cause")
        .count()
        .collect()
    )
    causes = sorted({r["cause"] for r in el})
    by_cause: dict[str, dict[int, int]] = {c: {} for c in causes}
    for r in el:
        by_cause[r["cause"]][r["m"]] = r["count"]
    fig, ax = plt.subplots(figsize=(11, 3.5))
    bottom: dict[int, int] = {}
    width = ebucket / unit
    per = _per_text(ebucket)
    for c in causes:
        ms = sorted(by_cause[c])
        ax.bar(
            [x(origin + m * ebucket) for m in ms],
            [by_cause[c][m] for m in ms],
            bottom=[bottom.get(m, 0) for m in ms],
            width=width,
            align="edge",
            label=f"{c} ({sum(by_cause[c].values())})",
            color=CAUSE_COLORS.get(c),
            edgecolor="white",
            linewidth=0.5,
        )
        for m in ms:
            bottom[m] = bottom.get(m, 0) + by_cause[c][m]
    if not causes:
        ax.text(
            0.5, 0.5, "no leader elections (other than partition creation)",
            transform=ax.transAxes, ha="center", va="center", color="#555555",
        )  # fmt: skip
    finish(
        ax,
        f"Leader elections {per}, by cause (partition creation not counted)",
        f"elections {per}",
    )
    out["elections_per_minute"] = _png(fig)
    return out


def _window_text(w: dict[str, Any] | None) -> str:
    if w is None:
        return "none"
    end = "still open at the end" if w["still_open"] else f"until offset {w['end_offset']}"
    return (
        f"{w['topic']}-{w['partition_id']}: {_duration_text(w['duration_ms'])}, "
        f"from offset {w['start_offset']} ({w['start_time']}) {end}"
    )


def source_facts(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """Which log the report shows: an Apache Kafka cluster's or this project's."""
    fmt = summary.get("source_format")
    if fmt is None:
        return []
    what = "Apache Kafka __cluster_metadata log" if fmt == "kafka" else "kraft-py metadata log"
    facts = [("Log", f"{what}: {summary.get('log_dir')}")]
    if summary.get("cluster_id"):
        facts.append(("Cluster id", str(summary["cluster_id"])))
    if summary.get("metadata_version") is not None:
        facts.append(("metadata.version", f"feature level {summary['metadata_version']}"))
    return facts


def key_facts(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The first lines of the report: what a post-mortem reader asks first."""
    log, b, e, o, end = (
        summary["log"],
        summary["brokers"],
        summary["elections"],
        summary["offline"],
        summary["at_end"],
    )
    facts = [*source_facts(summary), ("Records", f"{log['record_count']:,}")]
    facts += [
        ("Offsets", f"{log['first_offset']} .. {log['last_offset']}"),
        (
            "Time (UTC)",
            f"{log['first_time']} .. {log['last_time']} "
            f"({_duration_text(log['duration_s'] * 1000)})",
        ),
    ]
    if log.get("snapshot_end_offset") is not None:
        facts.append(("Starts from", f"the snapshot ending at offset {log['snapshot_end_offset']}"))
    facts += [
        ("Fences / unfences", f"{b['fences']} / {b['unfences']}"),
        ("Controlled shutdowns", str(b["controlled_shutdowns"])),
        ("Elections clean / unclean", f"{e['clean']} / {e['unclean']}"),
        ("Preferred-leader rebalances", str(e.get("rebalances", 0))),
    ]
    ra = summary.get("reassignments")
    if ra:
        facts.append(
            (
                "Reassignments started / ended",
                f"{ra['started']} / {ra['ended']} ({ra['in_progress_at_end']} in progress at end)",
            )
        )
    if e.get("busiest_minute"):
        bm = e["busiest_minute"]
        facts.append(("Busiest minute", f"{bm['elections']} elections from {bm['start']}"))
    wr = o.get("while_running")
    if wr is not None:
        facts += [
            (
                "Most partitions offline at once",
                f"{wr['max_offline_at_once']} while the cluster ran "
                f"({o['max_offline_at_once']} counting the final stop)",
            ),
            ("Longest offline window while running", _window_text(wr["longest_window"])),
        ]
    else:
        at = "" if o["max_offline_at_offset"] is None else f" (offset {o['max_offline_at_offset']})"
        facts += [
            ("Most partitions offline at once", f"{o['max_offline_at_once']}{at}"),
            ("Longest offline window", _window_text(o["longest_window"])),
        ]
    facts.append(
        (
            "At the end",
            f"{end['topics']} topics, {end['partitions']} partitions "
            f"({end['offline_partitions']} offline), {end['brokers_running']} brokers running",
        )
    )
    if end.get("note"):
        facts.append(("Note", end["note"]))
    return facts


def _title_suffix(summary: dict[str, Any]) -> str:
    if summary.get("source_format") != "kafka":
        return ""
    cid = summary.get("cluster_id")
    return f" of Apache Kafka cluster {cid}" if cid else " of an Apache Kafka cluster"


def write_report(out_dir: Path, summary: dict[str, Any], images: dict[str, str]) -> None:
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    titles = {
        "broker_states": "Broker state timeline",
        "partitions_online_offline": "Online / offline partitions over time",
        "leaders_per_broker": "Leaders per broker over time",
        "elections_per_minute": "Leader elections over time",
    }
    rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in key_facts(summary)
    )
    figs = "\n".join(
        f'<h2>{html.escape(titles.get(k, k))}</h2>\n<figure class="plot"><img alt="{html.escape(k)}" '
        f'src="data:image/png;base64,{v}"></figure>'
        for k, v in images.items()
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Cluster metadata history</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.35}}
th{{text-align:left;padding-right:2em;vertical-align:top}}td{{overflow-wrap:anywhere}}
.plot{{margin:0;overflow-x:auto}}.plot img{{max-width:100%}}
pre{{background:#f4f4f4;padding:1em;overflow-x:auto}}
@media (max-width:700px){{body{{margin:1em auto;font-size:15px}}h1{{font-size:1.4em}}
th{{padding-right:.8em}}.plot img{{max-width:none;width:680px}}}}</style>
</head><body>
<h1>Cluster metadata history{html.escape(_title_suffix(summary))}</h1>
{_log_warnings(summary)}<table>{rows}</table>
{figs}
<h2>summary.json</h2>
<pre>{html.escape(json.dumps(summary, indent=2))}</pre>
</body></html>
"""
    (out_dir / "report.html").write_text(page)


def _log_warnings(summary: dict[str, Any]) -> str:
    """Warning paragraphs above the tables: the log ended in a torn batch, or a
    leader epoch went back."""
    from spark_replay.history import epoch_back_text, torn_tail_text

    notes = []
    if summary.get("torn_tail"):
        notes.append(torn_tail_text(summary["torn_tail"]))
    if summary.get("epoch_back"):
        notes.append(epoch_back_text(summary["epoch_back"]))
    return "".join(
        f'<p class="warning"><strong>Warning:</strong> {html.escape(n)}</p>\n' for n in notes
    )


# ----------------------------------------------------------------------------- what if (issue 20)

WHATIF_BEGIN, WHATIF_END = "<!-- what-if -->", "<!-- /what-if -->"


_LINE_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_LINE_STYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)))


def distinct_line_styles(n: int) -> list[tuple[str, Any]]:
    """(color, line style) of n lines, no two alike up to 60 (MAX_PLOTTED_BROKERS):
    matplotlib's default cycle has ten colors and drew the eleventh line like the
    first."""
    out = []
    for i in range(n):
        round_, k = divmod(i, len(_LINE_COLORS))
        out.append((_LINE_COLORS[k], _LINE_STYLES[round_ % len(_LINE_STYLES)]))
    return out


def whatif_line_styles(n: int) -> list[tuple[str, Any, float]]:
    """(color, line style, width) of the what-if plot's n lines: the actual history
    first, thick and black; then each scenario its own (`distinct_line_styles`)."""
    if n == 0:
        return []
    return [("black", "-", 2.2), *((c, s, 1.2) for c, s in distinct_line_styles(n - 1))]


def _whatif_plot(summary: dict[str, Any]) -> str:
    """Offline partitions over time: the actual and every scenario on one axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = summary["first_time_ms"]
    unit, unit_name = _time_unit(summary["last_time_ms"] - t0)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    lines = [summary["actual"], *summary["scenarios"]]
    for s, (color, style, width) in zip(lines, whatif_line_styles(len(lines)), strict=True):
        pts = [*s["metrics"]["offline_series"], [summary["last_time_ms"], None]]
        xs = [(p[0] - t0) / unit for p in pts]
        ys = [p[1] for p in pts[:-1]]
        ys.append(ys[-1] if ys else 0)
        ax.step(
            xs, ys, where="post", linewidth=width, color=color, linestyle=style, label=s["name"]
        )
    ax.set_xlabel(f"time since the log's first record ({unit_name})")
    ax.set_ylabel("partitions offline")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return _png(fig)


def whatif_section_html(summary: dict[str, Any]) -> str:
    """The "What if" section: actual and counterfactual side by side, and the plot."""
    cols = [summary["actual"], *summary["scenarios"]]
    rows = [
        ("Offline partition-seconds", "offline_partition_seconds"),
        ("Most partitions offline at once", "max_offline_at_once"),
        ("Partitions ever offline", "partitions_ever_offline"),
        ("Unclean elections (data may be lost)", "unclean_elections"),
        ("Partitions with an unclean election", "unclean_partitions"),
        ("Leadership moves", "leadership_moves"),
        ("Elections", "elections"),
    ]
    head = "".join(f"<th>{html.escape(c['name'])}</th>" for c in cols)
    body = "".join(
        f"<tr><td>{label}</td>" + "".join(f"<td>{c['metrics'][key]}</td>" for c in cols) + "</tr>"
        for label, key in rows
    )
    unclean = "".join(
        f"<li><b>{html.escape(s['name'])}</b>: "
        + html.escape(
            ", ".join(
                f"{u['topic']}-{u['partition_id']} @ offset {u['offset']}"
                for u in s["metrics"]["unclean_at"][:10]
            )
            or "none"
        )
        + "</li>"
        for s in cols
    )
    topics = sorted(
        {t for c in cols for t in c["metrics"]["offline_seconds_by_topic"]},
        key=lambda t: -max(c["metrics"]["offline_seconds_by_topic"].get(t, 0) for c in cols),
    )[:10]
    by_topic = "".join(
        f"<tr><td>{html.escape(t)}</td>"
        + "".join(f"<td>{c['metrics']['offline_seconds_by_topic'].get(t, 0):g}</td>" for c in cols)
        + "</tr>"
        for t in topics
    )
    ident = summary["identity"]
    if ident["holds"]:
        ident_text = "holds: the in-force scenario reproduces both tables row for row"
    else:
        n = {k: v["differing_rows"] for k, v in ident["tables"].items()}
        ident_text = f"does not hold: differing rows {n} (listed in whatif_summary.json)"
    # Kafka's spelling of a setting's value (true, not Python's True)
    settings = ", ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in summary["in_force"].items()
    )
    # a grid's columns scroll inside their box, never the page sideways
    box = '<div style="overflow-x:auto">'
    plot = (
        '<img style="max-width:100%" alt="offline partitions over time" '
        f'src="data:image/png;base64,{_whatif_plot(summary)}">'
    )

    return f"""{WHATIF_BEGIN}
<h2>What if</h2>
<p>The log's facts replayed through the controller's own code under other settings
(docs/what-if.md). In force: {html.escape(settings)}. Identity check {html.escape(ident_text)}.</p>
{box}<table><tr><th></th>{head}</tr>{body}</table></div>
<h3>Offline seconds by topic (the ten most offline)</h3>
{box}<table><tr><th>topic</th>{head}</tr>{by_topic}</table></div>
<h3>Unclean elections (partition @ offset, first ten)</h3><ul>{unclean}</ul>
{box}{plot}</div>
{WHATIF_END}
"""


def write_whatif_section(out_dir: Path, summary: dict[str, Any]) -> None:
    """Put the section into OUT/report.html (replacing an earlier one), or write a
    page of its own when spark-replay has not written a report there."""
    section = whatif_section_html(summary)
    path = out_dir / "report.html"
    page = path.read_text() if path.exists() else ""
    if WHATIF_BEGIN in page and WHATIF_END in page:
        before, rest = page.split(WHATIF_BEGIN, 1)
        page = before + section + rest.split(WHATIF_END, 1)[1].lstrip("\n")
    elif "</body>" in page:
        page = page.replace("</body>", section + "</body>", 1)
    else:
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>what if</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
            "td,th{border:1px solid #ccc;padding:2px 6px}table{border-collapse:collapse}"
            f"</style></head><body>{section}</body></html>\n"
        )
    path.write_text(page)
