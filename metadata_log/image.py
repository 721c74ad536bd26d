"""MetadataImage: the cluster's metadata state, changed only by `replay(record, offset)`.

This is the one replay that the controller, the broker agent and the Spark
cross-check all use (Kafka's MetadataImage + MetadataDelta, folded into one
mutable structure for speed at millions of partitions). It is pure: no I/O,
no clock. Rules follow Kafka 3.x:

- a PartitionChangeRecord changes only the fields it carries (None / leader -2 /
  leader_recovery_state -1 mean unchanged); leader_epoch rises by one whenever it
  sets the leader (even to the same broker), partition_epoch on every change;
- every registration replaces the broker's registration, with the record's epoch;
- records between BeginTransactionRecord and EndTransactionRecord are applied
  only at the end record (KIP-868); an AbortTransactionRecord drops them. A
  large transaction's end can be applied in slices (`replay_in_steps`), so a
  shell serving the network meanwhile never stops for a million records; its
  partition changes are merged as they arrive (`_stage`), so the end only
  publishes them (issue 26: the merges of a fence of a million partitions then
  run while its batches commit, not after).

A record that contradicts the image (a fence for an unknown broker, a change to
an unknown partition) raises MetadataReplayError naming the offset: a diverged
replica must stop, never guess.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from metadata_log.errors import MetadataLogError
from metadata_log.records import (
    FENCE_NO,
    FENCE_YES,
    LEADER_RECOVERY_UNCHANGED,
    NO_LEADER_CHANGE,
    TOPIC_RESOURCE,
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    Endpoint,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    slot_constructor,
)

_MISSING: Any = object()
_ATTR = "attr"  # journal container tag for an attribute of the image itself


class PartitionListener(Protocol):
    def partition_changed(
        self,
        topic_id: str,
        partition_id: int,
        old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None: ...


class MetadataReplayError(MetadataLogError):
    """A record that cannot apply to the image it meets."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        super().__init__(f"cannot replay record at offset {offset}: {reason}")


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    endpoints: tuple[Endpoint, ...]
    features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "incarnation_id": self.incarnation_id,
            "fenced": self.fenced,
            "in_controlled_shutdown": self.in_controlled_shutdown,
            "rack": self.rack,
            "endpoints": [
                {
                    "name": e.name,
                    "host": e.host,
                    "port": e.port,
                    "security_protocol": e.security_protocol,
                }
                for e in self.endpoints
            ],
            "features": [
                {
                    "name": f.name,
                    "min_supported_version": f.min_supported_version,
                    "max_supported_version": f.max_supported_version,
                }
                for f in self.features
            ],
        }


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int
    # KIP-966: eligible leader replicas (disjoint from the ISR) and last known ELR
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def merge(self, rec: PartitionChangeRecord) -> PartitionRegistration:
        """Kafka's PartitionRegistration.merge."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if rec.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = rec.leader, leader_epoch + 1
        # positional, in field order, set slot by slot (a fence merges a million)
        return _new_registration(
            self.replicas if rec.replicas is None else rec.replicas,
            self.isr if rec.isr is None else rec.isr,
            self.removing_replicas if rec.removing_replicas is None else rec.removing_replicas,
            self.adding_replicas if rec.adding_replicas is None else rec.adding_replicas,
            leader,
            (
                self.leader_recovery_state
                if rec.leader_recovery_state == LEADER_RECOVERY_UNCHANGED
                else rec.leader_recovery_state
            ),
            leader_epoch,
            self.partition_epoch + 1,
            self.elr if rec.eligible_leader_replicas is None else rec.eligible_leader_replicas,
            self.last_known_elr if rec.last_known_elr is None else rec.last_known_elr,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "removing_replicas": list(self.removing_replicas),
            "adding_replicas": list(self.adding_replicas),
            "leader": self.leader,
            "leader_recovery_state": self.leader_recovery_state,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "elr": list(self.elr),
            "last_known_elr": list(self.last_known_elr),
        }

    @property
    def reassigning(self) -> bool:
        """A reassignment (KIP-455) is in progress."""
        return bool(self.adding_replicas or self.removing_replicas)


class _PartitionDict(dict):  # type: ignore[type-arg]
    """A topic's partitions; knows its topic id so a revert can notify the listener."""

    __slots__ = ("topic_id",)

    def __init__(
        self, topic_id: str, items: dict[int, PartitionRegistration] | None = None
    ) -> None:
        super().__init__(items or {})
        self.topic_id = topic_id


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: str
    # partition id -> registration; ids are 0..n-1 once creation has committed
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.partitions, _PartitionDict):
            self.partitions = _PartitionDict(self.topic_id, self.partitions)


