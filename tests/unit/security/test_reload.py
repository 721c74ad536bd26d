"""Credentials rotated without a restart (issue 25 item 2), on an in-process controller.

New connections get the reloaded certificate while an open one goes on with its
own; a revoked token is refused from the reload on; a bad keystore, a key that does
not match its certificate, or a bad credentials file keeps the old material and
logs one error naming the file; a changed file is found by the poll's check; a CA
is rotated (old+new trust bundle, every certificate renewed, new CA alone) with a
client connected through every step.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import aiohttp
import pytest

from kraft.security.certs import (
    drop_old_tokens,
    generate,
    renew,
    revoke,
    rotate_ca_finish,
    rotate_ca_start,
)
from kraft.security.client_security import client_security
from kraft.security.reload import ReloadableContext, Reloader
from tests.unit.security.harness import call, ctx, start_single, token

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def certs(tmp_path) -> Path:
    out = tmp_path / "certs"
    generate(out, [1], [4, 5], admin=True)
    return out


@pytest.fixture
async def node(certs, tmp_path):
    n = await start_single(tmp_path / "c1", config_file=certs / "controller-1.properties")
    yield n
    await n.stop(1.0)


def _der(certs: Path, name: str) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificates((certs / f"{name}.pem").read_bytes())[0].public_bytes(
        Encoding.DER
    )


class _Conn:
    """One kept-alive TLS connection speaking HTTP/1.1 by hand."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str, context: ssl.SSLContext) -> _Conn:
        host, port = url.removeprefix("https://").rsplit(":", 1)
        r, w = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context, server_hostname=host), 5
        )
        return cls(r, w)

    def server_cert(self) -> bytes:
        return self.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)

    async def status(self, path: str, auth: str | None = None) -> int:
        head = f"GET {path} HTTP/1.1\r\nHost: x\r\n" + (
            f"Authorization: {auth}\r\n" if auth else ""
        )
        self.writer.write((head + "\r\n").encode())
        line = await asyncio.wait_for(self.reader.readline(), 5)
        length = 0
        while (h := await asyncio.wait_for(self.reader.readline(), 5)) not in (b"\r\n", b""):
            name, _, value = h.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        await asyncio.wait_for(self.reader.readexactly(length), 5)
        return int(line.split()[1])

    def close(self) -> None:
        self.writer.close()


async def test_a_renewed_certificate_serves_new_connections_while_open_ones_go_on(
    node, certs
) -> None:
    old = await _Conn.open(node.url, ctx(certs))
    assert old.server_cert() == _der(certs, "controller-1")
    before = _der(certs, "controller-1")
    renew(certs, ["controller-1"])
    assert node.security_reloader.reload() == 0
    new = await _Conn.open(node.url, ctx(certs))
    assert new.server_cert() == _der(certs, "controller-1") != before
    auth = token(certs, "broker-4")["Authorization"]
    assert await old.status("/v1/quorum", auth) == 200  # the open connection goes on
    assert old.server_cert() == before
    assert await new.status("/v1/quorum", auth) == 200
    old.close()
    new.close()


async def test_a_revoked_token_is_refused_after_the_reload_even_on_an_open_connection(
    node, certs
) -> None:
    conn = await _Conn.open(node.url, ctx(certs))
    auth = token(certs, "broker-4")["Authorization"]
    assert await conn.status("/v1/quorum", auth) == 200  # verified and cached
    revoke(certs, "broker-4")
    assert await conn.status("/v1/quorum", auth) == 200  # not yet reloaded
    assert node.security_reloader.check() == 1  # the poll sees the changed file
    assert await conn.status("/v1/quorum", auth) == 401
    fresh = await _Conn.open(node.url, ctx(certs))
    assert await fresh.status("/v1/quorum", auth) == 401
    assert await fresh.status("/v1/quorum", token(certs, "broker-5")["Authorization"]) == 200
    conn.close()
    fresh.close()


async def test_a_revoked_certificate_is_refused_at_the_handshake_after_the_reload(
    node, certs
) -> None:
    """--revoke also puts the certificate's serial in a CRL in ca.pem: before, the
    certificate authenticated its principal until a CA rotation ended it."""
    anonymous = await _Conn.open(node.url, ctx(certs))
    assert await anonymous.status("/v1/quorum") == 401
    anonymous.close()
    before = await _Conn.open(node.url, ctx(certs, "broker-4"))
    assert await before.status("/v1/quorum") == 200  # its certificate names it
    revoke(certs, "broker-4")
    assert "X509 CRL" in (certs / "ca.pem").read_text()
    assert node.security_reloader.check() >= 1
    # TLS 1.3: the client's side of the handshake may finish before the server's
    # refusal arrives, so the refusal shows at the open or at the first read
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError, IndexError)):
        conn = await _Conn.open(node.url, ctx(certs, "broker-4"))
        try:
            await conn.status("/v1/quorum")
        finally:
            conn.close()
    other = await _Conn.open(node.url, ctx(certs, "broker-5"))
    assert await other.status("/v1/quorum") == 200  # the CA's other certificates serve
    other.close()
    # one made before the reload goes on with what it negotiated (as Kafka's)
    assert await before.status("/v1/quorum") == 200
    before.close()
    # re-admitted: a new certificate (a new serial); the old one stays revoked
    renew(certs, ["broker-4"])  # a client's file: the controller has nothing to reload
    again = await _Conn.open(node.url, ctx(certs, "broker-4"))
    assert await again.status("/v1/quorum") == 200
    again.close()


