"""The data source: partitions, pruning, and failing loudly on a damaged log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metadata_log.batch import iter_headers
from metadata_log.records import NoOpRecord, PartitionChangeRecord
from spark_replay.cli import main, run_job, user_message
from spark_replay.datasource import list_log_files, read_log
from tests.spark.logs import write_log

BATCHES = [(1, 1000 + i, [NoOpRecord()] * (1 + i % 3), False) for i in range(60)]
N = sum(len(b[2]) for b in BATCHES)  # 120 records


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    meta = write_log(tmp_path, BATCHES, segment_bytes=300)
    assert len(list(meta.glob("*.log"))) >= 5
    return tmp_path


def test_one_partition_per_file_and_all_records(spark: Any, log: Path) -> None:
    df = read_log(spark, log)
    files = list_log_files(log)
    assert df.rdd.getNumPartitions() == len(files)
    offsets = sorted(r["offset"] for r in df.select("offset").collect())
    assert offsets == list(range(N))


def test_upto_offset_prunes_segments(spark: Any, log: Path) -> None:
    all_files = list_log_files(log)
    pruned = list_log_files(log, upto_offset=30)
    assert 0 < len(pruned) < len(all_files)
    df = read_log(spark, log, upto_offset=30)
    assert df.rdd.getNumPartitions() == len(pruned)
    assert sorted(r["offset"] for r in df.select("offset").collect()) == list(range(31))
    # a pushed-down filter prunes the same way, and Spark still applies it
    f = read_log(spark, log).filter("offset <= 30")
    assert f.count() == 31


def test_filters_without_a_column_are_handed_back(spark: Any, log: Path) -> None:
    """Not / Or filters reach the reader too: it must hand them back, not fail."""
    df = read_log(spark, log)
    assert df.filter(~df["offset"].isin(0, 1, 2)).count() == N - 3
    assert df.filter("offset <= 30 OR offset >= 100").count() == 31 + N - 100
    assert df.filter(~df["type"].isin("NoOpRecord")).count() == 0


def test_data_dir_or_metadata_dir(spark: Any, log: Path) -> None:
    assert read_log(spark, log / "__cluster_metadata-0").count() == N


def _corrupt_middle_segment(log: Path) -> tuple[Path, int]:
    segs = sorted((log / "__cluster_metadata-0").glob("*.log"))
    seg = segs[len(segs) // 2]
    data = bytearray(seg.read_bytes())
    headers = list(iter_headers(bytes(data), str(seg), int(seg.stem)))
    pos, h = headers[1]
    data[pos + h.length - 1] ^= 0xFF  # inside the records: the CRC catches it
    seg.write_bytes(bytes(data))
    return seg, h.base_offset


def test_corrupt_segment_fails_the_job_naming_file_and_offset(
    spark: Any, log: Path, tmp_path: Path
) -> None:
    seg, offset = _corrupt_middle_segment(log)
    with pytest.raises(Exception) as exc:
        read_log(spark, log).count()
    msg = user_message(exc.value)
    assert msg is not None
    assert str(seg) in msg and f"at offset {offset}" in msg
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")  # an earlier run's output
    (out / "mine.txt").write_text("not the job's")
    with pytest.raises(Exception) as exc2:
        run_job(spark, log, out, report=False)
    assert str(seg) in (user_message(exc2.value) or "")
    # never a partial history: nothing of this run, and the earlier run's outputs
    # and the other files as they were (a failed rerun used to delete the last good run)
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt", "summary.json"]
    assert (out / "summary.json").read_text() == "{}"


def test_missing_batches_between_segments_is_an_error(spark: Any, log: Path) -> None:
    segs = sorted((log / "__cluster_metadata-0").glob("*.log"))
    data = segs[1].read_bytes()
    headers = list(iter_headers(data, str(segs[1]), int(segs[1].stem)))
    segs[1].write_bytes(data[: headers[-1][0]])  # drop its last whole batch
    with pytest.raises(Exception) as exc:
        read_log(spark, log).count()
    assert "gap in the log" in (user_message(exc.value) or "")


def test_torn_tail_of_last_segment_is_end_of_data(spark: Any, log: Path) -> None:
    last = sorted((log / "__cluster_metadata-0").glob("*.log"))[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-3])
    n = read_log(spark, log).count()
    assert 0 < n < N


def test_unknown_record_type_names_the_offset(spark: Any, tmp_path: Path) -> None:
    import msgpack

    from metadata_log.batch import encode_payload
    from spark_replay.generator import METADATA_DIR

    meta = tmp_path / METADATA_DIR
    meta.mkdir()
    payload = msgpack.packb([99, 0, "x"])
    (meta / f"{0:020d}.log").write_bytes(encode_payload(0, 1, 0, payload, 1))
    with pytest.raises(Exception) as exc:
        read_log(spark, tmp_path).count()
    msg = user_message(exc.value) or ""
    assert "offset 0" in msg and "unknown record type 99" in msg


def test_cli_user_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--log-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert main(["--log-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "holds no segment" in err and "Traceback" not in err
    assert main(["--log-dir", str(tmp_path), "--out", "o", "--as-of-time", "yesterday"]) == 2
    assert "ISO 8601" in capsys.readouterr().err


def test_partition_change_fields_json(spark: Any, tmp_path: Path) -> None:
    import json

    rec = PartitionChangeRecord("t-id", 3, isr=(1, 2), leader=-2)
    write_log(tmp_path, [(1, 5, [rec], False)])
    row = read_log(spark, tmp_path).first()
    assert json.loads(row["fields"]) == {
        "topic_id": "t-id",
        "partition_id": 3,
        "isr": [1, 2],
        "leader": -2,
        "replicas": None,
        "removing_replicas": None,
        "adding_replicas": None,
        "leader_recovery_state": -1,
        # KIP-966's fields (PartitionChangeRecord v1), None: unchanged
        "eligible_leader_replicas": None,
        "last_known_elr": None,
    }
    assert list(row["isr"]) == [1, 2] and row["replicas"] is None and row["leader"] == -2


def test_cli_corrupt_segment_exits_2_naming_file_and_offset(log: Path, tmp_path: Path) -> None:
    """The console script in its own process: one clear line, exit status 2."""
    import subprocess
    import sys

    seg, offset = _corrupt_middle_segment(log)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_replay.cli",
            "--log-dir",
            str(log),
            "--out",
            str(tmp_path / "out"),
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("spark-replay: error: corrupt batch in")
    assert str(seg) in last and f"at offset {offset}" in last
    assert "Traceback" not in proc.stderr
