"""A fault-injecting TCP proxy for chaos tests: one listening port per directed link.

Each `Link` forwards connections from its listen port to a target port and can
be switched at any time to:
- ``pass``: forward bytes both ways (optionally after a fixed delay);
- ``blackhole``: keep connections open but forward nothing, as a network
  partition does (the sender's request times out rather than failing fast);
- ``reset``: close every connection at once and refuse new ones (a crashed peer).

The proxies run on one asyncio loop in a daemon thread, so a synchronous test
can drive them (`NetProxy.set_mode`) between process kills.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

MODES = ("pass", "blackhole", "reset")


@dataclass
class Link:
    name: str
    listen_port: int
    target_port: int
    host: str = "127.0.0.1"
    mode: str = "pass"
    delay_s: float = 0.0
    server: asyncio.base_events.Server | None = None
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    bytes_forwarded: int = 0


class NetProxy:
    """Many links on one background event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.links: dict[str, Link] = {}

    def _call(self, coro: object, timeout: float = 10.0) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def add(self, name: str, listen_port: int, target_port: int) -> Link:
        if name in self.links:
            raise ValueError(f"link {name!r} exists")
        link = Link(name, listen_port, target_port)
        self._call(self._serve(link))
        self.links[name] = link
        return link

    async def _serve(self, link: Link) -> None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if link.mode == "reset":
                writer.close()
                return
            try:
                up_r, up_w = await asyncio.wait_for(
                    asyncio.open_connection(link.host, link.target_port), 3.0
                )
            except (OSError, TimeoutError):
                writer.close()
                return
            link.writers.update((writer, up_w))
            try:
                await asyncio.gather(self._pipe(link, reader, up_w), self._pipe(link, up_r, writer))
            finally:
                for w in (writer, up_w):
                    link.writers.discard(w)
                    w.close()

        link.server = await asyncio.start_server(on_client, link.host, link.listen_port)

    async def _pipe(self, link: Link, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
            while True:
                data = await r.read(65536)
                if not data:
                    break  # EOF (also while blackholed: no busy loop on a closed peer)
                if link.mode == "blackhole":
                    continue  # a partition loses packets: swallow what arrives
                if link.mode == "reset":
                    break
                if link.delay_s:
                    await asyncio.sleep(link.delay_s)
                w.write(data)
                await w.drain()
                link.bytes_forwarded += len(data)
        with contextlib.suppress(Exception):
            w.close()

    def set_mode(self, name: str, mode: str, delay_s: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown link mode {mode!r}; one of {MODES}")
        link = self.links[name]

        async def apply() -> None:
            link.mode, link.delay_s = mode, delay_s
            if mode in ("reset", "blackhole"):
                # Existing connections die too: a partition must not spare
                # a long-lived keep-alive connection.
                for w in list(link.writers):
                    w.close()

        self._call(apply())

    def heal_all(self) -> None:
        for name in self.links:
            self.set_mode(name, "pass")

    def close(self) -> None:
        async def shutdown() -> None:
            for link in self.links.values():
                if link.server is not None:
                    link.server.close()
                for w in list(link.writers):
                    w.close()

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
