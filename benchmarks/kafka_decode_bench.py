"""Single-core decode throughput of Apache Kafka's metadata log format (issue 23).

One seeded story (spark_replay.generator, the real controller's records: mostly
NoOpRecords, with BrokerRegistrationChange and PartitionChange records) is
written in the native format and rewritten in Kafka's (metadata_log.kafka.writer)
with each codec. Each log is then read on one core the way a replay reads it:
every segment's batches verified (CRC-32C for Kafka, CRC-32 for native),
decompressed and decoded into records (for Kafka: Kafka's fields and the native
record they map to; and, as a replay reads, the native records only).

Prints ONE JSON object: records, bytes and records/s (median of --runs runs) per
format and codec, the Kafka/native time ratio, and (one run) how fast
metadata_log.kafka.writer rewrites the native log in Kafka's format.

Run: ``python benchmarks/kafka_decode_bench.py [--records N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metadata_log.batch import decode_records, iter_headers  # noqa: E402
from metadata_log.kafka.reader import iter_log, iter_native_batches  # noqa: E402
from metadata_log.kafka.writer import write_kafka_log  # noqa: E402
from metadata_log.replay import segment_files  # noqa: E402
from spark_replay.generator import generate, scaled_config  # noqa: E402


def read_native(directory: Path) -> int:
    n = 0
    for _, path in segment_files(directory):
        data = path.read_bytes()
        for pos, h in iter_headers(data, str(path)):
            n += len(decode_records(data, pos, h, str(path)))
    return n


def read_kafka(directory: Path) -> int:
    return sum(len(b.records) for _, b in iter_log(directory))


def read_kafka_natives(directory: Path) -> int:
    """What a replay reads: native records only (no KafkaRecord view)."""
    n = 0
    for _, path in segment_files(directory):
        for _h, natives in iter_native_batches(path):
            n += len(natives)
    return n


def task_rows(directory: Path, per_record: bool = False) -> int:
    """What a Spark task decodes: every segment to the `records` Arrow rows
    (spark_replay.decode.read_file; for Kafka the vectorised path, or with
    `per_record` the per-record reference)."""
    from spark_replay import decode_kafka
    from spark_replay.datasource import list_log_files
    from spark_replay.decode import read_file

    n = 0
    for f in list_log_files(directory, snapshots=False):
        batches = decode_kafka._per_record(f, 65_536) if per_record else read_file(f)
        n += sum(b.num_rows for b in batches)
    return n


def timed(fn: Callable[[], int], runs: int) -> tuple[int, float]:
    times = []
    n = 0
    for _ in range(runs):
        t = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t)
    return n, statistics.median(times)


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for _, p in segment_files(directory))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--codecs", default="none,lz4,zstd,snappy,gzip")
    ap.add_argument(
        "--shape",
        choices=("story", "busy"),
        default="story",
        help="the story's shape (busy: replay_bench's BUSY, mostly NoOps one per batch)",
    )
    args = ap.parse_args(argv)
    from benchmarks.replay_bench import SHAPES

    root = Path(tempfile.mkdtemp(prefix="kafka-decode-bench-"))
    try:
        generate(root / "native", scaled_config(args.records, args.seed, **SHAPES[args.shape]))
        native_dir = root / "native" / "__cluster_metadata-0"
        n, secs = timed(lambda: read_native(native_dir), args.runs)
        tn, tsecs = timed(lambda: task_rows(native_dir), args.runs)
        assert tn == n, (tn, n)
        result: dict = {
            "bench": "kafka_decode",
            "shape": args.shape,
            "records": n,
            "runs": args.runs,
            "cpu_count": os.cpu_count(),
            "native": {
                "bytes": log_bytes(native_dir),
                "seconds": round(secs, 3),
                "records_per_s": round(n / secs),
                "task_rows_records_per_s": round(n / tsecs),
            },  # fmt: skip
            "kafka": {},
        }
        for codec in args.codecs.split(","):
            out = root / f"kafka-{codec}"
            t = time.perf_counter()
            write_kafka_log(root / "native", out, compression=codec)
            write_s = time.perf_counter() - t  # once: the generator's side, for reference
            kdir = out / "__cluster_metadata-0"
            kn, ksecs = timed(lambda d=kdir: read_kafka(d), args.runs)
            assert kn == n, (kn, n)
            nn, nsecs = timed(lambda d=kdir: read_kafka_natives(d), args.runs)
            assert nn == n, (nn, n)
            rn, rsecs = timed(lambda d=kdir: task_rows(d), args.runs)
            assert rn == n, (rn, n)
            pn, psecs = timed(lambda d=kdir: task_rows(d, per_record=True), args.runs)
            assert pn == n, (pn, n)
            result["kafka"][codec] = {
                "natives_only_records_per_s": round(nn / nsecs),
                "natives_only_time_vs_native": round(nsecs / secs, 2),
                "bytes": log_bytes(kdir),
                "seconds": round(ksecs, 3),
                "records_per_s": round(kn / ksecs),
                "time_vs_native": round(ksecs / secs, 2),
                "write_records_per_s": round(kn / write_s),
                # a Spark task's decode to Arrow rows (records table + typed columns)
                "task_rows_records_per_s": round(rn / rsecs),
                "task_rows_time_vs_native": round(rsecs / tsecs, 2),
                "task_rows_per_record_records_per_s": round(pn / psecs),
                "task_rows_per_record_time_vs_native": round(psecs / tsecs, 2),
            }
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
