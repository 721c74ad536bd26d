"""Usage errors of `kraft topics` are argparse's: one line naming the value, exit 2,
before any request (the bootstrap below is a port nobody listens on)."""

from __future__ import annotations

import pytest

from kraft.cli import main
from kraft.local.cluster import free_ports


@pytest.fixture
def boot() -> list[str]:
    (port,) = free_ports(1, "127.0.0.1")
    return ["--bootstrap", f"http://127.0.0.1:{port}", "--timeout", "1"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["topics", "alter-configs", "--topic", "t", "--add-config", "min.insync.replicas"],
            "argument --add-config: 'min.insync.replicas' is not KEY=VALUE",
        ),
        (
            ["topics", "create", "--topic", "t", "--config", "=2"],
            "argument --config: '=2' is not KEY=VALUE",
        ),
    ],
)
def test_a_config_without_a_key_or_an_equals_sign_is_a_usage_error(
    argv: list[str], needle: str, boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main([*argv, *boot])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


def test_alter_configs_with_nothing_to_change_exits_2_at_once(
    boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topics", "alter-configs", "--topic", "t", *boot]) == 2
    err = capsys.readouterr().err  # a request to the closed port would be a NETWORK error
    assert err == "kraft topics: error: give --add-config and/or --delete-config\n"