@pytest.mark.parametrize("damage", ["garbage keystore", "key of another certificate", "bad hash"])
async def test_a_bad_file_on_reload_keeps_the_old_material_and_logs_an_error_naming_it(
    node, certs, caplog, damage
) -> None:
    before = _der(certs, "controller-1")
    if damage == "garbage keystore":
        bad = certs / "controller-1.pem"
        bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    elif damage == "key of another certificate":
        bad = certs / "controller-1.pem"
        cert = bad.read_text().split("-----BEGIN PRIVATE KEY-----")[0]
        key = (
            "-----BEGIN PRIVATE KEY-----"
            + (certs / "broker-5.pem").read_text().split("-----BEGIN PRIVATE KEY-----")[1]
        )
        bad.write_text(cert + key)
    else:
        bad = certs / "credentials.properties"
        bad.write_text(bad.read_text() + "broker-9=pbkdf2-sha256$nope\n")
    with caplog.at_level(logging.INFO, logger="kraft.security"):
        assert node.security_reloader.check() == 1
        assert node.security_reloader.check() == 0  # reported once, not at every poll
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(bad) in errors[0].getMessage()
    assert not [r for r in caplog.records if getattr(r, "event", "") == "security_reloaded"]
    conn = await _Conn.open(node.url, ctx(certs))
    assert conn.server_cert() == before  # the old certificate still serves
    assert await conn.status("/v1/quorum", token(certs, "broker-4")["Authorization"]) == 200
    conn.close()


async def test_a_client_sends_its_new_token_and_certificate_after_a_reload(node, certs) -> None:
    sec = client_security(
        str(certs / "ca.pem"), str(certs / "broker-4.pem"), str(certs / "broker-4.token")
    )
    headers = sec.headers_with({"Accept": "application/json"})
    old_headers = dict(headers)
    assert isinstance(sec.ssl_context, ReloadableContext)
    renew(certs, ["broker-4"], new_token=True)
    node.security_reloader.reload()
    url = node.url + "/v1/quorum"
    async with aiohttp.ClientSession() as s:
        # both hashes are valid until the old are dropped: a client that has not
        # reloaded yet is not refused in between
        assert (await call(s, "GET", url, headers=headers, ssl_ctx=sec.ssl))[0] == 200
        reloader = Reloader([sec, sec], 1000, who="broker-4")
        assert len(reloader.holders) == 1 and reloader.reload() == 0
        assert headers["Authorization"] == token(certs, "broker-4")["Authorization"]
        assert headers["Authorization"] != old_headers["Authorization"]
        assert (await call(s, "GET", url, headers=headers, ssl_ctx=sec.ssl))[0] == 200
        assert drop_old_tokens(certs) == 1
        node.security_reloader.reload()
        assert (await call(s, "GET", url, headers=old_headers, ssl_ctx=sec.ssl))[0] == 401
        assert (await call(s, "GET", url, headers=headers, ssl_ctx=sec.ssl))[0] == 200
    # the reloaded context presents the renewed certificate (mTLS names broker-4)
    conn = await _Conn.open(node.url, sec.ssl_context)
    assert await conn.status("/v1/quorum") == 200
    ssl_obj = conn.writer.get_extra_info("ssl_object")
    assert ssl_obj.context is sec.ssl_context.current
    conn.close()


@pytest.mark.parametrize("revoked", [False, True], ids=["plain", "with-a-revoked-certificate"])
async def test_the_ca_is_rotated_with_a_client_connected_through_every_step(
    node, certs, revoked: bool
) -> None:
    """The README's recipe in small: trust both, renew all, trust the new CA alone.
    With a certificate revoked first, ca.pem holds a CRL from each of its CAs at
    every step (with one CA's missing, OpenSSL refuses all of that CA's)."""
    if revoked:
        revoke(certs, "broker-5")
        assert node.security_reloader.reload() == 0
    sec = client_security(str(certs / "ca.pem"), str(certs / "broker-4.pem"), None)
    client = Reloader([sec], 0, who="broker-4")
    server = node.security_reloader

    async def mtls_ok() -> None:
        conn = await _Conn.open(node.url, sec.ssl_context)
        assert await conn.status("/v1/quorum") == 200  # mTLS: the certificate names broker-4
        conn.close()

    old_client_ctx = ctx(certs, "broker-4")  # a client that never reloads
    rotate_ca_start(certs)
    assert server.reload() == 0 and client.reload() == 0
    assert (certs / "ca.pem").read_text().count("BEGIN X509 CRL") == (2 if revoked else 0)
    await mtls_ok()
    renew(certs, ["all"])
    assert server.reload() == 0
    await mtls_ok()  # old client certificate, new server certificate: both trusted
    assert client.reload() == 0
    await mtls_ok()
    rotate_ca_finish(certs)
    assert server.reload() == 0 and client.reload() == 0
    assert (certs / "ca.pem").read_text().count("BEGIN X509 CRL") == (1 if revoked else 0)
    await mtls_ok()
    # the old CA is no longer trusted: a client still holding its old context fails
    with pytest.raises(ssl.SSLCertVerificationError):
        await _Conn.open(node.url, old_client_ctx)
