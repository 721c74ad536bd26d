"""`kraft controller`: user errors are one line and an exit code, SIGTERM exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.unit.raft_shell.raft_harness import free_ports

pytestmark = pytest.mark.timeout(60)


def run(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", "controller", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )


# a node of a one-voter quorum: each case below adds or leaves out one thing
ONE = ["--node-id", "1", "--voters", "1@127.0.0.1:1", "--data-dir", "d"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--node-id", "1", "--data-dir", "d"], "--voters"),
        (["--node-id", "1", "--voters", "1@nohost", "--data-dir", "d"], "ID@HOST:PORT"),
        (["--voters", "1@127.0.0.1:1", "--data-dir", "d"], "--node-id"),
        ([*ONE, "--override", "broker.session.timeout.ms=x"], "broker.session.timeout.ms"),
        (
            ["--node-id", "5", "--voters", "1@127.0.0.1:1", "--data-dir", "d"],
            "not among the voters",
        ),
        ([*ONE, "--log-level", "foo"], "--log-level"),  # a ValueError traceback from logging
        # the kernel took 99999 modulo 65536 and listened on 34463
        ([*ONE, "--listen", "127.0.0.1:99999"], "the port must be in 0..65535"),
    ],
)
def test_config_errors_exit_2_without_traceback(tmp_path, args, needle):
    res = run(*args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr
    assert "Traceback" not in res.stderr


def test_formats_serves_and_stops_cleanly(tmp_path):
    (port,) = free_ports(1)
    data = tmp_path / "d"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kraft.cli", "controller", "--node-id", "1",
         "--voters", f"1@127.0.0.1:{port}", "--data-dir", str(data), "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        view = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/quorum", timeout=1) as r:
                    view = json.loads(r.read())
                if view["state"] == "leader":
                    break
            except OSError:
                pass
            time.sleep(0.05)
        assert view is not None and view["state"] == "leader", view
        assert (data / "meta.properties").exists()
        # The view follows the core at once; the quorum-state file is written (in a
        # thread, before anything of that step is sent) a few ms later.
        qs = data / "quorum-state"

        def persisted_leader() -> int | None:
            return json.loads(qs.read_text())["leader_id"] if qs.exists() else None

        deadline = time.monotonic() + 5
        while persisted_leader() != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert persisted_leader() == 1
        assert (data / "__cluster_metadata-0").is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        out = proc.stdout.read().decode()
        assert "Traceback" not in out
        assert '"event": "controller_stopped"' in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    # a restart on the same directory keeps its cluster id and resigns its old epoch
    res = run("--node-id", "2", "--voters", f"2@127.0.0.1:{port}", "--data-dir", str(data))
    assert res.returncode == 1 and "belongs to node 1" in res.stderr


def test_a_second_controller_on_a_data_dir_in_use_exits_1_and_leaves_it_alone(tmp_path):
    """The data directory's lock is held (as by a running controller): another
    `kraft controller` on it exits 1 in one line naming the holder, before it
    formats, opens or writes anything there."""
    from kraft.raft_shell.dir_lock import hold_dir_lock

    data = tmp_path / "c1"
    (port,) = free_ports(1)
    with hold_dir_lock(data):
        before = sorted(p.name for p in data.iterdir())
        res = run("--node-id", "1", "--voters", f"1@127.0.0.1:{port}", "--data-dir", str(data))
        after = sorted(p.name for p in data.iterdir())
    assert res.returncode == 1, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, res.stderr
    assert line == (
        f"kraft controller: error: {data} is in use by process {os.getpid()} (it holds "
        f"{data}/.lock): one data directory per controller; stop that process or give "
        "this one another --data-dir"
    )
    assert before == after == [".lock"]  # not formatted: no meta.properties, no log


def test_a_quorum_state_file_that_is_not_one_exits_1_in_one_line(tmp_path):
    """A damaged quorum-state (the node's vote and epoch) is named, not a traceback,
    and left as it was for the operator to look at."""
    (port,) = free_ports(1)
    data = tmp_path / "c1"
    data.mkdir()
    for text in ("garbage\n", "", "{}", "[]"):
        (data / "quorum-state").write_text(text)
        res = run("--node-id", "1", "--voters", f"1@127.0.0.1:{port}", "--data-dir", str(data))
        assert res.returncode == 1, res.stderr
        line = res.stderr.strip().splitlines()[-1]
        assert "Traceback" not in res.stderr, res.stderr
        assert line.startswith(
            f"kraft controller: error: bad quorum-state file {data}/quorum-state"
        )
        assert (data / "quorum-state").read_text() == text


def test_sigterm_while_the_cluster_id_is_asked_for_exits_0(tmp_path):
    """A joining controller asks a bootstrap controller for the cluster id first; a
    SIGTERM then (the bootstrap URL accepts and never answers) stopped it as a
    signal death, 143, instead of a clean exit."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kraft.cli", "controller", "--node-id", "9", "--listen",
         f"127.0.0.1:{port}", "--bootstrap-controllers",
         f"http://127.0.0.1:{silent.getsockname()[1]}", "--data-dir", str(tmp_path / "c9")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until it has dialled the bootstrap URL
            silent.settimeout(0.2)
            try:
                conn, _ = silent.accept()
                break
            except TimeoutError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        else:
            raise AssertionError("the controller never asked the bootstrap URL")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0, out
        assert "Traceback" not in out
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        silent.close()
