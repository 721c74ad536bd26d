"""Seeded stories from the generator: Spark's history equals in-process replay.

For each story, the state as of every 1,000th offset computed from Spark's
broker_history and partition_history equals `replay_log` (MetadataImage) at the
same offset, and the intervals tile each broker's and partition's lifetime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metadata_log.replay import replay_log
from spark_replay import history as H
from spark_replay.cli import run_job
from spark_replay.datasource import read_log
from spark_replay.generator import GeneratorConfig, generate

STORIES = {
    "plain": GeneratorConfig(records=12_000, seed=11, validate=True),
    # fences and restarts big enough to become metadata transactions
    "transactions": GeneratorConfig(
        records=12_000, seed=12, max_batch_bytes=600, failover_rate=0.01, validate=True
    ),
    # retention deleted the segments below a snapshot: history starts from it
    "from_snapshot": GeneratorConfig(
        records=12_000,
        seed=13,
        segment_bytes=64 * 1024,
        snapshot_at=(0.3, 0.55),
        delete_before_snapshot=True,
        validate=True,
    ),
}


@pytest.fixture(scope="module")
def stories(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = {}
    for name, cfg in STORIES.items():
        data = tmp_path_factory.mktemp(name)
        meta = generate(data, cfg)
        tables = H.build_tables(spark, read_log(spark, data))
        out[name] = {
            "dir": data,
            "meta": meta,
            "tables": tables,
            "brokers": tables.broker_history.collect(),
            "partitions": tables.partition_history.collect(),
            "offline": tables.offline_partitions.collect(),
        }
    return out


def _offline_at(offline_rows: list[Any], off: int) -> set[tuple[str, int]]:
    """(topic id, partition id) of the offline_partitions intervals covering `off`."""
    return {
        (r["topic_id"], r["partition_id"])
        for r in offline_rows
        if r["start_offset"] <= off and (r["end_offset"] is None or r["end_offset"] > off)
    }


def _leaderless(image: Any) -> set[tuple[str, int]]:
    """(topic id, partition id) of the image's partitions without a leader."""
    return {
        (tid, pid)
        for tid, t in image.topics.items()
        for pid, p in t.partitions.items()
        if p.leader < 0
    }


@pytest.mark.parametrize("name", list(STORIES))
def test_state_every_1000th_offset_equals_replay(
    spark: Any, stories: dict[str, Any], name: str
) -> None:
    s = stories[name]
    tables = s["tables"]
    info = tables.info
    end = s["meta"]["end_offset"]
    offsets = [o for o in range(0, end, 1000) if o >= info.first_offset] + [end - 1]
    assert len(offsets) >= 5
    # the state at every offset, computed by Spark in one query per table
    b_df, p_df = H.states_as_of(
        spark, tables.broker_history, tables.partition_history, info, offsets
    )
    b_at: dict[int, list[Any]] = {}
    p_at: dict[int, list[Any]] = {}
    for r in b_df.collect():
        b_at.setdefault(r["as_of_offset"], []).append(r)
    for r in p_df.collect():
        p_at.setdefault(r["as_of_offset"], []).append(r)
    for off in offsets:
        image = replay_log(s["dir"], upto_offset=off)
        got = H.rows_state(b_at.get(off, []), p_at.get(off, []))
        assert got == H.image_state(image), f"{name} at offset {off}"
        # the driver-side lookup over the collected intervals agrees
        assert H.state_from_intervals(s["brokers"], s["partitions"], off) == got
        assert _offline_at(s["offline"], off) == _leaderless(image), (
            f"{name} offline partitions at offset {off}"
        )


def _images(data: Path, first: int, every: int):  # noqa: ANN202
    """(offset, image) at every `every`-th offset from `first`, replaying once."""
    from metadata_log.replay import iter_file_batches, metadata_dir, segment_files

    image = replay_log(data, upto_offset=first)
    yield first, image
    segs = segment_files(metadata_dir(data))
    for i, (_base, path) in enumerate(segs):
        for b in iter_file_batches(path, allow_torn_tail=i == len(segs) - 1):
            for j, rec in enumerate(b.records):
                off = b.base_offset + j
                if off > image.offset:
                    image.replay(rec, off)
                    if off % every == 0:
                        yield off, image


@pytest.mark.parametrize("name", list(STORIES))
def test_offline_partitions_every_100th_offset(stories: dict[str, Any], name: str) -> None:
    s = stories[name]
    seen_offline = 0
    for off, image in _images(s["dir"], s["tables"].info.first_offset, 100):
        offline = _offline_at(s["offline"], off)
        assert offline == _leaderless(image), f"{name} at offset {off}"
        seen_offline += len(offline)
    assert seen_offline > 0  # the story does take partitions offline


@pytest.mark.parametrize("name", list(STORIES))
def test_intervals_tile(stories: dict[str, Any], name: str) -> None:
    s = stories[name]
    assert H.tiling_errors(s["brokers"], ("broker_id",)) == []
    assert H.tiling_errors(s["partitions"], ("topic_id", "partition_id")) == []
    # offline windows are maximal: never two touching windows of one partition
    ends = {(r["topic_id"], r["partition_id"], r["end_offset"]) for r in s["offline"]}
    assert not [
        r for r in s["offline"] if (r["topic_id"], r["partition_id"], r["start_offset"]) in ends
    ]
    # every key's first interval starts inside the history, the last one is open or ended
    first = s["tables"].info.first_offset
    assert min(r["start_offset"] for r in s["brokers"]) >= first


