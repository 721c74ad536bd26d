"""The facts of a log: what it says that did not depend on the controller's choices.

A controller's records mix two things: what happened to it (a broker registered,
heartbeated, went silent, asked to shut down; an admin created a topic or ran an
election; a partition leader shrank or expanded its ISR; the quorum failed over)
and what it decided (which leader, which ISR after a fence, when to fence).
`read_facts` splits a native log into *units* (a batch, or a metadata
transaction) in offset order, each either copied as it is (NoOps, feature
levels, control batches, transactions that never applied) or turned back into
the *commands* that produced it, with the unit's offset and append time. The
engine feeds the commands to the controller again; the decisions are redone.

Broker liveness is the one fact the records only imply (docs/what-if.md):
a FenceBrokerRecord at time t, written by the session timer, means the broker
was last heard from at t - S (S the session timeout in force); an unfence (a
heartbeat) or a registration means it was heard from again; a controlled
shutdown's end means the process stopped. `Liveness` keeps, per broker, the
times it went up and down, for the engine's session timer.

Pure apart from reading the files: no clock, no randomness.
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple

from kraft.controller.batching import DEFAULT_MAX_BATCH_BYTES
from metadata_log.batch import decode_records, iter_headers
from metadata_log.errors import IncompleteBatchError, MetadataLogError
from metadata_log.image import MetadataImage
from metadata_log.open_file import open_log_file
from metadata_log.records import (
    FENCE_NO,
    FENCE_YES,
    NO_LEADER_CHANGE,
    TOPIC_RESOURCE,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from metadata_log.replay import metadata_dir, segment_files


class FactsError(MetadataLogError):
    """The log cannot be turned into facts (not a complete native log)."""


# ----------------------------------------------------------------------------- commands


def _pickled_by_fields(cls: type) -> type:
    """Pickled as (class, field values): the workers of a what-if job load a
    1M-record log's facts (half a million units) in ~60% of the time the slots'
    state takes (dataclass __setstate__ sets each field in Python)."""
    get = attrgetter(*cls.__dataclass_fields__)  # type: ignore[attr-defined]

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:
        return (cls, get(self))

    cls.__reduce__ = __reduce__  # type: ignore[method-assign,assignment]
    return cls


@dataclass(frozen=True, slots=True)
class Register:
    record: RegisterBrokerRecord
    # after a completed controlled shutdown (the broker sends its last epoch as
    # KIP-966's previous_broker_epoch); the log shows an unclean one's ELR removal
    clean: bool = False


@dataclass(frozen=True, slots=True)
class Unfence:
    """The broker heartbeated, caught up: the controller unfenced it."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class ShutdownRequest:
    """The broker asked for a controlled shutdown (want_shutdown)."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class ShutdownNow:
    """The broker's controlled shutdown completed (the controller said shut down now)."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class FenceMark:
    """The session timer fenced the broker here: a point in time, not a command."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class Unregister:
    broker_id: int


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    topic_id: str
    assignments: tuple[tuple[int, ...], ...]
    configs: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    topic_id: str
    assignments: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    topic_id: str


@dataclass(frozen=True, slots=True)
class AlterConfigs:
    name: str
    configs: tuple[tuple[str, str | None], ...]


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class AlterIsr:
    """A partition leader's AlterPartition: the ISR went from `old_isr` to `new_isr`."""

    topic_id: str
    partition_id: int
    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    leader_recovery_state: int  # -1 unchanged


@dataclass(frozen=True, slots=True)
class AdminElect:
    """Leader elections written together (an admin's, or a balancer batch):
    (topic id, partition id, "preferred" | "unclean") each."""

    elections: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True, slots=True)
class Reassign:
    """A reassignment plan (KIP-455): (topic id, partition id, target replicas or
    None to cancel) each."""

    targets: tuple[tuple[str, int, tuple[int, ...] | None], ...]


@dataclass(frozen=True, slots=True)
class Failover:
    """A LeaderChangeMessage: a controller became active (sessions restart, bug 18138)."""

    leader_id: int


