"""kraft.local.saved_cluster: what a restart of `kraft cluster up` keeps, and the
one-line refusals when DATA_DIR cannot be started as asked."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kraft.local.cluster import free_ports
from kraft.local.saved_cluster import FILE, SavedCluster, controller_ports, load, save

HOST = "127.0.0.1"


def test_a_new_data_dir_gets_new_ports_and_three_controllers(tmp_path: Path) -> None:
    assert load(tmp_path / "nothing-yet") is None
    assert controller_ports(tmp_path, None, False, HOST) == (3, None)
    assert controller_ports(tmp_path, 5, True, HOST) == (5, None)


def test_a_restart_keeps_the_size_and_the_ports(tmp_path: Path) -> None:
    ports = tuple(free_ports(3))
    save(tmp_path, SavedCluster(3, ports, secure=True))
    assert not list(tmp_path.glob("*.tmp"))
    assert load(tmp_path) == SavedCluster(3, ports, True)
    assert controller_ports(tmp_path, None, True, HOST) == (3, ports)
    assert controller_ports(tmp_path, 3, True, HOST) == (3, ports)


@pytest.mark.parametrize(
    ("controllers", "secure", "says"),
    [
        (5, True, "holds a 3-controller cluster: start it with --controllers 3"),
        (None, False, "started with --secure, and its controllers' URLs in the metadata log "
         "are https://: start it with --secure"),
    ],
)  # fmt: skip
def test_another_size_or_security_mode_is_refused(
    tmp_path: Path, controllers: int | None, secure: bool, says: str
) -> None:
    save(tmp_path, SavedCluster(3, tuple(free_ports(3)), secure=True))
    with pytest.raises(ValueError, match=says):
        controller_ports(tmp_path, controllers, secure, HOST)


def test_a_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind((HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        save(tmp_path, SavedCluster(2, (free_ports(1)[0], port), secure=False))
        with pytest.raises(ValueError, match=f"port {port} of controller 2 .* is in use"):
            controller_ports(tmp_path, None, False, HOST)


def test_controllers_of_an_older_cluster_up_are_refused(tmp_path: Path) -> None:
    (tmp_path / "controller-1").mkdir()
    (tmp_path / "controller-1" / "meta.properties").write_text("node.id=1\n")
    with pytest.raises(ValueError, match="ports are unknown: give a new --data-dir"):
        controller_ports(tmp_path, None, False, HOST)


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"controllers": 3, "ports": [1, 2], "secure": false}',
        '{"controllers": 1, "ports": [70000], "secure": false}',
        '{"controllers": 1, "ports": [9093], "secure": "no"}',
        '{"controllers": 1, "ports": [9093]}',
    ],
)
def test_a_malformed_file_is_named_and_left_as_it_is(tmp_path: Path, text: str) -> None:
    (tmp_path / FILE).write_text(text)
    with pytest.raises(ValueError, match=f"{FILE} is not a saved cluster .*: fix or remove it"):
        load(tmp_path)
    assert (tmp_path / FILE).read_text() == text


def test_the_demo_keeps_no_previous_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`demo --keep` on a previous run's DATA_DIR would start controllers on new
    ports against a log that names the old ones: refused before anything starts."""
    from kraft.local.demo import run_demo

    (tmp_path / "controller-1").mkdir()
    (tmp_path / "controller-1" / "meta.properties").write_text("node.id=1\n")
    assert run_demo(tmp_path, keep=True) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a previous run's cluster" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["controller-1"]
