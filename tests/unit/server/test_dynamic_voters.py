"""KIP-853 in the node: directory ids in meta.properties, the voter routes and their
errors, and the voter set surviving in snapshots (in-process controllers, HTTP)."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import pytest

from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from kraft.controller.requests import RegisterBrokerRequest
from kraft.server.node import (
    ControllerNode,
    NodeSettings,
    directory_id_of,
    format_or_check,
    new_directory_id,
)
from metadata_log.records import VotersRecord
from metadata_log.snapshot import read_snapshot
from tests.unit.server.test_node import Cluster, call, register_body

pytestmark = pytest.mark.timeout(90)


def test_format_writes_a_random_directory_id_and_old_directories_get_one(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    format_or_check(a, 1, "cid", True)
    format_or_check(b, 1, "cid", True)
    da, db = directory_id_of(a), directory_id_of(b)
    assert len(da) == 22 and da != db  # a new format is a new replica
    # Never taken for a command-line option.
    assert not any(new_directory_id().startswith("-") for _ in range(500))
    assert f"directory.id={da}" in (a / "meta.properties").read_text()
    assert directory_id_of(a) == da  # stable across restarts
    # A directory formatted before directory ids existed gets one, kept from then on.
    old = tmp_path / "old"
    old.mkdir()
    (old / "meta.properties").write_text("cluster.id=cid\nnode.id=1\nversion=1\n")
    d = directory_id_of(old)
    assert d and directory_id_of(old) == d
    assert format_or_check(old, 1, "cid", True) == "cid"


async def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = await pred()
        if v:
            return v
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_voter_routes_refuse_clearly_and_the_snapshot_keeps_the_voter_set(tmp_path):
    c = Cluster(
        tmp_path,
        [
            "metadata.log.max.record.bytes.between.snapshots=2000",
            "metadata.max.retention.bytes=0",
            "metadata.log.segment.bytes=4096",
        ],
    )
    await asyncio.gather(*(c.start(i) for i in (1, 2, 3)))
    try:
        leader: ControllerNode = await c.leader()
        lurl = c.urls[leader.node_id]
        follower = next(i for i in (1, 2, 3) if i != leader.node_id)
        async with aiohttp.ClientSession() as s:

            async def dirs_known():
                st, q = await call(s, "GET", lurl + "/v1/quorum")
                # The leader's view is its newest voter set: the VotersRecord that
                # adds the directory ids may not be committed yet (a change made
                # then is 409 CONCURRENT_VOTER_CHANGE), so wait for the commit too.
                return (
                    st == 200
                    and all(v["directory_id"] for v in q["voters"])
                    and q["high_watermark"] >= q["log_end_offset"]
                    and q
                )

            q = await _wait(dirs_known, 10, "the leader to learn and commit every directory id")
            dirs = {v["node_id"]: v["directory_id"] for v in q["voters"]}
            for i in (1, 2, 3):
                assert dirs[i] == directory_id_of(tmp_path / f"c{i}")
            # A follower points at the leader.
            st, body = await call(
                s, "DELETE", c.urls[follower] + f"/v1/quorum/voters/3?directory_id={dirs[3]}"
            )
            assert st == 503 and body["error_code"] == "NOT_CONTROLLER", body
            assert body["leader_url"] == lurl
            # Malformed requests name the problem.
            st, body = await call(s, "POST", lurl + "/v1/quorum/voters", {"node_id": 4})
            assert st == 400 and "directory_id" in body["message"], body
            st, body = await call(s, "DELETE", lurl + "/v1/quorum/voters/3")
            assert st == 400 and "directory_id" in body["message"], body
            # Unknown voter key; an existing voter; a replica that is not fetching.
            st, body = await call(s, "DELETE", lurl + "/v1/quorum/voters/3?directory_id=nope")
            assert st == 404 and body["error_code"] == "VOTER_NOT_FOUND", body
            add = {"node_id": 2, "directory_id": dirs[2], "url": c.urls[2]}
            st, body = await call(s, "POST", lurl + "/v1/quorum/voters", add)
            assert st == 409 and body["error_code"] == "DUPLICATE_VOTER", body
            # The leader asks the new voter's URL who answers there (KIP-853's
            # ApiVersions): nobody, within the change's timeout; or another node.
            add = {"node_id": 9, "directory_id": "x" * 22, "url": "http://127.0.0.1:1"}
            st, body = await call(s, "POST", lurl + "/v1/quorum/voters", {**add, "timeout_ms": 300})
            assert st == 504 and body["error_code"] == "REQUEST_TIMED_OUT", body
            assert "nothing answered GET http://127.0.0.1:1/v1/quorum as node 9" in body["message"]
            add = {"node_id": 9, "directory_id": "x" * 22, "url": c.urls[follower]}
            st, body = await call(s, "POST", lurl + "/v1/quorum/voters", add)
            assert st == 400, body
            assert (
                f"{c.urls[follower]} is node {follower} with directory {dirs[follower]}, "
                "not node 9" in body["message"]
            ), body

            # Remove a follower: committed, in force everywhere.
            st, body = await call(
                s, "DELETE", lurl + f"/v1/quorum/voters/{follower}?directory_id={dirs[follower]}"
            )
            assert st == 200, body
            assert sorted(v["node_id"] for v in body["voters"]) == sorted({1, 2, 3} - {follower})
            # Enough writes for a snapshot and a trimmed log on the remaining voters.
            for b in range(10, 30):
                st, body = await call(
                    s, "POST", lurl + "/v1/brokers/register", register_body(b, c.cluster_id)
                )
                assert st == 200, body
            # Node ids are one namespace: a registered broker's id is refused, and
            # so is another voter's URL (the quorum would dial that voter instead).
            add = {"node_id": 10, "directory_id": "x" * 22, "url": "http://127.0.0.1:1"}
            st, body = await call(s, "POST", lurl + "/v1/quorum/voters", add)
            assert st == 400 and "is a registered broker's" in body["message"], body
            add = {"node_id": 9, "directory_id": "x" * 22, "url": lurl}
            st, body = await call(s, "POST", lurl + "/v1/quorum/voters", add)
            assert st == 400 and f"{lurl} is node {leader.node_id} " in body["message"]
        other = next(i for i in (1, 2, 3) if i not in (leader.node_id, follower))

        async def trimmed():
            n = c.nodes[other]
            return n is not None and n.snapshots_written > 0 and n.log.start_offset > 0

        await _wait(trimmed, 15, f"node {other} to snapshot and trim its log")
        snap = c.nodes[other].log.latest_snapshot_id()
        assert snap is not None
        voters = read_snapshot(c.nodes[other].log.snapshot_file(snap)).voters()
        assert isinstance(voters, VotersRecord)
        assert {v.voter_id for v in voters.voters} == {1, 2, 3} - {follower}
        # Restarted from its snapshot (the VotersRecord of the removal may be
        # gone from its log), the node still knows the voter set.
        await c.stop(other)
        node = await c.start(other)
        assert node.raft.core is not None
        assert node.raft.core.voters == frozenset({1, 2, 3} - {follower})
    finally:
        for i in (1, 2, 3):
            await c.stop(i)


def test_a_controller_added_at_run_time_owns_its_node_id():
    # Node ids are one namespace: once node 7 is a voter (added with KIP-853 after
    # this process started with voters 1-3), a broker may not register as 7.
    voters = frozenset({1, 2, 3})
    ctl = QuorumController(
        ControllerConfig(node_id=1, controller_ids=voters, cluster_id="c"), random.Random(0)
    )
    ctl.activate(0)
    ctl.add_controller_ids(voters)
    assert ctl.register_broker(RegisterBrokerRequest.parse(register_body(7, "c")), 0, 0).records
    ctl.add_controller_ids(voters | {8})
    with pytest.raises(ApiError) as e:
        ctl.register_broker(RegisterBrokerRequest.parse(register_body(8, "c")), 0, 1)
    assert e.value.code == "INVALID_REQUEST" and "controller" in str(e.value)


async def test_a_voter_given_another_url_than_the_logs_is_named_at_start(tmp_path, caplog):
    """The log's voter set (KIP-853) wins over --voters: a controller restarted with
    its voters on other ports would dial the old ones, so it says so (that is how
    `kraft cluster up` on new ports hung in silence)."""
    from kraft.config import CONTROLLER_KEYS, load_config
    from tests.unit.raft_shell.raft_harness import free_ports
    from tests.unit.server.test_node import FAST

    old, new = free_ports(2)
    cfg = load_config(CONTROLLER_KEYS, None, FAST)

    async def run(port: int) -> ControllerNode:
        s = NodeSettings(1, {1: ("127.0.0.1", port)}, tmp_path / "c1", "cid", config=cfg)
        node = ControllerNode(s)
        await node.start()
        return node

    node = await run(old)
    try:
        await _wait(lambda: _voters_committed(node), 10, "the VotersRecord committed")
    finally:
        await node.stop(2.0)
    assert not [r for r in caplog.records if getattr(r, "event", "") == "voter_url_differs"]
    node = await run(new)
    await node.stop(2.0)
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "voter_url_differs"]
    assert warning.levelname == "WARNING"
    assert (warning.voter, warning.url_in_log) == (1, f"http://127.0.0.1:{old}")
    assert warning.url_given == f"http://127.0.0.1:{new}"


async def _voters_committed(node: ControllerNode) -> bool:
    """The first leader's VotersRecord (with its directory id) is committed."""
    core = node.raft.core
    return (
        core is not None
        and core.voters_version >= 1
        and core.pending_voter_change is None
        and bool(core.voter_set.voters[0].directory_id)
    )
