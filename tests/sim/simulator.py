"""A deterministic simulator for the Raft core: a whole quorum in one process, one seed.

Everything that is not the core is simulated here and driven by one
`random.Random(seed)`: the clock (integer milliseconds, jumping from event to
event), the network (delay, drop, duplicate, reorder, symmetric and asymmetric
partitions, connection refused from a dead peer), the disks (`MemoryLog` with
flush delays; a crash loses what was not flushed; a wipe loses everything) and
the client (proposals to the leader, snapshots of the state machine followed by
log trimming, graceful resignations).

The simulator plays the shell exactly as kraft.raft.ready prescribes: the
election state of a Ready is "written" before its messages leave, flushes run
asynchronously and end in `on_flushed`, and every message goes through the wire
codec (to_wire -> msgpack -> message_from_wire), so the codec is exercised too.

Invariants are checked after every event (`_check`):
- at most one leader per epoch;
- no node's persisted epoch goes down (per disk: a wipe starts a new one);
- a running node's high watermark never goes down (per process incarnation);
- committed prefixes are identical on all nodes and never change: each node's
  state machine hashes the batches it applies and every (offset, batch) and
  (offset, digest) pair is compared with the first one recorded; snapshots
  carry the digest and are compared too; no truncation or snapshot load ever
  removes a batch equal to a committed one;
- committed data is durable (flushed log or snapshot) on enough voters that no
  majority lacks it, for the committed voter set and the leader's newest one;
- at most one leader per epoch holds across every voter set that was ever in
  use (the epoch -> leader map is global, whatever set elected each leader);
- successive committed voter sets differ by at most one voter (KIP-853).

Membership changes (KIP-853, the "membership" fault). The cluster has spare
controllers that start as observers (bootstrapped from the voters, as `kraft
controller --bootstrap-controllers` does). The leader is asked, through the
core's add_voter / remove_voter, to add a caught-up spare, remove a voter (the
leader itself too), or replace a voter whose disk was wiped: in these seeds a
wipe formats a new directory id, so the wiped node comes back as a new replica
(an observer), and the old voter key is removed and the new one added. Right
after each accepted change a second one is asked for and must be refused
(one change at a time).

Wiping a disk. Before KIP-853, Kafka cannot tell a voter that lost its disk
from a new one: the wiped voter forgets its vote and its log, and may then help
elect a leader without the committed data. That is a real risk in Kafka, not
something the core can fix. The simulator therefore wipes a voter only when it
is safe to, and checks the conditions it relies on (`_wipe_is_safe`):
every other voter's epoch is at least the wiped one's and none is a candidate
in that epoch (so the forgotten vote can never be asked for again), the
committed data is durably on a majority of the *other* voters (so any future
majority that includes the empty node still holds it), and no leader counts a
fetch offset from the wiped node beyond its high watermark (a stale report
cannot commit anything); the wiped node's messages in flight are dropped, as
its connections die with it. Observers can be wiped at any time.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kraft.raft.config import RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.errors import CONCURRENT_VOTER_CHANGE, NotLeaderError, ReconfigError
from kraft.raft.memory_log import MemoryLog
from kraft.raft.messages import is_request, message_from_wire, to_wire
from kraft.raft.ready import Ready
from kraft.raft.state import Candidate, ElectionState, Leader
from kraft.raft.voters import Voter, VoterSet
from metadata_log.batch import decode_records, encode_batch, iter_headers
from metadata_log.records import (
    ConfigRecord,
    KRaftVersionRecord,
    SnapshotHeader,
    VotersRecord,
)
from metadata_log.snapshot import SnapshotId

CLUSTER_ID = "sim-cluster"


class InvariantViolation(AssertionError):
    """A safety or liveness property broke: the message says which and when."""


@dataclass
class NetParams:
    """The network's behaviour; all probabilities per message."""

    min_delay_ms: int = 1
    max_delay_ms: int = 10
    drop: float = 0.0
    duplicate: float = 0.0
    # A slow path: some messages take up to this long (so they overtake nothing
    # but are overtaken: reordering).
    slow: float = 0.0
    slow_max_ms: int = 300
    # A request to a dead node fails fast (connection refused) with this chance;
    # otherwise it just times out.
    refused: float = 0.7


@dataclass
class DiskParams:
    min_flush_ms: int = 0
    max_flush_ms: int = 3
    stall: float = 0.0  # chance that a flush stalls
    stall_max_ms: int = 1500


@dataclass
class CpuParams:
    """The state machine's CPU (issue 26): applying a committed record costs
    `apply_us`, during which the node's shell handles nothing (no message, timer or
    flush completion: one event loop). `slice_records`: applied that many at a
    time, with the node's pending events run in between (kraft's ChunkedReplay);
    None: a batch is applied at once (the shell before issue 26)."""

    apply_us: float = 0.0
    slice_records: int | None = None
    # A metadata transaction ending at this offset: without slices, its records are
    # applied all at once when its last batch is (KIP-868's end record).
    transaction_end: int | None = None


class SimLog(MemoryLog):
    """A MemoryLog that reports to the simulator what leaves it (for the checkers)."""

    def __init__(self, sim: Simulation, node_id: int) -> None:
        super().__init__()
        self._sim = sim
        self._node_id = node_id
        # Offsets below this are known to be durably here and equal to the
        # committed batches (see Simulation._verify_durable).
        self.verified = 0

    def truncate_to(self, offset: int) -> int:
        self._sim._check_not_removing_committed(self._node_id, self, offset, "truncation")
        end = super().truncate_to(offset)
        self.verified = min(self.verified, end)
        return end

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._sim._check_not_removing_committed(
            self._node_id, self, snapshot_id.end_offset, "snapshot load"
        )
        self._sim._check_snapshot(self._node_id, snapshot_id, data)
        super().install_snapshot(snapshot_id, data)
        self.verified = snapshot_id.end_offset

    def crash(self) -> None:
        super().crash()
        self.verified = min(self.verified, self.end_offset)

    def wipe(self) -> None:
        sim, node_id = self._sim, self._node_id
        super().wipe()
        self._sim, self._node_id, self.verified = sim, node_id, 0


