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
        # '1,,2' was exit 1 with "bad --replica-assignment" naming nothing; '' fell
        # back to 1 partition of replication factor 3
        (
            ["topics", "create", "--topic", "t", "--replica-assignment", "1,,2"],
            "argument --replica-assignment: partition 1 (''): entry 1 of '' is not a node id",
        ),
        (
            ["topics", "create", "--topic", "t", "--replica-assignment", "1:2:x"],
            "partition 0 ('1:2:x'): entry 3 of '1:2:x' is not a node id: 'x'",
        ),
        (
            ["topics", "create", "--topic", "t", "--replica-assignment", "1:1"],
            "node id 1 appears twice",
        ),
        (
            ["topics", "create", "--topic", "t", "--replica-assignment", ""],
            "argument --replica-assignment: partition 0 (''): entry 1",
        ),
    ],
)
def test_a_value_argparse_refuses_is_one_usage_line(
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


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "delete", "--topic", "../brokers/4"],  # was DELETE /v1/brokers/4: "Deleted"
        ["topics", "delete", "--topic", "orders?x"],  # was DELETE /v1/topics/orders
        ["topics", "describe", "--topic", "orders#f"],
        ["topics", "describe", "--topic", ""],  # was every topic
        ["topics", "create", "--topic", "..", "--partitions", "1"],
        ["elect", "--topic", "a/b", "--partition", "0"],
    ],
)
def test_a_topic_name_the_controller_would_refuse_is_a_usage_error(
    argv: list[str], boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Names were pasted into the URL path: '../brokers/4' unregistered broker 4 and
    printed 'Deleted topic'. Now the controller's own rule refuses them first."""
    with pytest.raises(SystemExit) as e:
        main([*argv, *boot])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --topic: topic name" in err and "Traceback" not in err, err


def test_the_client_sends_a_name_as_one_path_segment() -> None:
    from kraft.admin_client import _segment

    assert _segment("../brokers/4") == "..%2Fbrokers%2F4"
    assert _segment("orders?x#f") == "orders%3Fx%23f"
    assert _segment("orders.v2_a-b") == "orders.v2_a-b"


def test_reassign_with_a_bootstrap_that_is_no_url_is_one_line(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}')
    argv = ["reassign-partitions", "--verify", "--reassignment-json-file", str(plan)]
    assert main([*argv, "--bootstrap", "localhost:9093"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "kraft reassign-partitions: error: bootstrap URL 'localhost:9093' must start "
        "with http:// or https://\n"
    ), err


def test_a_reassignment_file_with_an_illegal_topic_name_is_refused(
    tmp_path, boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"version":1,"partitions":[{"topic":"../brokers","partition":0,"replicas":[1]}]}'
    )
    argv = ["reassign-partitions", "--execute", "--reassignment-json-file", str(plan)]
    assert main([*argv, *boot]) == 2
    err = capsys.readouterr().err
    assert "partitions[0]: topic name '../brokers' has characters" in err, err


def test_describe_counts_the_replication_factor_without_the_adding_replicas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Kafka's TopicCommand: replicas - adding_replicas. A partition moving from
    [1,2,3] to [4,5,6] holds all six replicas until the move completes."""
    from kraft.tools.admin import _print_topic

    moving = {
        "partition_id": 0, "leader": 1, "leader_epoch": 2, "replicas": [1, 2, 3, 4, 5, 6],
        "isr": [1, 2, 3],
        "adding_replicas": [4, 5, 6], "removing_replicas": [1, 2, 3],
    }  # fmt: skip
    _print_topic({"name": "t", "topic_id": "x", "partitions": [moving], "configs": {}})
    out = capsys.readouterr().out
    assert "ReplicationFactor: 3\t" in out, out
    assert "Adding Replicas: 4,5,6\tRemoving Replicas: 1,2,3" in out, out


def test_a_replica_assignment_with_a_partition_count_is_refused(
    boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["topics", "create", "--topic", "t", "--replica-assignment", "1:2,2:1"]
    assert main([*argv, "--partitions", "5", *boot]) == 2
    err = capsys.readouterr().err
    assert "--replica-assignment cannot be used with --partitions" in err, err


@pytest.mark.parametrize("ids", ["1,,2", "1_0,2", "4,4", "-1,2", ""])
def test_a_broker_list_is_distinct_decimal_ids(
    ids: str, tmp_path, boot: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text('{"version":1,"topics":[{"topic":"t"}]}')
    argv = ["reassign-partitions", "--generate", "--topics-to-move-json-file", str(topics)]
    assert main([*argv, f"--broker-list={ids}", *boot]) == 2
    assert "--broker-list" in capsys.readouterr().err


def test_certs_refuses_an_empty_node_id_entry(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["certs", "--out", str(tmp_path / "c"), "--controllers", "1,,2", "--brokers", "4"])
    assert e.value.code == 2
    assert "argument --controllers: entry 2 of '1,,2' is not a node id" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
