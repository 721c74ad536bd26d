"""LocalCluster's command lines (plain and behind chaos proxies) and the metrics registry."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kraft.arg_types import key_value
from kraft.local.cluster import ClusterSpec, LocalCluster
from kraft.server.metrics import GAUGES, ControllerMetrics


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_plain_cluster_shares_one_voters_string(tmp_path: Path) -> None:
    c = LocalCluster(ClusterSpec(3, 2, tmp_path), ports=[7001, 7002, 7003])
    voters = {_arg(n.args, "--voters") for n in c.controllers}
    assert voters == {"1@127.0.0.1:7001,2@127.0.0.1:7002,3@127.0.0.1:7003"}
    assert all("--listen" not in n.args for n in c.controllers)
    assert [b.node_id for b in c.brokers] == [4, 5]  # one id namespace
    assert _arg(c.nodes[4].args, "--controllers") == ",".join(c.controller_urls)
    assert c.nodes[4].out_path == c.nodes[4].log_path.with_suffix(".out")


def test_proxied_cluster_dials_peers_through_their_links(tmp_path: Path) -> None:
    peers = {(i, j): 8000 + 10 * i + j for i in (1, 2, 3) for j in (1, 2, 3) if i != j}
    c = LocalCluster(ClusterSpec(3, 0, tmp_path), ports=[7001, 7002, 7003], peer_ports=peers)
    n1 = c.nodes[1].args
    assert _arg(n1, "--voters") == "1@127.0.0.1:7001,2@127.0.0.1:8012,3@127.0.0.1:8013"
    assert _arg(n1, "--listen") == "127.0.0.1:7001"
    assert _arg(c.nodes[3].args, "--voters") == "1@127.0.0.1:8031,2@127.0.0.1:8032,3@127.0.0.1:7003"
    # the voters strings differ, so the cluster id is explicit and shared
    assert len({_arg(n.args, "--cluster-id") for n in c.controllers}) == 1


def test_spec_and_override_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--controllers"):
        ClusterSpec(0, 1, tmp_path)
    with pytest.raises(ValueError, match="--brokers"):
        ClusterSpec(3, -1, tmp_path)
    assert key_value(" broker.session.timeout.ms = 6000") == (
        "broker.session.timeout.ms",
        "6000",
    )
    for bad in ("no-equals-sign", "=6000", " =x"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not KEY=VALUE"):
            key_value(bad)


def test_metrics_render_every_name() -> None:
    state = {key: float(i) for i, (_help, key) in enumerate(GAUGES.values())}
    m = ControllerMetrics(lambda: state)
    m.commit_latency.observe(3.0)
    m.event_queue_time.observe(0.7)
    m.elections.inc()
    m.fences.inc()
    m.partition_elections.labels(unclean="false").inc()
    body, content_type = m.render()
    assert content_type.startswith("text/plain")
    samples = {
        s.name: s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }
    for name, (_help, key) in GAUGES.items():
        assert samples[name] == state[key], name
    assert samples["kafka_server_raft_metrics_commit_latency_ms_count"] == 1
    assert samples["kafka_server_raft_metrics_commit_latency_ms_sum"] == 3.0
    assert samples["kafka_controller_controllereventmanager_eventqueuetimems_count"] == 1
    assert samples["kafka_server_raft_metrics_elections_total"] == 1
    assert samples["kafka_controller_controllerstats_brokerfences_total"] == 1
    assert samples["kafka_controller_controllerstats_leaderelections_total"] == 1


def test_a_missing_gauge_is_left_out() -> None:
    m = ControllerMetrics(lambda: {"active": 1.0})
    names = {f.name for f in text_string_to_metric_families(m.render()[0].decode())}
    assert "kafka_controller_kafkacontroller_activecontrollercount" in names
    assert "kafka_server_raft_metrics_high_watermark" not in names


def test_the_stop_waits_for_the_brokers_own_controlled_shutdown_bound(tmp_path: Path) -> None:
    """cluster up waits a broker's controlled.shutdown.timeout.ms (+ grace) before
    SIGKILL; an override the brokers refuse leaves the default (no traceback)."""
    for overrides, bound in (
        ({}, 30.0),
        ({"controlled.shutdown.timeout.ms": "2000"}, 2.0),
        ({"controlled.shutdown.timeout.ms": "soon"}, 30.0),
    ):
        spec = ClusterSpec(1, 1, tmp_path, broker_overrides=overrides)
        assert LocalCluster(spec).broker_shutdown_bound_s() == bound


def test_a_secure_cluster_s_admin_follows_a_ca_rotation(tmp_path: Path) -> None:
    """`cluster up --secure` reads the admin's material again when `kraft certs`
    rewrites it: after the README's rotation its status line called every
    controller down (it trusted the old CA alone)."""
    from kraft.security.certs import renew, rotate_ca_finish, rotate_ca_start

    certs = tmp_path / "certs"
    cluster = LocalCluster(ClusterSpec(1, 1, tmp_path, certs_dir=certs))

    def trusted() -> set[str]:
        ctx = cluster.security.ssl_context
        inner = getattr(ctx, "current", ctx)  # a ReloadableContext serves through `current`
        assert inner is not None
        return {c["serialNumber"] for c in inner.get_ca_certs()}

    old = trusted()
    assert len(old) == 1
    rotate_ca_start(certs)
    assert len(trusted()) == 2 and old < trusted()  # old and new, as ca.pem now holds
    renew(certs, ["all"])
    rotate_ca_finish(certs)
    new = trusted()
    assert len(new) == 1 and new != old
