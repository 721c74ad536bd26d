"""The machine's floor under kraft's HTTP and fsync figures; prints JSON.

kraft's controllers speak HTTP through aiohttp and fsync their logs. Two of the
issue goals sit close to what this machine does with NO kraft code at all, and
this script measures that floor so the kraft figures can be read against it:

- aiohttp server capacity: a trivial handler (read the body, answer a small
  msgpack map) in its own process, with the node's runner settings (no access
  log), driven over keep-alive connections by the same lean raw-HTTP generator as
  controller_bench (pre-framed requests, one in flight per connection). Reported:
  requests/s and the server's CPU per request (from /proc). Issue 4's goal,
  10,000 brokers at a 2 s interval, is 5,000 requests/s before any controller work.
- aiohttp round trip: aiohttp's client to that server, one request at a time
  (the Raft commit path holds one such round trip: the answer to a follower's
  parked fetch, then the follower's next fetch), p50/p99.
- fsync: append ~200 bytes and fsync, alone and on three files at once (the
  three nodes of raft_bench share one disk), p50.

Usage: python benchmarks/http_floor.py [--seconds S] [--connections N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from controller_bench import HeartbeatConnection

MSGPACK = "application/msgpack"
PATH = "/v1/brokers/heartbeat"


def serve() -> None:
    """The trivial server: prints its port, serves until killed."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"\x81\xa5error\xa4NONE", content_type=MSGPACK)

    async def main() -> None:
        app = web.Application()
        app.router.add_post(PATH, handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(port, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def capacity(port: int, pid: int, connections: int, seconds: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    body = b"\x85" + b"\xa1x\x01" * 5  # a heartbeat-sized msgpack map
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {MSGPACK}\r\n"
        f"Accept: {MSGPACK}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    done = 0
    stop_at = 0.0

    async def one() -> None:
        nonlocal done
        _, conn = await loop.create_connection(HeartbeatConnection, "127.0.0.1", port)
        try:
            while loop.time() < stop_at:
                status, _ = await asyncio.wait_for(conn.request(head, body), 10)
                if status != 200:
                    raise RuntimeError(f"trivial server answered {status}")
                done += 1
        finally:
            if conn.transport is not None:
                conn.transport.close()

    stop_at = loop.time() + 1.0  # warm-up
    await asyncio.gather(*(one() for _ in range(connections)))
    done = 0
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    stop_at = loop.time() + seconds
    await asyncio.gather(*(one() for _ in range(connections)))
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    cpu_us = cpu / done * 1e6
    return {
        "connections": connections,
        "seconds": round(wall, 2),
        "requests_per_s": round(done / wall),
        "server_cpu_share_of_a_core": round(cpu / wall, 2),
        "server_cpu_us_per_request": round(cpu_us, 1),
        "requests_per_s_at_one_full_core": round(1e6 / cpu_us),
        "share_of_a_core_at_5000_per_s": round(5000 * cpu_us / 1e6, 2),
    }


async def round_trip(port: int, requests: int) -> dict[str, Any]:
    import aiohttp

    url = f"http://127.0.0.1:{port}{PATH}"
    timeout = aiohttp.ClientTimeout(total=5)
    lat: list[float] = []
    async with aiohttp.ClientSession(skip_auto_headers=("User-Agent",)) as session:
        for i in range(requests + 200):
            t = time.perf_counter()
            async with session.post(
                url, data=b"x" * 200, headers={"Content-Type": MSGPACK}, timeout=timeout
            ) as r:
                await r.read()
            if i >= 200:  # after a warm-up
                lat.append(time.perf_counter() - t)
    lat.sort()
    return {
        "requests": len(lat),
        "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 3),
    }


def fsync_latency(directory: Path, files: int, rounds: int) -> float:
    """p50 ms of append + fsync, `files` files fsynced at once (one thread each)."""
    barrier = threading.Barrier(files)
    medians: list[float] = []

    def worker(i: int) -> None:
        fd = os.open(directory / f"fsync-{files}-{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        lat = []
        try:
            for _ in range(rounds):
                barrier.wait()
                os.write(fd, b"x" * 200)
                t = time.perf_counter()
                os.fsync(fd)
                lat.append(time.perf_counter() - t)
        finally:
            os.close(fd)
        medians.append(statistics.median(lat))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(files)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return round(statistics.median(medians) * 1e3, 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="capacity window (s)")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--requests", type=int, default=3000, help="round trips timed")
    ap.add_argument("--quick", action="store_true", help="2 s window, 500 round trips")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.serve:
        serve()
        return 0
    if opts.quick:
        opts.seconds, opts.requests = 2.0, 500
    if opts.seconds <= 0 or opts.connections <= 0 or opts.requests <= 0:
        ap.error("--seconds, --connections and --requests must be positive")
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "load_avg_start": os.getloadavg()}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the trivial server did not start (said {line!r})")
        port = int(line)
        out["aiohttp_server_capacity"] = asyncio.run(
            capacity(port, proc.pid, opts.connections, opts.seconds)
        )
        out["aiohttp_round_trip"] = asyncio.run(round_trip(port, opts.requests))
    finally:
        proc.kill()  # exactly the process this script started
        proc.wait(timeout=10)
    with tempfile.TemporaryDirectory(prefix="http-floor-") as tmp:
        out["fsync_p50_ms"] = {
            "one_file": fsync_latency(Path(tmp), 1, 300),
            "three_files_at_once": fsync_latency(Path(tmp), 3, 300),
        }
    out["load_avg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
