"""Security end to end (issue 8): 3 real `kraft controller` processes with TLS,
mTLS required and tokens, broker agents authenticating with their certificates,
the admin CLI with and without the admin credential, and plaintext sent to the
TLS listener.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kraft.local.cluster import ClusterSpec, LocalCluster, http_json, wait_for
from kraft.security.certs import generate
from kraft.security.client_security import client_security
from kraft.security.reload import Reloader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_secure_cluster_end_to_end(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    generate(certs, [1, 2, 3], [4, 5, 6], admin=True, client_auth="required")
    spec = ClusterSpec(
        controllers=3,
        brokers=2,
        data_dir=tmp_path / "cluster",
        certs_dir=certs,
        controller_overrides={"broker.session.timeout.ms": "6000"},
        # brokers authenticate with their client certificate alone (mTLS), the
        # controllers' Raft RPCs with their tokens
        broker_overrides={
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500",
            "authentication.token.file": "",
        },
    )
    cluster = LocalCluster(spec)
    try:
        assert all(u.startswith("https://") for u in cluster.controller_urls)
        cluster.start_all()
        leader = cluster.wait_leader(30)
        assert leader["leader_epoch"] >= 1

        def unfenced() -> bool:
            view = cluster.brokers_view()
            return len(view) == 2 and not any(b["fenced"] for b in view.values())

        wait_for(unfenced, 30, "both brokers registered and unfenced")
        boot = ",".join(cluster.controller_urls)

        # the admin CLI with the admin credential creates a topic ...
        ok = _cli("topics", "create", "--topic", "secure", "--partitions", "2",
                  "--replication-factor", "2", "--bootstrap", boot,
                  "--command-config", str(certs / "admin.properties"))  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert "Created topic secure" in ok.stdout
        # ... and is refused with a broker's (403), and without any (no client certificate)
        as_broker = _cli("topics", "create", "--topic", "nope", "--bootstrap", boot,
                         "--command-config", str(certs / "broker-4.properties"))  # fmt: skip
        assert as_broker.returncode == 1
        assert "UNAUTHORIZED" in as_broker.stderr and "super.users" in as_broker.stderr
        assert "Traceback" not in as_broker.stderr
        bare = _cli("topics", "create", "--topic", "nope", "--bootstrap", boot, "--timeout", "3")
        assert bare.returncode == 1 and "SSL_AUTHENTICATION_FAILED" in bare.stderr, bare.stderr
        assert "Traceback" not in bare.stderr
        listed = _cli("topics", "list", "--bootstrap", boot,
                      "--command-config", str(certs / "admin.properties"))  # fmt: skip
        assert listed.stdout.split() == ["secure"], listed

        # broker 4's credential cannot heartbeat as broker 5 (a certificate + its token)
        as4 = client_security(str(certs / "ca.pem"), str(certs / "broker-4.pem"),
                              str(certs / "broker-4.token"))  # fmt: skip
        lead_url = cluster.nodes[cluster.wait_leader()["node_id"]].url
        hb = {"broker_id": 5, "broker_epoch": 0, "current_metadata_offset": 0}
        status, out = http_json("POST", f"{lead_url}/v1/brokers/heartbeat", hb, 5, as4)
        assert status == 403 and out["error_code"] == "UNAUTHORIZED", out

        # plaintext HTTP to the TLS listener fails cleanly; TLS clients go on
        host_port = lead_url.removeprefix("https://")
        for _ in range(3):
            with pytest.raises(OSError):
                http_json("GET", f"http://{host_port}/v1/quorum", timeout=3)
        assert cluster.leader() is not None
        describe = _cli("quorum", "describe", "--bootstrap", boot,
                        "--command-config", str(certs / "admin.properties"))  # fmt: skip
        assert describe.returncode == 0 and "CurrentVoters:          [1,2,3]" in describe.stdout
    finally:
        codes = cluster.stop_all()
    assert all(c == 0 for c in codes.values()), codes
    refused = 0
    for node, log in cluster.iter_logs():
        text = log.read_text()
        assert "Traceback" not in text, f"{node.name} logged a traceback"
        refused += text.count('"event": "unauthorized"')
    # only the two refusals above (the admin CLI as broker 4, the forged heartbeat):
    # no request between the cluster's own nodes was refused
    assert refused == 2, refused


def _sighup(cluster: LocalCluster, ids: list[int]) -> None:
    """SIGHUP to the processes this test started (kraft.security.reload)."""
    import os
    import signal

    for nid in ids:
        pid = cluster.nodes[nid].pid
        assert pid is not None and cluster.nodes[nid].alive()
        os.kill(pid, signal.SIGHUP)


def _reloaded(cluster: LocalCluster, nid: int) -> int:
    return cluster.nodes[nid].log_path.read_text().count('"event": "security_reloaded"')


def test_ca_and_every_certificate_rotated_under_load_with_no_broker_fenced(
    tmp_path: Path,
) -> None:
    """Issue 25 item 2, the README recipe on 3 controllers and 2 brokers heartbeating
    every 200 ms: a new CA trusted beside the old, every certificate and token renewed,
    the old CA dropped, the old token hashes dropped, each step reloaded by SIGHUP
    (controllers and brokers) without a restart; no broker is fenced, the leader stays, new connections need the new CA,
    and a replaced or revoked token is refused after the reload."""
    certs = tmp_path / "certs"
    generate(certs, [1, 2, 3], [4, 5, 6], admin=True)
    spec = ClusterSpec(
        controllers=3,
        brokers=2,
        data_dir=tmp_path / "cluster",
        certs_dir=certs,
        controller_overrides={"broker.session.timeout.ms": "3000"},
        broker_overrides={
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "200",
        },
    )
    old_ca = client_security(str(certs / "ca.pem"), None, str(certs / "admin.token"))
    old_b4_token = str(tmp_path / "broker-4.old.token")
    Path(old_b4_token).write_text((certs / "broker-4.token").read_text())
    cluster = LocalCluster(spec)
    everyone = [1, 2, 3, 4, 5]
    try:
        cluster.start_all()
        leader = cluster.wait_leader(30)

        def unfenced() -> bool:
            view = cluster.brokers_view()
            return len(view) == 2 and not any(b["fenced"] for b in view.values())

        wait_for(unfenced, 30, "both brokers registered and unfenced")
        steps = [
            lambda: _cli("certs", "--out", str(certs), "--rotate-ca", "start"),
            lambda: _cli("certs", "--out", str(certs), "--renew", "all", "--new-token"),
            lambda: _cli("certs", "--out", str(certs), "--rotate-ca", "finish"),
            lambda: _cli("certs", "--out", str(certs), "--drop-old-tokens"),
        ]
        for n, step in enumerate(steps, 1):
            done = step()
            assert done.returncode == 0, done.stderr
            _sighup(cluster, everyone)
            wait_for(
                lambda n=n: all(_reloaded(cluster, i) >= n for i in everyone),
                15,
                f"step {n} reloaded by every node",
            )
            # this test's own admin client reloads too (new CA, new admin token)
            assert Reloader([cluster.security], 0, who="test").reload() == 0
            time.sleep(1.0)  # five heartbeat intervals on the new material
            assert unfenced(), cluster.brokers_view()
            if n == 2:  # old and new tokens are both valid until the old hashes are dropped
                lead = cluster.nodes[cluster.wait_leader()["node_id"]].url
                stale = client_security(str(certs / "ca.pem"), None, old_b4_token)
                assert http_json("GET", f"{lead}/v1/quorum", None, 5, stale)[0] == 200
        # the same leader throughout: Raft between the controllers never broke
        assert cluster.wait_leader()["leader_epoch"] == leader["leader_epoch"]
        lead_url = cluster.nodes[cluster.wait_leader()["node_id"]].url
        # a new connection that trusts only the old CA is refused; the new CA works
        with pytest.raises(OSError):
            http_json("GET", f"{lead_url}/v1/quorum", timeout=3, security=old_ca)
        admin = client_security(str(certs / "ca.pem"), None, str(certs / "admin.token"))
        status, _ = http_json("GET", f"{lead_url}/v1/quorum", None, 5, admin)
        assert status == 200
        # broker 4's replaced token is refused (401); so is broker 6's once revoked
        stale = client_security(str(certs / "ca.pem"), None, old_b4_token)
        status, out = http_json("GET", f"{lead_url}/v1/quorum", None, 5, stale)
        assert status == 401 and out["error_code"] == "UNAUTHORIZED", out
        b6 = client_security(str(certs / "ca.pem"), None, str(certs / "broker-6.token"))
        assert http_json("GET", f"{lead_url}/v1/quorum", None, 5, b6)[0] == 200
        # and by its certificate alone (mTLS), until the revocation's CRL is loaded
        b6_cert = client_security(str(certs / "ca.pem"), str(certs / "broker-6.pem"), None)
        assert http_json("GET", f"{lead_url}/v1/quorum", None, 5, b6_cert)[0] == 200
        done = _cli("certs", "--out", str(certs), "--revoke", "broker-6")
        assert done.returncode == 0, done.stderr
        _sighup(cluster, [1, 2, 3])
        wait_for(
            lambda: all(_reloaded(cluster, i) >= 5 for i in (1, 2, 3)), 15, "revocation reloaded"
        )
        status, out = http_json("GET", f"{lead_url}/v1/quorum", None, 5, b6)
        assert status == 401 and out["error_code"] == "UNAUTHORIZED", out
        b6_cert = client_security(str(certs / "ca.pem"), str(certs / "broker-6.pem"), None)
        with pytest.raises(OSError):  # refused at the handshake: its serial is in the CRL
            http_json("GET", f"{lead_url}/v1/quorum", None, 5, b6_cert)
        assert unfenced()
    finally:
        codes = cluster.stop_all()
    assert all(c == 0 for c in codes.values()), codes
    for node, log in cluster.iter_logs():
        text = log.read_text()
        assert "Traceback" not in text, f"{node.name} logged a traceback"
        assert '"event": "security_reload_failed"' not in text, node.name
        if node.role == "controller":
            assert '"event": "broker_fenced"' not in text, f"{node.name} fenced a broker"
