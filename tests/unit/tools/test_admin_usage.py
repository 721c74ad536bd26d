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


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        # it waited the whole --timeout (60 s), then said the node was "not fetching"
        (
            ["quorum", "add-controller", "--node-id", "7", "--directory-id", "not-an-id"]
            + ["--url", "http://127.0.0.1:1"],
            "argument --directory-id: 'not-an-id' is not a directory id (22 base64url",
        ),
        (
            ["quorum", "remove-controller", "--node-id", "-7", "--directory-id", "x" * 22],
            "argument --node-id: must be at least 0, got -7",
        ),
        (["brokers", "list", "--timeout", "-3"], "argument --timeout: must be more than 0 seconds"),
        (["topics", "list", "--timeout", "nan"], "argument --timeout: must be more than 0 seconds"),
        (["topics", "list", "--timeout", "soon"], "'soon' is not a number of seconds"),
    ],
)
def test_voter_keys_and_timeouts_are_checked_before_any_request(
    argv: list[str], needle: str, boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--bootstrap", boot[1]])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err, err


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://127.0.0.1:99999", "is not a URL: Port out of range 0-65535"),
        ("http://[::1", "is not a URL: Invalid IPv6 URL"),
        ("http://127.0.0.1:abc", "is not a URL: Port could not be cast"),
        ("http://", "bootstrap URL 'http://' has no host"),
    ],
)
def test_a_bootstrap_url_no_client_can_dial_exits_2_at_once(
    url: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was retried eight times over ~9 s, then told as a NETWORK error."""
    import time

    started = time.monotonic()
    assert main(["topics", "list", "--bootstrap", url, "--timeout", "5"]) == 2
    assert time.monotonic() - started < 3
    err = capsys.readouterr().err
    assert needle in err and "NETWORK" not in err and "Traceback" not in err, err


def test_ctrl_c_on_a_command_ends_it_in_one_line(
    boot: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a command waits (an unreachable controller) printed two tracebacks."""
    import kraft.tools.admin as admin

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(admin, "run", interrupted)
    try:
        code = main(["topics", "list", *boot])
    except KeyboardInterrupt:  # not pytest's own: that would end the whole run
        pytest.fail("Ctrl-C escaped kraft's main as a KeyboardInterrupt (a traceback)")
    assert code == 130
    assert capsys.readouterr().err == "kraft topics: interrupted\n"
