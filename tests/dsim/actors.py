"""The deployed simulation's scripted actors, each a small loop on the seeded world.

- `BrokerAgent`: one broker process: registers (previous_broker_epoch from a clean
  shutdown, KIP-966), heartbeats every interval, follows NOT_CONTROLLER hints,
  re-registers on STALE_BROKER_EPOCH, and as a partition leader sends
  AlterPartition (shrink or expand the ISR, add a reassignment's new replica,
  end a RECOVERING leader's recovery) from its view of the committed log;
- `BrokerScripts`: what happens to the brokers: silences (fenced if longer than a
  session), crashes and restarts (a new incarnation, an unclean shutdown),
  controlled shutdowns, want_fence episodes;
- `AdminClient`: creates and deletes topics, adds partitions, toggles unclean
  leader election and min.insync.replicas, asks for preferred and unclean
  elections, unregisters brokers, starts (some invalid) and cancels reassignments;
- `FaultInjector`: controller crashes (often the leader), network partitions
  that include the brokers and the admin, fsync failures, process stalls;
- `Scenario`: the run: start, the faults for a while, then the healing checks
  (convergence, every broker back and unfenced, a silent broker fenced in time).

Every random choice comes from the world's seeded rng, in the order the single
simulated loop runs the actors, so a seed replays exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

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
from kraft.server.routes import HEARTBEAT, heartbeat_command
from metadata_log.records import RECOVERED, RECOVERING, Endpoint
from tests.dsim.cluster import ADMIN, BROKER_BASE_ID, LIVENESS_BOUND_MS, DeployedSim, Outcome


class BrokerAgent:
    """One broker: its process's state and its requests to the controllers."""

    def __init__(self, sim: DeployedSim, bid: int, rack: str | None) -> None:
        self.sim = sim
        self.bid = bid
        self.rack = rack
        self.target = sim.rng.choice(sim.voters)
        self.process = 0  # bumps on every (re)start: an old process's replies are dropped
        self.up = True
        self.epoch: int | None = None
        self.metadata_offset = -1
        self.silent_until = 0
        self.want_fence_until = 0
        self.fenced = True
        self.shutting_down = False
        self.clean_epoch = -1  # kept by a controlled shutdown, sent once restarted
        self.previous_epoch = -1
        self.last_heartbeat_ms = 0  # the last heartbeat that reached an active controller

    # ------------------------------------------------------------ the process

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.sim.p.heartbeat_ms / 1000)
            if not self.up or self.sim.now() < self.silent_until:
                continue
            if self.epoch is None:
                await self.register()
            else:
                await self.heartbeat()

    def stop(self) -> None:
        """The process dies (crash, or exit after a controlled shutdown)."""
        self.up = False
        self.process += 1
        self.epoch, self.fenced, self.shutting_down = None, True, False

    def restart(self) -> None:
        if self.up:
            return
        self.up = True
        self.silent_until = self.want_fence_until = 0
        # the clean-shutdown marker is read once at start (Kafka's BrokerLifecycleManager)
        self.previous_epoch, self.clean_epoch = self.clean_epoch, -1
        self.sim.event(f"b{self.bid} starts (previous epoch {self.previous_epoch})")

    def restart_later(self, lo: int, hi: int) -> None:
        self.sim.later(self.sim.rng.randint(lo, hi), self.restart)

    def _follow(self, out: Outcome) -> None:
        if out[0] == "err" and out[1] == "NOT_CONTROLLER" and out[2] is not None:
            self.target = out[2]
        elif out[0] != "ok":
            self.target = self.sim.next_voter(self.target)

    # ------------------------------------------------------------ registration

    async def register(self) -> None:
        sim, process = self.sim, self.process
        req = RegisterBrokerRequest(
            self.bid,
            sim.cluster_id,
            f"00000000-0000-4000-8000-{self.bid:04d}{self.process:08d}",
            (Endpoint("PLAINTEXT", f"b{self.bid}", 9092),),
            self.rack,
            (),
            self.previous_epoch,
        )

        def generate(c: Any, now: int, off: int) -> Any:
            result = c.register_broker(req, now, off)
            # a registration starts the session on the controller that wrote it
            sim.checker.contacts[(c.config.node_id, self.bid, result.reply["broker_epoch"])] = now
            return result

        out = await sim.command(self.bid, self.target, "register-broker", generate)
        if process != self.process:
            return
        if out[0] == "ok":
            self.epoch, self.fenced = out[1]["broker_epoch"], True
            sim.checker.acked.append(("register", (self.bid, self.epoch)))
            sim.event(f"b{self.bid} registered epoch {self.epoch}")
            sim.count("registered")
        elif out[0] == "err" and out[1] != "NOT_CONTROLLER":
            sim.count(f"err:{out[1]}")
        self._follow(out)

    # ------------------------------------------------------------ heartbeats

    async def heartbeat(self) -> None:
        sim, process = self.sim, self.process
        assert self.epoch is not None
        req = BrokerHeartbeatRequest(
            self.bid,
            self.epoch,
            self.metadata_offset,
            sim.now() < self.want_fence_until,
            self.shutting_down,
        )

        async def run(service: Any, node: Any) -> Any:
            # the heartbeat route's steps (kraft/server/routes.py), contact first
            if node.service.active:
                sim.checker.contacts[(node.node_id, self.bid, req.broker_epoch)] = sim.now()
                self.last_heartbeat_ms = sim.now()
            service.note_heartbeat_contact(req.broker_id, req.broker_epoch)
            return await service.write(HEARTBEAT, heartbeat_command(req), priority=True)

        out = await sim.request(self.bid, self.target, run)
        if process != self.process:
            return
        if out[0] == "ok":
            self._heartbeat_answered(out[1], out[2])
        elif out[0] == "err" and out[1] == "STALE_BROKER_EPOCH":
            sim.count("err:STALE_BROKER_EPOCH")
            self.epoch = None
        self._follow(out)

    def _heartbeat_answered(self, reply: dict[str, Any], committed: int) -> None:
        sim = self.sim
        self.metadata_offset = max(self.metadata_offset, committed)
        if self.fenced and not reply["is_fenced"]:
            sim.count("unfenced")
        self.fenced = reply["is_fenced"]
        if reply["should_shut_down"]:
            # a controlled shutdown done: the process exits, a new one starts later
            sim.event(f"b{self.bid} shut down")
            sim.count("controlled_shutdown" if self.shutting_down else "shutdown_told")
            if self.shutting_down:
                self.clean_epoch = self.epoch if self.epoch is not None else -1
            self.stop()
            self.restart_later(100, 2000)

    # ------------------------------------------------------------ ISR changes

    async def alter_partitions(self) -> None:
        """As a partition leader: one ISR change every while, from the committed view."""
        sim = self.sim
        while sim.faults_on:
            await asyncio.sleep(sim.rng.randint(300, 1500) / 1000)
            if (
                sim.faults_on
                and self.up
                and self.epoch is not None
                and sim.now() >= self.silent_until
            ):
                await self.alter_partition()

    async def alter_partition(self) -> None:
        sim, view = self.sim, self.sim.view()
        led = [
            (t, pid, p)
            for t in view.topics.values()
            for pid, p in t.partitions.items()
            if p.leader == self.bid
        ]
        if not led:
            return
        recovering = [x for x in led if x[2].leader_recovery_state == RECOVERING]
        topic, pid, part = sim.rng.choice(recovering or led)
        isr, state = list(part.isr), part.leader_recovery_state
        if state == RECOVERING:
            state = RECOVERED  # the leader recovered: it ends recovery (KIP-903)
        elif sim.rng.random() < 0.5 and len(isr) > 1:
            isr.remove(sim.rng.choice([r for r in isr if r != part.leader]))
        else:
            outside = [r for r in part.replicas if r not in isr]
            if not outside:
                return
            isr.append(sim.rng.choice(outside))  # caught up (an adding replica too)
        members = []
        for r in isr:
            reg = view.brokers.get(r)
            members.append(IsrMember(r, reg.broker_epoch if reg is not None else -1))
        assert self.epoch is not None
        req = AlterPartitionRequest(
            self.bid,
            self.epoch,
            topic.topic_id,
            pid,
            part.leader_epoch,
            part.partition_epoch,
            tuple(members),
            state,
        )
        out = await sim.command(
            self.bid,
            self.target,
            "alter-partition",
            lambda c, now, off: c.alter_partition(req, now),
        )
        sim.count(f"alter_partition:{out[1] if out[0] == 'err' else out[0]}")