def test_story_from_snapshot_starts_at_the_snapshot(stories: dict[str, Any]) -> None:
    s = stories["from_snapshot"]
    info = s["tables"].info
    assert info.snapshot_end_offset is not None
    assert info.segment_first_offset > 0
    assert info.first_offset == info.snapshot_end_offset - 1
    starts = {r["start_offset"] for r in s["brokers"]} | {
        r["start_offset"] for r in s["partitions"]
    }
    assert info.first_offset in starts


def test_stories_have_the_interesting_events(stories: dict[str, Any]) -> None:
    causes = {r["cause"] for s in stories.values() for r in s["tables"].leader_elections.collect()}
    assert {"CREATE", "FENCE", "UNFENCE", "CONTROLLED_SHUTDOWN", "ADMIN"} <= causes
    assert stories["transactions"]["tables"].info.transactions


def test_cli_job_writes_tables_state_and_report(
    spark: Any, stories: dict[str, Any], tmp_path: Path
) -> None:
    s = stories["plain"]
    result = run_job(spark, s["dir"], tmp_path, as_of_offset=5000)
    for table in (
        "records",
        "broker_history",
        "partition_history",
        "leader_elections",
        "offline_partitions",
    ):
        assert list((tmp_path / table).glob("*.parquet")), table
    state = json.loads((tmp_path / "state_as_of" / "state.json").read_text())
    brokers, partitions = H.image_state(replay_log(s["dir"], upto_offset=5000))
    assert state["brokers"] == brokers and state["partitions"] == partitions
    assert spark.read.parquet(str(tmp_path / "state_as_of" / "partitions")).count() == len(
        partitions
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["log"]["record_count"] == s["meta"]["records"]
    assert sum(summary["records_by_type"].values()) == s["meta"]["records"]
    assert summary["brokers"]["fences"] > 0
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4
    assert result["as_of_offset"] == 5000
    # The CLI's records stage (pyarrow, one task per file) decodes exactly as the
    # data source does, and the tables it builds equal the fixture's.
    cli_records = spark.read.parquet(str(tmp_path / "records"))
    source_records = read_log(spark, s["dir"])
    assert cli_records.schema == source_records.schema
    assert cli_records.count() == source_records.count() == s["meta"]["records"]
    assert cli_records.exceptAll(source_records).count() == 0
    assert source_records.exceptAll(cli_records).count() == 0

    def rows(table: str) -> list[dict[str, Any]]:
        df = spark.read.parquet(str(tmp_path / table))
        return sorted((r.asDict() for r in df.collect()), key=repr)

    assert rows("broker_history") == sorted((r.asDict() for r in s["brokers"]), key=repr)
    assert rows("partition_history") == sorted((r.asDict() for r in s["partitions"]), key=repr)
    assert rows("offline_partitions") == sorted((r.asDict() for r in s["offline"]), key=repr)


@pytest.mark.parametrize("name", ["plain", "transactions"])
def test_one_process_replay_writes_the_same_tables(
    spark: Any, stories: dict[str, Any], name: str, tmp_path: Path
) -> None:
    """The benchmark's baseline (streaming, no Spark) writes Spark's tables row for row."""
    from spark_replay.one_process import write_tables
    from spark_replay.tables import TABLE_COLUMNS

    s = stories[name]
    assert write_tables(s["dir"], tmp_path) == s["meta"]["records"]
    kinds = {r["cause"] for r in s["tables"].leader_elections.collect()}
    assert {"CREATE", "FENCE", "UNFENCE"} <= kinds
    for table, cols in TABLE_COLUMNS.items():
        ours = spark.read.parquet(str(tmp_path / table)).select(*cols).collect()
        theirs = getattr(s["tables"], table).select(*cols).collect()
        assert ours, table
        assert sorted(map(tuple, ours), key=repr) == sorted(map(tuple, theirs), key=repr), table
    records = spark.read.parquet(str(tmp_path / "records"))
    assert records.count() == s["meta"]["records"]


def test_one_process_replay_refuses_a_history_from_a_snapshot(
    stories: dict[str, Any], tmp_path: Path
) -> None:
    from spark_replay.one_process import OneProcessError, main, write_tables

    with pytest.raises(OneProcessError, match="complete logs only"):
        write_tables(stories["from_snapshot"]["dir"], tmp_path / "a")
    # the command line says so in one line, exit status 2, and keeps what is there
    (tmp_path / "b" / "records").mkdir(parents=True)
    assert main(["--log-dir", str(stories["plain"]["dir"]), "--out", str(tmp_path / "b")]) == 2
    assert list((tmp_path / "b").iterdir()) == [tmp_path / "b" / "records"]


@pytest.mark.parametrize("name", ["transactions", "from_snapshot"])
def test_segment_parallel_job_writes_the_window_reference_tables(
    spark: Any, stories: dict[str, Any], name: str, tmp_path: Path
) -> None:
    """The CLI job (segment-parallel, vectorised: spark_replay.replay_job) writes
    the tables of the DataFrame-window reference (history.build_tables) row for
    row, on a story with transactions across segments and on one that starts
    from a snapshot (the plain story: test_cli_job_writes_tables_state_and_report)."""
    from spark_replay.tables import TABLE_COLUMNS

    s = stories[name]
    run_job(spark, s["dir"], tmp_path, report=False)
    for table, cols in TABLE_COLUMNS.items():
        ours = spark.read.parquet(str(tmp_path / table)).select(*cols).collect()
        theirs = getattr(s["tables"], table).select(*cols).collect()
        assert ours, table
        assert sorted(map(tuple, ours), key=repr) == sorted(map(tuple, theirs), key=repr), table