Command = (
    Register
    | Unfence
    | ShutdownRequest
    | ShutdownNow
    | FenceMark
    | Unregister
    | CreateTopic
    | CreatePartitions
    | DeleteTopic
    | AlterConfigs
    | AlterIsr
    | AdminElect
    | Reassign
    | Failover
)


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    leader_epoch: int
    time_ms: int
    control: bool
    records: tuple[Record, ...]


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Unit:
    """A batch or a committed transaction of the log, in offset order.

    `copy`: written to the counterfactual log as it is (and replayed); else the
    `commands` are fed to the controller, which writes its own records."""

    offset: int
    time_ms: int
    copy: bool
    batches: tuple[Batch, ...]
    commands: tuple[Command, ...]
    # records of the unit the commands do not explain (kept for the docs' limits)
    unexplained: int = 0


class IsrUnit(NamedTuple):
    """A batch that holds one leader's AlterPartition and nothing else: nine
    units in ten. The same unit as `Unit(offset, time_ms, False, (Batch(offset,
    leader_epoch, time_ms, False, ()),), (AlterIsr(...),))`, which `batches` and
    `commands` give back, kept as one tuple: a 1M-record log's facts pickle in
    a third of the time and load in a quarter (plain tuples have no Python-level
    reduce), and the engine passes it as its own AlterIsr command."""

    offset: int
    time_ms: int
    leader_epoch: int
    topic_id: str
    partition_id: int
    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    leader_recovery_state: int  # -1 unchanged

    copy = False
    unexplained = 0

    @property
    def batches(self) -> tuple[Batch, ...]:
        return (Batch(self.offset, self.leader_epoch, self.time_ms, False, ()),)

    @property
    def commands(self) -> tuple[Command, ...]:
        return (AlterIsr(*self[3:]),)


# ----------------------------------------------------------------------------- liveness


@dataclass
class Liveness:
    """Per broker, when it went up (heard from) and down (silent), in log order.

    Two timelines: with controlled shutdown (the process stops once told to shut
    down) and without (it stops as soon as it wants to)."""

    session_timeout_ms: int
    _on: dict[int, list[tuple[int, bool]]] = field(default_factory=dict)
    _off: dict[int, list[tuple[int, bool]]] = field(default_factory=dict)
    _times: dict[tuple[bool, int], list[int]] = field(default_factory=dict)

    def _add(self, line: dict[int, list[tuple[int, bool]]], b: int, t: int, up: bool) -> None:
        events = line.setdefault(b, [])
        if up:
            events.append((t, True))
            return
        if events and not events[-1][1]:
            return  # already silent: the first silence counts
        # A silence starts no earlier than the broker was last heard from.
        last_up = max((x for x, u in events if u), default=t)
        events.append((max(t, last_up) if events else t, False))

    def up(self, b: int, t: int) -> None:
        self._add(self._on, b, t, True)
        self._add(self._off, b, t, True)

    def down(self, b: int, t: int, controlled_shutdown: bool | None = None) -> None:
        if controlled_shutdown in (None, True):
            self._add(self._on, b, t, False)
        if controlled_shutdown in (None, False):
            self._add(self._off, b, t, False)

    def _line(self, cs: bool, b: int) -> tuple[list[tuple[int, bool]], list[int]]:
        line = (self._on if cs else self._off).get(b, [])
        times = self._times.get((cs, b))
        if times is None or len(times) != len(line):
            # events are appended in log order; times are monotone except across
            # failovers of controllers with skewed clocks: sort stably
            line.sort(key=lambda e: e[0])
            times = [e[0] for e in line]
            self._times[(cs, b)] = times
        return line, times

    def alive(self, b: int, t: int, cs: bool) -> bool:
        line, times = self._line(cs, b)
        i = bisect.bisect_right(times, t)
        return i > 0 and line[i - 1][1]

    def alive_until(self, b: int, t: int, cs: bool) -> int | None:
        """When the broker, alive at t, next goes silent (None: never)."""
        line, times = self._line(cs, b)
        for i in range(bisect.bisect_right(times, t), len(line)):
            if not line[i][1]:
                return line[i][0]
        return None

    def silent_since(self, b: int, t: int, cs: bool) -> int | None:
        """When the broker last went silent at or before t (None: never)."""
        line, times = self._line(cs, b)
        i = bisect.bisect_right(times, t)
        while i > 0:
            i -= 1
            if not line[i][1]:
                return line[i][0]
        return None


