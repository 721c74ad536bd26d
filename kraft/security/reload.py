"""Credentials rotated without a restart (issue 25): keystores, truststores, the
credentials file and token files are re-read on SIGHUP or when they change.

Kafka reloads a listener's keystore and truststore in place (KIP-226's dynamic
`ssl.keystore.location`): new connections use the new material, established ones
go on with what they negotiated. Here:

- `ReloadableContext` is the one `ssl.SSLContext` a listener or a client is given;
  every new connection is wrapped by its `current` inner context, which a reload
  replaces in one assignment. asyncio (`SSLProtocol`) and http.client make each
  connection's SSL object through `wrap_bio` / `wrap_socket`, so nothing that holds
  the context needs to know about rotation, and an established connection keeps
  the SSL object (and the certificates) it was made with.
- A reload builds all of a holder's new material first (every file parsed, each
  key checked against its certificate by OpenSSL) and swaps only when all of it
  loaded: a bad file keeps the old material and logs one error naming the file.
- `Reloader` is the shell: `reload()` for SIGHUP, and a task that polls the files'
  stamps (mtime, size, inode) every `security.reload.interval.ms` and reloads a
  holder whose files changed. A stamp is remembered even when its reload failed, so
  a bad file is reported once, not at every poll; the next write retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from kraft.config import ConfigError

log = logging.getLogger("kraft.security")

Stamp = tuple[str, int, int, int] | tuple[str, None]


class ReloadableContext(ssl.SSLContext):
    """An SSLContext whose certificates and CAs can be replaced while in use."""

    current: ssl.SSLContext

    def __new__(cls, inner: ssl.SSLContext) -> ReloadableContext:
        return super().__new__(cls, inner.protocol)

    def __init__(self, inner: ssl.SSLContext) -> None:
        self.swap(inner)

    def swap(self, inner: ssl.SSLContext) -> None:
        """From now on new connections use `inner`. The outer context mirrors its
        verification settings, which callers (aiohttp, http.client) read."""
        if isinstance(inner, ReloadableContext):
            inner = inner.current
        self.current = inner
        if self.protocol == ssl.PROTOCOL_TLS_CLIENT:
            self.check_hostname = inner.check_hostname
        self.verify_mode = inner.verify_mode

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:  # type: ignore[override]
        return self.current.wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        return self.current.wrap_socket(*args, **kwargs)


def stamps(paths: Iterable[str]) -> tuple[Stamp, ...]:
    """What says a file changed: (path, mtime_ns, size, inode), or (path, None) if absent."""
    out: list[Stamp] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append((p, None))
            continue
        out.append((p, st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class Reloadable(Protocol):
    """A holder of security material (kraft.security.server_security.ServerSecurity,
    kraft.security.client_security.ClientSecurity)."""

    def files(self) -> tuple[str, ...]: ...

    def load(self) -> Any:
        """The new material from the files; raises ConfigError naming a bad file."""

    def apply(self, material: Any) -> None:
        """Swap to material `load` returned (no I/O, cannot fail)."""


class Reloader:
    """Reloads holders on request (SIGHUP) and when their files change."""

    def __init__(
        self,
        holders: Sequence[Reloadable],
        interval_ms: int,
        *,
        who: str = "node",
    ) -> None:
        # One holder object may serve several brokers of a fleet: reload it once.
        unique: dict[int, Reloadable] = {id(h): h for h in holders}
        self.holders = [h for h in unique.values() if h.files()]
        self.interval_ms = interval_ms
        self.who = who
        self._stamps = {id(h): stamps(h.files()) for h in self.holders}
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self.failures = 0

    def _reload_one(self, holder: Reloadable, why: str) -> bool:
        self._stamps[id(holder)] = stamps(holder.files())  # before reading: a later write retries
        try:
            material = holder.load()
        except ConfigError as e:
            self.failures += 1
            log.error(
                "security reload failed, keeping the current material: %s",
                e,
                extra={"event": "security_reload_failed", "who": self.who, "why": why},
            )
            return False
        holder.apply(material)
        self.reloads += 1
        log.info(
            "security material reloaded (%s)",
            why,
            extra={
                "event": "security_reloaded",
                "who": self.who,
                "why": why,
                "files": list(holder.files()),
            },
        )
        return True

    def reload(self, why: str = "SIGHUP") -> int:
        """Reload every holder; how many failed."""
        return sum(not self._reload_one(h, why) for h in self.holders)

    def check(self) -> int:
        """Reload the holders whose files changed since they were last read; how many
        were reloaded (successfully or not)."""
        n = 0
        for h in self.holders:
            if stamps(h.files()) != self._stamps[id(h)]:
                self._reload_one(h, "files changed")
                n += 1
        return n

    def start(self) -> None:
        if self._task is None and self.holders and self.interval_ms > 0:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                self.check()
            except Exception:  # a bug here must not end the watching for good
                log.exception("security file check failed", extra={"event": "security_check_bug"})

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def on_sighup(loop: asyncio.AbstractEventLoop, reloader: Reloader) -> Callable[[], None]:
    """Install `reloader.reload` as the SIGHUP handler; returns the undo."""
    import signal

    loop.add_signal_handler(signal.SIGHUP, reloader.reload)
    return lambda: loop.remove_signal_handler(signal.SIGHUP)