@dataclass
class SimNode:
    node_id: int
    is_voter: bool  # a controller in the initial voter set
    log: SimLog
    persisted: ElectionState = field(default_factory=ElectionState)
    core: RaftCore | None = None
    incarnation: int = 0
    disk_generation: int = 0
    # state machine
    applied: int = 0
    digest: bytes = b""
    max_hw: int = -1  # per incarnation
    # shell bookkeeping
    wake_at: int | None = None
    wake_gen: int = 0
    flushing: bool = False
    flush_wanted: int | None = None
    same_time_events: int = 0
    last_event_ms: int = -1
    # KIP-853 identity: the directory id of the current disk, and whether the
    # node starts from the static voter list or as a --bootstrap-controllers one.
    directory_id: str = ""
    bootstrap_only: bool = False
    # CPU (CpuParams): the node runs nothing else until busy_until; records of
    # committed batches still to apply, in slices
    busy_until: int = 0
    backlog: int = 0
    slicing: bool = False

    @property
    def up(self) -> bool:
        return self.core is not None


def snapshot_bytes(
    end_offset: int, digest: bytes, rng_tag: int, voters: VotersRecord | None = None
) -> bytes:
    """The state machine's snapshot in the snapshot file layout: a control batch
    (SnapshotHeader and the voter set, which the core reads) and a data batch with
    the digest, padded so that it takes several chunks."""
    pad = hashlib.sha256(digest + rng_tag.to_bytes(8, "big")).digest() * (1 + rng_tag % 24)
    head: list[Any] = [SnapshotHeader(0)]
    if voters is not None:
        head += [KRaftVersionRecord(1), voters]
    data = [
        ConfigRecord(2, "sim", "end", str(end_offset)),
        ConfigRecord(2, "sim", "digest", digest.hex()),
        ConfigRecord(2, "sim", "pad", pad.hex()),
    ]
    return encode_batch(0, 0, 0, head, control=True) + encode_batch(len(head), 0, 0, data)


def parse_snapshot(data: bytes) -> tuple[int, bytes]:
    """(end offset, digest) of a snapshot: the batch layout above, or a msgpack
    array [end, digest, ...] (the controller simulation's state machine; such a
    snapshot carries no voter set, so the core keeps the bootstrap one)."""
    if data[:1] and data[0] & 0xF0 == 0x90:  # a msgpack fixarray: not a batch header
        end, digest, *_ = msgpack.unpackb(data)
        return end, digest
    for pos, h in iter_headers(data, "<sim snapshot>"):
        if not h.control:
            recs = decode_records(data, pos, h, "<sim snapshot>")
            values = {r.name: r.value for r in recs}  # type: ignore[union-attr]
            return int(values["end"]), bytes.fromhex(values["digest"])
    raise ValueError("a sim snapshot without its data batch")


def batch_voters(batch: bytes) -> list[VotersRecord]:
    """The VotersRecords of one batch (control batches only hold them)."""
    out: list[VotersRecord] = []
    for pos, h in iter_headers(batch, "<batch>"):
        if h.control:
            out += [
                r for r in decode_records(batch, pos, h, "<batch>") if isinstance(r, VotersRecord)
            ]
    return out


