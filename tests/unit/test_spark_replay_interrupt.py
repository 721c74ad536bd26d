"""Ctrl-C during a spark-replay or what-if job is one line and exit 130, not a
traceback (PySpark turns SIGINT into KeyboardInterrupt in the driver)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import spark_replay.session
from spark_replay import cli
from spark_replay.whatif import cli as whatif_cli

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "whatif" / "demo-log"


class FakeSpark:
    stopped = False

    def stop(self) -> None:
        FakeSpark.stopped = True


def _interrupt(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeSpark.stopped = False
    monkeypatch.setattr(spark_replay.session, "build_session", lambda master: FakeSpark())
    monkeypatch.setattr(spark_replay.session, "quiet_task_failures", lambda spark: None)


def test_spark_replay_interrupted(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "run_job", _interrupt)
    assert cli.main(["--log-dir", str(LOG), "--out", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err == "spark-replay: interrupted\n"
    assert FakeSpark.stopped


def test_what_if_interrupted(tmp_path, monkeypatch, capsys) -> None:
    import spark_replay.whatif.job

    monkeypatch.setattr(spark_replay.whatif.job, "run_whatif", _interrupt)
    argv = ["--log-dir", str(LOG), "--out", str(tmp_path / "out")]
    argv += ["--set", "unclean.leader.election.enable=true"]
    assert whatif_cli.main(argv) == 130
    assert capsys.readouterr().err.endswith("spark-replay what-if: interrupted\n")
    assert FakeSpark.stopped