class BrokerScripts:
    """What happens to the brokers, one event every while, in every seed."""

    def __init__(self, sim: DeployedSim, brokers: list[BrokerAgent]) -> None:
        self.sim = sim
        self.brokers = brokers

    async def run(self) -> None:
        sim = self.sim
        while sim.faults_on:
            await asyncio.sleep(sim.rng.randint(400, 1500) / 1000)
            b = sim.rng.choice(self.brokers)
            if not sim.faults_on or not b.up or b.shutting_down:
                continue
            what = sim.rng.random()
            if what < 0.35:
                self.silence(b)
            elif what < 0.55:
                self.crash(b)
            elif what < 0.8:
                self.controlled_shutdown(b)
            else:
                self.want_fence(b)

    def silence(self, b: BrokerAgent) -> None:
        """Silent for a while: fenced if longer than the session."""
        p = self.sim.p
        ms = self.sim.rng.randint(p.session_ms // 3, p.session_ms * 2)
        b.silent_until = self.sim.now() + ms
        self.sim.event(f"b{b.bid} silent {ms} ms")
        self.sim.count("fault:silence")

    def crash(self, b: BrokerAgent) -> None:
        """The process dies; a new incarnation starts later (an unclean shutdown)."""
        self.sim.event(f"b{b.bid} crash")
        self.sim.count("broker_crash")
        b.stop()
        b.restart_later(200, 4000)

    def controlled_shutdown(self, b: BrokerAgent) -> None:
        if b.epoch is not None:
            b.shutting_down = True
            self.sim.event(f"b{b.bid} controlled shutdown")

    def want_fence(self, b: BrokerAgent) -> None:
        b.want_fence_until = self.sim.now() + self.sim.rng.randint(200, 2 * self.sim.p.session_ms)
        self.sim.event(f"b{b.bid} wants to be fenced")
        self.sim.count("want_fence")


class AdminClient:
    """The admin: one command every while, to the controller it believes leads."""

    def __init__(self, sim: DeployedSim, brokers: list[BrokerAgent]) -> None:
        self.sim = sim
        self.broker_ids = [b.bid for b in brokers]
        self.target = sim.voters[0]
        self.topics: list[str] = []
        self.created = 0

    async def run(self) -> None:
        sim = self.sim
        ops: list[tuple[float, Callable[[], Any]]] = [
            (0.30, self.create_topic),
            (0.38, self.delete_topic),
            (0.46, self.add_partitions),
            (0.58, self.toggle_unclean),
            (0.62, self.set_min_isr),
            (0.74, self.elect),
            (0.78, self.unregister),
            (1.00, self.reassign),
        ]
        if sim.p.big_topic:
            await self.create_big_topic()
        while sim.faults_on:  # the healing checks watch a cluster left alone
            await asyncio.sleep(sim.rng.randint(200, 900) / 1000)
            if not sim.faults_on:
                return
            r = sim.rng.random()
            op = self.create_topic if not self.topics else next(f for p, f in ops if r < p)
            name, generate, kind = op()
            out = await sim.command(ADMIN, self.target, name, generate)
            self._answered(kind, out)

    async def create_big_topic(self) -> None:
        """The big topic (replication factor 2), as soon as two brokers are up (after
        the faults too: then the final silent broker's fence is a large write)."""
        sim = self.sim
        req = CreateTopicRequest("big", sim.p.big_topic, 2, None, {})
        while True:
            await asyncio.sleep(0.2)
            out = await sim.command(
                ADMIN, self.target, "create-topic", lambda c, now, off: c.create_topic(req, now)
            )
            self._answered("big", out)
            if out[0] == "ok":
                sim.checker.acked.append(("topic", ("big", out[1]["topic_id"])))
                return

    def _answered(self, kind: str, out: Outcome) -> None:
        sim = self.sim
        code = out[1] if out[0] == "err" else out[0]
        sim.count(f"admin:{code}")
        if kind in ("reassign", "cancel"):
            sim.count(f"{kind}:{code}")
        if kind == "topic" and out[0] == "ok":
            sim.checker.acked.append(("topic", (out[1]["name"], out[1]["topic_id"])))
            sim.event(f"topic {out[1]['name']} created {out[1]['topic_id']}")
            sim.count("topic")
        if out[0] == "err" and out[1] == "NOT_CONTROLLER" and out[2] is not None:
            self.target = out[2]
        elif out[0] != "ok" and out[0] != "err":
            self.target = sim.rng.choice(sim.voters)

    # ------------------------------------------------------------ the commands

    def create_topic(self, name: str | None = None) -> tuple[str, Any, str]:
        rng = self.sim.rng
        if name is None:
            self.created += 1
            name = f"t{self.created}"
            self.topics.append(name)
        if rng.random() < 0.7:
            req = CreateTopicRequest(name, rng.randint(1, 8), rng.randint(1, 3), None, {})
        else:
            ids = self.broker_ids
            assignments = tuple(
                tuple(rng.sample(ids, rng.randint(1, 3))) for _ in range(rng.randint(1, 4))
            )
            req = CreateTopicRequest(name, None, None, assignments, {})

        def generate(c: Any, now: int, off: int) -> Any:
            result = c.create_topic(req, now)
            return type(result)(result.records, {**result.reply, "name": name}, result.more)

        return "create-topic", generate, "topic"

    def delete_topic(self) -> tuple[str, Any, str]:
        name = self.sim.rng.choice(self.topics)
        return "delete-topic", lambda c, now, off: c.delete_topic(name, now), "delete"

    def add_partitions(self) -> tuple[str, Any, str]:
        req = CreatePartitionsRequest(
            self.sim.rng.choice(self.topics), self.sim.rng.randint(2, 12), None
        )
        return "create-partitions", lambda c, now, off: c.create_partitions(req, now), "partitions"

    def _alter_config(self, key: str, value: str | None) -> tuple[str, Any, str]:
        req = AlterConfigsRequest(self.sim.rng.choice(self.topics), {key: value})
        return "alter-configs", lambda c, now, off: c.alter_configs(req, now), "config"

    def toggle_unclean(self) -> tuple[str, Any, str]:
        value = self.sim.rng.choice(["true", "true", "false", None])
        return self._alter_config("unclean.leader.election.enable", value)

    def set_min_isr(self) -> tuple[str, Any, str]:
        return self._alter_config("min.insync.replicas", self.sim.rng.choice(["1", "2", "3", None]))

    def elect(self) -> tuple[str, Any, str]:
        rng, view = self.sim.rng, self.sim.view()
        leaderless = [
            (t.name, pid)
            for t in view.topics.values()
            for pid, p in t.partitions.items()
            if p.leader < 0
        ]
        if leaderless and rng.random() < 0.7:
            name, pid = rng.choice(leaderless)
            req = ElectLeadersRequest(name, pid, "unclean")
        else:
            kind = rng.choice(["preferred", "unclean"])
            req = ElectLeadersRequest(rng.choice(self.topics), rng.randint(0, 3), kind)
        return "elect-leaders", lambda c, now, off: c.elect_leaders(req, now), "elect"

    def unregister(self) -> tuple[str, Any, str]:
        bid = self.sim.rng.choice(self.broker_ids)
        return "unregister-broker", lambda c, now, off: c.unregister_broker(bid, now), "unregister"

    def reassign(self) -> tuple[str, Any, str]:
        """A reassignment (some invalid: an unknown broker, a replica twice, an
        unknown partition) or a cancel (some with nothing in progress); the
        changes it generates are checked against its targets."""
        sim, rng, view = self.sim, self.sim.rng, self.sim.view()
        parts = [(t.name, pid, p) for t in view.topics.values() for pid, p in t.partitions.items()]
        if not parts:
            return self.create_topic()
        ongoing = [x for x in parts if x[2].reassigning]
        if rng.random() < 0.25:
            name, pid, _ = rng.choice(ongoing if ongoing and rng.random() < 0.8 else parts)
            targets: tuple[ReassignmentTarget, ...] = (ReassignmentTarget(name, pid, None),)
            kind = "cancel"
        else:
            entries = []
            for name, pid, _ in rng.sample(parts, min(len(parts), rng.randint(1, 3))):
                replicas = rng.sample(self.broker_ids, rng.randint(1, 3))
                bad = rng.random()
                if bad < 0.05:
                    replicas.append(999)  # not registered
                elif bad < 0.1:
                    replicas.append(replicas[0])  # twice
                elif bad < 0.13:
                    pid += 100  # no such partition
                entries.append(ReassignmentTarget(name, pid, tuple(replicas)))
            targets, kind = tuple(entries), "reassign"
        req = AlterPartitionReassignmentsRequest(targets)

        def generate(c: Any, now: int, off: int) -> Any:
            result = c.alter_partition_reassignments(req, now)  # c.image: still the state before
            sim.checker.check_plan(c.config.node_id, c.image, targets, result.records)
            return result

        return "alter-partition-reassignments", generate, kind


class FaultInjector:
    """The world's faults, drawn among the seed's kinds until the faults end."""

    def __init__(self, sim: DeployedSim, brokers: list[BrokerAgent]) -> None:
        self.sim = sim
        self.brokers = brokers
        kinds = ("crash", "partition", "fsync_fail", "stall")
        self.kinds = [k for k in kinds if k in sim.p.faults]

    async def run(self) -> None:
        sim = self.sim
        act = {
            "crash": self.crash_controller,
            "partition": self.partition,
            "fsync_fail": self.fail_next_fsync,
            "stall": self.stall_active,
        }
        while sim.faults_on and self.kinds:
            lo, hi = sim.p.crash_every
            await asyncio.sleep(sim.rng.randint(lo, hi) / 1000)
            if sim.faults_on:
                act[sim.rng.choice(self.kinds)]()

    def _up(self) -> list[int]:
        return [n for n, node in self.sim.nodes.items() if node is not None]

    def crash_controller(self) -> None:
        sim, up = self.sim, self._up()
        if not up:
            return
        lead = sim.leader()
        nid = lead if lead is not None and sim.rng.random() < sim.p.leader_crash else None
        nid = nid if nid is not None else sim.rng.choice(up)
        sim.crash(nid)
        sim.later(sim.rng.randint(20, 2000), sim.start, nid)

    def partition(self) -> None:
        sim = self.sim
        if sim.net.cut:
            return
        everyone = sim.voters + [b.bid for b in self.brokers] + [ADMIN]
        side = {x: sim.rng.random() < 0.5 for x in everyone}
        sim.net.cut = {(a, b) for a in everyone for b in everyone if side[a] != side[b]}
        sim.event("partition " + ",".join(str(x) for x in everyone if side[x]))
        sim.count("fault:partition")
        sim.later(sim.rng.randint(300, 4000), heal, sim)

    def fail_next_fsync(self) -> None:
        sim, up = self.sim, self._up()
        if up:
            nid = sim.rng.choice(up)
            sim.disk.fail_next.add(nid)
            sim.event(f"n{nid} next fsync fails")
            sim.count("fault:fsync_fail")

    def stall_active(self) -> None:
        """The active controller's process stalls right after it next queues a
        command (a long GC or a starved CPU): that command waits past its deadline
        when the stall outlasts request.timeout.ms."""
        sim = self.sim
        active = sim.active()
        if active is not None:
            sim.stall_armed[active.node_id] = sim.rng.randint(100, 2 * sim.p.request_timeout_ms)


def heal(sim: DeployedSim) -> None:
    if sim.net.cut:
        sim.net.cut = set()
        sim.event("heal")


class Scenario:
    """One seed's run: the actors during the faults, then the healing checks."""

    def __init__(self, sim: DeployedSim) -> None:
        self.sim = sim
        racks = [None, "a", "b"]
        self.brokers = [
            BrokerAgent(sim, BROKER_BASE_ID + i, racks[i % 3] if sim.rng.random() < 0.5 else None)
            for i in range(sim.p.n_brokers)
        ]
        self.admin = AdminClient(sim, self.brokers)

    async def run(self) -> None:
        sim = self.sim
        for nid in sim.voters:
            sim.format(nid)  # with the disk installed: meta.properties is durable
        for nid in sim.voters:
            sim.start(nid)
        actors = [sim.spawn(b.run()) for b in self.brokers]
        actors += [sim.spawn(b.alter_partitions()) for b in self.brokers]
        actors += [
            sim.spawn(self.admin.run()),
            sim.spawn(BrokerScripts(sim, self.brokers).run()),
            sim.spawn(FaultInjector(sim, self.brokers).run()),
            sim.spawn(self.check_images()),
        ]
        await asyncio.sleep(sim.p.duration_ms / 1000)
        self.end_faults()
        await self.converge()
        await self.every_broker_back()
        await self.silent_broker_is_fenced()
        for t in actors:
            t.cancel()
        await asyncio.wait(actors, timeout=10)
        await self.final_checks()

    async def check_images(self) -> None:
        """The checker's beat: every controller's image, every 100 ms (every second
        with the big topic: each check reads every partition of every image)."""
        sim = self.sim
        while True:
            await asyncio.sleep(1.0 if sim.p.big_topic else 0.1)
            try:
                sim.raise_recorded()
                sim.checker.check_images()
            except Exception as e:
                if not sim.violations:  # a checker's own error is a failure too
                    sim.violations.append(f"seed {sim.seed}: checker error {e!r}")
                sim.loop.stop()  # run_seed raises the recorded violation
                return

    def end_faults(self) -> None:
        sim = self.sim
        sim.faults_on = False
        sim.event("faults end")
        heal(sim)
        sim.net.p.drop = sim.net.p.slow = 0.0
        sim.disk.fail_next.clear()
        sim.stall_armed.clear()
        for b in self.brokers:
            # (a controlled shutdown, once asked for, goes on: as in Kafka a broker
            # cannot take it back; it ends, the broker exits and starts again)
            b.silent_until = b.want_fence_until = 0
            if not b.up:
                b.restart_later(1, 300)
        for nid in sim.voters:
            sim.start(nid)

    async def converge(self) -> None:
        """A leader, and every node caught up with one more acknowledged write."""
        sim = self.sim
        deadline = sim.now() + LIVENESS_BOUND_MS
        k = 0
        while sim.now() < deadline:
            if sim.boot_errors:
                sim.fail(sim.boot_errors[0])
            lead = sim.leader()
            if lead is None:
                await asyncio.sleep(0.05)
                continue
            k += 1
            name, generate, _ = self.admin.create_topic(f"final{k}")
            out = await sim.command(ADMIN, lead, name, generate)
            if out[0] != "ok":
                await asyncio.sleep(0.05)
                continue
            sim.checker.acked.append(("topic", (out[1]["name"], out[1]["topic_id"])))
            target = out[2] + 1
            if await self._wait(lambda t=target: self._caught_up(t), deadline):
                return
        sim.fail(
            f"no convergence within {LIVENESS_BOUND_MS} ms after the faults stopped: "
            + str({n: (x.raft.delivered_offset if x else None) for n, x in sim.nodes.items()})
        )

    def _caught_up(self, target: int) -> bool:
        return all(
            n is not None
            and n.raft.delivered_offset >= target
            and n.controller.image.offset >= target - 1
            for n in self.sim.nodes.values()
        )

    async def _wait(self, pred: Callable[[], bool], deadline: int) -> bool:
        while self.sim.now() < deadline:
            if pred():
                return True
            await asyncio.sleep(0.05)
        return pred()

    def _all_unfenced(self) -> int | None:
        """The active controller's committed offset when its image shows every broker
        registered at its current epoch, unfenced and not shutting down."""
        node = self.sim.active()
        if node is None:
            return None
        img = node.controller.image
        if img.offset != node.raft.delivered_offset - 1:
            return None
        for b in self.brokers:
            reg = img.brokers.get(b.bid)
            if not b.up or b.epoch is None or reg is None or reg.broker_epoch != b.epoch:
                return None
            if reg.fenced or reg.in_controlled_shutdown:
                return None
        return img.offset

    def _replayed(self) -> bool:
        return all(
            n is not None
            and not n.controller.image.applying
            and n.controller.image.offset >= n.raft.delivered_offset - 1
            for n in self.sim.nodes.values()
        )

    async def every_broker_back(self) -> None:
        sim = self.sim
        deadline = sim.now() + LIVENESS_BOUND_MS
        if not await self._wait(lambda: self._all_unfenced() is not None, deadline):
            view = {
                b.bid: (b.up, b.epoch, b.fenced, b.shutting_down, b.target) for b in self.brokers
            }
            sim.fail(f"brokers not all registered and unfenced {LIVENESS_BOUND_MS} ms on: {view}")
        target = self._all_unfenced()
        assert target is not None
        if not await self._wait(lambda: self._caught_up(target + 1), deadline):
            sim.fail(f"controllers did not all replay offset {target}")

    async def silent_broker_is_fenced(self) -> None:
        """A broker that falls silent now is fenced within its session (+1 s) of its
        last heartbeat (or the activation), and leads nothing after."""
        sim = self.sim
        victim = sim.rng.choice(self.brokers)
        victim.silent_until = 10**12
        sim.event(f"b{victim.bid} falls silent for good")
        await asyncio.sleep(0.001)
        active = sim.active()
        assert active is not None

        def fenced() -> bool:
            if active.controller.heartbeats is None:
                return False
            img = active.controller.image
            reg = img.brokers.get(victim.bid)
            return img.offset == active.raft.delivered_offset - 1 and reg is not None and reg.fenced

        p = sim.p
        bound = p.session_ms + 1000 + p.heartbeat_ms
        if not await self._wait(fenced, sim.now() + bound):
            sim.fail(f"silent broker {victim.bid} not fenced within {bound} ms")
        start = max(victim.last_heartbeat_ms, sim.checker.activated_at.get(active.node_id, 0))
        if sim.now() > start + p.session_ms + 1000:
            sim.fail(
                f"silent broker {victim.bid} fenced {sim.now() - start} ms after its session "
                f"started (session {p.session_ms} ms)"
            )
        for t in active.controller.image.topics.values():
            for part in t.partitions.values():
                if part.leader == victim.bid:
                    sim.fail(f"fenced broker {victim.bid} still leads {t.name}")

    async def final_checks(self) -> None:
        sim = self.sim
        # every node done replaying what it has (a large fence replays in slices)
        if not await self._wait(self._replayed, sim.now() + LIVENESS_BOUND_MS):
            sim.fail("the controllers did not finish replaying their committed log")
        sim.checker.check_images()
        sim.checker.check_acked()
        if sim.disk.retried_after_failure:
            sim.fail(sim.disk.retried_after_failure[0])
        for nid in sim.voters:
            node = sim.nodes[nid]
            assert node is not None
            img = node.controller.image
            sim.event(f"n{nid} end {node.raft.delivered_offset} {img.offset}")
        sim.checker.check_final_images()
        for nid in sim.voters:
            sim.crash(nid)
        await asyncio.sleep(1.5)  # the crashed nodes' tasks end
