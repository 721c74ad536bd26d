"""The deterministic simulator extended with controllers and scripted broker lifecycles.

Every simulated Raft node (tests/sim/simulator.py) runs the pure QuorumController
the server runs, composed the way kraft/server/node.py and controller_service.py
compose it, but synchronously on the simulated clock:

- a standby replays the committed batches its Raft node applies; a snapshot
  carries the controller's image and a restarted node (or a follower that
  installs the leader's snapshot) loads it and replays the rest;
- the leader claims its epoch once it has applied everything before the epoch's
  first offset, then activates the controller (every broker counts as just seen,
  Kafka bug 18138), aborts a metadata transaction its predecessor left open and
  from then on generates -> appends -> replays; replies go out once their
  records are committed; losing leadership reverts the uncommitted replays;
- one event queue per active controller with a service time per command, stalls
  (a busy controller), a deadline per command (REQUEST_TIMED_OUT) and a
  priority lane for heartbeats; a heartbeat's contact counts on arrival (Kafka
  bug 15019); the fence check and the NoOp every metadata.max.idle.interval.ms
  are deferred events through the same queue, one stale broker per event.

Brokers and an admin client talk to the controllers over the simulated network
(delay, drop, duplicate-free, partitions that include brokers, dead nodes that
refuse or time out). A broker registers, heartbeats every interval, follows
NOT_CONTROLLER hints, re-registers when its epoch is stale, reports the metadata
offset it learned from replies; its script draws silences, crashes and restarts
(a new incarnation), controlled shutdowns, want_fence episodes and
AlterPartition requests (shrink/expand ISR, end a RECOVERING leader's
recovery) from a stale view; a broker that restarts after a crash registers
with previous_broker_epoch -1 (an unclean shutdown, KIP-966), after a
controlled shutdown with its last epoch. The admin creates and deletes topics,
adds partitions, toggles unclean leader election and min.insync.replicas, asks
for elections, starts and cancels partition reassignments (KIP-455, some of
them invalid). The active controller balances preferred leaders in bounded
batches every few seconds (a batch that leaves more is followed at once). Most
seeds run with eligible leader replicas (KIP-966) on, some with it off.

Invariants, after every event (`_check`), on top of the Raft ones:
- every controller's committed image is equal at equal offsets (also a loaded
  snapshot's), and the controller's replication index mirrors its image;
- no fenced (or unregistered) broker leads a partition; every leader is in its
  ISR (an unclean election makes the ISR [leader]); a RECOVERING partition has
  at most one ISR member (none once its leader is fenced with ELR on);
- ISR and ELR are disjoint, both within the replicas, and the ELR is empty
  with the feature off;
- no partition is leaderless while an eligible replica could lead it: an
  acceptable (registered, unfenced, not shutting down) ISR member, or an
  acceptable ELR member when the ISR is empty, or, where the topic allows unclean
  election, any acceptable replica;
- reassignments, checked on every change the active controller writes: a
  partition's replicas always contain the target and the original while it is
  reassigning (its replica set only grows), and a reassignment ends with
  replicas equal to its target (completed) or its original (cancelled);
- broker epochs only rise; a RegisterBrokerRecord's epoch is its own offset;
- no broker that kept heartbeating is fenced: a session fence of broker b at
  epoch e by controller C at time t is a violation if a heartbeat of (b, e) was
  delivered to C while C was active within (t - session, t], or if t is less
  than one session after C activated or after (b, e) registered with C.
At the end the faults stop: every broker must come back registered and
unfenced on every controller, then a broker that falls silent must be fenced
(its leaderships moved) within its last contact + session + 1 s.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kraft.controller.batching import to_batches
from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import (
    ControllerConfig,
    ControllerResult,
    QuorumController,
    ReplicationIndex,
)
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    IsrMember,
    ReassignmentTarget,
    RegisterBrokerRequest,
)
from kraft.raft.config import RaftConfig
from kraft.raft.errors import NotLeaderError
from metadata_log.batch import decode_records, iter_headers
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import (
    RECOVERED,
    RECOVERING,
    TOPIC_RESOURCE,
    AbortTransactionRecord,
    BeginTransactionRecord,
    Endpoint,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    decode_record,
    encode_record,
)
from tests.sim.simulator import (
    CLUSTER_ID,
    DiskParams,
    FaultScheduler,
    NetParams,
    SimNode,
    Simulation,
)

BROKER_BASE_ID = 10


# ====================================================================== controller shell


@dataclass
class _Command:
    name: str
    generate: Callable[[QuorumController, int, int], ControllerResult | None]
    deadline: int
    reply_to: tuple[int, int, int] | None  # (client id, client incarnation, correlation)
    priority: bool
    request: Any = None


@dataclass
class CtlState:
    """One controller process on one simulated node (reset by a crash)."""

    ctrl: QuorumController
    fed: int = 0  # next offset to hand to the controller (== the node's applied)
    claimed: int | None = None  # the Raft epoch this node is active in
    active_from: int | None = None  # first offset this node wrote as active
    activated_at: int = 0
    claim: int = 0  # bumps on every activation/deactivation: stale events do nothing
    priority: deque[_Command] = field(default_factory=deque)
    normal: deque[_Command] = field(default_factory=deque)
    pumping: bool = False
    busy_until: int = 0
    waiting: deque[tuple[int, tuple[int, int, int] | None, Any]] = field(default_factory=deque)
    last_write_ms: int = 0
    timer_gen: int = 0
    fence_queued: bool = False
    # checker: (broker, epoch) -> last time a heartbeat of it reached this active controller
    contacts: dict[tuple[int, int], int] = field(default_factory=dict)
    registered_at: dict[tuple[int, int], int] = field(default_factory=dict)
    records_since_snapshot: int = 0
    epochs: dict[int, int] = field(default_factory=dict)  # checker: highest epoch seen
    checked: tuple[int, int, bool] | None = None

    @property
    def active(self) -> bool:
        return self.claimed is not None


# ====================================================================== brokers


@dataclass
class SimBroker:
    bid: int
    rack: str | None
    incarnation: str = ""
    process: int = 0  # bumps on every (re)start: replies to an old process are dropped
    up: bool = False
    epoch: int | None = None
    registering_since: int | None = None
    reg_corr: int | None = None
    hb_corr: int | None = None
    hb_sent_at: int = 0
    target: int = 1
    silent_until: int = 0
    want_fence_until: int = 0
    shutting_down: bool = False
    metadata_offset: int = -1
    fenced: bool = True
    next_corr: int = 0
    tick_gen: int = 0
    last_delivered_hb: int | None = None  # sim bookkeeping: last heartbeat that reached an active
    # ... and the last one an active controller processed (its session restarts
    # then: Kafka's touch; a heartbeat may wait in the queue behind a stall)
    last_processed_hb: int | None = None
    # KIP-966: the epoch kept by a clean (controlled) shutdown, sent once restarted
    clean_epoch: int = -1
    previous_epoch: int = -1


@dataclass
class ControllerSimParams:
    session_ms: int
    heartbeat_ms: int
    request_timeout_ms: int
    idle_ms: int
    max_batch_bytes: int
    snapshot_every: int
    service_ms: tuple[int, int]
    n_brokers: int
    timer_lag_ms: int = 0
    elr: bool = True  # eligible.leader.replicas.version bootstrapped at 1
    min_isr: int = 1  # the cluster default min.insync.replicas
    balance_ms: int = 2000  # leader.imbalance.check.interval
    balance_batch: int = 3  # leader.imbalance.max.elections.per.batch


# ====================================================================== the simulation


class ControllerSimulation(Simulation):
    def __init__(self, seed: int, params: ControllerSimParams, **kw: Any) -> None:
        self.p = params
        self.ctl: dict[int, CtlState] = {}
        self.image_digest: dict[int, bytes] = {}
        self.brokers: dict[int, SimBroker] = {}
        self.bblocked: set[tuple[int, int]] = set()
        self.stalls = False
        self.admin_corr = 0
        self.admin_kinds: dict[int, str] = {}
        self.broker_rng = random.Random(f"brokers/{seed}")
        super().__init__(seed, **kw)

    # ------------------------------------------------------------------ processes

    def _new_ctl(self, nid: int) -> CtlState:
        node = self.nodes[nid]
        config = ControllerConfig(
            node_id=nid,
            controller_ids=frozenset(self.voter_ids),
            cluster_id=CLUSTER_ID,
            session_timeout_ms=self.p.session_ms,
            heartbeat_interval_ms=self.p.heartbeat_ms,
            min_insync_replicas=self.p.min_isr,
            leader_imbalance_max_elections_per_batch=self.p.balance_batch,
            bootstrap_eligible_leader_replicas_version=1 if self.p.elr else 0,
        )
        rng = random.Random(f"{self.seed}/ctl/{nid}/{node.incarnation + 1}")
        st = CtlState(QuorumController(config, rng))
        snap = node.log.latest_snapshot_id()
        if snap is not None:
            self._load_image(nid, st, node.log.snapshot_data(snap))
        return st

    def start(self, nid: int) -> None:
        # The controller exists (loaded from the newest snapshot) before the Raft
        # node's first Ready is handled.
        self.ctl[nid] = self._new_ctl(nid)
        super().start(nid)

    def crash(self, nid: int, wipe: bool = False) -> None:
        st = self.ctl.pop(nid, None)
        if st is not None:
            st.claim += 1
        super().crash(nid, wipe)

    def _load_image(self, nid: int, st: CtlState, data: bytes) -> None:
        end, _digest, blob = msgpack.unpackb(data)
        records = [decode_record(b, end - 1) for b in msgpack.unpackb(blob)]
        image = MetadataImage.from_records(records, end)
        if st.active:
            self.fail(f"n{nid} loads a snapshot while active")
        st.ctrl.load_snapshot(image)
        st.fed = end
        st.records_since_snapshot = 0
        self._count("ctl_snapshot_load")

    # ------------------------------------------------------------------ the Raft hooks

    def _handle_ready(self, node: SimNode, r: Any) -> None:
        if r.snapshot_loaded is not None:
            st = self.ctl.get(node.node_id)
            if st is not None:
                self._load_image(node.node_id, st, node.log.snapshot_data(r.snapshot_loaded))
        super()._handle_ready(node, r)

    def _apply(self, node: SimNode, hw: int) -> None:
        super()._apply(node, hw)
        self._feed(node)

    def _after(self, node: SimNode) -> None:
        super()._after(node)
        self._leadership(node)

    def _feed(self, node: SimNode) -> None:
        """Hand the newly committed batches to the controller (Raft's listener)."""
        nid = node.node_id
        st = self.ctl.get(nid)
        if st is None:
            return
        while st.fed < node.applied:
            data = node.log.read(st.fed, 1 << 20)
            if not data:
                self.fail(f"n{nid} controller at {st.fed} cannot read its log")
            progressed = False
            for pos, h in iter_headers(data, f"<n{nid} log>"):
                if h.base_offset != st.fed:
                    self.fail(f"n{nid} controller expects {st.fed}, log has {h.base_offset}")
                if h.next_offset > node.applied:
                    break
                records = decode_records(data, pos, h)
                self._check_registrations(h.base_offset, records)
                if st.active_from is not None and h.base_offset >= st.active_from:
                    st.fed = h.next_offset
                    st.ctrl.on_commit(h.last_offset)
                    self._answer_committed(nid, st)
                else:
                    st.ctrl.replay_batch(h.base_offset, records, h.append_time_ms)
                    st.fed = h.next_offset
                st.records_since_snapshot += len(records)
                progressed = True
                if st.fed >= node.applied:
                    break
            if not progressed:
                self.fail(f"n{nid} controller made no progress at {st.fed}")
        if st.records_since_snapshot >= self.p.snapshot_every:
            self._controller_snapshot(nid)

    def _check_registrations(self, base: int, records: list[Any]) -> None:
        for i, rec in enumerate(records):
            if type(rec) is RegisterBrokerRecord:
                off = base + i
                first = off - 1 if i > 0 and type(records[i - 1]) is BeginTransactionRecord else off
                if rec.broker_epoch not in (off, first):
                    self.fail(
                        f"RegisterBrokerRecord at {off} carries epoch {rec.broker_epoch}, "
                        "not its offset"
                    )

    def _controller_snapshot(self, nid: int) -> None:
        st = self.ctl[nid]
        img = st.ctrl.image
        # As the node does: only at a quiet moment (nothing uncommitted replayed,
        # no open transaction).
        if img.offset != st.fed - 1 or img.in_transaction:
            return
        if self.snapshot(nid, trim=self.rng.random() < 0.7) is not None:
            st.records_since_snapshot = 0

    def snapshot(self, nid: int, trim: bool = True) -> Any:
        node = self.nodes[nid]
        st = self.ctl.get(nid)
        c = node.core
        if c is None or st is None or node.applied <= node.log.start_offset:
            return None
        img = st.ctrl.image
        if img.offset != node.applied - 1 or img.in_transaction:
            return None
        sid = c.snapshot_id_at(node.applied)
        blob = msgpack.packb([encode_record(r) for r in img.to_records()])
        data = msgpack.packb([sid.end_offset, node.digest, blob])
        self._check_snapshot(nid, sid, data)
        node.log.create_snapshot(sid, data)
        if trim:
            node.log.delete_segments_below(sid.end_offset)
        self._count("snapshot")
        return sid

    # ------------------------------------------------------------------ leadership

    def _leadership(self, node: SimNode) -> None:
        nid = node.node_id
        c = node.core
        st = self.ctl.get(nid)
        if c is None or st is None:
            return
        if st.claimed is not None and not (c.is_leader and c.epoch == st.claimed):
            self._deactivate(nid, st)
        if c.is_leader and st.claimed != c.epoch:
            start = c.epoch_start_offset
            # Everything in the log first, as RaftClient claims: the core may
            # have appended a VotersRecord of its own (KIP-853 directory ids).
            if (
                start is not None
                and st.fed > start
                and st.fed == node.applied
                and st.fed >= node.log.end_offset
            ):
                self._activate(node, st)

    def _activate(self, node: SimNode, st: CtlState) -> None:
        c = node.core
        assert c is not None
        st.claimed = c.epoch
        st.claim += 1
        st.active_from = node.log.end_offset
        st.activated_at = self.now
        st.contacts.clear()
        st.registered_at.clear()
        st.busy_until = self.now
        st.fence_queued = False
        st.ctrl.activate(self.now)
        self._count("activation")
        records: list[MetadataRecord] = []
        if st.ctrl.image.in_transaction:
            records.append(AbortTransactionRecord("controller failover"))
            self._count("txn_abort")
        records += st.ctrl.bootstrap_records()
        if records:
            self._write(node, st, ControllerResult(tuple(records)))
        st.last_write_ms = self.now
        self._arm(node.node_id)
        self._arm_balance(node.node_id, st, self.p.balance_ms)

    def _arm_balance(self, nid: int, st: CtlState, delay: int) -> None:
        """The leader-balancing check, every balance_ms; at once again while a
        batch left more to do (the shell's loop)."""
        claim = st.claim

        def fire() -> None:
            if self.ctl.get(nid) is not st or st.claim != claim or not st.active:
                return
            if len(st.normal) >= 64:  # the queue is full: the next check tries again
                self._arm_balance(nid, st, self.p.balance_ms)
                return

            def balance(c: QuorumController, t: int, off: int) -> ControllerResult | None:
                result = c.maybe_balance_partition_leaders(t)
                more = result is not None and result.reply["more"]
                if result is not None:
                    for _ in result.records:
                        self._count("rebalance_election")
                    if more:
                        self._count("rebalance_more")
                self._arm_balance(nid, st, 0 if more else self.p.balance_ms)
                return result

            self._enqueue(nid, st, _Command("balance", balance, self.now + 10**9, None, False))

        self.at(self.now + delay, fire)

    def _deactivate(self, nid: int, st: CtlState) -> None:
        st.ctrl.deactivate(st.fed - 1)
        st.claimed = None
        st.active_from = None
        st.claim += 1
        hint = self._hint(nid)
        for q in (st.priority, st.normal):
            while q:
                cmd = q.popleft()
                self._reply(nid, cmd.reply_to, ("err", "NOT_CONTROLLER", hint))
        while st.waiting:
            _, reply_to, _ = st.waiting.popleft()
            self._reply(nid, reply_to, ("err", "NOT_CONTROLLER", hint))
        st.pumping = False
        self._count("deactivation")

    def _hint(self, nid: int) -> int | None:
        c = self.nodes[nid].core
        if c is None:
            return None
        lid = c.leader_id
        return None if lid == nid else lid

    # ------------------------------------------------------------------ writing

    def _write(self, node: SimNode, st: CtlState, result: ControllerResult) -> int:
        """Append the result's records (batched; a transaction if too large) and replay them."""
        c = node.core
        assert c is not None
        plan = to_batches(result.records, self.p.max_batch_bytes)
        if len(plan.batches) > 1:
            self._count("txn")
            if self.crash_mid_transaction and self.rng.random() < 0.3:
                # Crash soon, perhaps before the whole transaction commits: the next
                # leader must abort what is left open.
                nid = node.node_id
                self.at(self.now + self.rng.randint(0, 4), lambda: self._crash_for_txn(nid))
        for rec in result.records:
            if type(rec) is PartitionChangeRecord and rec.leader_recovery_state == RECOVERING:
                self._count("unclean_election")
            elif type(rec) is PartitionChangeRecord and rec.leader_recovery_state == RECOVERED:
                self._count("recovery_ended")
        self._check_changes(node.node_id, st.ctrl.image, result.records)
        first, last = c.propose(plan.batches, self.now)
        st.ctrl.replay_batch(first, plan.records, self.now)
        if st.ctrl.image.offset != last:
            self.fail(f"n{node.node_id} replayed to {st.ctrl.image.offset}, appended to {last}")
        st.last_write_ms = self.now
        self._after(node)
        return last

    crash_mid_transaction = False

    def _crash_for_txn(self, nid: int) -> None:
        if self.nodes[nid].up:
            self.crash(nid)
            self._count("fault:crash_mid_txn")
            self.at(self.now + self.rng.randint(50, 1500), lambda: self._restart(nid))

    def _restart(self, nid: int) -> None:
        if not self.nodes[nid].up:
            self.start(nid)

    def _answer_committed(self, nid: int, st: CtlState) -> None:
        while st.waiting and st.waiting[0][0] < st.fed:
            _, reply_to, body = st.waiting.popleft()
            self._reply(nid, reply_to, ("ok", body))

    # ------------------------------------------------------------------ the event queue

    def _enqueue(self, nid: int, st: CtlState, cmd: _Command) -> None:
        lane = st.priority if cmd.priority else st.normal
        if len(lane) >= 64:  # the bounded queue
            self._reply(nid, cmd.reply_to, ("err", "REQUEST_TIMED_OUT", None))
            self._count("queue_full")
            return
        lane.append(cmd)
        self._pump(nid, st)

    def _pump(self, nid: int, st: CtlState) -> None:
        if st.pumping or not (st.priority or st.normal):
            return
        st.pumping = True
        claim = st.claim
        lo, hi = self.p.service_ms
        at = max(self.now, st.busy_until) + self.rng.randint(lo, hi)

        def run() -> None:
            if self.ctl.get(nid) is not st or st.claim != claim:
                return
            st.pumping = False
            if not st.active:
                return
            cmd = st.priority.popleft() if st.priority else st.normal.popleft()
            st.busy_until = self.now
            self._execute(nid, st, cmd)
            if self.ctl.get(nid) is st and st.claim == claim:
                self._arm(nid)
                self._pump(nid, st)

        self.at(at, run)

    def _execute(self, nid: int, st: CtlState, cmd: _Command) -> None:
        node = self.nodes[nid]
        c = node.core
        assert c is not None
        if self.now > cmd.deadline:
            self._count("timed_out")
            self._reply(nid, cmd.reply_to, ("err", "REQUEST_TIMED_OUT", None))
            return
        try:
            result = cmd.generate(st.ctrl, self.now, node.log.end_offset)
        except ApiError as e:
            self._count(f"err:{e.code}")
            self._reply(nid, cmd.reply_to, ("err", e.code, self._hint(nid)))
            return
        # the shell's steps are one instant here: a fence's records are drawn at once
        result = ControllerResult(()) if result is None else result.drained()
        if cmd.name == "fence":
            self._check_fence(nid, st, result)
        if cmd.name == "register" and result.records:
            reg = result.records[0]
            if type(reg) is RegisterBrokerRecord:
                st.registered_at[(reg.broker_id, reg.broker_epoch)] = self.now
        self._plan = self._plan_of(st.ctrl.image, cmd)
        try:
            last = self._write(node, st, result) if result.records else node.log.end_offset - 1
        except NotLeaderError:
            self._reply(nid, cmd.reply_to, ("err", "NOT_CONTROLLER", self._hint(nid)))
            return
        if self.ctl.get(nid) is not st or not st.active:
            # the write lost leadership on the way (its Ready demoted the node)
            self._reply(nid, cmd.reply_to, ("err", "NOT_CONTROLLER", self._hint(nid)))
            return
        if last < st.fed:
            self._reply(nid, cmd.reply_to, ("ok", result.reply))
        else:
            st.waiting.append((last, cmd.reply_to, result.reply))

    def _arm(self, nid: int) -> None:
        """The deferred events: the fence check and the NoOp when idle."""
        st = self.ctl.get(nid)
        if st is None or not st.active:
            return
        check = st.ctrl.next_fence_check_ms()
        wake = st.last_write_ms + self.p.idle_ms
        if check is not None and not st.fence_queued:
            wake = min(wake, check)
        st.timer_gen += 1
        gen, claim = st.timer_gen, st.claim

        def fire() -> None:
            if self.ctl.get(nid) is not st or st.claim != claim or st.timer_gen != gen:
                return
            now = self.now
            check = st.ctrl.next_fence_check_ms()
            if check is not None and check <= now and not st.fence_queued:
                st.fence_queued = True

                def fence(c: QuorumController, t: int, off: int) -> ControllerResult | None:
                    st.fence_queued = False
                    return c.maybe_fence_stale_broker(t)

                self._enqueue(nid, st, _Command("fence", fence, now + 10**9, None, True))
            if st.last_write_ms + self.p.idle_ms <= now:
                st.last_write_ms = now
                self._enqueue(
                    nid, st, _Command("noop", lambda c, t, o: c.noop(), now + 10**9, None, True)
                )
            self._arm(nid)

        # The timer task runs late by a few ms (an asyncio timer behind other work),
        # so commands queued meanwhile may run after a session expired but before
        # its fence is queued.
        lag = self.rng.randint(0, self.p.timer_lag_ms)
        self.at(max(wake, self.now + 1) + lag, fire)

    # ------------------------------------------------------------------ the client network

    def _net_delay(self) -> int | None:
        net = self.net
        if net.drop and self.rng.random() < net.drop:
            self._count("client_drop")
            return None
        d = self.rng.randint(net.min_delay_ms, net.max_delay_ms)
        if net.slow and self.rng.random() < net.slow:
            d += self.rng.randint(0, net.slow_max_ms)
        return d

    def client_send(self, src: int, process: int, corr: int, nid: int, req: tuple) -> None:
        """A client (broker or admin) request to node `nid`."""
        if (src, nid) in self.bblocked:
            return
        d = self._net_delay()
        if d is None:
            return

        def arrive() -> None:
            if (src, nid) in self.bblocked:
                return
            self._on_request(nid, (src, process, corr), req)

        self.at(self.now + d, arrive)

    def _reply(self, nid: int, reply_to: tuple[int, int, int] | None, msg: tuple) -> None:
        if reply_to is None:
            return
        src = reply_to[0]
        if (nid, src) in self.bblocked:
            return
        d = self._net_delay()
        if d is None:
            return
        st = self.ctl.get(nid)
        committed = -1 if st is None else st.fed - 1

        def arrive() -> None:
            if (nid, src) in self.bblocked:
                return
            self._on_reply(reply_to, nid, msg, committed)

        self.at(self.now + d, arrive)

    def _on_request(self, nid: int, reply_to: tuple[int, int, int], req: tuple) -> None:
        node = self.nodes[nid]
        st = self.ctl.get(nid)
        if node.core is None or st is None:
            if self.rng.random() < self.net.refused:
                self.at(self.now + 1, lambda: self._on_reply(reply_to, nid, ("down",), -1))
            return
        if not st.active:
            self._reply(nid, reply_to, ("err", "NOT_CONTROLLER", self._hint(nid)))
            return
        kind = req[0]
        deadline = self.now + self.p.request_timeout_ms
        if kind == "heartbeat":
            hb: BrokerHeartbeatRequest = req[1]
            # Contact counts on arrival, even if the command later times out (bug 15019).
            st.ctrl.note_heartbeat_contact(hb.broker_id, hb.broker_epoch, self.now)
            key = (hb.broker_id, hb.broker_epoch)
            st.contacts[key] = self.now
            b = self.brokers.get(hb.broker_id)
            if b is not None:
                b.last_delivered_hb = self.now

            def gen_hb(c: QuorumController, t: int, off: int) -> ControllerResult:
                result = c.heartbeat(hb, t)
                if b is not None:
                    b.last_processed_hb = t
                return result

            self._enqueue(nid, st, _Command("heartbeat", gen_hb, deadline, reply_to, True))
            self._arm(nid)
            return
        generate = _GENERATORS[kind](req[1])
        self._enqueue(nid, st, _Command(kind, generate, deadline, reply_to, False, req[1]))

    # ------------------------------------------------------------------ checks

    _plan: dict[tuple[str, int], tuple[int, ...] | None] | None = None

    @staticmethod
    def _plan_of(
        img: MetadataImage, cmd: _Command
    ) -> dict[tuple[str, int], tuple[int, ...] | None] | None:
        """The targets of a reassignment command, by (topic id, partition id)."""
        if cmd.name not in ("reassign", "cancel"):
            return None
        plan: dict[tuple[str, int], tuple[int, ...] | None] = {}
        for t in cmd.request.partitions:
            topic = img.topic_by_name(t.topic)
            if topic is not None:
                plan[(topic.topic_id, t.partition)] = t.replicas
        return plan

    def _check_planned(
        self, where: str, pre: PartitionRegistration, post: PartitionRegistration, target: Any
    ) -> None:
        """A change a reassignment plan made: toward its target, or back (cancel)."""
        if target is None:
            original = tuple(r for r in pre.replicas if r not in pre.adding_replicas)
            if post.reassigning or post.replicas != original:
                self.fail(f"{where}: a cancel does not go back to the original {original}")
            self._count("reassignment_done")
            return
        if post.replicas[: len(target)] != target:
            self.fail(f"{where}: the replicas do not start with the target {target}")
        if not post.reassigning:
            if post.replicas != target:
                self.fail(f"{where}: completed at once but not at the target {target}")
            return
        if set(post.removing_replicas) != set(post.replicas) - set(target):
            self.fail(f"{where}: removes other than the replicas the target drops")
        if set(post.adding_replicas) != set(target) - set(pre.replicas):
            self.fail(f"{where}: adds other than the target's new replicas")

    def _check_changes(
        self, nid: int, img: MetadataImage, records: tuple[MetadataRecord, ...]
    ) -> None:
        """Each partition change the active controller writes, against the state it
        changes: ELR elections and reassignment transitions (KIP-455)."""
        after: dict[tuple[str, int], PartitionRegistration] = {}
        for rec in records:
            if type(rec) is not PartitionChangeRecord:
                continue
            key = (rec.topic_id, rec.partition_id)
            topic = img.topics.get(rec.topic_id)
            pre = after.get(key) or (None if topic is None else topic.partitions.get(key[1]))
            if pre is None:
                continue  # a partition created in the same write
            post = after[key] = pre.merge(rec)
            where = f"n{nid} change {rec!r} of {pre}"
            if rec.leader >= 0 and rec.leader != pre.leader and rec.leader in pre.elr:
                self._count("elr_election")
            if (
                rec.leader >= 0
                and not pre.isr
                and not pre.elr
                and pre.last_known_elr == (rec.leader,)
            ):
                self._count("last_known_leader_election")
            if rec.eligible_leader_replicas is not None and any(
                type(r) is RegisterBrokerRecord for r in records
            ):
                self._count("unclean_shutdown_leaves_elr")
            if rec.eligible_leader_replicas:
                self._count("elr_kept")
            plan = self._plan
            if plan is not None and key in plan:
                self._check_planned(where, pre, post, plan[key])
            elif pre.reassigning and post.reassigning:
                if not set(pre.replicas) <= set(post.replicas):
                    self.fail(f"{where}: a reassigning partition lost a replica")
            elif pre.reassigning:
                target = tuple(r for r in pre.replicas if r not in pre.removing_replicas)
                original = tuple(r for r in pre.replicas if r not in pre.adding_replicas)
                if post.replicas not in (target, original):
                    self.fail(f"{where}: ends with neither the target nor the original")
                self._count("reassignment_done")
            elif post.reassigning:
                target = set(post.replicas) - set(post.removing_replicas)
                if not set(pre.replicas) <= set(post.replicas) or not target:
                    self.fail(f"{where}: starts without the original and a target")
                if set(post.adding_replicas) != target - set(pre.replicas):
                    self.fail(f"{where}: adds other than the target's new replicas")
                if set(post.removing_replicas) != set(pre.replicas) - target:
                    self.fail(f"{where}: removes other than the replicas the target drops")
            elif not set(post.replicas) <= set(pre.replicas):
                self.fail(f"{where}: replicas grew without a reassignment")

    def _check_fence(self, nid: int, st: CtlState, result: ControllerResult) -> None:
        if not result.records:
            return
        rec = result.records[-1]
        if type(rec) is not FenceBrokerRecord:
            self.fail(f"n{nid} session fence ends with {rec!r}")
        self._count("stale_fence")
        key = (rec.id, rec.epoch)
        s = self.p.session_ms
        last = st.contacts.get(key)
        if last is not None and last > self.now - s:
            self.fail(
                f"n{nid} fenced broker {rec.id} (epoch {rec.epoch}) although its heartbeat "
                f"reached this active controller at t={last}, within the session of {s} ms"
            )
        if self.now < st.activated_at + s:
            self.fail(
                f"n{nid} fenced broker {rec.id} {self.now - st.activated_at} ms after "
                f"activating (bug 18138: every broker counts as just seen)"
            )
        reg = st.registered_at.get(key)
        if reg is not None and self.now < reg + s:
            self.fail(f"n{nid} fenced broker {rec.id} {self.now - reg} ms after it registered")
        for r in result.records[:-1]:
            if type(r) is not PartitionChangeRecord:
                self.fail(f"n{nid} session fence of {rec.id} writes {r!r}")

    def _check(self) -> None:
        super()._check()
        for nid, st in self.ctl.items():
            img = st.ctrl.image
            key = (id(img), img.offset, st.active)
            if st.checked == key:
                continue
            st.checked = key
            self._check_image(nid, st, img)

    def _check_image(self, nid: int, st: CtlState, img: MetadataImage) -> None:
        brokers = img.brokers
        elr_on = st.ctrl.elr_enabled()

        def unclean(name: str) -> bool:
            value = img.configs.get((TOPIC_RESOURCE, name), {}).get(
                "unclean.leader.election.enable"
            )
            return value == "true"

        def acceptable(r: int) -> bool:
            b = brokers.get(r)
            return b is not None and not b.fenced and not b.in_controlled_shutdown

        for topic in img.topics.values():
            for pid, p in topic.partitions.items():
                where = f"n{nid} image at {img.offset}: {topic.name}-{pid} {p}"
                if p.leader >= 0:
                    b = brokers.get(p.leader)
                    if b is None or b.fenced:
                        self.fail(f"{where}: its leader is fenced or unregistered")
                    if p.leader not in p.isr:
                        self.fail(f"{where}: its leader is not in its ISR")
                if p.leader_recovery_state == RECOVERING and len(p.isr) > 1:
                    self.fail(f"{where}: a RECOVERING partition has more than one ISR member")
                if set(p.isr) & set(p.elr):
                    self.fail(f"{where}: ISR and ELR overlap")
                if not set(p.isr) | set(p.elr) <= set(p.replicas):
                    self.fail(f"{where}: an ISR or ELR member is not a replica")
                if p.elr and not elr_on:
                    self.fail(f"{where}: an ELR with eligible leader replicas off")
                if p.leader < 0 and (
                    any(acceptable(r) for r in p.isr)
                    or (not p.isr and any(acceptable(r) for r in p.elr))
                ):
                    self.fail(f"{where}: leaderless while an eligible replica could lead")
                if p.leader < 0 and unclean(topic.name) and any(map(acceptable, p.replicas)):
                    self.fail(f"{where}: leaderless with unclean election on and a live replica")
        index = ReplicationIndex()
        for topic in img.topics.values():
            for pid, p in topic.partitions.items():
                index.partition_changed(topic.topic_id, pid, None, p)
        mine = st.ctrl.index

        def norm(d: dict[int, set[Any]]) -> dict[int, set[Any]]:
            return {k: v for k, v in d.items() if v}

        if (
            norm(mine.in_isr) != norm(index.in_isr)
            or norm(mine.in_elr) != norm(index.in_elr)
            or norm(mine.led_by) != norm(index.led_by)
            or mine.leaderless != index.leaderless
            or mine.reassigning != index.reassigning
            or mine.imbalanced != index.imbalanced
        ):
            self.fail(f"n{nid} replication index differs from its image at {img.offset}")
        committed = img.offset == st.fed - 1
        if not committed:
            return
        for bid, b in img.brokers.items():
            if b.broker_epoch < st.epochs.get(bid, -1):
                self.fail(
                    f"n{nid} broker {bid} epoch went down {st.epochs[bid]} -> {b.broker_epoch}"
                )
            st.epochs[bid] = b.broker_epoch
        d = _digest(img)
        known = self.image_digest.setdefault(img.offset, d)
        if known != d:
            self.fail(f"n{nid} committed image at {img.offset} differs from another node's")

    # ------------------------------------------------------------------ network faults

    def heal(self) -> None:
        super().heal()
        self.bblocked.clear()

    def split_with_brokers(self, groups: list[list[int]]) -> None:
        """A node partition that also splits the brokers among the groups."""
        self.partition(*groups)
        for b in self.brokers:
            g = self.broker_rng.randrange(len(groups))
            for i, nodes in enumerate(groups):
                if i != g:
                    for n in nodes:
                        self.bblocked.add((b, n))
                        self.bblocked.add((n, b))

    # ------------------------------------------------------------------ brokers

    def add_broker(self, bid: int, rack: str | None) -> SimBroker:
        b = SimBroker(bid, rack, target=self.broker_rng.choice(self.voter_ids))
        self.brokers[bid] = b
        return b

    def broker_start(self, b: SimBroker) -> None:
        b.process += 1
        b.up = True
        b.incarnation = f"00000000-0000-4000-8000-{b.bid:04d}{b.process:08d}"
        b.epoch = None
        b.registering_since = None
        b.reg_corr = b.hb_corr = None
        b.shutting_down = False
        b.silent_until = 0
        b.fenced = True
        # the clean-shutdown marker is read once at start (Kafka's BrokerLifecycleManager)
        b.previous_epoch, b.clean_epoch = b.clean_epoch, -1
        self._count("broker_start")
        self._broker_tick(b, 0)

    def broker_stop(self, b: SimBroker) -> None:
        b.up = False
        b.process += 1
        b.tick_gen += 1

    def _broker_tick(self, b: SimBroker, delay: int) -> None:
        b.tick_gen += 1
        gen, proc = b.tick_gen, b.process

        def tick() -> None:
            if b.tick_gen != gen or b.process != proc or not b.up:
                return
            self._broker_act(b)
            jitter = self.broker_rng.randint(-self.p.heartbeat_ms // 10, self.p.heartbeat_ms // 10)
            self._broker_tick(b, self.p.heartbeat_ms + jitter)

        self.at(self.now + delay, tick)

    def _corr(self, b: SimBroker) -> int:
        b.next_corr += 1
        return b.next_corr

    def _broker_act(self, b: SimBroker) -> None:
        timeout = self.p.request_timeout_ms
        if b.epoch is None:
            if b.registering_since is not None and self.now - b.registering_since < timeout:
                return
            if b.registering_since is not None:
                self._rotate(b)
            b.registering_since = self.now
            b.reg_corr = self._corr(b)
            req = RegisterBrokerRequest(
                b.bid,
                CLUSTER_ID,
                b.incarnation,
                (Endpoint("PLAINTEXT", f"b{b.bid}", 9092),),
                b.rack,
                (),
                b.previous_epoch,
            )
            self.client_send(b.bid, b.process, b.reg_corr, b.target, ("register", req))
            return
        if self.now < b.silent_until:
            return
        if b.hb_corr is not None and self.now - b.hb_sent_at < timeout:
            return
        if b.hb_corr is not None:
            self._rotate(b)
        b.hb_corr = self._corr(b)
        b.hb_sent_at = self.now
        req = BrokerHeartbeatRequest(
            b.bid,
            b.epoch,
            b.metadata_offset,
            self.now < b.want_fence_until,
            b.shutting_down,
        )
        self.client_send(b.bid, b.process, b.hb_corr, b.target, ("heartbeat", req))

    def _rotate(self, b: SimBroker) -> None:
        ids = self.voter_ids
        b.target = ids[(ids.index(b.target) + 1) % len(ids)] if b.target in ids else ids[0]

    def _on_reply(
        self, reply_to: tuple[int, int, int], nid: int, msg: tuple, committed: int
    ) -> None:
        src, process, corr = reply_to
        if src < 0:
            who = "admin" if src == -1 else "alter_partition"
            self._count(f"{who}:{msg[1] if msg[0] == 'err' else msg[0]}")
            kind = self.admin_kinds.pop(corr, None) if src == -1 else None
            if kind in ("reassign", "cancel"):
                self._count(f"{kind}:{msg[1] if msg[0] == 'err' else msg[0]}")
            return
        b = self.brokers[src]
        if b.process != process or not b.up:
            return
        retry_soon = False
        if corr == b.reg_corr:
            b.reg_corr = None
            b.registering_since = None
            if msg[0] == "ok":
                b.epoch = msg[1]["broker_epoch"]
                b.fenced = True
                self._count("registered")
                retry_soon = True
            else:
                retry_soon = self._follow(b, nid, msg)
        elif corr == b.hb_corr:
            b.hb_corr = None
            if msg[0] == "ok":
                body = msg[1]
                # The broker follows the log through heartbeat replies only, so a
                # fresh registration reports an offset below its epoch once.
                b.metadata_offset = max(b.metadata_offset, committed)
                if b.fenced and not body["is_fenced"]:
                    self._count("unfenced")
                b.fenced = body["is_fenced"]
                if body["should_shut_down"]:
                    self._count("controlled_shutdown_done" if b.shutting_down else "shutdown_now")
                    if b.shutting_down:
                        b.clean_epoch = b.epoch if b.epoch is not None else -1
                    self.broker_stop(b)
                    self._restart_later(b)
                    return
            elif msg[0] == "err" and msg[1] == "STALE_BROKER_EPOCH":
                b.epoch = None
                retry_soon = True
            else:
                retry_soon = self._follow(b, nid, msg)
        else:
            return
        if retry_soon:
            self._broker_tick(b, self.broker_rng.randint(1, 20))

    def _follow(self, b: SimBroker, nid: int, msg: tuple) -> bool:
        if msg[0] == "down":
            self._rotate(b)
            return False
        if msg[1] == "NOT_CONTROLLER":
            if msg[2] is not None:
                b.target = msg[2]
                return True
            self._rotate(b)
        return False

    def _restart_later(self, b: SimBroker) -> None:
        lo, hi = self.restart_delay

        def again() -> None:
            if not b.up:
                self.broker_start(b)

        self.at(self.now + self.broker_rng.randint(lo, hi), again)

    restart_delay = (200, 4000)

    # ------------------------------------------------------------------ views and admin

    def committed_view(self) -> MetadataImage | None:
        """The freshest standby image (committed records only), as a broker sees metadata."""
        best = None
        for st in self.ctl.values():
            if not st.active and (best is None or st.fed > best.fed):
                best = st
        return None if best is None else best.ctrl.image

    def admin(self, req: tuple) -> None:
        self.admin_corr += 1
        self.admin_kinds[self.admin_corr] = req[0]
        nid = self.leader() or self.broker_rng.choice(self.voter_ids)
        self.client_send(-1, 0, self.admin_corr, nid, req)

    def active_node(self) -> int | None:
        for nid, st in self.ctl.items():
            if st.active:
                return nid
        return None


def _digest(img: MetadataImage) -> bytes:
    return hashlib.sha1(repr((img.to_dict(), img.in_transaction)).encode()).digest()


def _gen_register(req: RegisterBrokerRequest):  # noqa: ANN202
    return lambda c, now, off: c.register_broker(req, now, off)


def _gen(method: str):  # noqa: ANN202
    def make(req: Any):  # noqa: ANN202
        return lambda c, now, off: getattr(c, method)(req, now)

    return make


_GENERATORS: dict[str, Callable[[Any], Callable[..., Any]]] = {
    "register": _gen_register,
    "create_topic": _gen("create_topic"),
    "delete_topic": _gen("delete_topic"),
    "create_partitions": _gen("create_partitions"),
    "alter_configs": _gen("alter_configs"),
    "alter_partition": _gen("alter_partition"),
    "elect": _gen("elect_leaders"),
    "unregister": _gen("unregister_broker"),
    "reassign": _gen("alter_partition_reassignments"),
    "cancel": _gen("alter_partition_reassignments"),
}


# ====================================================================== random runs

FAULT_KINDS = ("drop", "reorder", "partition", "crash", "stall", "resign", "flush_stall")
LIVENESS_BOUND_MS = 40_000


@dataclass
class ControllerSeedResult:
    seed: int
    faults: tuple[str, ...]
    stats: dict[str, int]
    committed: int


def build(
    seed: int, trace: bool = False
) -> tuple[ControllerSimulation, random.Random, set[str], int]:
    rng = random.Random(f"controller-scenario/{seed}")
    faults = set(FAULT_KINDS) if seed % 8 == 0 else {k for k in FAULT_KINDS if rng.random() < 0.5}
    session, interval = rng.choice([(1500, 300), (2000, 450), (2500, 500)])
    params = ControllerSimParams(
        session_ms=session,
        heartbeat_ms=interval,
        request_timeout_ms=rng.choice([600, 1000]),
        idle_ms=500,
        max_batch_bytes=rng.choice([256, 1024, 8 * 1024 * 1024]),
        snapshot_every=rng.choice([20, 60, 200]),
        service_ms=rng.choice([(0, 1), (0, 5), (1, 10)]),
        n_brokers=rng.randint(3, 6),
        timer_lag_ms=rng.choice([0, 20, 100]),
        elr=rng.random() < 0.75,
        min_isr=rng.choice([1, 1, 2]),
        balance_ms=rng.choice([1000, 3000]),
        balance_batch=rng.choice([1, 3, 1000]),
    )
    net = NetParams(
        min_delay_ms=1,
        max_delay_ms=rng.choice([2, 5, 20]),
        drop=rng.choice([0.01, 0.05]) if "drop" in faults else 0.0,
        slow=rng.choice([0.02, 0.1]) if "reorder" in faults else 0.0,
        slow_max_ms=rng.choice([100, 400]),
    )
    disk = DiskParams(
        max_flush_ms=rng.choice([1, 3, 10]),
        stall=0.02 if "flush_stall" in faults else 0.0,
        stall_max_ms=rng.choice([300, 1500]),
    )
    config = RaftConfig(fetch_max_bytes=rng.choice([1 << 20, 2048, 1]), snapshot_chunk_bytes=1024)
    sim = ControllerSimulation(
        seed,
        params,
        n_voters=3,
        n_observers=rng.choice([0, 0, 1]),
        net=net,
        disk=disk,
        config=config,
        trace=trace,
    )
    duration = rng.randint(8_000, 14_000)
    return sim, rng, faults, duration


def run_seed(seed: int, trace: bool = False) -> ControllerSeedResult:
    sim, rng, faults, duration = build(seed, trace)
    p = sim.p
    end_faults = duration
    racks = [None, "a", "b"]
    for i in range(p.n_brokers):
        b = sim.add_broker(BROKER_BASE_ID + i, racks[i % 3] if rng.random() < 0.5 else None)
        sim.at(rng.randint(0, 1500), lambda b=b: sim.broker_start(b))

    sched = FaultScheduler(sim, rng, end_faults)
    every, restart_later = sched.every, sched.restart_later

    # ---------------------------------------------------------------- broker scripts
    brokers = list(sim.brokers.values())

    def lifecycle() -> None:
        b = rng.choice(brokers)
        if not b.up or b.shutting_down:
            return
        what = rng.random()
        if what < 0.35:  # silent for a while: fenced if longer than the session
            b.silent_until = sim.now + rng.randint(p.session_ms // 3, p.session_ms * 2)
            sim._count("script:silence")
        elif what < 0.55:  # crash; a new incarnation later
            sim.broker_stop(b)
            sim._restart_later(b)
            sim._count("script:crash")
        elif what < 0.8:  # controlled shutdown
            b.shutting_down = True
            sim._count("script:controlled_shutdown")
        else:  # asks to be fenced for a while
            b.want_fence_until = sim.now + rng.randint(200, 2 * p.session_ms)
            sim._count("script:want_fence")

    every(400, 1500, lifecycle)

    # ---------------------------------------------------------------- admin and ISR changes
    topics: list[str] = []

    def admin() -> None:
        what = rng.random()
        if what < 0.35 or not topics:
            name = f"t{len(topics)}"
            topics.append(name)
            if rng.random() < 0.7:
                req = CreateTopicRequest(name, rng.randint(1, 8), rng.randint(1, 3), None, {})
            else:
                ids = [b.bid for b in brokers]
                assignments = tuple(
                    tuple(rng.sample(ids, rng.randint(1, min(3, len(ids)))))
                    for _ in range(rng.randint(1, 4))
                )
                req = CreateTopicRequest(name, None, None, assignments, {})
            sim.admin(("create_topic", req))
        elif what < 0.45:
            sim.admin(("delete_topic", rng.choice(topics)))
        elif what < 0.55:
            sim.admin(
                (
                    "create_partitions",
                    CreatePartitionsRequest(rng.choice(topics), rng.randint(2, 12), None),
                )
            )
        elif what < 0.7:
            value = rng.choice(["true", "true", "false", None])
            sim.admin(
                (
                    "alter_configs",
                    AlterConfigsRequest(
                        rng.choice(topics), {"unclean.leader.election.enable": value}
                    ),
                )
            )
        elif what < 0.9:
            view = sim.committed_view()
            leaderless = [
                (t.name, pid)
                for t in (view.topics.values() if view is not None else ())
                for pid, part in t.partitions.items()
                if part.leader < 0
            ]
            if leaderless and rng.random() < 0.7:
                name, pid = rng.choice(leaderless)
                req = ElectLeadersRequest(name, pid, "unclean")
            else:
                kind = rng.choice(["preferred", "unclean"])
                req = ElectLeadersRequest(rng.choice(topics), rng.randint(0, 3), kind)
            sim.admin(("elect", req))
        elif what < 0.95:
            sim.admin(("unregister", rng.choice(brokers).bid))
        else:
            value = rng.choice(["1", "2", "3", None])
            sim.admin(
                (
                    "alter_configs",
                    AlterConfigsRequest(rng.choice(topics), {"min.insync.replicas": value}),
                )
            )

    every(300, 1200, admin)

    def reassign() -> None:
        """A reassignment (some invalid: an unknown broker, a replica twice, an
        unknown partition) or a cancel (some with nothing in progress)."""
        view = sim.committed_view()
        if view is None or not view.topics:
            return
        parts = [(t.name, pid, p) for t in view.topics.values() for pid, p in t.partitions.items()]
        if not parts:
            return
        ongoing = [x for x in parts if x[2].reassigning]
        if rng.random() < 0.25:
            name, pid, _ = rng.choice(ongoing if ongoing and rng.random() < 0.8 else parts)
            target = ReassignmentTarget(name, pid, None)
            sim.admin(("cancel", AlterPartitionReassignmentsRequest((target,))))
            return
        ids = [b.bid for b in brokers]
        entries = []
        for name, pid, _ in rng.sample(parts, min(len(parts), rng.randint(1, 3))):
            replicas = rng.sample(ids, rng.randint(1, min(3, len(ids))))
            bad = rng.random()
            if bad < 0.05:
                replicas.append(999)  # not registered
            elif bad < 0.1:
                replicas.append(replicas[0])  # twice
            elif bad < 0.13:
                pid += 100  # no such partition
            entries.append(ReassignmentTarget(name, pid, tuple(replicas)))
        sim.admin(("reassign", AlterPartitionReassignmentsRequest(tuple(entries))))

    every(400, 1500, reassign)

    def alter_partition() -> None:
        view = sim.committed_view()
        if view is None:
            return
        led = [
            (t, pid, part)
            for t in view.topics.values()
            for pid, part in t.partitions.items()
            if part.leader >= 0
        ]
        if not led:
            return
        recovering = [x for x in led if x[2].leader_recovery_state == RECOVERING]
        t, pid, part = rng.choice(recovering or led)
        b = sim.brokers.get(part.leader)
        if b is None or not b.up or b.epoch is None:
            return
        isr = list(part.isr)
        state = part.leader_recovery_state
        if state == RECOVERING:
            state = RECOVERED  # the leader recovered: it ends recovery (KIP-903)
        elif rng.random() < 0.5 and len(isr) > 1:
            isr.remove(rng.choice([r for r in isr if r != part.leader]))
        else:
            outside = [r for r in part.replicas if r not in isr]
            if outside:
                isr.append(rng.choice(outside))
        members = []
        for r in isr:
            reg = view.brokers.get(r)
            members.append(IsrMember(r, reg.broker_epoch if reg is not None else -1))
        req = AlterPartitionRequest(
            b.bid,
            b.epoch,
            t.topic_id,
            pid,
            part.leader_epoch,
            part.partition_epoch,
            tuple(members),
            state,
        )
        sim.client_send(-2, 0, 0, b.target, ("alter_partition", req))

    every(150, 600, alter_partition)

    # ---------------------------------------------------------------- faults
    nodes = list(sim.nodes)
    if "partition" in faults:
        sched.splits(
            nodes,
            lambda a, b: sim.split_with_brokers([a, b]),
            every=(1_500, 5_000),
            heal=(300, 4_000),
        )
    if "crash" in faults:
        sim.crash_mid_transaction = True

        def crash() -> None:
            up = [n.node_id for n in sim.running()]
            if up:
                leader = sim.leader()
                nid = leader if leader is not None and rng.random() < 0.6 else rng.choice(up)
                sim.crash(nid)
                sim._count("fault:crash")
                restart_later(nid, 20, 3_000)

        every(1_000, 4_000, crash)
    if "resign" in faults:

        def graceful() -> None:
            nid = sim.leader()
            if nid is not None:
                sim.resign(nid)
                sim._count("fault:resign")

        every(2_000, 6_000, graceful)
    if "stall" in faults:

        def stall() -> None:
            nid = sim.active_node()
            if nid is not None:
                st = sim.ctl[nid]
                st.busy_until = max(st.busy_until, sim.now) + rng.randint(
                    100, 2 * p.request_timeout_ms
                )
                sim._count("fault:stall")

        every(800, 3_000, stall)

    sim.run_until(end_faults)

    # ---------------------------------------------------------------- healing
    sim.heal()
    sim.net.drop = sim.net.slow = 0.0
    sim.disk.stall = 0.0
    sim.restart_delay = (50, 300)
    # No more crashes: a transaction written while checking must not kill the
    # active controller the checks below watch.
    sim.crash_mid_transaction = False
    for nid in nodes:
        if not sim.nodes[nid].up:
            sim.start(nid)
    for b in brokers:
        b.silent_until = 0
        b.want_fence_until = 0
        if not b.up:
            sim.at(sim.now + rng.randint(1, 300), lambda b=b: (not b.up) and sim.broker_start(b))
    healed = sim.now
    deadline = healed + LIVENESS_BOUND_MS

    def all_unfenced() -> int | None:
        """The offset of an active controller's committed image showing every broker
        registered at its current epoch and unfenced, and every node caught up to it."""
        nid = sim.active_node()
        if nid is None:
            return None
        st = sim.ctl[nid]
        img = st.ctrl.image
        if img.offset != st.fed - 1:
            return None
        for b in brokers:
            reg = img.brokers.get(b.bid)
            if not b.up or b.epoch is None or reg is None or reg.broker_epoch != b.epoch:
                return None
            if reg.fenced or reg.in_controlled_shutdown:
                return None
        return img.offset

    if not sim.run_until_true(lambda: all_unfenced() is not None, deadline - sim.now):
        view = {b.bid: (b.up, b.epoch, b.fenced, b.shutting_down, b.target) for b in brokers}
        sim.fail(
            f"brokers not all registered and unfenced {LIVENESS_BOUND_MS} ms after healing: {view}"
        )
    target = all_unfenced()
    assert target is not None
    if not sim.run_until_true(
        lambda: all(st.fed > target for st in sim.ctl.values()), deadline - sim.now
    ):
        sim.fail(f"controllers did not all replay offset {target}")

    # A broker that falls silent now is fenced within its session (+1 s), and its
    # leaderships move.
    victim = rng.choice(brokers)
    victim.silent_until = 10**12
    sim.run_for(1)
    active = sim.active_node()
    assert active is not None

    def fenced_committed() -> bool:
        st = sim.ctl.get(active)
        if st is None or not st.active:
            return False
        img = st.ctrl.image
        reg = img.brokers.get(victim.bid)
        return img.offset == st.fed - 1 and reg is not None and reg.fenced

    bound = p.session_ms + 1000 + p.heartbeat_ms
    if not sim.run_until_true(fenced_committed, bound):
        sim.fail(f"silent broker {victim.bid} not fenced within {bound} ms")
    # Its session started at its last heartbeat to this controller (its arrival,
    # or its processing if it waited in the queue: the session restarts then), or
    # at the controller's activation if none reached it (every broker counts as
    # just seen).
    start = max(
        victim.last_delivered_hb or 0,
        victim.last_processed_hb or 0,
        sim.ctl[active].activated_at,
    )
    if sim.now > start + p.session_ms + 1000:
        sim.fail(
            f"silent broker {victim.bid} fenced {sim.now - start} ms after its session "
            f"started (session {p.session_ms} ms)"
        )
    img = sim.ctl[active].ctrl.image
    for t in img.topics.values():
        for part in t.partitions.values():
            if part.leader == victim.bid:
                sim.fail(f"fenced broker {victim.bid} still leads {t.name}")
    return ControllerSeedResult(seed, tuple(sorted(faults)), dict(sim.stats), sim.committed_end)
