"""Partition reassignment (KIP-455) on real processes: one controller, brokers 1..6.

The tests run in file order on one cluster:

1. a 3-replica topic moves from brokers {1,2,3} to {4,5,6} with `kraft
   reassign-partitions --execute` while a client keeps creating topics: the new
   replicas catch up through the agents' simulated replication, the leaders add
   them by AlterPartition, the controller completes the reassignment and the
   leaders move off 1-3; the log shows each step's PartitionChangeRecord;
2. a reassignment whose new replica cannot catch up (its broker is down) is
   cancelled halfway: the replicas go back to the original ones;
3. bad plans get Kafka's error names and write nothing;
4. a broker is decommissioned by the README recipe, run as written (generate,
   execute, verify, stop, unregister): no partition refers to it at the end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kip_cluster import KipCluster, TopicWriter
from tests.integration.procs import REPO, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.story]

BROKERS = (1, 2, 3, 4, 5, 6)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KipCluster]:
    c = KipCluster(tmp_path_factory.mktemp("reassign"), BROKERS)
    try:
        yield c.start()
    finally:
        c.close()


def partition_changes(cluster: KipCluster, topic_id: str) -> list[dict[str, Any]]:
    """The PartitionChangeRecords of one topic, in log order (kraft dump-log --json)."""
    res = subprocess.run(
        [sys.executable, "-m", "kraft.cli", "dump-log", "--json", str(cluster.tmp / "controller")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    out = []
    for line in res.stdout.splitlines():
        rec = json.loads(line)
        if rec["type"] == "PartitionChangeRecord" and rec["fields"]["topic_id"] == topic_id:
            out.append(rec["fields"])
    return out


def verify(cluster: KipCluster, plan: Path) -> subprocess.CompletedProcess[str]:
    return cluster.kraft("reassign-partitions", "--verify", "--reassignment-json-file", str(plan),
                         check=False)  # fmt: skip


def test_a_topic_moves_from_brokers_1_2_3_to_4_5_6_under_a_writer(cluster: KipCluster) -> None:
    assignments = [[1, 2, 3], [2, 3, 1], [3, 1, 2]] * 2
    cluster.create_topic("moving", assignments)
    cluster.wait_full_isr("moving")
    topic_id = cluster.get("/v1/topics/moving")["topic_id"]
    targets = {pid: [4 + (pid + i) % 3 for i in range(3)] for pid in range(len(assignments))}
    plan = cluster.write_json(
        "move.json",
        {"version": 1, "partitions": [
            {"topic": "moving", "partition": pid, "replicas": r} for pid, r in targets.items()]},
    )  # fmt: skip
    with TopicWriter(cluster, "w-", list(BROKERS)) as writer:
        res = cluster.kraft(
            "reassign-partitions", "--execute", "--reassignment-json-file", str(plan)
        )
        assert "Successfully started partition reassignments for moving-0," in res.stdout
        # the printed current assignment is the rollback plan
        assert '"replicas":[1,2,3]' in res.stdout
        done = wait_until(
            lambda: verify(cluster, plan).returncode == 0, 60, interval=0.5,
            what="--verify: every reassignment completed",
        )  # fmt: skip
        assert done
    assert writer.created > 0 and writer.errors == [], writer.errors[:3]
    assert "is completed" in verify(cluster, plan).stdout
    for p in cluster.partitions("moving"):
        assert p["replicas"] == targets[p["partition_id"]], p
        assert sorted(p["isr"]) == [4, 5, 6], p
        assert p["leader"] in (4, 5, 6), p
        assert p["adding_replicas"] == [] and p["removing_replicas"] == [], p
    assert cluster.get("/v1/partitions/reassignments") == {"partitions": []}
    # The log tells the KIP-455 story of every partition: the union with adding
    # and removing replicas, then the completing change to exactly the target.
    changes = partition_changes(cluster, topic_id)
    for pid, target in targets.items():
        mine = [c for c in changes if c["partition_id"] == pid]
        start = next(i for i, c in enumerate(mine) if c.get("adding_replicas"))
        assert sorted(mine[start]["adding_replicas"]) == [4, 5, 6]
        assert sorted(mine[start]["removing_replicas"]) == [1, 2, 3]
        assert sorted(mine[start]["replicas"]) == [1, 2, 3, 4, 5, 6]
        assert any(c.get("replicas") == target for c in mine[start + 1 :]), mine


def test_a_reassignment_is_cancelled_halfway(cluster: KipCluster) -> None:
    cluster.create_topic("halfway", [[1, 2, 3], [2, 3, 1]])
    cluster.wait_full_isr("halfway")
    cluster.kill_broker(6)  # broker 6 stays registered but cannot catch up
    cluster.wait_fenced(6)
    plan = cluster.write_json(
        "halfway.json",
        {"version": 1, "partitions": [
            {"topic": "halfway", "partition": p, "replicas": [4, 5, 6]} for p in (0, 1)]},
    )  # fmt: skip
    cluster.kraft("reassign-partitions", "--execute", "--reassignment-json-file", str(plan))

    def halfway() -> bool:
        parts = cluster.partitions("halfway")
        return all({4, 5} <= set(p["isr"]) and 6 not in p["isr"] for p in parts)

    wait_until(halfway, 30, interval=0.2, what="4 and 5 in the ISRs, 6 not")
    ongoing = cluster.get("/v1/partitions/reassignments")["partitions"]
    assert [(r["topic"], r["partition"]) for r in ongoing] == [("halfway", 0), ("halfway", 1)]
    assert all(6 in r["adding_replicas"] for r in ongoing)
    res = verify(cluster, plan)
    assert res.returncode == 1 and "is still in progress" in res.stdout
    res = cluster.kraft("reassign-partitions", "--cancel", "--reassignment-json-file", str(plan))
    assert "Successfully cancelled partition reassignments for: halfway-0,halfway-1" in res.stdout
    for p in cluster.partitions("halfway"):
        # the original replica set (Kafka's revert keeps the set, not always the order)
        assert sorted(p["replicas"]) == [1, 2, 3], p
        assert set(p["isr"]) <= {1, 2, 3} and p["leader"] in (1, 2, 3), p
        assert p["adding_replicas"] == [] and p["removing_replicas"] == [], p
    assert cluster.get("/v1/partitions/reassignments") == {"partitions": []}
    res = cluster.kraft("reassign-partitions", "--cancel", "--reassignment-json-file", str(plan))
    assert "None of the specified partition reassignments are active." in res.stdout
    cluster.start_broker(6)
    cluster.wait_running([6])


@pytest.mark.parametrize(
    ("partitions", "code", "names"),
    [
        ([{"topic": "nope", "partition": 0, "replicas": [1, 2]}], "UNKNOWN_TOPIC_OR_PARTITION", "nope"),
        ([{"topic": "halfway", "partition": 7, "replicas": [1, 2]}], "UNKNOWN_TOPIC_OR_PARTITION", "7"),
        ([{"topic": "halfway", "partition": 0, "replicas": [1, 1, 2]}], "INVALID_REPLICA_ASSIGNMENT", "1"),
        ([{"topic": "halfway", "partition": 0, "replicas": [1, 2, 99]}], "INVALID_REPLICA_ASSIGNMENT", "99"),
        ([{"topic": "halfway", "partition": 0, "replicas": []}], "INVALID_REPLICA_ASSIGNMENT", ""),
        ([{"topic": "halfway", "partition": 0, "replicas": None}], "NO_REASSIGNMENT_IN_PROGRESS", ""),
        ([{"topic": "halfway", "partition": 0}], "INVALID_REQUEST", "replicas"),
        ([{"topic": "halfway", "partition": "0", "replicas": [1]}], "INVALID_REQUEST", "partition"),
    ],
)  # fmt: skip
def test_a_bad_plan_gets_kafkas_error_and_writes_nothing(
    cluster: KipCluster, partitions: list[dict[str, Any]], code: str, names: str
) -> None:
    # a valid entry first: the whole plan is judged before anything is written
    good = {"topic": "moving", "partition": 0, "replicas": [5, 6, 4]}
    before = cluster.get("/v1/quorum")["high_watermark"]
    status, body = cluster.call(
        "POST", "/v1/partitions/reassignments", {"version": 1, "partitions": [good, *partitions]}
    )
    assert status >= 400 and body["error_code"] == code, body
    assert names in body["message"], body
    assert cluster.get("/v1/partitions/reassignments") == {"partitions": []}
    assert cluster.partitions("moving")[0]["replicas"] == [4, 5, 6]
    # nothing but NoOps may have been written meanwhile
    assert cluster.get("/v1/quorum")["high_watermark"] >= before


def readme_recipe() -> tuple[str, str]:
    """The README's decommission recipe: the shell block under its heading, split at
    the unregister step (stopping the broker process is up to the operator)."""
    text = (REPO / "README.md").read_text()
    m = re.search(r"### Decommission a broker.*?```(?:bash|sh)\n(.*?)```", text, re.S)
    assert m, "README: no 'Decommission a broker' recipe"
    block = m.group(1)
    before, sep, after = block.partition("kraft brokers unregister")
    assert sep, "the recipe ends with kraft brokers unregister"
    return before, sep + after


def test_a_broker_is_decommissioned_by_the_readme_recipe(cluster: KipCluster) -> None:
    before, unregister = readme_recipe()
    env = {
        **os.environ,
        "KRAFT_BOOTSTRAP": cluster.url,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    work = cluster.tmp / "recipe"
    work.mkdir()

    def sh(script: str) -> str:
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True, text=True, timeout=120, cwd=work, env=env,
        )  # fmt: skip
        assert res.returncode == 0, (script, res.stdout, res.stderr)
        return res.stdout

    out = sh(before)
    assert "Reassignment of partition" in out and "is completed" in out
    cluster.stop_broker(3)  # the operator stops broker 3's process
    cluster.wait_fenced(3)
    sh(unregister)
    assert 3 not in cluster.registrations()
    for t in cluster.get("/v1/topics"):
        for p in cluster.partitions(t["name"]):
            for key in ("replicas", "isr", "adding_replicas", "removing_replicas", "elr",
                        "last_known_elr"):  # fmt: skip
                assert 3 not in (p.get(key) or []), (t["name"], p)
            assert p["leader"] != 3
