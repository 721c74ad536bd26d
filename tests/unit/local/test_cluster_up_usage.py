"""`kraft cluster up` refuses what every process it starts would refuse, before it
starts anything: a bad --override value (each node exited 2 at its start, and
cluster up went on printing status lines with nothing running, then exited 0), and a
status interval of 0 (a busy loop of status lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.cli import main

pytestmark = pytest.mark.timeout(60)


def test_a_bad_override_value_exits_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "cluster"
    # --duration: were the value not refused, the run would still end (and fail)
    argv = ["cluster", "up", "--controllers", "1", "--brokers", "0", "--data-dir", str(data)]
    argv += ["--duration", "1"]
    code = main([*argv, "--override", "broker.session.timeout.ms=abc"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == ["kraft cluster up: broker.session.timeout.ms: 'abc' is not an integer"], err
    assert not data.exists()  # no cluster.json, no node's folder: nothing started


def test_an_override_no_process_uses_is_not_an_error(tmp_path: Path) -> None:
    """As for each process: a key it does not use is logged as unused, not refused."""
    from kraft.config import BROKER_KEYS, CONTROLLER_KEYS, SECURITY_KEYS, load_config

    cfg = load_config({*CONTROLLER_KEYS, *BROKER_KEYS, *SECURITY_KEYS}, overrides=["no.such.key=1"])
    assert cfg.unused == ["no.such.key"]


@pytest.mark.parametrize("interval", ["0", "-1", "nan"])
def test_a_status_interval_that_is_not_above_0_is_a_usage_error(
    tmp_path: Path, interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(
            ["cluster", "up", "--controllers", "1", "--brokers", "0", "--duration", "1"]
            + ["--data-dir", str(tmp_path / "c"), "--status-interval", interval]
        )
    assert e.value.code == 2
    assert "argument --status-interval" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
