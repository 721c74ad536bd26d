"""The controller listener's side of security: TLS, authentication middleware, and
the checks the routes call (which only read the request's verified principal).

Authentication (when `authorizer.enable=true`): an `Authorization` header
(`Bearer principal:secret` or Basic) is checked against the credentials file; with
no header, a verified client certificate names the principal (its CN). Neither:
401 UNAUTHORIZED. Authorization then happens in the routes, where the body's ids
are known: 403 UNAUTHORIZED with the reason (kraft.security.authz). With the
authorizer off (the default) nothing here runs: every request is served as before.

The material is reloadable (kraft.security.reload, issue 25): `ServerSecurity`
re-reads its files and swaps the listener's TLS context, the token verifier and
its own client credential; the authenticator reads the verifier at each request,
so a revoked token is refused from the reload on, even on an open connection.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
import weakref
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kraft.config import Config, ConfigError, value_of
from kraft.controller.errors import ApiError
from kraft.security.authz import Authorizer, parse_super_users
from kraft.security.client_security import NONE, ClientSecurity, from_config
from kraft.security.credentials import (
    CredentialsError,
    TokenVerifier,
    VerificationThrottled,
    load_credentials,
)
from kraft.security.reload import ReloadableContext
from kraft.security.tls import TlsConfigError, principal_from_peercert, server_context

log = logging.getLogger("kraft.security")

# The verified principal of a request (a typed key where aiohttp has them).
PRINCIPAL: Any = (
    web.RequestKey("kraft.principal", str) if hasattr(web, "RequestKey") else "kraft.principal"
)
# Reachable without a credential: liveness and the API description.
OPEN_PATHS = frozenset({"/healthz", "/v1/openapi.json"})


@dataclass
class ServerSecurity:
    ssl_context: ssl.SSLContext | None = None
    authorizer: Authorizer | None = None  # None: no authentication, no authorization
    verifier: TokenVerifier | None = None
    client: ClientSecurity = NONE  # for this node's own calls (Raft peers, bootstrap)
    config: Config | None = None  # where the files are named (for reloads)

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    @classmethod
    def from_config(cls, config: Config | None) -> ServerSecurity:
        if config is None:
            return cls()
        keystore = config.get("ssl.keystore.location")
        truststore = config.get("ssl.truststore.location")
        client_auth = value_of(config, "ssl.client.auth")
        try:
            ctx = server_context(keystore, truststore, client_auth) if keystore else None
            ctx = ReloadableContext(ctx) if ctx is not None else None
        except TlsConfigError as e:
            raise ConfigError(str(e)) from None
        if ctx is None and client_auth != "none":
            raise ConfigError(f"ssl.client.auth={client_auth} needs ssl.keystore.location")
        authorizer = verifier = None
        if value_of(config, "authorizer.enable"):
            creds_file = config.get("authentication.credentials.file")
            if creds_file:
                try:
                    verifier = TokenVerifier(
                        load_credentials(creds_file),
                        max_rate=config.get("authentication.max.verification.rate"),
                    )
                except CredentialsError as e:
                    raise ConfigError(str(e)) from None
            if verifier is None and (ctx is None or client_auth == "none"):
                raise ConfigError(
                    "authorizer.enable=true needs a way to authenticate: "
                    "authentication.credentials.file, or ssl.client.auth=required|requested"
                )
            authorizer = Authorizer(parse_super_users(value_of(config, "super.users")))
            if ctx is None:
                log.warning(
                    "tokens are accepted over plaintext HTTP: set ssl.keystore.location",
                    extra={"event": "plaintext_credentials"},
                )
        return cls(ctx, authorizer, verifier, from_config(config), config)

    @property
    def reload_interval_ms(self) -> int:
        return self.client.reload_interval_ms

    # ---- kraft.security.reload.Reloadable
    def files(self) -> tuple[str, ...]:
        c = self.config
        if c is None:
            return ()
        keys = ("ssl.keystore.location", "ssl.truststore.location")
        keys += ("authentication.credentials.file",) if self.authorizer is not None else ()
        keys += ("authentication.token.file",)
        return tuple(dict.fromkeys(c.get(k) for k in keys if c.get(k)))

    def load(self) -> ServerSecurity:
        return ServerSecurity.from_config(self.config)

    def apply(self, new: ServerSecurity) -> None:
        if isinstance(self.ssl_context, ReloadableContext) and new.ssl_context is not None:
            self.ssl_context.swap(new.ssl_context)
        if self.authorizer is not None:
            self.verifier = new.verifier  # a new cache: revoked tokens are forgotten
        self.client.apply(new.client)


SECURITY = web.AppKey("kraft.security", ServerSecurity)


class _PeerPrincipals:
    """Transport -> principal of its verified client certificate, computed once per
    connection (the heartbeat hot path is a dict lookup)."""

    def __init__(self) -> None:
        self._by_transport: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    def of(self, transport: Any) -> str | None:
        if transport is None:
            return None
        try:
            return self._by_transport[transport]
        except KeyError:
            pass
        except TypeError:  # not weak-referenceable: no caching
            return principal_from_peercert(transport.get_extra_info("peercert"))
        p = principal_from_peercert(transport.get_extra_info("peercert"))
        self._by_transport[transport] = p
        return p


def unauthenticated(message: str) -> ApiError:
    return ApiError("UNAUTHORIZED", message, http_status=401)


class Authenticator:
    """The principal of a request: its Authorization header, else its connection's
    verified client certificate; UNAUTHORIZED (401) when neither names one. Used by
    the middleware and by the heartbeat front (kraft.server.heartbeat_front)."""

    def __init__(self, sec: ServerSecurity) -> None:
        self._sec = sec
        self._peers = _PeerPrincipals()

    def principal(self, authorization: str | None, transport: Any) -> str:
        verifier = self._sec.verifier  # read each time: a reload replaces it
        if authorization is not None:
            try:
                principal = (
                    verifier.verify(authorization, time.monotonic())
                    if verifier is not None
                    else None
                )
            except VerificationThrottled as e:  # retriable: not the client's fault
                raise ApiError("THROTTLING_QUOTA_EXCEEDED", str(e), http_status=429) from None
            if principal is None:
                raise unauthenticated(
                    "invalid credential in the Authorization header"
                    if verifier is not None
                    else "this listener does not accept tokens: use a client certificate"
                )
            return principal
        principal = self._peers.of(transport)
        if principal is None:
            raise unauthenticated(
                "no credential: send Authorization: Bearer principal:secret or a "
                "client certificate signed by the cluster's CA"
            )
        return principal


def console_challenge(e: ApiError) -> web.HTTPUnauthorized:
    """The web console's 401 (kraft.console): the same refusal, plus a Basic challenge
    so that a browser asks for the principal and secret (Basic's user and password)
    and then sends them with the page's every request."""
    return web.HTTPUnauthorized(
        headers={"WWW-Authenticate": 'Basic realm="kraft console", charset="UTF-8"'},
        text=json.dumps(e.to_body()),
        content_type="application/json",
    )


def security_middleware(sec: ServerSecurity) -> Any:
    # here, not at the top: kraft.server.routes imports this module
    from kraft.server.http_codec import error_reply
    from kraft.server.routes import HEARTBEAT_PATH

    authenticator = Authenticator(sec)

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        try:
            request[PRINCIPAL] = authenticator.principal(
                request.headers.get("Authorization"), request.transport
            )
        except ApiError as e:
            if e.code == "UNAUTHORIZED" and (
                request.path == "/ui" or request.path.startswith("/ui/")
            ):
                # a 429 stays a 429 (retriable): a challenge would ask for the password again
                raise console_challenge(e) from None
            if request.path == HEARTBEAT_PATH:
                # as the heartbeat front does: a forger must reconnect for each try
                resp = error_reply(request, e)
                resp.force_close()
                return resp
            raise
        return await handler(request)

    return authenticate


class _RefusalLog:
    """At most `per_second` refusal lines a second (a flood of forged requests must not
    flood the log); the next line says how many were left out."""

    def __init__(self, per_second: int = 10) -> None:
        self.per_second = per_second
        self._second = 0
        self._count = 0
        self._dropped = 0

    def refused(self, path: str, principal: str | None, reason: str) -> None:
        now = int(time.monotonic())
        if now != self._second:
            self._second, self._count = now, 0
        self._count += 1
        if self._count > self.per_second:
            self._dropped += 1
            return
        dropped, self._dropped = self._dropped, 0
        log.warning(
            "request refused: %s",
            reason,
            extra={
                "event": "unauthorized",
                "path": path,
                "principal": principal,
                "not_logged_before": dropped,
            },
        )


_refusals = _RefusalLog()


def check(path: str, principal: str | None, reason: str | None) -> None:
    """An authorizer's refusal (a reason) -> logged (bounded) and 403 UNAUTHORIZED."""
    if reason is not None:
        _refusals.refused(path, principal, reason)
        raise ApiError("UNAUTHORIZED", reason)


def _check(request: web.Request, reason: str | None) -> None:
    check(request.path, request.get(PRINCIPAL), reason)


def _authorizer(request: web.Request) -> Authorizer | None:
    sec = request.app.get(SECURITY)
    return None if sec is None else sec.authorizer


def authorize_broker(request: web.Request, broker_id: int) -> None:
    """CLUSTER_ACTION bound to the broker id (register, heartbeat, AlterPartition)."""
    a = _authorizer(request)
    if a is not None:
        _check(request, a.broker_action(request[PRINCIPAL], broker_id))


def authorize_admin(request: web.Request, operation: str) -> None:
    a = _authorizer(request)
    if a is not None:
        _check(request, a.admin(request[PRINCIPAL], operation))


def authorize_raft(request: web.Request, msg: Any, voters: frozenset[int]) -> None:
    """Quorum RPCs only from the current voter they name; fetches only as oneself."""
    a = _authorizer(request)
    if a is None:
        return
    from kraft.raft.messages import FetchRequest, FetchSnapshotRequest

    principal = request[PRINCIPAL]
    rpc = type(msg).__name__
    if isinstance(msg, FetchRequest | FetchSnapshotRequest):
        reason = a.fetch(principal, msg.replica_id, msg.replica_is_voter, rpc)
    else:
        sender = getattr(msg, "candidate_id", None)
        if sender is None:
            sender = msg.leader_id
        reason = a.quorum_rpc(principal, sender, voters, rpc)
    _check(request, reason)
