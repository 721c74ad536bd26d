"""3 `kraft controller` processes on 127.0.0.1: issue 3's integration acceptance.

One quorum for the module; the tests run in file order, each leaving the quorum
as the next expects:

1. a leader is elected within 3 s of starting the processes;
2. kill -9 of the leader: a new leader commits (a write is answered) within the
   fetch timeout + 2 s;
3. the old leader, restarted, rejoins as a follower and its committed log equals
   the others';
4. `kraft quorum describe --status|--replication` prints the leader's view;
5. SIGTERM on the leader hands over through EndQuorumEpoch, faster than the kill
   did, and the process exits 0.

Default Raft timeouts (election 1000 ms, fetch 2000 ms). Every process is started
here and killed by pid.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.controller_procs import ControllerQuorum
from tests.integration.procs import REPO, ProcGroup, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FETCH_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerQuorum]:
    group = ProcGroup()
    q = ControllerQuorum(tmp_path_factory.mktemp("quorum"), group)
    q.state = {}  # type: ignore[attr-defined]
    try:
        yield q
    finally:
        group.close()


_next_broker = iter(range(100, 10_000))


def write_topic(q: ControllerQuorum, name: str, timeout: float) -> tuple[int, Any]:
    """One committed write: a broker registration (it needs no other brokers)."""
    cluster_id = next(v["cluster_id"] for i in q.ids if (v := q.quorum(i)))
    body = {
        "broker_id": next(_next_broker),
        "cluster_id": cluster_id,
        "incarnation_id": str(uuid.uuid4()),
        "listeners": [
            {"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": "PLAINTEXT"}
        ],
        "rack": None,
        "features": [],
    }
    status, out = q.call_active("POST", "/v1/brokers/register", body, timeout=timeout)
    return (201 if status == 200 else status), out


def test_leader_elected_within_3s(quorum: ControllerQuorum) -> None:
    t0 = time.monotonic()
    quorum.start_all()
    leader = wait_until(quorum.leader, 3.0, interval=0.02, what="a Raft leader")
    took = time.monotonic() - t0
    print(f"election took {took:.3f}s")
    assert took <= 3.0, took
    assert leader["leader_epoch"] >= 1
    # every node agrees on it shortly after
    wait_until(
        lambda: all(
            (v := quorum.quorum(i)) and v["leader_id"] == leader["node_id"] for i in quorum.ids
        ),
        5.0,
        what="all nodes following the leader",
    )


def test_kill9_leader_new_leader_commits(quorum: ControllerQuorum) -> None:
    status, body = write_topic(quorum, "before-kill", 10.0)
    assert status == 201, body
    old = quorum.leader()
    assert old is not None
    t0 = time.monotonic()
    quorum.procs[old["node_id"]].kill9()
    status, body = write_topic(quorum, "after-kill", FETCH_TIMEOUT_S + 2.0)
    took = time.monotonic() - t0
    assert status == 201, body
    print(f"kill -9 -> next commit {took:.3f}s")
    assert took <= FETCH_TIMEOUT_S + 2.0, took
    new = quorum.leader()
    assert new is not None and new["node_id"] != old["node_id"]
    assert new["leader_epoch"] > old["leader_epoch"]
    quorum.state.update(killed=old["node_id"], kill_failover_s=took)  # type: ignore[attr-defined]


def test_restarted_leader_rejoins_with_equal_log(quorum: ControllerQuorum) -> None:
    killed = quorum.state["killed"]  # type: ignore[attr-defined]
    quorum.start(killed)
    leader = quorum.leader()
    assert leader is not None

    def rejoined() -> dict[str, Any] | None:
        v = quorum.quorum(killed)
        ld = quorum.leader()
        if v and ld and v["state"] == "follower" and v["leader_id"] == ld["node_id"]:
            return v
        return None

    wait_until(rejoined, 10.0, what=f"node {killed} following the leader")
    for i in range(3):
        status, body = write_topic(quorum, f"after-restart-{i}", 10.0)
        assert status == 201, body
    ld = quorum.leader()
    hw = ld["high_watermark"]
    wait_until(
        lambda: all((v := quorum.quorum(i)) and v["high_watermark"] >= hw for i in quorum.ids),
        10.0,
        what="every node's high watermark past the leader's",
    )
    logs = {i: quorum.committed_batches(i, hw) for i in quorum.ids}
    assert logs[killed], "the restarted node has no committed batches"
    assert logs[killed][-1][0] + len(logs[killed][-1][3]) == hw
    for i in quorum.ids:
        assert logs[i] == logs[killed], f"node {i}'s committed log differs from node {killed}'s"


def _cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "kraft.cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return out.stdout


def test_quorum_describe_cli(quorum: ControllerQuorum) -> None:
    """`kraft quorum describe --status|--replication`, asked of a follower, prints
    the leader's view as kafka-metadata-quorum does."""
    ld = quorum.leader()
    assert ld is not None
    follower = next(i for i in quorum.ids if i != ld["node_id"])
    url = quorum.url(follower)
    status = dict(
        (k.strip(), v.strip())
        for k, v in (
            line.split(":", 1)
            for line in _cli("quorum", "describe", "--bootstrap", url, "--status").splitlines()
        )
    )
    assert status["ClusterId"] == ld["cluster_id"]
    assert int(status["LeaderId"]) == ld["node_id"]
    assert int(status["LeaderEpoch"]) == ld["leader_epoch"]
    assert int(status["HighWatermark"]) >= ld["high_watermark"]
    assert int(status["MaxFollowerLag"]) >= 0
    assert status["CurrentVoters"] == "[1,2,3]"
    assert status["CurrentObservers"] == "[]"

    lines = _cli("quorum", "describe", "--bootstrap", url, "--replication").splitlines()
    # Kafka's columns since KIP-853: DirectoryId second.
    assert lines[0].split() == [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    rows = {int(line.split()[0]): line.split() for line in lines[1:]}
    assert sorted(rows) == [1, 2, 3]
    assert int(lines[1].split()[0]) == ld["node_id"]  # the leader first
    for i, row in rows.items():
        assert row[-1] == ("Leader" if i == ld["node_id"] else "Follower"), row
        meta = (quorum.data_dir(i) / "meta.properties").read_text()
        assert f"directory.id={row[1]}" in meta, (row, meta)
        assert int(row[2]) >= 0 and int(row[3]) >= 0  # log end offset, lag
        assert "ms ago" in " ".join(row)  # every voter has fetched


def test_sigterm_hands_over_faster_than_kill(quorum: ControllerQuorum) -> None:
    old = quorum.leader()
    assert old is not None
    proc = quorum.procs[old["node_id"]]
    t0 = time.monotonic()
    proc.signal(15)
    status, body = write_topic(quorum, "after-sigterm", FETCH_TIMEOUT_S + 2.0)
    took = time.monotonic() - t0
    assert status == 201, body
    assert proc.popen.wait(10) == 0  # type: ignore[union-attr]
    new = quorum.leader()
    assert new is not None and new["node_id"] != old["node_id"]
    print(f"SIGTERM -> next commit {took:.3f}s")
    kill_s = quorum.state["kill_failover_s"]  # type: ignore[attr-defined]
    assert took < kill_s, (took, kill_s)
    # EndQuorumEpoch: well under a fetch timeout
    assert took < FETCH_TIMEOUT_S / 2, took
    text = proc.log_text()
    assert '"event": "controller_stopped"' in text
    assert "Traceback" not in text
