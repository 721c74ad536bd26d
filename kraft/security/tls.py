"""TLS contexts for the controller listener and for every client of it.

A node's keystore is one PEM file holding its certificate chain and private key
(Kafka's `ssl.keystore.type=PEM`); the truststore is the CA's PEM certificate
(and, once a certificate is revoked, the CA's CRL).
The same keystore serves a controller as a server (its listener) and as a client
(Raft RPCs to its peers, where mTLS names it). `ssl.client.auth` is Kafka's:
`required` (no certificate, no connection), `requested` (a certificate is
verified when given) or `none`.
"""

from __future__ import annotations

import ssl
from typing import Any

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    """A keystore or truststore that cannot be loaded, naming the file."""


def _load_chain(ctx: ssl.SSLContext, keystore: str) -> None:
    try:
        ctx.load_cert_chain(keystore)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(
            f"ssl.keystore.location {keystore}: cannot load a certificate and key: {e}"
        ) from None


def _load_ca(ctx: ssl.SSLContext, truststore: str) -> None:
    try:
        ctx.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(
            f"ssl.truststore.location {truststore}: cannot load CA certificates: {e}"
        ) from None
    _check_crls(ctx)


def _check_crls(ctx: ssl.SSLContext) -> None:
    """A truststore with CRLs in it (`kraft certs --revoke`) turns on the check of
    each peer certificate against its issuer's CRL: a revoked certificate is
    refused at the handshake. Without one, nothing is checked (OpenSSL would refuse
    every certificate whose issuer has no CRL)."""
    if ctx.cert_store_stats().get("crl", 0):
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


def server_context(keystore: str, truststore: str | None, client_auth: str) -> ssl.SSLContext:
    """The listener's context: TLS 1.2+, client certificates per `client_auth`."""
    if client_auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth must be one of {sorted(CLIENT_AUTH)}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # No TLS 1.3 session tickets: every client of ours (asyncio, aiohttp, http.client)
    # makes a new SSL object per connection and never offers a ticket back, and
    # issuing the two default tickets (each holding the client's certificate) was
    # ~30% of an mTLS handshake's server CPU (0.99 -> 0.68 ms, issue 25).
    ctx.num_tickets = 0
    _load_chain(ctx, keystore)
    if client_auth != "none":
        if not truststore:
            raise TlsConfigError(
                f"ssl.client.auth={client_auth} needs ssl.truststore.location (the CA "
                "that signs client certificates)"
            )
        _load_ca(ctx, truststore)
    ctx.verify_mode = CLIENT_AUTH[client_auth]
    return ctx


def client_context(truststore: str | None, keystore: str | None = None) -> ssl.SSLContext:
    """A client's context: the server is verified against the truststore (the system
    CAs without one); the keystore, when given, is presented for mTLS."""
    if truststore:
        # The truststore alone, as a Kafka client trusts ssl.truststore.location alone:
        # the system's CAs are not loaded beside it (they made each context ~0.8 MiB,
        # 8 GiB for a fleet of 10,000 brokers each presenting its own certificate).
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=truststore)
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError(
                f"ssl.truststore.location {truststore}: cannot load CA certificates: {e}"
            ) from None
        _check_crls(ctx)
    else:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if keystore:
        _load_chain(ctx, keystore)
    return ctx


def principal_from_peercert(cert: dict[str, Any] | None) -> str | None:
    """The principal a verified peer certificate names: its subject CN (as Kafka's
    default principal builder with a `RULE:^CN=(.*?),.*$/$1/` mapping)."""
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None