@dataclass
class Facts:
    units: list[Unit | IsrUnit]
    liveness: Liveness
    first_time_ms: int
    last_time_ms: int
    last_offset: int
    # The largest batch in the log: results above it were written as transactions.
    max_batch_bytes: int
    racks: dict[int, str | None]
    broker_ids: list[int]

    @property
    def command_count(self) -> int:
        return sum(1 if type(u) is IsrUnit else len(u.commands) for u in self.units)


# ----------------------------------------------------------------------------- reading


def _batches(directory: Path) -> Iterator[tuple[Batch, int]]:
    segments = segment_files(directory)
    if not segments:
        raise FactsError(f"{directory}: no log segments")
    if segments[0][0] != 0:
        raise FactsError(
            f"{directory}: the log starts at offset {segments[0][0]}, not 0 (retention "
            "dropped its beginning): a what-if needs the whole history"
        )
    expect = 0
    for i, (_base, path) in enumerate(segments):
        with open_log_file(path) as f:
            data = f.read()
        try:
            for pos, h in iter_headers(data, str(path)):
                if h.base_offset != expect:
                    raise FactsError(
                        f"{path}: gap in the log, offset {h.base_offset} follows {expect}"
                    )
                records = tuple(decode_records(data, pos, h, str(path)))
                expect = h.base_offset + len(records)
                batch = Batch(h.base_offset, h.leader_epoch, h.append_time_ms, h.control, records)
                yield batch, h.length
        except IncompleteBatchError:
            if i != len(segments) - 1:
                raise  # only the very end of a log may be mid-append


def _transactions(batches: list[Batch]) -> dict[int, bool]:
    """Offset of each BeginTransactionRecord -> whether its transaction applied."""
    fate: dict[int, bool] = {}
    begin: int | None = None
    for b in batches:
        if b.control:
            continue
        for i, r in enumerate(b.records):
            t = type(r)
            if t is BeginTransactionRecord:
                begin = b.base_offset + i
                fate[begin] = False
            elif t is EndTransactionRecord and begin is not None:
                fate[begin] = True
                begin = None
            elif t is AbortTransactionRecord:
                begin = None
    return fate


_COPY_TYPES = frozenset({NoOpRecord, FeatureLevelRecord})


def read_facts(log_dir: str | Path, session_timeout_ms: int) -> Facts:
    """The units and broker liveness of a complete native log (segments from 0)."""
    # Millions of records, units and commands that live for the whole job: the
    # cyclic collector would walk them again at every full collection (a third
    # of the time at 1M records: 11.0 -> 7.0 CPU s). They hold no cycles
    # (refcounting frees them), so it is off while they are made.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_facts(log_dir, session_timeout_ms)
    finally:
        if was_enabled:
            gc.enable()


def _magic(path: Path) -> bytes:
    """The first batch's magic byte (b"" when the file is shorter)."""
    with open_log_file(path) as f:
        return f.read(17)[16:17]


