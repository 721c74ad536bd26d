"""3 `kraft controller` processes on 127.0.0.1: issue 3's integration acceptance.

Every test starts from a whole quorum (`whole`: any node a test stopped is started
again and every node follows one leader), so the tests hold in any order:

1. a leader is elected;
2. kill -9 of the leader: a new leader, in a higher epoch, commits a write;
3. the old leader, restarted, rejoins as a follower and its committed log equals
   the others';
4. `kraft quorum describe --status|--replication` prints the leader's view;
5. SIGTERM on the leader hands over through EndQuorumEpoch and the process exits 0.

No assertion is a wall-clock threshold (a loaded machine would fail it); the times
are printed. (5) proves EndQuorumEpoch without timing: its quorum's fetch timeout is
longer than the whole wait, so no follower can have elected itself for silence.
Every process is started here and killed by pid.
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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

# Bounds on waits only, far above what each step takes on an idle machine.
ELECTION_WAIT_S = 30.0
# The SIGTERM quorum's fetch timeout: longer than any wait of its test.
PATIENT_FETCH_TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerQuorum]:
    group = ProcGroup()
    q = ControllerQuorum(tmp_path_factory.mktemp("quorum"), group)
    try:
        q.start_all()
        yield q
    finally:
        group.close()


def whole(q: ControllerQuorum) -> dict[str, Any]:
    """Start any stopped node, then wait until every node follows one leader."""
    for i in q.ids:
        if not q.alive(i):
            q.start(i)
    leader = wait_until(q.leader, ELECTION_WAIT_S, interval=0.02, what="a Raft leader")

    def agreed() -> dict[str, Any] | None:
        ld = q.leader()
        if ld and all((v := q.quorum(i)) and v["leader_id"] == ld["node_id"] for i in q.ids):
            return ld
        return None

    wait_until(agreed, ELECTION_WAIT_S, what="every node following the leader")
    return q.leader() or leader


_next_broker = iter(range(100, 10_000))


def write_topic(
    q: ControllerQuorum, name: str, timeout: float = ELECTION_WAIT_S
) -> tuple[int, Any]:
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


def test_a_leader_is_elected(quorum: ControllerQuorum) -> None:
    t0 = time.monotonic()
    leader = whole(quorum)
    print(f"a leader followed by all within {time.monotonic() - t0:.3f}s of the check")
    assert leader["leader_epoch"] >= 1
    status, body = write_topic(quorum, "first")
    assert status == 201, body


def test_kill9_leader_new_leader_commits(quorum: ControllerQuorum) -> None:
    whole(quorum)
    status, body = write_topic(quorum, "before-kill")
    assert status == 201, body
    old = quorum.leader()
    assert old is not None
    t0 = time.monotonic()
    quorum.procs[old["node_id"]].kill9()
    status, body = write_topic(quorum, "after-kill")
    print(f"kill -9 -> next commit {time.monotonic() - t0:.3f}s")
    assert status == 201, body
    new = quorum.leader()
    assert new is not None and new["node_id"] != old["node_id"]
    assert new["leader_epoch"] > old["leader_epoch"]


def test_restarted_leader_rejoins_with_equal_log(quorum: ControllerQuorum) -> None:
    old = whole(quorum)
    killed = old["node_id"]
    quorum.procs[killed].kill9()
    status, body = write_topic(quorum, "while-down")
    assert status == 201, body
    quorum.start(killed)

    def rejoined() -> dict[str, Any] | None:
        v = quorum.quorum(killed)
        ld = quorum.leader()
        if v and ld and v["state"] == "follower" and v["leader_id"] == ld["node_id"]:
            return v
        return None

    wait_until(rejoined, ELECTION_WAIT_S, what=f"node {killed} following the leader")
    for i in range(3):
        status, body = write_topic(quorum, f"after-restart-{i}")
        assert status == 201, body
    ld = quorum.leader()
    hw = ld["high_watermark"]
    wait_until(
        lambda: all((v := quorum.quorum(i)) and v["high_watermark"] >= hw for i in quorum.ids),
        ELECTION_WAIT_S,
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
    whole(quorum)
    write_topic(quorum, "describe")  # every voter has fetched since the last change
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


@pytest.fixture(scope="module")
def patient_quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerQuorum]:
    """A quorum whose followers wait PATIENT_FETCH_TIMEOUT_MS before they elect
    themselves for a silent leader."""
    group = ProcGroup()
    q = ControllerQuorum(
        tmp_path_factory.mktemp("patient"),
        group,
        overrides={"controller.quorum.fetch.timeout.ms": str(PATIENT_FETCH_TIMEOUT_MS)},
    )
    try:
        q.start_all()
        yield q
    finally:
        group.close()


def test_sigterm_hands_over_through_end_quorum_epoch(patient_quorum: ControllerQuorum) -> None:
    q = patient_quorum
    old = whole(q)
    proc = q.procs[old["node_id"]]
    t0 = time.monotonic()
    proc.signal(15)
    # Bounded far below the followers' fetch timeout: a new leader here was
    # elected because EndQuorumEpoch asked for it, not because the leader fell silent.
    wait_s = ELECTION_WAIT_S
    assert wait_s * 1000 < PATIENT_FETCH_TIMEOUT_MS
    status, body = write_topic(q, "after-sigterm", wait_s)
    took = time.monotonic() - t0
    assert status == 201, body
    assert took * 1000 < PATIENT_FETCH_TIMEOUT_MS, took
    print(f"SIGTERM -> next commit {took:.3f}s")
    assert proc.popen.wait(30) == 0  # type: ignore[union-attr]
    new = q.leader()
    assert new is not None and new["node_id"] != old["node_id"]
    assert new["leader_epoch"] > old["leader_epoch"]
    text = proc.log_text()
    assert '"event": "controller_stopped"' in text
    assert "Traceback" not in text
