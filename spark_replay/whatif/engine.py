"""The counterfactual engine: a log's facts fed again to the controller's own code.

`run_scenario(facts, scenario, sink)` drives a `QuorumController` (the same class
the controller processes run: BestLeader in PartitionChangeBuilder, the fence and
unfence rules, controlled shutdown, placement) through the facts' units in
offset order, under the scenario's configuration, and appends every batch it
would have written to `sink` (a segment writer; or a `CountingSink`, with an
`observer` that takes the batches as records): copied units as they were,
command units as the controller's results now are. No election rule is
implemented here; the engine only decides *when* a command is sent:

- a unit's commands at the unit's append time;
- the session timer: before each unit, every fence due (`next_fence_check_ms`)
  is run in time order. A broker the facts say was alive then is noted as heard
  from (a heartbeat); one that went silent is noted as last heard from when it
  went silent; then, if still due, `maybe_fence_stale_broker` fences it;
- a registration refused because the old incarnation still has a live session
  (DUPLICATE_BROKER_REGISTRATION: a longer session) is retried when that session
  expires, as a broker's retries would;
- a failover (LeaderChangeMessage) deactivates and activates the controller,
  so every broker counts as just seen (Kafka bug 18138), as on the real quorum.

With the configuration in force the engine writes the log it read, record for
record (the identity check). Pure: no clock (times come from the facts), the
rng is seeded per scenario.
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kraft.controller.batching import RecordEncoder, to_batches
from kraft.controller.errors import ApiError
from kraft.controller.quorum_controller import ControllerConfig, ControllerResult, QuorumController
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    IsrMember,
    RegisterBrokerRequest,
)
from metadata_log.batch import HEADER_SIZE, encode_batch, encode_payload
from metadata_log.records import (
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    ELR_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    RECOVERED,
    RECOVERING,
    SUPPORTED_VERSION,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    TopicRecord,
    record_version,
)
from spark_replay.whatif import facts as F
from spark_replay.whatif.scenario import MIN_ISR, UNCLEAN, Scenario

CLUSTER_ID = "what-if"
MEMO_RECORDS = 1 << 18  # encoded partition changes kept (bounded memory)
MEMO_DECISIONS = 1 << 19  # AlterPartition answers kept (~200 MB at most)
NODE_ID = 3000


class BatchSink(Protocol):
    """Where the batches go. A sink whose `wants_bytes` is False gets None for
    each batch's bytes (it only counts them): nothing is encoded for it."""

    next_offset: int

    def append(self, batch: bytes | None, record_count: int) -> None: ...


class RecordObserver(Protocol):
    """Sees every batch written, as records (`history_stream.HistoryStream`)."""

    def batch(
        self, base_offset: int, time_ms: int, records: Sequence[Any], control: bool = False
    ) -> None: ...


class CountingSink:
    """A sink that keeps no bytes: the log's length only (the records go to a
    `RecordObserver`)."""

    wants_bytes = False

    def __init__(self) -> None:
        self.next_offset = 0

    def append(self, batch: bytes | None, record_count: int) -> None:
        self.next_offset += record_count


@dataclass
class EngineStats:
    """What the engine could not replay, by reason (docs/what-if.md)."""

    commands: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    fences: int = 0
    retried_registrations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "commands": self.commands,
            "refused": dict(sorted(self.refused.items())),
            "skipped": dict(sorted(self.skipped.items())),
            "fences": self.fences,
            "retried_registrations": self.retried_registrations,
        }