class Simulation:
    """One simulated cluster. Drive it by hand (unit scenarios) or with `run_seed`."""

    def __init__(
        self,
        seed: int,
        n_voters: int = 3,
        n_observers: int = 0,
        net: NetParams | None = None,
        disk: DiskParams | None = None,
        config: RaftConfig | None = None,
        trace: bool = False,
        n_spares: int = 0,
        membership: bool = False,
        cpu: CpuParams | None = None,
    ) -> None:
        self.seed = seed
        self.cpu = cpu or CpuParams()
        self.rng = random.Random(seed)
        self.net = net or NetParams()
        self.disk = disk or DiskParams()
        self.config = config or RaftConfig()
        self.now = 0
        self.trace_enabled = trace
        self.trace: list[str] = []
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.voter_ids = list(range(1, n_voters + 1))
        # Spare controllers: not voters at first, they can be added (KIP-853).
        self.spare_ids = list(range(n_voters + 1, n_voters + 1 + n_spares))
        self.controller_ids = self.voter_ids + self.spare_ids
        self.observer_ids = [100 + i for i in range(n_observers)]
        # With membership changes a wipe formats a new directory id (a new replica,
        # KIP-853); without, the wiped node is the same voter (Kafka before KIP-853).
        self.membership = membership
        self.nodes: dict[int, SimNode] = {}
        for nid in self.voter_ids + self.spare_ids + self.observer_ids:
            node = SimNode(nid, nid in self.voter_ids, SimLog(self, nid))
            node.directory_id = f"dir{nid}.0"
            node.bootstrap_only = nid in self.spare_ids
            self.nodes[nid] = node
        self.majority = n_voters // 2 + 1
        # The static voter list: ids and addresses, directory ids unknown (the
        # first leader writes it to the log and learns the directory ids).
        self.bootstrap_voters = VoterSet.of(Voter(v, "", f"sim://{v}") for v in self.voter_ids)
        # Committed voter sets by offset (from the committed batches).
        self.committed_voters: list[tuple[int, VoterSet]] = [(-1, self.bootstrap_voters)]
        # Directed links that drop everything: (src, dst).
        self.blocked: set[tuple[int, int]] = set()
        self._routes: dict[int, tuple[int, int, int, int, int]] = {}
        self._next_route = 0
        # Global knowledge for the invariants.
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.committed_batch: dict[int, bytes] = {}  # base offset -> batch
        self.committed_digest: dict[int, bytes] = {0: b""}  # end offset -> digest
        self.committed_end = 0
        self.persisted_epoch: dict[tuple[int, int], int] = {}
        self.proposed = 0
        self.stats: dict[str, int] = {}
        for nid in self.nodes:
            self.start(nid)

    # ================================================================ plumbing

    def _log(self, msg: str) -> None:
        if self.trace_enabled:
            self.trace.append(f"{self.now:>8} {msg}")

    def _count(self, kind: str) -> None:
        self.stats[kind] = self.stats.get(kind, 0) + 1

    def fail(self, what: str) -> None:
        tail = "\n".join(self.trace[-80:])
        raise InvariantViolation(
            f"seed {self.seed} at t={self.now} ms: {what}\n"
            f"replay with SIM_SEED={self.seed} (SIM_TRACE=1 for a trace)\n"
            + self.describe_nodes()
            + (f"\n--- last events ---\n{tail}" if tail else "")
        )

    def describe_nodes(self) -> str:
        rows = []
        for n in self.nodes.values():
            log = n.log
            where = f"log=[{log.start_offset},{log.end_offset}) flushed={log.flushed_offset}"
            if n.core is None:
                rows.append(f"  n{n.node_id}: down {n.persisted} {where}")
                continue
            c = n.core
            rows.append(
                f"  n{n.node_id}: {c.state_name} epoch={c.epoch} leader={c.leader_id} "
                f"hw={c.high_watermark} applied={n.applied} {where} "
                f"last_epoch={log.latest_epoch} state={c.state!r}"[:400]
            )
        return "\n".join(rows)

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (max(t, self.now), self._seq, fn))

    def step(self) -> bool:
        """Run the next event; False when there is none."""
        if not self._events:
            return False
        t, _, fn = heapq.heappop(self._events)
        self.now = t
        try:
            fn()
        except InvariantViolation:
            raise
        except Exception as e:  # a crash of the core is a failure of the run
            import traceback

            self.fail(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}")
        self._check()
        return True

    def run_until(self, t: int) -> None:
        while self._events and self._events[0][0] <= t:
            self.step()
        self.now = max(self.now, t)

    def run_for(self, ms: int) -> None:
        self.run_until(self.now + ms)

    def run_until_true(self, pred: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = self.now + timeout_ms
        while not pred():
            if not self._events or self._events[0][0] > deadline:
                self.now = max(self.now, deadline)
                return pred()
            self.step()
        return True

    # ============================================================ node control

    def start(self, nid: int) -> None:
        node = self.nodes[nid]
        assert node.core is None
        node.incarnation += 1
        rng = random.Random(f"{self.seed}/{nid}/{node.incarnation}")
        bootstrap_only = node.bootstrap_only and nid not in self.observer_ids
        node.core = RaftCore(
            nid,
            None if bootstrap_only else self.bootstrap_voters,
            CLUSTER_ID,
            node.log,
            node.persisted,
            self.config,
            rng,
            self.now,
            directory_id=node.directory_id,
            bootstrap_servers=tuple(c for c in self.voter_ids if c != nid),
        )
        # The state machine reloads from its latest snapshot; the log replays
        # from there as the high watermark is relearned.
        snap = node.log.latest_snapshot_id()
        if snap is not None:
            end, digest = parse_snapshot(node.log.snapshot_data(snap))
            node.applied, node.digest = end, digest
        else:
            node.applied, node.digest = 0, b""
        node.max_hw = -1
        node.flushing = False
        node.flush_wanted = None
        node.wake_at = None
        self._log(f"n{nid} start #{node.incarnation} {node.persisted} log={node.log.end_offset}")
        self._after(node)

    def crash(self, nid: int, wipe: bool = False) -> None:
        """Kill the process; the unflushed tail of the log is lost (all of it with wipe)."""
        node = self.nodes[nid]
        if node.core is not None:
            node.core = None
            node.incarnation += 1  # replies to the dead process go nowhere
        node.busy_until, node.backlog, node.slicing = 0, 0, False  # its CPU work died too
        if wipe:
            controller = node.is_voter or (self.membership and nid in self.controller_ids)
            if controller and not self._wipe_is_safe(nid):
                self.fail(f"unsafe wipe of n{nid} requested")
            node.log.wipe()
            node.persisted = ElectionState()
            node.disk_generation += 1
            if self.membership and nid in self.controller_ids:
                # A new format: a new directory id, so a new replica (KIP-853). It
                # comes back as --bootstrap-controllers would start it.
                node.directory_id = f"dir{nid}.{node.disk_generation}"
                node.bootstrap_only = True
            # Its connections die with it: nothing it sent is still in flight.
            self._purge_messages(nid)
            self._count("wipe")
        else:
            node.log.crash()
        self._log(f"n{nid} {'WIPE' if wipe else 'crash'} log={node.log.end_offset}")

    def _purge_messages(self, nid: int) -> None:
        self._events = [e for e in self._events if getattr(e[2], "src", None) != nid]
        heapq.heapify(self._events)

    def resign(self, nid: int) -> None:
        node = self.nodes[nid]
        if node.core is not None:
            node.core.resign(self.now)
            self._after(node)

    def partition(self, *groups: list[int] | set[int]) -> None:
        """Symmetric partition: nodes talk only inside their group."""
        where = {n: i for i, g in enumerate(groups) for n in g}
        self.blocked = {
            (a, b)
            for a in self.nodes
            for b in self.nodes
            if a != b and where.get(a, -1) != where.get(b, -2)
        }
        self._log(f"partition {groups}")

    def block(self, src: int, dst: int) -> None:
        """Asymmetric: messages from src to dst are lost."""
        self.blocked.add((src, dst))

    def heal(self) -> None:
        self.blocked.clear()
        self._log("heal")

    # ================================================================ queries

    def running(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.core is not None]

    def leader(self) -> int | None:
        """The leader of the highest epoch any running node leads, if any."""
        best: tuple[int, int] | None = None
        for n in self.running():
            c = n.core
            assert c is not None
            if c.is_leader and (best is None or c.epoch > best[0]):
                best = (c.epoch, n.node_id)
        return None if best is None else best[1]

    def core(self, nid: int) -> RaftCore:
        c = self.nodes[nid].core
        assert c is not None, f"n{nid} is down"
        return c

    # ================================================================ client

    def propose(self, n_records: int = 1, nid: int | None = None) -> tuple[int, int] | None:
        nid = self.leader() if nid is None else nid
        if nid is None:
            return None
        node = self.nodes[nid]
        if node.core is None or not node.core.is_leader:
            return None
        recs = []
        for _ in range(n_records):
            self.proposed += 1
            recs.append(
                ConfigRecord(2, "sim", f"k{self.proposed % 7}", f"{self.seed}:{self.proposed}")
            )
        result = node.core.propose_records(recs, self.now)
        self._log(f"n{nid} propose {result}")
        self._after(node)
        return result

    def snapshot(self, nid: int, trim: bool = True) -> SnapshotId | None:
        """The state machine of `nid` snapshots at what it applied; the log is trimmed."""
        node = self.nodes[nid]
        c = node.core
        if c is None or node.applied <= node.log.start_offset:
            return None
        if node.applied > node.log.flushed_offset:
            # As the node does: a follower may apply committed data it has not
            # flushed yet; a snapshot of it would outlive a crash that loses the
            # log's tail, leaving a log that ends below its own snapshot.
            return None
        sid = c.snapshot_id_at(node.applied)
        data = snapshot_bytes(
            sid.end_offset,
            node.digest,
            self.rng.randrange(1 << 30),
            c.voters_record_at(sid.end_offset),
        )
        self._check_snapshot(nid, sid, data)
        node.log.create_snapshot(sid, data)
        if trim:
            node.log.delete_segments_below(sid.end_offset)
        self._log(f"n{nid} snapshot {sid} start={node.log.start_offset}")
        self._count("snapshot")
        return sid

    # ============================================================== the shell

    def _after(self, node: SimNode) -> None:
        """Handle the core's Ready in the prescribed order, then re-arm its timer."""
        c = node.core
        if c is None:
            return
        r = c.ready()
        if not r.empty:
            self._handle_ready(node, r)
        wake = c.next_wake_ms()
        if wake != node.wake_at:
            node.wake_at = wake
            node.wake_gen += 1
            gen, inc = node.wake_gen, node.incarnation

            def fire() -> None:
                if node.busy_until > self.now:
                    self.at(node.busy_until, fire)  # the loop is busy: later
                    return
                if node.incarnation == inc and node.wake_gen == gen and node.core is not None:
                    node.wake_at = None
                    self._busy_guard(node)
                    node.core.tick(self.now)
                    self._after(node)

            self.at(wake, fire)

    def _busy_guard(self, node: SimNode) -> None:
        if node.last_event_ms == self.now:
            node.same_time_events += 1
            if node.same_time_events > 5000:
                self.fail(f"n{node.node_id} spins: thousands of events at one instant")
        else:
            node.last_event_ms, node.same_time_events = self.now, 0

    def _handle_ready(self, node: SimNode, r: Ready) -> None:
        c = node.core
        assert c is not None
        nid = node.node_id
        # 1. the quorum-state file, before anything of this Ready is sent
        if r.election_state is not None:
            es = r.election_state
            key = (nid, node.disk_generation)
            if es.leader_epoch < self.persisted_epoch.get(key, 0):
                self.fail(f"n{nid} persisted epoch went down to {es}")
            self.persisted_epoch[key] = es.leader_epoch
            node.persisted = es
            self._log(f"n{nid} persist {es}")
        # 2. flush (asynchronous)
        if r.flush_to is not None:
            self._request_flush(node, r.flush_to)
        # 3. messages
        for out in r.messages:
            self._send(nid, out.destination, out.message, ("req", out.correlation))
        for corr, resp in r.responses:
            route = self._routes.pop(corr, None)
            if route is None:
                self.fail(f"n{nid} answered unknown correlation {corr}")
            src, src_inc, src_corr, dst, dst_inc = route
            if dst != nid or dst_inc != node.incarnation:
                self.fail(f"n{nid} answered a request it did not receive")
            self._send(nid, src, resp, ("resp", src_corr, src_inc))
        # 4. the state machine
        if r.snapshot_loaded is not None:
            sid = r.snapshot_loaded
            end, digest = parse_snapshot(node.log.snapshot_data(sid))
            if end < node.applied:
                self.fail(f"n{nid} loaded snapshot {sid} behind its state at {node.applied}")
            node.applied, node.digest = end, digest
            self._count("snapshot_load")
            self._log(f"n{nid} loaded snapshot {sid}")
        if r.high_watermark is not None:
            hw = r.high_watermark
            if hw < node.max_hw:
                self.fail(f"n{nid} high watermark went back {node.max_hw} -> {hw}")
            node.max_hw = hw
            self._apply(node, hw)
        if r.leader_change is not None:
            self._log(f"n{nid} leader {r.leader_change} state={c.state_name}")
        if c.is_leader:
            known = self.leaders.setdefault(c.epoch, nid)
            if known != nid:
                self.fail(f"two leaders in epoch {c.epoch}: n{known} and n{nid}")

    def _request_flush(self, node: SimNode, offset: int) -> None:
        node.flush_wanted = max(node.flush_wanted or 0, offset)
        if node.flushing:
            return
        node.flushing = True
        target, node.flush_wanted = node.flush_wanted, None
        d = self.disk
        delay = self.rng.randint(d.min_flush_ms, d.max_flush_ms)
        if d.stall and self.rng.random() < d.stall:
            delay += self.rng.randint(0, d.stall_max_ms)
            self._count("flush_stall")
        inc = node.incarnation

        def done() -> None:
            if node.incarnation != inc or node.core is None:
                return
            if node.busy_until > self.now:
                self.at(node.busy_until, done)
                return
            node.flushing = False
            node.log.flush(target)
            node.core.on_flushed(node.log.flushed_offset, self.now)
            if node.flush_wanted is not None:
                self._request_flush(node, node.flush_wanted)
            self._after(node)

        self.at(self.now + delay, done)

    def _send(self, src: int, dst: int, msg: Any, kind: tuple[Any, ...]) -> None:
        net = self.net
        copies = 1
        if net.duplicate and self.rng.random() < net.duplicate:
            copies = 2
            self._count("duplicate")
        wire = msgpack.packb(to_wire(msg))
        for _ in range(copies):
            if (src, dst) in self.blocked:
                self._count("blocked")
                continue
            if net.drop and self.rng.random() < net.drop:
                self._count("drop")
                continue
            delay = self.rng.randint(net.min_delay_ms, net.max_delay_ms)
            if net.slow and self.rng.random() < net.slow:
                delay += self.rng.randint(0, net.slow_max_ms)
                self._count("slow")
            self.at(self.now + delay, _Delivery(self, src, dst, wire, kind))

    def _deliver(self, src: int, dst: int, wire: bytes, kind: tuple[Any, ...]) -> None:
        if (src, dst) in self.blocked:
            self._count("blocked")
            return
        node = self.nodes[dst]
        if node.busy_until > self.now and node.core is not None:
            # handled once the node's loop is free again
            self.at(node.busy_until, _Delivery(self, src, dst, wire, kind))
            return
        msg = message_from_wire(msgpack.unpackb(wire))
        if kind[0] == "req":
            assert is_request(msg)
            src_node = self.nodes[src]
            if node.core is None:
                # A dead peer: the connection is refused (fast) or times out.
                if self.rng.random() < self.net.refused:
                    inc = src_node.incarnation
                    corr = kind[1]

                    def refused() -> None:
                        if src_node.incarnation == inc and src_node.core is not None:
                            src_node.core.request_failed(corr, self.now)
                            self._after(src_node)

                    self.at(self.now + self.net.min_delay_ms, refused)
                return
            route = self._next_route
            self._next_route += 1
            self._routes[route] = (src, src_node.incarnation, kind[1], dst, node.incarnation)
            self._busy_guard(node)
            node.core.handle_request(msg, self.now, route)
            self._after(node)
        else:
            _, corr, inc = kind
            if node.core is None or node.incarnation != inc:
                return
            self._busy_guard(node)
            node.core.handle_response(corr, msg, self.now)
            self._after(node)

    # ============================================================ state machine

    def _apply(self, node: SimNode, hw: int) -> None:
        log = node.log
        nid = node.node_id
        while node.applied < hw:
            if node.applied < log.start_offset:
                self.fail(f"n{nid} must apply from {node.applied} but its log starts later")
            data = log.read(node.applied, 1 << 20)
            if not data:
                self.fail(f"n{nid} high watermark {hw} beyond its log end {log.end_offset}")
            for pos, h in iter_headers(data, f"<n{nid} log>"):
                if h.base_offset != node.applied:
                    self.fail(f"n{nid} log batch at {h.base_offset}, applied {node.applied}")
                if h.next_offset > hw:
                    self.fail(f"n{nid} high watermark {hw} inside batch {h.base_offset}")
                batch = data[pos : pos + h.length]
                known = self.committed_batch.get(h.base_offset)
                if known is None:
                    self.committed_batch[h.base_offset] = batch
                    if h.control:
                        self._note_committed_voters(h.base_offset, batch)
                elif known != batch:
                    self.fail(
                        f"n{nid} committed batch at {h.base_offset} differs from another node's"
                    )
                node.digest = hashlib.sha256(node.digest + batch).digest()
                self._charge_apply(node, h.record_count, h.next_offset)
                node.applied = h.next_offset
                known_d = self.committed_digest.get(node.applied)
                if known_d is None:
                    self.committed_digest[node.applied] = node.digest
                elif known_d != node.digest:
                    self.fail(f"n{nid} state at {node.applied} differs from another node's")
                if node.applied > self.committed_end:
                    self.committed_end = node.applied
                if node.applied >= hw:
                    break

    def _charge_apply(self, node: SimNode, records: int, next_offset: int) -> None:
        """The CPU time of applying `records` (CpuParams): at once, or queued for
        slices between which the node's pending events run."""
        cpu = self.cpu
        if not cpu.apply_us:
            return
        if cpu.slice_records is None:
            end = cpu.transaction_end
            node.backlog += records
            if end is not None and next_offset < end:
                return  # inside the transaction: applied at its end
            ms = int(node.backlog * cpu.apply_us / 1000)
            node.backlog = 0
            node.busy_until = max(node.busy_until, self.now) + ms
            return
        node.backlog += records
        if not node.slicing:
            node.slicing = True
            self.at(self.now, lambda: self._apply_slice(node, node.incarnation))

    def _apply_slice(self, node: SimNode, inc: int) -> None:
        if node.incarnation != inc or node.core is None:
            node.backlog, node.slicing = 0, False
            return
        assert self.cpu.slice_records is not None
        n = min(node.backlog, self.cpu.slice_records)
        node.backlog -= n
        node.busy_until = self.now + max(1, int(n * self.cpu.apply_us / 1000))
        self._count("apply_slice")
        if node.backlog == 0:
            node.slicing = False
            return
        # 1 ms after the slice: what waited for the loop (scheduled at busy_until)
        # runs first, as the shell's turns between slices give it
        self.at(node.busy_until + 1, lambda: self._apply_slice(node, inc))

    def _note_committed_voters(self, base: int, batch: bytes) -> None:
        for rec in batch_voters(batch):
            vs = VoterSet.from_record(rec)
            prev = self.committed_voters[-1][1]
            if len(prev.ids ^ vs.ids) > 1:
                self.fail(
                    f"committed voter sets {sorted(prev.ids)} -> {sorted(vs.ids)} at {base} "
                    "differ by more than one voter"
                )
            self.committed_voters.append((base, vs))
            self._log(f"committed voters at {base}: {vs.describe()}")

    @property
    def committed_voter_set(self) -> VoterSet:
        return self.committed_voters[-1][1]

    def _check_snapshot(self, nid: int, sid: SnapshotId, data: bytes) -> None:
        end, digest = parse_snapshot(data)
        if end != sid.end_offset:
            self.fail(f"n{nid} snapshot {sid} holds state at {end}")
        known = self.committed_digest.get(end)
        if known is None:
            self.fail(f"n{nid} snapshot {sid} is not at a committed offset")
        elif known != digest:
            self.fail(f"n{nid} snapshot {sid} differs from the committed state")

    def _check_not_removing_committed(self, nid: int, log: SimLog, offset: int, what: str) -> None:
        """No truncation or snapshot load may drop a batch equal to a committed one."""
        if offset >= log.end_offset:
            return
        for h, batch in log.batches_from(offset):
            if h.next_offset <= offset:
                continue
            if self.committed_batch.get(h.base_offset) == batch:
                self.fail(f"n{nid} {what} to {offset} removes committed batch {h.base_offset}")

    # ============================================================== invariants

    def _verify_durable(self, node: SimNode) -> int:
        """Advance node.log.verified over flushed batches equal to the committed ones."""
        log = node.log
        snap = log.latest_snapshot_id()
        if snap is not None and snap.end_offset > log.verified:
            log.verified = snap.end_offset  # checked against the digest when stored
        limit = min(log.flushed_offset, self.committed_end)
        if log.verified < limit:
            for h, batch in log.batches_from(log.verified):
                if h.base_offset != log.verified or h.next_offset > limit:
                    break
                if self.committed_batch.get(h.base_offset) != batch:
                    break
                log.verified = h.next_offset
        return log.verified

    def _durable_holders(self, exclude: int | None = None, voters: VoterSet | None = None) -> int:
        """How many voters (by key: a wiped disk is another replica) hold the committed data."""
        c = self.committed_end
        vs = voters if voters is not None else self.committed_voter_set
        n = 0
        for v in vs:
            node = self.nodes.get(v.node_id)
            if node is None or v.node_id == exclude:
                continue
            if v.directory_id and v.directory_id != node.directory_id:
                continue  # the voter's disk is gone
            if self._verify_durable(node) >= c:
                n += 1
        return n

    def _check(self) -> None:
        if self.committed_end <= 0:
            return
        sets = [self.committed_voter_set]
        lid = self.leader()
        if lid is not None and self.core(lid).epoch >= max(
            n.core.epoch for n in self.running() if n.core is not None
        ):
            # The voter set in force at the leader, if no node has moved past its
            # epoch. A superseded leader (its successor in a later epoch has just
            # resigned, say) can commit nothing more, and its set may hold an
            # uncommitted change that its partition never saw.
            sets.append(self.core(lid).voter_set)
        for vs in sets:
            # No majority of the set may lack the committed data. A voter key whose
            # disk was wiped never grants a vote again (it answers INVALID_VOTER_KEY),
            # so only live keys can form such a majority.
            live = [
                v
                for v in vs
                if v.node_id in self.nodes
                and (not v.directory_id or v.directory_id == self.nodes[v.node_id].directory_id)
            ]
            lacking = len(live) - self._durable_holders(voters=vs)
            if lacking >= vs.majority():
                self.fail(
                    f"committed data up to {self.committed_end}: {lacking} of the voters "
                    f"{vs.describe()} lack it, a majority"
                )

    def _wipe_is_safe(self, nid: int) -> bool:
        """See the module docstring: when wiping voter `nid` cannot lose a commit."""
        if self.membership:
            return self._replaceable(nid)
        epoch = self.nodes[nid].persisted.leader_epoch
        for oid in self.voter_ids:
            if oid == nid:
                continue
            other = self.nodes[oid]
            if other.persisted.leader_epoch < epoch:
                return False
            c = other.core
            if c is not None and isinstance(c.state, Candidate) and c.epoch <= epoch:
                return False
        if self._durable_holders(exclude=nid) < self.majority:
            return False
        for n in self.running():
            s = n.core.state if n.core is not None else None
            if isinstance(s, Leader):
                r = s.voter_states.get(nid)
                if r is not None and r.end_offset > n.core.high_watermark:  # type: ignore[union-attr]
                    return False
        return True

    # ============================================================ membership

    def voter_sets_in_use(self) -> list[VoterSet]:
        sets = [self.committed_voter_set]
        for n in self.running():
            assert n.core is not None
            sets.append(n.core.voter_set)
        return sets

    def lost_voters(self) -> set[int]:
        """Voters (in any set in use) whose disk was wiped since they were added."""
        lost = set()
        for vs in self.voter_sets_in_use():
            for v in vs:
                node = self.nodes.get(v.node_id)
                if node is not None and v.directory_id and v.directory_id != node.directory_id:
                    lost.add(v.node_id)
        return lost

    def _replaceable(self, nid: int) -> bool:
        """With KIP-853 a wiped voter is a new replica, so a wipe cannot lose a commit
        (the old key counts as a voter that never answers until it is removed),
        provided the voter's directory id is known (a static voter with an unknown
        one would accept the wiped node as itself). It must not cost the quorum
        its liveness either: at most one voter is lost at a time, in a set of 3 or
        more, and only when no voter change is in flight anywhere (every
        controller up, all holding the committed set): losing a member of an
        uncommitted smaller set, say {3, 5} while {2, 3, 5} is committed, leaves
        the node with the longest log unable to win in its set and unwilling to
        vote for the others, as it would in Kafka."""
        if self.lost_voters():
            return False
        committed = self.committed_voter_set
        if len(committed) < 3:
            return False
        for cid in self.controller_ids:
            if cid == nid:
                continue  # its log goes with the wipe
            c = self.nodes[cid].core
            if c is None or c.voter_set != committed:
                return False
        v = committed.get(nid)
        return v is None or bool(v.directory_id)

    def change_membership(self, rng: random.Random, max_voters: int) -> str | None:
        """Ask the leader for one membership change; returns what was done (or None).

        Right after an accepted change, a second one must be refused."""
        lid = self.leader()
        if lid is None:
            return None
        node = self.nodes[lid]
        c = node.core
        assert c is not None
        vs = c.voter_set
        lost = [
            v for v in vs if v.directory_id and v.directory_id != self.nodes[v.node_id].directory_id
        ]
        absent = [n for n in self.controller_ids if n not in vs.ids and self.nodes[n].up]
        try:
            if lost:
                v = lost[0]
                off = c.remove_voter(v.node_id, v.directory_id, self.now)
                what = f"remove lost {v.node_id}:{v.directory_id}"
            elif absent and (len(vs) < 3 or (len(vs) < max_voters and rng.random() < 0.5)):
                nid = rng.choice(absent)
                d = self.nodes[nid].directory_id
                off = c.add_voter(nid, d, f"sim://{nid}", self.now)
                what = f"add {nid}:{d}"
            elif len(vs) > 1:
                v = rng.choice(list(vs))
                off = c.remove_voter(v.node_id, v.directory_id, self.now)
                what = f"remove {v.node_id}{' (the leader)' if v.node_id == lid else ''}"
            else:
                return None
        except ReconfigError as e:
            self._count(f"reconfig_refused:{e.code}")
            self._log(f"n{lid} reconfig refused: {e.code}: {e}")
            self._after(node)
            return None
        except NotLeaderError:
            return None
        self._log(f"n{lid} {what} at {off}")
        self._count("fault:membership")
        # One change at a time: a second one now is refused, whatever it is.
        try:
            if c.is_leader:
                other = next((v for v in c.voter_set if v.node_id != lid), None)
                if other is not None:
                    c.remove_voter(other.node_id, other.directory_id, self.now)
                    self.fail(f"n{lid} accepted a second voter change while {what} is pending")
        except ReconfigError as e:
            if e.code != CONCURRENT_VOTER_CHANGE:
                self.fail(f"second change refused with {e.code}, not {CONCURRENT_VOTER_CHANGE}")
            self._count("reconfig_refused_pending")
        except NotLeaderError:
            pass
        self._after(node)
        return what


class _Delivery:
    """A message in flight (a callable event that knows its sender, for purging)."""

    __slots__ = ("sim", "src", "dst", "wire", "kind")

    def __init__(
        self, sim: Simulation, src: int, dst: int, wire: bytes, kind: tuple[Any, ...]
    ) -> None:
        self.sim, self.src, self.dst, self.wire, self.kind = sim, src, dst, wire, kind

    def __call__(self) -> None:
        self.sim._deliver(self.src, self.dst, self.wire, self.kind)


# ============================================================== random runs

FAULT_KINDS = (
    "drop",
    "duplicate",
    "reorder",
    "partition",
    "asymmetric",
    "crash",
    "wipe",
    "flush_stall",
    "resign",
    "snapshot",
    "membership",
)

# Once the network heals, a leader and full convergence must follow within this.
LIVENESS_BOUND_MS = 30_000


@dataclass
class SeedResult:
    seed: int
    n_voters: int
    n_observers: int
    faults: tuple[str, ...]
    stats: dict[str, int]
    committed: int
    converge_ms: int


def build(seed: int, trace: bool = False) -> tuple[Simulation, random.Random, set[str], int]:
    """The cluster and fault mix of `seed` (every choice comes from the seed)."""
    rng = random.Random(f"scenario/{seed}")
    # Every tenth seed turns every fault on; the others draw a subset.
    faults = set(FAULT_KINDS) if seed % 10 == 0 else {k for k in FAULT_KINDS if rng.random() < 0.5}
    # Membership changes (KIP-853) in most seeds, drawn separately so that the
    # other draws of a seed stay what they were.
    if random.Random(f"membership/{seed}").random() < 0.6:
        faults.add("membership")
    net = NetParams(
        min_delay_ms=1,
        max_delay_ms=rng.choice([2, 5, 20]),
        drop=rng.choice([0.01, 0.05, 0.15]) if "drop" in faults else 0.0,
        duplicate=rng.choice([0.01, 0.05]) if "duplicate" in faults else 0.0,
        slow=rng.choice([0.02, 0.1]) if "reorder" in faults else 0.0,
        slow_max_ms=rng.choice([100, 600]),
    )
    disk = DiskParams(
        max_flush_ms=rng.choice([1, 3, 10]),
        stall=0.03 if "flush_stall" in faults else 0.0,
        stall_max_ms=rng.choice([300, 2500]),
    )
    # A third of the seeds run with timeouts close to the network's delays:
    # many more elections per simulated second, so more races between them.
    fast = rng.random() < 0.35
    timing = (
        {
            "election_timeout_ms": 150,
            "fetch_timeout_ms": 300,
            "fetch_max_wait_ms": 100,
            "request_timeout_ms": 300,
        }
        if fast
        else {}
    )
    config = RaftConfig(
        # 1 byte: one batch per fetch, so followers often hold a prefix of what
        # a new leader has (the case where committing an old epoch's offset
        # without one of the leader's own would be unsafe).
        fetch_max_bytes=rng.choice([1 << 20, 2048, 1]),
        snapshot_chunk_bytes=rng.choice([128, 1024]),
        **timing,
    )
    sim = Simulation(
        seed,
        n_voters=rng.choice([3, 3, 5]),
        n_observers=rng.choice([1, 2]),
        net=net,
        disk=disk,
        config=config,
        trace=trace,
        n_spares=2 if "membership" in faults else 0,
        membership="membership" in faults,
    )
    duration = rng.randint(8_000, 20_000)
    return sim, rng, faults, duration


class FaultScheduler:
    """A seed's faults on the simulation until `end` (simulated ms): actions
    repeated at random intervals, delayed restarts, network splits healed later.

    Used by this module's actors (ClientWriter, FaultInjector). Every delay and
    choice is drawn from the seed's `rng` when the fault fires, so a seed replays
    exactly.
    """

    def __init__(self, sim: Simulation, rng: random.Random, end: int) -> None:
        self.sim = sim
        self.rng = rng
        self.end = end
        # a split or one-way block is in force (until heal_later's heal): no second one
        self.partitioned = False

    def every(self, lo: int, hi: int, action: Callable[[], None]) -> None:
        """`action` every lo..hi ms (drawn each time) until the end."""

        def fire() -> None:
            if self.sim.now < self.end:
                action()
                self.sim.at(self.sim.now + self.rng.randint(lo, hi), fire)

        self.sim.at(self.rng.randint(lo, hi), fire)

    def restart_later(self, nid: int, lo: int, hi: int) -> None:
        """Node `nid` started again lo..hi ms from now, unless it is up by then."""

        def again() -> None:
            if not self.sim.nodes[nid].up:
                self.sim.start(nid)

        self.sim.at(self.sim.now + self.rng.randint(lo, hi), again)

    def heal_later(self, lo: int, hi: int) -> None:
        """The network healed lo..hi ms from now."""

        def heal() -> None:
            self.sim.heal()
            self.partitioned = False

        self.sim.at(self.sim.now + self.rng.randint(lo, hi), heal)

    def splits(
        self,
        nodes: list[int],
        split: Callable[[list[int], list[int]], None],
        every: tuple[int, int],
        heal: tuple[int, int],
    ) -> None:
        """Every `every` ms, unless the network is already cut: `nodes` shuffled and
        cut in two groups by `split`, healed `heal` ms later."""

        def fire() -> None:
            if self.partitioned:
                return
            shuffled = nodes[:]
            self.rng.shuffle(shuffled)
            k = self.rng.randint(1, len(shuffled) - 1)
            split(shuffled[:k], shuffled[k:])
            self.partitioned = True
            self.sim._count("fault:partition")
            self.heal_later(*heal)

        self.every(*every, fire)


class ClientWriter:
    """The client: 1-4 records proposed to the leader every 20-250 ms."""

    def __init__(self, sim: Simulation, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng

    def start(self, sched: FaultScheduler) -> None:
        sched.every(20, 250, self.propose)

    def propose(self) -> None:
        self.sim.propose(self.rng.randint(1, 4))


class FaultInjector:
    """The seed's fault kinds, each an action repeated while the faults last."""

    HEAL_MS = (300, 5_000)

    def __init__(
        self, sim: Simulation, rng: random.Random, faults: set[str], sched: FaultScheduler
    ) -> None:
        self.sim = sim
        self.rng = rng
        self.faults = faults
        self.sched = sched
        self.nodes = list(sim.nodes)
        self.down_max = 0
        self.max_voters = 0

    def start(self) -> None:
        """Schedule every kind of the seed, in a fixed order (each draws from the rng)."""
        every, f = self.sched.every, self.faults
        if "partition" in f:
            self.sched.splits(
                self.nodes, self.sim.partition, every=(1_000, 4_000), heal=self.HEAL_MS
            )
        if "asymmetric" in f:
            every(1_000, 4_000, self.one_way)
        if "crash" in f:
            # Quick restarts bring a node back inside the election it left.
            self.down_max = self.rng.choice([500, 4_000])
            every(300, 3_000, self.crash)
        if "wipe" in f:
            every(2_000, 6_000, self.wipe)
        if "resign" in f:
            every(1_500, 5_000, self.resign_then_stop)
        if "snapshot" in f:
            every(300, 2_000, self.snapshot)
        if "membership" in f:
            self.max_voters = self.rng.choice([3, 5])
            every(300, 2_500, self.change_membership)

    def one_way(self) -> None:
        """One to three links cut in one direction only."""
        if self.sched.partitioned:
            return
        for _ in range(self.rng.randint(1, 3)):
            a, b = self.rng.sample(self.nodes, 2)
            self.sim.block(a, b)
        self.sched.partitioned = True
        self.sim._count("fault:asymmetric")
        self.sched.heal_later(*self.HEAL_MS)

    def crash(self) -> None:
        """A node crashes (the leader 40% of the time) and restarts later."""
        sim = self.sim
        up = [n.node_id for n in sim.running()]
        if up:
            leader = sim.leader()
            nid = leader if leader is not None and self.rng.random() < 0.4 else self.rng.choice(up)
            sim.crash(nid)
            sim._count("fault:crash")
            self.sched.restart_later(nid, 20, self.down_max)

    def wipe(self) -> None:
        """A node loses its disk, only where that is safe (module docstring)."""
        sim = self.sim

        def controller(n: int) -> bool:
            return n in sim.controller_ids if sim.membership else sim.nodes[n].is_voter

        candidates = [n for n in self.nodes if not controller(n) or sim._wipe_is_safe(n)]
        if not candidates:
            sim._count("wipe_unsafe")
            return
        nid = self.rng.choice(candidates)
        sim.crash(nid, wipe=True)
        sim._count("fault:wipe")
        self.sched.restart_later(nid, 50, 2_000)

    def resign_then_stop(self) -> None:
        """The leader resigns gracefully, then its process stops soon after."""
        sim = self.sim
        nid = sim.leader()
        if nid is None:
            return
        sim.resign(nid)
        sim._count("fault:resign")

        def stop() -> None:
            if sim.now < self.sched.end and sim.nodes[nid].up:
                sim.crash(nid)
                self.sched.restart_later(nid, 100, 2_000)

        sim.at(sim.now + self.rng.randint(50, 400), stop)

    def snapshot(self) -> None:
        """A running node snapshots its state machine (and mostly trims its log)."""
        up = [n.node_id for n in self.sim.running()]
        if up:
            self.sim.snapshot(self.rng.choice(up), trim=self.rng.random() < 0.8)

    def change_membership(self) -> None:
        self.sim.change_membership(self.rng, self.max_voters)


class ConvergenceCheck:
    """After the faults: the network heals, every node restarts, and within
    LIVENESS_BOUND_MS a leader that every voter agrees on commits a marker that
    every node applies."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.target = -1

    def heal(self) -> int:
        sim = self.sim
        sim.heal()
        sim.net.drop = sim.net.duplicate = sim.net.slow = 0.0
        sim.disk.stall = 0.0
        for nid in sim.nodes:
            if not sim.nodes[nid].up:
                sim.start(nid)
        return sim.now

    def agreed_leader(self) -> int | None:
        sim = self.sim
        lid = sim.leader()
        if lid is None:
            return None
        epoch = sim.core(lid).epoch
        for nid in sim.core(lid).voters:
            c = sim.core(nid)
            if c.epoch != epoch or c.leader_id != lid:
                return None
        return lid

    def converged(self) -> bool:
        return all(n.up and n.applied >= self.target for n in self.sim.nodes.values())

    def run(self, deadline: int) -> None:
        """Propose a marker on the agreed leader until every node applied one. A
        leader change can still lose it (a flush stall or a message from the faulty
        phase may arrive late): then propose again."""
        sim = self.sim
        while True:
            if not sim.run_until_true(lambda: self.agreed_leader() is not None, deadline - sim.now):
                sim.fail(f"no agreed leader {LIVENESS_BOUND_MS} ms after the network healed")
            lid = self.agreed_leader()
            assert lid is not None
            epoch = sim.core(lid).epoch
            marker = sim.propose(1, lid)
            assert marker is not None
            self.target = marker[1] + 1
            if not sim.run_until_true(
                lambda lid=lid, epoch=epoch: self._done_or_changed(lid, epoch), deadline - sim.now
            ):
                lag = {n.node_id: n.applied for n in sim.nodes.values()}
                sim.fail(f"not converged on offset {self.target} within the bound: applied {lag}")
            if self.converged():
                return

    def _done_or_changed(self, lid: int, epoch: int) -> bool:
        c = self.sim.nodes[lid].core
        return self.converged() or c is None or not c.is_leader or c.epoch != epoch


def run_seed(seed: int, trace: bool = False) -> SeedResult:
    """One seed: the client and the faults until `duration`, then convergence.
    Every node holds the same committed prefix (checked while applying) and the
    final logs agree up to the marker."""
    sim, rng, faults, duration = build(seed, trace)
    sched = FaultScheduler(sim, rng, duration)
    ClientWriter(sim, rng).start(sched)
    FaultInjector(sim, rng, faults, sched).start()
    sim.run_until(duration)
    check = ConvergenceCheck(sim)
    healed = check.heal()
    check.run(healed + LIVENESS_BOUND_MS)
    if sim.stats.get("fault:membership"):
        sim.stats["membership_seed"] = 1
    return SeedResult(
        seed,
        len(sim.voter_ids),
        len(sim.observer_ids),
        tuple(sorted(faults)),
        dict(sim.stats),
        sim.committed_end,
        sim.now - healed,
    )
