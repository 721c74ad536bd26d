"""`kraft certs`: a local CA and, per node, a certificate, a token and a ready config.

    kraft certs --out DIR --controllers 1,2,3 --brokers 4,5,6 [--admin]

writes into DIR (and `--renew NAME|all [--new-token]`, `--revoke NAME`,
`--rotate-ca start|finish`, `--drop-old-tokens` rotate what is in it; see the
rotation notes below):

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

from kraft.arg_types import node_ids, whole_number
from kraft.config import parse_properties
from kraft.security.authz import parse_super_users
from kraft.security.credentials import hash_secret, new_secret


def _write(path: Path, data: bytes, private: bool) -> None:
    """Whole or not at all: a running node that reloads the file (kraft.security.reload)
    never reads it half-written. The temp file is made with its final mode."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


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
    now = _now()
    # Each CA has a name of its own: during a CA rotation the truststore holds the
    # old and the new CA, and OpenSSL finds an issuer by its name.
    name = _name(f"kraft-py local CA {now:%Y%m%d%H%M%S.%f}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
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
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
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
    # a new CA and new token hashes would lock every running node out of the cluster
    # that trusts this directory's: growing or rotating it is --renew/--rotate-ca's job
    for existing in ("ca.pem", "ca-key.pem", CREDENTIALS):
        if (out / existing).exists():
            raise CertsError(
                f"{out} already holds a CA and credentials ({out / existing}); a new set "
                "would lock out every node that trusts them. Renew or rotate with "
                "--renew/--new-token/--rotate-ca, or remove the directory to start over"
            )
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


# ---- rotation (issue 25): new certificates and tokens for running nodes, and a new CA
#
# Running nodes re-read their files on SIGHUP or within security.reload.interval.ms
# (kraft.security.reload). A CA is rotated in three steps, so no connection ever
# meets a certificate its peer does not trust:
#   1. --rotate-ca start: a new CA (ca-next.pem, ca-next-key.pem) and the trust bundle
#      ca.pem = old CA + new CA; every node reloads and trusts both.
#   2. --renew all: every certificate is re-issued by the new CA (the newest CA signs
#      while a rotation is under way); each node reloads its own.
#   3. --rotate-ca finish: refused while a certificate is still the old CA's; then
#      ca.pem = the new CA only and ca-key.pem = its key; every node reloads.
# Tokens the same way: --renew --new-token adds each new hash beside the old one (a
# controller that reloads before a broker still accepts the broker's old token), and
# --drop-old-tokens, once every client has reloaded, leaves only the new ones.

CA_NEXT = "ca-next.pem"
CA_NEXT_KEY = "ca-next-key.pem"
CREDENTIALS = "credentials.properties"
# Principals revoked with --revoke, one per line: `--renew all` passes them over and
# `--rotate-ca finish` does not wait for them, so that the rotation ends their
# certificates instead of renewing them (naming one in --renew re-admits it).
REVOKED = "revoked.txt"
# The serial numbers of the certificates --revoke ended, one per line (hex). While
# there is one, ca.pem also holds a CRL of them from each CA in it, and every node
# that reloads ca.pem refuses those certificates (kraft.security.tls); a CA
# rotation carries them over.
REVOKED_SERIALS = "revoked-serials.txt"


class CertsError(ValueError):
    """A certs directory that cannot be rotated as asked, naming the file."""


def _read_certs(path: Path) -> list[Any]:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificates(path.read_bytes())
    except (OSError, ValueError) as e:
        raise CertsError(f"{path}: cannot read PEM certificates: {e}") from None


def _read_key(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise CertsError(f"{path}: cannot read a PEM private key: {e}") from None


def _same_key(a: Any, b: Any) -> bool:
    from cryptography.hazmat.primitives import serialization

    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(a.public_bytes(*fmt) == b.public_bytes(*fmt))


def signing_ca(out: Path) -> tuple[Any, Any]:
    """The CA that issues certificates now: the next CA while a rotation is under way."""
    cert_file, key_file = (out / CA_NEXT, out / CA_NEXT_KEY)
    if not key_file.exists():
        cert_file, key_file = (out / "ca.pem", out / "ca-key.pem")
    key = _read_key(key_file)
    for cert in _read_certs(cert_file):
        if _same_key(cert.public_key(), key.public_key()):
            return cert, key
    raise CertsError(f"{cert_file}: no certificate matches the key in {key_file}")


def principals_in(out: Path) -> list[str]:
    """The principals `kraft certs` wrote into `out` (each has NAME.pem and NAME.properties)."""
    return sorted(
        p.stem
        for p in out.glob("*.properties")
        if p.name != CREDENTIALS and (out / f"{p.stem}.pem").exists()
    )


def _hosts_of(cert: Any) -> list[str]:
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in san.get_values_for_type(x509.IPAddress)] + list(
        san.get_values_for_type(x509.DNSName)
    )


def _credential_lines(out: Path) -> list[str]:
    path = out / CREDENTIALS
    try:
        return path.read_text().splitlines()
    except OSError as e:
        raise CertsError(f"cannot read {path}: {e}") from None


def _principal_of(line: str) -> str | None:
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    return line.partition("=")[0].strip()


def _set_credential(out: Path, principal: str, hashed: str | None, keep_old: bool = False) -> None:
    """Add a hash for `principal` (replacing its others unless `keep_old`), or with
    None remove all of its lines, in credentials.properties."""
    lines = _credential_lines(out)
    if not keep_old:
        lines = [ln for ln in lines if _principal_of(ln) != principal]
    if hashed is not None:
        lines.append(f"{principal}={hashed}")
    _write(out / CREDENTIALS, ("\n".join(lines) + "\n").encode(), private=False)


def drop_old_tokens(out: Path) -> int:
    """Keep only each principal's newest hash (its last line); how many were dropped."""
    out = out.resolve()
    lines = _credential_lines(out)
    last = {_principal_of(ln): i for i, ln in enumerate(lines)}
    kept = [
        ln
        for i, ln in enumerate(lines)
        if _principal_of(ln) is None or last[_principal_of(ln)] == i
    ]
    _write(out / CREDENTIALS, ("\n".join(kept) + "\n").encode(), private=False)
    return len(lines) - len(kept)


def revoked(out: Path) -> list[str]:
    """The principals revoked in `out` and not re-admitted since."""
    try:
        text = (out / REVOKED).read_text()
    except FileNotFoundError:
        return []
    return sorted({ln.strip() for ln in text.splitlines() if ln.strip()})


def _set_revoked(out: Path, names: list[str]) -> None:
    if names:
        _write(out / REVOKED, "".join(f"{n}\n" for n in sorted(names)).encode(), private=False)
    else:
        (out / REVOKED).unlink(missing_ok=True)


def revoked_serials(out: Path) -> list[int]:
    try:
        text = (out / REVOKED_SERIALS).read_text()
    except FileNotFoundError:
        return []
    try:
        return sorted({int(ln, 16) for ln in text.split()})
    except ValueError:
        raise CertsError(f"{out / REVOKED_SERIALS}: not a list of hex serial numbers") from None


def _crl(ca_cert: Any, ca_key: Any, serials: list[int]) -> bytes:
    """The CA's CRL of `serials`, valid as long as the CA (OpenSSL refuses every
    certificate of a CA whose CRL has passed its next update)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    now = _now()
    b = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - datetime.timedelta(minutes=5))
        .next_update(max(ca_cert.not_valid_after_utc, now + datetime.timedelta(days=1)))
    )
    for serial in serials:
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
        )
    return b.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _truststore(out: Path, cas: list[Any], keys: list[Any], serials: list[int]) -> bytes:
    """ca.pem: the CAs, and while a certificate is revoked a CRL from each of
    them (signed with its key among `keys`): OpenSSL checks a certificate against
    its issuer's CRL, and wants one from every issuer once any is there."""
    data = b"".join(_pem(c) for c in cas)
    for ca in cas if serials else ():
        key = next((k for k in keys if _same_key(ca.public_key(), k.public_key())), None)
        if key is None:
            raise CertsError(f"{out / 'ca.pem'}: no key of CA {ca.subject.rfc4514_string()}")
        data += _crl(ca, key, serials)
    return data


def _write_truststore(out: Path, cas: list[Any], keys: list[Any]) -> None:
    _write(out / "ca.pem", _truststore(out, cas, keys, revoked_serials(out)), private=False)


def _ca_keys(out: Path) -> list[Any]:
    keys = [_read_key(out / "ca-key.pem")]
    if (out / CA_NEXT_KEY).exists():
        keys.append(_read_key(out / CA_NEXT_KEY))
    return keys


def renew(out: Path, names: list[str], new_token: bool = False, days: int = 365) -> list[str]:
    """A new key and certificate for each principal (`all`: every one in `out` but the
    revoked ones), signed by the current CA with the same CN and SANs; with
    `new_token`, a new token too (its hash is added beside the old one in
    credentials.properties: both are valid until `drop_old_tokens`). A revoked
    principal named here is re-admitted. Returns the names."""
    out = out.resolve()
    known = principals_in(out)
    gone = revoked(out)
    names = [n for n in known if n not in gone] if names == ["all"] else names
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CertsError(f"{out}: no certificate for {unknown} (known: {known})")
    ca_cert, ca_key = signing_ca(out)
    if any(n in gone for n in names):
        _set_revoked(out, [n for n in gone if n not in names])
    for name in names:
        old = _read_certs(out / f"{name}.pem")[0]
        cert, key = make_node_cert(ca_cert, ca_key, name, _hosts_of(old) or ["localhost"], days)
        _write(out / f"{name}.pem", _pem(cert) + _key_pem(key), private=True)
        if new_token:
            # the new hash joins the old one: a controller that reloads before the
            # client does still accepts the old token (--drop-old-tokens ends that)
            secret = new_secret()
            _set_credential(out, name, hash_secret(secret), keep_old=True)
            _write(out / f"{name}.token", f"{name}:{secret}\n".encode(), private=True)
    return names


def revoke(out: Path, name: str) -> None:
    """Remove a principal's token hash: controllers refuse its token once they reload.
    A name with no hash is refused (a typo would leave the intended token valid)."""
    out = out.resolve()
    known = sorted({q for q in map(_principal_of, _credential_lines(out)) if q is not None})
    if name not in known:
        raise CertsError(
            f"{out / CREDENTIALS} holds no token of {name!r}: nothing revoked "
            f"(its principals: {', '.join(known) or 'none'})"
        )
    cert_file = out / f"{name}.pem"
    if cert_file.exists():
        # everything read and signed before anything is written: a missing CA key
        # leaves the directory as it was
        serials = sorted({*revoked_serials(out), _read_certs(cert_file)[0].serial_number})
        trust = _truststore(out, _read_certs(out / "ca.pem"), _ca_keys(out), serials)
        _write(out / REVOKED_SERIALS, "".join(f"{n:x}\n" for n in serials).encode(), False)
        _write(out / "ca.pem", trust, private=False)
    _set_credential(out, name, None)
    _set_revoked(out, sorted({*revoked(out), name}))


def super_users(out: Path) -> set[str]:
    """The principals the controllers' configs in `out` name in super.users (read
    as the controllers read them: properties, then Kafka's `User:a;User:b`)."""
    names: set[str] = set()
    for path in out.glob("controller-*.properties"):
        props = parse_properties(path.read_text(), str(path))
        names |= parse_super_users(props.get("super.users"))
    return names


def rotate_ca_start(out: Path, days: int = 365) -> None:
    out = out.resolve()
    if (out / CA_NEXT_KEY).exists():
        raise CertsError(f"{out / CA_NEXT_KEY} exists: a CA rotation is already under way")
    old = _read_certs(out / "ca.pem")
    cert, key = make_ca(days)
    _write(out / CA_NEXT_KEY, _key_pem(key), private=True)
    _write(out / CA_NEXT, _pem(cert), private=False)
    _write_truststore(out, [*old, cert], _ca_keys(out))


def rotate_ca_finish(out: Path) -> None:
    out = out.resolve()
    if not (out / CA_NEXT_KEY).exists():
        raise CertsError(f"no {out / CA_NEXT_KEY}: no CA rotation is under way (--rotate-ca start)")
    from cryptography.exceptions import InvalidSignature

    ca_cert, ca_key = signing_ca(out)
    stale = []
    gone = revoked(out)
    for name in principals_in(out):
        if name in gone:
            continue  # the old CA's end is its certificate's end
        cert = _read_certs(out / f"{name}.pem")[0]
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (InvalidSignature, ValueError, TypeError):
            stale.append(name)
    if stale:
        raise CertsError(
            f"still issued by the old CA: {stale}; run --renew all (and let the nodes reload) first"
        )
    _write_truststore(out, [ca_cert], [ca_key])
    _write(out / "ca-key.pem", _key_pem(ca_key), private=True)
    (out / CA_NEXT).unlink()
    (out / CA_NEXT_KEY).unlink()


def register(sub: Any) -> None:
    p = sub.add_parser(
        "certs",
        help="create a local CA, per-node certificates, tokens and configs",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--controllers", type=node_ids, default=[], metavar="ID,...")
    p.add_argument("--brokers", type=node_ids, default=[], metavar="ID,...")
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
    p.add_argument(
        "--days",
        # 0 would write certificates already expired (--renew all: every node down)
        type=whole_number(1, "days"),
        default=365,
        help="validity of the certificates (and CAs) written, in days (default 365)",
    )
    rot = p.add_argument_group(
        "rotation (running nodes reload on SIGHUP or within security.reload.interval.ms)"
    )
    rot.add_argument(
        "--renew",
        action="append",
        metavar="NAME",
        help="a new key and certificate for NAME (repeatable; `all`: every principal) from "
        "the same CA (the new one while --rotate-ca is under way)",
    )
    rot.add_argument(
        "--new-token",
        action="store_true",
        help="with --renew: also a new token (its hash joins the old one in "
        "credentials.properties until --drop-old-tokens)",
    )
    rot.add_argument(
        "--revoke",
        metavar="NAME",
        help="remove NAME's token hash from credentials.properties and revoke its "
        "certificate (a CRL in ca.pem)",
    )
    rot.add_argument(
        "--drop-old-tokens",
        action="store_true",
        help="keep only each principal's newest token hash (after --new-token, once every "
        "client has reloaded)",
    )
    rot.add_argument(
        "--rotate-ca",
        choices=("start", "finish"),
        help="start: a new CA, trusted beside the old one (ca.pem holds both); finish: "
        "once every certificate is renewed, the new CA alone",
    )


def _run_rotation(args: argparse.Namespace) -> int:
    import sys

    out = Path(args.out)
    try:
        if args.rotate_ca == "start":
            rotate_ca_start(out, args.days)
            print(
                f"new CA {out.resolve() / CA_NEXT}; {out.resolve() / 'ca.pem'} trusts old and new"
            )
        if args.renew:
            gone = revoked(out)
            for name in renew(out, args.renew, args.new_token, args.days):
                print(f"  renewed {name}: {out.resolve() / f'{name}.pem'}"
                      + (" and its token" if args.new_token else "")
                      + (" (re-admitted: it was revoked)" if name in gone else ""))  # fmt: skip
            if args.renew == ["all"] and gone:
                print(f"  not renewed, revoked: {', '.join(gone)} (name one to re-admit it)")
        if args.revoke:
            revoke(out, args.revoke)
            print(
                f"revoked {args.revoke}'s token in {out.resolve() / CREDENTIALS} and its "
                f"certificate (a CRL in {out.resolve() / 'ca.pem'}): nodes refuse both once "
                "they reload"
            )
            if args.revoke in super_users(out):
                # the admin routes (topics, elections, voter changes) take only
                # super users: say how to get back in before anyone needs to
                print(
                    f"kraft certs: warning: {args.revoke} is in super.users: the admin "
                    "commands are refused until it has a new token (kraft certs --out "
                    f"{out} --renew {args.revoke} --new-token)",
                    file=sys.stderr,
                )
        if args.rotate_ca == "finish":
            rotate_ca_finish(out)
            print(f"{out.resolve() / 'ca.pem'} now holds only the new CA")
        if args.drop_old_tokens:
            n = drop_old_tokens(out)
            print(f"dropped {n} old token hash(es) from {out.resolve() / CREDENTIALS}")
    except (CertsError, OSError) as e:
        print(f"kraft certs: error: {e}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    import sys

    if args.new_token and not args.renew:
        # alone it used to fall through to generate(): a new CA and no tokens
        print("kraft certs: --new-token goes with --renew", file=sys.stderr)
        return 2
    if args.renew or args.revoke or args.rotate_ca or args.drop_old_tokens:
        if args.controllers or args.brokers or args.admin:
            print("kraft certs: --renew/--revoke/--rotate-ca/--drop-old-tokens work on an existing --out "
                  "directory: give no --controllers/--brokers/--admin", file=sys.stderr)  # fmt: skip
            return 2
        return _run_rotation(args)
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
    except CertsError as e:
        print(f"kraft certs: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kraft certs: error: {e}", file=sys.stderr)
        return 1
    out = Path(args.out).resolve()
    print(f"CA: {out / 'ca.pem'}; credentials (hashes): {out / 'credentials.properties'}")
    for principal, path in written.items():
        print(f"  {principal}: {path}")
    return 0
