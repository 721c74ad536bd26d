"""Both Spark CLIs refuse an --out that cannot hold their outputs (a file, or a
path under one) with one line and exit 2, before Spark starts: it was a
FileExistsError traceback from spark-replay once the job had begun."""

from __future__ import annotations

from pathlib import Path

import pytest

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "whatif" / "demo-log"
# spark-replay, and spark-replay what-if (its first argument)
BOTH_CLIS = pytest.mark.parametrize(
    "command", [[], ["what-if", "--set", "unclean.leader.election.enable=true"]]
)


@BOTH_CLIS
@pytest.mark.parametrize(
    ("out", "says"),
    [("afile", "is a file, not a directory"), ("afile/sub", "cannot be created: Not a directory")],
)
def test_an_out_that_is_a_file_exits_2_before_spark(
    tmp_path: Path,
    command: list[str],
    out: str,
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import spark_replay.session as session
    from spark_replay.cli import main

    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(session, "build_session", no_spark)
    (tmp_path / "afile").write_text("keep me")
    code = main([*command[:1], "--log-dir", str(LOG), "--out", str(tmp_path / out), *command[1:]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].endswith(says), err
    assert (tmp_path / "afile").read_text() == "keep me"


def _no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_replay.session as session

    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(session, "build_session", no_spark)


@BOTH_CLIS
def test_an_out_that_cannot_be_written_exits_2_before_spark(
    tmp_path: Path,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An immutable or read-only --out (root may mkdir-check it but not write):
    it was a PermissionError traceback once the job had begun."""
    import tempfile

    from spark_replay.cli import main

    _no_spark(monkeypatch)

    def refused(*_a: object, **_k: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    out = tmp_path / "ro"
    code = main([*command[:1], "--log-dir", str(LOG), "--out", str(out), *command[1:]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].endswith("cannot be written: Operation not permitted"), err


@BOTH_CLIS
@pytest.mark.parametrize("inside", [".", "__cluster_metadata-0", "replay"])
def test_an_out_inside_the_log_s_data_dir_exits_2_and_writes_nothing_there(
    tmp_path: Path,
    command: list[str],
    inside: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import shutil

    from spark_replay.cli import main

    _no_spark(monkeypatch)
    log = shutil.copytree(LOG, tmp_path / "data")
    (log / "meta.properties").write_text("cluster.id=x\nnode.id=1\n")  # a node's data dir
    before = sorted(p.relative_to(log) for p in log.rglob("*"))
    out = log / inside
    code = main([*command[:1], "--log-dir", str(log), "--out", str(out), *command[1:]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and f"is inside the log's data dir {log}" in err[0], err
    assert sorted(p.relative_to(log) for p in log.rglob("*")) == before


def test_an_out_inside_a_copied_folder_without_meta_properties_is_fine(tmp_path: Path) -> None:
    """A folder an operator copied the log into (no meta.properties: no node runs on
    it) may hold OUT beside the log; the log's own folder may not."""
    import shutil

    from spark_replay.cli import UserError, usable_out

    log = shutil.copytree(LOG, tmp_path / "copy")
    assert usable_out(log / "replay", log) == log / "replay"
    with pytest.raises(UserError, match="inside the log's data dir"):
        usable_out(log / "__cluster_metadata-0" / "out", log)


@BOTH_CLIS
def test_an_out_inside_another_node_s_data_dir_exits_2_and_writes_nothing_there(
    tmp_path: Path,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not only the log's own data dir: any node's (one holding meta.properties)."""
    from spark_replay.cli import main

    _no_spark(monkeypatch)
    node = tmp_path / "kafka-data"
    node.mkdir()
    (node / "meta.properties").write_text("cluster.id=x\nnode.id=4\n")
    out = node / "reports" / "o"
    code = main([*command[:1], "--log-dir", str(LOG), "--out", str(out), *command[1:]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "is inside the data dir of another Kafka or kraft node" in err[0]
    assert str(node) in err[0], err
    assert sorted(p.name for p in node.iterdir()) == ["meta.properties"]


@BOTH_CLIS
def test_a_master_spark_would_refuse_exits_2_before_spark(
    tmp_path: Path,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark_replay.cli import check_master, main

    _no_spark(monkeypatch)
    argv = ["--log-dir", str(LOG), "--out", str(tmp_path / "o"), "--master", "bogus://x"]
    code = main([*command[:1], *argv, *command[1:]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--master 'bogus://x' is not a Spark master URL" in err[0], err
    assert not (tmp_path / "o").exists()  # checked before OUT is made
    for ok in ("local", "local[2]", "local[*]", "local[4,2]", "spark://127.0.0.1:7077", "yarn"):
        check_master(ok)


def test_an_explicit_format_that_is_not_the_log_s_says_so_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--format kraft on Kafka's log: "header checksum mismatch" from inside Spark."""
    from spark_replay.cli import main

    _no_spark(monkeypatch)
    kafka = LOG.parents[1] / "kafka" / "kafka-3x-datadir"
    code = main(["--log-dir", str(kafka), "--out", str(tmp_path / "o"), "--format", "kraft"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "is Kafka's (magic 2): give --format kafka or auto" in err[0], err


def test_an_out_beside_a_bare_folder_of_segments_is_fine(tmp_path: Path) -> None:
    """A log given as a plain folder of segments: only that folder is its own."""
    import shutil

    from spark_replay.cli import UserError, usable_out

    seg = shutil.copytree(LOG / "__cluster_metadata-0", tmp_path / "segments")
    assert usable_out(tmp_path / "out", seg) == tmp_path / "out"
    with pytest.raises(UserError, match="inside the log's data dir"):
        usable_out(seg / "out", seg)


KAFKA_3X = Path(__file__).resolve().parents[1] / "fixtures" / "kafka" / "kafka-3x-datadir"


def test_a_topic_partitions_folder_or_an_empty_log_exits_2_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--log-dir at a data partition's folder (Kafka batches of user records) named
    what it is, and a log of empty files said to be empty, before Spark starts: both
    failed inside Spark's tasks (an api key the decoder did not know; no records)."""
    from spark_replay.cli import main

    _no_spark(monkeypatch)
    topic = KAFKA_3X / "my-topic-0"
    assert main(["--log-dir", str(topic), "--out", str(tmp_path / "o")]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith(
        f"spark-replay: error: {topic} is topic partition my-topic-0's folder, not a metadata "
        "log: its first batch is not metadata records ("
    )
    assert err.endswith("--log-dir takes a data dir (log.dirs or metadata.log.dir) or its "
                        "__cluster_metadata-0 folder")  # fmt: skip

    empty = tmp_path / "empty" / "__cluster_metadata-0"
    empty.mkdir(parents=True)
    (empty / "00000000000000000000.log").write_bytes(b"")
    assert main(["--log-dir", str(empty.parent), "--out", str(tmp_path / "o2")]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == (f"spark-replay: error: {empty}: every segment and snapshot is empty: no records")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


@BOTH_CLIS
def test_a_log_file_that_cannot_be_read_exits_2_before_spark(
    tmp_path: Path,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A directory named like a segment (or one that cannot be read) was an
    IsADirectoryError/PermissionError traceback, exit 1."""
    from spark_replay.cli import main

    _no_spark(monkeypatch)
    log = tmp_path / "log" / "__cluster_metadata-0"
    (log / "00000000000000000000.log").mkdir(parents=True)
    code = main(
        [*command[:1], "--log-dir", str(log.parent), "--out", str(tmp_path / "o"), *command[1:]]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].endswith(
        "00000000000000000000.log: is a directory, not a regular file: a segment or snapshot must be one"
    ), err


def test_a_task_s_read_error_is_one_line() -> None:
    """A log file a Spark task could not read: its Python error, inside Spark's."""
    from spark_replay.cli import user_message

    wrapped = Exception(
        "Job aborted ... Traceback (most recent call last):\n  File ...\n"
        "PermissionError: [Errno 13] Permission denied: '/d/__cluster_metadata-0/1.log'\n"
    )
    assert user_message(wrapped) == "[Errno 13] Permission denied: '/d/__cluster_metadata-0/1.log'"
    assert user_message(OSError(21, "Is a directory", "/d/x.log")) == (
        "cannot read /d/x.log: Is a directory"
    )


def test_the_one_process_replay_keeps_out_of_the_log_and_says_what_it_did_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It wrote its tables inside a Kafka log's folder (no --out check, unlike
    spark-replay), and read a torn log's first part in silence."""
    import shutil

    from spark_replay.one_process import main

    log = shutil.copytree(LOG, tmp_path / "log")
    inside = log / "__cluster_metadata-0"
    assert main(["--log-dir", str(log), "--out", str(inside / "t")]) == 2
    err = capsys.readouterr().err
    assert "is inside the log's data dir" in err and err.count("\n") == 1, err
    assert not (inside / "t").exists()
    segment = min(inside.glob("*.log"))
    segment.write_bytes(segment.read_bytes() + b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00")
    assert main(["--log-dir", str(log), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "one_process: warning: " in err and "ends in an incomplete batch" in err, err
