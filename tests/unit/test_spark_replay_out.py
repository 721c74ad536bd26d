"""Both Spark CLIs refuse an --out that cannot hold their outputs (a file, or a
path under one) with one line and exit 2, before Spark starts: it was a
FileExistsError traceback from spark-replay once the job had begun."""

from __future__ import annotations

from pathlib import Path

import pytest

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "whatif" / "demo-log"


@pytest.mark.parametrize(
    "command", [[], ["what-if", "--set", "unclean.leader.election.enable=true"]]
)
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