def _read_facts(log_dir: str | Path, session_timeout_ms: int) -> Facts:
    directory = metadata_dir(log_dir)
    if not directory.is_dir():
        raise FactsError(f"{log_dir} is not a log directory")
    first = next(iter(sorted(directory.glob("*.log"))), None)
    if first is not None and _magic(first) == b"\x02":
        raise FactsError(
            f"{log_dir}: an Apache Kafka log: what-if replays read this project's logs only"
        )
    read = list(_batches(directory))
    batches = [b for b, _ in read]
    if not batches:
        raise FactsError(f"{log_dir}: the log is empty")
    fate = _transactions(batches)
    # Results above the limit were written as transactions: with none in the
    # log, the shell's default; else its largest batch.
    max_batch = max(size for _, size in read) if fate else DEFAULT_MAX_BATCH_BYTES
    image = MetadataImage()
    live = Liveness(session_timeout_ms)
    units: list[Unit | IsrUnit] = []
    racks: dict[int, str | None] = {}
    pending: list[Batch] = []  # batches of a committed transaction so far
    aborted = False  # inside a transaction that never applies
    shutting: set[int] = set()
    shutting_done: set[int] = set()  # brokers whose controlled shutdown completed

    def replay(bs: list[Batch]) -> None:
        for b in bs:
            for i, r in enumerate(b.records):
                image.replay(r, b.base_offset + i)

    for b in batches:
        if b.control:
            cmds: tuple[Command, ...] = tuple(
                Failover(r.leader_id) for r in b.records if isinstance(r, LeaderChangeMessage)
            )
            units.append(Unit(b.base_offset, b.time_ms, True, (b,), cmds))
            continue
        recs = b.records
        if pending or aborted or (recs and type(recs[0]) is BeginTransactionRecord):
            if not pending and not aborted:
                aborted = not fate.get(b.base_offset, False)
            if aborted:
                units.append(Unit(b.base_offset, b.time_ms, True, (b,), ()))
                replay([b])
                if any(type(r) in (AbortTransactionRecord, EndTransactionRecord) for r in recs):
                    aborted = False
                continue
            pending.append(b)
            if type(recs[-1]) is not EndTransactionRecord:
                continue
            unit_batches, pending = pending, []
        else:
            unit_batches = [b]
        records = [
            r
            for ub in unit_batches
            for r in ub.records
            if type(r) not in (BeginTransactionRecord, EndTransactionRecord)
        ]
        head = unit_batches[0]
        if all(type(r) in _COPY_TYPES for r in records):
            units.append(Unit(head.base_offset, head.time_ms, True, tuple(unit_batches), ()))
        else:
            cmds, unexplained = _commands(
                records, image, head.time_ms, live, shutting, racks, shutting_done
            )
            if (
                len(cmds) == 1
                and type(cmds[0]) is AlterIsr
                and len(unit_batches) == 1
                and not unexplained
            ):
                c = cmds[0]
                units.append(
                    IsrUnit(
                        head.base_offset,
                        head.time_ms,
                        head.leader_epoch,
                        c.topic_id,
                        c.partition_id,
                        c.old_isr,
                        c.new_isr,
                        c.leader_recovery_state,
                    )
                )
            else:
                units.append(
                    Unit(
                        head.base_offset,
                        head.time_ms,
                        False,
                        # the commands stand for the records: keep the batches' shape only
                        tuple(
                            Batch(b.base_offset, b.leader_epoch, b.time_ms, b.control, ())
                            for b in unit_batches
                        ),
                        cmds,
                        unexplained,
                    )
                )
        replay(unit_batches)
    last = batches[-1]
    return Facts(
        units=units,
        liveness=live,
        first_time_ms=batches[0].time_ms,
        last_time_ms=max(b.time_ms for b in batches),
        last_offset=last.base_offset + len(last.records) - 1,
        max_batch_bytes=max_batch,
        racks=racks,
        broker_ids=sorted(racks),
    )


