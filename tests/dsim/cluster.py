"""The deployed controller quorum in a deterministic simulation, one seed.

What runs is the code a `kraft controller` process runs, minus the HTTP
listener: `ControllerNode` (kraft/server/node.py: the RaftListener glue, the
standby's chunked replay, snapshots and trimming) with its real `RaftClient`
driver, its real `ControllerService` event queue, commit waiting, deadlines,
fence checks, idle NoOps, leader balancing and large writes as metadata
transactions, its real `FileReplicatedLog` over metadata_log's FileLog (write,
flush-in-a-job, fsync ordering, recovery after a crash) and its real
quorum-state file. Only the world around it is simulated, all from one seed:

- time and scheduling: one SimLoop (tests/dsim/loop.py), virtual time, no
  thread, no socket, no sleep; a controller process can be paused (a busy or
  stalled process: its callbacks wait, everyone else runs);
- the network: SimTransport (tests/dsim/net.py) through the real wire codec,
  with delays, drops, slow paths and partitions that include the brokers;
- the disk: real files whose durability SimDisk (tests/dsim/disk.py) decides: a
  crash keeps what was fsynced (plus sometimes a torn tail), an fsync can fail
  (the node must stop and never retry), flushes can stall.

The scripted actors (tests/dsim/actors.py) drive it: broker agents (register,
heartbeat, follow NOT_CONTROLLER, AlterPartition from their view of the log,
silences, crashes, controlled shutdowns, want_fence), an admin client (topics,
partitions, configs, elections, unregistrations, reassignments), a fault
injector, and the checker (tests/dsim/checks.py: what is checked). Commands go
through the routes' own service wrapper with the routes' command names.

The run: SimParams from the seed, the faults for `duration_ms`, then healing:
a leader is elected and every node converges on one more acknowledged write,
every broker is back registered and unfenced, and a broker that falls silent is
fenced within its session (plus a second) with its leaderships moved, all within
LIVENESS_BOUND_MS.

The trace (leader changes, commits, faults, acks) is hashed; the same seed gives
the same hash under any PYTHONHASHSEED (tests/dsim/test_dsim.py checks it).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import dataclasses
import hashlib
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.controller.errors import ApiError
from kraft.raft.state import LeaderAndEpoch
from kraft.raft_shell.driver import CommittedBatch
from kraft.server.controller_service import ControllerService
from kraft.server.node import (
    META_PROPERTIES,
    ControllerNode,
    NodeSettings,
    _write_meta,
    derive_cluster_id,
)
from metadata_log.snapshot import SnapshotId
from tests.dsim.checks import Checker, digest
from tests.dsim.disk import SimDisk
from tests.dsim.loop import OWNER, SimLoop
from tests.dsim.net import NetParams, SimNetwork, SimTransport
from tests.sim.simulator import InvariantViolation

WALL_ORIGIN_MS = 1_700_000_000_000  # the simulated wall clock at time 0
BROKER_BASE_ID = 10
ADMIN = -1  # the admin client's network address
LIVENESS_BOUND_MS = 40_000
FAULT_KINDS = ("drop", "reorder", "partition", "crash", "flush_stall", "fsync_fail", "stall")

# ("ok", reply, committed offset) | ("err", code, leader hint) | ("down",)
Outcome = tuple[Any, ...]
Generate = Callable[[Any, int, int], Any]


def _scratch_root() -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kraft-dsim-", dir=base))


@dataclass
class Params:
    n_voters: int
    n_brokers: int
    faults: frozenset[str]
    duration_ms: int
    session_ms: int
    heartbeat_ms: int
    request_timeout_ms: int
    raft: dict[str, int]
    snapshot_bytes: int
    max_batch_bytes: int  # small: most writes become metadata transactions
    fetch_max_bytes: int  # 1: one batch a fetch, followers often hold part of a transaction
    flush_ms: tuple[int, int]
    stall: float
    crash_every: tuple[int, int]
    leader_crash: float
    elr: bool  # eligible.leader.replicas.version bootstrapped at 1
    min_isr: int
    balance_s: int  # leader.imbalance.check.interval.seconds
    balance_batch: int  # leader.imbalance.max.elections.per.batch
    big_topic: int  # partitions of one big topic (0: none): its fences are large writes


def build_params(seed: int) -> Params:
    rng = random.Random(f"dsim-params/{seed}")
    faults = frozenset(
        FAULT_KINDS if seed % 8 == 0 else [k for k in FAULT_KINDS if rng.random() < 0.5]
    )
    fast = rng.random() < 0.5
    raft = (
        {"election": 300, "fetch": 600, "wait": 100, "request": 300}
        if fast
        else {"election": 1000, "fetch": 2000, "wait": 500, "request": 2000}
    )
    session_ms, heartbeat_ms = rng.choice([(1500, 300), (2000, 450), (3000, 500)])
    return Params(
        n_voters=rng.choice([3, 3, 5]),
        n_brokers=rng.randint(3, 6),
        faults=faults,
        duration_ms=rng.randint(8_000, 14_000),
        session_ms=session_ms,
        heartbeat_ms=heartbeat_ms,
        request_timeout_ms=rng.choice([600, 1000, 3000]),
        raft=raft,
        snapshot_bytes=rng.choice([4_000, 20_000, 10_000_000]),
        max_batch_bytes=rng.choice([128, 512, 1 << 20]),
        fetch_max_bytes=rng.choice([1 << 20, 2048, 1]),
        flush_ms=(0, rng.choice([1, 5, 20])),
        stall=rng.choice([0.02, 0.1]) if "flush_stall" in faults else 0.0,
        crash_every=rng.choice([(300, 1500), (1000, 4000)]),
        leader_crash=rng.choice([0.3, 0.7]),
        elr=rng.random() < 0.75,
        min_isr=rng.choice([1, 1, 2]),
        balance_s=rng.choice([1, 3]),
        balance_batch=rng.choice([1, 3, 1000]),
        # One seed in 25: a broker in more ISRs than a replay slice (REPLAY_CHUNK), so
        # its fence is generated, appended as a transaction and replayed in slices.
        big_topic=6000 if random.Random(f"dsim-big/{seed}").random() < 0.04 else 0,
    )


@dataclass
class SeedResult:
    seed: int
    faults: tuple[str, ...]
    stats: dict[str, int]
    trace_hash: str
    trace: list[str] = field(default_factory=list)


class _Observer:
    """The node's RaftListener, seen by the checker first (then the node's own)."""

    def __init__(self, sim: DeployedSim, nid: int, node: ControllerNode) -> None:
        self.sim, self.nid, self.node = sim, nid, node

    def handle_load_snapshot(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.sim.event(f"n{self.nid} load-snapshot {snapshot_id.end_offset}")
        self.sim.count("snapshot_load")
        self.node.handle_load_snapshot(snapshot_id, path)

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.sim.checker.on_commit(self.nid, batch)
        self.node.handle_commit(batch)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.node.handle_leader_change(leader)


class DeployedSim:
    """The simulated world: controller processes, the network, the disk, the clock."""

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
        self.stall_armed: dict[int, int] = {}  # node -> ms it stalls at its next command
        self.checker = Checker(self)

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

    def format(self, nid: int) -> None:
        d = self.disk.node_dir(nid)
        d.mkdir(parents=True)
        raw = hashlib.sha256(f"dir/{self.seed}/{nid}".encode()).digest()[:16]
        dir_id = "A" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()[1:]
        _write_meta(d / META_PROPERTIES, self.cluster_id, nid, dir_id)

    def _settings(self, nid: int) -> NodeSettings:
        r, p = self.p.raft, self.p
        config = {
            "controller.quorum.election.timeout.ms": r["election"],
            "controller.quorum.fetch.timeout.ms": r["fetch"],
            "controller.quorum.fetch.max.wait.ms": r["wait"],
            "controller.quorum.request.timeout.ms": r["request"],
            "broker.session.timeout.ms": p.session_ms,
            "broker.heartbeat.interval.ms": p.heartbeat_ms,
            "request.timeout.ms": p.request_timeout_ms,
            "metadata.log.max.record.bytes.between.snapshots": p.snapshot_bytes,
            "metadata.max.retention.bytes": p.snapshot_bytes // 2,
            "metadata.log.segment.bytes": 16 * 1024,
            "min.insync.replicas": p.min_isr,
            "leader.imbalance.check.interval.seconds": p.balance_s,
            "leader.imbalance.max.elections.per.batch": p.balance_batch,
            "eligible.leader.replicas.version": 1 if p.elr else 0,
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
        # Small batches turn most writes into metadata transactions (KIP-868), and
        # small fetches leave a transaction's prefix on a follower that may lead next.
        node.service.max_batch_bytes = self.p.max_batch_bytes
        node.raft.config = dataclasses.replace(
            node.raft.config, fetch_max_bytes=self.p.fetch_max_bytes
        )
        node.raft.listener = _Observer(self, nid, node)
        self._watch_raft(nid, node)
        self._watch_appends(nid, node)
        self._watch_service(nid, node)
        self._watch_controller(nid, node)
        node.service.start()
        await node.raft.start(self.now())
        if node.controller.image.offset >= 0:
            self.count("ctl_snapshot_load")  # the controller started from a snapshot
        self.booting.discard(nid)
        self.nodes[nid] = node
        self.net.nodes[nid] = node
        self.event(f"n{nid} up")
        failed = node.raft.failed
        assert failed is not None
        failed.add_done_callback(lambda f, n=node: self._fatal(nid, n, f))

    def _watch_raft(self, nid: int, node: ControllerNode) -> None:
        on_state = node.raft.on_state_change

        def state_change(state: str, epoch: int, leader_id: int | None) -> None:
            self.event(f"n{nid} {state} epoch={epoch} leader={leader_id}")
            if state == "leader":
                self.checker.on_leader(nid, epoch)
            if on_state is not None:
                on_state(state, epoch, leader_id)

        node.raft.on_state_change = state_change

    def _watch_appends(self, nid: int, node: ControllerNode) -> None:
        """With crashes on, the active controller sometimes dies right after it
        appended a metadata transaction, perhaps before all of it is replicated:
        the next leader must abort what its predecessor left open."""
        append = node.raft.append

        def appending(batches: Any) -> Any:
            last = append(batches)
            crashes = self.faults_on and "crash" in self.p.faults
            if len(batches) > 1 and crashes and self.rng.random() < 0.5:
                self.event(f"n{nid} crashes after appending a transaction")
                self.count("fault:crash_mid_txn")
                self.later(self.rng.randint(0, 4), self.crash, nid)
                self.later(self.rng.randint(50, 1500), self.start, nid)
            return last

        node.raft.append = appending  # type: ignore[method-assign]

    def _watch_service(self, nid: int, node: ControllerNode) -> None:
        """Activations and deactivations, and the armed stall: the process pauses
        right after it queued a command, which then waits past its deadline."""
        service = node.service
        became, lost, submit = service.on_became_leader, service.on_lost_leadership, service.submit

        def on_became_leader() -> None:
            self.checker.activated_at[nid] = self.now()
            self.event(f"n{nid} activated")
            became()

        def on_lost_leadership() -> None:
            self.event(f"n{nid} deactivated")
            self.count("deactivation")
            lost()

        def stalling_submit(name: str, generate: Any, *, priority: bool = False) -> Any:
            fut = submit(name, generate, priority=priority)
            ms = None if priority else self.stall_armed.pop(nid, None)
            if ms is not None:
                self.event(f"n{nid} stalls {ms} ms after queuing {name}")
                self.count("fault:stall")
                self.loop.pause(nid, ms / 1000)
            return fut

        service.on_became_leader = on_became_leader  # type: ignore[method-assign]
        service.on_lost_leadership = on_lost_leadership  # type: ignore[method-assign]
        service.submit = stalling_submit  # type: ignore[method-assign]

    def _watch_controller(self, nid: int, node: ControllerNode) -> None:
        """The active controller's own decisions: session fences (the one fence
        method production calls) and leader-balancing batches."""
        controller = node.controller
        fence, balance = (
            controller.maybe_fence_stale_broker,
            controller.maybe_balance_partition_leaders,
        )

        def maybe_fence(now_ms: int) -> Any:
            before = {b: r.broker_epoch for b, r in controller.image.brokers.items()}
            result = fence(now_ms)
            if result is not None and result.reply:
                bid = result.reply["fenced_broker"]
                self.checker.on_fence(nid, now_ms, bid, before.get(bid, -1))
            return result

        def maybe_balance(now_ms: int) -> Any:
            result = balance(now_ms)
            if result is not None and result.records:
                self.stats["rebalance_election"] = self.stats.get("rebalance_election", 0) + len(
                    result.records
                )
                if result.reply.get("more"):
                    self.count("rebalance_more")
            return result

        controller.maybe_fence_stale_broker = maybe_fence  # type: ignore[method-assign]
        controller.maybe_balance_partition_leaders = maybe_balance  # type: ignore[method-assign]

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

    # ----------------------------------------------------------------- views

    def leader(self) -> int | None:
        for nid, node in self.nodes.items():
            if node is not None and node.raft.is_leader:
                return nid
        return None

    def active(self) -> ControllerNode | None:
        for node in self.nodes.values():
            if node is not None and node.controller.active:
                return node
        return None

    def view(self) -> Any:
        """The committed metadata, as a broker following the log sees it."""
        return self.checker.reference

    # ----------------------------------------------------------------- requests

    @property
    def client_timeout_s(self) -> float:
        """A client's wait: past the service's own reply timeout (deadline + 1 s)."""
        return self.p.request_timeout_ms / 1000 + 2

    async def request(
        self,
        src: int,
        nid: int,
        run: Callable[[ControllerService, ControllerNode], Awaitable[Any]],
        timeout_s: float | None = None,
    ) -> Outcome:
        """`run` on node `nid` as a request from `src`, as a route runs it."""

        async def on_node(node: ControllerNode) -> Outcome:
            try:
                reply = await run(node.service, node)
            except ApiError as e:
                if e.code == "REQUEST_TIMED_OUT":
                    self.count("timed_out")
                return ("err", e.code, getattr(e, "extra", {}).get("leader_id"))
            return ("ok", reply, node.raft.delivered_offset - 1)

        try:
            return await self.net.call(src, nid, on_node, timeout_s or self.client_timeout_s)
        except ConnectionError:
            return ("down",)

    async def command(self, src: int, nid: int, name: str, generate: Generate) -> Outcome:
        """A write command (the routes' name and generate) from `src` to node `nid`."""

        async def run(service: ControllerService, node: ControllerNode) -> Any:
            return await service.write(name, generate)

        return await self.request(src, nid, run)

    def next_voter(self, nid: int) -> int:
        return self.voters[(self.voters.index(nid) + 1) % len(self.voters)]


def run_seed(seed: int, trace: bool = False) -> SeedResult:
    """One seed: the world, its actors, the faults, the healing and the final checks."""
    from tests.dsim.actors import Scenario

    params = build_params(seed)
    root = _scratch_root()
    sim = DeployedSim(seed, params, root, trace)
    asyncio.set_event_loop(sim.loop)
    sim.loop.limit_s = (params.duration_ms + 2 * LIVENESS_BOUND_MS) / 1000 + 60
    logging.disable(logging.CRITICAL)
    try:
        with sim.disk.installed():
            try:
                sim.loop.run_until_complete(Scenario(sim).run())
            except Exception:
                sim.raise_recorded()  # the first violation, if one led to this
                raise
        sim.raise_recorded()
    finally:
        logging.disable(logging.NOTSET)
        _cancel_everything(sim.loop)
        asyncio.set_event_loop(None)
        shutil.rmtree(root, ignore_errors=True)
    stats = dict(sim.stats)
    for k, v in sim.net.stats.items():
        stats[k] = stats.get(k, 0) + v
    return SeedResult(seed, tuple(sorted(params.faults)), stats, sim._hash.hexdigest(), sim.trace)


def _cancel_everything(loop: SimLoop) -> None:
    # Python 3.11's wait_for may swallow a cancellation: cancel again, bounded.
    loop.limit_s = float("inf")
    for _ in range(5):
        pending = asyncio.all_tasks(loop)
        if not pending:
            break
        for t in pending:
            t.cancel()
        loop.run_until_complete(asyncio.wait(pending, timeout=1))
    loop.close()


__all__ = ["DeployedSim", "SeedResult", "build_params", "digest", "run_seed"]
