"""Benchmark of the metadata log: durable append, plain append, read + decode.

Prints ONE JSON object (records per second, median of 3 runs each):

- ``durable_append``: FileLog.append + FileLog.flush (fsync) per batch, for batches
  of 1, 100 and 1000 records;
- ``append_no_fsync``: FileLog.append of 1000-record batches, no flush;
- ``read_decode``: sequential FileLog.read (1 MiB at a time), batch verification
  (both CRCs) and record decoding with metadata_log.batch.decode_records;
- ``encode``: building 1000-record batches with encode_batch (for reference).

Records are a realistic mix: mostly PartitionChangeRecord (ISR shrinks/expands,
leader moves), some RegisterBrokerRecord with endpoints, features and a rack.
Batches are encoded before the clock starts, so the append figures measure the
log. Goals on the 2-core reference machine: >= 100k records/s durable append at
1000-record batches, >= 300k records/s read + decode.

Run: ``python benchmarks/log_bench.py [--quick] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metadata_log.batch import decode_records, encode_batch, iter_headers  # noqa: E402
from metadata_log.file_log import FileLog  # noqa: E402
from metadata_log.records import (  # noqa: E402
    NO_LEADER_CHANGE,
    BrokerFeature,
    Endpoint,
    PartitionChangeRecord,
    Record,
    RegisterBrokerRecord,
    new_topic_id,
)

RUNS = 3
GOAL_DURABLE_1000 = 100_000
GOAL_READ_DECODE = 300_000


def make_records(n: int, seed: int = 7) -> list[Record]:
    """n records: ~80% PartitionChangeRecord, ~20% RegisterBrokerRecord."""
    rng = random.Random(seed)
    topics = [new_topic_id(rng) for _ in range(50)]
    out: list[Record] = []
    for i in range(n):
        if rng.random() < 0.2:
            bid = rng.randrange(1, 300)
            out.append(
                RegisterBrokerRecord(
                    broker_id=bid,
                    incarnation_id=new_topic_id(rng),
                    broker_epoch=i,
                    endpoints=(Endpoint("PLAINTEXT", f"broker-{bid}.kafka.internal", 9092),),
                    features=(BrokerFeature("metadata.version", 1, 1),),
                    rack=f"rack-{bid % 3}",
                    fenced=True,
                    in_controlled_shutdown=False,
                )
            )
        else:
            replicas = rng.sample(range(1, 300), 3)
            isr = tuple(replicas[: rng.randint(1, 3)])
            leader = isr[0] if rng.random() < 0.5 else NO_LEADER_CHANGE
            out.append(
                PartitionChangeRecord(
                    topic_id=rng.choice(topics),
                    partition_id=rng.randrange(0, 64),
                    isr=isr,
                    leader=leader,
                )
            )
    return out


def encode_all(records: list[Record], per_batch: int, epoch: int = 1) -> list[bytes]:
    return [
        encode_batch(i, epoch, 1_700_000_000_000 + i, records[i : i + per_batch])
        for i in range(0, len(records), per_batch)
    ]


# Records per CPU-second of this process for every timed call, by figure name: on a
# shared machine the wall-clock rate of CPU-bound work drops with other load, the
# CPU-time rate much less, so both are printed.
CPU_RATES: dict[str, list[float]] = {}
_current = ["?"]


def timed(fn: Callable[[], int]) -> float:
    """Records per second of one call of `fn` (which returns its record count)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    n = fn()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    CPU_RATES.setdefault(_current[0], []).append(n / cpu if cpu > 0 else float("inf"))
    return n / wall


def median_of(runs: int, fn: Callable[[], float], name: str = "?") -> float:
    _current[0] = name
    return statistics.median(fn() for _ in range(runs))


def bench_append(base: Path, batches: list[bytes], records: int, durable: bool) -> float:
    directory = Path(tempfile.mkdtemp(dir=base))
    log = FileLog.open(directory)
    try:

        def run() -> int:
            for b in batches:
                log.append(b)
                if durable:
                    log.flush()
            return records

        return timed(run)
    finally:
        log.close()
        shutil.rmtree(directory)


def bench_read(directory: Path) -> float:
    with FileLog.open(directory) as log:
        end = log.end_offset

        def run() -> int:
            offset = log.start_offset
            n = 0
            while offset < end:
                buf = log.read(offset, 1024 * 1024)
                for pos, h in iter_headers(buf, "read", offset):
                    n += len(decode_records(buf, pos, h))
                    offset = h.next_offset
            return n

        return timed(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few seconds)")
    parser.add_argument("--dir", help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    scale = 0.2 if args.quick else 1.0
    load_start = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    try:
        durable_counts = {
            1: int(2000 * scale),
            100: int(30_000 * scale),
            1000: int(200_000 * scale),
        }
        pool = make_records(max(durable_counts.values()))
        durable: dict[str, float] = {}
        for per_batch, count in durable_counts.items():
            recs = pool[:count]
            batches = encode_all(recs, per_batch)

            def one_run(b: list[bytes] = batches, n: int = count) -> float:
                return bench_append(base, b, n, durable=True)

            durable[str(per_batch)] = median_of(RUNS, one_run, f"durable_append_{per_batch}")

        plain_n = int(300_000 * scale)
        plain_recs = make_records(plain_n, seed=11)
        plain_batches = encode_all(plain_recs, 1000)
        no_fsync = median_of(
            RUNS,
            lambda: bench_append(base, plain_batches, plain_n, durable=False),
            "append_no_fsync",
        )
        encode = median_of(
            RUNS, lambda: timed(lambda: len(encode_all(plain_recs, 1000)) * 1000), "encode"
        )

        read_dir = base / "read"
        with FileLog.open(read_dir) as log:
            for b in plain_batches:
                log.append(b)
        read_decode = median_of(RUNS, lambda: bench_read(read_dir), "read_decode")
    finally:
        shutil.rmtree(base, ignore_errors=True)

    result = {
        "unit": "records/s, median of 3 runs",
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "loadavg_1min": {"start": load_start, "end": os.getloadavg()[0]},
        "durable_append": {k: round(v) for k, v in durable.items()},
        "append_no_fsync": round(no_fsync),
        "read_decode": round(read_decode),
        "encode": round(encode),
        "cpu_time_rate": {
            "unit": "records per CPU-second of this process, median of 3 runs",
            **{k: round(statistics.median(v)) for k, v in CPU_RATES.items()},
        },
        "goals": {
            "durable_append_1000": GOAL_DURABLE_1000,
            "read_decode": GOAL_READ_DECODE,
        },
        "goals_met": {
            "durable_append_1000": durable["1000"] >= GOAL_DURABLE_1000,
            "read_decode": read_decode >= GOAL_READ_DECODE,
        },
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
