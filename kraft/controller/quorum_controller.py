"""QuorumController: the pure controller, on Kafka's records-then-replay pattern.

Every command is `generate(request, now) -> ControllerResult(records, reply)`
and touches no durable state; only `replay(record, offset)` changes it, and the
same replay runs on the active controller (as it appends, before commit) and on
standbys (as records commit), so a standby is hot when it takes over. The active
controller journals its replays and `deactivate()` reverts the uncommitted ones.

Soft state (heartbeat sessions) lives in BrokerHeartbeatManager, only on the
active controller, and is never logged. Fencing is one broker at a time: the
stalest broker's records (partition changes first, then its FenceBrokerRecord)
are replayed before the next stale broker is looked for.

Pure: time is `now_ms`, randomness the seeded rng given at construction.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kraft.config import default_of, value_of
from kraft.controller import reassignment, topics
from kraft.controller.balance import LeaderBalancer, balance_reply
from kraft.controller.configs import (
    MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    config_true,
)
from kraft.controller.errors import ApiError, invalid
from kraft.controller.heartbeat import BrokerControlState, BrokerHeartbeatManager
from kraft.controller.partition_change import Election, PartitionChangeBuilder, removal_change
from kraft.controller.replication_index import PartitionKey, ReplicationIndex
from kraft.controller.requests import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    RegisterBrokerRequest,
)
from metadata_log.image import MetadataImage, PartitionRegistration, TopicImage
from metadata_log.records import (
    ELIGIBLE_LEADER_REPLICAS_FEATURE,
    ELR_METADATA_VERSION,
    FENCE_YES,
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    TOPIC_RESOURCE,
    AbortTransactionRecord,
    BrokerRegistrationChangeRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    Record,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

# Keys of a large change grouped per turn of the shell (~2 ms of work).
KEYS_PER_TURN = 8192


class _AcceptableLeaders(dict[int, bool]):
    """Whether a broker may be in an ISR or lead, for one generation of partition
    changes: the rule runs once per broker, on its first lookup; later lookups are
    a dict's C-level __getitem__ (no Python call per replica of a million)."""

    def __init__(self, rule: Callable[[int], bool]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, broker_id: int) -> bool:
        ok = self[broker_id] = self._rule(broker_id)
        return ok


# ControllerConfig field -> its key in the config registry (kraft.config), where
# its default is stated.
CONFIG_KEYS = {
    "session_timeout_ms": "broker.session.timeout.ms",
    "heartbeat_interval_ms": "broker.heartbeat.interval.ms",
    "unclean_leader_election_enable": "unclean.leader.election.enable",
    "max_topics": "max.topics",
    "min_insync_replicas": "min.insync.replicas",
    "auto_leader_rebalance_enable": "auto.leader.rebalance.enable",
    "leader_imbalance_check_interval_seconds": "leader.imbalance.check.interval.seconds",
    "leader_imbalance_max_elections_per_batch": "leader.imbalance.max.elections.per.batch",
    "bootstrap_eligible_leader_replicas_version": "eligible.leader.replicas.version",
}


def _default(field: str) -> Any:
    return default_of(CONFIG_KEYS[field])


@dataclass(frozen=True)
class ControllerConfig:
    node_id: int
    controller_ids: frozenset[int]
    cluster_id: str
    session_timeout_ms: int = _default("session_timeout_ms")
    heartbeat_interval_ms: int = _default("heartbeat_interval_ms")
    # cluster default; topics may override
    unclean_leader_election_enable: bool = _default("unclean_leader_election_enable")
    max_partitions_per_request: int = 100_000  # a hard limit, not a configuration key
    max_topics: int = _default("max_topics")
    # cluster default; topics may override (KIP-966)
    min_insync_replicas: int = _default("min_insync_replicas")
    # automatic preferred-leader balancing (Kafka's maybeBalancePartitionLeaders)
    auto_leader_rebalance_enable: bool = _default("auto_leader_rebalance_enable")
    leader_imbalance_check_interval_seconds: int = _default(
        "leader_imbalance_check_interval_seconds"
    )
    leader_imbalance_max_elections_per_batch: int = _default(
        "leader_imbalance_max_elections_per_batch"
    )
    # eligible.leader.replicas.version written when a new cluster bootstraps
    # (kafka-storage format --feature); an existing log keeps its own level
    bootstrap_eligible_leader_replicas_version: int = _default(
        "bootstrap_eligible_leader_replicas_version"
    )

    @classmethod
    def from_config(
        cls, config: Any, node_id: int, controller_ids: frozenset[int], cluster_id: str
    ) -> ControllerConfig:
        """The configured values (a kraft.config.Config, or None for every default)."""
        values = {field: value_of(config, key) for field, key in CONFIG_KEYS.items()}
        return cls(node_id, controller_ids, cluster_id, **values)


class ReplayObserver(Protocol):
    """Told of each batch the active controller replays, before it is replayed
    (while a removed topic still has its name): the shell's metrics and
    state-change log. It reads the controller; it never changes it."""

    def replaying(
        self, controller: QuorumController, base_offset: int, records: Sequence[Record]
    ) -> None: ...


