"""`kraft certs`: a local CA and, per node, a certificate, a token and a ready config.

    kraft certs --out DIR --controllers 1,2,3 --brokers 4,5,6 [--admin]

writes into DIR:

- `ca.pem` (the truststore) and `ca-key.pem` (keep it private);
- per principal (`controller-N`, `broker-N`, `admin`): `NAME.pem`, the keystore (its
  certificate, CN=NAME, SAN localhost/127.0.0.1/::1, for server and client use,
  followed by its private key), `NAME.token` (`NAME:secret`) and
  `NAME.properties` (the config keys that use them, for `--config` or
  `--command-config`);
- `credentials.properties`: every principal's salted token hash, for the
  controllers' `authentication.credentials.file` (no secret in it).

Secret files are created with mode 0600. For demos and tests: a production CA
keeps its key elsewhere.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

from kraft.security.credentials import hash_secret, new_secret


def _write(path: Path, data: bytes, private: bool) -> None:
    if path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kraft-py"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(days: int) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("kraft-py local CA")
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_node_cert(
    ca_cert: Any, ca_key: Any, principal: str, hosts: list[str], days: int
) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[Any] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(principal))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate(
    out: Path,
    controllers: list[int],
    brokers: list[int],
    admin: bool = True,
    hosts: list[str] | None = None,
    client_auth: str = "requested",
    days: int = 365,
) -> dict[str, Path]:
    """Write the CA, the per-principal files and credentials.properties; returns
    principal -> its properties file."""
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    hosts = hosts or ["localhost", "127.0.0.1", "::1"]
    ca_cert, ca_key = make_ca(days)
    _write(out / "ca.pem", _pem(ca_cert), private=False)
    _write(out / "ca-key.pem", _key_pem(ca_key), private=True)
    principals = [f"controller-{i}" for i in controllers] + [f"broker-{i}" for i in brokers]
    if admin:
        principals.append("admin")
    creds = [
        "# principal=salted token hash (kraft certs); for authentication.credentials.file",
    ]
    written: dict[str, Path] = {}
    for p in principals:
        cert, key = make_node_cert(ca_cert, ca_key, p, hosts, days)
        _write(out / f"{p}.pem", _pem(cert) + _key_pem(key), private=True)
        secret = new_secret()
        _write(out / f"{p}.token", f"{p}:{secret}\n".encode(), private=True)
        creds.append(f"{p}={hash_secret(secret)}")
        lines = [
            f"# {p}: kraft certs",
            f"ssl.keystore.location={out / f'{p}.pem'}",
            f"ssl.truststore.location={out / 'ca.pem'}",
            f"authentication.token.file={out / f'{p}.token'}",
        ]
        if p.startswith("controller-"):
            lines += [
                f"ssl.client.auth={client_auth}",
                "authorizer.enable=true",
                f"authentication.credentials.file={out / 'credentials.properties'}",
                "super.users=User:admin",
            ]
        path = out / f"{p}.properties"
        _write(path, ("\n".join(lines) + "\n").encode(), private=False)
        written[p] = path
    _write(out / "credentials.properties", ("\n".join(creds) + "\n").encode(), private=False)
    return written


def _ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of node ids: {text!r}") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"node ids must be distinct and >= 0: {text!r}")
    return ids


def register(sub: Any) -> None:
    p = sub.add_parser(
        "certs",
        help="create a local CA, per-node certificates, tokens and configs",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--controllers", type=_ids, default=[], metavar="ID,...")
    p.add_argument("--brokers", type=_ids, default=[], metavar="ID,...")
    p.add_argument("--admin", action="store_true", help="also an `admin` principal (super user)")
    p.add_argument(
        "--host",
        action="append",
        default=None,
        help="a SAN (repeatable; default localhost, 127.0.0.1, ::1)",
    )
    p.add_argument(
        "--client-auth",
        choices=("required", "requested", "none"),
        default="requested",
        help="ssl.client.auth written into the controllers' configs (default requested: "
        "a client certificate or a token)",
    )
    p.add_argument("--days", type=int, default=365)


def run(args: argparse.Namespace) -> int:
    import sys

    overlap = set(args.controllers) & set(args.brokers)
    if overlap:
        print(
            f"kraft certs: node ids are one namespace: {sorted(overlap)} given twice",
            file=sys.stderr,
        )
        return 2
    try:
        written = generate(
            Path(args.out), args.controllers, args.brokers, args.admin, args.host,
            args.client_auth, args.days,
        )  # fmt: skip
    except OSError as e:
        print(f"kraft certs: error: {e}", file=sys.stderr)
        return 1
    out = Path(args.out).resolve()
    print(f"CA: {out / 'ca.pem'}; credentials (hashes): {out / 'credentials.properties'}")
    for principal, path in written.items():
        print(f"  {principal}: {path}")
    return 0
