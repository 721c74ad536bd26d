"""Seeded generator of realistic metadata logs, written through the real controller.

A story of N brokers and T topics over hours of simulated time: brokers register
and are unfenced by heartbeats, topics are created and deleted, brokers crash (the
controller fences them when their session expires), restart and re-register,
do controlled shutdowns, partition leaders shrink and expand ISRs with
AlterPartition, admins run preferred elections and enable unclean election on a
topic whose partitions are offline, the active controller fails over (a
LeaderChangeMessage and a new Raft epoch; a failover in the middle of a
transaction leaves it for the next leader to abort), and NoOps fill idle time.

Every record comes from `kraft.controller.quorum_controller.QuorumController`
(register, heartbeat, fence, alter_partition, elect_leaders, create_topic, ...),
which computes partition changes with the real BestLeader builder and replays
them into its MetadataImage, so the log is what a controller would have written.
`validate=True` also replays every written batch, decoded from its bytes, into a
second MetadataImage and compares the two after every command.

Pure apart from the file writing: time is simulated, randomness is the seed.
CLI: ``python -m spark_replay.generator --out DIR --records N --seed S``.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.controller.batching import to_batches
from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import (
    ControllerConfig,
    ControllerResult,
    QuorumController,
)
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    IsrMember,
    RegisterBrokerRequest,
)
from metadata_log.batch import decode_records, encode_batch, encode_payload, iter_headers
from metadata_log.image import MetadataImage
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    RECOVERED,
    AbortTransactionRecord,
    BrokerFeature,
    Endpoint,
    LeaderChangeMessage,
    MetadataRecord,
    Record,
    SnapshotFooter,
    SnapshotHeader,
)

METADATA_DIR = "__cluster_metadata-0"
CONTROLLER_IDS = (3000, 3001, 3002)
CLUSTER_ID = "spark-replay-generated"
START_TIME_MS = 1_700_000_000_000


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def snapshot_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


class SegmentWriter:
    """Appends encoded batches to segment files named by base offset, rolling by size.

    The file layout is metadata_log's (concatenated batches); this stands in for
    FileLog where a test or the generator only needs to write a finished log.
    """

    def __init__(self, directory: Path, segment_bytes: int = 8 * 1024 * 1024) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self._fh: Any = None
        self._size = 0
        self.next_offset = 0
        self.segments: list[int] = []

    def append(self, batch: bytes, record_count: int) -> None:
        if self._fh is None or self._size + len(batch) > self.segment_bytes:
            self.roll()
        self._fh.write(batch)
        self._size += len(batch)
        self.next_offset += record_count

    def roll(self) -> None:
        """Start a new segment at the next offset."""
        if self._fh is not None and self._size == 0:
            return  # the current segment is still empty: it already starts here
        if self._fh is not None:
            self._fh.close()
        self.segments.append(self.next_offset)
        self._fh = open(self.directory / segment_name(self.next_offset), "wb")  # noqa: SIM115
        self._size = 0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def delete_segments_before(self, offset: int) -> list[int]:
        """Delete whole segments that end at or before `offset` (retention after a snapshot)."""
        gone = []
        bases = self.segments
        for i, base in enumerate(bases[:-1]):
            if bases[i + 1] <= offset:
                (self.directory / segment_name(base)).unlink()
                gone.append(base)
        self.segments = [b for b in bases if b not in gone]
        return gone


class FileLogWriter:
    """The same interface as SegmentWriter over metadata_log's FileLog (the real log:
    sparse indexes, leader-epoch cache, recovery point). Flushed once, at close:
    the generator writes a finished log, not a live one."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        from metadata_log.file_log import FileLog

        self.directory = directory
        self.log = FileLog.open(directory, segment_bytes=segment_bytes)
        self.next_offset = self.log.end_offset

    @property
    def segments(self) -> list[int]:
        return self.log.segment_base_offsets()

    def append(self, batch: bytes, record_count: int) -> None:
        self.log.append(batch)
        self.next_offset += record_count

    def roll(self) -> None:
        pass  # delete_segments_before rolls when it must

    def delete_segments_before(self, offset: int) -> None:
        self.log.flush()
        self.log.delete_segments_below(offset)

    def close(self) -> None:
        self.log.close()


