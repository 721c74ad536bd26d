"""Security end to end (issue 8): 3 real `kraft controller` processes with TLS,
mTLS required and tokens, broker agents authenticating with their certificates,
the admin CLI with and without the admin credential, and plaintext sent to the
TLS listener.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kraft.cluster import ClusterSpec, LocalCluster, http_json, wait_for
from kraft.security.certs import generate
from kraft.security.client import client_security

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
