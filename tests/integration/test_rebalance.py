"""Automatic preferred-leader balancing on real processes (Kafka's
auto.leader.rebalance.enable): a broker killed and restarted leads its preferred
partitions again within one leader.imbalance.check.interval.seconds (2 s here)
of rejoining their ISRs, with no admin election, and the
preferredreplicaimbalancecount metric goes back to 0."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.integration.kip_cluster import KipCluster
from tests.integration.procs import wait_until

pytestmark = pytest.mark.integration

BROKERS = (1, 2, 3)
CHECK_INTERVAL_S = 2
METRIC = "kafka_controller_kafkacontroller_preferredreplicaimbalancecount"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KipCluster]:
    c = KipCluster(
        tmp_path_factory.mktemp("rebalance"),
        BROKERS,
        controller_overrides={
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": str(CHECK_INTERVAL_S),
        },
    )
    try:
        yield c.start()
    finally:
        c.close()


def imbalance(cluster: KipCluster) -> float:
    with urllib.request.urlopen(cluster.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{METRIC} (\S+)$", text, re.M)
    assert m, f"{METRIC} not exported"
    return float(m.group(1))


def test_a_restarted_broker_takes_its_preferred_leaderships_back(cluster: KipCluster) -> None:
    assignments = [[2, 1, 3], [2, 3, 1], [1, 2, 3], [3, 2, 1], [2, 1, 3], [1, 3, 2]]
    cluster.create_topic("pref", assignments)
    parts = cluster.wait_full_isr("pref")
    assert [p["leader"] for p in parts] == [a[0] for a in assignments]
    preferred_by_2 = [pid for pid, a in enumerate(assignments) if a[0] == 2]
    assert imbalance(cluster) == 0

    cluster.kill_broker(2)
    cluster.wait_fenced(2)
    moved = cluster.partitions("pref")
    assert all(moved[pid]["leader"] != 2 for pid in preferred_by_2)
    # Kafka's count: led by another than the preferred replica (which cannot lead now)
    assert imbalance(cluster) == len(preferred_by_2)

    cluster.start_broker(2)
    cluster.wait_running([2])
    wait_until(
        lambda: all(2 in p["isr"] for p in cluster.partitions("pref")),
        20,
        interval=0.1,
        what="broker 2 back in every ISR (AlterPartition)",
    )
    back_in_isr = time.monotonic()
    # One check interval, plus the time for its batch to commit and for us to see it
    # (a bound for a loaded machine, not a figure: the time taken is printed).
    wait_until(
        lambda: all(cluster.partitions("pref")[pid]["leader"] == 2 for pid in preferred_by_2),
        CHECK_INTERVAL_S + 10,
        interval=0.1,
        what="broker 2 leads its preferred partitions again",
    )
    print(f"preferred leaders back {time.monotonic() - back_in_isr:.1f}s after the ISR")
    final = cluster.partitions("pref")
    assert [p["leader"] for p in final] == [a[0] for a in assignments]
    wait_until(lambda: imbalance(cluster) == 0, 5, what="imbalance metric back to 0")