class Engine:
    # The direct paths of a lone AlterPartition unit and a one-record result
    # (`run`, `_write_result`): the general path's batches, byte for byte
    # (tests/unit/whatif/test_identity.py compares them with this off).
    DIRECT_PATHS = True
    # AlterPartition answers memoized by everything they depend on
    # (`_alter_memoized`): the same batches as asking the controller each time
    # (tests/unit/whatif/test_identity.py compares them with this off).
    MEMO_DECISIONS = True

    def __init__(
        self,
        facts: F.Facts,
        scenario: Scenario,
        sink: BatchSink,
        max_batch_bytes: int | None = None,
        observer: RecordObserver | None = None,
    ) -> None:
        self.facts = facts
        self.s = scenario
        self.sink = sink
        self._bytes = getattr(sink, "wants_bytes", True)
        self.observer = observer
        self.max_batch_bytes = max_batch_bytes or facts.max_batch_bytes
        self.ctl = QuorumController(
            ControllerConfig(
                node_id=NODE_ID,
                controller_ids=frozenset(),
                cluster_id=CLUSTER_ID,
                session_timeout_ms=scenario.session_timeout_ms,
                unclean_leader_election_enable=scenario.unclean,
                min_insync_replicas=scenario.min_isr,
                # the log's FeatureLevelRecords decide (the engine copies them)
                bootstrap_eligible_leader_replicas_version=0,
            ),
            random.Random(f"what-if:{scenario.name}"),
        )
        self.stats = EngineStats()
        self.epoch = 1  # the leader epoch of batches written (the log's, as read)
        self.now = facts.first_time_ms
        # Commands to send later (a registration retried): (time, seq, command).
        self._later: list[tuple[int, int, F.Command]] = []
        self._seq = 0
        # Unfences of a registration that is still to be retried: sent after it.
        self._unfence_after_register: set[int] = set()
        self._written_times: list[int] = []
        # records of a unit's several commands, written as one batch (None: each alone)
        self._group: list[MetadataRecord] | None = None
        self._encoders: dict[int | None, RecordEncoder] = {}
        self._encoded: dict[int | None, dict[MetadataRecord, bytes]] = {}
        self._full_change: dict[int | None, bool] = {}
        # set where the log sets it; else added with the first metadata.version
        self._elr_written = any(
            type(r) is FeatureLevelRecord and r.name == ELIGIBLE_LEADER_REPLICAS_FEATURE
            for u in facts.units
            if u.copy
            for b in u.batches
            for r in b.records
        )
        self._written_offsets: list[int] = []
        # Nothing is due on the session timer or the retries before this time
        # (advance found so), as long as only lone AlterPartitions run: their
        # records are partition changes, which leave the timer as it was.
        self._quiet_until = -1

    # ---------------------------------------------------------------- writing

    def _write_result(self, result: ControllerResult | None) -> None:
        if result is None:
            return
        records = result.records if result.more is None else result.drained().records
        if not records:
            return
        if self._group is None and len(records) == 1 and self.DIRECT_PATHS:
            # one record (nearly every AlterPartition): one batch, as to_batches
            # makes it (a record is far below the batch limit: checked there).
            # With no bytes kept, a partition change whose size is bounded below
            # the limit is not encoded at all, where the metadata.version writes
            # every field it has (else encoding it is what refuses a field the
            # version lacks). That saves ~7% of a scenario's CPU, mostly the
            # record's hash in the encoding memo; bounding a fence's many
            # records instead of encoding them saved nothing (msgpack is C).
            room = self.max_batch_bytes - HEADER_SIZE
            r = records[0]
            if (
                self._bytes
                or type(r) is not PartitionChangeRecord
                or not self._every_change_field()
                or _change_bound(r) > room
            ):
                [data] = self._encode(records)
            else:
                data = b""
            if len(data) <= room:
                base = self.sink.next_offset
                if self.observer is not None:
                    self.observer.batch(base, self.now, records)
                self.sink.append(
                    encode_payload(base, self.epoch, self.now, data, 1) if self._bytes else None, 1
                )
                self.ctl.replay_batch(base, records, self.now)
                self.ctl.on_commit(base)
                self._note_written(self.now)
                return
        if self._group is not None:
            # one write of several commands (the shell's group commit): replayed
            # now, appended as one batch when the unit ends
            base = self.sink.next_offset + len(self._group)
            self.ctl.replay_batch(base, records, self.now)
            self._group.extend(records)
            return
        plan = to_batches(
            records,
            self.max_batch_bytes,
            metadata_version=self._mv(),
            encoded=self._encode(records),
        )
        written = 0
        for eb in plan.batches:
            base = self.sink.next_offset
            recs = plan.records[written : written + eb.record_count]
            written += eb.record_count
            if self.observer is not None:
                self.observer.batch(base, self.now, recs)
            self.sink.append(
                encode_payload(base, self.epoch, self.now, eb.payload, eb.record_count)
                if self._bytes
                else None,
                eb.record_count,
            )
            self.ctl.replay_batch(base, recs, self.now)
            self.ctl.on_commit(base + len(recs) - 1)
            self._note_written(self.now)

    def _mv(self) -> int | None:
        return self.ctl.image.features.get(METADATA_VERSION_FEATURE)

    def _every_change_field(self) -> bool:
        """Whether the log's metadata.version writes PartitionChangeRecords at
        their latest version (every field)."""
        mv = self._mv()
        full = self._full_change.get(mv)
        if full is None:
            v = SUPPORTED_VERSION[PartitionChangeRecord]
            full = self._full_change[mv] = (
                mv is None or record_version(PartitionChangeRecord, mv) == v
            )
        return full

    def _encode(self, records: Sequence[MetadataRecord]) -> list[bytes]:
        """Records at the versions the log's metadata.version allows (one encoder
        per level: building one per result cost a fifth of the engine's time)."""
        mv = self._mv()
        enc = self._encoders.get(mv)
        if enc is None:
            enc = self._encoders[mv] = RecordEncoder(mv)
        if len(records) != 1 or type(records[0]) is not PartitionChangeRecord:
            return enc.encode(records)
        # A partition's ISR goes back and forth between a few sets: a leader's
        # AlterPartition record recurs, and its bytes (a function of the record
        # and the version) are looked up instead of encoded again.
        memo = self._encoded.get(mv)
        if memo is None:
            memo = self._encoded[mv] = {}
        r = records[0]
        data = memo.get(r)
        if data is None:
            if len(memo) >= MEMO_RECORDS:
                memo.clear()
            [data] = enc.encode(records)
            memo[r] = data
        return [data]

    def _flush_group(self) -> None:
        group, self._group = self._group, None
        if not group:
            return
        base = self.sink.next_offset
        if self.observer is not None:
            self.observer.batch(base, self.now, group)
        if self._bytes:
            [eb] = to_batches(
                group, 2**31 - 1, metadata_version=self._mv(), encoded=self._encode(group)
            ).batches
            self.sink.append(
                encode_payload(base, self.epoch, self.now, eb.payload, eb.record_count), len(group)
            )
        else:
            self.sink.append(None, len(group))
        self.ctl.on_commit(base + len(group) - 1)
        self._note_written(self.now)

    def _features(self, records: tuple[Record, ...]) -> tuple[Record, ...]:
        """The log's feature levels, with ELR (KIP-966) on or off as the scenario
        says: its level replaced, or set where the log sets metadata.version (at
        least the version ELR needs) when the log never had it."""
        if self.s.elr is None or not any(type(r) is FeatureLevelRecord for r in records):
            return records
        level = 1 if self.s.elr else 0
        out: list[Record] = []
        for r in records:
            if type(r) is FeatureLevelRecord and r.name == ELIGIBLE_LEADER_REPLICAS_FEATURE:
                r = FeatureLevelRecord(r.name, level)
                self._elr_written = True
            elif (
                type(r) is FeatureLevelRecord
                and r.name == METADATA_VERSION_FEATURE
                and self.s.elr
                and not self._elr_written
            ):
                out.append(FeatureLevelRecord(r.name, max(r.feature_level, ELR_METADATA_VERSION)))
                r = FeatureLevelRecord(ELIGIBLE_LEADER_REPLICAS_FEATURE, level)
                self._elr_written = True
            out.append(r)
        return tuple(out)

    def _copy(self, unit: F.Unit) -> None:
        for b in unit.batches:
            base = self.sink.next_offset
            records = b.records if b.control else self._features(b.records)
            if records is not b.records:
                b = replace(b, records=records)
            if self.observer is not None:
                self.observer.batch(base, b.time_ms, b.records, b.control)
            self.sink.append(
                encode_batch(base, b.leader_epoch, b.time_ms, list(b.records), b.control)
                if self._bytes
                else None,
                len(b.records),
            )
            if not b.control:
                self.ctl.replay_batch(base, b.records, b.time_ms)  # type: ignore[arg-type]
                self.ctl.on_commit(base + len(b.records) - 1)
            self._note_written(b.time_ms)

    def _note_written(self, t: int) -> None:
        """The log's last offset by time: what a broker heard from at t had read."""
        if self._written_times and self._written_times[-1] >= t:
            self._written_offsets[-1] = self.sink.next_offset - 1
            return
        self._written_times.append(t)
        self._written_offsets.append(self.sink.next_offset - 1)

    def _run(self, name: str, fn: Any) -> ControllerResult | None:
        self.stats.commands += 1
        try:
            result = fn()
        except ApiError as e:
            self.stats.refused[f"{name}: {e.code}"] += 1
            return None
        self._write_result(result)
        return result

    # ---------------------------------------------------------------- time

    def _alive(self, b: int, t: int) -> bool:
        return self.facts.liveness.alive(b, t, self.s.controlled_shutdown)

    def advance(self, t: int, inclusive: bool) -> None:
        """Run the session timer and the retries due before t (at t if inclusive)."""
        ctl, later = self.ctl, self._later
        stop = t if inclusive else t - 1  # the last time to run anything at
        while True:
            # the earlier of the next session expiry and the next retry (the
            # expiry first at a tie); a plain comparison: this runs every unit
            due = ctl.next_fence_check_ms()
            nxt = later[0][0] if later else None
            if due is not None and (nxt is None or due <= nxt):
                nxt = due
            if nxt is None or nxt > stop:
                self._quiet_until = _NEVER if nxt is None else nxt
                return
            self.now = max(self.now, nxt)
            if nxt == due:
                self._fence_check(nxt, t)
            else:
                _, _, cmd = heapq.heappop(later)
                self._command(cmd)

    def _fence_check(self, at: int, until_t: int) -> None:
        hb = self.ctl.heartbeats
        assert hb is not None
        b = hb.find_one_stale_broker(at)
        if b is None:
            return
        reg = self.ctl.image.brokers[b]
        state = hb.state(b)
        assert state is not None
        if self._alive(b, at):
            # heard from until it goes silent or up to the time being advanced to
            until = self.facts.liveness.alive_until(b, at, self.s.controlled_shutdown)
            last = until_t if until is None else min(until, until_t)
            self.ctl.note_heartbeat_contact(b, reg.broker_epoch, max(at, last))
            return
        silent = self.facts.liveness.silent_since(b, at, self.s.controlled_shutdown)
        if silent is not None and silent > state.last_contact_ms:
            self.ctl.note_heartbeat_contact(b, reg.broker_epoch, silent)
            return
        self.stats.fences += 1
        self._write_result(self.ctl.maybe_fence_stale_broker(at))

    # ---------------------------------------------------------------- units

    def run(self) -> EngineStats:
        direct = self.DIRECT_PATHS
        isr_unit = F.IsrUnit
        for unit in self.facts.units:
            lone: F.AlterIsr | F.IsrUnit | None = None
            if direct:
                if type(unit) is isr_unit:
                    lone = unit  # its own command
                elif len(unit.commands) == 1 and not unit.copy:
                    lone = unit.commands[0] if type(unit.commands[0]) is F.AlterIsr else None
            if lone is not None:
                # nine units in ten: one leader's AlterPartition, alone in its
                # batch (what the general path below does for it, without the
                # scans for fences, failovers and group commits)
                if unit.time_ms > self._quiet_until:
                    self.advance(unit.time_ms, inclusive=False)
                if unit.time_ms > self.now:
                    self.now = unit.time_ms
                self.epoch = unit.leader_epoch if lone is unit else unit.batches[0].leader_epoch
                if self.ctl.active:
                    self._alter_isr(lone)
                else:
                    self.stats.skipped["no active controller"] += 1
                continue
            self._quiet_until = -1  # anything may change the timer below
            fence_here = any(type(c) is F.FenceMark for c in unit.commands)
            self.advance(unit.time_ms, inclusive=fence_here)
            self.now = max(self.now, unit.time_ms)
            self.epoch = unit.batches[0].leader_epoch
            for cmd in unit.commands:
                if type(cmd) is F.Failover:
                    self._failover()
            if unit.copy:
                self._copy(unit)
                continue
            grouped = len(unit.commands) > 1 and len(unit.batches) == 1
            self._group = [] if grouped else None
            for cmd in unit.commands:
                self._command(cmd)
            self._flush_group()
        self.advance(self.facts.last_time_ms, inclusive=True)
        return self.stats

    def _failover(self) -> None:
        if self.ctl.active:
            self.ctl.deactivate(self.sink.next_offset - 1)
        self.ctl.activate(self.now)

    # ---------------------------------------------------------------- commands

    def _command(self, cmd: F.Command) -> None:
        if not self.ctl.active:
            self.stats.skipped["no active controller"] += 1
            return
        if type(cmd) is F.AlterIsr:  # nine commands in ten: no pattern match
            self._alter_isr(cmd)
            return
        match cmd:
            case F.Register():
                self._register(cmd)
            case F.Unfence(broker_id=b):
                if b in self._unfence_after_register:
                    return  # sent once the retried registration succeeds
                self._heartbeat(b, want_shutdown=False)
                self._rejoin_replaced(b)
            case F.ShutdownRequest(broker_id=b):
                if self.s.controlled_shutdown:
                    self._heartbeat(b, want_shutdown=True)
            case F.ShutdownNow(broker_id=b):
                if self.s.controlled_shutdown:
                    self._refresh_offsets(b)
                    self._heartbeat(b, want_shutdown=True)
            case F.Unregister(broker_id=b):
                self._run("unregister", lambda: self.ctl.unregister_broker(b, self.now))
            case F.CreateTopic():
                self._create_topic(cmd)
            case F.CreatePartitions():
                self._create_partitions(cmd)
            case F.DeleteTopic(topic_id=tid):
                topic = self.ctl.image.topics.get(tid)
                if topic is None:
                    self.stats.skipped["delete of a topic never created"] += 1
                    return
                self._run("delete_topic", lambda: self.ctl.delete_topic(topic.name, self.now))
            case F.AlterConfigs():
                self._alter_configs(cmd)
            case F.AdminElect():
                self._elect(cmd)
            case F.Reassign():
                self._reassign(cmd)
            case F.FenceMark() | F.Failover():
                pass

    def _register(self, cmd: F.Register) -> None:
        r = cmd.record
        # --racks are the re-placements' (a log without racks): a scenario that
        # keeps the actual placement registers the racks the log has, so that the
        # in-force one still writes the log byte for byte
        rack = r.rack
        if self.s.placement == "rack-aware":
            rack = self.s.racks.get(r.broker_id, r.rack)
        elif self.s.placement == "rack-unaware":
            rack = None
        req = RegisterBrokerRequest(
            broker_id=r.broker_id,
            cluster_id=CLUSTER_ID,
            incarnation_id=r.incarnation_id,
            listeners=r.endpoints,
            rack=rack,
            features=r.features,
            previous_broker_epoch=self._previous_epoch(cmd),
        )
        self.stats.commands += 1
        try:
            result = self.ctl.register_broker(req, self.now, self.sink.next_offset)
        except ApiError as e:
            hb = self.ctl.heartbeats
            state = None if hb is None else hb.state(r.broker_id)
            if e.code == "DUPLICATE_BROKER_REGISTRATION" and state is not None:
                # the old incarnation's session is still live: retry when it ends
                self.stats.retried_registrations += 1
                self._unfence_after_register.add(r.broker_id)
                self._push(state.last_contact_ms + self.s.session_timeout_ms, cmd)
                return
            self.stats.refused[f"register: {e.code}"] += 1
            return
        self._write_result(result)
        if r.broker_id in self._unfence_after_register:
            self._unfence_after_register.discard(r.broker_id)
            self._heartbeat(r.broker_id, want_shutdown=False)
            self._rejoin_replaced(r.broker_id)

    def _rejoin_replaced(self, b: int) -> None:
        """Re-placed replicas have no ISR facts of their own (the log's replica
        was elsewhere): one catches up as soon as its broker is unfenced."""
        if self.s.placement == "actual":
            return
        image = self.ctl.image
        reg = image.brokers.get(b)
        if reg is None or reg.fenced:
            return
        for tid in sorted(image.topics):
            for pid, p in sorted(image.topics[tid].partitions.items()):
                if b in p.replicas and b not in p.isr and p.leader >= 0:
                    target = tuple(r for r in p.replicas if r in p.isr or r == b)
                    self._send_isr(tid, pid, target, -1)

    def _previous_epoch(self, cmd: F.Register) -> int:
        """KIP-966: a broker that completed its controlled shutdown sends the
        epoch it had; after a crash it sends -1 (the controller then takes it
        out of every ELR)."""
        reg = self.ctl.image.brokers.get(cmd.record.broker_id)
        return reg.broker_epoch if cmd.clean and reg is not None else -1

    def _push(self, at: int, cmd: F.Command) -> None:
        self._seq += 1
        heapq.heappush(self._later, (at, self._seq, cmd))

    def _heartbeat(self, b: int, want_shutdown: bool) -> None:
        reg = self.ctl.image.brokers.get(b)
        if reg is None:
            self.stats.skipped["heartbeat of an unregistered broker"] += 1
            return
        req = BrokerHeartbeatRequest(
            broker_id=b,
            broker_epoch=reg.broker_epoch,
            current_metadata_offset=self.sink.next_offset - 1,
            want_fence=False,
            want_shutdown=want_shutdown,
        )
        self._run("heartbeat", lambda: self.ctl.heartbeat(req, self.now))

    def _refresh_offsets(self, shutting: int) -> None:
        """The other brokers' heartbeats since (they report their metadata offsets,
        which a controlled shutdown waits for): they change nothing. A broker that
        went silent and is not fenced yet last reported the offset the log had
        reached then."""
        hb = self.ctl.heartbeats
        assert hb is not None
        for b, reg in sorted(self.ctl.image.brokers.items()):
            if b == shutting or reg.fenced or reg.in_controlled_shutdown:
                continue
            if self._alive(b, self.now):
                self._heartbeat(b, want_shutdown=False)
                continue
            silent = self.facts.liveness.silent_since(b, self.now, self.s.controlled_shutdown)
            state = hb.state(b)
            if silent is not None and state is not None and not state.fenced:
                i = bisect.bisect_right(self._written_times, silent)
                offset = self._written_offsets[i - 1] if i else -1
                hb.touch(b, False, offset, silent)

    def _assignments(self, assignments: tuple[tuple[int, ...], ...]) -> Any:
        return None if self.s.placement != "actual" else assignments

    def _topic_configs(self, configs: tuple[tuple[str, str | None], ...]) -> dict[str, str | None]:
        """A topic's settings from the log, less those the scenario replaces."""
        out = dict(configs)
        if self.s.overrides_unclean:
            out.pop(UNCLEAN, None)
        if self.s.overrides_min_isr:
            out.pop(MIN_ISR, None)
        return out

    def _create_topic(self, cmd: F.CreateTopic) -> None:
        configs = self._topic_configs(cmd.configs)
        configs = {k: v for k, v in configs.items() if v is not None}
        rf = len(cmd.assignments[0]) if cmd.assignments else 1
        req = CreateTopicRequest(
            cmd.name,
            None if self.s.placement == "actual" else len(cmd.assignments),
            None if self.s.placement == "actual" else rf,
            self._assignments(cmd.assignments),
            configs,
        )
        self.stats.commands += 1
        try:
            result = self.ctl.create_topic(req, self.now)
        except ApiError as e:
            self.stats.refused[f"create_topic: {e.code}"] += 1
            return
        # The topic id is a fact (the controller drew its own from the rng).
        made = result.reply["topic_id"]
        self._write_result(
            replace(
                result, records=tuple(_with_topic_id(r, made, cmd.topic_id) for r in result.records)
            )
        )

    def _create_partitions(self, cmd: F.CreatePartitions) -> None:
        topic = self.ctl.image.topics.get(cmd.topic_id)
        if topic is None:
            self.stats.skipped["partitions of a topic never created"] += 1
            return
        req = CreatePartitionsRequest(
            topic.name,
            len(topic.partitions) + len(cmd.assignments),
            self._assignments(cmd.assignments),
        )
        self._run("create_partitions", lambda: self.ctl.create_partitions(req, self.now))

    def _alter_configs(self, cmd: F.AlterConfigs) -> None:
        configs = self._topic_configs(cmd.configs)
        if not configs:
            self.stats.skipped["topic setting replaced by the scenario"] += 1
            return
        if self.ctl.image.topic_by_name(cmd.name) is None:
            self.stats.skipped["configs of a topic never created"] += 1
            return
        req = AlterConfigsRequest(cmd.name, configs)
        self._run("alter_configs", lambda: self.ctl.alter_configs(req, self.now))

    def _alter_isr(self, cmd: F.AlterIsr | F.IsrUnit) -> None:
        image = self.ctl.image
        topic = image.topics.get(cmd.topic_id)
        p = None if topic is None else topic.partitions.get(cmd.partition_id)
        if p is None:
            self.stats.skipped["ISR change of a partition never created"] += 1
            return
        if p.leader < 0:
            # a leader that does not exist here cannot have sent it
            self.stats.skipped["ISR change without a leader"] += 1
            return
        if p.isr == cmd.old_isr:
            target = cmd.new_isr
        else:
            removed = set(cmd.old_isr) - set(cmd.new_isr)
            added = set(cmd.new_isr) - set(cmd.old_isr)
            target = tuple(
                r
                for r in p.replicas
                if r == p.leader or (r in p.isr and r not in removed) or r in added
            )
        if p.leader not in target:
            target = (p.leader, *target)
        # Only replicas here (placement may differ) that can join (unfenced, not
        # shutting down) are asked for.
        target = tuple(
            r
            for r in target
            if r in p.replicas and (r in p.isr or r == p.leader or _can_join(image.brokers.get(r)))
        )
        self._send_isr(cmd.topic_id, cmd.partition_id, target, cmd.leader_recovery_state, p)

    def _send_isr(
        self,
        topic_id: str,
        partition_id: int,
        target: tuple[int, ...],
        recovery: int,
        p: Any = None,
    ) -> None:
        """The partition leader's AlterPartition asking for `target` (`p`: the
        partition as the image has it now, when the caller has it at hand)."""
        image = self.ctl.image
        if p is None:
            p = image.topics[topic_id].partitions[partition_id]
        if recovery == -1:
            recovery = p.leader_recovery_state
        if p.leader_recovery_state == RECOVERING and recovery == RECOVERING and len(target) > 1:
            recovery = RECOVERED  # the leader recovered before it took others back
        if target == p.isr and recovery == p.leader_recovery_state:
            self.stats.skipped["ISR change already in effect"] += 1
            return
        brokers = image.brokers
        leader = brokers.get(p.leader)
        if leader is None:
            self.stats.skipped["ISR change without a leader"] += 1
            return
        if self.MEMO_DECISIONS:
            self._alter_memoized(topic_id, partition_id, target, recovery, p)
            return
        req = leader_request(self.ctl, topic_id, partition_id, target, recovery, p)
        self._run("alter_partition", lambda: self.ctl.alter_partition(req, self.now))

    def _alter_memoized(
        self, topic_id: str, partition_id: int, target: tuple[int, ...], recovery: int, p: Any
    ) -> None:
        """`_send_isr`'s AlterPartition through the decision memo: the controller
        is asked only for a `decision_key` it has not answered yet (in this
        process, under any scenario); its answer, records or a refusal, is a
        function of the key."""
        ctl = self.ctl
        key = decision_key(ctl, topic_id, partition_id, target, recovery, p)
        memo = _DECISIONS
        answer = memo.get(key)
        if answer is None:
            req = leader_request(ctl, topic_id, partition_id, target, recovery, p)
            try:
                answer = ctl.alter_partition(req, self.now).records
            except ApiError as e:
                answer = e.code
            if len(memo) >= MEMO_DECISIONS:
                memo.clear()
            memo[key] = answer
        else:
            ctl.now_ms = self.now  # what alter_partition sets, hit or not
        self.stats.commands += 1
        if type(answer) is str:
            self.stats.refused[f"alter_partition: {answer}"] += 1
        elif answer:
            self._write_result(ControllerResult(answer))

    def _elect(self, cmd: F.AdminElect) -> None:
        """Each election through elect_leaders; written as one result, as the
        elections were (a balancer batch is one write)."""
        records: list[MetadataRecord] = []
        for tid, pid, kind in cmd.elections:
            topic = self.ctl.image.topics.get(tid)
            if topic is None or pid not in topic.partitions:
                self.stats.skipped["election in a partition never created"] += 1
                continue
            self.stats.commands += 1
            req = ElectLeadersRequest(topic.name, pid, kind)
            try:
                records += self.ctl.elect_leaders(req, self.now).records
            except ApiError as e:
                self.stats.refused[f"elect_leaders: {e.code}"] += 1
        self._write_result(ControllerResult(tuple(records)))

    def _reassign(self, cmd: F.Reassign) -> None:
        """The plan through the controller's reassignment (KIP-455), if it has one."""
        from kraft.controller import requests

        parse = getattr(requests, "parse_reassignment_plan", None)
        if parse is None or not hasattr(self.ctl, "alter_partition_reassignments"):
            self.stats.skipped["reassignment (this controller has none)"] += 1
            return
        plan = []
        for tid, pid, target in cmd.targets:
            topic = self.ctl.image.topics.get(tid)
            if topic is None or pid not in topic.partitions:
                self.stats.skipped["reassignment of a partition never created"] += 1
                continue
            plan.append(
                {
                    "topic": topic.name,
                    "partition": pid,
                    "replicas": None if target is None else list(target),
                }
            )
        if not plan:
            return
        try:
            req = parse({"version": 1, "partitions": plan})
        except ApiError as e:
            self.stats.refused[f"reassignment: {e.code}"] += 1
            return
        self._run(
            "alter_partition_reassignments",
            lambda: self.ctl.alter_partition_reassignments(req, self.now),
        )


