"""How a client reaches a secured controller: a TLS context and an Authorization header.

Built from the same keys everywhere (`ssl.truststore.location`,
`ssl.keystore.location`, `authentication.token.file`): a controller's Raft
transport, broker agents, `kraft cluster up`, and the admin tools, which read
them from `--command-config FILE` (Kafka's admin-tool option) or
`$KRAFT_COMMAND_CONFIG`.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from kraft.config import SECURITY_KEYS, Config, ConfigError, load_config
from kraft.security.credentials import CredentialsError, read_token
from kraft.security.tls import TlsConfigError, client_context

COMMAND_CONFIG_ENV = "KRAFT_COMMAND_CONFIG"


@dataclass(frozen=True)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    token: str | None = None  # principal:secret
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.ssl_context is not None or self.token is not None

    @property
    def ssl(self) -> ssl.SSLContext | bool:
        """aiohttp's `ssl=` argument: the context, or the default (True) for plain http."""
        return self.ssl_context if self.ssl_context is not None else True

    def principal(self) -> str | None:
        return self.token.partition(":")[0] if self.token else None


NONE = ClientSecurity()


def client_security(
    truststore: str | None, keystore: str | None, token_file: str | None
) -> ClientSecurity:
    """Raises ConfigError naming the unusable file."""
    try:
        ctx = client_context(truststore, keystore) if (truststore or keystore) else None
        token = read_token(token_file) if token_file else None
    except (TlsConfigError, CredentialsError) as e:
        raise ConfigError(str(e)) from None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return ClientSecurity(ctx, token, headers)


def from_config(config: Config | None) -> ClientSecurity:
    if config is None:
        return NONE
    return client_security(
        config.get("ssl.truststore.location"),
        config.get("ssl.keystore.location"),
        config.get("authentication.token.file"),
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
