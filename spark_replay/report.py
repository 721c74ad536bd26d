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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_replay.history import Tables

STATE_COLORS = {
    "UNFENCED": "#2ca02c",
    "CONTROLLED_SHUTDOWN": "#ff7f0e",
    "FENCED": "#d62728",
    "UNREGISTERED": "#7f7f7f",
}
MAX_PLOTTED_BROKERS = 60
MAX_BUCKETS = 400


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _bucket_ms(info: Any) -> int:
    """Plot resolution: about MAX_BUCKETS points over the log, at least one second."""
    span = max(1, info.last_time_ms - info.first_time_ms)
    return max(1000, -(-span // MAX_BUCKETS))


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
            F.sum(F.when(F.col("unclean"), 1).otherwise(0)).alias("unclean"),
            F.sum(F.when(F.col("new_leader") < 0, 1).otherwise(0)).alias("lost"),
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
    peak, peak_at, running = 0, None, 0
    for r in deltas:
        running += r["d"]
        if running > peak:
            peak, peak_at = running, r["o"]
    end_ms = info.last_time_ms
    dur = F.coalesce(F.col("end_time_ms"), F.lit(end_ms)) - F.col("start_time_ms")
    longest = off.select("*", dur.alias("duration_ms")).orderBy(F.desc("duration_ms")).first()
    off_agg = off.agg(
        F.count(F.lit(1)).alias("windows"),
        F.sum(F.when(F.col("end_offset").isNull(), 1).otherwise(0)).alias("open"),
        F.countDistinct("topic_id", "partition_id").alias("partitions"),
    ).first()
    ph = tables.partition_history
    final = (
        ph.filter(F.col("end_offset").isNull())
        .agg(
            F.count(F.lit(1)).alias("partitions"),
            F.sum(F.when(F.col("leader") < 0, 1).otherwise(0)).alias("offline"),
            F.countDistinct("topic_id").alias("topics"),
        )
        .first()
    )
    bh = tables.broker_history
    final_brokers = {
        r["state"]: r["count"]
        for r in bh.filter(F.col("end_offset").isNull()).groupBy("state").count().collect()
    }
    return {
        "log": {
            **info.to_dict(),
            "first_time": _iso(info.first_time_ms),
            "last_time": _iso(info.last_time_ms),
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
            "state_at_end": final_brokers,
        },
        "controller": {
            "leader_changes": b["controller_leader_changes"] or 0,
            "last_raft_epoch": b["last_raft_epoch"],
        },
        "elections": {
            "total": e["n"] or 0,
            "clean": (e["n"] or 0) - (e["unclean"] or 0),
            "unclean": e["unclean"] or 0,
            "leader_lost": e["lost"] or 0,
            "by_cause": dict(sorted(causes.items())),
        },
        "offline": {
            "windows": off_agg["windows"] or 0,
            "partitions_ever_offline": off_agg["partitions"] or 0,
            "still_offline_at_end": off_agg["open"] or 0,
            "max_offline_at_once": peak,
            "max_offline_at_offset": peak_at,
            "longest_window": None
            if longest is None
            else {
                "topic": longest["topic"],
                "topic_id": longest["topic_id"],
                "partition_id": longest["partition_id"],
                "start_offset": longest["start_offset"],
                "end_offset": longest["end_offset"],
                "start_time": _iso(longest["start_time_ms"]),
                "duration_ms": longest["duration_ms"],
                "still_open": longest["end_offset"] is None,
            },
        },
        "at_end": {
            "topics": final["topics"] or 0,
            "partitions": final["partitions"] or 0,
            "offline_partitions": final["offline"] or 0,
        },
    }


# ----------------------------------------------------------------------------- plots


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plots(tables: Tables) -> dict[str, str]:
    """Base64 PNGs: broker states, partitions online/offline, leaders per broker, elections."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = tables.info
    t0 = info.first_time_ms
    t_end = info.last_time_ms
    bucket = _bucket_ms(info)

    def minutes(ms: float) -> float:
        return (ms - t0) / 60_000

    out: dict[str, str] = {}

    # 1. broker state timeline
    rows = tables.broker_history.select(
        "broker_id", "state", "start_time_ms", "end_time_ms"
    ).collect()
    ids = sorted({r["broker_id"] for r in rows})[:MAX_PLOTTED_BROKERS]
    fig, ax = plt.subplots(figsize=(11, 0.35 * len(ids) + 1.5))
    for r in rows:
        if r["broker_id"] not in ids:
            continue
        y = ids.index(r["broker_id"])
        start = minutes(r["start_time_ms"])
        end = minutes(r["end_time_ms"] if r["end_time_ms"] is not None else t_end)
        ax.broken_barh(
            [(start, max(end - start, 1e-3))], (y - 0.4, 0.8), color=STATE_COLORS[r["state"]]
        )
    ax.set_yticks(range(len(ids)), [str(i) for i in ids])
    ax.set_xlabel("minutes since start of history")
    ax.set_ylabel("broker")
    ax.set_title("Broker states")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=c, label=s) for s, c in STATE_COLORS.items()],
        loc="upper right",
        fontsize=8,
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
    for x in xs:
        cur_t = total.get(x, cur_t)
        cur_o = offl.get(x, cur_o)
        tot_y.append(cur_t)
        off_y.append(cur_o)
    fig, ax = plt.subplots(figsize=(11, 3.5))
    mx = [minutes(x) for x in xs]
    ax.step(mx, [t - o for t, o in zip(tot_y, off_y, strict=True)], where="post", label="online")
    ax.step(mx, off_y, where="post", label="offline", color="#d62728")
    ax.set_xlabel("minutes since start of history")
    ax.set_ylabel("partitions")
    ax.set_title(f"Online and offline partitions (bucket {bucket / 1000:g} s, end of bucket)")
    ax.legend()
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
    for broker in sorted(per)[:MAX_PLOTTED_BROKERS]:
        pts = per[broker] + [(t_end, per[broker][-1][1])]
        ax.step([minutes(p[0]) for p in pts], [p[1] for p in pts], where="post", label=str(broker))
    ax.set_xlabel("minutes since start of history")
    ax.set_ylabel("partitions led")
    ax.set_title("Leaders per broker")
    if per:
        ax.legend(title="broker", fontsize=7, ncol=max(1, len(per) // 12), loc="upper right")
    out["leaders_per_broker"] = _png(fig)

    # 4. elections per minute
    el = (
        tables.leader_elections.filter(F.col("cause") != "CREATE")
        .select(
            F.floor((F.col("append_time_ms") - t0) / 60_000).alias("m"),
            "cause",
        )
        .groupBy("m", "cause")
        .count()
        .collect()
    )
    causes = sorted({r["cause"] for r in el})
    by_cause = {c: {} for c in causes}
    for r in el:
        by_cause[r["cause"]][r["m"]] = r["count"]
    fig, ax = plt.subplots(figsize=(11, 3.5))
    bottom: dict[int, int] = {}
    for c in causes:
        ms = sorted(by_cause[c])
        ax.bar(
            ms,
            [by_cause[c][m] for m in ms],
            bottom=[bottom.get(m, 0) for m in ms],
            width=1.0,
            label=c,
        )
        for m in ms:
            bottom[m] = bottom.get(m, 0) + by_cause[c][m]
    ax.set_xlabel("minute since start of history")
    ax.set_ylabel("elections")
    ax.set_title("Leader elections per minute, by cause")
    if causes:
        ax.legend(fontsize=8)
    out["elections_per_minute"] = _png(fig)
    return out


def write_report(out_dir: Path, summary: dict[str, Any], images: dict[str, str]) -> None:
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    titles = {
        "broker_states": "Broker state timeline",
        "partitions_online_offline": "Online / offline partitions over time",
        "leaders_per_broker": "Leaders per broker over time",
        "elections_per_minute": "Elections per minute",
    }
    key_facts = [
        ("Records", summary["log"]["record_count"]),
        ("Offsets", f"{summary['log']['first_offset']} .. {summary['log']['last_offset']}"),
        ("Time", f"{summary['log']['first_time']} .. {summary['log']['last_time']}"),
        ("Fences / unfences", f"{summary['brokers']['fences']} / {summary['brokers']['unfences']}"),
        ("Controlled shutdowns", summary["brokers"]["controlled_shutdowns"]),
        (
            "Elections (clean / unclean)",
            f"{summary['elections']['clean']} / {summary['elections']['unclean']}",
        ),
        ("Most partitions offline at once", summary["offline"]["max_offline_at_once"]),
        ("Longest offline window", json.dumps(summary["offline"]["longest_window"])),
        ("Offline at end", summary["offline"]["still_offline_at_end"]),
    ]
    rows = "\n".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in key_facts
    )
    figs = "\n".join(
        f'<h2>{html.escape(titles.get(k, k))}</h2>\n<img alt="{html.escape(k)}" '
        f'src="data:image/png;base64,{v}">'
        for k, v in images.items()
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Cluster metadata history</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
th{{text-align:left;padding-right:2em}}img{{max-width:100%}}pre{{background:#f4f4f4;padding:1em}}</style>
</head><body>
<h1>Cluster metadata history</h1>
<table>{rows}</table>
{figs}
<h2>summary.json</h2>
<pre>{html.escape(json.dumps(summary, indent=2))}</pre>
</body></html>
"""
    (out_dir / "report.html").write_text(page)
