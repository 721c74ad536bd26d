"""Eligible Leader Replicas (KIP-966) on real processes, min.insync.replicas=2, RF 3.

With ELR on (a new cluster): brokers 3 and 2 stop cleanly (SIGTERM) and the ISR
shrinks to [1]: 2 is kept eligible, and broker 1, the leader, holds its high
watermark (strict min ISR). Broker 1 is then killed (-9): nobody is in the ISR.
Broker 2 restarts (its clean shutdown file says its last epoch): it is elected
from the ELR, cleanly, with unclean.leader.election.enable off. Broker 1
restarts after its crash (previous_broker_epoch -1): it is no longer eligible.

With ELR off (eligible.leader.replicas.version=0), the same story leaves the
partition without a leader when 2 comes back; only an unclean election (the
topic config) brings it back.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.kip_cluster import KipCluster
from tests.integration.procs import wait_until

pytestmark = pytest.mark.integration

BROKERS = (1, 2, 3)
ELR_OFF = {"eligible.leader.replicas.version": "0"}


def partition(cluster: KipCluster) -> dict[str, Any]:
    return cluster.partitions("elr")[0]


def shrink_to_nothing(cluster: KipCluster) -> None:
    """3 and 2 stop cleanly, then the last ISR member 1 crashes."""
    cluster.create_topic("elr", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    cluster.wait_full_isr("elr")
    assert partition(cluster)["leader"] == 1
    cluster.stop_broker(3)
    cluster.wait_fenced(3)
    cluster.stop_broker(2)
    cluster.wait_fenced(2)
    p = partition(cluster)
    assert p["isr"] == [1] and p["leader"] == 1, p
    # strict min ISR: the leader's high watermark is held with one ISR member
    wait_until(
        lambda: cluster.agent(1)["under_min_isr"] >= 1, 10, interval=0.2,
        what="broker 1 holds the high watermark of elr-0",
    )  # fmt: skip
    cluster.kill_broker(1)
    cluster.wait_fenced(1)


def test_an_elr_member_is_elected_cleanly_after_the_whole_isr_is_lost(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cluster = KipCluster(tmp_path_factory.mktemp("elr-on"), BROKERS)
    try:
        cluster.start()
        cluster.create_topic("probe", [[1, 2, 3]], **{"min.insync.replicas": "2"})
        assert "elr" in partition_of(cluster, "probe"), "ELR is on in a new cluster"
        shrink_to_nothing(cluster)
        p = partition(cluster)
        assert p["leader"] == -1 and p["isr"] == [], p
        assert 2 in p["elr"] and 3 not in p["elr"], p
        out = cluster.kraft("topics", "describe", "--topic", "elr").stdout
        assert "Elr: " in out and "LastKnownElr: " in out, out

        cluster.start_broker(2)
        cluster.wait_running([2])
        p = wait_until(
            lambda: (q := partition(cluster))["leader"] == 2 and q, 10, interval=0.1,
            what="broker 2 elected from the ELR",
        )  # fmt: skip
        assert p["isr"] == [2] and 2 not in p["elr"], p
        assert p["leader_recovery_state"] == 0, "a clean election: nothing to recover"

        cluster.start_broker(1)  # after a crash: previous_broker_epoch -1
        cluster.wait_running([1])
        p = partition(cluster)
        assert 1 not in p["elr"] and 1 not in p.get("last_known_elr", []), p
    finally:
        cluster.close()


def partition_of(cluster: KipCluster, topic: str) -> dict[str, Any]:
    return cluster.partitions(topic)[0]


def test_without_elr_the_same_story_needs_an_unclean_election(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cluster = KipCluster(tmp_path_factory.mktemp("elr-off"), BROKERS, controller_overrides=ELR_OFF)
    try:
        cluster.start()
        shrink_to_nothing(cluster)
        p = partition(cluster)
        # Kafka 3.x: the last ISR member stays in the ISR, fenced, and nobody leads
        assert p["leader"] == -1 and p["isr"] == [1] and not p.get("elr"), p
        cluster.start_broker(2)
        cluster.wait_running([2])
        p = partition(cluster)
        assert p["leader"] == -1, "2 is not in the ISR: no clean election"
        status, body = cluster.call(
            "POST", "/v1/elections", {"topic": "elr", "partition": 0, "type": "unclean"}
        )
        assert status == 200, body
        p = partition(cluster)
        assert p["leader"] == 2 and p["isr"] == [2], p
    finally:
        cluster.close()