def open_writer(directory: Path, segment_bytes: int) -> SegmentWriter | FileLogWriter:
    """FileLog when metadata_log has it, else the plain segment writer."""
    try:
        return FileLogWriter(directory, segment_bytes)
    except ImportError:
        return SegmentWriter(directory, segment_bytes)


def write_snapshot(
    directory: Path,
    end_offset: int,
    epoch: int,
    records: Sequence[MetadataRecord],
    last_contained_log_time: int,
    records_per_batch: int = 1000,
) -> Path:
    """A snapshot file: control batch [SnapshotHeader], data batches, control batch [SnapshotFooter].

    Written by metadata_log.snapshot when it is available (the same layout).
    """
    try:
        from metadata_log.snapshot import SnapshotId
        from metadata_log.snapshot import write_snapshot as write_metadata_snapshot
    except ImportError:
        pass
    else:
        return write_metadata_snapshot(
            directory,
            SnapshotId(end_offset, epoch),
            records,
            last_contained_log_time=last_contained_log_time,
            append_time_ms=last_contained_log_time,
        )
    out = [
        encode_batch(
            0, epoch, last_contained_log_time, [SnapshotHeader(last_contained_log_time)], True
        )
    ]
    off = 1
    for i in range(0, len(records), records_per_batch):
        chunk = records[i : i + records_per_batch]
        out.append(encode_batch(off, epoch, last_contained_log_time, chunk))
        off += len(chunk)
    out.append(encode_batch(off, epoch, last_contained_log_time, [SnapshotFooter()], True))
    path = directory / snapshot_name(end_offset, epoch)
    tmp = path.with_suffix(".checkpoint.tmp")
    tmp.write_bytes(b"".join(out))
    os.replace(tmp, path)
    return path


@dataclass
class GeneratorConfig:
    records: int = 20_000  # stop once the log holds at least this many records
    seed: int = 1
    brokers: int = 6
    topics: int = 8
    partitions: tuple[int, int] = (1, 12)  # per topic, uniform
    replication_factor: int = 3
    segment_bytes: int = 1024 * 1024
    max_batch_bytes: int = 64 * 1024  # results larger than this become transactions
    step_ms: tuple[int, int] = (250, 2500)  # simulated time between steps
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    noop_interval_ms: int = 500
    crash_rate: float = 0.01  # per step
    shutdown_rate: float = 0.008
    isr_shrink_rate: float = 0.05
    topic_churn_rate: float = 0.004
    admin_rate: float = 0.01
    failover_rate: float = 0.002
    snapshot_at: tuple[float, ...] = ()  # fractions of `records` at which to snapshot
    delete_before_snapshot: bool = False  # retention: drop segments below the snapshot
    validate: bool = False


@dataclass
class _Broker:
    broker_id: int
    rack: str
    alive: bool = False
    epoch: int = -1
    incarnation: str = ""
    shutting_down: bool = False
    last_heartbeat_ms: int = -(10**9)


@dataclass(order=True)
class _Event:
    at_ms: int
    seq: int
    action: Callable[[], None] = field(compare=False)


