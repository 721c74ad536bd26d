"""spark-replay on Apache Kafka's own metadata logs (issue 23).

- A real Kafka 3.7 log (tests/fixtures/kafka/ldi-poc, copied to a read-only
  folder first): every table and the report are written, and broker 1's
  controlled shutdown then fence shows in `broker_history` at the offsets of its
  BrokerRegistrationChangeRecords, the partitions it led offline from their
  PartitionChangeRecords on.
- One seeded story, written natively by the generator and rewritten in Kafka's
  format by `metadata_log.kafka.writer`: the same records and history tables, row
  for row, through the Spark job and through the one-process replay.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from metadata_log.errors import MetadataLogError
from metadata_log.kafka.writer import write_kafka_log
from spark_replay.cli import TABLES, main, run_job
from spark_replay.datasource import list_log_files, resolve_format
from spark_replay.generator import GeneratorConfig, generate
from spark_replay.one_process import write_tables

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kafka"
BROKER = 1


def _read_only_copy(src: Path, dst: Path) -> Path:
    """A copy with every file and folder read-only: a write to it would fail."""
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in files:
            os.chmod(Path(root) / name, stat.S_IRUSR | stat.S_IRGRP)
        for name in dirs:
            os.chmod(Path(root) / name, stat.S_IRUSR | stat.S_IXUSR)
    return dst


def _rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def ldi(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("ldi")
    log = _read_only_copy(FIXTURES / "ldi-poc", base / "ldi-poc")
    out = base / "out"
    result = run_job(spark, log, out)
    yield {"log": log, "out": out, "result": result}
    for root, dirs, _files in os.walk(log):  # let pytest remove its temp dir
        for name in dirs:
            os.chmod(Path(root) / name, stat.S_IRWXU)
    os.chmod(log, stat.S_IRWXU)


def test_format_is_told_by_the_magic_byte(tmp_path: Path) -> None:
    assert resolve_format(FIXTURES / "ldi-poc") == "kafka"
    assert resolve_format(FIXTURES / "kafka-3x-datadir" / "__cluster_metadata-0") == "kafka"
    generate(tmp_path, GeneratorConfig(records=200, seed=1))
    assert resolve_format(tmp_path) == "kraft"
    assert {f.fmt for f in list_log_files(FIXTURES / "kafka-4x-rig")} == {"kafka"}
    with pytest.raises(MetadataLogError, match="unknown log format 'avro'"):
        resolve_format(tmp_path, "avro")


def test_kafka_log_read_as_native_is_a_clear_error(tmp_path: Path, capsys: Any) -> None:
    # Forcing the wrong format fails before Spark starts, naming the folder and the
    # format its first batch has (read as the other one, it failed its checksum).
    with pytest.raises(MetadataLogError, match=r"is Kafka's \(magic 2\): give --format kafka"):
        list_log_files(FIXTURES / "ldi-poc", fmt="kraft")
    code = main(["--log-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_every_table_and_the_report_of_a_real_kafka_log(ldi: dict[str, Any]) -> None:
    out = ldi["out"]
    for name in ("records", *TABLES):
        assert (out / name / "_SUCCESS").exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["source_format"] == "kafka"
    assert summary["metadata_version"] == 19  # 3.7-IV4, the fixture README
    assert summary["log_dir"] == str((ldi["log"] / "__cluster_metadata-0").resolve())
    assert summary["cluster_id"] is None  # the fixture has no meta.properties
    assert summary["log"]["record_count"] == 4929
    assert summary["records_by_type"]["ProducerIdsRecord"] == 1  # unmodelled, not dropped
    page = (out / "report.html").read_text()
    assert "Apache Kafka __cluster_metadata log" in page
    assert str(ldi["log"] / "__cluster_metadata-0") in page
    records = _rows(out / "records")
    assert sorted(r["offset"] for r in records) == list(range(4929))
    zk = [r for r in records if r["type"] == "ZkMigrationStateRecord"]
    assert len(zk) == 1 and json.loads(zk[0]["fields"]) == {"zk_migration_state": 0}


def test_controlled_shutdown_then_fence_in_broker_history(ldi: dict[str, Any]) -> None:
    out = ldi["out"]
    records = _rows(out / "records")
    brc = sorted(
        (r["offset"], json.loads(r["fields"]))
        for r in records
        if r["type"] == "BrokerRegistrationChangeRecord" and r["broker_id"] == BROKER
    )
    # What the log says, read from the records table rather than assumed.
    unfence = [o for o, f in brc if f["fenced"] == -1]
    shutdown = [o for o, f in brc if f["in_controlled_shutdown"] == 1]
    fence = [o for o, f in brc if f["fenced"] == 1]
    assert (unfence, shutdown, fence) == ([9], [4871], [4926])

    history = sorted(
        (r for r in _rows(out / "broker_history") if r["broker_id"] == BROKER),
        key=lambda r: r["start_offset"],
    )
    states = [(r["state"], r["start_offset"], r["end_offset"]) for r in history]
    assert states[-3:] == [
        ("UNFENCED", 9, 4871),
        ("CONTROLLED_SHUTDOWN", 4871, 4926),
        ("FENCED", 4926, None),
    ]

    # The partitions it led go offline at their own PartitionChangeRecords.
    changes = {
        (r["topic_id"], r["partition_id"]): r["offset"]
        for r in records
        if r["type"] == "PartitionChangeRecord" and r["leader"] == -1
    }
    led = {
        (r["topic_id"], r["partition_id"])
        for r in _rows(out / "partition_history")
        if r["leader"] == BROKER and r["end_offset"] is not None
    }
    offline = {(r["topic_id"], r["partition_id"]): r for r in _rows(out / "offline_partitions")}
    assert len(changes) == 54 and set(changes) == led == set(offline)
    for key, r in offline.items():
        assert r["start_offset"] == changes[key]
        assert 4871 < r["start_offset"] < 4926
        assert r["end_offset"] is None  # still offline at the end of the log
    elections = [r for r in _rows(out / "leader_elections") if r["new_leader"] == -1]
    assert {r["cause"] for r in elections} == {"CONTROLLED_SHUTDOWN"}
    assert {r["cause_broker_id"] for r in elections} == {BROKER}


def test_a_whole_real_kafka_data_dir_as_it_is(tmp_path: Path) -> None:
    """`--log-dir` is a Kafka data dir as copied (log.dirs of a combined node: data
    partitions, indexes, checkpoints beside __cluster_metadata-0): the one-process
    replay (the Spark job's functions) finds the metadata log in it, and the broker's
    controlled shutdown then fence are in broker_history at the offsets of its
    BrokerRegistrationChangeRecords (pinned from the records in
    tests/unit/metadata_log/kafka/test_real_kafka_datadir.py), the two partitions it
    led offline from their PartitionChangeRecords on."""
    log = _read_only_copy(FIXTURES / "kafka-3x-datadir", tmp_path / "datadir")
    try:
        n = write_tables(log, tmp_path / "out")
    finally:
        for root, dirs, _files in os.walk(log):  # let pytest remove its temp dir
            for name in dirs:
                os.chmod(Path(root) / name, stat.S_IRWXU)
        os.chmod(log, stat.S_IRWXU)
    assert n == 2715
    history = sorted(_rows(tmp_path / "out" / "broker_history"), key=lambda r: r["start_offset"])
    assert [(r["broker_id"], r["state"], r["start_offset"], r["end_offset"]) for r in history] == [
        (1, "FENCED", 2, 3),
        (1, "UNFENCED", 3, 2709),
        (1, "CONTROLLED_SHUTDOWN", 2709, 2714),
        (1, "FENCED", 2714, None),
    ]
    offline = _rows(tmp_path / "out" / "offline_partitions")
    assert sorted((r["topic"], r["start_offset"], r["end_offset"]) for r in offline) == [
        ("my-topic", 2711, None),
        ("test-topic", 2710, None),
    ]
    # The shutdown takes the leaders (2710-2711); the fence then bumps each leaderless
    # partition's epoch, leader -1 -> -1 (2712-2713): caused by the fence of broker 1,
    # still in their ISR, not an AlterPartition of leader -1.
    elections = _rows(tmp_path / "out" / "leader_elections")
    assert sorted(
        (
            r["offset"],
            r["topic"],
            r["old_leader"],
            r["new_leader"],
            r["cause"],
            r["cause_broker_id"],
        )
        for r in elections
        if r["cause"] != "CREATE"
    ) == [
        (2710, "test-topic", 1, -1, "CONTROLLED_SHUTDOWN", 1),
        (2711, "my-topic", 1, -1, "CONTROLLED_SHUTDOWN", 1),
        (2712, "test-topic", -1, -1, "FENCE", 1),
        (2713, "my-topic", -1, -1, "FENCE", 1),
    ]
    assert {r["election_type"] for r in elections if r["cause"] != "CREATE"} == {None}


def test_kafka_3x_datadir_the_window_reference_writes_the_same_tables(
    spark: Any, tmp_path: Path
) -> None:
    """The DataFrame-window reference (history.build_tables) gives the Kafka 3.x data
    dir the one-process replay's rows, the leaderless epoch bumps' FENCE causes
    (2712-2713) included."""
    from spark_replay import history as H
    from spark_replay.datasource import read_log
    from spark_replay.tables import TABLE_COLUMNS

    log = FIXTURES / "kafka-3x-datadir"
    write_tables(log, tmp_path / "out")
    tables = H.build_tables(spark, read_log(spark, log))
    for table, cols in TABLE_COLUMNS.items():
        theirs = getattr(tables, table).select(*cols).collect()
        ours = pq.read_table(tmp_path / "out" / table).select(list(cols)).to_pylist()
        assert sorted((tuple(r[c] for c in cols) for r in ours), key=repr) == sorted(
            map(tuple, theirs), key=repr
        ), table
    causes = {r["offset"]: r["cause"] for r in tables.leader_elections.collect()}
    assert (causes[2712], causes[2713]) == ("FENCE", "FENCE")


def test_kafka_3x_datadir_summary_counts_no_clean_election_and_two_leaders_lost(
    spark: Any, tmp_path: Path
) -> None:
    """The four non-CREATE rows of the 3.x data dir elect nobody: the shutdown's two
    take the leaders (lost), the fence's two bump leaderless partitions' epochs
    (-1 -> -1: no leader to lose). summary.json counted all four clean and four lost."""
    run_job(spark, FIXTURES / "kafka-3x-datadir", tmp_path / "out")
    elections = json.loads((tmp_path / "out" / "summary.json").read_text())["elections"]
    assert (
        elections["total"],
        elections["clean"],
        elections["unclean"],
        elections["leader_lost"],
    ) == (4, 0, 0, 2)


def test_a_snapshot_without_its_footer_is_not_a_starting_state(spark: Any, tmp_path: Path) -> None:
    """Kafka 4's snapshot (no segments beside it) is the whole story; the same file
    cut before its SnapshotFooter batch is refused, naming the file, before any
    table is written (it was accepted, and its partial state replayed)."""
    from kraft.tools.dump_log import iter_file
    from spark_replay.history import HistoryError

    whole = _read_only_copy(FIXTURES / "kafka-4x-rig-snapshot", tmp_path / "whole")
    result = run_job(spark, whole, tmp_path / "out", report=False)
    assert result["info"]["snapshot_end_offset"] == 46533

    cut = tmp_path / "cut"
    shutil.copytree(FIXTURES / "kafka-4x-rig-snapshot", cut)
    (snap,) = (cut / "__cluster_metadata-0").glob("*.checkpoint")
    footer = [b for b in iter_file(snap) if not isinstance(b, Exception)][-1]
    assert footer.rows[0].type == "SnapshotFooterRecord"
    snap.write_bytes(snap.read_bytes()[: footer.position])
    with pytest.raises(HistoryError, match="not whole: it has no SnapshotFooter") as e:
        run_job(spark, cut, tmp_path / "cut-out", report=False)
    assert str(snap) in str(e.value)
    assert not (tmp_path / "cut-out" / "leader_elections").exists()
    # a failed rerun into the good run's OUT leaves that run (and other files) whole
    good = tmp_path / "out"
    (good / "notes.txt").write_text("mine\n")
    summary = (good / "_work").exists(), sorted(p.name for p in good.iterdir())
    elections = sorted(p.name for p in (good / "leader_elections").iterdir())
    with pytest.raises(HistoryError):
        run_job(spark, cut, good, report=False)
    assert ((good / "_work").exists(), sorted(p.name for p in good.iterdir())) == summary
    assert sorted(p.name for p in (good / "leader_elections").iterdir()) == elections
    assert (good / "notes.txt").read_text() == "mine\n"


# A small story with metadata transactions, several segments and failovers.
STORY = GeneratorConfig(
    records=6_000,
    seed=23,
    max_batch_bytes=600,
    failover_rate=0.01,
    segment_bytes=32 * 1024,
    validate=True,
)


def _table(out: Path, name: str) -> list[tuple[Any, ...]]:
    t = pq.read_table(out / name)
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("story")
    generate(base / "native", STORY)
    write_kafka_log(base / "native", base / "kafka")
    return {"native": base / "native", "kafka": base / "kafka", "base": base}


def test_seeded_story_same_history_in_both_formats_one_process(story: dict[str, Path]) -> None:
    base = story["base"]
    assert resolve_format(story["kafka"]) == "kafka"
    assert len(list_log_files(story["kafka"])) > 3  # several segments
    n = write_tables(story["native"], base / "op-native")
    assert write_tables(story["kafka"], base / "op-kafka") == n
    for name in ("records", *TABLES):
        assert _table(base / "op-native", name) == _table(base / "op-kafka", name), name


def test_seeded_story_same_history_in_both_formats_spark(
    spark: Any, story: dict[str, Path]
) -> None:
    base = story["base"]
    native = run_job(spark, story["native"], base / "native-out", report=False)
    kafka = run_job(spark, story["kafka"], base / "kafka-out", report=False)
    assert (native["source_format"], kafka["source_format"]) == ("kraft", "kafka")
    assert native["info"] == kafka["info"]
    for name in ("records", *TABLES):
        a = _table(base / "native-out", name)
        assert a == _table(base / "kafka-out", name), name
        assert a, name  # a story with something in every table
