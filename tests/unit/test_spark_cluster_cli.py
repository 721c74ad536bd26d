"""`python -m spark_replay.cluster`'s arguments: the options count wherever they
stand before `--`, and only `run` takes a command after it. (The command was
once a REMAINDER argument, which also took the options written after the
action: `make spark-cluster WORKERS=4` started two workers, and README's
`run --workers 2 -- sh -c ...` tried to run `--workers`.)"""

from __future__ import annotations

import pytest

from spark_replay.cluster import parse_args


def test_options_after_the_action_count() -> None:
    args, cmd = parse_args(["start", "--workers", "4", "--state-dir", "/tmp/c", "--cores", "2"])
    assert (args.action, args.workers, args.cores, args.state_dir, cmd) == (
        "start",
        4,
        2,
        "/tmp/c",
        [],
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--workers", "3", "--", "sh", "-c", "echo --workers 9 -- x"],
        ["--workers", "3", "run", "--", "sh", "-c", "echo --workers 9 -- x"],
    ],
)
def test_run_takes_the_command_after_the_first_double_dash(argv: list[str]) -> None:
    args, cmd = parse_args(argv)
    assert (args.action, args.workers) == ("run", 3)
    assert cmd == ["sh", "-c", "echo --workers 9 -- x"]


def test_run_without_a_command_keeps_the_cluster_up() -> None:
    assert parse_args(["run", "--memory", "1g"])[1] == []


def test_a_command_with_start_or_stop_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("start", "stop"):
        with pytest.raises(SystemExit) as e:
            parse_args([action, "--", "sh"])
        assert e.value.code == 2
        assert f"a command after -- goes with run, not {action}" in capsys.readouterr().err