class StoryGenerator:
    """Drives a QuorumController through a seeded story and writes the log."""

    def __init__(self, out_dir: Path, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.dir = Path(out_dir) / METADATA_DIR
        self.sink = open_writer(self.dir, cfg.segment_bytes)
        self.now = START_TIME_MS
        self.raft_epoch = 1
        self.controller_id = CONTROLLER_IDS[0]
        self.ctl = QuorumController(
            ControllerConfig(
                node_id=self.controller_id,
                controller_ids=frozenset(CONTROLLER_IDS),
                cluster_id=CLUSTER_ID,
                session_timeout_ms=cfg.session_timeout_ms,
                heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            ),
            random.Random(self.rng.getrandbits(64)),
        )
        self.check = MetadataImage() if cfg.validate else None
        self.brokers = {
            i: _Broker(i, f"rack-{'abc'[(i - 1) % 3]}") for i in range(1, cfg.brokers + 1)
        }
        self.events: list[_Event] = []
        self._seq = 0
        self.last_write_ms = self.now
        self.topic_seq = 0
        self.snapshots: list[Path] = []
        self._snap_marks = sorted(int(f * cfg.records) for f in cfg.snapshot_at)

    # ------------------------------------------------------------ writing

    def _write(
        self, records: Sequence[Record], control: bool = False, limit_batches: int | None = None
    ) -> None:
        """Append records as the active controller would: batches (or a transaction)."""
        if not records:
            return
        if control:
            batch = encode_batch(
                self.sink.next_offset, self.raft_epoch, self.now, list(records), True
            )
            self._append(batch, list(records), True)
            return
        plan = to_batches(list(records), self.cfg.max_batch_bytes)  # type: ignore[arg-type]
        written = 0
        for i, eb in enumerate(plan.batches):
            if limit_batches is not None and i >= limit_batches:
                break
            recs = plan.records[written : written + eb.record_count]
            written += eb.record_count
            batch = encode_payload(
                self.sink.next_offset, self.raft_epoch, self.now, eb.payload, eb.record_count
            )
            self._append(batch, recs, False)

    def _append(self, batch: bytes, records: list[Any], control: bool) -> None:
        base = self.sink.next_offset
        self.sink.append(batch, len(records))
        self.ctl.replay_batch(base, records, self.now)
        self.ctl.on_commit(base + len(records) - 1)
        if self.check is not None:
            # Replay what the bytes say, not what we meant to write.
            (pos, h), *_ = list(iter_headers(batch, "<generated>", base))
            self.check.replay_batch(base, decode_records(batch, pos, h), self.now)
        self.last_write_ms = self.now

    def _commit(self, result: ControllerResult | None) -> None:
        if result is None:
            return
        result = result.drained()  # a fence's records are generated lazily
        if not result.records:
            return
        self._write(result.records)
        if self.check is not None and not self.ctl.image.in_transaction:
            assert self.check.to_dict() == self.ctl.image.to_dict(), "image diverged"

    def _run(self, fn: Callable[[], ControllerResult]) -> ControllerResult | None:
        try:
            result = fn()
        except ApiError:
            return None  # a refused request writes nothing, as on a real controller
        self._commit(result)
        return result

    # ------------------------------------------------------------ scheduling

    def _at(self, delay_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, _Event(self.now + delay_ms, self._seq, action))

    # ------------------------------------------------------------ brokers

    def _start_broker(self, b: _Broker) -> None:
        b.alive = True
        b.shutting_down = False
        b.incarnation = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        req = RegisterBrokerRequest(
            broker_id=b.broker_id,
            cluster_id=CLUSTER_ID,
            incarnation_id=b.incarnation,
            listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9090 + b.broker_id, "PLAINTEXT"),),
            rack=b.rack,
            features=(BrokerFeature(METADATA_VERSION_FEATURE, 1, LATEST_METADATA_VERSION),),
        )
        result = self._run(lambda: self.ctl.register_broker(req, self.now, self.sink.next_offset))
        if result is None:
            b.alive = False  # duplicate registration refused: try again later
            self._at(self.rng.randint(2000, 10_000), lambda: self._start_broker(b))
            return
        b.epoch = result.reply["broker_epoch"]
        b.last_heartbeat_ms = -(10**9)

    def _heartbeat(self, b: _Broker) -> None:
        req = BrokerHeartbeatRequest(
            broker_id=b.broker_id,
            broker_epoch=b.epoch,
            current_metadata_offset=self.sink.next_offset - 1,
            want_fence=False,
            want_shutdown=b.shutting_down,
        )
        try:
            result = self.ctl.heartbeat(req, self.now)
        except ApiError:
            # STALE_BROKER_EPOCH (e.g. unregistered): re-register, as a broker does.
            self._start_broker(b)
            return
        was_fenced = self.ctl.image.brokers[b.broker_id].fenced
        self._commit(result)
        b.last_heartbeat_ms = self.now
        if result.reply["should_shut_down"]:
            b.alive = False
            self._at(self.rng.randint(10_000, 60_000), lambda: self._start_broker(b))
        elif was_fenced and not result.reply["is_fenced"]:
            # Unfenced: once caught up, the leaders add it back to their ISRs.
            self._at(self.rng.randint(1000, 8000), lambda: self._rejoin_isrs(b))

    def _crash(self) -> None:
        alive = [b for b in self.brokers.values() if b.alive and not b.shutting_down]
        if len(alive) <= 1:
            return
        b = self.rng.choice(alive)
        b.alive = False  # stops heartbeating: fenced when its session expires
        self._at(self.rng.randint(15_000, 180_000), lambda: self._start_broker(b))

    def _controlled_shutdown(self) -> None:
        alive = [b for b in self.brokers.values() if b.alive and not b.shutting_down]
        if len(alive) <= 1:
            return
        self.rng.choice(alive).shutting_down = True

    def _rejoin_isrs(self, b: _Broker) -> None:
        image = self.ctl.image
        reg = image.brokers.get(b.broker_id)
        if not b.alive or reg is None or reg.fenced or reg.broker_epoch != b.epoch:
            return
        for tid in sorted(image.topics):
            for pid, p in sorted(image.topics[tid].partitions.items()):
                if b.broker_id in p.replicas and b.broker_id not in p.isr:
                    self._alter_isr(tid, pid, add=b.broker_id)

    def _alter_isr(
        self, tid: str, pid: int, add: int | None = None, drop: int | None = None
    ) -> None:
        image = self.ctl.image
        topic = image.topics.get(tid)
        p = None if topic is None else topic.partitions.get(pid)
        if p is None or p.leader < 0:
            return
        leader = self.brokers.get(p.leader)
        if leader is None or not leader.alive:
            return
        isr = [r for r in p.replicas if r in p.isr or r == add]
        if drop is not None:
            isr = [r for r in isr if r != drop]
        if p.leader not in isr:
            return
        members = tuple(
            IsrMember(r, image.brokers[r].broker_epoch if r in image.brokers else -1) for r in isr
        )
        req = AlterPartitionRequest(
            broker_id=p.leader,
            broker_epoch=leader.epoch,
            topic_id=tid,
            partition_id=pid,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            new_isr_with_epochs=members,
            leader_recovery_state=RECOVERED,
        )
        self._run(lambda: self.ctl.alter_partition(req, self.now))

    def _isr_shrink(self) -> None:
        """A follower lags: its leader drops it from the ISR, and adds it back later."""
        image = self.ctl.image
        if not image.topics:
            return
        tid = self.rng.choice(sorted(image.topics))
        parts = image.topics[tid].partitions
        if not parts:
            return
        pid = self.rng.choice(sorted(parts))
        p = parts[pid]
        followers = [r for r in p.isr if r != p.leader]
        if p.leader < 0 or not followers:
            return
        lagging = self.rng.choice(followers)
        self._alter_isr(tid, pid, drop=lagging)
        self._at(self.rng.randint(2000, 30_000), lambda: self._alter_isr(tid, pid, add=lagging))

    # ------------------------------------------------------------ topics and admin

    def _create_topic(self) -> None:
        self.topic_seq += 1
        name = f"topic-{self.topic_seq:04d}"
        n = self.rng.randint(*self.cfg.partitions)
        usable = sum(1 for b in self.ctl.image.brokers.values() if not b.fenced)
        rf = min(self.cfg.replication_factor, max(usable, 1))
        req = CreateTopicRequest(name, n, rf, None, {})
        self._run(lambda: self.ctl.create_topic(req, self.now))

    def _topic_churn(self) -> None:
        names = sorted(self.ctl.image.topic_ids_by_name)
        if names and self.rng.random() < 0.5:
            name = self.rng.choice(names)
            self._run(lambda: self.ctl.delete_topic(name, self.now))
        self._create_topic()

    def _admin(self) -> None:
        image = self.ctl.image
        names = sorted(image.topic_ids_by_name)
        if not names:
            return
        dead = [
            b
            for b in self.brokers.values()
            if not b.alive and b.broker_id in image.brokers and image.brokers[b.broker_id].fenced
        ]
        if dead and self.rng.random() < 0.15:
            # Decommission a dead broker; when it comes back it registers anew.
            gone = self.rng.choice(dead).broker_id
            self._run(lambda: self.ctl.unregister_broker(gone, self.now))
            return
        name = self.rng.choice(names)
        topic = image.topics[image.topic_ids_by_name[name]]
        offline = [pid for pid, p in topic.partitions.items() if p.leader < 0]
        if offline and self.rng.random() < 0.5:
            req = AlterConfigsRequest(name, {"unclean.leader.election.enable": "true"})
            self._run(lambda: self.ctl.alter_configs(req, self.now))
            return
        for pid, p in sorted(topic.partitions.items()):
            if p.replicas and p.leader != p.replicas[0]:
                ereq = ElectLeadersRequest(name, pid, "preferred")
                self._run(lambda r=ereq: self.ctl.elect_leaders(r, self.now))  # type: ignore[misc]

    def _failover(self) -> None:
        """The active controller changes: a new Raft epoch and a LeaderChangeMessage."""
        self.ctl.deactivate(self.sink.next_offset - 1)
        self.raft_epoch += 1
        others = [c for c in CONTROLLER_IDS if c != self.controller_id]
        self.controller_id = self.rng.choice(others)
        self._write(
            [LeaderChangeMessage(self.controller_id, CONTROLLER_IDS, (self.controller_id,))],
            control=True,
        )
        if self.ctl.image.in_transaction:
            self._write([AbortTransactionRecord("leader changed during the transaction")])
        self.ctl.activate(self.now)
        # the new controller treats every broker as just seen (heartbeats resume)

    def _interrupted_transaction(self) -> None:
        """A large result whose leader dies after its first batch: the next one aborts it."""
        self.topic_seq += 1
        # ~40 bytes per PartitionRecord: this many partitions need several batches
        n = max(2, self.cfg.max_batch_bytes // 20)
        req = CreateTopicRequest(f"topic-{self.topic_seq:04d}", n, 1, None, {})
        try:
            result = self.ctl.create_topic(req, self.now)
        except ApiError:
            return
        self._write(result.records, limit_batches=1)
        self._failover()

    # ------------------------------------------------------------ main loop

    def _snapshot_due(self) -> None:
        while self._snap_marks and self.sink.next_offset >= self._snap_marks[0]:
            self._snap_marks.pop(0)
            if self.ctl.image.in_transaction:
                continue
            end = self.sink.next_offset
            path = write_snapshot(
                self.dir,
                end,
                self.raft_epoch,
                list(self.ctl.image.to_records()),
                self.now,
            )
            self.snapshots.append(path)
            if self.cfg.delete_before_snapshot:
                # start a new segment so that retention can drop every older one
                self.sink.roll()
                self.sink.delete_segments_before(end)

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        rng = self.rng
        self._write(
            [LeaderChangeMessage(self.controller_id, CONTROLLER_IDS, CONTROLLER_IDS[:2])],
            control=True,
        )
        self.ctl.activate(self.now)
        self._commit(ControllerResult(tuple(self.ctl.bootstrap_records())))
        for b in self.brokers.values():
            self.now += rng.randint(50, 400)
            self._start_broker(b)
        created = 0
        while self.sink.next_offset < cfg.records:
            self.now += rng.randint(*cfg.step_ms)
            while self.events and self.events[0].at_ms <= self.now:
                heapq.heappop(self.events).action()
            for b in self.brokers.values():
                if b.alive and self.now - b.last_heartbeat_ms >= cfg.heartbeat_interval_ms:
                    self._heartbeat(b)
            while True:
                fenced = self._run_fence()
                if not fenced:
                    break
            unfenced = sum(1 for b in self.ctl.image.brokers.values() if not b.fenced)
            if created < cfg.topics and unfenced >= cfg.replication_factor:
                self._create_topic()
                created += 1
            elif created >= cfg.topics:
                r = rng.random()
                if r < cfg.crash_rate:
                    self._crash()
                elif r < cfg.crash_rate + cfg.shutdown_rate:
                    self._controlled_shutdown()
                if rng.random() < cfg.isr_shrink_rate:
                    self._isr_shrink()
                if rng.random() < cfg.topic_churn_rate:
                    self._topic_churn()
                if rng.random() < cfg.admin_rate:
                    self._admin()
                if rng.random() < cfg.failover_rate:
                    if rng.random() < 0.2:
                        self._interrupted_transaction()
                    else:
                        self._failover()
            if self.now - self.last_write_ms >= cfg.noop_interval_ms:
                self._commit(self.ctl.noop())
            self._snapshot_due()
        self.sink.close()
        return {
            "log_dir": str(self.dir),
            "records": self.sink.next_offset,
            "segments": len(self.sink.segments),
            "snapshots": [p.name for p in self.snapshots],
            "simulated_hours": round((self.now - START_TIME_MS) / 3_600_000, 2),
            "end_offset": self.sink.next_offset,
        }

    def _run_fence(self) -> bool:
        try:
            result = self.ctl.maybe_fence_stale_broker(self.now)
        except ApiError:
            return False
        if result is None:
            return False
        self._commit(result)
        return True


def generate(out_dir: str | Path, cfg: GeneratorConfig) -> dict[str, Any]:
    """Write a seeded story's log under out_dir/__cluster_metadata-0; returns a summary."""
    return StoryGenerator(Path(out_dir), cfg).run()


def scaled_config(records: int, seed: int, **overrides: Any) -> GeneratorConfig:
    """A cluster sized so that `records` spans hours of simulated time.

    Bigger logs get more partitions (each fence or restart touches a broker's
    share of them) rather than only more time, as a busy real cluster would.
    """
    if records <= 50_000:
        cfg = GeneratorConfig(records=records, seed=seed)
    elif records <= 2_000_000:
        cfg = GeneratorConfig(
            records=records,
            seed=seed,
            brokers=12,
            topics=60,
            partitions=(10, 60),
            segment_bytes=16 * 1024 * 1024,
        )
    else:
        cfg = GeneratorConfig(
            records=records,
            seed=seed,
            brokers=24,
            topics=200,
            partitions=(20, 100),
            segment_bytes=32 * 1024 * 1024,
            max_batch_bytes=256 * 1024,
        )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m spark_replay.generator",
        description="Write a seeded, realistic __cluster_metadata log through the real controller.",
    )
    ap.add_argument("--out", required=True, help="data dir to create (gets __cluster_metadata-0/)")
    ap.add_argument("--records", type=int, default=20_000, help="at least this many records")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--brokers", type=int)
    ap.add_argument("--topics", type=int)
    ap.add_argument("--segment-bytes", type=int)
    ap.add_argument(
        "--snapshot-at",
        type=float,
        action="append",
        default=[],
        help="write a snapshot when this fraction of --records is written (repeatable)",
    )
    ap.add_argument(
        "--delete-before-snapshot",
        action="store_true",
        help="delete the segments below the last snapshot (a log that starts with a snapshot)",
    )
    ap.add_argument("--validate", action="store_true", help="cross-check every batch by replay")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if (out / METADATA_DIR).exists() and any((out / METADATA_DIR).iterdir()):
        print(f"error: {out / METADATA_DIR} already holds a log", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {
        "snapshot_at": tuple(args.snapshot_at),
        "delete_before_snapshot": args.delete_before_snapshot,
        "validate": args.validate,
    }
    for name in ("brokers", "topics", "segment_bytes"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    cfg = scaled_config(args.records, args.seed, **overrides)
    import json

    print(json.dumps(generate(out, cfg), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