# PartitionRegistration(*all ten fields, positional), at half the cost
_new_registration = slot_constructor(PartitionRegistration)


class MetadataImage:
    """The metadata state at `offset` (the last replayed offset; -1 when empty)."""

    __slots__ = (
        "offset",
        "last_append_time_ms",
        "brokers",
        "topics",
        "topic_ids_by_name",
        "configs",
        "features",
        "_txn",
        "_txn_base",
        "_txn_new",
        "_staging",
        "_applying",
        "_journal",
        "listener",
    )

    def __init__(self) -> None:
        self.offset = -1
        self.last_append_time_ms = 0
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}
        self.topic_ids_by_name: dict[str, str] = {}
        # (resource_type, resource_name) -> {key: value}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.features: dict[str, int] = {}
        # Records of an open metadata transaction, applied at its end record.
        self._txn: list[tuple[MetadataRecord, int]] | None = None
        # Staged merges of the open transaction (`_stage`), prefixes of `_txn`:
        # `_txn_new[i]` is the registration `_txn[i]` (a PartitionChangeRecord) sets,
        # merged from `_txn_base[i]`; None for a record with nothing staged.
        # `_staging`: records are still staged as they come.
        self._txn_base: list[PartitionRegistration | None] = []
        self._txn_new: list[PartitionRegistration | None] = []
        self._staging = False
        # True while `replay_in_steps` applies a transaction's end in slices.
        self._applying = False
        # Undo journal of uncommitted replays (None: off): entries (offset, container,
        # key, old value or _MISSING). Lets an active controller that loses leadership
        # return to the committed state without a reload (Kafka's SnapshotRegistry).
        self._journal: deque[tuple[int, Any, Any, Any]] | None = None
        # Told of every partition change (also on revert): the controller's indexes.
        self.listener: PartitionListener | None = None

    # ------------------------------------------------------------------ replay

    def replay(self, record: Record, offset: int) -> None:
        """Apply one record at `offset`. Control records only move the offset."""
        if offset <= self.offset:
            raise MetadataReplayError(offset, f"offset is not after the image's {self.offset}")
        if self._applying:
            raise MetadataReplayError(offset, "replayed while a transaction's end is applied")
        t = type(record)
        if self._journal is not None:
            self._journal.append((offset, _ATTR, "offset", self.offset))
            if self._txn is not None and t not in _TXN_MARKERS:
                # inside a transaction only the pending list grows: remember its length
                self._journal.append((offset, _ATTR, "_txn_len", len(self._txn)))
            else:
                # Begin/End/Abort swap the pending list object itself
                self._journal.append((offset, _ATTR, "_txn", self._txn))
        self.offset = offset
        if t is BeginTransactionRecord:
            if self._txn is not None:
                raise MetadataReplayError(offset, "transaction begun inside a transaction")
            self._txn = []
            self._txn_base, self._txn_new, self._staging = [], [], True
        elif t is EndTransactionRecord:
            if self._txn is None:
                raise MetadataReplayError(offset, "EndTransactionRecord without a transaction")
            pending, self._txn = self._txn, None
            base, staged = self._unstage()
            self._apply_pending(pending, base, staged, 0, len(pending))
        elif t is AbortTransactionRecord:
            if self._txn is None:
                raise MetadataReplayError(offset, "AbortTransactionRecord without a transaction")
            self._txn = None
            self._unstage()
        elif self._txn is not None:
            self._txn.append((record, offset))  # type: ignore[arg-type]
            if self._staging:
                self._stage(record)
        else:
            self._apply(record, offset)

    def queue_in_transaction(
        self,
        records: Sequence[Record],
        start: int,
        base_offset: int,
        stop_types: frozenset[type] = frozenset(),
    ) -> int:
        """`replay(records[i], base_offset + i)` for i from `start`, while a
        transaction is open, up to the first transaction marker or record of a
        `stop_types` class; returns that index (`start`: nothing replayed). Equal
        to `replay` record by record, journal and staging included, at a third of
        the calls: a fence's million records are queued so on every controller."""
        pending = self._txn
        if pending is None or self._applying:
            return start
        journal = self._journal
        stage = self._stage if self._staging else None
        stop = len(records)
        offset = self.offset
        i = start
        while i < stop:
            rec = records[i]
            t = type(rec)
            if t in _TXN_MARKERS or t in stop_types:
                break
            at = base_offset + i
            if at <= offset:
                raise MetadataReplayError(at, f"offset is not after the image's {offset}")
            if journal is not None:
                journal.append((at, _ATTR, "offset", offset))
                journal.append((at, _ATTR, "_txn_len", len(pending)))
            offset = self.offset = at
            pending.append((rec, at))  # type: ignore[arg-type]
            if stage is not None:
                stage(rec)
                if not self._staging:
                    stage = None
            i += 1
        return i

    def replay_in_steps(self, record: Record, offset: int, step: int) -> Iterator[int]:
        """`replay(record, offset)` in slices of `step` records, yielding (the records
        applied so far) between two slices: the EndTransactionRecord of a large
        transaction applies all of its records, a million for a fence of a broker in
        every ISR. Until the iterator is exhausted the image is half-applied:
        `in_transaction` stays true (no snapshot is taken of it) and `replay`
        refuses. Equal to `replay` once exhausted, journal included."""
        pending = self._txn
        if type(record) is not EndTransactionRecord or pending is None or len(pending) <= step:
            self.replay(record, offset)
            return
        if offset <= self.offset:
            raise MetadataReplayError(offset, f"offset is not after the image's {self.offset}")
        if self._applying:
            raise MetadataReplayError(offset, "replayed while a transaction's end is applied")
        if self._journal is not None:
            self._journal.append((offset, _ATTR, "offset", self.offset))
            self._journal.append((offset, _ATTR, "_txn", pending))
        self.offset = offset
        self._applying = True
        base, staged = self._unstage()
        # Without a journal nothing can ask for the records again: each slice's are
        # freed as it is applied (the whole list freed at the end held a standby's
        # loop ~0.2 s at a million records). A journal keeps them for a revert, and
        # commit_to frees them in slices.
        free = self._journal is None
        try:
            for i in range(0, len(pending), step):
                if i:
                    yield i
                stop = min(i + step, len(pending))
                self._apply_pending(pending, base, staged, i, stop)
                if free:
                    pending[i:stop] = [None] * (stop - i)
                    k = max(0, min(stop, len(staged)) - i)
                    base[i:stop] = staged[i:stop] = [None] * k
        finally:
            self._applying = False
        self._txn = None

    def _stage(self, rec: Record) -> None:
        """Merge a PartitionChangeRecord of the open transaction now (`_txn_new`,
        from the registration `_txn_base`), so that its end only publishes it: the
        merges of a fence of a million partitions are then done as its batches
        commit, not after (issue 26). The end publishes a staged merge only if the
        partition still holds the very registration it was merged from (a merge is
        a function of the registration and the record), and merges again if not (a
        second change of one partition in one transaction). A record that could
        remove a partition (a topic or partition record) stops staging: the rest is
        applied record by record at the end, as without staging."""
        t = type(rec)
        if t is PartitionChangeRecord:
            topic = self.topics.get(rec.topic_id)  # type: ignore[union-attr]
            if topic is not None:
                p = topic.partitions.get(rec.partition_id)  # type: ignore[union-attr]
                if p is not None:
                    self._txn_base.append(p)
                    self._txn_new.append(p.merge(rec))  # type: ignore[arg-type]
                    return
        elif t in _STAGE_NOTHING:
            self._txn_base.append(None)
            self._txn_new.append(None)
            return
        self._staging = False  # the rest applies record by record

    def _unstage(
        self,
    ) -> tuple[list[PartitionRegistration | None], list[PartitionRegistration | None]]:
        """Stop staging; returns what was staged (`_txn_base`, `_txn_new`)."""
        out = self._txn_base, self._txn_new
        self._txn_base, self._txn_new, self._staging = [], [], False
        return out

    def _apply_pending(
        self,
        pending: list[tuple[MetadataRecord, int]],
        base: list[PartitionRegistration | None],
        staged: list[PartitionRegistration | None],
        start: int,
        stop: int,
    ) -> None:
        """Apply a transaction's records [start, stop) at its end: a staged change
        is published (the image's partition set, its undo entry, the listener),
        anything else is applied as `replay` applies it.

        A listener with `partitions_changed` hears the published changes a slice
        at a time (the controller's index then moves them with set operations in
        C: one call per change was most of a fence's end). A slice holds each
        partition at most once: a change published from the registration it was
        merged from is the partition's first in this end (any earlier one replaced
        that registration); anything else is told at once, after the slice so far."""
        apply = self._apply
        topics = self.topics
        journal = self._journal
        at = self.offset
        listener = self.listener
        one = None if listener is None else listener.partition_changed
        many = getattr(listener, "partitions_changed", None)
        told: list[tuple[str, int, PartitionRegistration, PartitionRegistration]] = []
        tell = told.append
        n_staged = min(stop, len(staged))
        for i in range(start, stop):
            rec, off = pending[i]
            if i >= n_staged or staged[i] is None:
                if told:
                    many(told)  # type: ignore[misc]
                    told.clear()
                apply(rec, off)
                continue
            # a staged PartitionChangeRecord: _partition_change, merged already
            tid, pid = rec.topic_id, rec.partition_id  # type: ignore[union-attr]
            partitions = topics[tid].partitions
            p = partitions[pid]
            first = p is base[i]
            new = staged[i] if first else p.merge(rec)  # type: ignore[arg-type]
            if journal is not None:
                journal.append((at, partitions, pid, p))
            partitions[pid] = new
            if many is not None and first:
                tell((tid, pid, p, new))  # type: ignore[arg-type]
            elif one is not None:
                if told:
                    many(told)  # type: ignore[misc]
                    told.clear()
                one(tid, pid, p, new)
        if told:
            many(told)  # type: ignore[misc]

    def replay_batch(
        self, base_offset: int, records: Iterable[Record], append_time_ms: int = 0
    ) -> None:
        off = base_offset
        for rec in records:
            self.replay(rec, off)
            off += 1
        self.last_append_time_ms = max(self.last_append_time_ms, append_time_ms)

    # ------------------------------------------------------------------ journaling

    def _set(self, container: dict[Any, Any], key: Any, value: Any, offset: int) -> None:
        # Journal under the image's offset, not the record's: a transaction's records
        # apply at its end record and must be undone with it.
        if self._journal is not None:
            self._journal.append((self.offset, container, key, container.get(key, _MISSING)))
        container[key] = value

    def _del(self, container: dict[Any, Any], key: Any, offset: int) -> None:
        if self._journal is not None:
            self._journal.append((self.offset, container, key, container[key]))
        del container[key]

    def _set_partition(
        self, t: TopicImage, pid: int, new: PartitionRegistration, offset: int
    ) -> None:
        old = t.partitions.get(pid)
        self._set(t.partitions, pid, new, offset)
        if self.listener is not None:
            self.listener.partition_changed(t.topic_id, pid, old, new)

    def enable_journal(self) -> None:
        """Start journaling replays so that `revert_to(offset)` can undo them."""
        if self._journal is None:
            self._journal = deque()

    def disable_journal(self) -> None:
        self._journal = None

    def commit_to(self, offset: int, limit: int | None = None) -> bool:
        """Records up to `offset` are committed: their undo entries are dropped, at
        most `limit` of them (a change of a million partitions journals three
        million, and dropping them frees the registrations they replaced: 0.3 s in
        one go). True when nothing more can be dropped now: none up to `offset` is
        left, or the next is a transaction's end still applied in slices (its
        records are in use; the next commit drops them)."""
        j = self._journal
        if j is None:
            return True
        if limit is None:
            while j and j[0][0] <= offset:
                j.popleft()
            return True
        n = limit
        while n > 0 and j and j[0][0] <= offset:
            _off, container, key, old = j[0]
            if container is _ATTR and key == "_txn" and old is not None:
                if old is self._txn:
                    return True  # committed, but replay_in_steps is still applying it
                if len(old) > n:
                    # a committed transaction's records, freed `limit` a call
                    del old[-n:]
                    return False
            j.popleft()
            n -= 1
        return not (j and j[0][0] <= offset)

    def revert_to(self, offset: int) -> None:
        """Undo every journaled replay after `offset` (uncommitted records)."""
        j = self._journal
        if j is None:
            raise RuntimeError("revert_to needs enable_journal()")
        while j and j[-1][0] > offset:
            _off, container, key, old = j.pop()
            if container is _ATTR:
                if key == "_txn_len":
                    del self._txn[old:]  # type: ignore[index]
                    del self._txn_base[old:]
                    del self._txn_new[old:]
                else:
                    setattr(self, key, old)
                    if key == "_txn":  # a transaction back (or gone): none staged
                        self._unstage()
                continue
            current = container.get(key)
            if old is _MISSING:
                container.pop(key, None)
            else:
                container[key] = old
            if self.listener is not None and isinstance(container, _PartitionDict):
                self.listener.partition_changed(
                    container.topic_id, key, current, None if old is _MISSING else old
                )
            elif self.listener is not None and container is self.topics:
                # a whole topic came back (or went): its partitions did too
                gone = current.partitions if current is not None else {}
                back = old.partitions if old is not _MISSING else {}
                for pid, p in gone.items():
                    self.listener.partition_changed(current.topic_id, pid, p, None)
                for pid, p in back.items():
                    self.listener.partition_changed(old.topic_id, pid, None, p)

    @property
    def in_transaction(self) -> bool:
        return self._txn is not None

    @property
    def applying(self) -> bool:
        """A transaction's end is being applied in slices (`replay_in_steps`): the
        state is half of a change until it is done."""
        return self._applying

    def _apply(self, rec: Record, offset: int) -> None:
        handler = _HANDLERS.get(type(rec))
        if handler is not None:
            handler(self, rec, offset)

    def _register(self, rec: RegisterBrokerRecord, offset: int) -> None:
        reg = BrokerRegistration(
            broker_id=rec.broker_id,
            broker_epoch=rec.broker_epoch,
            incarnation_id=rec.incarnation_id,
            endpoints=rec.endpoints,
            features=rec.features,
            rack=rec.rack,
            fenced=rec.fenced,
            in_controlled_shutdown=rec.in_controlled_shutdown,
        )
        self._set(self.brokers, rec.broker_id, reg, offset)

    def _broker(self, broker_id: int, epoch: int, offset: int, what: str) -> BrokerRegistration:
        b = self.brokers.get(broker_id)
        if b is None:
            raise MetadataReplayError(offset, f"{what} for unregistered broker {broker_id}")
        if b.broker_epoch != epoch:
            raise MetadataReplayError(
                offset,
                f"{what} for broker {broker_id} epoch {epoch}, registered epoch is {b.broker_epoch}",
            )
        return b

    def _unregister(self, rec: UnregisterBrokerRecord, offset: int) -> None:
        self._broker(rec.broker_id, rec.broker_epoch, offset, "UnregisterBrokerRecord")
        self._del(self.brokers, rec.broker_id, offset)

    def _fence(self, rec: FenceBrokerRecord, offset: int) -> None:
        b = self._broker(rec.id, rec.epoch, offset, "FenceBrokerRecord")
        self._set(self.brokers, rec.id, replace(b, fenced=True), offset)

    def _unfence(self, rec: UnfenceBrokerRecord, offset: int) -> None:
        b = self._broker(rec.id, rec.epoch, offset, "UnfenceBrokerRecord")
        self._set(self.brokers, rec.id, replace(b, fenced=False), offset)

    def _registration_change(self, rec: BrokerRegistrationChangeRecord, offset: int) -> None:
        b = self._broker(rec.broker_id, rec.broker_epoch, offset, "BrokerRegistrationChangeRecord")
        fenced = b.fenced
        if rec.fenced == FENCE_YES:
            fenced = True
        elif rec.fenced == FENCE_NO:
            fenced = False
        elif rec.fenced != 0:
            raise MetadataReplayError(offset, f"bad fenced value {rec.fenced}")
        shutdown = b.in_controlled_shutdown or rec.in_controlled_shutdown == 1
        self._set(
            self.brokers,
            rec.broker_id,
            replace(b, fenced=fenced, in_controlled_shutdown=shutdown),
            offset,
        )

    def _topic(self, rec: TopicRecord, offset: int) -> None:
        if rec.name in self.topic_ids_by_name:
            raise MetadataReplayError(offset, f"topic {rec.name!r} already exists")
        if rec.topic_id in self.topics:
            raise MetadataReplayError(offset, f"topic id {rec.topic_id} already exists")
        self._set(self.topics, rec.topic_id, TopicImage(rec.name, rec.topic_id), offset)
        self._set(self.topic_ids_by_name, rec.name, rec.topic_id, offset)

    def _topic_of(self, topic_id: str, offset: int, what: str) -> TopicImage:
        t = self.topics.get(topic_id)
        if t is None:
            raise MetadataReplayError(offset, f"{what} for unknown topic id {topic_id}")
        return t

    def _partition(self, rec: PartitionRecord, offset: int) -> None:
        t = self._topic_of(rec.topic_id, offset, "PartitionRecord")
        new = PartitionRegistration(
            replicas=rec.replicas,
            isr=rec.isr,
            removing_replicas=rec.removing_replicas,
            adding_replicas=rec.adding_replicas,
            leader=rec.leader,
            leader_recovery_state=rec.leader_recovery_state,
            leader_epoch=rec.leader_epoch,
            partition_epoch=rec.partition_epoch,
            elr=rec.eligible_leader_replicas,
            last_known_elr=rec.last_known_elr,
        )
        self._set_partition(t, rec.partition_id, new, offset)

    def _partition_change(self, rec: PartitionChangeRecord, offset: int) -> None:
        # _set_partition inlined: a fence replays a million of these
        t = self._topic_of(rec.topic_id, offset, "PartitionChangeRecord")
        partitions = t.partitions
        pid = rec.partition_id
        p = partitions.get(pid)
        if p is None:
            raise MetadataReplayError(
                offset, f"PartitionChangeRecord for unknown partition {t.name}-{pid}"
            )
        new = p.merge(rec)
        if self._journal is not None:
            self._journal.append((self.offset, partitions, pid, p))
        partitions[pid] = new
        if self.listener is not None:
            self.listener.partition_changed(t.topic_id, pid, p, new)

    def _remove_topic(self, rec: RemoveTopicRecord, offset: int) -> None:
        t = self._topic_of(rec.topic_id, offset, "RemoveTopicRecord")
        if self.listener is not None:
            for pid, p in t.partitions.items():
                self.listener.partition_changed(t.topic_id, pid, p, None)
        self._del(self.topics, rec.topic_id, offset)
        self._del(self.topic_ids_by_name, t.name, offset)
        if (TOPIC_RESOURCE, t.name) in self.configs:
            self._del(self.configs, (TOPIC_RESOURCE, t.name), offset)

    def _config(self, rec: ConfigRecord, offset: int) -> None:
        key = (rec.resource_type, rec.resource_name)
        # copy-on-write so the journal's old value stays intact
        entries = dict(self.configs.get(key, {}))
        if rec.value is None:
            entries.pop(rec.name, None)
        else:
            entries[rec.name] = rec.value
        if entries:
            self._set(self.configs, key, entries, offset)
        elif key in self.configs:
            self._del(self.configs, key, offset)

    def _feature(self, rec: FeatureLevelRecord, offset: int) -> None:
        if rec.feature_level != 0:
            self._set(self.features, rec.name, rec.feature_level, offset)
        elif rec.name in self.features:
            self._del(self.features, rec.name, offset)  # level 0 removes a feature, as in Kafka

    # ------------------------------------------------------------------ queries

    def topic_by_name(self, name: str) -> TopicImage | None:
        tid = self.topic_ids_by_name.get(name)
        return None if tid is None else self.topics[tid]

    def topic_configs(self, name: str) -> dict[str, str]:
        return dict(self.configs.get((TOPIC_RESOURCE, name), {}))

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def offline_partition_count(self) -> int:
        return sum(1 for t in self.topics.values() for p in t.partitions.values() if p.leader < 0)

    # ------------------------------------------------------------------ snapshots

    def to_records(self) -> Iterator[MetadataRecord]:
        """Records that rebuild this image from empty (a snapshot's content).

        The order is the one replay needs: features, brokers, then each topic
        with its partitions and configs, then broker configs.
        """
        for name in sorted(self.features):
            yield FeatureLevelRecord(name, self.features[name])
        for bid in sorted(self.brokers):
            b = self.brokers[bid]
            yield RegisterBrokerRecord(
                broker_id=b.broker_id,
                incarnation_id=b.incarnation_id,
                broker_epoch=b.broker_epoch,
                endpoints=b.endpoints,
                features=b.features,
                rack=b.rack,
                fenced=b.fenced,
                in_controlled_shutdown=b.in_controlled_shutdown,
            )
        for name in sorted(self.topic_ids_by_name):
            t = self.topics[self.topic_ids_by_name[name]]
            yield TopicRecord(t.name, t.topic_id)
            for pid in sorted(t.partitions):
                p = t.partitions[pid]
                yield PartitionRecord(
                    topic_id=t.topic_id,
                    partition_id=pid,
                    replicas=p.replicas,
                    isr=p.isr,
                    removing_replicas=p.removing_replicas,
                    adding_replicas=p.adding_replicas,
                    leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    eligible_leader_replicas=p.elr,
                    last_known_elr=p.last_known_elr,
                )
        for rtype, rname in sorted(self.configs):
            for key, value in sorted(self.configs[(rtype, rname)].items()):
                yield ConfigRecord(rtype, rname, key, value)

    @classmethod
    def from_records(
        cls, records: Iterable[Record], end_offset: int, last_append_time_ms: int = 0
    ) -> MetadataImage:
        """The image a snapshot at `end_offset` holds (its offset is end_offset - 1)."""
        image = cls()
        image.apply_snapshot_records(records, end_offset)
        image.offset = end_offset - 1
        image.last_append_time_ms = last_append_time_ms
        return image

    def apply_snapshot_records(self, records: Iterable[Record], end_offset: int) -> None:
        """Apply records of a snapshot at `end_offset` (a loader's building step)."""
        for rec in records:
            self._apply(rec, end_offset - 1)

    def copy(self) -> MetadataImage:
        """A deep enough copy: registrations are immutable, containers are copied."""
        other = MetadataImage()
        other.offset = self.offset
        other.last_append_time_ms = self.last_append_time_ms
        other.brokers = dict(self.brokers)
        other.topics = {
            tid: TopicImage(t.name, t.topic_id, dict(t.partitions))
            for tid, t in self.topics.items()
        }
        other.topic_ids_by_name = dict(self.topic_ids_by_name)
        other.configs = {k: dict(v) for k, v in self.configs.items()}
        other.features = dict(self.features)
        other._txn = None if self._txn is None else list(self._txn)
        return other

    # ------------------------------------------------------------------ comparison

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-able form (sorted), used to compare images anywhere."""
        return {
            "offset": self.offset,
            "features": dict(sorted(self.features.items())),
            "brokers": [self.brokers[b].to_dict() for b in sorted(self.brokers)],
            "topics": [
                {
                    "name": name,
                    "topic_id": tid,
                    "configs": dict(sorted(self.configs.get((TOPIC_RESOURCE, name), {}).items())),
                    "partitions": [
                        {"partition_id": pid, **self.topics[tid].partitions[pid].to_dict()}
                        for pid in sorted(self.topics[tid].partitions)
                    ],
                }
                for name, tid in sorted(self.topic_ids_by_name.items())
            ],
            "configs": [
                {"resource_type": rt, "resource_name": rn, "configs": dict(sorted(v.items()))}
                for (rt, rn), v in sorted(self.configs.items())
            ],
        }

    def state_equals(self, other: MetadataImage) -> bool:
        """Equal state, regardless of the offset each image reached it at."""
        a, b = self.to_dict(), other.to_dict()
        a.pop("offset")
        b.pop("offset")
        return a == b

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.brokers == other.brokers
            and self.features == other.features
            and self.configs == other.configs
            and self.topic_ids_by_name == other.topic_ids_by_name
            and self.topics.keys() == other.topics.keys()
            and all(self.topics[t] == other.topics[t] for t in self.topics)
            and self._txn == other._txn
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"MetadataImage(offset={self.offset}, brokers={len(self.brokers)}, "
            f"topics={len(self.topics)}, partitions={self.partition_count()})"
        )


_TXN_MARKERS = (BeginTransactionRecord, EndTransactionRecord, AbortTransactionRecord)
# Records of a transaction that change no partition: staging goes on past them.
_STAGE_NOTHING = frozenset(
    {
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        BrokerRegistrationChangeRecord,
        ConfigRecord,
        FeatureLevelRecord,
        NoOpRecord,
    }
)

_HANDLERS: dict[type, Any] = {
    RegisterBrokerRecord: MetadataImage._register,
    UnregisterBrokerRecord: MetadataImage._unregister,
    FenceBrokerRecord: MetadataImage._fence,
    UnfenceBrokerRecord: MetadataImage._unfence,
    BrokerRegistrationChangeRecord: MetadataImage._registration_change,
    TopicRecord: MetadataImage._topic,
    PartitionRecord: MetadataImage._partition,
    PartitionChangeRecord: MetadataImage._partition_change,
    RemoveTopicRecord: MetadataImage._remove_topic,
    ConfigRecord: MetadataImage._config,
    FeatureLevelRecord: MetadataImage._feature,
}
