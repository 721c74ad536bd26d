"""The deployed controller quorum in a deterministic simulation, one seed.

What runs is the code a `kraft controller` process runs, minus the HTTP
listener: `ControllerNode` (kraft/server/node.py: the RaftListener glue, the
standby's chunked replay, snapshots and trimming) with its real `RaftClient`
driver, its real `ControllerService` event queue, commit waiting and deadlines,
its real `FileReplicatedLog` over metadata_log's FileLog (write, flush-in-a-job,
fsync ordering, recovery after a crash) and its real quorum-state file. Only the
world around it is simulated, all from one seed:

- time and scheduling: one SimLoop (tests/dsim/loop.py), virtual time, no
  thread, no socket, no sleep;
- the network: SimTransport (tests/dsim/net.py) through the real wire codec,
  with delays, drops, slow paths and partitions that include the brokers;
- the disk: real files whose durability SimDisk (tests/dsim/disk.py) decides: a
  crash keeps what was fsynced (plus sometimes a torn tail), an fsync can fail
  (the node must stop and never retry), flushes can stall;
- brokers that register and heartbeat through the routes' own service wrapper
  (`_RoutesService`), fall silent, shut down in a controlled way and register
  again; an admin that creates topics.

Invariants, checked as events happen and at the end:
- at most one leader per epoch;
- every node hands the listener the same batch at the same offset (committed
  prefixes never diverge nor change, across crashes and snapshot loads);
- an acknowledged registration or topic creation is in the committed log (a
  reply means committed: ControllerService's commit handling);
- no controller fences a broker that heartbeat to it, while it was active,
  within the session timeout (nor within a session of its activation or the
  broker's registration);
- in every controller's image no partition is led by a fenced or unregistered
  broker and every leader is in its ISR;
- committed images are equal at equal offsets, and equal on every node at the end;
- a failed fsync stops the node and is never retried by it;
- once the faults stop, a leader is elected and every node converges on one
  more acknowledged write within LIVENESS_BOUND_MS.

The trace (leader changes, commits, faults, acks) is hashed; the same seed gives
the same hash under any PYTHONHASHSEED (tests/dsim/test_dsim.py checks it).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import hashlib
import logging
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.controller.errors import ApiError
from kraft.controller.requests import (
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    RegisterBrokerRequest,
)
from kraft.raft.state import LeaderAndEpoch
from kraft.raft_shell.driver import CommittedBatch
from kraft.server.node import (
    META_PROPERTIES,
    ControllerNode,
    NodeSettings,
    _RoutesService,
    _write_meta,
    derive_cluster_id,
)
from kraft.server.routes import HEARTBEAT, heartbeat_command
from metadata_log.image import MetadataImage
from metadata_log.records import (
    Endpoint,
    RegisterBrokerRecord,
    TopicRecord,
)
from metadata_log.snapshot import SnapshotId
from tests.dsim.disk import SimDisk
from tests.dsim.loop import OWNER, SimLoop
from tests.dsim.net import NetParams, SimNetwork, SimTransport
from tests.sim.simulator import InvariantViolation

WALL_ORIGIN_MS = 1_700_000_000_000  # the simulated wall clock at time 0
BROKER_BASE_ID = 10
LIVENESS_BOUND_MS = 40_000
FAULT_KINDS = ("drop", "reorder", "partition", "crash", "flush_stall", "fsync_fail", "silence")


def _scratch_root() -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kraft-dsim-", dir=base))


def _digest(img: MetadataImage) -> bytes:
    return hashlib.sha1(repr((img.to_dict(), img.in_transaction)).encode()).digest()


@dataclass
class Params:
    n_voters: int
    n_brokers: int
    faults: frozenset[str]
    duration_ms: int
    session_ms: int
    heartbeat_ms: int
    raft: dict[str, int]
    snapshot_bytes: int
    flush_ms: tuple[int, int]
    stall: float
    crash_every: tuple[int, int]
    leader_crash: float


def build_params(seed: int) -> Params:
    rng = random.Random(f"dsim-params/{seed}")
    faults = frozenset(
        FAULT_KINDS if seed % 8 == 0 else [k for k in FAULT_KINDS if rng.random() < 0.55]
    )
    fast = rng.random() < 0.5
    raft = (
        {"election": 300, "fetch": 600, "wait": 100, "request": 300}
        if fast
        else {"election": 1000, "fetch": 2000, "wait": 500, "request": 2000}
    )
    return Params(
        n_voters=rng.choice([3, 3, 5]),
        n_brokers=rng.randint(3, 5),
        faults=faults,
        duration_ms=rng.randint(8_000, 15_000),
        session_ms=rng.choice([1_500, 3_000]),
        heartbeat_ms=rng.choice([200, 500]),
        raft=raft,
        snapshot_bytes=rng.choice([4_000, 20_000, 10_000_000]),
        flush_ms=(0, rng.choice([1, 5, 20])),
        stall=rng.choice([0.02, 0.1]) if "flush_stall" in faults else 0.0,
        crash_every=rng.choice([(300, 1500), (1000, 4000)]),
        leader_crash=rng.choice([0.3, 0.7]),
    )


@dataclass
class Broker:
    bid: int
    target: int
    process: int = 0
    epoch: int | None = None
    metadata_offset: int = -1
    silent_until: int = 0
    fenced: bool = True
    shutting_down: bool = False


@dataclass
class SeedResult:
    seed: int
    faults: tuple[str, ...]
    stats: dict[str, int]
    trace_hash: str
    trace: list[str] = field(default_factory=list)


class _Observer:
    """The node's RaftListener, seen by the simulation first (then the node's own)."""

    def __init__(self, sim: DeployedSim, nid: int, node: ControllerNode) -> None:
        self.sim, self.nid, self.node = sim, nid, node

    def handle_load_snapshot(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.sim.event(f"n{self.nid} load-snapshot {snapshot_id.end_offset}")
        self.sim.count("snapshot_load")
        self.node.handle_load_snapshot(snapshot_id, path)

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.sim.on_commit(self.nid, batch)
        self.node.handle_commit(batch)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.node.handle_leader_change(leader)


class DeployedSim:
    def __init__(self, seed: int, params: Params, root: Path, trace: bool = False) -> None:
        self.seed = seed
        self.p = params
        self.rng = random.Random(f"dsim/{seed}")
        self.loop = SimLoop(self._executor_delay)
        self.disk = SimDisk(root, random.Random(f"dsim-disk/{seed}"))
        self.disk.on_event = self.event
        self.net = SimNetwork(
            random.Random(f"dsim-net/{seed}"),
            NetParams(
                max_delay_ms=self.rng.choice([2, 5, 15]),
                drop=self.rng.choice([0.01, 0.05]) if "drop" in params.faults else 0.0,
                slow=self.rng.choice([0.02, 0.1]) if "reorder" in params.faults else 0.0,
            ),
        )
        self.voters = list(range(1, params.n_voters + 1))
        self.voter_addrs = {i: (f"n{i}", 9000 + i) for i in self.voters}
        self.cluster_id = derive_cluster_id(self.voter_addrs)
        self.nodes: dict[int, ControllerNode | None] = dict.fromkeys(self.voters)
        self.booting: set[int] = set()
        self.keep_trace = trace
        self.trace: list[str] = []
        self._hash = hashlib.sha256()
        self.stats: dict[str, int] = {}
        self.violations: list[str] = []
        self.boot_errors: list[str] = []
        self.faults_on = True
        # checkers' state
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.committed: dict[int, tuple[int, bytes]] = {}  # base -> (last, digest)
        self.records: dict[int, Any] = {}  # offset -> committed record (first delivery)
        self.image_digests: dict[int, bytes] = {}
        self.contacts: dict[tuple[int, int, int], int] = {}  # (nid, broker, epoch) -> ms
        self.activated_at: dict[int, int] = {}
        self.acked: list[tuple[str, Any]] = []
        self.brokers = [
            Broker(BROKER_BASE_ID + i, self.rng.choice(self.voters))
            for i in range(params.n_brokers)
        ]

    # ----------------------------------------------------------------- plumbing

    def now(self) -> int:
        return int(round(self.loop.time() * 1000))

    def wall(self) -> int:
        return WALL_ORIGIN_MS + self.now()

    def event(self, what: str) -> None:
        line = f"{self.now()} {what}"
        self._hash.update(line.encode() + b"\n")
        if self.keep_trace:
            self.trace.append(line)

    def count(self, k: str) -> None:
        self.stats[k] = self.stats.get(k, 0) + 1

    def fail(self, what: str) -> None:
        """Record a violation and raise it. Raised inside the product's code (a
        checker hook), it may be caught there (the event queue answers a failing
        command UNKNOWN_SERVER_ERROR): the recorded one ends the run regardless."""
        msg = f"seed {self.seed} at {self.now()} ms: {what} (replay with SIM_SEED={self.seed})"
        self.violations.append(msg)
        raise InvariantViolation(msg)

    def raise_recorded(self) -> None:
        if self.violations:
            raise InvariantViolation(self.violations[0])

    def _executor_delay(self, owner: int | None) -> float:
        lo, hi = self.p.flush_ms
        ms = self.rng.randint(lo, hi)
        if self.faults_on and self.p.stall and self.rng.random() < self.p.stall:
            self.count("flush_stall")
            ms += self.rng.randint(200, 2500)
        return ms / 1000

    def spawn(self, coro: Any, owner: int | None = None) -> asyncio.Task[Any]:
        ctx = contextvars.copy_context()
        ctx.run(OWNER.set, owner)
        return self.loop.create_task(coro, context=ctx)

    def later(self, ms: int, fn: Any, *args: Any) -> None:
        ctx = contextvars.copy_context()
        ctx.run(OWNER.set, None)
        self.loop.call_at(self.loop.time() + ms / 1000, fn, *args, context=ctx)

    # ----------------------------------------------------------------- nodes

    def _format(self, nid: int) -> None:
        d = self.disk.node_dir(nid)
        d.mkdir(parents=True)
        raw = hashlib.sha256(f"dir/{self.seed}/{nid}".encode()).digest()[:16]
        dir_id = "A" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()[1:]
        _write_meta(d / META_PROPERTIES, self.cluster_id, nid, dir_id)

    def _settings(self, nid: int) -> NodeSettings:
        r = self.p.raft
        config = {
            "controller.quorum.election.timeout.ms": r["election"],
            "controller.quorum.fetch.timeout.ms": r["fetch"],
            "controller.quorum.fetch.max.wait.ms": r["wait"],
            "controller.quorum.request.timeout.ms": r["request"],
            "broker.session.timeout.ms": self.p.session_ms,
            "broker.heartbeat.interval.ms": self.p.heartbeat_ms,
            "request.timeout.ms": 5_000,
            "metadata.log.max.record.bytes.between.snapshots": self.p.snapshot_bytes,
            "metadata.max.retention.bytes": self.p.snapshot_bytes // 2,
            "metadata.log.segment.bytes": 16 * 1024,
        }
        return NodeSettings(
            nid,
            self.voter_addrs,
            self.disk.node_dir(nid),
            config=config,  # type: ignore[arg-type]  # anything with .get(key, default)
        )

    def start(self, nid: int) -> None:
        if self.nodes[nid] is not None or nid in self.booting:
            return
        self.booting.add(nid)
        self.disk.restarted(nid)
        self.loop.dead.discard(nid)
        self.spawn(self._boot(nid), owner=nid)

    async def _boot(self, nid: int) -> None:
        try:
            await self._boot_node(nid)
        except InvariantViolation:
            raise
        except Exception as e:  # a restart that fails is a finding, never a silent hang
            if self.disk.failed.get(nid, (None,))[0] == self.disk.incarnation[nid]:
                # the injected fsync failure hit the start-up's recovery: exit, restart
                self.event(f"n{nid} start-up failed on the fsync fault")
                self.booting.discard(nid)
                self.disk.down.add(nid)
                self.later(self.rng.randint(100, 1500), self.start, nid)
                return
            self.boot_errors.append(f"n{nid} failed to start: {type(e).__name__}: {e}")
            self.event(f"n{nid} boot failed {type(e).__name__}")

    async def _boot_node(self, nid: int) -> None:
        node = ControllerNode(
            self._settings(nid),
            clock=self.now,
            timestamp=self.wall,
            rng=random.Random(f"dsim-node/{self.seed}/{nid}/{self.disk.incarnation[nid]}"),
            transport=SimTransport(self.net, nid),
        )
        node.raft.listener = _Observer(self, nid, node)
        on_state = node.raft.on_state_change

        def state_change(state: str, epoch: int, leader_id: int | None) -> None:
            self.event(f"n{nid} {state} epoch={epoch} leader={leader_id}")
            if state == "leader":
                known = self.leaders.setdefault(epoch, nid)
                if known != nid:
                    self.fail(f"two leaders in epoch {epoch}: n{known} and n{nid}")
            if on_state is not None:
                on_state(state, epoch, leader_id)

        node.raft.on_state_change = state_change
        self._watch_service(nid, node)
        node.service.start()
        await node.raft.start(self.now())
        self.booting.discard(nid)
        self.nodes[nid] = node
        self.net.nodes[nid] = node
        self.event(f"n{nid} up")
        failed = node.raft.failed
        assert failed is not None
        failed.add_done_callback(lambda f, n=node: self._fatal(nid, n, f))

    def _watch_service(self, nid: int, node: ControllerNode) -> None:
        """Observe activations and fence decisions of this node's controller."""
        service, controller = node.service, node.controller
        became = service.on_became_leader

        def on_became_leader() -> None:
            self.activated_at[nid] = self.now()
            self.event(f"n{nid} activated")
            became()

        service.on_became_leader = on_became_leader  # type: ignore[method-assign]
        fence = controller.maybe_fence_stale_broker

        def maybe_fence(now_ms: int) -> Any:
            before = {b: r.broker_epoch for b, r in controller.image.brokers.items()}
            result = fence(now_ms)
            if result is not None and result.reply:
                bid = result.reply["fenced_broker"]
                self._check_fence(nid, now_ms, bid, before.get(bid, -1))
            return result

        controller.maybe_fence_stale_broker = maybe_fence  # type: ignore[method-assign]

    def _fatal(self, nid: int, node: ControllerNode, f: asyncio.Future[Any]) -> None:
        if f.cancelled() or self.nodes.get(nid) is not node:
            return
        self.event(f"n{nid} fatal {type(f.result()).__name__}")
        self.count("fatal")
        # The process exits (kraft controller stops on raft.failed) and is restarted.
        self.later(self.rng.randint(1, 30), self.crash, nid)
        self.later(self.rng.randint(100, 1500), self.start, nid)

    def crash(self, nid: int) -> None:
        node = self.nodes[nid]
        if node is None:
            return
        self.nodes[nid] = None
        self.net.nodes[nid] = None
        self.loop.dead.add(nid)
        self.disk.down.add(nid)
        self.event(f"n{nid} crash")
        self.count("crash")
        tasks = self.loop.kill(nid)
        self.spawn(self._bury(nid, node, tasks))

    async def _bury(self, nid: int, node: ControllerNode, tasks: list[Any]) -> None:
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        node.log.close(flush=False)
        self.disk.crash(nid, torn=0.3)

    # ----------------------------------------------------------------- checks

    def on_commit(self, nid: int, batch: CommittedBatch) -> None:
        h = batch.header
        raw = batch._buf[batch._pos : batch._pos + h.length]
        d = hashlib.sha1(raw).digest()
        known = self.committed.setdefault(h.base_offset, (h.last_offset, d))
        if known != (h.last_offset, d):
            self.fail(f"n{nid} committed a different batch at {h.base_offset}")
        if h.base_offset not in self.records and not h.control:
            for i, rec in enumerate(batch.records):
                self.records[h.base_offset + i] = rec
        self.event(f"n{nid} commit {h.base_offset}..{h.last_offset} {d.hex()[:8]}")

    def _check_fence(self, nid: int, now: int, bid: int, epoch: int) -> None:
        self.event(f"n{nid} fences b{bid} epoch {epoch}")
        self.count("fence")
        last = max(
            self.contacts.get((nid, bid, epoch), -(10**9)),
            self.activated_at.get(nid, -(10**9)),
        )
        if now - last < self.p.session_ms:
            self.fail(
                f"n{nid} fenced broker {bid} (epoch {epoch}) {now - last} ms after "
                f"its last contact or the activation (session {self.p.session_ms} ms)"
            )

    def check_images(self) -> None:
        for nid, node in self.nodes.items():
            if node is None:
                continue
            img = node.controller.image
            for topic in img.topics.values():
                for pid, p in topic.partitions.items():
                    if p.leader < 0:
                        continue
                    b = img.brokers.get(p.leader)
                    where = f"n{nid} image at {img.offset}: {topic.name}-{pid} {p}"
                    if b is None or b.fenced:
                        self.fail(f"{where}: led by a fenced or unregistered broker")
                    if p.leader not in p.isr:
                        self.fail(f"{where}: its leader is not in its ISR")
            if not node.controller.active and img.offset == node.raft.delivered_offset - 1:
                d = _digest(img)
                if self.image_digests.setdefault(img.offset, d) != d:
                    self.fail(f"n{nid} committed image at {img.offset} differs from another's")

    def check_acked(self) -> None:
        topics = {(r.name, r.topic_id) for r in self.records.values() if isinstance(r, TopicRecord)}
        for kind, what in self.acked:
            if kind == "register":
                bid, epoch = what
                rec = self.records.get(epoch)
                if not (
                    isinstance(rec, RegisterBrokerRecord)
                    and rec.broker_id == bid
                    and rec.broker_epoch == epoch
                ):
                    self.fail(f"acknowledged registration of b{bid} at {epoch} is not committed")
            elif kind == "topic" and what not in topics:
                self.fail(f"acknowledged topic {what} is not committed")

    # ----------------------------------------------------------------- clients

    async def request(self, src: int, nid: int, run: Any, timeout_s: float = 7.0) -> Any:
        """("ok", reply, offset) | ("err", code, leader hint) | ("down",)."""

        async def on_node(node: ControllerNode) -> Any:
            try:
                reply = await run(_RoutesService(node), node)
            except ApiError as e:
                return ("err", e.code, getattr(e, "extra", {}).get("leader_id"))
            return ("ok", reply, node.raft.delivered_offset - 1)

        try:
            return await self.net.call(src, nid, on_node, timeout_s)
        except ConnectionError:
            return ("down",)

    async def broker_loop(self, b: Broker) -> None:
        while True:
            await asyncio.sleep(self.p.heartbeat_ms / 1000)
            now = self.now()
            if now < b.silent_until:
                continue
            if b.epoch is None:
                await self._register(b)
            else:
                await self._heartbeat(b)

    def _follow(self, b: Broker, out: tuple[Any, ...]) -> None:
        if out[0] == "err" and out[1] == "NOT_CONTROLLER" and out[2] is not None:
            b.target = out[2]
        elif out[0] != "ok":
            b.target = self.voters[(self.voters.index(b.target) + 1) % len(self.voters)]

    async def _register(self, b: Broker) -> None:
        incarnation = f"00000000-0000-4000-8000-{b.bid:04d}{b.process:08d}"
        req = RegisterBrokerRequest(
            b.bid,
            self.cluster_id,
            incarnation,
            (Endpoint("PLAINTEXT", f"b{b.bid}", 9092),),
            None,
            (),
        )
        sim = self

        async def run(service: _RoutesService, node: ControllerNode) -> Any:
            nid = node.node_id

            def generate(c: Any, now: int, off: int) -> Any:
                result = c.register_broker(req, now, off)
                sim.contacts[(nid, b.bid, result.reply["broker_epoch"])] = now
                return result

            return await service.write("register-broker", generate)

        out = await self.request(b.bid, b.target, run)
        if out[0] == "ok":
            b.epoch = out[1]["broker_epoch"]
            b.fenced = True
            self.acked.append(("register", (b.bid, b.epoch)))
            self.event(f"b{b.bid} registered epoch {b.epoch}")
            self.count("registered")
        self._follow(b, out)

    async def _heartbeat(self, b: Broker) -> None:
        assert b.epoch is not None
        req = BrokerHeartbeatRequest(b.bid, b.epoch, b.metadata_offset, False, b.shutting_down)
        sim = self

        async def run(service: _RoutesService, node: ControllerNode) -> Any:
            # the heartbeat route's steps (kraft/server/routes.py), contact first
            if node.service.active:
                sim.contacts[(node.node_id, b.bid, b.epoch)] = sim.now()
            service.note_heartbeat_contact(req.broker_id, req.broker_epoch)
            return await service.write(HEARTBEAT, heartbeat_command(req), priority=True)

        out = await self.request(b.bid, b.target, run, self.p.session_ms / 3000)
        if out[0] == "ok":
            b.metadata_offset = max(b.metadata_offset, out[2])
            if b.fenced and not out[1]["is_fenced"]:
                self.count("unfenced")
            b.fenced = out[1]["is_fenced"]
            if out[1]["should_shut_down"]:
                # a controlled shutdown done: the process exits, a new one registers later
                self.event(f"b{b.bid} shut down")
                self.count("controlled_shutdown" if b.shutting_down else "shutdown_told")
                b.process += 1
                b.epoch, b.fenced, b.shutting_down = None, True, False
                b.silent_until = self.now() + self.rng.randint(100, 2000)
        elif out[0] == "err" and out[1] == "STALE_BROKER_EPOCH":
            b.epoch = None
        self._follow(b, out)

    async def admin_loop(self) -> None:
        k = 0
        target = self.voters[0]
        while True:
            await asyncio.sleep(self.rng.randint(300, 1500) / 1000)
            k += 1
            done = await self.create_topic(f"t{k}", target)
            if done is not None and done[0] == "err" and done[2] is not None:
                target = done[2]
            elif done is None or done[0] != "ok":
                target = self.rng.choice(self.voters)

    async def create_topic(self, name: str, target: int) -> Any:
        req = CreateTopicRequest(name, self.rng.randint(1, 3), 2, None, {})

        async def run(service: _RoutesService, node: ControllerNode) -> Any:
            return await service.write("create-topic", lambda c, now, off: c.create_topic(req, now))

        out = await self.request(-1, target, run)
        if out[0] == "ok":
            self.acked.append(("topic", (name, out[1]["topic_id"])))
            self.event(f"topic {name} created {out[1]['topic_id']}")
            self.count("topic")
        else:
            self.count(f"admin:{out[1] if out[0] == 'err' else out[0]}")
        return out

    # ----------------------------------------------------------------- faults

    def leader(self) -> int | None:
        for nid, node in self.nodes.items():
            if node is not None and node.raft.is_leader:
                return nid
        return None

    async def fault_loop(self) -> None:
        f, p = self.p.faults, self.p
        kinds = [k for k in ("crash", "partition", "fsync_fail", "silence") if k in f]
        kinds.append("shutdown")  # a broker's controlled shutdown, in every seed
        while self.faults_on:
            lo, hi = p.crash_every
            await asyncio.sleep(self.rng.randint(lo, hi) / 1000)
            if not self.faults_on:
                return
            kind = self.rng.choice(kinds)
            up = [n for n, node in self.nodes.items() if node is not None]
            if kind == "crash" and up:
                lead = self.leader()
                nid = lead if lead is not None and self.rng.random() < p.leader_crash else None
                nid = nid if nid is not None else self.rng.choice(up)
                self.crash(nid)
                self.later(self.rng.randint(20, 2000), self.start, nid)
            elif kind == "partition" and not self.net.cut:
                self._partition()
            elif kind == "fsync_fail" and up:
                nid = self.rng.choice(up)
                self.disk.fail_next.add(nid)
                self.event(f"n{nid} next fsync fails")
                self.count("fault:fsync_fail")
            elif kind == "shutdown":
                b = self.rng.choice(self.brokers)
                if b.epoch is not None and not b.shutting_down:
                    b.shutting_down = True
                    self.event(f"b{b.bid} controlled shutdown")
            elif kind == "silence":
                b = self.rng.choice(self.brokers)
                long = self.rng.random() < 0.5
                ms = p.session_ms + self.rng.randint(500, 2000) if long else p.session_ms // 3
                b.silent_until = self.now() + ms
                self.event(f"b{b.bid} silent {ms} ms")
                self.count("fault:silence")

    def _partition(self) -> None:
        everyone = self.voters + [b.bid for b in self.brokers] + [-1]
        side = {x: self.rng.random() < 0.5 for x in everyone}
        self.net.cut = {(a, b) for a in everyone for b in everyone if side[a] != side[b]}
        self.event("partition " + ",".join(str(x) for x in everyone if side[x]))
        self.count("fault:partition")
        self.later(self.rng.randint(300, 4000), self._heal)

    def _heal(self) -> None:
        if self.net.cut:
            self.net.cut = set()
            self.event("heal")

    async def checker_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            try:
                self.raise_recorded()
                self.check_images()
            except InvariantViolation:
                self.loop.stop()  # run_seed raises the recorded violation
                return

    # ----------------------------------------------------------------- the run

    async def main(self) -> None:
        for nid in self.voters:
            self._format(nid)  # with the disk installed: meta.properties is durable
        for nid in self.voters:
            self.start(nid)
        helpers = [self.spawn(self.broker_loop(b)) for b in self.brokers]
        helpers.append(self.spawn(self.admin_loop()))
        helpers.append(self.spawn(self.checker_loop()))
        helpers.append(self.spawn(self.fault_loop()))
        await asyncio.sleep(self.p.duration_ms / 1000)
        # ---- the faults stop: heal, restart, converge
        self.faults_on = False
        self.event("faults end")
        self._heal()
        self.net.p.drop = self.net.p.slow = 0.0
        self.disk.fail_next.clear()
        for b in self.brokers:
            b.silent_until = 0
            b.shutting_down = False
        for nid in self.voters:
            self.start(nid)
        await self._converge()
        for t in helpers:
            t.cancel()
        await asyncio.wait(helpers, timeout=10)
        self.check_images()
        self.check_acked()
        if self.disk.retried_after_failure:
            self.fail(self.disk.retried_after_failure[0])
        for nid in self.voters:
            node = self.nodes[nid]
            assert node is not None
            self.event(
                f"n{nid} end {node.raft.delivered_offset} {_digest(node.controller.image).hex()[:8]}"
            )
        # The active controller may run ahead of the commit (a NoOp): equal offsets only.
        by_offset: dict[int, set[bytes]] = {}
        for n in self.nodes.values():
            assert n is not None
            by_offset.setdefault(n.controller.image.offset, set()).add(_digest(n.controller.image))
        if any(len(d) > 1 for d in by_offset.values()):
            self.fail(f"the controllers' images differ at the end: {sorted(by_offset)}")
        for nid in self.voters:
            self.crash(nid)
        await asyncio.sleep(1.5)  # the crashed nodes' tasks end

    async def _converge(self) -> None:
        deadline = self.now() + LIVENESS_BOUND_MS
        k = 0
        while self.now() < deadline:
            if self.boot_errors:
                self.fail(self.boot_errors[0])
            lead = self.leader()
            if lead is None:
                await asyncio.sleep(0.05)
                continue
            k += 1
            out = await self.create_topic(f"final{k}", lead)
            if out[0] != "ok":
                await asyncio.sleep(0.05)
                continue
            target = self.nodes[lead].raft.delivered_offset if self.nodes[lead] else 0
            while self.now() < deadline:
                nodes = list(self.nodes.values())
                caught_up = all(
                    n is not None
                    and n.raft.delivered_offset >= target
                    and n.controller.image.offset >= target - 1
                    for n in nodes
                )
                if caught_up:
                    return
                await asyncio.sleep(0.05)
        self.fail(
            f"no convergence within {LIVENESS_BOUND_MS} ms after the faults stopped: "
            + str({n: (x.raft.delivered_offset if x else None) for n, x in self.nodes.items()})
        )