def _commands(
    records: list[Record],
    image: MetadataImage,
    t: int,
    live: Liveness,
    shutting: set[int],
    racks: dict[int, str | None],
    shutting_done: set[int],
) -> tuple[tuple[Command, ...], int]:
    """The commands that wrote one unit (the image is the state before it), in
    the order of their first records (a group-committed batch holds several
    commands' records one after the other).

    A broker's commands (and a topic's configs: enabling unclean election
    elects) explain every partition change of their unit: the controller's
    consequences. A topic's creation, deletion or new partitions write no
    partition change, so a unit holding one and partition changes (a delete
    group-committed with an AlterPartition) holds those as facts too."""
    out: list[tuple[int, Command]] = []
    if len(records) == 1 and type(records[0]) is PartitionChangeRecord:
        # most units of a long log: a leader's AlterPartition alone
        unexplained = _partition_commands([(0, records[0])], image, out)
        return tuple(cmd for _, cmd in out), unexplained
    explained_partitions = False
    topic_records = [(i, r) for i, r in enumerate(records) if type(r) is TopicRecord]
    for i, r in enumerate(records):
        match r:
            case RegisterBrokerRecord():
                clean = r.broker_id in shutting_done and not any(
                    type(x) is PartitionChangeRecord for x in records
                )
                shutting_done.discard(r.broker_id)
                out.append((i, Register(r, clean)))
                racks[r.broker_id] = r.rack
                live.up(r.broker_id, t)
                shutting.discard(r.broker_id)
                explained_partitions = True
            case UnfenceBrokerRecord(id=b) | BrokerRegistrationChangeRecord(broker_id=b, fenced=-1):
                out.append((i, Unfence(b)))
                live.up(b, t)
                explained_partitions = True
            case FenceBrokerRecord(id=b):
                out.append((i, FenceMark(b)))
                shutting_done.discard(b)
                live.down(b, t - live.session_timeout_ms)
                explained_partitions = True
            case BrokerRegistrationChangeRecord(broker_id=b, in_controlled_shutdown=1):
                out.append((i, ShutdownRequest(b)))
                shutting.add(b)
                live.down(b, t, controlled_shutdown=False)
                explained_partitions = True
            case BrokerRegistrationChangeRecord(broker_id=b, fenced=1):
                out.append((i, ShutdownNow(b)))
                if b not in shutting:  # shut down at once: the request was now
                    live.down(b, t, controlled_shutdown=False)
                shutting.discard(b)
                shutting_done.add(b)
                live.down(b, t, controlled_shutdown=True)
                explained_partitions = True
            case UnregisterBrokerRecord(broker_id=b):
                out.append((i, Unregister(b)))
                live.down(b, t)
                explained_partitions = True
            case RemoveTopicRecord(topic_id=tid):
                out.append((i, DeleteTopic(tid)))
            case _:
                pass
    for i, tr in topic_records:
        parts = sorted(
            (r for r in records if type(r) is PartitionRecord and r.topic_id == tr.topic_id),
            key=lambda p: p.partition_id,
        )
        configs = tuple(
            (r.name, r.value)
            for r in records
            if type(r) is ConfigRecord
            and r.resource_type == TOPIC_RESOURCE
            and r.resource_name == tr.name
        )
        out.append(
            (i, CreateTopic(tr.name, tr.topic_id, tuple(p.replicas for p in parts), configs))
        )
    new_topics = {tr.topic_id for _, tr in topic_records}
    added: dict[str, list[tuple[int, PartitionRecord]]] = {}
    for i, r in enumerate(records):
        if type(r) is PartitionRecord and r.topic_id not in new_topics:
            added.setdefault(r.topic_id, []).append((i, r))
    for tid, parts in added.items():
        parts.sort(key=lambda x: x[1].partition_id)
        first = min(i for i, _ in parts)
        out.append((first, CreatePartitions(tid, tuple(p.replicas for _, p in parts))))
    topic_names = {tr.name for _, tr in topic_records}
    configs_by_name: dict[str, list[tuple[str, str | None]]] = {}
    config_at: dict[str, int] = {}
    for i, r in enumerate(records):
        if (
            type(r) is ConfigRecord
            and r.resource_type == TOPIC_RESOURCE
            and r.resource_name not in topic_names
        ):
            configs_by_name.setdefault(r.resource_name, []).append((r.name, r.value))
            config_at.setdefault(r.resource_name, i)
    for name, cfg in configs_by_name.items():
        out.append((config_at[name], AlterConfigs(name, tuple(cfg))))
        explained_partitions = True
    unexplained = 0
    if not explained_partitions:
        # what the topic commands above wrote is explained; the rest are
        # partition changes written alone (or records no command explains)
        rest = [
            (i, r)
            for i, r in enumerate(records)
            if not (
                type(r) in (TopicRecord, PartitionRecord, RemoveTopicRecord)
                or (type(r) is ConfigRecord and r.resource_type == TOPIC_RESOURCE)
            )
        ]
        unexplained = _partition_commands(rest, image, out)
    out.sort(key=lambda x: x[0])  # stable: one record's commands keep their order
    return tuple(cmd for _, cmd in out), unexplained