_NEVER = 1 << 62  # nothing is due: no session to watch, no retry

# The decision memo of `_alter_memoized`: one per process, shared by the
# scenarios a Spark worker runs (their partitions keep meeting the same states).
# A value is the records the controller wrote, or the error code it refused with.
_DECISIONS: dict[tuple[Any, ...], tuple[MetadataRecord, ...] | str] = {}


def leader_request(
    ctl: QuorumController,
    topic_id: str,
    partition_id: int,
    target: tuple[int, ...],
    recovery: int,
    p: Any,
) -> AlterPartitionRequest:
    """Partition `p`'s leader's AlterPartition asking for `target`, with the
    current broker and partition epochs (a leader that heard of every change)."""
    brokers = ctl.image.brokers
    return AlterPartitionRequest(
        broker_id=p.leader,
        broker_epoch=brokers[p.leader].broker_epoch,
        topic_id=topic_id,
        partition_id=partition_id,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr_with_epochs=tuple([IsrMember(r, _epoch(brokers.get(r))) for r in target]),
        leader_recovery_state=recovery,
    )


def decision_key(
    ctl: QuorumController,
    topic_id: str,
    partition_id: int,
    target: tuple[int, ...],
    recovery: int,
    p: Any,
) -> tuple[Any, ...]:
    """What `alter_partition` reads to answer the request `_send_isr` builds for
    partition `p` (asking for `target` and `recovery`, with the current broker
    and partition epochs): the partition's fields but its epochs, whether each
    replica may join or lead (unfenced and not shutting down), the topic's
    effective min ISR and the ELR feature."""
    brokers = ctl.image.brokers
    ok = 0
    for r in p.replicas:
        ok = (ok << 1) | _can_join(brokers.get(r))
    return (
        topic_id,
        partition_id,
        p.replicas,
        p.isr,
        p.leader,
        p.elr,
        p.last_known_elr,
        p.leader_recovery_state,
        p.adding_replicas,
        p.removing_replicas,
        target,
        recovery,
        ok,
        ctl.min_isr(ctl.image.topics[topic_id]),
        ctl.elr_enabled(),
    )