def run_seed(seed: int, trace: bool = False) -> SeedResult:
    params = build_params(seed)
    root = _scratch_root()
    sim = DeployedSim(seed, params, root, trace)
    asyncio.set_event_loop(sim.loop)
    sim.loop.limit_s = (params.duration_ms + LIVENESS_BOUND_MS) / 1000 + 60
    logging.disable(logging.CRITICAL)
    try:
        with sim.disk.installed():
            try:
                sim.loop.run_until_complete(sim.main())
            except Exception:
                sim.raise_recorded()  # the first violation, if one led to this
                raise
        sim.raise_recorded()
    finally:
        logging.disable(logging.NOTSET)
        # Python 3.11's wait_for may swallow a cancellation: cancel again, bounded.
        sim.loop.limit_s = float("inf")
        for _ in range(5):
            pending = asyncio.all_tasks(sim.loop)
            if not pending:
                break
            for t in pending:
                t.cancel()
            sim.loop.run_until_complete(asyncio.wait(pending, timeout=1))
        sim.loop.close()
        asyncio.set_event_loop(None)
        shutil.rmtree(root, ignore_errors=True)
    stats = dict(sim.stats)
    for k, v in sim.net.stats.items():
        stats[k] = stats.get(k, 0) + v
    return SeedResult(seed, tuple(sorted(params.faults)), stats, sim._hash.hexdigest(), sim.trace)
