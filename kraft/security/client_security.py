"""How a client reaches a secured controller: a TLS context and an Authorization header.

Built from the same keys everywhere (`ssl.truststore.location`,
`ssl.keystore.location`, `authentication.token.file`): a controller's Raft
transport, broker agents, `kraft cluster up`, and the admin tools, which read
them from `--command-config FILE` (Kafka's admin-tool option) or
`$KRAFT_COMMAND_CONFIG`.

The material is reloadable (kraft.security.reload): the TLS context is a
`ReloadableContext`, and `headers` (with every dict made by `headers_with`) is
updated in place when the token file is re-read, so a long-lived client (a broker
agent, a Raft transport) sends the new token without being rebuilt.
"""

from __future__ import annotations

import os
import ssl
import weakref
from dataclasses import dataclass, field
from typing import Any

from kraft.config import KEYS, SECURITY_KEYS, Config, ConfigError, load_config
from kraft.security.credentials import CredentialsError, read_token
from kraft.security.reload import ReloadableContext
from kraft.security.tls import TlsConfigError, client_context

COMMAND_CONFIG_ENV = "KRAFT_COMMAND_CONFIG"
AUTHORIZATION = "Authorization"


class _Headers(dict[str, str]):
    """A dict that can be weakly referenced (the derived header dicts)."""

    __hash__ = object.__hash__  # by identity, for the WeakSet


@dataclass(frozen=True, eq=False)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    token: str | None = None  # principal:secret, as first loaded (headers carry the current)
    headers: dict[str, str] = field(default_factory=dict)
    truststore: str | None = None
    keystore: str | None = None
    token_file: str | None = None
    reload_interval_ms: int = KEYS["security.reload.interval.ms"].default
    _derived: weakref.WeakSet[_Headers] = field(default_factory=weakref.WeakSet, repr=False)

    @property
    def enabled(self) -> bool:
        return self.ssl_context is not None or self.token is not None

    @property
    def current_token(self) -> str | None:
        auth = self.headers.get(AUTHORIZATION)
        return auth.partition(" ")[2] if auth else None

    def headers_with(self, base: dict[str, str]) -> dict[str, str]:
        """`base` plus this credential, kept current across token reloads (for a
        client that builds its headers once)."""
        out = _Headers({**base, **self.headers})
        if self.token_file:  # without a token file there is no token to rotate
            self._derived.add(out)
        return out

    # ---- kraft.security.reload.Reloadable
    def files(self) -> tuple[str, ...]:
        return tuple(p for p in (self.truststore, self.keystore, self.token_file) if p)

    def load(self) -> ClientSecurity:
        return client_security(self.truststore, self.keystore, self.token_file)

    def apply(self, new: ClientSecurity) -> None:
        if isinstance(self.ssl_context, ReloadableContext) and new.ssl_context is not None:
            self.ssl_context.swap(new.ssl_context)
        if AUTHORIZATION in new.headers:
            for d in (self.headers, *self._derived):
                d[AUTHORIZATION] = new.headers[AUTHORIZATION]

    @property
    def ssl(self) -> ssl.SSLContext | bool:
        """aiohttp's `ssl=` argument: the context, or the default (True) for plain http."""
        return self.ssl_context if self.ssl_context is not None else True

    def principal(self) -> str | None:
        return self.token.partition(":")[0] if self.token else None


NONE = ClientSecurity()


def client_security(
    truststore: str | None,
    keystore: str | None,
    token_file: str | None,
    reload_interval_ms: int | None = None,
) -> ClientSecurity:
    """Raises ConfigError naming the unusable file."""
    try:
        ctx = client_context(truststore, keystore) if (truststore or keystore) else None
        token = read_token(token_file) if token_file else None
    except (TlsConfigError, CredentialsError) as e:
        raise ConfigError(str(e)) from None
    headers = {AUTHORIZATION: f"Bearer {token}"} if token else {}
    return ClientSecurity(
        ReloadableContext(ctx) if ctx is not None else None,
        token,
        headers,
        truststore,
        keystore,
        token_file,
        *(() if reload_interval_ms is None else (reload_interval_ms,)),
    )


def from_config(config: Config | None) -> ClientSecurity:
    if config is None:
        return NONE
    return client_security(
        config.get("ssl.truststore.location"),
        config.get("ssl.keystore.location"),
        config.get("authentication.token.file"),
        config.get("security.reload.interval.ms"),
    )


def from_command_config(path: str | None) -> ClientSecurity:
    """The admin tools' `--command-config FILE` (default: $KRAFT_COMMAND_CONFIG)."""
    path = path or os.environ.get(COMMAND_CONFIG_ENV) or None
    if path is None:
        return NONE
    return from_config(load_config(SECURITY_KEYS, path))


def urllib_kwargs(sec: ClientSecurity) -> dict[str, Any]:
    """For urllib.request.urlopen: the TLS context (headers go on the Request)."""
    return {"context": sec.ssl_context} if sec.ssl_context is not None else {}
