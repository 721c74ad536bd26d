"""A connection flood, as an attacker without credentials would run it (issue 25).

Holds N connections to one listener from several loopback source addresses
(Linux routes all of 127.0.0.0/8 to loopback): each sends half a request head
(or, with --tls, the first bytes of a ClientHello) and then nothing, and is
re-opened as soon as the server closes it. Runs until --seconds pass or SIGTERM,
then prints one JSON line: connects, failed connects, closes by the server (and
how long connections lived), most held at once.

Run: `.venv/bin/python benchmarks/connection_flood.py --target 127.0.0.1:9093
--connections 5000 --sources 127.0.0.2-127.0.0.9 --seconds 60 [--tls]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import resource
import signal
import statistics
import sys
import time

HALF_HEAD = b"POST /v1/brokers/heartbeat HTTP/1.1\r\nHost: controller\r\nContent-Le"
# A TLS record header announcing a 512-byte handshake message, and the start of a
# ClientHello: the server's handshake waits for the rest.
HALF_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 16


def raise_open_files(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def sources(spec: str) -> list[str]:
    """`127.0.0.2-127.0.0.9` or `127.0.0.2,127.0.0.3`."""
    if "-" in spec:
        lo, hi = (ipaddress.ip_address(x.strip()) for x in spec.split("-", 1))
        return [str(ipaddress.ip_address(i)) for i in range(int(lo), int(hi) + 1)]
    return [x.strip() for x in spec.split(",") if x.strip()]


class Flood:
    def __init__(self, host: str, port: int, tls: bool) -> None:
        self.host, self.port = host, port
        self.payload = HALF_CLIENT_HELLO if tls else HALF_HEAD
        self.connects = 0
        self.connect_failures = 0
        self.closed_by_server = 0
        self.held = 0
        self.max_held = 0
        self.lifetimes: list[float] = []
        self.stopping = False

    async def one(self, source: str) -> None:
        """One connection slot: connect, send half, wait for the close, again."""
        loop = asyncio.get_running_loop()
        while not self.stopping:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, local_addr=(source, 0)), 5
                )
            except (OSError, TimeoutError):
                self.connect_failures += 1
                await asyncio.sleep(0.05)  # a refused connect: the listener is not up
                continue
            self.connects += 1
            self.held += 1
            self.max_held = max(self.max_held, self.held)
            t0 = loop.time()
            try:
                writer.write(self.payload)
                while await reader.read(4096):
                    pass
                self.closed_by_server += 1
            except OSError:
                self.closed_by_server += 1  # reset
            except asyncio.CancelledError:
                writer.transport.abort()
                raise
            finally:
                self.held -= 1
                self.lifetimes.append(loop.time() - t0)
            writer.transport.abort()

    def report(self, seconds: float) -> dict[str, object]:
        life = sorted(self.lifetimes)
        return {
            "seconds": round(seconds, 1),
            "connects": self.connects,
            "connect_failures": self.connect_failures,
            "closed_by_server": self.closed_by_server,
            "held_at_end": self.held,
            "max_held": self.max_held,
            "lifetime_median_s": round(statistics.median(life), 3) if life else None,
            "lifetime_max_s": round(life[-1], 3) if life else None,
        }


async def run(args: argparse.Namespace) -> dict[str, object]:
    host, _, port = args.target.rpartition(":")
    flood = Flood(host, int(port), args.tls)
    srcs = sources(args.sources)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    t0 = time.monotonic()
    tasks = []
    for i in range(args.connections):
        tasks.append(asyncio.create_task(flood.one(srcs[i % len(srcs)])))
        if i % 200 == 199:
            await asyncio.sleep(0)  # let the first ones connect while the rest start
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), args.seconds)
    flood.stopping = True
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"target": args.target, "tls": args.tls, "sources": len(srcs)} | flood.report(
        time.monotonic() - t0
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="HOST:PORT of the listener")
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--sources", default="127.0.0.2-127.0.0.9")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--tls", action="store_true", help="half a ClientHello instead of a head")
    args = ap.parse_args()
    raise_open_files(args.connections + 256)
    print(json.dumps(asyncio.run(run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
