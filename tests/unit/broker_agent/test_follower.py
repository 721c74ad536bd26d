"""The metadata follower's pure part: an observer RaftCore + MetadataApplier against a
real in-memory leader RaftCore, on a fake clock (no network)."""

from __future__ import annotations

import random

import pytest

from broker_agent.follower import LeaderIndex, MetadataApplier, ObserverLog, snapshot_records
from kraft.raft.config import RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.memory_log import MemoryLog
from kraft.raft.state import ElectionState
from metadata_log.batch import decode_records, encode_batch, iter_headers
from metadata_log.errors import MetadataLogError
from metadata_log.image import MetadataImage
from metadata_log.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
    SnapshotFooter,
    SnapshotHeader,
)
from metadata_log.snapshot import SnapshotId
from tests.cluster_story import cluster_story, story_image

CLUSTER = "test-cluster"
LEADER = 1
OBSERVER = 100


def snapshot_bytes(image: MetadataImage, sid: SnapshotId) -> bytes:
    """A snapshot's bytes as a controller writes them (header, data, footer)."""
    recs = list(image.to_records())
    out = [encode_batch(0, sid.epoch, 0, [SnapshotHeader(image.last_append_time_ms)], True)]
    off = 1
    for i in range(0, len(recs), 3):
        chunk = recs[i : i + 3]
        out.append(encode_batch(off, sid.epoch, 0, chunk))
        off += len(chunk)
    out.append(encode_batch(off, sid.epoch, 0, [SnapshotFooter()], True))
    return b"".join(out)


def committed_image(log: MemoryLog, hw: int) -> MetadataImage:
    """The leader's committed log replayed independently (every record below hw)."""
    image = MetadataImage()
    for h, data in log.batches():
        off = h.base_offset
        for rec in decode_records(data, 0, h):
            if off < hw and off > image.offset:
                image.replay(rec, off)
            off += 1
    return image


class Net:
    """A single-voter leader and one observer, messages delivered in memory."""

    def __init__(self, config: RaftConfig | None = None) -> None:
        self.now = 0
        self.config = config or RaftConfig()
        self.leader_log = MemoryLog()
        self.leader = RaftCore(
            LEADER,
            [LEADER],
            CLUSTER,
            self.leader_log,
            ElectionState(),
            self.config,
            random.Random(1),
            0,
        )
        self.obs_log = ObserverLog(retain_offsets=8)
        self.observer: RaftCore | None = None
        self.applier = MetadataApplier()
        self.delivered = 0
        self._pending: dict[int, int] = {}  # leader-side correlation -> observer correlation
        self._next = 1
        self.drop = False
        self.step(0)
        assert self.leader.is_leader

    def start_observer(self) -> None:
        self.observer = RaftCore(
            OBSERVER,
            [LEADER],
            CLUSTER,
            self.obs_log,
            ElectionState(),
            self.config,
            random.Random(2),
            self.now,
        )

    def _leader_ready(self) -> None:
        r = self.leader.ready()
        if r.flush_to is not None:
            self.leader_log.flush()
            self.leader.on_flushed(self.leader_log.flushed_offset, self.now)
            r2 = self.leader.ready()
            r.responses += r2.responses
        for corr, resp in r.responses:
            obs_corr = self._pending.pop(corr)
            assert self.observer is not None
            self.observer.handle_response(obs_corr, resp, self.now)

    def _observer_ready(self) -> bool:
        obs = self.observer
        if obs is None:
            return False
        r = obs.ready()
        if r.empty:
            return False
        if r.snapshot_loaded is not None:
            sid = r.snapshot_loaded
            self.applier.load_snapshot(sid, self.obs_log.snapshot_data(sid))
            self.delivered = sid.end_offset
        self.deliver(obs.high_watermark)
        job = self.obs_log.prepare_flush()
        if job is not None:
            job.run()
            obs.on_flushed(self.obs_log.complete_flush(job), self.now)
        for out in r.messages:
            if self.drop:
                obs.request_failed(out.correlation, self.now)
                continue
            corr = self._next
            self._next += 1
            self._pending[corr] = out.correlation
            self.leader.handle_request(out.message, self.now, corr)
        return True

    def deliver(self, hw: int) -> None:
        """Committed batches to the applier, in order (as RaftClient delivers them)."""
        log = self.obs_log
        while self.delivered < min(hw, log.end_offset):
            data = log.read(self.delivered, 1 << 20)
            for pos, h in iter_headers(data, "<obs>"):
                if h.next_offset > hw:
                    return
                self.applier.apply_batch(
                    h.base_offset, decode_records(data, pos, h), h.append_time_ms
                )
                self.delivered = h.next_offset
                log.trim_below = self.delivered

    def step(self, now: int) -> None:
        self.now = max(self.now, now)
        self.leader.tick(self.now)
        if self.observer is not None:
            self.observer.tick(self.now)
        for _ in range(200):
            self._leader_ready()
            if not self._observer_ready():
                self._leader_ready()
                if self.observer is None or self.observer.ready().empty:
                    break

    def run(self, until: int, step_ms: int = 50) -> None:
        while self.now < until:
            self.step(self.now + step_ms)

    def propose(self, records) -> None:  # noqa: ANN001
        self.leader.propose_records(list(records), self.now)
        self.step(self.now)