def forget_decisions() -> None:
    """Empty the decision memo: a job starts with none (its figures do not
    depend on the jobs a Spark worker ran before)."""
    _DECISIONS.clear()


# msgpack of a PartitionChangeRecord, ``[type, version, *fields]``: at most 5
# bytes of array header, 9 per int (type, version, partition, leader, recovery
# state), 5 per list header or nil, 9 per member, 5 + 4 per character of the
# topic id (tests/unit/whatif/test_counting_sink.py checks the bound).
_CHANGE_BOUND = 5 + 5 * 9 + 6 * 5 + 5


def _change_bound(r: PartitionChangeRecord) -> int:
    """At least the bytes `r` encodes to, at any version."""
    n = 0
    for t in (
        r.isr,
        r.replicas,
        r.removing_replicas,
        r.adding_replicas,
        r.eligible_leader_replicas,
        r.last_known_elr,
    ):
        if t is not None:
            n += len(t)
    return _CHANGE_BOUND + 4 * len(r.topic_id) + 9 * n


def _epoch(reg: Any) -> int:
    return -1 if reg is None else reg.broker_epoch


def _can_join(reg: Any) -> bool:
    return reg is not None and not reg.fenced and not reg.in_controlled_shutdown


def _with_topic_id(r: MetadataRecord, made: str, actual: str) -> MetadataRecord:
    if type(r) in (TopicRecord, PartitionRecord, PartitionChangeRecord) and r.topic_id == made:  # type: ignore[union-attr]
        return replace(r, topic_id=actual)  # type: ignore[type-var]
    return r


def run_scenario(
    facts: F.Facts,
    scenario: Scenario,
    sink: BatchSink,
    max_batch_bytes: int | None = None,
    observer: RecordObserver | None = None,
) -> EngineStats:
    return Engine(facts, scenario, sink, max_batch_bytes, observer).run()


__all__ = [
    "BatchSink",
    "CountingSink",
    "RecordObserver",
    "Engine",
    "EngineStats",
    "decision_key",
    "forget_decisions",
    "leader_request",
    "run_scenario",
]
