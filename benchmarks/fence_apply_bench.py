"""In-process profile of a fence of a broker in every ISR (issue 26), without the network.

The two per-record paths of a million-partition fence, timed stage by stage on one
seeded image (N partitions, RF 3 on brokers 1000-1002, broker 1000 fenced):

- the leader: generate the fence's records (QuorumController.maybe_fence_stale_broker
  drawn to its end), encode them (RecordEncoder), pack them into 1 MiB batches
  (batching.pack + encode_payload), replay them through the ChunkedReplay with the
  journal and the replay observer on (the active path), then drop the committed
  undo entries (commit_to in the service's bounded turns);
- a standby: verify and decode the batches (metadata_log.batch) and replay them
  through the ChunkedReplay (the standby path: the transaction's records queued,
  then its end applied in slices).

The two images must be equal at the end. Prints one JSON object (seconds per
stage, µs per record); `--profile leader|standby` prints a cProfile of that path
to stderr instead of timing it once.

    .venv/bin/python benchmarks/fence_apply_bench.py --partitions 1000000

At 1M (one run each, nice 19, load 3.1-3.9 from other work), us per record,
c39d00a -> 9f30a6e: leader generate 2.33 -> 1.72; leader replay of the
transaction's records 0.51 -> 1.50 and of its end 3.10 -> 1.33 (the merges moved
before the end, the index told a slice at a time); standby queue 0.21 -> 1.37 and
end 3.52 -> 1.49. The end is what runs after the commit on a standby.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import random
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kraft.controller.batching import RecordEncoder, pack  # noqa: E402
from kraft.controller.quorum_controller import (  # noqa: E402
    ControllerConfig,
    QuorumController,
)
from kraft.server.chunked_replay import GC_PAUSE, REPLAY_CHUNK, ChunkedReplay  # noqa: E402
from kraft.server.controller_service import JOURNAL_TRIM_PER_TURN, MAX_BATCH_BYTES  # noqa: E402
from kraft.server.metrics import ControllerMetrics  # noqa: E402
from kraft.server.replay_metrics import ReplayMetrics  # noqa: E402
from metadata_log.batch import decode_records, encode_payload, iter_headers  # noqa: E402
from metadata_log.records import (  # noqa: E402
    BeginTransactionRecord,
    EndTransactionRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    new_topic_id,
)

ISR = (1000, 1001, 1002)
PER_TOPIC = 10_000  # controller_bench's topics


def setup_records(partitions: int, seed: int) -> list[Any]:
    """Bootstrap features, three unfenced brokers, `partitions` partitions of RF 3
    rotated over them (controller_bench's layout), leader the first replica."""
    rng = random.Random(seed)
    c = QuorumController(config(), random.Random(seed))
    out: list[Any] = list(c.bootstrap_records())
    out += [RegisterBrokerRecord(b, f"inc-{b}", 10 + b, fenced=False) for b in ISR]
    rotations = [ISR[k:] + ISR[:k] for k in range(len(ISR))]
    n, left = 0, partitions
    while left > 0:
        count = min(PER_TOPIC, left)
        left -= count
        tid = new_topic_id(rng)
        out.append(TopicRecord(f"isr-{n}", tid))
        for p in range(count):
            r = rotations[(n + p) % 3]
            out.append(PartitionRecord(tid, p, r, r, leader=r[0], leader_epoch=0))
        n += 1
    return out


def config() -> ControllerConfig:
    return ControllerConfig(
        node_id=3000,
        controller_ids=frozenset({3000, 3001, 3002}),
        cluster_id="bench",
        session_timeout_ms=1000,
    )


def controller(setup: list[Any], observer: Any = None) -> QuorumController:
    c = QuorumController(config(), random.Random(1), observer)
    for off, rec in enumerate(setup):
        c.replay(rec, off)
    return c


class Stages:
    def __init__(self) -> None:
        self.s: dict[str, float] = {}
        self.faults: dict[str, int] = {}  # minor page faults (copies on write among them)

    def time(self, name: str, fn: Any, *args: Any) -> Any:
        f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        out = fn(*args)
        self.s[name] = self.s.get(name, 0.0) + time.perf_counter() - t
        f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f
        self.faults[name] = self.faults.get(name, 0) + f
        return out


def leader_path(leader: QuorumController, st: Stages) -> tuple[list[bytes], int]:
    """Generate, encode, pack and replay the fence as the active controller does;
    returns the batches (bytes) and the offset of their first record."""
    base = leader.image.offset + 1
    leader.activate(0)
    for b in ISR[1:]:
        leader.note_heartbeat_contact(b, 10 + b, 900)
    result = leader.maybe_fence_stale_broker(1500)
    assert result is not None and result.more is not None
    assert result.reply["fenced_broker"] == ISR[0]
    encoder = RecordEncoder(leader.image.features.get("metadata.version"))
    records: list[Any] = [BeginTransactionRecord("")]
    encoded: list[bytes] = encoder.encode(records)

    def generate() -> list[Any]:
        return [r for r in result.more if r is not None]

    generated = st.time("leader_generate", generate)
    encoded += st.time("leader_encode", encoder.encode, generated)
    records += generated
    records.append(EndTransactionRecord())
    encoded += encoder.encode(records[-1:])

    def batches() -> list[bytes]:
        out, off = [], base
        for b in pack(encoded, MAX_BATCH_BYTES):
            out.append(encode_payload(off, 1, 0, b.payload, b.record_count))
            off += b.record_count
        return out

    data = st.time("leader_pack", batches)
    replayer = ChunkedReplay(leader, REPLAY_CHUNK)
    # the transaction's records (queued, merges staged), then its end (applied)
    last = base + len(records) - 1
    replayer.add(base, records[:-1], 0, len(records) - 1)
    st.time("leader_replay_txn", replayer.finish_now)
    replayer.add(last, records[-1:], 0, 1)
    st.time("leader_replay_end", replayer.finish_now)

    def trim() -> None:
        while not leader.on_commit(last, JOURNAL_TRIM_PER_TURN):
            pass

    st.time("leader_commit_trim", trim)
    st.s["records"] = len(records)
    return data, base


def standby_path(standby: QuorumController, data: list[bytes], st: Stages) -> None:
    """Decode and replay committed batches as a standby does (node.handle_commit)."""
    replayer = ChunkedReplay(standby, REPLAY_CHUNK)

    def decode() -> list[tuple[int, list[Any]]]:
        out = []
        for buf in data:
            for pos, h in iter_headers(buf, "<bench>"):
                out.append((h.base_offset, decode_records(buf, pos, h)))
        return out

    decoded = st.time("standby_decode", decode)
    # the committed batches before the end's, then the end's (the end applies)
    *before, (base, recs) = decoded
    for b, r in before:
        replayer.add(b, r, 0, len(r))
    st.time("standby_replay_txn", replayer.finish_now)
    del decoded, before
    replayer.add(base, recs, 0, len(recs))
    st.time("standby_replay_end", replayer.finish_now)


def fork_idle_child() -> int:
    """A child that shares the heap and sleeps (a snapshot writer's memory effect
    without its CPU): killed at the end."""
    pid = os.fork()
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
    return pid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", choices=("leader", "standby"), default=None)
    ap.add_argument("--no-check", action="store_true", help="skip comparing the two images")
    ap.add_argument(
        "--fork-child",
        action="store_true",
        help="keep a forked idle child alive meanwhile (as a snapshot writer is): every "
        "page the fence writes is then copied on write",
    )
    opts = ap.parse_args()
    t0 = time.perf_counter()
    setup = setup_records(opts.partitions, opts.seed)
    metrics = ControllerMetrics(dict)
    leader = controller(setup, ReplayMetrics(metrics))
    standby = controller(setup)
    del setup
    gc.freeze()  # as the node does after loading (freeze_heap)
    setup_s = time.perf_counter() - t0
    st = Stages()
    child = fork_idle_child() if opts.fork_child else None
    GC_PAUSE.pause()  # as the service and the standby's replay task do
    try:
        prof = cProfile.Profile() if opts.profile is not None else None
        if prof is not None and opts.profile == "leader":
            prof.enable()
        data, _base = leader_path(leader, st)
        if prof is not None:
            prof.disable()
        if prof is not None and opts.profile == "standby":
            prof.enable()
        standby_path(standby, data, st)
        if prof is not None:
            prof.disable()
    finally:
        GC_PAUSE.resume()
        if child is not None:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    if opts.profile is not None and prof is not None:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    n = int(st.s.pop("records"))
    out: dict[str, Any] = {
        "partitions": opts.partitions,
        "records": n,
        "batches": len(data),
        "setup_s": round(setup_s, 2),
        "stages_s": {k: round(v, 3) for k, v in st.s.items()},
        "us_per_record": {k: round(v / n * 1e6, 2) for k, v in st.s.items()},
        "minor_faults": st.faults,
    }
    if not opts.no_check:
        assert leader.image.offset == standby.image.offset
        same = leader.image == standby.image
        out["images_equal"] = same
        if not same:
            print(json.dumps(out), flush=True)
            return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