def story_records():  # noqa: ANN201
    return [b.records for b in cluster_story() if not b.control]


def test_observer_follows_the_committed_log() -> None:
    net = Net()
    net.start_observer()
    for recs in story_records():
        net.propose(recs)
        net.run(net.now + 100)
    net.run(net.now + 2000)
    hw = net.leader.high_watermark
    assert net.observer is not None and net.observer.state_name == "observer"
    assert net.observer.leader_id == LEADER
    assert net.applier.committed_offset == hw - 1
    assert net.observer.high_watermark == hw
    expected = committed_image(net.leader_log, hw)
    assert net.applier.image.to_dict() == expected.to_dict()
    story = story_image(cluster_story())
    assert net.applier.image.state_equals(story)
    # observers never count toward the high watermark: the leader lists us as one
    desc = net.leader.describe(net.now)
    assert [o["node_id"] for o in desc["observers"]] == [OBSERVER]


def test_observer_loads_a_snapshot_when_behind_the_log_start() -> None:
    net = Net()
    for recs in story_records():
        net.propose(recs)
    net.run(net.now + 500)
    hw = net.leader.high_watermark
    image = committed_image(net.leader_log, hw)
    sid = SnapshotId(hw, net.leader.epoch)
    net.leader_log.create_snapshot(sid, snapshot_bytes(image, sid))
    net.leader_log.delete_segments_below(hw)
    assert net.leader_log.start_offset == hw
    # more records after the snapshot
    net.propose([NoOpRecord()])
    net.start_observer()
    net.run(net.now + 2000)
    assert net.applier.snapshots_loaded == 1
    hw2 = net.leader.high_watermark
    assert net.applier.committed_offset == hw2 - 1
    assert net.applier.image.state_equals(image)
    assert net.applier.image.offset == hw2 - 1


def test_applier_trims_the_in_memory_log() -> None:
    net = Net()
    net.start_observer()
    for _ in range(40):
        net.propose([NoOpRecord()])
    net.run(net.now + 1000)
    assert net.applier.committed_offset == net.leader.high_watermark - 1
    assert net.obs_log.end_offset - net.obs_log.start_offset <= 8 + 1
    # and it keeps following after trimming
    net.propose([NoOpRecord()])
    net.run(net.now + 1000)
    assert net.applier.committed_offset == net.leader.high_watermark - 1


def test_observer_recovers_after_lost_requests() -> None:
    net = Net()
    net.start_observer()
    net.drop = True
    net.propose([NoOpRecord()])
    net.run(net.now + 3000)
    assert net.applier.committed_offset == -1
    net.drop = False
    net.run(net.now + 5000)
    assert net.applier.committed_offset == net.leader.high_watermark - 1


def test_leader_index_follows_partition_changes() -> None:
    applier = MetadataApplier()
    for b in cluster_story():
        applier.image.replay_batch(b.base_offset, b.records, b.append_time_ms)
    index = applier.index
    fresh = LeaderIndex()
    fresh.rebuild(applier.image)
    assert {k: v for k, v in index.led_by.items() if v} == {
        k: v for k, v in fresh.led_by.items() if v
    }
    for t in applier.image.topics.values():
        for pid, p in t.partitions.items():
            if p.leader >= 0:
                assert (t.topic_id, pid) in index.leads(p.leader)


def test_the_offset_a_broker_reports_is_never_inside_an_open_transaction() -> None:
    """A transaction's records apply at its end: a broker that reported an offset
    past its BeginTransactionRecord would tell the controller it had changes it
    has not (a controlled shutdown granted, or an unfence, too early). It reports
    the offset before the Begin until the end, as a Kafka broker publishes."""
    a = MetadataApplier()
    a.apply_batch(0, [NoOpRecord(), NoOpRecord()], 0)
    assert a.committed_offset == 1
    a.apply_batch(2, [NoOpRecord(), BeginTransactionRecord("t"), NoOpRecord()], 0)
    assert a.image.offset == 4 and a.committed_offset == 2
    a.apply_batch(5, [NoOpRecord(), NoOpRecord()], 0)  # still inside
    assert a.committed_offset == 2
    a.apply_batch(7, [EndTransactionRecord(), NoOpRecord()], 0)
    assert a.committed_offset == 8
    # an end and a new begin in one batch: the offset between them
    a.apply_batch(9, [BeginTransactionRecord("u"), EndTransactionRecord(), NoOpRecord()], 0)
    assert a.committed_offset == 11
    a.apply_batch(12, [NoOpRecord(), BeginTransactionRecord("v"), NoOpRecord()], 0)
    assert a.committed_offset == 12
    a.apply_batch(15, [AbortTransactionRecord()], 0)
    assert a.committed_offset == 15


def test_malformed_snapshot_is_refused() -> None:
    data = encode_batch(0, 1, 0, [SnapshotHeader(0)], True)
    with pytest.raises(MetadataLogError):
        snapshot_records(data, "x")
