"""Per-node secrets: tokens `principal:secret`, stored by the controller only as salted hashes.

A credentials file holds one `principal=pbkdf2-sha256$ITERATIONS$SALT$HASH` line
per principal (SALT and HASH base64), never the secret itself, as Kafka's SCRAM
credentials. A client presents `Authorization: Bearer principal:secret` (or HTTP
Basic with the same pair). Checking a secret costs one PBKDF2 (4096 iterations,
SCRAM-SHA-256's minimum), so a verified token is remembered (a bounded map from
the header value to its principal) and the heartbeat hot path is a dict lookup.
Hashes compare with hmac.compare_digest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

SCHEME = "pbkdf2-sha256"
ITERATIONS = 4096


class CredentialsError(ValueError):
    """A credentials or token file that cannot be used, naming the file and line."""


def new_secret() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


def _derive(secret: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations)


def hash_secret(secret: str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    salt = salt if salt is not None else os.urandom(16)
    digest = _derive(secret, salt, iterations)
    b64 = base64.b64encode
    return f"{SCHEME}${iterations}${b64(salt).decode()}${b64(digest).decode()}"


@dataclass(frozen=True, slots=True)
class StoredCredential:
    iterations: int
    salt: bytes
    digest: bytes

    @classmethod
    def parse(cls, text: str, where: str) -> StoredCredential:
        parts = text.strip().split("$")
        if len(parts) != 4 or parts[0] != SCHEME:
            raise CredentialsError(f"{where}: expected {SCHEME}$ITERATIONS$SALT$HASH")
        try:
            iterations = int(parts[1])
            salt = base64.b64decode(parts[2], validate=True)
            digest = base64.b64decode(parts[3], validate=True)
        except (ValueError, binascii.Error):
            raise CredentialsError(f"{where}: bad iterations, salt or hash") from None
        if iterations < 1000 or len(salt) < 8 or len(digest) != 32:
            raise CredentialsError(f"{where}: too few iterations or a short salt/hash")
        return cls(iterations, salt, digest)

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(_derive(secret, self.salt, self.iterations), self.digest)


def load_credentials(path: str | Path) -> dict[str, tuple[StoredCredential, ...]]:
    """`principal=hash` lines (`#` comments); a plaintext secret is refused. A principal
    may have several lines: each is a valid secret (a token rotation keeps the old hash
    beside the new one until every client has reloaded, `kraft certs --drop-old-tokens`)."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CredentialsError(f"cannot read credentials file {p}: {e}") from None
    out: dict[str, tuple[StoredCredential, ...]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        principal, sep, value = line.partition("=")
        principal = principal.strip()
        if not sep or not principal:
            raise CredentialsError(f"{p}:{lineno}: expected principal=hash")
        out[principal] = (*out.get(principal, ()), StoredCredential.parse(value, f"{p}:{lineno}"))
    return out


def read_token(path: str | Path) -> str:
    """A token file: one line `principal:secret`."""
    p = Path(path)
    try:
        token = p.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CredentialsError(f"cannot read token file {p}: {e}") from None
    principal, sep, secret = token.partition(":")
    if not sep or not principal or not secret:
        raise CredentialsError(f"token file {p} must hold one line principal:secret")
    return token


def split_authorization(header: str) -> tuple[str, str] | None:
    """(principal, secret) from `Bearer principal:secret` or `Basic base64(...)`."""
    scheme, _, value = header.strip().partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == "basic":
        try:
            value = base64.b64decode(value, validate=True).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
    elif scheme != "bearer":
        return None
    principal, sep, secret = value.partition(":")
    if not sep or not principal or not secret:
        return None
    try:
        # header bytes that are not UTF-8 arrive as surrogates (aiohttp decodes with
        # surrogateescape): no stored secret is such a string, and hashing it raised
        value.encode()
    except UnicodeEncodeError:
        return None
    return principal, secret


class VerificationThrottled(Exception):
    """More unverified tokens than `authentication.max.verification.rate` allows."""


class TokenVerifier:
    """Header value -> principal, remembering verified tokens (bounded LRU).

    A token not seen before costs one PBKDF2 (~1.5 ms of the event loop). Forged
    tokens for a known principal would make every attempt cost that (issue 25, hostile
    clients): given `now_s`, at most `max_rate` such checks a second are made (a token
    bucket of one second's worth); beyond it `verify` raises VerificationThrottled
    without hashing. Cached tokens (every running broker's) never wait for the budget.
    """

    def __init__(
        self,
        credentials: dict[str, tuple[StoredCredential, ...]],
        cache_size: int | None = None,
        max_rate: float | None = None,
    ) -> None:
        self.credentials = credentials
        self.max_rate = max_rate
        self._tokens = max_rate or 0.0
        self._refilled_s: float | None = None
        self.throttled = 0
        # Room for every principal's token in both header forms (Bearer, Basic) with
        # room to spare: a cache smaller than the fleet (10,000 brokers, issue 25) is
        # cycled through by the heartbeats and every heartbeat pays a PBKDF2. Only
        # verified tokens enter, so the credentials file bounds what an attacker can add.
        stored = sum(len(v) for v in credentials.values())
        self.cache_size = cache_size if cache_size is not None else max(4096, 4 * stored)
        self._verified: OrderedDict[str, str] = OrderedDict()

    def _spend(self, now_s: float | None) -> None:
        rate = self.max_rate
        if rate is None or now_s is None:
            return
        if self._refilled_s is not None:
            self._tokens = min(rate, self._tokens + (now_s - self._refilled_s) * rate)
        self._refilled_s = now_s
        if self._tokens < 1.0:
            self.throttled += 1
            raise VerificationThrottled(
                f"more than {rate:g} new tokens a second to verify "
                "(authentication.max.verification.rate): retry later"
            )
        self._tokens -= 1.0

    def verify(self, header: str, now_s: float | None = None) -> str | None:
        """The principal, or None for an invalid credential; `now_s` (monotonic
        seconds) turns the verification budget on."""
        hit = self._verified.get(header)
        if hit is not None:
            return hit
        pair = split_authorization(header)
        if pair is None:
            return None
        principal, secret = pair
        stored = self.credentials.get(principal, ())
        if not stored:
            return None  # no hash to compute: nothing to budget
        self._spend(now_s)
        if not any(c.matches(secret) for c in stored):
            return None
        self._verified[header] = principal
        if len(self._verified) > self.cache_size:
            self._verified.popitem(last=False)
        return principal