@dataclass(frozen=True)
class ControllerResult:
    """A command's records and reply. The records commit all or none: a result too
    large for one batch is written as a metadata transaction (KIP-868)."""

    records: tuple[MetadataRecord, ...]
    reply: Any = None
    # Records still to generate, after `records` (a large fence): the shell draws
    # them in steps, with nothing else run against the controller meanwhile. None
    # items are turns of work without a record (the shell yields there too).
    more: Iterator[MetadataRecord | None] | None = None

    def drained(self) -> ControllerResult:
        """This result with every record generated (`more` drawn to its end), for a
        caller that replays it at once."""
        if self.more is None:
            return self
        return ControllerResult(
            (*self.records, *(r for r in self.more if r is not None)), self.reply
        )


def _amends(existing: Any, record: RegisterBrokerRecord) -> bool:
    """Whether a RegisterBrokerRecord amends the registration it replaces (the same
    incarnation and epoch: a retried registration) rather than starting a new one."""
    return (
        existing is not None
        and existing.incarnation_id == record.incarnation_id
        and existing.broker_epoch == record.broker_epoch
    )


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig,
        rng: random.Random,
        observer: ReplayObserver | None = None,
    ) -> None:
        self.config = config
        self.rng = rng
        self.observer = observer
        self.image = MetadataImage()
        self.index = ReplicationIndex()
        self.image.listener = self.index
        self.heartbeats: BrokerHeartbeatManager | None = None  # only while active
        self.now_ms = 0
        # Offset at which each broker entered controlled shutdown (from replay, so a
        # new active controller knows it too): the last offset of the write that
        # moved its leaderships away, as Kafka's processBatchEndOffset. Brokers
        # past it have every one of those moves, even when the write was a
        # transaction over many batches (a broker reports an offset inside an
        # open transaction whose records it has not applied yet).
        self._shutdown_offsets: dict[int, int] = {}
        # Brokers whose BrokerRegistrationChangeRecord was replayed in a write that
        # has not ended yet (a batch being replayed, or an open transaction): their
        # offset above is still the record's own, moved to the write's end.
        self._shutdown_write: set[int] = set()
        # The offset of each broker's last registration change replayed here (none:
        # before the snapshot this image started from, so committed).
        self._broker_changed_at: dict[int, int] = {}
        # The active controller's leader-balancing round (soft state).
        self._balancer = LeaderBalancer()

    # ---------------------------------------------------------------- state

    @property
    def active(self) -> bool:
        return self.heartbeats is not None

    def replay(self, record: Record, offset: int) -> None:
        """The only way state changes: on the active controller and on standbys."""
        amends = type(record) is RegisterBrokerRecord and _amends(
            self.image.brokers.get(record.broker_id), record
        )
        self.image.replay(record, offset)
        if type(record) not in _BROKER_RECORDS:
            return  # the common case (partition changes) at one set lookup
        hb = self.heartbeats
        match record:
            case RegisterBrokerRecord(broker_id=b):
                self._broker_changed_at[b] = offset
                if amends:
                    # the same session goes on (its shutdown offset, its state)
                    if hb is not None and hb.state(b) is None:
                        hb.register(b, record.fenced, self.now_ms)
                    elif hb is not None:
                        hb.note_contact(b, self.now_ms)
                    return
                self._shutdown_offsets.pop(b, None)
                self._shutdown_write.discard(b)
                if hb is not None:
                    hb.register(b, record.fenced, self.now_ms)
            case UnregisterBrokerRecord(broker_id=b):
                self._broker_changed_at[b] = offset
                self._shutdown_offsets.pop(b, None)
                self._shutdown_write.discard(b)
                if hb is not None:
                    hb.remove(b)
            case FenceBrokerRecord(id=b):
                self._broker_changed_at[b] = offset
                if hb is not None:
                    hb.fence(b)
            case UnfenceBrokerRecord(id=b):
                self._broker_changed_at[b] = offset
            case BrokerRegistrationChangeRecord(broker_id=b):
                self._broker_changed_at[b] = offset
                if record.in_controlled_shutdown == 1 and b not in self._shutdown_offsets:
                    self._shutdown_offsets[b] = offset
                    self._shutdown_write.add(b)
                    if hb is not None:
                        hb.mark_controlled_shutdown(b, offset)
                if record.fenced == FENCE_YES and hb is not None:
                    hb.fence(b)
            case AbortTransactionRecord():
                # the transaction's shutdown records never took effect
                for b in self._shutdown_write:
                    self._shutdown_offsets.pop(b, None)
                    if hb is not None:
                        hb.clear_controlled_shutdown(b)
                self._shutdown_write.clear()

    def _end_of_write(self, last_offset: int) -> None:
        """A write ended at `last_offset` (a batch replayed with no transaction open,
        or a transaction's end): the brokers it put into controlled shutdown wait
        for the other brokers to pass its last record, not its first. Nothing
        while a transaction is still open: its end is the write's end."""
        if not self._shutdown_write or self.image.in_transaction:
            return
        hb = self.heartbeats
        for b in self._shutdown_write:
            self._shutdown_offsets[b] = last_offset
            if hb is not None:
                hb.move_controlled_shutdown_offset(b, last_offset)
        self._shutdown_write.clear()

    def replay_batch(
        self,
        base_offset: int,
        records: Iterable[Record],
        append_time_ms: int = 0,
        *,
        ends_write: bool = True,
    ) -> None:
        """Replay a batch. `ends_write`: its last record ends a write (unless a
        transaction is still open); False for a slice of a larger batch."""
        observer = self.observer
        if observer is not None and self.active:
            records = records if isinstance(records, list | tuple) else list(records)
            observer.replaying(self, base_offset, records)
        recs = records if isinstance(records, list | tuple) else list(records)
        queue = self.image.queue_in_transaction
        i, n = 0, len(recs)
        while i < n:
            # inside a transaction, a run of records is queued at once (a fence's
            # million); a broker record also moves this controller's soft state
            j = queue(recs, i, base_offset, _BROKER_RECORDS)
            if j == i:
                self.replay(recs[i], base_offset + i)
                j += 1
            i = j
        if ends_write and n:
            self._end_of_write(base_offset + n - 1)
        self.image.last_append_time_ms = max(self.image.last_append_time_ms, append_time_ms)

    def replay_in_steps(
        self, base_offset: int, records: Sequence[Record], append_time_ms: int, step: int
    ) -> Iterator[int]:
        """`replay_batch` in slices of about `step` records, yielding (the records
        replayed so far) between two slices; the records an EndTransactionRecord
        applies count too. The shell replays a million-record change so, letting
        Raft run between slices; nothing else may replay until it is exhausted."""
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        n = len(records)
        i = 0
        while i < n:
            if i:
                yield i
            chunk = records[i : i + step]
            end = next((k for k, r in enumerate(chunk) if type(r) is EndTransactionRecord), -1)
            if end < 0:
                self.replay_batch(base_offset + i, chunk, append_time_ms, ends_write=False)
                i += len(chunk)
                continue
            if end > 0:
                self.replay_batch(base_offset + i, chunk[:end], append_time_ms, ends_write=False)
            yield from self.image.replay_in_steps(chunk[end], base_offset + i + end, step)
            self._end_of_write(base_offset + i + end)
            i += end + 1
        if n:
            self._end_of_write(base_offset + n - 1)

    def load_snapshot(self, image: MetadataImage) -> None:
        """Replace the state with a snapshot's image (a standby far behind, or start-up)."""
        if self.active:
            raise RuntimeError("the active controller does not load snapshots")
        self.image = image
        self.index = ReplicationIndex()
        image.listener = self.index
        for topic in image.topics.values():
            for pid, p in topic.partitions.items():
                self.index.partition_changed(topic.topic_id, pid, None, p)
        self._shutdown_offsets = {
            b.broker_id: image.offset for b in image.brokers.values() if b.in_controlled_shutdown
        }
        self._shutdown_write = set()
        self._broker_changed_at = {}

    def activate(self, now_ms: int) -> None:
        """Become the active controller (after replaying the whole committed log).

        Every registered broker counts as just seen (Kafka bug 18138): a broker that
        died during the failover is fenced one session from now, not never.
        """
        self.now_ms = now_ms
        hb = BrokerHeartbeatManager(self.config.session_timeout_ms)
        for b in self.image.brokers.values():
            hb.register(b.broker_id, b.fenced, now_ms)
            # the image decides: a shutdown record of a transaction the new leader
            # is about to abort is in _shutdown_offsets but not in the image
            if b.in_controlled_shutdown and b.broker_id in self._shutdown_offsets:
                hb.mark_controlled_shutdown(b.broker_id, self._shutdown_offsets[b.broker_id])
        self.heartbeats = hb
        self._balancer.reset()
        self.image.enable_journal()

    def add_controller_ids(self, voter_ids: frozenset[int]) -> None:
        """The shell calls this when the quorum's voter set changes (KIP-853:
        controllers are added at run time). Node ids are one namespace, so a broker
        registration is checked against every controller id known, not only the
        voters this process started with."""
        ids = self.config.controller_ids | voter_ids
        if ids != self.config.controller_ids:
            self.config = replace(self.config, controller_ids=ids)

    def deactivate(self, committed_offset: int) -> None:
        """Lose leadership: revert every replay after the committed offset."""
        if self.image._journal is not None:
            self.image.revert_to(committed_offset)
        self.image.disable_journal()
        self.heartbeats = None
        self._balancer.reset()

    def on_commit(self, offset: int, limit: int | None = None) -> bool:
        """MetadataImage.commit_to: True when every undo entry up to `offset` is gone."""
        return self.image.commit_to(offset, limit)

    def snapshot_records(self) -> list[MetadataRecord]:
        return list(self.image.to_records())

    # ---------------------------------------------------------------- helpers

    def _hb(self) -> BrokerHeartbeatManager:
        if self.heartbeats is None:
            raise ApiError("NOT_CONTROLLER", "this controller is not active")
        return self.heartbeats

    def _acceptable(self, broker_id: int) -> bool:
        b = self.image.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _unclean_enabled(self, topic_name: str) -> bool:
        value = self.image.topic_configs(topic_name).get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if value is None:
            return self.config.unclean_leader_election_enable
        return config_true(value)

    def elr_enabled(self) -> bool:
        """KIP-966 is on: the feature eligible.leader.replicas.version >= 1."""
        return self.image.features.get(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0) >= 1

    def min_isr(self, topic: TopicImage) -> int:
        """Kafka's getTopicEffectiveMinIsr: min.insync.replicas (the topic's, else
        the cluster default), at most the replication factor."""
        value = self.image.configs.get((TOPIC_RESOURCE, topic.name), {}).get(MIN_INSYNC_REPLICAS)
        configured = self.config.min_insync_replicas if value is None else int(value)
        first = topic.partitions.get(0)
        return configured if first is None else min(configured, len(first.replicas))

    def partition_builder(
        self,
        topic: TopicImage,
        partition_id: int,
        acceptable: Callable[[int], bool] | None = None,
        unclean: bool | None = None,
    ) -> PartitionChangeBuilder:
        """A builder with the topic's unclean setting, min ISR and the ELR feature."""
        return PartitionChangeBuilder(
            topic.partitions[partition_id],
            topic.topic_id,
            partition_id,
            self._acceptable if acceptable is None else acceptable,
            self._unclean_enabled(topic.name) if unclean is None else unclean,
            min_isr=self.min_isr(topic),
            elr_enabled=self.elr_enabled(),
        )

    def _partition_updates(
        self,
        keys: Iterable[PartitionKey],
        broker_to_remove: int | None,
        broker_to_add: int | None = None,
        unclean_shutdown: int | None = None,
    ) -> list[MetadataRecord]:
        """Kafka's generateLeaderAndIsrUpdates: take a broker out of ISRs and
        leaderships, or elect leaders now that a broker is coming back."""
        updates = self._iter_partition_updates(
            keys, broker_to_remove, broker_to_add, unclean_shutdown
        )
        return [r for r in updates if r is not None]

    def _iter_partition_updates(
        self,
        keys: Iterable[PartitionKey],
        broker_to_remove: int | None,
        broker_to_add: int | None = None,
        unclean_shutdown: int | None = None,
    ) -> Iterator[MetadataRecord | None]:
        """_partition_updates one record at a time (the image must not change
        meanwhile), and None after every KEYS_PER_TURN keys grouped: a turn of
        work without a record (grouping two million keys is seconds)."""
        # Nothing replays while the updates are generated: whether a broker can lead,
        # and each topic's unclean setting, are computed once, not per partition.
        # Once per broker met, not per registered broker: a dict over all 10,000
        # made every unfence O(brokers) (3 ms), and the fleet's unfences held the
        # loop (heartbeat p50 0.3 -> 4-10 ms in controller_bench's heartbeat phase).
        acceptable = _AcceptableLeaders(
            lambda b: (
                b != broker_to_remove
                and b != unclean_shutdown
                and (b == broker_to_add or self._acceptable(b))
            )
        ).__getitem__
        elr = self.elr_enabled()

        # In (topic id, partition id) order; grouped first, as sorting 100k
        # (str, int) pairs of one topic compares the same long string 1.7M times.
        by_topic: dict[str, list[int]] = {}
        for n, (topic_id, pid) in enumerate(keys, 1):
            pids = by_topic.get(topic_id)
            if pids is None:
                by_topic[topic_id] = [pid]
            else:
                pids.append(pid)
            if n % KEYS_PER_TURN == 0:
                yield None
        for topic_id in sorted(by_topic):
            topic = self.image.topics[topic_id]
            partitions = topic.partitions
            unclean = self._unclean_enabled(topic.name)
            min_isr = self.min_isr(topic)
            if broker_to_remove is not None and unclean_shutdown is None:
                # a fence: removal_change is the builder's rule without a builder
                b = broker_to_remove
                for pid in sorted(by_topic[topic_id]):
                    rec = removal_change(
                        partitions[pid], topic_id, pid, b, acceptable, unclean, min_isr, elr
                    )
                    if rec is not None:
                        yield rec
                continue
            gone = tuple(b for b in (broker_to_remove, unclean_shutdown) if b is not None)
            for pid in sorted(by_topic[topic_id]):
                p = partitions[pid]
                builder = PartitionChangeBuilder(
                    p, topic_id, pid, acceptable, unclean, min_isr=min_isr, elr_enabled=elr
                )
                if gone:
                    builder.set_target_isr([r for r in p.isr if r not in gone])
                if unclean_shutdown is not None:
                    builder.set_unclean_shutdown_replicas((unclean_shutdown,))
                rec = builder.build()
                if rec is not None:
                    yield rec

    def _keys_of(self, broker_id: int, with_elr: bool = False) -> Iterator[PartitionKey]:
        """The partitions whose ISR (or ELR) holds or that are led by `broker_id`,
        each once (lazily: a set union of two million keys stopped the loop)."""
        empty: set[PartitionKey] = set()
        in_isr = self.index.in_isr.get(broker_id, empty)
        led = self.index.led_by.get(broker_id, empty)
        yield from in_isr
        # in C: filtered in Python, 333k led keys all in the ISR set yielded nothing
        # for ~0.1 s, one turn of the loop at 1M partitions (an event-loop profile)
        yield from led.difference(in_isr)
        if with_elr:
            yield from (
                k
                for k in self.index.in_elr.get(broker_id, empty)
                if k not in in_isr and k not in led
            )

    def _remove_broker_from_partitions(self, broker_id: int) -> list[MetadataRecord]:
        return self._partition_updates(self._keys_of(broker_id), broker_to_remove=broker_id)

    def _forget_broker(self, broker_id: int) -> list[MetadataRecord]:
        """Take `broker_id` out of every ISR, ELR and leadership: an unclean
        shutdown (KIP-966's handleBrokerUncleanShutdown) or an unregistration."""
        return self._partition_updates(
            self._keys_of(broker_id, with_elr=True),
            broker_to_remove=broker_id,
            unclean_shutdown=broker_id,
        )

    # ---------------------------------------------------------------- brokers

    def register_broker(
        self, req: RegisterBrokerRequest, now_ms: int, next_offset: int
    ) -> ControllerResult:
        """A new RegisterBrokerRecord whose offset is the broker's new epoch; it starts fenced."""
        self.now_ms = now_ms
        hb = self._hb()
        if req.cluster_id != self.config.cluster_id:
            raise ApiError(
                "INCONSISTENT_CLUSTER_ID",
                f"cluster id {req.cluster_id!r} does not match this cluster's {self.config.cluster_id!r}",
            )
        if req.broker_id in self.config.controller_ids:
            raise invalid(
                f"node id {req.broker_id} belongs to a controller; broker ids share its namespace"
            )
        existing = self.image.brokers.get(req.broker_id)
        if (
            existing is not None
            and existing.incarnation_id != req.incarnation_id
            and not existing.fenced
            and hb.has_valid_session(req.broker_id, now_ms)
        ):
            raise ApiError(
                "DUPLICATE_BROKER_REGISTRATION",
                f"another incarnation of broker {req.broker_id} ({existing.incarnation_id}) still has a live session",
            )
        mv = self.image.features.get(METADATA_VERSION_FEATURE, LATEST_METADATA_VERSION)
        for f in req.features:
            # every feature the broker lists must include the finalized level (0
            # for one not finalized), as Kafka's processRegistrationFeature checks;
            # a feature it does not list is taken as supported
            level = mv if f.name == METADATA_VERSION_FEATURE else self.image.features.get(f.name, 0)
            if not f.min_supported_version <= level <= f.max_supported_version:
                raise invalid(
                    f"broker {req.broker_id} supports {f.name} {f.min_supported_version}-"
                    f"{f.max_supported_version}, the cluster is at {level}"
                )
        # The same process again (its first reply was lost, or it missed the
        # reply's epoch): Kafka amends the registration. Same epoch, same fenced
        # and shutdown state, and not an unclean shutdown: its log is whole.
        amend = existing is not None and existing.incarnation_id == req.incarnation_id
        epoch = existing.broker_epoch if amend else next_offset
        record = RegisterBrokerRecord(
            broker_id=req.broker_id,
            incarnation_id=req.incarnation_id,
            broker_epoch=epoch,
            endpoints=req.listeners,
            features=req.features,
            rack=req.rack,
            fenced=existing.fenced if amend else True,
            in_controlled_shutdown=amend and existing.in_controlled_shutdown,
        )
        if amend:
            return ControllerResult((record,), {"broker_epoch": epoch})
        # The partition changes are generated lazily, as a fence's are (a broker in a
        # million ISRs): the RegisterBrokerRecord comes first so that its offset is
        # the epoch (in a metadata transaction the epoch is the write's first
        # offset, as in Kafka).
        more: Iterator[MetadataRecord | None] | None = None
        b = req.broker_id
        if (
            existing is not None
            and self.elr_enabled()
            and req.previous_broker_epoch != (existing.broker_epoch)
        ):
            # KIP-966: a restart after an unclean shutdown (its log may have lost
            # acknowledged data) takes the broker out of every ISR and ELR
            more = self._iter_partition_updates(
                self._keys_of(b, with_elr=True), broker_to_remove=b, unclean_shutdown=b
            )
        elif existing is not None and not existing.fenced:
            # The previous incarnation was still unfenced (its session expired
            # before the fence ran): the new one starts fenced, so it must leave
            # its leaderships and shared ISRs in the same atomic write (a fenced
            # broker leads nothing).
            more = self._iter_partition_updates(self._keys_of(b), broker_to_remove=b)
        return ControllerResult((record,), {"broker_epoch": next_offset}, more=more)

    def note_heartbeat_contact(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        """Called as a heartbeat arrives, before it queues: contact counts even if
        the queued command later misses its deadline (Kafka bug 15019)."""
        if self.heartbeats is None:
            return
        b = self.image.brokers.get(broker_id)
        if b is not None and b.broker_epoch == broker_epoch:
            self.heartbeats.note_contact(broker_id, now_ms)

    def _current_state(self, broker_id: int) -> BrokerControlState:
        b = self.image.brokers[broker_id]
        if b.fenced:
            return BrokerControlState.FENCED
        if b.in_controlled_shutdown:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def heartbeat(self, req: BrokerHeartbeatRequest, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        hb = self._hb()
        b = self.image.brokers.get(req.broker_id)
        if b is None:
            raise ApiError("STALE_BROKER_EPOCH", f"broker {req.broker_id} is not registered")
        if b.broker_epoch != req.broker_epoch:
            raise ApiError(
                "STALE_BROKER_EPOCH",
                f"broker {req.broker_id} epoch {req.broker_epoch} is stale; registered epoch is {b.broker_epoch}",
            )
        current = self._current_state(req.broker_id)
        nxt = hb.next_state(
            req.broker_id,
            current,
            req.want_fence,
            req.want_shutdown,
            req.current_metadata_offset,
            b.broker_epoch,
            self.index.leads_any(req.broker_id),
        )
        records: list[MetadataRecord] = []
        if nxt is not current:
            S = BrokerControlState
            if nxt is S.FENCED:
                records = self._remove_broker_from_partitions(req.broker_id)
                records.append(FenceBrokerRecord(req.broker_id, b.broker_epoch))
            elif nxt is S.UNFENCED:
                records = [UnfenceBrokerRecord(req.broker_id, b.broker_epoch)]
                records += self._partition_updates(
                    self._leaderless_it_may_lead(req.broker_id),
                    broker_to_remove=None,
                    broker_to_add=req.broker_id,
                )
            elif nxt is S.CONTROLLED_SHUTDOWN:
                records = [
                    BrokerRegistrationChangeRecord(
                        req.broker_id, b.broker_epoch, in_controlled_shutdown=1
                    )
                ]
                records += self._remove_broker_from_partitions(req.broker_id)
            elif nxt is S.SHUTDOWN_NOW:
                records = self._remove_broker_from_partitions(req.broker_id)
                if not b.fenced:
                    records.append(
                        BrokerRegistrationChangeRecord(
                            req.broker_id, b.broker_epoch, fenced=FENCE_YES
                        )
                    )
        hb.touch(req.broker_id, nxt.fenced, req.current_metadata_offset, now_ms)
        reply = {
            "is_caught_up": req.current_metadata_offset >= b.broker_epoch,
            "is_fenced": nxt.fenced,
            "in_controlled_shutdown": nxt.in_controlled_shutdown,
            "should_shut_down": nxt.should_shut_down,
        }
        return ControllerResult(tuple(records), reply)

    def heartbeat_at_once(
        self, req: BrokerHeartbeatRequest, now_ms: int, committed_offset: int
    ) -> dict[str, Any] | None:
        """`heartbeat(req, now_ms)`'s reply when it writes nothing and depends on
        nothing uncommitted: an unfenced broker (in the log, as committed, and in
        the soft state) that asks for no change. None: it must go through the
        event queue. It runs while a large write is replayed, whose other records
        do not touch this broker: the broker's sessions stay alive however long
        a fence of a million partitions takes."""
        hb = self._hb()
        b = self.image.brokers.get(req.broker_id)
        state = hb.state(req.broker_id)
        if (
            b is None
            or b.broker_epoch != req.broker_epoch
            or b.fenced
            or b.in_controlled_shutdown
            or req.want_fence
            or req.want_shutdown
            or state is None
            or state.fenced
            or state.shutting_down
            or self._broker_changed_at.get(req.broker_id, -1) > committed_offset
        ):
            return None
        self.now_ms = max(self.now_ms, now_ms)
        hb.touch(req.broker_id, False, req.current_metadata_offset, now_ms)
        return {
            "is_caught_up": req.current_metadata_offset >= b.broker_epoch,
            "is_fenced": False,
            "in_controlled_shutdown": False,
            "should_shut_down": False,
        }

    def _leaderless_it_may_lead(self, broker_id: int) -> set[PartitionKey]:
        """Leaderless partitions `broker_id` may lead once unfenced: those it is a
        replica of (Kafka's handleBrokerUnfenced looks at every leaderless
        partition): from the ISR, the ELR, as the last known leader (KIP-966), or
        by an unclean election where the topic allows one."""
        topics = self.image.topics
        return {
            k for k in self.index.leaderless if broker_id in topics[k[0]].partitions[k[1]].replicas
        }

    def next_fence_check_ms(self) -> int | None:
        return None if self.heartbeats is None else self.heartbeats.next_check_time_ms()

    def maybe_fence_stale_broker(self, now_ms: int) -> ControllerResult | None:
        """Fence the single stalest broker whose session has expired, if any.

        Its records are still to generate: `more` yields the partition changes, then
        the FenceBrokerRecord. The caller draws them before anything else touches
        the controller, in steps (a broker in a million ISRs is a million changes:
        drawn at once they stopped the shell's event loop past the Raft fetch
        timeout), or at once with `drained()`. It replays them before calling
        again, so each fence's partition changes see the previous fence's result.
        """
        self.now_ms = now_ms
        hb = self._hb()
        broker_id = hb.find_one_stale_broker(now_ms)
        if broker_id is None:
            return None
        b = self.image.brokers[broker_id]

        def records() -> Iterator[MetadataRecord | None]:
            keys = self._keys_of(broker_id)
            yield from self._iter_partition_updates(keys, broker_to_remove=broker_id)
            yield FenceBrokerRecord(broker_id, b.broker_epoch)

        # Soft state moves now: a second call before replay must not pick it again.
        hb.fence(broker_id)
        return ControllerResult((), {"fenced_broker": broker_id}, more=records())

    def unregister_broker(self, broker_id: int, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        hb = self._hb()
        b = self.image.brokers.get(broker_id)
        if b is None:
            raise ApiError("BROKER_ID_NOT_REGISTERED", f"broker {broker_id} is not registered")
        if not b.fenced and hb.has_valid_session(broker_id, now_ms):
            raise invalid(f"broker {broker_id} still has a live session; stop it first")
        # Kafka's handleBrokerUnregistered: out of every ISR and ELR
        records = self._forget_broker(broker_id)
        records.append(UnregisterBrokerRecord(broker_id, b.broker_epoch))
        return ControllerResult(tuple(records), {"broker_id": broker_id})

    # ---------------------------------------------------------------- KIP-455, balancing

    def alter_partition_reassignments(
        self, req: AlterPartitionReassignmentsRequest, now_ms: int
    ) -> ControllerResult:
        """Start or cancel reassignments (kraft/controller/reassignment.py). The
        whole plan is validated first: a bad entry raises ApiError (Kafka's name)
        and nothing is written. Reply: {"partitions": [{"topic", "partition",
        "replicas", "adding_replicas", "removing_replicas"}]}, as after the write."""
        self.now_ms = now_ms
        self._hb()
        records, reply = reassignment.alter_partition_reassignments(self, req)
        return ControllerResult(tuple(records), reply)

    def list_partition_reassignments(self) -> list[dict[str, Any]]:
        """The ongoing reassignments (read-only, from this node's image)."""
        return reassignment.list_partition_reassignments(self)

    def maybe_balance_partition_leaders(self, now_ms: int) -> ControllerResult | None:
        """One bounded batch of preferred-leader elections (cause REBALANCE), or None
        when no partition is imbalanced or auto.leader.rebalance.enable is false.
        Reply {"elections", "more", "imbalanced"}: while `more`, call again at once
        (after replaying this batch); else wait leader.imbalance.check.interval.seconds."""
        self.now_ms = now_ms
        self._hb()
        if not self.config.auto_leader_rebalance_enable:
            return None
        batch = self._balancer.next_batch(
            self, self.config.leader_imbalance_max_elections_per_batch
        )
        if batch is None:
            return None
        records, more = batch
        return ControllerResult(
            tuple(records), balance_reply(len(records), more, len(self.index.imbalanced))
        )

    def imbalanced_partition_count(self) -> int:
        """Partitions whose leader is not their preferred replica (Kafka's
        preferredreplicaimbalancecount), kept by replay."""
        return len(self.index.imbalanced)

    def noop(self) -> ControllerResult:
        return ControllerResult((NoOpRecord(),))

    def bootstrap_records(self) -> list[MetadataRecord]:
        """What the first active controller of an empty log writes (metadata.version)."""
        if METADATA_VERSION_FEATURE in self.image.features:
            return []  # an existing log keeps its levels (ELR stays off if absent)
        records = [FeatureLevelRecord(METADATA_VERSION_FEATURE, LATEST_METADATA_VERSION)]
        elr = self.config.bootstrap_eligible_leader_replicas_version
        if elr and LATEST_METADATA_VERSION >= ELR_METADATA_VERSION:
            # new clusters keep eligible leader replicas, as Kafka 4.1 does
            records.append(FeatureLevelRecord(ELIGIBLE_LEADER_REPLICAS_FEATURE, elr))
        return records

    # ---------------------------------------------------------------- topics
    # (kraft/controller/topics.py: validation and the records)

    def create_topic(self, req: CreateTopicRequest, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        self._hb()
        return ControllerResult(*_written(topics.create_topic(self, req)))

    def delete_topic(self, name: str, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        self._hb()
        return ControllerResult(*_written(topics.delete_topic(self, name)))

    def create_partitions(self, req: CreatePartitionsRequest, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        self._hb()
        return ControllerResult(*_written(topics.create_partitions(self, req)))

    def alter_configs(self, req: AlterConfigsRequest, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        self._hb()
        return ControllerResult(*_written(topics.alter_configs(self, req)))

    # ---------------------------------------------------------------- partitions

    def alter_partition(self, req: AlterPartitionRequest, now_ms: int) -> ControllerResult:
        """AlterPartition from a partition leader, with Kafka's validation (KIP-903)."""
        self.now_ms = now_ms
        self._hb()
        b = self.image.brokers.get(req.broker_id)
        if b is None or b.broker_epoch != req.broker_epoch:
            raise ApiError(
                "STALE_BROKER_EPOCH", f"broker {req.broker_id} epoch {req.broker_epoch} is stale"
            )
        topic = self.image.topics.get(req.topic_id)
        p = None if topic is None else topic.partitions.get(req.partition_id)
        if topic is None or p is None:
            raise ApiError(
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"partition {req.topic_id}-{req.partition_id} does not exist",
            )
        if req.leader_epoch < p.leader_epoch:
            raise ApiError(
                "FENCED_LEADER_EPOCH",
                f"leader epoch {req.leader_epoch} is older than the current {p.leader_epoch}",
            )
        if req.leader_epoch > p.leader_epoch:
            raise ApiError(
                "NOT_CONTROLLER",
                f"leader epoch {req.leader_epoch} is newer than this controller knows",
            )
        if req.broker_id != p.leader:
            raise invalid(
                f"broker {req.broker_id} is not the leader of {topic.name}-{req.partition_id} ({p.leader})"
            )
        if req.partition_epoch > p.partition_epoch:
            # as for a newer leader epoch (Kafka's validateAlterPartitionData): this
            # controller is behind, the leader should find the active one
            raise ApiError(
                "NOT_CONTROLLER",
                f"partition epoch {req.partition_epoch} is newer than this controller knows",
            )
        if req.partition_epoch != p.partition_epoch:
            raise ApiError(
                "INVALID_UPDATE_VERSION",
                f"partition epoch {req.partition_epoch} does not match the current {p.partition_epoch}",
            )
        new_isr = tuple(m.broker_id for m in req.new_isr_with_epochs)
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(p.replicas):
            raise invalid(
                f"new ISR {list(new_isr)} has duplicates or brokers outside replicas {list(p.replicas)}"
            )
        if p.leader not in new_isr:
            raise invalid(f"new ISR {list(new_isr)} does not include the leader {p.leader}")
        if p.leader_recovery_state == RECOVERED and req.leader_recovery_state == RECOVERING:
            raise invalid("a RECOVERED partition cannot go back to RECOVERING")
        if req.leader_recovery_state == RECOVERING and len(new_isr) > 1:
            raise invalid("a RECOVERING leader must be the only ISR member")
        for m in req.new_isr_with_epochs:
            if m.broker_id == p.leader or m.broker_id in p.isr:
                continue  # only replicas joining the ISR must be eligible
            mb = self.image.brokers.get(m.broker_id)
            if mb is None or mb.fenced or mb.in_controlled_shutdown:
                raise ApiError(
                    "INELIGIBLE_REPLICA",
                    f"broker {m.broker_id} is fenced, shutting down or unregistered",
                )
            if m.broker_epoch != -1 and m.broker_epoch != mb.broker_epoch:
                raise ApiError(
                    "INELIGIBLE_REPLICA",
                    f"broker {m.broker_id} epoch {m.broker_epoch} is not its current epoch {mb.broker_epoch}",
                )
        rec = (
            self.partition_builder(topic, req.partition_id, unclean=False)
            .set_target_isr(new_isr)
            .set_target_leader_recovery_state(req.leader_recovery_state)
            .build()
        )
        after = p if rec is None else p.merge(rec)
        return ControllerResult(
            () if rec is None else (rec,), partition_reply(req.topic_id, req.partition_id, after)
        )

    def elect_leaders(self, req: ElectLeadersRequest, now_ms: int) -> ControllerResult:
        self.now_ms = now_ms
        self._hb()
        topic = topics.topic_or_404(self, req.topic)
        p = topic.partitions.get(req.partition)
        if p is None:
            raise ApiError(
                "UNKNOWN_TOPIC_OR_PARTITION",
                f"partition {req.topic}-{req.partition} does not exist",
            )
        election = Election.PREFERRED if req.type == "preferred" else Election.UNCLEAN
        builder = self.partition_builder(topic, req.partition, unclean=False).set_election(election)
        result = builder.elect_leader()
        if election is Election.PREFERRED:
            preferred = p.replicas[0]
            if p.leader == preferred:
                return ControllerResult(
                    (), {**partition_reply(topic.topic_id, req.partition, p), "changed": False}
                )
            if result.leader != preferred:
                raise ApiError(
                    "PREFERRED_LEADER_NOT_AVAILABLE",
                    f"preferred replica {preferred} of {req.topic}-{req.partition} is not in the ISR or not available",
                )
        elif p.leader >= 0 and self._acceptable(p.leader):
            return ControllerResult(
                (), {**partition_reply(topic.topic_id, req.partition, p), "changed": False}
            )
        elif result.leader == NO_LEADER:
            raise ApiError(
                "ELIGIBLE_LEADERS_NOT_AVAILABLE",
                f"no replica of {req.topic}-{req.partition} is available to lead",
            )
        rec = builder.build()
        after = p if rec is None else p.merge(rec)
        return ControllerResult(
            () if rec is None else (rec,),
            {**partition_reply(topic.topic_id, req.partition, after), "changed": rec is not None},
        )


def partition_reply(topic_id: str, partition_id: int, p: PartitionRegistration) -> dict[str, Any]:
    return {
        "topic_id": topic_id,
        "partition_id": partition_id,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "isr": list(p.isr),
        "partition_epoch": p.partition_epoch,
        "leader_recovery_state": p.leader_recovery_state,
        "replicas": list(p.replicas),
        "adding_replicas": list(p.adding_replicas),
        "removing_replicas": list(p.removing_replicas),
        "elr": list(p.elr),
        "last_known_elr": list(p.last_known_elr),
    }


_BROKER_RECORDS = frozenset(
    {
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        BrokerRegistrationChangeRecord,
        AbortTransactionRecord,  # drops the transaction's controlled shutdowns
    }
)


def _written(written: tuple[list[MetadataRecord], Any]) -> tuple[tuple[MetadataRecord, ...], Any]:
    records, reply = written
    return tuple(records), reply