def _partition_commands(
    records: list[tuple[int, Record]], image: MetadataImage, out: list[tuple[int, Command]]
) -> int:
    """Partition changes written alone: AlterPartitions, elections, reassignments.

    Only a partition's first change in the unit is a fact; later ones are the
    controller's consequences (a reassignment completed by the ISR change).
    Each command is placed at its first record's index in the unit."""
    elections: list[tuple[str, int, str]] = []
    first_election = first_target = -1
    targets: list[tuple[str, int, tuple[int, ...] | None]] = []
    seen: set[tuple[str, int]] = set()
    unexplained = 0
    for i, r in records:
        if type(r) is not PartitionChangeRecord:
            unexplained += 1
            continue
        key = (r.topic_id, r.partition_id)
        if key in seen:
            continue
        seen.add(key)
        topic = image.topics.get(r.topic_id)
        p = None if topic is None else topic.partitions.get(r.partition_id)
        if p is None:
            unexplained += 1
            continue
        if (
            r.replicas is not None
            or r.adding_replicas is not None
            or r.removing_replicas is not None
        ):
            target = _reassignment_target(r, p)
            if target is not False:
                first_target = i if not targets else first_target
                targets.append((r.topic_id, r.partition_id, target))  # type: ignore[arg-type]
                continue
            if r.isr is not None:
                # The completion rode on the leader's AlterPartition: it asked for
                # the ISR with the new replicas, the completion dropped the old ones.
                asked = tuple(b for b in p.isr if b in r.isr or b in p.removing_replicas)
                asked += tuple(b for b in r.isr if b not in p.isr)
                out.append(
                    (i, AlterIsr(r.topic_id, r.partition_id, p.isr, asked, r.leader_recovery_state))
                )
                continue
        if r.leader == NO_LEADER_CHANGE or r.leader == p.leader:
            if r.isr is None and r.leader_recovery_state == -1:
                unexplained += 1
                continue
            new_isr = p.isr if r.isr is None else r.isr
            out.append(
                (i, AlterIsr(r.topic_id, r.partition_id, p.isr, new_isr, r.leader_recovery_state))
            )
            continue
        kind = "unclean" if r.leader >= 0 and r.leader not in p.isr else "preferred"
        first_election = i if not elections else first_election
        elections.append((r.topic_id, r.partition_id, kind))
    if elections:
        out.append((first_election, AdminElect(tuple(elections))))
    if targets:
        out.append((first_target, Reassign(tuple(targets))))
    return unexplained


def _reassignment_target(r: PartitionChangeRecord, p: Any) -> tuple[int, ...] | None | bool:
    """The plan entry behind a replica-set change: a target, None (a cancel), or
    False when it is the completion an ISR change brought (not a command)."""
    replicas = p.replicas if r.replicas is None else r.replicas
    adding = p.adding_replicas if r.adding_replicas is None else r.adding_replicas
    removing = p.removing_replicas if r.removing_replicas is None else r.removing_replicas
    if adding or removing:
        # started (or replaced): the replicas are the target, then the dropped ones
        return tuple(b for b in replicas if b not in removing)
    if p.adding_replicas or p.removing_replicas:
        if tuple(replicas) == tuple(b for b in p.replicas if b not in p.adding_replicas):
            return None  # back to the original replicas: cancelled
        return False  # completed: the ISR change that completed it is the fact
    return tuple(replicas)  # a reorder, completed at once


__all__ = [
    "FENCE_NO",
    "FENCE_YES",
    "Facts",
    "FactsError",
    "Liveness",
    "Unit",
    "read_facts",
]
