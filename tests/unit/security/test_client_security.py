"""The client side of security: configs, fleets' per-broker credentials, the admin tools."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.config import BROKER_KEYS, ConfigError, load_config
from kraft.security.certs import generate
from kraft.security.client_security import from_command_config


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    generate(out, [1], [4, 5, 6], admin=True)
    return out


def test_kraft_certs_writes_no_secret_where_a_controller_reads(certs: Path) -> None:
    creds = (certs / "credentials.properties").read_text()
    for p in ("controller-1", "broker-4", "admin"):
        secret = (certs / f"{p}.token").read_text().strip().split(":", 1)[1]
        assert secret not in creds
        assert f"{p}=pbkdf2-sha256$" in creds
        assert (certs / f"{p}.pem").stat().st_mode & 0o077 == 0
        assert (certs / f"{p}.token").stat().st_mode & 0o077 == 0
    props = (certs / "controller-1.properties").read_text()
    assert "authorizer.enable=true" in props and "ssl.client.auth=requested" in props


def test_command_config_gives_tls_and_the_token(certs: Path, monkeypatch) -> None:
    sec = from_command_config(str(certs / "admin.properties"))
    assert sec.ssl_context is not None and sec.principal() == "admin"
    assert sec.headers["Authorization"].startswith("Bearer admin:")
    monkeypatch.setenv("KRAFT_COMMAND_CONFIG", str(certs / "broker-4.properties"))
    assert from_command_config(None).principal() == "broker-4"
    monkeypatch.delenv("KRAFT_COMMAND_CONFIG")
    assert not from_command_config(None).enabled
    bad = certs / "bad.properties"
    bad.write_text(f"ssl.truststore.location={certs / 'nope.pem'}\n")
    with pytest.raises(ConfigError, match="nope.pem"):
        from_command_config(str(bad))


def _fleet_args(config: Path, count: int) -> argparse.Namespace:
    from broker_agent.cli import build_fleet_parser

    return build_fleet_parser().parse_args(
        ["--count", str(count), "--first-id", "4", "--controllers", "https://127.0.0.1:1",
         "--config", str(config)]
    )  # fmt: skip


def test_a_fleet_gives_each_agent_its_own_credential(certs: Path, tmp_path: Path) -> None:
    from broker_agent.cli import spec_from_args

    cfg = tmp_path / "fleet.properties"
    cfg.write_text(
        f"ssl.truststore.location={certs / 'ca.pem'}\n"
        f"authentication.token.file={certs}/broker-{{id}}.token\n"
    )
    spec = spec_from_args(_fleet_args(cfg, 3), fleet=True)
    assert {b: s.principal() for b, s in spec.security.items()} == {
        4: "broker-4", 5: "broker-5", 6: "broker-6",
    }  # fmt: skip
    # one token for many agents would let them act as each other: refused
    cfg.write_text(f"authentication.token.file={certs / 'broker-4.token'}\n")
    with pytest.raises(ConfigError, match=r"\{id\}"):
        spec_from_args(_fleet_args(cfg, 3), fleet=True)
    assert "authentication.token.file" in load_config(BROKER_KEYS).as_dict()


def test_admin_tool_errors_are_one_line(certs: Path, tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "kraft.cli", "topics", "list", "--bootstrap", "https://127.0.0.1:1",
         "--command-config", str(tmp_path / "missing.properties")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert "missing.properties" in missing.stderr and "Traceback" not in missing.stderr


def test_kraft_certs_command(tmp_path: Path) -> None:
    out = tmp_path / "c"
    ok = subprocess.run(
        [sys.executable, "-m", "kraft.cli", "certs", "--out", str(out), "--controllers", "1,2",
         "--brokers", "3", "--admin"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    names = {p.name for p in out.iterdir()}
    assert {"ca.pem", "credentials.properties", "controller-2.pem", "broker-3.token",
            "admin.properties"} <= names  # fmt: skip
    clash = subprocess.run(
        [sys.executable, "-m", "kraft.cli", "certs", "--out", str(tmp_path / "d"),
         "--controllers", "1,2", "--brokers", "2"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert clash.returncode == 2 and "one namespace" in clash.stderr


def test_a_client_with_a_truststore_trusts_it_alone(certs: Path) -> None:
    """As a Kafka client trusts ssl.truststore.location alone: the system's CAs are not
    loaded beside it (they made each context ~0.8 MiB; a fleet of 10,000 brokers,
    each presenting its own certificate, holds 10,000 contexts)."""
    import ssl

    from kraft.security.tls import TlsConfigError, client_context

    ctx = client_context(str(certs / "ca.pem"), str(certs / "broker-4.pem"))
    assert ctx.cert_store_stats()["x509_ca"] == 1
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsConfigError, match="nope.pem"):
        client_context(str(certs / "nope.pem"))


@pytest.mark.parametrize(
    ("days", "says"),
    [("0", "at least 1, got 0"), ("-1", "got -1"), ("x", "'x' is not a whole number")],
)
def test_certs_days_below_one_is_refused_before_any_file_changes(
    certs: Path, days: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--days 0 wrote certificates already expired (and -1 a traceback): with
    --renew all that took every node down at its next handshake."""
    from kraft.cli import main

    before = {p.name: p.read_bytes() for p in certs.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as e:
        main(["certs", "--out", str(certs), "--renew", "all", "--days", days])
    assert e.value.code == 2
    assert says in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in certs.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        # alone it fell through to a fresh set: a new CA and no token hashes (exit 0)
        (["--new-token"], 2, "--new-token goes with --renew"),
        # no option, or the first command again (`make certs` twice): the same
        ([], 2, "already holds a CA and credentials"),
        (["--controllers", "1,2,3", "--brokers", "4", "--admin"], 2, "already holds a CA"),
        (["--days", "30"], 2, "remove the directory to start over"),
        # a typo'd principal printed "revoked" while the intended token stayed valid
        (["--revoke", "brokr-4"], 1, "holds no token of 'brokr-4': nothing revoked"),
    ],
)
def test_certs_never_replaces_or_misses_a_live_directory_s_material(
    certs: Path, argv: list[str], code: int, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kraft.cli import main

    before = {p.name: p.read_bytes() for p in certs.iterdir() if p.is_file()}
    assert main(["certs", "--out", str(certs), *argv]) == code
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert {p.name: p.read_bytes() for p in certs.iterdir() if p.is_file()} == before


def test_certs_revokes_a_known_principal(
    certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from kraft.cli import main

    own = shutil.copytree(certs, tmp_path / "certs")  # the module's set stays whole
    assert main(["certs", "--out", str(own), "--revoke", "broker-4"]) == 0
    assert "broker-4=" not in (own / "credentials.properties").read_text()
    out = capsys.readouterr()
    assert "revoked broker-4's token" in out.out and out.err == ""
    # the super user: revoked (a leaked token), with the way back in said at once
    assert main(["certs", "--out", str(own), "--revoke", "admin"]) == 0
    assert capsys.readouterr().err == (
        "kraft certs: warning: admin is in super.users: the admin commands are refused "
        f"until it has a new token (kraft certs --out {own} --renew admin --new-token)\n"
    )
    assert main(["certs", "--out", str(own), "--renew", "admin", "--new-token"]) == 0
    from kraft.security.credentials import load_credentials

    secret = (own / "admin.token").read_text().strip().split(":", 1)[1]
    (stored,) = load_credentials(own / "credentials.properties")["admin"]
    assert stored.matches(secret)


def test_a_revocation_that_cannot_sign_its_crl_changes_nothing(
    certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--revoke writes a CRL signed by the CA's key: without the key it stops
    with one line naming the file, before the token is removed."""
    import shutil

    from kraft.cli import main

    own = shutil.copytree(certs, tmp_path / "certs")
    (own / "ca-key.pem").unlink()
    before = {p.name: p.read_bytes() for p in own.iterdir() if p.is_file()}
    assert main(["certs", "--out", str(own), "--revoke", "broker-4"]) == 1
    err = capsys.readouterr().err
    assert "ca-key.pem" in err and err.count("\n") == 1, err
    assert {p.name: p.read_bytes() for p in own.iterdir() if p.is_file()} == before


def test_a_ca_rotation_does_not_re_admit_a_revoked_principal(
    certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's rotation (start, --renew all --new-token, finish) gave a revoked
    principal a new certificate and a new token: it was in again. `--renew all` now
    passes it over and `finish` does not wait for it, so the old CA's end is its
    certificate's end; naming it in --renew re-admits it."""
    import shutil

    from cryptography.exceptions import InvalidSignature

    from kraft.cli import main
    from kraft.security.certs import _read_certs, revoked
    from kraft.security.credentials import load_credentials

    own = shutil.copytree(certs, tmp_path / "certs")
    old_cert = (own / "broker-4.pem").read_bytes()
    assert main(["certs", "--out", str(own), "--revoke", "broker-4"]) == 0
    assert revoked(own) == ["broker-4"]
    assert main(["certs", "--out", str(own), "--rotate-ca", "start"]) == 0
    assert main(["certs", "--out", str(own), "--renew", "all", "--new-token"]) == 0
    out = capsys.readouterr().out
    assert "renewed broker-4" not in out and "not renewed, revoked: broker-4" in out, out
    assert "broker-4" not in load_credentials(own / "credentials.properties")
    assert (own / "broker-4.pem").read_bytes() == old_cert
    assert main(["certs", "--out", str(own), "--rotate-ca", "finish"]) == 0
    (ca,) = _read_certs(own / "ca.pem")
    with pytest.raises((InvalidSignature, ValueError)):
        _read_certs(own / "broker-4.pem")[0].verify_directly_issued_by(ca)
    # re-admitted on purpose: a certificate of the new CA and a token
    assert main(["certs", "--out", str(own), "--renew", "broker-4", "--new-token"]) == 0
    assert "re-admitted" in capsys.readouterr().out
    assert revoked(own) == [] and "broker-4" in load_credentials(own / "credentials.properties")
    _read_certs(own / "broker-4.pem")[0].verify_directly_issued_by(ca)
